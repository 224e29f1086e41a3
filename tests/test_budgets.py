"""The converged-budget curves: where a row stops improving, and the files they are written to."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pytest

from experiments.budgets import report as budgets
from experiments.budgets.settings import Scale


def _curve(means: list[float], seeds: int = 5, tasks: int = 300, noise: float = 0.3):
    rng = np.random.default_rng(0)
    task_effect = rng.normal(0, noise, tasks)
    return np.array([[mean + task_effect + rng.normal(0, 0.01, tasks) for mean in means]
                     for _ in range(seeds)])


def test_a_row_stops_where_the_gain_to_the_end_is_no_longer_resolved():
    # Rises to 0.9 by the third checkpoint, then flat: it stops at index 2.
    assert budgets.stops_improving(_curve([0.2, 0.6, 0.9, 0.9, 0.9]), 300) == 2
    # Still rising at the end: not stopped.
    assert budgets.stops_improving(_curve([0.2, 0.4, 0.6, 0.8]), 300) is None
    # Flat from the start.
    assert budgets.stops_improving(_curve([0.5, 0.5, 0.5]), 300) == 0
    # A dip and a recovery: the dip's gain to the end is resolved, so not the start.
    assert budgets.stops_improving(_curve([0.9, 0.5, 0.9, 0.9]), 300) == 2


def test_the_table_and_the_csv_hold_every_checkpoint_of_every_seed():
    scale = Scale("test", 2048, 2, (0, 1024), episodes=4, resamples=50)
    results = [{"key": "ppo", "seed": seed, "seconds": 60.0,
                "curve": [{"timesteps": step, "gradient_steps": step // 10,
                           "returns": [0.5 + step / 4096 + seed * 0.01] * 4}
                          for step in (0, 1024, 2048)]}
               for seed in (0, 1)]
    markdown, columns = budgets.curve_table("cost_envs/ToolBench-v0", results,
                                            [0.5] * 4, [1.0] * 4, scale)
    rows = list(csv.DictReader(io.StringIO(columns)))
    assert len(rows) == 6
    assert {row["seed"] for row in rows} == {"0", "1"}
    assert float(rows[-1]["mean_return"]) == 0.5 + 0.5 + 0.01
    assert rows[-1]["returns"] == "1.01 1.01 1.01 1.01"  # per task: intervals recomputable
    assert "**stops**" not in markdown  # still rising at its last checkpoint
    assert "Still improving at the last checkpoint" in markdown
    flat = [{**result, "curve": [{**entry, "returns": [0.7] * 4} for entry in result["curve"]]}
            for result in results]
    markdown, _ = budgets.curve_table("cost_envs/ToolBench-v0", flat, [0.5] * 4, [1.0] * 4,
                                      scale)
    assert "| 0 **stops** | 0 |" in markdown and "Stops improving at 0 env steps" in markdown
    assert "Machine:" in markdown and "Wall time per seed: 1.0 min" in markdown


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


@pytest.mark.parametrize("name", sorted(path.stem for path in RESULTS.glob("budgets_*.csv")))
def test_the_committed_curves_tables_are_rendered_from_their_csv(name):
    """Every return cell and the stop mark of a committed table, from its CSV's tasks."""
    from cost_envs.metrics import bootstrap_mean_ci
    from experiments.shared.gaps import decode_scores

    markdown = (RESULTS / f"{name}.md").read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO((RESULTS / f"{name}.csv").read_text(encoding="utf-8")))
    values = reader.fieldnames[-1]  # the per-task scores: returns, or another score's
    rows = [row for row in reader if row["seed"]]  # not a gap's end (no seed)
    for key in dict.fromkeys(row["row"] for row in rows):
        mine = [row for row in rows if row["row"] == key]
        steps = sorted({int(row["timesteps"]) for row in mine})
        seeds = sorted({int(row["seed"]) for row in mine})
        curve = np.array([[decode_scores(next(row[values] for row in mine
                                              if int(row["seed"]) == seed
                                              and int(row["timesteps"]) == step))
                           for step in steps] for seed in seeds])
        tasks = int(re.search(r"the same (\d+) evaluation tasks", markdown).group(1))
        assert curve.shape == (5, len(steps), tasks) and tasks >= 400
        stop = budgets.stops_improving(curve, 1000)
        for index, step in enumerate(steps):
            mean, low, high = bootstrap_mean_ci(curve[:, index], n_resamples=1000)
            mark = " **stops**" if index == stop else ""
            assert f"| {step:,}{mark} | " in markdown
            assert f"| {mean:.3f} [{low:.3f}, {high:.3f}] |" in markdown


def test_the_committed_curves_are_there():
    assert {"budgets_ToolBench-v0", "budgets_ToolBench-v0_autoregressive",
            "budgets_ToolBench-v0_ppo", "budgets_FlightPlanner-v1",
            "budgets_ExpertRouting-v1"} <= {
        path.stem for path in RESULTS.glob("budgets_*.csv")}


def test_a_share_of_an_unresolved_gap_has_no_interval():
    from experiments.budgets.report import share_text

    assert share_text((0.5, 0.25, 0.75)) == "0.50 [0.25, 0.75]"
    assert share_text((-0.52, float("nan"), float("nan"))) == "-0.52 [n/a]"
    assert share_text((0.3, None, None)) == "0.30 [n/a]"  # as method_share's JSON holds NaN
