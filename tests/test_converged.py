"""A learned row at its converged budget on many tasks: paired figures, and the committed file."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from experiments.budgets.settings import on_path
from experiments.converged import report as converged_report
from experiments.converged import runner as converged
from experiments.converged.settings import EPISODES
from experiments.shared.gaps import decode_scores
from experiments.shared.kept import read_kept, run_file
from experiments.shared.task_sets import tagged

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
NAME = "converged_FlightPlanner-v1"


def _fixed(rule: np.ndarray, planner: np.ndarray, bayes: np.ndarray) -> converged_report.Fixed:
    returns = {"one-turn": rule, "planner": planner, "bayes-planner": bayes}
    labels = {"one-turn": "One-turn rule", "planner": "Planner", "bayes-planner": "Bayes"}
    return converged_report.Fixed(labels, returns, "one-turn")


def test_a_small_gain_hidden_by_task_noise_is_resolved_because_it_is_paired():
    """Tasks vary by +-0.3 and PPO gains 0.01 on every one: paired over tasks, that shows."""
    rng = np.random.default_rng(0)
    rule = rng.normal(0.9, 0.3, 500)
    ppo = np.stack([rule + 0.01 + rng.normal(0, 0.001, 500) for _ in range(5)])
    markdown, columns = converged_report.render({"ppo": ppo},
                                                _fixed(rule, rule + 0.05, rule - 0.02),
                                                converged.SCALES["smoke"], {"ppo": 1.5})
    gain = re.search(r"PPO - best fixed row: ([-\d.]+) \[([-\d.]+), ([-\d.]+)\]", markdown)
    assert abs(float(gain.group(1)) - 0.01) < 0.001 and float(gain.group(2)) > 0.009
    # Unpaired, the same returns are not told apart from the rule: the tasks' spread hides it.
    low = float(re.search(r"\| \*\*PPO\*\* \(5 seeds\) \| [-\d.]+ \[([-\d.]+),", markdown).group(1))
    assert low < rule.mean()
    versus_bayes = re.search(r"PPO - Bayes reference: ([-\d.]+) \[([-\d.]+),", markdown)
    assert abs(float(versus_bayes.group(1)) - 0.03) < 0.001 and float(versus_bayes.group(2)) > 0.029
    rows = list(csv.DictReader(io.StringIO(columns)))
    assert [row["row"] for row in rows] == ["one-turn", "planner", "bayes-planner"] + ["ppo"] * 5
    assert float(rows[4]["mean_return"]) == pytest.approx(ppo[1].mean(), abs=1e-6)
    assert rows[4]["kept_in"] == "converged_runs/ppo_seed1.json"
    assert rows[0]["kept_in"] == "converged_runs/fixed.json"
    assert "Wall time per seed: PPO 1.5 min." in markdown


def _committed() -> tuple[list[dict], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The committed CSV's rows, and the per-task returns of the kept files it names."""
    rows = list(csv.DictReader(io.StringIO((RESULTS / f"{NAME}.csv").read_text(encoding="utf-8"))))
    fixed, learned = {}, {}
    for row in rows:
        kept = json.loads((RESULTS / row["kept_in"]).read_text(encoding="utf-8"))
        if row["seed"] == "":
            fixed[row["row"]] = decode_scores(kept["rows"][row["row"]]["returns"])
        else:
            assert (kept["row"], kept["seed"]) == (row["row"], int(row["seed"]))
            learned.setdefault(row["row"], []).append(decode_scores(kept["returns"]))
    return rows, fixed, {key: np.array(values) for key, values in learned.items()}


def _crossed_draws(resamples: int, learned: dict[str, np.ndarray],
                   fixed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The resampled means ``bootstrap_mean_ci(values, n_resamples=resamples)`` draws.

    For each learned ``(seeds, tasks)`` array, the mean of each resample of seeds and tasks;
    for each fixed row, the mean of the same resamples' tasks. Every such call draws the
    same seeds and tasks (seed 0, the same shape), so they are drawn and counted once here
    and every array is summed over them in one product per block; a paired difference's
    resampled means are the differences of these (issue #36: the nine crossed cells drew
    and counted the same 2,000 x 10,000 tasks nine times, 2 s of the fast tier).
    """
    from cost_envs.metrics.bootstrap import _counts, resample_blocks

    names = list(learned)
    n_runs, n = learned[names[0]].shape
    columns = np.concatenate([*(learned[name].T for name in names),
                              *(fixed[name][:, None] for name in fixed)], axis=1)
    rng = np.random.default_rng(0)
    blocks = []
    for size in resample_blocks(resamples, n_runs * n):
        runs = _counts(rng.integers(0, n_runs, size=(size, n_runs)), n_runs)
        items = _counts(rng.integers(0, n, size=(size, n)), n).astype(np.float64)
        sums = items @ columns  # (size, seeds of every learned row, then the fixed rows)
        row = [np.einsum("bs,bs->b", runs, sums[:, k * n_runs:(k + 1) * n_runs])
               / (n_runs * n) for k in range(len(names))]
        row += [sums[:, len(names) * n_runs + k] / n for k in range(len(fixed))]
        blocks.append(row)
    return {name: np.concatenate([block[k] for block in blocks])
            for k, name in enumerate([*names, *fixed])}


def test_the_committed_report_is_rendered_from_its_csv():
    """Every learned row's return and paired differences, from the kept files the CSV names."""
    from cost_envs.metrics import bootstrap_mean_ci
    from cost_envs.metrics.bootstrap import interval_around, percentile_interval
    from experiments.budgets.settings import BUDGET_ROWS

    markdown = (RESULTS / f"{NAME}.md").read_text(encoding="utf-8")
    rows, fixed, learned = _committed()
    rule = fixed[rows[0]["row"]]
    assert set(learned) == set(converged.ROWS)
    assert all(len(values) == EPISODES for values in fixed.values())
    resamples = converged.SCALES["default"].resamples
    draws = _crossed_draws(resamples, learned, fixed)

    def cell(values: np.ndarray, resampled: np.ndarray | None = None) -> str:
        if resampled is None:
            mean, low, high = bootstrap_mean_ci(values, n_resamples=resamples)
        else:  # bootstrap_mean_ci's interval, on the draws made once
            mean = float(values.mean())
            low, high = interval_around(mean, percentile_interval(resampled, 0.95))
        return f"{mean:.4f} [{low:.4f}, {high:.4f}]"

    first = next(iter(learned))  # the draws are bootstrap_mean_ci's
    expected = bootstrap_mean_ci(learned[first] - rule, n_resamples=resamples)
    mean = float((learned[first] - rule).mean())
    got = interval_around(mean, percentile_interval(draws[first] - draws[rows[0]["row"]], 0.95))
    np.testing.assert_allclose((mean, *got), expected, rtol=0, atol=1e-12)
    for key, values in learned.items():
        label = BUDGET_ROWS[key].label
        assert values.shape == (5, EPISODES)
        assert f"| **{label}** (5 seeds) | {cell(values, draws[key])} |" in markdown
        paired = draws[key] - draws[rows[0]["row"]]
        assert f"{label} - best fixed row: {cell(values - rule, paired)}" in markdown
        paired = draws[key] - draws["bayes-planner"]
        versus = cell(values - fixed["bayes-planner"], paired)
        assert f"{label} - Bayes reference: {versus}" in markdown
    assert (f"Bayes reference - best fixed row: "
            f"{cell(fixed['bayes-planner'] - rule)}") in markdown


@pytest.mark.slow
def test_a_smoke_run_keeps_each_run_and_a_second_call_trains_only_what_is_missing(
        tmp_path, monkeypatch):
    from experiments.budgets import runner as budgets

    paths = converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    assert sorted(path.name for path in paths) == [f"{NAME}.csv", f"{NAME}.md"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / f"{NAME}.csv").read_text())))
    means = [float(row["mean_return"]) for row in rows if row["row"] == "ppo"]
    assert len(means) == 2
    markdown = (tmp_path / f"{NAME}.md").read_text()
    assert "PPO per seed: " + ", ".join(f"{mean:.4f}" for mean in means) in markdown
    runs = tmp_path / converged.RUNS
    assert sorted(path.name for path in runs.iterdir()) == [
        "fixed.json", "ppo_seed0.json", "ppo_seed1.json"]
    # Everything kept: nothing trains, and the report comes out the same.
    trained = []
    real_run_job = budgets.run_job
    monkeypatch.setattr(budgets, "run_job", lambda job: trained.append(job) or real_run_job(job))
    converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    assert trained == [] and (tmp_path / f"{NAME}.md").read_text() == markdown
    # One run lost: only it is trained again, to the same returns (a function of its seed).
    (runs / "ppo_seed1.json").unlink()
    converged.report(tmp_path, "smoke", jobs=1, rows=("ppo",), log=lambda _: None)
    assert [(job.key, job.seed) for job in trained] == [("ppo", 1)]
    assert (tmp_path / f"{NAME}.md").read_text() == markdown


def test_a_kept_run_of_other_settings_is_refused_naming_it(tmp_path):
    runs = tmp_path / converged.RUNS
    runs.mkdir()
    other = {**converged.SCALES["default"].settings(), "row": "ppo", "seed": 0}
    (runs / "ppo_seed0.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match=r"ppo_seed0\.json: was run with .*'timesteps': 2000000"):
        converged.report(tmp_path, "smoke", rows=("ppo",))
    (runs / "ppo_seed0.json").write_text("not json")
    with pytest.raises(ValueError, match=r"ppo_seed0\.json: expected a kept run"):
        converged.report(tmp_path, "smoke", rows=("ppo",))
    assert sorted(path.name for path in tmp_path.iterdir()) == [converged.RUNS]
    with pytest.raises(ValueError, match="rows: expected keys of"):
        converged.report(tmp_path, "smoke", rows=("sac",))


def test_the_committed_csv_names_kept_runs_of_the_default_scale():
    """Each row's kept file is of the default scale, and its mean is the row's mean return."""
    rows, fixed, _ = _committed()
    # the committed report is the test set's (issue #38): its runs in their own folder, each
    # file naming the set
    settings = tagged(converged.SCALES["default"].settings(), "test")
    for row in rows:
        if row["seed"] == "":
            values = fixed[row["row"]]
        else:
            assert row["kept_in"].startswith(converged.runs_folder("test") + "/")
            kept = read_kept(run_file(RESULTS / converged.runs_folder("test"), row["row"],
                                      int(row["seed"])), settings)
            assert kept is not None
            values = decode_scores(kept["returns"])
        assert float(row["mean_return"]) == pytest.approx(values.mean(), abs=1e-6)


def test_a_bad_scale_is_refused_before_any_training(tmp_path):
    with pytest.raises(ValueError, match="scale: expected one of"):
        converged.report(tmp_path, "huge")
    assert not list(tmp_path.iterdir())


def test_the_committed_fused_report_reads_fused_test_runs():
    """The fused-path report is the test set's too: each learned row's kept file is a fused
    run on the test tasks (refused as an exact one and as a validation one), its mean the
    row's."""
    rows = list(csv.DictReader(io.StringIO(
        (RESULTS / f"{NAME}_fused.csv").read_text(encoding="utf-8"))))
    settings = tagged(converged.SCALES["default"].settings(), "test")
    folder = converged.runs_folder("test", fused=True)
    learned = [row for row in rows if row["seed"] != ""]
    assert len(learned) == 15
    for row in learned:
        assert row["kept_in"].startswith(folder + "/")
        path = run_file(RESULTS / folder, row["row"], int(row["seed"]))
        kept = read_kept(path, on_path(settings, fused=True))
        assert kept is not None
        for other in (settings, on_path(converged.SCALES["default"].settings(), fused=True)):
            with pytest.raises(ValueError):
                read_kept(path, other)
        assert float(row["mean_return"]) == pytest.approx(
            decode_scores(kept["returns"]).mean(), abs=1e-6)
