"""Domain D training and ranking (``uat_jax.recsys``): the fed (action, reward) pair by hand,
causality of the delay for every model kind, the first epoch's loss and the ranking metrics
against independent numpy computations, and bad configurations."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import cells, recsys
from uat_jax import recsys_data as rd
from uat_jax.model import DecisionTransformer, init_params
from uat_jax.train import CellKeys

SYN = rd.SyntheticConfig(n_users=40, n_items=150, min_len=40, max_len=60, light_len=(5, 15), seed=3)
CFG = rd.RecsysConfig(min_user_interactions=20, min_item_ratings=5, max_users=25, horizon=10, n_regimes=3,
                      min_segments=2, max_segments=3, min_segment_len=3, n_negatives=20, seed=1)
SIZE = cells.Size(d_model=16, n_heads=2, d_ff=16, n_layers=1, horizon=10, batch_size=4, epochs=3, eval_episodes=1,
                  dropout=0.0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ml")
    rd.write_synthetic(folder, SYN)
    return rd.load(folder, CFG)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_feedback_by_hand():
    items = jnp.array([5, 6, 7, 8])
    rewards = jnp.array([0.1, 0.2, 0.3, 0.4])
    key = jax.random.key(0)
    fed = lambda d, c="clean": recsys.feedback(key, items, rewards, recsys.RecsysTask.make(d, c))  # noqa: E731
    a, r = fed(1)
    np.testing.assert_array_equal(a, [-1, 5, 6, 7])
    np.testing.assert_allclose(r, [0.0, 0.1, 0.2, 0.3])
    a, r = fed(0)
    np.testing.assert_array_equal(a, items)
    np.testing.assert_allclose(r, rewards)
    a, r = fed(2)
    np.testing.assert_array_equal(a, [-1, -1, 5, 6])
    np.testing.assert_allclose(r, [0.0, 0.0, 0.1, 0.2])
    a, r = fed(1, "null")
    np.testing.assert_array_equal(a, [-1, 5, 6, 7])
    np.testing.assert_array_equal(r, np.zeros(4))
    a, r = fed(1, "adversarial")
    np.testing.assert_allclose(r, [0.0, -0.1, -0.2, -0.3])


@pytest.mark.parametrize("kind", ("uat", "adt", "dt"))
def test_no_position_sees_an_undelayed_reward_or_a_later_item(kind):
    """For the feedback-aware kinds: logits at positions <= t are unchanged when r_t (fed from
    t + d on, here d = 1) or any item after t changes; they change at t + 1, where the model
    reads r_t. (VT and GTrXL read no feedback; their causal mask is ``test_model``'s.)"""
    V, T, t = 12, 10, 4
    size = dataclasses.replace(SIZE, horizon=T)
    cfg = recsys.train_config(size, V, kind=kind)
    model = DecisionTransformer(cfg.model)
    params = init_params(model, jax.random.key(0))
    # UAT's gates start at zero (reward-blind at initialisation): move every parameter off its init
    leaves, tree = jax.tree.flatten(params)
    noise = jax.random.split(jax.random.key(2), len(leaves))
    params = tree.unflatten([p + 0.3 * jax.random.normal(k, p.shape) for p, k in zip(leaves, noise)])
    task = recsys.RecsysTask.make(1)
    rng = np.random.default_rng(0)
    items = jnp.asarray(rng.integers(0, V, T))
    rewards = jnp.asarray(rng.normal(size=T), jnp.float32)

    @jax.jit
    def run(i, r):
        a, fed = recsys.feedback(jax.random.key(1), i, r, task)
        return recsys.window_logits(model, params, i, a, fed)

    logits = lambda i, r: np.asarray(run(i, r))  # noqa: E731

    base = logits(items, rewards)
    later_reward = logits(items, rewards.at[t].add(3.0))
    later_items = logits(items.at[t + 1:].set((items[t + 1:] + 1) % V), rewards)
    np.testing.assert_array_equal(later_reward[:t + 1], base[:t + 1])
    np.testing.assert_array_equal(later_items[:t + 1], base[:t + 1])
    assert np.abs(later_reward[t + 1] - base[t + 1]).max() > 1e-6


def test_first_epoch_loss_and_ranking_match_numpy(data):
    """Epoch 0's loss is the numpy cross-entropy of the initial model on the batch the cell's keys
    draw (targets = the expert's), and the ranking metrics are numpy ranks of the trained
    model's last-position logits over each user's candidates."""
    cfg = recsys.train_config(SIZE, data.n_items, kind="vt")
    task = recsys.RecsysTask.make(1)
    model = DecisionTransformer(cfg.model)
    arrays = jax.tree.map(jnp.asarray, recsys.data_arrays(data))
    key = jax.random.key(7)
    res = jax.jit(recsys.make_cell(cfg, keep_params=True))({"key": jax.random.key_data(key), "task": task}, arrays)
    keys = CellKeys.of(key)
    rows = np.asarray(jax.random.choice(jax.random.split(keys.run, cfg.epochs)[0], data.train.items.shape[0],
                                        (cfg.batch_size,), replace=False))
    assert len(set(rows.tolist())) == cfg.batch_size
    params0 = init_params(model, keys.init)
    logits_of = jax.jit(lambda p, i, a, r: recsys.window_logits(model, p, i, a, r))  # one window, as the cell
    ce = []
    for u in rows:
        i = jnp.asarray(data.train.items[u])
        a, r = recsys.feedback(jax.random.key(0), i, jnp.asarray(data.train.rewards[u]), task)
        lp = log_softmax(np.asarray(logits_of(params0, i, a, r), np.float64))
        ce.append(-lp[np.arange(SIZE.horizon), data.train.targets[u]])
    np.testing.assert_allclose(res["loss"][0], np.mean(ce), rtol=1e-5)

    ranks = []
    for u in range(data.test.items.shape[0]):
        i = jnp.asarray(data.test.items[u])
        a, r = recsys.feedback(jax.random.key(0), i, jnp.asarray(data.test.rewards[u]), task)
        s = np.asarray(logits_of(res["params"], i, a, r))[-1][data.test_candidates[u]]
        ranks.append(int(np.sum(s[1:] >= s[0])))
    ranks = np.array(ranks)
    for k in rd.KS:
        np.testing.assert_allclose(res[f"hr@{k}"], np.mean(ranks < k), rtol=1e-6)
        np.testing.assert_allclose(res[f"ndcg@{k}"], np.mean(np.where(ranks < k, 1 / np.log2(ranks + 2), 0)),
                                   rtol=1e-5)


def test_bad_configs(data):
    with pytest.raises(ValueError, match="obs_dim must equal"):
        recsys.RecsysTrainConfig(model=dataclasses.replace(SIZE.model_config(), obs_dim=3, n_actions=4))
    with pytest.raises(ValueError, match="eval_batch"):
        dataclasses.replace(recsys.train_config(SIZE, 20), eval_batch=0)
    for bad, message in ((dict(lr=0.0), "lr must be > 0"), (dict(weight_decay=-1.0), "weight_decay must be >= 0")):
        with pytest.raises(ValueError, match=message):  # the optimiser fields, shared with Domain A's TrainConfig
            dataclasses.replace(recsys.train_config(SIZE, 20), **bad)
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(SIZE.train_config(), **bad)
    with pytest.raises(ValueError, match="delay"):
        recsys.RecsysTask.make(-1)
    with pytest.raises(ValueError, match="corruption"):
        recsys.RecsysTask.make(1, "gaussian")
    with pytest.raises(ValueError, match="variant"):
        recsys.RecsysTask.make(1, variant="dt")
    cfg = recsys.train_config(dataclasses.replace(SIZE, batch_size=1000), data.n_items, kind="vt")
    with pytest.raises(ValueError, match="training windows"):
        recsys.make_train(cfg)(jax.random.key(0), recsys.RecsysTask.make(1), recsys.data_arrays(data))


def test_fit_draws_each_epochs_rows_and_key_and_steps_on_the_loss():
    """The shared Domain D loop: epoch i gets B distinct rows drawn from split(keys.run, epochs)[i] and the key
    fold_in(keys.epochs, i); params move by the optimiser on loss_fn's gradient; the loss and aux come back per
    epoch; a batch larger than the windows is refused."""
    cfg = dataclasses.replace(recsys.train_config(dataclasses.replace(SIZE, batch_size=3, epochs=4), 20), lr=0.1)
    keys = CellKeys.of(jax.random.key(7))
    target = jnp.arange(5.0)

    def loss_fn(params, rows, key):
        return jnp.sum((params["w"] - target) ** 2), (rows, jax.random.key_data(key))

    params, loss, (rows, key_data) = jax.jit(lambda p: recsys.fit(cfg, p, keys, 10, loss_fn))({"w": jnp.zeros(5)})
    runs = jax.random.split(keys.run, 4)
    for i in range(4):
        want = jax.random.choice(runs[i], 10, (3,), replace=False)
        np.testing.assert_array_equal(rows[i], want)
        assert len(set(np.asarray(rows[i]).tolist())) == 3
        np.testing.assert_array_equal(key_data[i], jax.random.key_data(jax.random.fold_in(keys.epochs, i)))
    assert loss[0] == pytest.approx(float(jnp.sum(target ** 2))) and bool(jnp.all(jnp.diff(loss) < 0))
    assert float(jnp.sum((params["w"] - target) ** 2)) < float(loss[-1])  # the last step was applied
    with pytest.raises(ValueError, match="batch_size"):
        recsys.fit(cfg, {"w": jnp.zeros(5)}, keys, 2, loss_fn)
