"""Aggregates across envs and profiles: the gap-closed blocks, IQM and P(improvement)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from experiments.__main__ import main
from experiments.aggregates import runner as aggregates
from experiments.aggregates.report import render
from experiments.shared import gaps

rliable = pytest.importorskip("rliable", reason="rliable comes with the tune extra")


def _task(rng: np.random.Generator, lifts: dict[str, float], seeds: int = 5,
          gap: float = 0.3) -> dict:
    rule = rng.normal(0.5, 0.3, 120)
    methods = {key: (key.upper(), rule[None, :] + lift + rng.normal(0, 0.05, (seeds, 1))
                     + rng.normal(0, 0.1, (seeds, 120)))
               for key, lift in lifts.items()}
    return gaps.task_entry(rule, rule + gap, methods)


def _unresolved(rng: np.random.Generator, n: int = 120) -> dict:
    """A task whose planner is above the rule on the mean, by far less than the noise."""
    rule = rng.normal(0.5, 0.3, n)
    reference = rule + 0.02 + np.resize([0.5, -0.5], n)  # +0.02 +- 0.05 (one standard error)
    return gaps.task_entry(rule, reference, {"ppo": ("PPO", rule[None] + 0.01),
                                             "lora": ("LORA", rule[None] + 0.02)})


def _write(directory, name, experiment, tasks):
    (directory / name).write_text(json.dumps(
        {"other": 1, "gap_closed": gaps.block(experiment, "return", "rule", "planner", tasks)}))


def _group(tasks: dict, experiment: str = "e") -> dict:
    block = {**gaps.block(experiment, "return", "rule", "planner", tasks), "file": "x.json"}
    return aggregates.score_matrices([block])[experiment]


def test_without_task_noise_the_intervals_are_rliables_stratified_bootstrap():
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(0)
    x, y = rng.normal(0.3, 1, (5, 6)), rng.normal(0, 1, (4, 6))
    y[0, 0] = x[0, 0]  # a tie counts one half
    flat = np.ones(4)  # every episode scores the same: resampling episodes changes nothing
    tasks = {f"t{t}": gaps.task_entry(0 * flat, flat, {"x": ("X", x[:, [t]] * flat),
                                                        "y": ("Y", y[:, [t]] * flat)})
             for t in range(6)}
    group = _group(tasks)
    ours = aggregates.aggregate(group["matrices"], group["episodes"], reps=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        points, intervals = rly.get_interval_estimates(
            {"x": x, "y": y}, lambda s: np.array([metrics.aggregate_iqm(s),
                                                  metrics.aggregate_mean(s)]),
            reps=2000, random_state=np.random.RandomState(0))
        point, interval = rly.get_interval_estimates(
            {"xy": [x, y]}, metrics.probability_of_improvement, reps=2000,
            random_state=np.random.RandomState(0))
    for method in ("x", "y"):
        for k, name in enumerate(("iqm", "mean")):
            value = ours["methods"][method][name]
            assert value[0] == pytest.approx(points[method][k], abs=1e-6)  # 4-decimal scores
            assert value[1:] == pytest.approx(intervals[method][:, k], abs=0.06)
    improvement = ours["probability_of_improvement"]["x > y"]
    assert improvement[0] == pytest.approx(float(point["xy"]), abs=1e-12)
    assert improvement[1:] == pytest.approx(interval["xy"][:, 0], abs=0.04)


def _noisy_task(rng: np.random.Generator, seed_spread: float, n: int = 150) -> dict:
    rule = rng.normal(0.5, 0.3, n)
    reference = rule + 0.3 + rng.normal(0, 0.2, n)
    runs = (rule[None] + 0.15 + rng.normal(0, seed_spread, (5, 1))
            + rng.normal(0, 0.2, (1 if seed_spread == 0 else 5, n)))
    return gaps.task_entry(rule, reference, {"m": ("M", np.broadcast_to(runs, (5, n)))})


def test_seeds_that_agree_still_get_the_interval_of_the_tasks_luck():
    rng = np.random.default_rng(5)
    group = _group({"a": _noisy_task(rng, 0.0), "b": _noisy_task(rng, 0.0)})
    assert np.ptp(group["matrices"]["m"], axis=0).max() == 0  # every seed the same share
    result = aggregates.aggregate(group["matrices"], group["episodes"], reps=1000)
    for name in ("iqm", "mean"):
        point, low, high = result["methods"]["m"][name]
        assert high - low > 0.1 and low < point < high  # seeds-only gave [point, point]


def test_one_tables_mean_interval_is_the_two_level_bootstrap_of_its_share():
    # the mean over seeds of shares is the share of the seeds' mean, so on one table the
    # aggregate resamples what bootstrap_gap_closed's moments are the exact variances of,
    # seeds and episodes alike, over the table's fixed gap
    from cost_envs.metrics.bootstrap import fieller_interval, gap_closed_moments

    entry = _noisy_task(np.random.default_rng(6), 0.05)
    group = _group({"t": entry})
    mean = aggregates.aggregate(group["matrices"], group["episodes"], reps=20000)[
        "methods"]["m"]["mean"]
    assert mean[0] == pytest.approx(entry["methods"]["m"]["share"][0])
    data = group["episodes"]["t"]
    n, d, var_n, _, _ = gap_closed_moments(data["methods"]["m"], data["rule"],
                                           data["reference"])
    assert mean[1:] == pytest.approx(fieller_interval(n, d, var_n, 0.0, 0.0), abs=0.01)
    # the table's own interval also counts the gap's uncertainty: wider
    _, low, high = entry["methods"]["m"]["share"]
    assert high - low > mean[2] - mean[1]


def test_a_barely_resolved_gap_gives_ends_no_bootstrap_seed_moves():
    rng = np.random.default_rng(5)
    rule = rng.normal(0.5, 0.3, 150)
    reference = rule + 0.1 + rng.normal(0, 0.45, 150)  # resolved, but barely
    runs = rule[None] + 0.05 + rng.normal(0, 0.05, (5, 1)) + rng.normal(0, 0.2, (5, 150))
    entry = gaps.task_entry(rule, reference, {"m": ("M", runs)})
    group = _group({"t": entry})
    assert group["tasks"] == ["t"]
    # a percentile bootstrap of the share moved its ends by whole units with the seed here
    _, low, high = entry["methods"]["m"]["share"]
    assert entry == gaps.task_entry(rule, reference, {"m": ("M", runs)})  # no draws at all
    assert np.isfinite([low, high]).all() and high - low > 0.5
    ends = np.array([aggregates.aggregate(group["matrices"], group["episodes"], reps=20000,
                                          seed=seed)["methods"]["m"]["mean"][1:]
                     for seed in range(3)])
    assert np.ptp(ends, axis=0).max() < 0.02
    unresolved = _unresolved(rng)
    assert unresolved["methods"]["ppo"]["share"][1] is None  # no bounded interval: n/a
    assert _group({"u": unresolved, "t": entry})["unresolved_gap"] == ["u"]
    episodes = {"u": {"rule": gaps.decode_scores(unresolved["rule_scores"]),
                      "reference": gaps.decode_scores(unresolved["rule_scores"]),
                      "methods": {}}}
    with pytest.raises(ValueError, match=r"aggregates: u: the reference is not above the rule"):
        aggregates.resample(episodes, [], reps=500)


def test_report_ranks_the_method_that_closes_more_of_the_gap(tmp_path):
    rng = np.random.default_rng(1)
    _write(tmp_path, "table_a.json", "lora_ppo", {"A": _task(rng, {"ppo": 0.05, "lora": 0.2})})
    _write(tmp_path, "table_b.json", "lora_ppo", {"B": _task(rng, {"ppo": 0.05, "lora": 0.2}),
                                                   "C": _task(rng, {"ppo": 0.05, "lora": 0.2},
                                                              gap=-0.1),
                                                   "D": _unresolved(rng)})
    (tmp_path / "unrelated.json").write_text("[1, 2]")
    paths = aggregates.report(tmp_path, reps=500)
    assert sorted(p.name for p in paths) == sorted(aggregates.FILES)
    report = json.loads((tmp_path / "aggregates.json").read_text())["experiments"]["lora_ppo"]
    assert report["tasks"] == ["A", "B"] and report["without_gap"] == ["C"]
    assert report["unresolved_gap"] == ["D"] and report["same_tasks"] == {}
    ppo, lora = report["methods"]["ppo"], report["methods"]["lora"]
    assert ppo["runs"] == lora["runs"] == 5
    assert ppo["iqm"][2] < lora["iqm"][1]  # the intervals separate
    assert 0.1 < ppo["mean"][0] < 0.25 < 0.5 < lora["mean"][0] < 0.85
    better = report["probability_of_improvement"]["lora > ppo"]
    worse = report["probability_of_improvement"]["ppo > lora"]
    assert better[0] > 0.9 and better[0] + worse[0] == pytest.approx(1.0)
    text = (tmp_path / "aggregates.md").read_text()
    assert "| LORA | 5 |" in text and "Left out, the planner not above the rule: C." in text
    assert "not resolved (the 95% paired interval of planner minus rule over the episodes " \
           "includes 0; the table's shares have no bounded interval): D." in text


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


def test_a_v0_v1_pair_that_shares_its_tasks_is_counted_once_as_the_newer_version(tmp_path):
    rng = np.random.default_rng(4)
    _write(tmp_path, "table_a.json", "lora_ppo", {"FlightPlanner-v0": _task(rng, {"m": 0.1})})
    _write(tmp_path, "table_b.json", "lora_ppo", {"FlightPlanner-v1": _task(rng, {"m": 0.1}),
                                                  "ToolBench-v0": _task(rng, {"m": 0.1})})
    _write(tmp_path, "corl.json", "corl", {
        "ExpertRouting-v0/mixed/low": _task(rng, {"m": 0.1}),
        "ExpertRouting-v0/aime/low": _task(rng, {"m": 0.1}),  # no v1 twin: kept
        "ExpertRouting-v1/mixed/low": _unresolved(rng),  # the twin, even unresolved, wins
        "ExpertRouting-v1/aime/high": _task(rng, {"m": 0.1})})
    groups = aggregates.score_matrices(aggregates.read_blocks(tmp_path))
    lora = groups["lora_ppo"]
    assert lora["tasks"] == ["FlightPlanner-v1", "ToolBench-v0"]
    assert lora["same_tasks"] == {"FlightPlanner-v0": "FlightPlanner-v1"}
    assert lora["matrices"]["m"].shape == (5, 2) and list(lora["episodes"]) == lora["tasks"]
    corl = groups["corl"]
    assert corl["tasks"] == ["ExpertRouting-v0/aime/low", "ExpertRouting-v1/aime/high"]
    assert corl["same_tasks"] == {"ExpertRouting-v0/mixed/low": "ExpertRouting-v1/mixed/low"}
    assert corl["unresolved_gap"] == ["ExpertRouting-v1/mixed/low"]
    aggregates.report(tmp_path, reps=200)
    assert "same questions and luck as a newer version's task of this experiment (pooling " \
           "both would count them twice): FlightPlanner-v0 (as FlightPlanner-v1)." \
           in (tmp_path / "aggregates.md").read_text()


def test_an_experiment_without_per_episode_scores_is_named_not_pooled(tmp_path):
    rng = np.random.default_rng(7)
    old = gaps.block("corl", "accuracy", "rule", "planner", {"t": _task(rng, {"m": 0.1})})
    for entry in old["tasks"].values():  # as written before issue #23
        del entry["rule_scores"], entry["reference_scores"]
        for method in entry["methods"].values():
            del method["seed_scores"]
    (tmp_path / "corl_tiers.json").write_text(json.dumps({"gap_closed": old}))
    with pytest.raises(ValueError, match=r"nothing to pool\. corl: its .* rerun the experiment "
                                         r"\(corl_tiers.json\)\.$"):
        aggregates.report(tmp_path, reps=200)
    _write(tmp_path, "table_a.json", "lora_ppo", {"A": _task(rng, {"m": 0.1})})
    aggregates.report(tmp_path, reps=200)
    report = json.loads((tmp_path / "aggregates.json").read_text())
    assert list(report["experiments"]) == ["lora_ppo"] and list(report["not_aggregated"]) == [
        "corl"]
    assert "## corl\n\nNot aggregated: its gap_closed blocks have no per-episode scores" in (
        tmp_path / "aggregates.md").read_text()


def test_the_intervals_are_seeded_and_leave_numpys_global_generator_alone():
    rng = np.random.default_rng(3)
    group = _group({t: _task(rng, {"a": 0.2, "b": 0.0}) for t in "pqrs"})
    np.random.seed(1)
    first = aggregates.aggregate(group["matrices"], group["episodes"], reps=300)
    np.random.seed(2)
    before = np.random.get_state()[1].copy()
    assert aggregates.aggregate(group["matrices"], group["episodes"], reps=300) == first
    assert (np.random.get_state()[1] == before).all()


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
    short = _task(rng, {"m": 0.1})
    short["methods"]["m"]["seed_scores"][2] = "0.5 0.5"
    (tmp_path / "b.json").write_text(json.dumps({"gap_closed": gaps.block(
        "e", "return", "rule", "planner", {"u": short})}))
    with pytest.raises(ValueError, match=r"e u: m has seed_scores of \[2, 120\] episodes for "
                                         r"5 seeds, expected 120 episodes for 5 seeds"):
        aggregates.score_matrices(aggregates.read_blocks(tmp_path))
    short["methods"]["m"]["seed_scores"][2] = "0.5 x"
    (tmp_path / "b.json").write_text(json.dumps({"gap_closed": gaps.block(
        "e", "return", "rule", "planner", {"u": short})}))
    with pytest.raises(ValueError, match="decode_scores: expected a string of space-separated"):
        aggregates.score_matrices(aggregates.read_blocks(tmp_path))


def test_cli_says_in_one_line_when_there_is_nothing_to_aggregate(tmp_path, capsys):
    assert main(["aggregates", "--out", str(tmp_path)]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress line
    assert message.startswith("python -m experiments: error: aggregates: no JSON file")
    assert not (tmp_path / "aggregates.md").exists()


def test_per_seed_shares_are_each_seeds_mean_on_the_common_scale():
    rule, reference = np.zeros(10), np.full(10, 2.0)
    entry = gaps.method_share("M", [np.full(10, 0.5), np.full(10, 1.5)], rule, reference)
    assert entry["per_seed"] == [0.25, 0.75] and entry["share"][0] == pytest.approx(0.5)
    flat = gaps.task_entry(rule, rule, {"m": ("M", [rule])})
    assert flat["methods"]["m"]["share"] == [None, None, None]
    assert gaps.share_cell(flat["methods"]["m"]) == "n/a"


def test_per_episode_scores_are_kept_to_four_decimals_in_one_json_line_per_row():
    assert gaps.encode_scores([0.86488, 1.0, 0.0, -0.00001, -0.12346, 12.5]) \
        == "0.8649 1 0 0 -0.1235 12.5"
    np.testing.assert_array_equal(gaps.decode_scores("0.8649 1 0 -0.1235"),
                                  [0.8649, 1.0, 0.0, -0.1235])
    with pytest.raises(ValueError, match=r"encode_scores: expected finite scores, got \[nan\]"):
        gaps.encode_scores([1.0, float("nan")])
    rng = np.random.default_rng(8)
    rule, reference, runs = (rng.normal(0, 1, 2000), rng.normal(1, 1, 2000),
                             rng.normal(0.4, 1, (5, 2000)))
    entry = gaps.task_entry(rule, reference, {"m": ("M", runs)})
    assert len(json.dumps(entry, indent=2).splitlines()) < 40  # not one line per episode
    decoded = np.array([gaps.decode_scores(text) for text in entry["methods"]["m"]["seed_scores"]])
    assert np.abs(decoded - runs).max() <= 5e-5 + 1e-12
    assert np.abs(decoded.mean(axis=1) - runs.mean(axis=1)).max() < 5e-6  # errors average out
    np.testing.assert_allclose(gaps.decode_scores(entry["reference_scores"]), reference,
                               atol=5e-5 + 1e-12)


@pytest.mark.slow  # two builds at the committed 200,000 replicates: about a minute each
def test_the_committed_results_aggregate_to_the_committed_report_whatever_the_seed():
    """Rebuilt from the committed JSON: every interval finite, the committed report, and
    every interval end within 0.01 of the one another bootstrap seed gives.

    Accuracy scores (0/1) once gave a draw whose ``(reference - rule) @ w`` was a rounding
    error above 0 while the gap the shares divide by was 0: a NaN mean interval (CORL).
    """
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    rebuilt = aggregates.build(results)
    assert rebuilt["experiments"] and not rebuilt["not_aggregated"]
    for experiment in rebuilt["experiments"].values():
        for summary in experiment["methods"].values():
            assert np.isfinite(summary["iqm"]).all() and np.isfinite(summary["mean"]).all()
    # The report's figures (two decimals): the JSON's last digits move with BLAS threads.
    assert render(rebuilt) == (results / "aggregates.md").read_text(encoding="utf-8")
    groups = aggregates.score_matrices(aggregates.read_blocks(results))
    for name, experiment in rebuilt["experiments"].items():
        other = aggregates.aggregate(groups[name]["matrices"], groups[name]["episodes"],
                                     seed=1)
        for kind in ("methods", "probability_of_improvement"):
            for key, value in experiment[kind].items():
                ends = [value[1:]] if kind != "methods" else [value["iqm"][1:],
                                                                value["mean"][1:]]
                again = ([other[kind][key][1:]] if kind != "methods"
                         else [other[kind][key]["iqm"][1:], other[kind][key]["mean"][1:]])
                assert np.abs(np.subtract(ends, again)).max() <= 0.01, (name, key)


def test_drawn_shares_are_exact_so_every_cpu_draws_the_same_ties():
    """Each drawn share is the exact ratio of whole sums, rounded once: no CPU's BLAS order.

    Means taken as float products (``counts / n @ scores``) moved a share's last bit with
    the BLAS kernel, and equal runs stopped tying (P(X > Y) 0.03 apart between a Haswell
    and an AVX-512 kernel on the committed results).
    """
    from fractions import Fraction

    from cost_envs.metrics.bootstrap import resample_counts

    rng = np.random.default_rng(5)
    n, reps = 37, 40
    rule = np.round(rng.normal(0.0, 1.0, n), 4)
    reference = np.round(rule + rng.uniform(0.0, 2.0, n), 4)
    runs = np.round(rule + rng.uniform(-1.0, 2.0, (3, n)), 4)
    runs[2] = runs[0]  # two seeds with the same episodes
    episodes = {"t": {"rule": rule, "reference": reference, "methods": {"m": runs}}}
    shares = aggregates.resample(episodes, ["m"], reps=reps, seed=11)["m"][:, :, 0]

    draws = np.random.default_rng(11)  # the draws resample makes, in its order
    counts = resample_counts(draws, reps, n).astype(int)
    chosen = draws.integers(0, 3, size=(reps, 3))
    units = [[Fraction(str(v)) for v in row] for row in (rule, reference, *runs)]
    gap = sum(units[1]) - sum(units[0])
    for r in range(reps):
        drawn_rule = sum(c * u for c, u in zip(counts[r], units[0], strict=True))
        for s in range(3):
            drawn = sum(c * u for c, u in zip(counts[r], units[2 + chosen[r, s]], strict=True))
            assert shares[r, s] == float((drawn - drawn_rule) / gap), (r, s)


def test_scores_with_more_decimals_than_kept_are_refused_by_name():
    episodes = {"ToolBench-v0": {"rule": np.array([0.0, 0.12345]), "reference": np.ones(2),
                                 "methods": {"m": np.ones((1, 2))}}}
    with pytest.raises(ValueError, match=r"ToolBench-v0: scores \[0.12345\] have more than 4"):
        aggregates.resample(episodes, ["m"], reps=10)
