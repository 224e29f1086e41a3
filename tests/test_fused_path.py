"""The curves' and the converged runner's ``--ppo-path fused``: it reaches FastPPO, and its runs
are kept apart from the exact path's (issue #37 point 4)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments import __main__ as command
from experiments.budgets import runner as budgets
from experiments.budgets.settings import BUDGET_ROWS, Scale, on_path, row_arguments
from experiments.converged import runner as converged
from experiments.converged.settings import SCALES
from experiments.shared.kept import keep, read_kept, run_file

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
ENV_ID = "cost_envs/FlightPlanner-v1"
NAME = "converged_FlightPlanner-v1"
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ppo_fused_converged.py"


def test_the_fused_path_is_one_more_ppo_setting_and_the_exact_path_the_rows_own():
    for key, row in BUDGET_ROWS.items():
        assert row_arguments(key) == dict(row.arguments)  # exact: as before
        fused = row_arguments(key, fused=True)
        assert fused["ppo"] == {**row.arguments.get("ppo", {}), "fused_loss": True}
        assert {k: v for k, v in fused.items() if k != "ppo"} == {
            k: v for k, v in row.arguments.items() if k != "ppo"}
    assert row_arguments("ppo/no-entropy", fused=True)["ppo"] == {"ent_coef": 0.0,
                                                                 "fused_loss": True}
    assert BUDGET_ROWS["ppo/no-entropy"].arguments["ppo"] == {"ent_coef": 0.0}  # not mutated


def _weights(trained) -> list[torch.Tensor]:
    return [value.clone() for value in trained.policy.state_dict().values()]


def test_a_fused_job_trains_on_fastppos_fused_path_and_an_exact_one_as_before(monkeypatch):
    """A tiny run: the fused job's weights differ from the exact job's, which are the weights
    of ``train`` called with the row's own arguments (the runner before the option)."""
    from agents.learners import ppo as ppo_module
    from agents.learners.training import train

    trained, paths = [], []
    real_init = ppo_module.FastPPO.__init__

    def recording_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        paths.append(self.fused_loss)

    monkeypatch.setattr(ppo_module.FastPPO, "__init__", recording_init)
    monkeypatch.setattr(budgets, "train",
                        lambda *args, **kwargs: trained.append(train(*args, **kwargs))
                        or trained[-1])
    scale = Scale("tiny", 1024, 1, (1024,), episodes=3, n_envs=2, resamples=10)
    exact = budgets.run_job(budgets.Job(ENV_ID, "ppo", 0, scale))
    fused = budgets.run_job(budgets.Job(ENV_ID, "ppo", 0, scale, fused=True))
    assert paths == [False, True]
    assert exact["cpu_seconds"] > 0 and fused["cpu_seconds"] > 0
    before = train(ENV_ID, "ppo", 1024, seed=0, n_envs=2, evaluate_at=(1024,), eval_episodes=3,
                   **BUDGET_ROWS["ppo"].arguments)
    exact_weights, fused_weights = _weights(trained[0]), _weights(trained[1])
    assert all(torch.equal(a, b) for a, b in zip(exact_weights, _weights(before), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(exact_weights, fused_weights, strict=True))
    # float-close: the same updates up to rounding
    assert max(float((a - b).abs().max()) for a, b in
               zip(exact_weights, fused_weights, strict=True)) < 1e-3


def test_a_kept_run_of_one_path_is_refused_by_the_other(tmp_path):
    settings = SCALES["default"].settings()
    exact_file, fused_file = tmp_path / "exact.json", tmp_path / "fused.json"
    keep(exact_file, {**settings, "row": "ppo", "seed": 0})
    keep(fused_file, {**on_path(settings, fused=True), "row": "ppo", "seed": 0})
    assert on_path(settings, fused=False) == settings  # the committed runs' settings
    assert read_kept(exact_file, on_path(settings, False)) is not None
    assert read_kept(fused_file, on_path(settings, True)) is not None
    with pytest.raises(ValueError, match=r"fused\.json: was run with .*'fused_loss': True"):
        read_kept(fused_file, on_path(settings, False))
    with pytest.raises(ValueError, match=r"exact\.json: expected a kept run"):
        read_kept(exact_file, on_path(settings, True))
    # the committed exact runs are read as exact runs, and refused as fused ones
    committed = run_file(RESULTS / converged.RUNS, "ppo", 0)
    assert read_kept(committed, settings) is not None
    with pytest.raises(ValueError, match="expected a kept run"):
        read_kept(committed, on_path(settings, True))


def _stub_runs(monkeypatch, trained: list):
    """Training and the fixed rows' scoring replaced by a few fake per-task returns."""
    def run_job(job):
        trained.append(job)
        returns = [0.5 + 0.01 * job.seed + (0.001 if job.fused else 0.0)] * job.scale.episodes
        return {"key": job.key, "seed": job.seed, "seconds": 60.0, "cpu_seconds": 30.0,
                "curve": [{"timesteps": step, "gradient_steps": 1, "returns": returns}
                          for step in job.scale.checkpoints]}

    def score_fixed(scale, tasks="validation"):
        episodes = scale.episodes
        rows = {"one-turn": ("One-turn rule", 0.5), "planner": ("Planner", 0.6),
                "bayes-planner": ("Bayes", 0.45)}
        return {**scale.settings(), "rule_tasks": scale.rule_tasks, "rule": "one-turn",
                "rows": {key: {"label": label, "returns": " ".join([str(value)] * episodes)}
                         for key, (label, value) in rows.items()}}

    monkeypatch.setattr(budgets, "run_job", run_job)
    monkeypatch.setattr(converged, "score_fixed", score_fixed)


def test_a_fused_converged_report_keeps_its_runs_apart_and_reuses_the_fixed_rows(
        tmp_path, monkeypatch):
    trained: list = []
    _stub_runs(monkeypatch, trained)
    converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    assert [job.fused for job in trained] == [False, False]
    exact_page = (tmp_path / f"{NAME}.md").read_text()
    trained.clear()
    paths = converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None,
                             fused=True)
    assert sorted(path.name for path in paths) == [f"{NAME}_fused.csv", f"{NAME}_fused.md"]
    assert [(job.key, job.seed, job.fused) for job in trained] == [("ppo", 0, True),
                                                                   ("ppo", 1, True)]
    assert (tmp_path / f"{NAME}.md").read_text() == exact_page  # the exact report untouched
    assert sorted(p.name for p in (tmp_path / "converged_runs_fused").iterdir()) == [
        "ppo_seed0.json", "ppo_seed1.json"]  # no fixed file of its own: the exact one's
    kept = json.loads((tmp_path / "converged_runs_fused" / "ppo_seed1.json").read_text())
    assert kept["fused_loss"] is True and kept["cpu_seconds"] == 30.0
    assert "fused_loss" not in json.loads(
        (tmp_path / converged.RUNS / "ppo_seed1.json").read_text())
    page = (tmp_path / f"{NAME}_fused.md").read_text()
    assert "on FastPPO's fused path (`fused_loss=True`" in page
    assert "Wall time per seed: PPO 1.0 min (0.5 min of CPU)." in page
    rows = list(csv.DictReader(io.StringIO((tmp_path / f"{NAME}_fused.csv").read_text())))
    assert [row["kept_in"] for row in rows] == ["converged_runs/fixed.json"] * 3 + [
        "converged_runs_fused/ppo_seed0.json", "converged_runs_fused/ppo_seed1.json"]
    # Kept: nothing trains again on either path.
    trained.clear()
    converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None, fused=True)
    converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    assert trained == []
    # A fused run in the exact folder is refused before any run, and the other way round.
    fused_run = tmp_path / "converged_runs_fused" / "ppo_seed0.json"
    (tmp_path / converged.RUNS / "ppo_seed0.json").write_text(fused_run.read_text())
    with pytest.raises(ValueError, match=r"ppo_seed0\.json: was run with .*'fused_loss'"):
        converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    fused_run.write_text((tmp_path / converged.RUNS / "ppo_seed1.json").read_text())
    with pytest.raises(ValueError, match=r"ppo_seed0\.json: expected a kept run"):
        converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None,
                         fused=True)
    assert trained == []


def test_the_fused_curves_have_their_own_units_and_files(tmp_path, monkeypatch):
    trained: list = []
    _stub_runs(monkeypatch, trained)
    monkeypatch.setattr(budgets, "reference_returns",
                        lambda env_id, episodes: ([0.5] * episodes, [0.6] * episodes))
    keepers = []
    real_kept = budgets.Kept
    monkeypatch.setattr(budgets, "Kept", lambda folder, settings: keepers.append(
        (folder, settings)) or real_kept(folder, settings))
    envs = {ENV_ID: ("ppo",)}
    exact = budgets.report(tmp_path, "smoke", jobs=1, envs=envs, log=lambda _: None)
    fused = budgets.report(tmp_path, "smoke", jobs=1, envs=envs, log=lambda _: None, fused=True)
    assert [path.name for path in exact] == ["budgets_FlightPlanner-v1.md",
                                             "budgets_FlightPlanner-v1.csv"]
    assert [path.name for path in fused] == ["budgets_FlightPlanner-v1_fused.md",
                                             "budgets_FlightPlanner-v1_fused.csv"]
    assert [job.fused for job in trained] == [False, False, True, True]
    assert str(trained[2]).endswith("seed 0 fused") and not str(trained[0]).endswith("fused")
    (exact_folder, exact_settings), (fused_folder, fused_settings) = keepers
    assert exact_folder != fused_folder and exact_settings != fused_settings
    assert "fused_loss" in fused_settings and "fused_loss" not in exact_settings
    assert "on FastPPO's fused path" in fused[0].read_text()
    assert "fused" not in exact[0].read_text()


def test_the_command_line_passes_the_path_to_budgets_and_converged_only(tmp_path, monkeypatch,
                                                                        capsys):
    calls = []
    monkeypatch.setattr(converged, "report", lambda *args, **kwargs: calls.append(
        ("converged", kwargs["fused"])) or [])
    monkeypatch.setattr(budgets, "report", lambda *args, **kwargs: calls.append(
        ("budgets", kwargs["fused"])) or [])
    out = str(tmp_path / "out")
    for path in ("exact", "fused"):
        for experiment in ("converged", "budgets"):
            assert command.main([experiment, "--scale", "smoke", "--out", out,
                                 "--ppo-path", path]) == 0
    assert command.main(["converged", "--scale", "smoke", "--out", out]) == 0
    assert calls == [("converged", False), ("budgets", False), ("converged", True),
                     ("budgets", True), ("converged", False)]
    with pytest.raises(SystemExit) as exit_:
        command.main(["lora_ppo", "--out", out, "--ppo-path", "fused"])
    assert exit_.value.code == 2 and "--ppo-path: only budgets, converged" in \
        capsys.readouterr().err
    # python -m experiments.converged's own command line
    calls.clear()
    converged.main(["--scale", "smoke", "--rows", "ppo", "--out", out, "--ppo-path", "fused"])
    converged.main(["--scale", "smoke", "--rows", "ppo", "--out", out])
    assert calls == [("converged", True), ("converged", False)]


def _script():
    spec = importlib.util.spec_from_file_location("ppo_fused_converged_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_agreement_is_paired_over_seeds_and_tasks():
    """fused = exact + 0.002 on every task of every seed: the difference is exactly that,
    with a zero-width interval, though the tasks' spread is 100 times larger."""
    from cost_envs.metrics import bootstrap_mean_ci

    script = _script()
    rng = np.random.default_rng(0)
    rule = rng.normal(0.9, 0.2, 400)
    exact = np.stack([rule + 0.01 * seed + rng.normal(0, 0.01, 400) for seed in range(3)])
    fused = exact + 0.002
    scale = SCALES["smoke"]
    kept = [{"seconds": 120.0, "cpu_seconds": 90.0}] * 3
    timings = {"exact 1": {"seconds": 300.0, "cpu_seconds": 270.0, "load_before": 1.0,
                           "load_after": 1.5, "same_returns": True},
               "fused 1": {"load_before": 1.2, "load_after": 1.1}}
    page = script.report(exact, fused, rule, rule + 0.1, "One-turn", scale, [320.0] * 3, kept,
                         timings)
    assert "| **pooled** | " in page and "| +0.0020 [+0.0020, +0.0020] | +0.020 [" in page
    mean, low, high = bootstrap_mean_ci(exact, n_resamples=scale.resamples)
    assert f"| **pooled** | {mean:.4f} [{low:.4f}, {high:.4f}] |" in page
    assert "| 1 | 5.33 | 5.00 | 4.50 | 1.0 / 1.5 | yes | 2.00 | 1.50 | 1.2 / 1.1 |" in page
    assert "| 0 | 5.33 | - | - | - | - | 2.00 | 1.50 | - |" in page
    assert "exact / fused CPU time on the seeds run both ways here: 3.00" in page
    assert "Machine: " in page


@pytest.mark.slow
def test_the_benchmark_runs_at_the_smoke_scale(tmp_path):
    converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    exact_page = (tmp_path / f"{NAME}.md").read_text()
    script = _script()
    assert script.main(["--scale", "smoke", "--exact-timing", "1", "--out", str(tmp_path),
                        "--output", str(tmp_path / "page.md")]) == 0
    page = (tmp_path / "page.md").read_text()
    assert "| 1 |" in page and "| yes |" in page  # the exact seed again: the same returns
    assert (tmp_path / f"{NAME}_fused.md").exists()
    assert (tmp_path / f"{NAME}.md").read_text() == exact_page


def test_the_committed_fused_runs_are_kept_apart_and_the_comparison_is_rendered_from_them():
    """The committed fused runs are fused runs of the converged scale (refused as exact ones),
    and ppo_fused_converged.md's agreement rows come from them and the exact runs."""
    script = _script()
    scale = SCALES["default"]
    folder = RESULTS / "converged_runs_fused"
    fused = []
    for seed in range(scale.seeds):
        path = run_file(folder, "ppo", seed)
        kept = read_kept(path, on_path(scale.settings(), fused=True))
        assert kept is not None and kept["fused_loss"] is True and kept["cpu_seconds"] > 0
        with pytest.raises(ValueError, match="fused_loss"):
            read_kept(path, scale.settings())
        fused.append(script.decode_scores(kept["returns"]))
    fused = np.array(fused)
    exact = script.exact_runs(RESULTS, scale)
    rule, planner, _ = script.fixed_rows(RESULTS, scale)
    page = (RESULTS / "ppo_fused_converged.md").read_text(encoding="utf-8")
    difference = fused - exact
    pooled = (f"| **pooled** | {script.cell(exact, scale.resamples, '')} | "
              f"{script.cell(fused, scale.resamples, '')} | "
              f"{script.cell(difference, scale.resamples)} | "
              f"{script.share_cell(rule + difference, rule, planner)} |")
    assert pooled in page
    for seed in range(scale.seeds):
        assert f"| {seed} | {exact[seed].mean():.4f} | {fused[seed].mean():.4f} | " in page
    rows = list(csv.DictReader(io.StringIO(
        (RESULTS / f"{NAME}_fused.csv").read_text(encoding="utf-8"))))
    # the committed fused report is the test tasks' (its runs kept apart from these
    # validation runs, which the comparison reads)
    assert [row["kept_in"] for row in rows if row["row"] == "ppo"] == [
        f"converged_runs_test_fused/ppo_seed{seed}.json" for seed in range(scale.seeds)]
