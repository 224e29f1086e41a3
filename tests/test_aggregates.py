"""Aggregates across envs and profiles: the gap-closed blocks, IQM and P(improvement)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from experiments import aggregates, gaps
from experiments.__main__ import main

rliable = pytest.importorskip("rliable", reason="rliable comes with the tune extra")


def _task(rng: np.random.Generator, lifts: dict[str, float], seeds: int = 5,
          gap: float = 0.3) -> dict:
    rule = rng.normal(0.5, 0.3, 120)
    methods = {key: (key.upper(), rule[None, :] + lift + rng.normal(0, 0.05, (seeds, 1))
                     + rng.normal(0, 0.1, (seeds, 120)))
               for key, lift in lifts.items()}
    return gaps.task_entry(rule, rule + gap, methods, n_resamples=200)


def _write(directory, name, experiment, tasks):
    (directory / name).write_text(json.dumps(
        {"other": 1, "gap_closed": gaps.block(experiment, "return", "rule", "planner", tasks)}))


def test_probability_of_improvement_is_rliables_estimator_and_interval():
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(0)
    x, y = rng.normal(0.3, 1, (5, 6)), rng.normal(0, 1, (4, 6))
    y[0, 0] = x[0, 0]  # a tie counts one half
    ours = aggregates.probability_of_improvement(x, y, reps=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        point, interval = rly.get_interval_estimates(
            {"xy": [x, y]}, metrics.probability_of_improvement, reps=2000,
            random_state=np.random.RandomState(0))
    assert ours[0] == pytest.approx(float(point["xy"]), abs=1e-12)
    assert ours[1] == pytest.approx(float(interval["xy"][0][0]), abs=0.04)
    assert ours[2] == pytest.approx(float(interval["xy"][1][0]), abs=0.04)


def test_report_ranks_the_method_that_closes_more_of_the_gap(tmp_path):
    rng = np.random.default_rng(1)
    _write(tmp_path, "table_a.json", "lora_ppo", {"A": _task(rng, {"ppo": 0.05, "lora": 0.2})})
    _write(tmp_path, "table_b.json", "lora_ppo", {"B": _task(rng, {"ppo": 0.05, "lora": 0.2}),
                                                   "C": _task(rng, {"ppo": 0.05, "lora": 0.2},
                                                              gap=-0.1)})
    (tmp_path / "unrelated.json").write_text("[1, 2]")
    paths = aggregates.report(tmp_path, reps=500)
    assert sorted(p.name for p in paths) == sorted(aggregates.FILES)
    report = json.loads((tmp_path / "aggregates.json").read_text())["experiments"]["lora_ppo"]
    assert report["tasks"] == ["A", "B"] and report["without_gap"] == ["C"]
    ppo, lora = report["methods"]["ppo"], report["methods"]["lora"]
    assert ppo["runs"] == lora["runs"] == 5
    assert ppo["iqm"][2] < lora["iqm"][1]  # the intervals separate
    assert 0.1 < ppo["mean"][0] < 0.25 < 0.5 < lora["mean"][0] < 0.85
    better = report["probability_of_improvement"]["lora > ppo"]
    worse = report["probability_of_improvement"]["ppo > lora"]
    assert better[0] > 0.9 and better[0] + worse[0] == pytest.approx(1.0)
    text = (tmp_path / "aggregates.md").read_text()
    assert "| LORA | 5 |" in text and "Left out, the planner not above the rule: C" in text


def test_methods_are_compared_on_the_tasks_they_share_only(tmp_path):
    rng = np.random.default_rng(2)
    _write(tmp_path, "x.json", "corl", {"t1": _task(rng, {"a": 0.1, "b": 0.1}),
                                        "t2": _task(rng, {"a": 0.1})})
    groups = aggregates.score_matrices(aggregates.read_blocks(tmp_path))
    assert list(groups["corl"]["matrices"]) == ["a"]
    assert groups["corl"]["matrices"]["a"].shape == (5, 2)
    assert groups["corl"]["partial"] == {"B": ["t1"]}  # named, not pooled
    aggregates.report(tmp_path, reps=200)
    assert "trained on some of these tasks only" in (tmp_path / "aggregates.md").read_text()
    assert "B (1 of 2)" in (tmp_path / "aggregates.md").read_text()


def test_the_intervals_do_not_depend_on_numpys_global_generator(tmp_path):
    rng = np.random.default_rng(3)
    matrices = {"a": rng.normal(0.2, 0.3, (5, 4)), "b": rng.normal(0.0, 0.3, (5, 4))}
    np.random.seed(1)
    first = aggregates.aggregate(matrices, reps=300)
    np.random.seed(2)
    before = np.random.get_state()[1].copy()
    assert aggregates.aggregate(matrices, reps=300) == first
    assert (np.random.get_state()[1] == before).all()  # and leaves it as it found it


def test_bad_blocks_are_refused_in_one_line(tmp_path):
    rng = np.random.default_rng(3)
    _write(tmp_path, "a.json", "e", {"t": _task(rng, {"m": 0.1})})
    _write(tmp_path, "b.json", "e", {"t": _task(rng, {"m": 0.1})})
    with pytest.raises(ValueError, match="task 't' of e appears twice"):
        aggregates.score_matrices(aggregates.read_blocks(tmp_path))
    (tmp_path / "b.json").write_text(json.dumps({"gap_closed": gaps.block(
        "e", "return", "rule", "planner", {"u": _task(rng, {"m": 0.1}, seeds=3)})}))
    with pytest.raises(ValueError, match="seed count differs"):
        aggregates.score_matrices(aggregates.read_blocks(tmp_path))


def test_cli_says_in_one_line_when_there_is_nothing_to_aggregate(tmp_path, capsys):
    assert main(["aggregates", "--out", str(tmp_path)]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress line
    assert message.startswith("python -m experiments: error: aggregates: no JSON file")
    assert not (tmp_path / "aggregates.md").exists()


def test_per_seed_shares_are_each_seeds_mean_on_the_common_scale():
    rule, reference = np.zeros(10), np.full(10, 2.0)
    entry = gaps.method_share("M", [np.full(10, 0.5), np.full(10, 1.5)], rule, reference,
                              n_resamples=100)
    assert entry["per_seed"] == [0.25, 0.75] and entry["share"][0] == pytest.approx(0.5)
    flat = gaps.task_entry(rule, rule, {"m": ("M", [rule])}, n_resamples=50)
    assert flat["methods"]["m"]["share"] == [None, None, None]
    assert gaps.share_cell(flat["methods"]["m"]) == "n/a"
