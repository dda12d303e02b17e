"""The shift of section 4.3 and the reward corruptions of section 6.3."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax.feedback import CORRUPTIONS, NO_ACTION, FeedbackChannel, action_vector, corrupt_episode, shift


def test_shift_puts_zero_pair_first_and_drops_last():
    a = jnp.array([[3, 1, 4], [0, 2, 2]])
    r = jnp.array([[0.5, -0.5, 2.0], [1.0, 2.0, 3.0]])
    pa, pr = shift(a, r)
    np.testing.assert_array_equal(pa, [[NO_ACTION, 3, 1], [NO_ACTION, 0, 2]])
    np.testing.assert_array_equal(pr, [[0.0, 0.5, -0.5], [0.0, 1.0, 2.0]])
    assert jax.nn.one_hot(pa[0, 0], 5).sum() == 0  # f_a of the zero pair is 0


_corrupt = jax.jit(corrupt_episode)


def channel_out(name, rewards, sigma=0.0, seed=0):
    return np.asarray(_corrupt(jax.random.key(seed), jnp.asarray(rewards),
                               FeedbackChannel.make(name, sigma)))


def test_pointwise_corruptions(rng):
    r = rng.normal(size=40).astype(np.float32)
    np.testing.assert_array_equal(channel_out("clean", r), r)
    np.testing.assert_array_equal(channel_out("null", r), np.zeros_like(r))
    np.testing.assert_array_equal(channel_out("sign_flip", r), -r)
    noise = channel_out("gaussian", np.zeros(40, np.float32), sigma=2.0, seed=1)
    noise = np.concatenate([noise] + [channel_out("gaussian", np.zeros(40, np.float32), sigma=2.0, seed=s)
                                      for s in range(2, 51)])
    assert abs(noise.mean()) < 5 * 2.0 / np.sqrt(noise.size)
    assert abs(noise.std() - 2.0) < 0.2
    np.testing.assert_array_equal(channel_out("gaussian", r, sigma=0.0), r)


def test_shuffle_draws_from_the_causal_past(rng):
    r = np.arange(1, 31, dtype=np.float32)  # distinct values identify their step
    fed = channel_out("shuffle", r)
    for t, value in enumerate(fed):
        assert value in r[: t + 1]
    assert (fed != r).mean() > 0.5  # mostly not the current reward
    # causal: changing the future leaves every earlier fed reward unchanged
    future = r.copy()
    future[20:] = -100.0
    np.testing.assert_array_equal(channel_out("shuffle", future)[:20], fed[:20])


def test_channel_validates_its_fields():
    with pytest.raises(ValueError, match="corruption"):
        FeedbackChannel.make("loud")
    with pytest.raises(ValueError, match="sigma"):
        FeedbackChannel.make("gaussian", -1.0)
    assert len(CORRUPTIONS) == 5


def test_action_vector_one_hot_or_allocation():
    """An integer action is its one-hot (NO_ACTION the zero vector); a float allocation passes as
    it is; an allocation of the wrong width or an integer array of rank 2 is an error."""
    np.testing.assert_array_equal(action_vector(jnp.array([2, NO_ACTION, 0]), 3),
                                  [[0, 0, 1], [0, 0, 0], [1, 0, 0]])
    w = jnp.array([[0.2, 0.5, 0.3], [0.0, 0.0, 0.0]])
    assert action_vector(w, 3) is w
    with pytest.raises(AssertionError):
        action_vector(w, 4)
    with pytest.raises(AssertionError):
        action_vector(jnp.zeros((2, 3), jnp.int32), 3)
