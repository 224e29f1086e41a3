"""AgenticRouting-v0's learning curves: runs advanced in turn, the table's stop marks, the CLI."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from experiments.bopo import curve as bopo_curve
from experiments.bopo import long as bopo_long
from experiments.bopo.jobs import LearningRun, profile_budget, warm_start
from experiments.bopo.runner import learn_jobs
from experiments.budgets.report import stops_improving
from experiments.shared.gaps import decode_scores

SMOKE = bopo_curve.SCALES["smoke"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One smoke run of the curves, with its progress file (training: the slow tests')."""
    progress = tmp_path_factory.mktemp("curve") / "progress.json"
    data = bopo_curve.run_curves("smoke", progress=progress, log=lambda line: None)
    return data, progress


def _curve(base, gains, rng):
    return [{"timesteps": step, "gradient_steps": step // 50,
             "returns": list(base + gain + rng.normal(0, 0.001, len(base)))}
            for step, gain in zip((0, 256, 512), gains, strict=True)]


def curves_data(gains, seeds=(0, 1)):
    """Data as :func:`run_curves` returns it at the smoke scale, without training: each
    row's per-task returns at 0, 256 and 512 steps are a base plus the row's ``gains``.

    What the report makes of a run's curves is tested on these (the fast tier); that a
    smoke run returns and writes data of this shape, on ``smoke`` (slow).
    """
    rng = np.random.default_rng(0)
    base = rng.normal(0.3, 0.2, SMOKE.n_eval)
    return {"profile": "appworld", "scale": SMOKE.name, "budget": 0.05,
            "rule_key": "best-rule", "rule": list(base - 0.05), "planner": list(base + 0.1),
            "n_envs": SMOKE.n_envs, "resamples": SMOKE.resamples, "suffix": "",
            "runs": [{"key": key, "seed": seed, "seconds": 1.0, "curve": _curve(base, g, rng)}
                     for key, g in gains.items() for seed in seeds],
            "seconds": 4.0}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """:func:`curves_data` of a flat BoPO row and a rising PPO row, and its progress file."""
    progress = tmp_path_factory.mktemp("curve") / "progress.json"
    data = curves_data({"bopo/0.5": (0, 0, 0), "ppo/1": (0, 0.1, 0.2)})
    progress.write_text(json.dumps(data), encoding="utf-8")
    return data, progress


def _ppo_jobs(seeds):
    budget = profile_budget("appworld", SMOKE)
    return [job for s in seeds
            for job in learn_jobs(warm_start("appworld", SMOKE, s, budget, scored=False),
                                  SMOKE, budget, 0) if job.key == "ppo/1"]


def test_runs_advanced_in_turn_train_what_each_trains_alone():
    alone_job, other_job = _ppo_jobs((0, 1))
    alone = LearningRun(alone_job)
    for step in (256, 512):
        alone.advance(step)
    first, second = LearningRun(alone_job), LearningRun(other_job)
    for step in (256, 512):  # the other run draws from torch's stream between the first's
        first.advance(step)
        second.advance(step)
    mine = first.model.policy.state_dict()
    for name, tensor in alone.model.policy.state_dict().items():
        assert np.array_equal(tensor.numpy(), mine[name].numpy()), name
    assert alone.scored == first.scored
    # The two seeds did train different weights: the equality above can fail.
    theirs = second.model.policy.state_dict()
    assert any(not np.array_equal(mine[name].numpy(), theirs[name].numpy()) for name in mine)
    for run in (alone, first, second):
        run.finish()


def test_every_row_and_seed_is_scored_at_every_checkpoint_with_its_gradient_steps(smoke):
    data, progress = smoke
    assert {(run["key"], run["seed"]) for run in data["runs"]} == {
        (key, seed) for key in ("bopo/0.5", "ppo/1") for seed in (0, 1)}
    for run in data["runs"]:
        assert [entry["timesteps"] for entry in run["curve"]] == [0, 256, 512]
        # One rollout of 256 steps is one minibatch of 256; 5 epochs each.
        assert [entry["gradient_steps"] for entry in run["curve"]] == [0, 5, 10]
        assert all(len(entry["returns"]) == SMOKE.n_eval for entry in run["curve"])
    assert len(data["rule"]) == len(data["planner"]) == SMOKE.n_eval
    assert data["rule_key"] in ("difficulty-threshold", "best-rule")
    # the progress file holds what the run returned (the fast tests read such files)
    assert json.loads(progress.read_text(encoding="utf-8")) == json.loads(json.dumps(data))
    assert data["scale"] == "curve-smoke"
    assert set(data) == set(curves_data({"ppo/1": (0, 0, 0)}))


def _sections(markdown):
    return {part.split("\n")[0]: part for part in markdown.split("\n## ")[1:]}


def test_the_stop_marks_are_those_of_the_written_per_task_returns(written, tmp_path):
    data, progress = written
    written = bopo_curve.report_from(progress, tmp_path)
    assert sorted(path.name for path in written) == ["budgets_AgenticRouting-v0.csv",
                                                     "budgets_AgenticRouting-v0.md"]
    assert {path.name: path.read_text(encoding="utf-8") for path in written} == \
        bopo_curve.render(data)
    markdown = (tmp_path / "budgets_AgenticRouting-v0.md").read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(
        (tmp_path / "budgets_AgenticRouting-v0.csv").read_text(encoding="utf-8"))))
    sections = _sections(markdown)
    assert set(sections) == {"BoPO, as in the paper (λ=0.5)", "PPO (vanilla) (λ=1)"}
    for key, title in (("bopo/0.5", "BoPO, as in the paper (λ=0.5)"),
                       ("ppo/1", "PPO (vanilla) (λ=1)")):
        curve = np.array([[decode_scores(row["returns"]) for row in rows
                           if row["row"] == key and row["seed"] == str(seed)]
                          for seed in (0, 1)])
        stop = stops_improving(curve, SMOKE.resamples)
        assert (stop is None) == (key == "ppo/1")  # the rising row; the flat one stops
        if stop is None:
            assert "Still improving" in sections[title] and "**stops**" not in sections[title]
        else:
            assert f"| {[0, 256, 512][stop]:,} **stops** |" in sections[title]


def test_a_rising_row_is_still_improving_and_a_flat_one_stops_at_the_start():
    data = curves_data({"bopo/0.5": (0, 0, 0), "ppo/1": (0, 0.1, 0.2)}, seeds=range(3))
    markdown = bopo_curve.render(data)["budgets_AgenticRouting-v0.md"]
    sections = _sections(markdown)
    assert "| 0 **stops** |" in sections["BoPO, as in the paper (λ=0.5)"]
    assert "Still improving" in sections["PPO (vanilla) (λ=1)"]
    assert "**stops**" not in sections["PPO (vanilla) (λ=1)"]


def test_the_tuned_curve_trains_the_sweeps_choice_into_its_own_files():
    data = bopo_curve.run_curves("smoke", log=lambda line: None, tuned=True)
    assert {run["key"] for run in data["runs"]} == {"ppo/tuned"}
    files = bopo_curve.render(data)
    assert sorted(files) == ["budgets_AgenticRouting-v0_tuned.csv",
                             "budgets_AgenticRouting-v0_tuned.md"]
    assert "## PPO (vanilla), tuned" in files["budgets_AgenticRouting-v0_tuned.md"]


@pytest.mark.parametrize("argv", [["--progress", "x.json"], ["--tuned"]])
def test_the_curve_options_go_with_curve_and_an_unknown_scale_is_refused(argv):
    with pytest.raises(SystemExit):
        bopo_long.main(argv)
    with pytest.raises(ValueError, match="scale: expected one of"):
        bopo_curve.run_curves("huge")


def test_a_progress_file_becomes_the_table_from_the_command_line(written, tmp_path, capsys):
    data, progress = written
    bopo_long.main(["--curve", "--from-progress", str(progress), "--out", str(tmp_path)])
    assert "budgets_AgenticRouting-v0.md" in capsys.readouterr().out
    assert {path.name: path.read_text(encoding="utf-8") for path in tmp_path.iterdir()} == \
        bopo_curve.render(data)
