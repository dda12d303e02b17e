"""``show STUDY --estimate`` (experiments/estimate.py): the probe configs of every study, the linear
fit on planted times, one real probe run, and the command's output and bad input."""
import dataclasses
import json
import subprocess

import pytest

from experiments import cli, configs, estimate, registry


@dataclasses.dataclass(frozen=True)
class Train:
    num_steps: int = 1000
    warmup: int = 100
    width: int = 64


@dataclasses.dataclass(frozen=True)
class Toy:
    train: Train = Train()
    episodes: tuple[int, ...] = (100, 50)
    seeds: int = 5
    chunks: int = 10
    scan_sequences: int = 4000

    def __post_init__(self):
        if self.train.num_steps % self.chunks:
            raise ValueError(f"chunks must divide train.num_steps={self.train.num_steps}")
        if self.scan_sequences < 500:
            raise ValueError(f"scan_sequences must be >= 500, got {self.scan_sequences}")


FIELDS = ("train.num_steps", "train.warmup", "episodes", "scan_sequences")


def test_probe_scales_cost_fields_only():
    probe = estimate.probe_config(Toy(), FIELDS, 0.125)
    # steps and sequences rounded up, the warm-up down, a tuple elementwise, chunks at 1, the rest untouched
    assert probe == Toy(train=Train(num_steps=125, warmup=12, width=64), episodes=(13, 7), seeds=5, chunks=1,
                        scan_sequences=500)
    assert estimate.probe_config(Toy(), FIELDS[:2], 0.0001).train == Train(num_steps=1, warmup=0, width=64)


def test_probe_fraction_grows_until_the_probe_is_valid():
    assert estimate.probe_fraction(Toy(), ("train.num_steps",), 0.02) == 0.02
    # scan_sequences 4000 must stay >= 500: 0.02 -> 80, 0.04 -> 160, 0.08 -> 320 fail; 0.16 -> 640 and 0.32 -> 1280 hold
    assert estimate.probe_fraction(Toy(), FIELDS, 0.02) == 0.16
    with pytest.raises(configs.ConfigError, match="no probe"):
        estimate.probe_fraction(Toy(scan_sequences=600), FIELDS, 0.02)  # even half (300) is below 500
    with pytest.raises(configs.ConfigError, match="integers"):
        estimate.probe_config(Toy(), ("train",), 0.5)


def test_fit_recovers_a_planted_line():
    a, b = 7.0, 300.0  # seconds: fixed, and the cost fields' work at f = 1
    probes = [estimate.Probe(f, a + b * f, int(1e9 + 4e9 * f)) for f in (0.02, 0.04)]
    fixed, scaling, rss = estimate.fit(probes)
    assert fixed == pytest.approx(a) and scaling == pytest.approx(b) and rss == pytest.approx(5e9)
    assert estimate.fit([estimate.Probe(1.0, 12.0, 10)]) == (12.0, 0.0, 10.0)  # the config itself ran: measured
    with pytest.raises(ValueError):
        estimate.fit(probes[::-1])


def test_estimate_extrapolates_planted_costs():
    """A runner whose time is 5 s + 2 ms per step + 40 ms per episode: the estimate of the whole config is exact
    where the probes' rounding is (0.02 and 0.04 of 1000 steps and of 100 + 50 episodes are whole)."""
    def runner(study, config, fraction, folder, quick):
        work = 0.002 * config.train.num_steps + 0.04 * sum(config.episodes)
        return estimate.Probe(fraction, 5.0 + work, 2**30)

    est = estimate.estimate("toy", Toy(scan_sequences=40000), FIELDS[:3], runner=runner)
    assert est.wall_s == pytest.approx(5.0 + 0.002 * 1000 + 0.04 * 150)
    assert est.scaled["train.num_steps"] == (1000, 20) and est.scaled["episodes"] == ((100, 50), (2, 1))
    text = estimate.text("toy", "FULL", est, cpu_gflops=187.0, machine="2 CPU cores")
    assert "this machine (2 CPU cores, 187 GFLOP/s" in text and "13.0 s (fixed 5.0 s + scaling 8.0 s)" in text
    # the scaling part at the GPU's rate: 8 s x 187 / 18,700 = 0.08 s, plus the fixed 5 s
    assert "1 x H100 (18.7 TFLOP/s float32 products): about 5.1 s" in text


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_every_study_has_valid_probes(preset):
    """Every cost field of every study holds integers, shrinks in its probe, and leaves a valid config."""
    for name, study in registry.load_all().items():
        config = getattr(study, preset)
        if not study.cost_fields:
            continue
        f = estimate.probe_fraction(config, study.cost_fields)
        probe = estimate.probe_config(config, study.cost_fields, f)
        for path in study.cost_fields:
            value, small = configs.getattr_path(config, path), configs.getattr_path(probe, path)
            assert small != value or value in (0, 1), (name, path, value, small)


def test_training_studies_declare_their_steps():
    """A study that trains has its step count among its cost fields (else its probe would train in full)."""
    for name, study in registry.load_all().items():
        text = json.dumps(configs.to_json(study.full))
        if '"num_steps"' in text or '"epochs"' in text or '"steps"' in text:
            assert any(p.rsplit(".", 1)[-1] in ("num_steps", "epochs", "steps") for p in study.cost_fields), name


def test_a_real_probe_runs_the_study(tmp_path):
    study = registry.load_all()["regret.stein"]
    config = configs.apply(study.quick, [("ds", [2]), ("Ts", [10]), ("num_sequences", 600), ("num_kappas", 8),
                                         ("chunk_size", 300)])
    probe = estimate.run_probe("regret.stein", config, 1.0, tmp_path, quick=True)
    assert probe.wall_s > 0 and 50 * 2**20 < probe.rss_bytes < 16 * 2**30
    result = json.loads((tmp_path / "regret.stein" / "result.json").read_text())
    assert result["config"]["num_sequences"] == 600 and result["config"]["ds"] == [2] and result["quick"]


def test_an_interrupted_probe_kills_its_process(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM, which ``show`` raises as SystemExit) while a probe runs: the probe's process ends too."""
    children, real_popen = [], subprocess.Popen

    def popen(argv, **kw):
        children.append(real_popen(["sleep", "60"], **kw))
        return children[-1]

    def interrupted(pid, options):
        raise KeyboardInterrupt

    monkeypatch.setattr(estimate.subprocess, "Popen", popen)
    monkeypatch.setattr(estimate.os, "wait4", interrupted)
    with pytest.raises(KeyboardInterrupt):
        estimate.run_probe("regret.stein", registry.load_all()["regret.stein"].quick, 1.0, tmp_path)
    assert children[0].returncode is not None  # killed and reaped, not left running


def test_a_probe_that_errs_is_an_error_a_failed_check_is_not(tmp_path, monkeypatch):
    real_popen = subprocess.Popen
    for code in (0, 1, 2, 3):
        monkeypatch.setattr(estimate.subprocess, "Popen", lambda argv, code=code, **kw: real_popen(["sh", "-c", f"exit {code}"], **kw))
        study = registry.load_all()["regret.stein"]
        if code in (0, 1):  # 1: a check failed, which a probe of a few steps may well do
            assert estimate.run_probe("regret.stein", study.quick, 1.0, tmp_path).wall_s > 0
        else:
            with pytest.raises(RuntimeError, match=f"exited {code}"):
                estimate.run_probe("regret.stein", study.quick, 1.0, tmp_path)


def test_cli_prints_the_estimate(monkeypatch, capsys):
    seen = []

    def runner(study, config, fraction, folder, quick):
        seen.append((study, config.num_sequences, fraction, quick))
        return estimate.Probe(fraction, 10.0 + 100.0 * fraction, 2**30)

    monkeypatch.setattr(estimate, "run_probe", runner)
    assert cli.main(["show", "regret.stein", "--estimate"]) == 0
    out = capsys.readouterr().out
    assert seen == [("regret.stein", 800, 0.02, False), ("regret.stein", 1600, 0.04, False)]  # FULL: 40,000
    seen.clear()
    assert cli.main(["show", "regret.stein", "--quick", "--estimate"]) == 0
    assert seen[0][1:] == (960, 0.16, True)  # QUICK: 6,000 sequences, at least 500 in a probe; compiled as --quick
    assert out.startswith("regret.stein (FULL): estimated") and "num_sequences 40000 -> 800" in out
    assert "1 min 50 s (fixed 10.0 s + scaling 1 min 40 s)" in out


@pytest.mark.parametrize("fraction", ["0", "1.5"])
def test_bad_probe_fraction_is_a_usage_error(fraction, capsys):
    assert cli.main(["show", "regret.stein", "--estimate", "--probe-fraction", fraction]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fraction" in err[0]
