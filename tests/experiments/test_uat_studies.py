"""Fast checks of the uat study helpers (no training: the studies' training is the library's)."""
import numpy as np

from experiments.studies import uat_boundary, uat_common


def test_size_builds_table3_and_ablation_configs():
    cfg = uat_common.FULL.train_config("uat", "no_kv")
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.d_ff, cfg.model.n_layers) == (64, 4, 128, 3)
    assert (cfg.batch_size, cfg.lr, cfg.ue_lr, cfg.model.ema_decay) == (256, 2e-3, 2e-2, 0.7)
    assert not cfg.model.modulate_kv and cfg.model.modulate_q


def test_tasks_stack_and_stats():
    tasks = uat_common.stack_tasks([uat_common.uat.Task.make(s, c, sg) for s, c, sg in
                                    (("gradual", "clean", 0.0), ("cyclic", "gaussian", 2.0))])
    np.testing.assert_array_equal(tasks.schedule, [0, 2])
    np.testing.assert_array_equal(tasks.channel.mode, [0, 1])
    np.testing.assert_allclose(tasks.channel.sigma, [0.0, 2.0])
    stats = uat_common.mean_std("acc", np.array([0.5, 0.7]))
    assert stats == {"acc": 0.6, "acc_std": 0.1} or np.allclose(list(stats.values()), [0.6, 0.1])


def test_boundary_condition_labels_match_paper_keys():
    names = [uat_boundary.label(*c) for c in uat_boundary.FULL_CONDITIONS]
    assert names[:5] == ["clean", "gaussian_0p5", "gaussian_1", "gaussian_2", "gaussian_5"]
    assert {f"gap_{n}" for n in names} >= set(uat_boundary.PAPER_GAP)
