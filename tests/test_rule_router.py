"""The training-free rule router (``"rule"``): its search, its inputs, its state, its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents import cli
from agents.cli.route import EXIT_USAGE
from agents.routers import ROUTERS, RuleRouter, calibrate_share, make_router, router_from_state
from agents.routers.evaluation import compare_with_rule, curve_metrics
from agents.routers.rule import MEMBERS
from cost_envs.traces import TraceDataset
from experiments.traces.heldout import Protocol, _out_of_fold, evaluate, markdown

WEAK, STRONG = "weak-model", "strong-model"
EXAMPLE = Path(__file__).resolve().parents[1] / "cost_envs" / "data" / "example_traces.jsonl"


def lengths_dataset(weak_fails_short: bool, n: int = 80, seed: int = 0) -> TraceDataset:
    """Prompts of 1 to 40 words; the weak model fails the short half (or the long half).

    The strong model is always right and ten times dearer, so the best rule sends the
    prompts the weak model fails to the strong one first.
    """
    rng = np.random.default_rng(seed)
    words = rng.integers(1, 41, size=n)
    prompts = tuple(f"q{i} " + "word " * int(k) for i, k in enumerate(words))
    short = words <= np.median(words)
    weak_right = ~short if weak_fails_short else short
    correct = np.column_stack([weak_right, np.ones(n, dtype=bool)])
    cost = np.column_stack([np.full(n, 1.0), np.full(n, 10.0)])
    return TraceDataset((WEAK, STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=cost)


def with_outcomes_of(data: TraceDataset, other: TraceDataset, rows: np.ndarray
                     ) -> TraceDataset:
    """``data`` whose ``rows`` carry ``other``'s outcomes (same prompts, costs)."""
    correct = data.correct.copy()
    correct[rows] = other.correct[rows]
    return TraceDataset(data.models, data.query_ids, data.prompts, correct.astype(float),
                        correct, data.input_tokens, data.output_tokens, cost=data.cost)


# --------------------------------------------------------------------------- the search
@pytest.mark.parametrize(("weak_fails_short", "expected"),
                         [(True, "shortest-first"), (False, "longest-first")])
def test_search_picks_the_length_order_the_weak_model_fails_on(weak_fails_short, expected):
    data = lengths_dataset(weak_fails_short)
    router = make_router("rule", WEAK, STRONG).fit(data)
    assert isinstance(router, RuleRouter) and router.member == expected
    other = next(m for m in MEMBERS if m != expected)
    assert router.train_aiq[expected] > router.train_aiq[other]
    assert router.label == f"best training-free rule (chosen on training data: {expected})"
    # the score is monotone in the chosen order: the threshold curves and the
    # calibration read it as any score (half the queries at a 50% share)
    length = np.array([len(p) for p in data.prompts])
    order = np.argsort(length, kind="stable")
    scores = router.scores(data)[order]
    steps = np.diff(scores)
    assert ((steps <= 0) if expected == "shortest-first" else (steps >= 0)).all()
    assert calibrate_share(router.scores(data), 0.5).strong_share == pytest.approx(0.5, abs=0.1)


def test_the_choice_reads_the_training_rows_only():
    short, long = lengths_dataset(True), lengths_dataset(False)
    train, test = np.arange(0, 40), np.arange(40, 80)
    # the same training rows (weak fails short prompts), opposite test outcomes
    mixed = with_outcomes_of(short, long, test)
    fitted = [make_router("rule", WEAK, STRONG).fit(d.subset(train)) for d in (short, mixed)]
    assert [r.member for r in fitted] == ["shortest-first"] * 2
    np.testing.assert_array_equal(fitted[0].scores(short.subset(test)),
                                  fitted[1].scores(mixed.subset(test)))
    # the held-out tables fit it per training fold: the test fold's outcomes (which
    # favour longest-first) never reach the choice
    members: list[str] = []
    _out_of_fold(mixed, [(train, test)], "rule", {}, WEAK, STRONG, members=members)
    assert members == ["shortest-first"]


# --------------------------------------------------------------------------- router - rule
def test_router_minus_rule_at_equal_cost_reads_the_rules_curve():
    data = lengths_dataset(True)  # the weak model fails exactly the short prompts
    short = np.array([len(p) for p in data.prompts]) <= np.median(
        [len(p) for p in data.prompts])
    shortest = make_router("rule", WEAK, STRONG, members=["shortest-first"]).fit(data)
    longest = make_router("rule", WEAK, STRONG, members=["longest-first"]).fit(data)
    routers = {"short strong": short.astype(np.int64), "long strong": (~short).astype(np.int64)}
    kw = {"weak": WEAK, "strong": STRONG, "n_resamples": 200, "seed": 0}
    against_good = compare_with_rule(data, routers, shortest.scores(data), **kw)
    # routing the short half strong is a point of the shortest-first curve, a vertex of
    # its hull: exactly level with it, on every resample
    level = against_good["short strong"]["accuracy"]
    assert abs(level["value"]) < 1e-12 and max(map(abs, level["ci"])) < 1e-12
    # the long half costs as much and gains nothing: the rule beats it at that cost
    assert against_good["long strong"]["accuracy"]["ci"][1] < 0
    # against the wrong rule, the short-half router wins at its cost
    against_bad = compare_with_rule(data, routers, longest.scores(data), **kw)
    assert against_bad["short strong"]["accuracy"]["ci"][0] > 0


def test_aiq_minus_rule_pairs_the_rules_curve_on_the_same_resamples():
    data = lengths_dataset(True)
    rule = make_router("rule", WEAK, STRONG).fit(data).scores(data)
    noise = np.random.default_rng(1).normal(size=data.n_queries)
    table = curve_metrics(data, {"rule": rule, "copy": rule.copy(), "noise": noise}, WEAK,
                          STRONG, n_resamples=200, reference="rule")
    # the same curve as the rule: 0 on every resample, not merely on average
    same = table["copy"]["minus_rule"]["aiq"]
    assert same["value"] == 0.0 and same["ci"] == [0.0, 0.0]
    # another router: its AIQ minus the rule's, the rule's own entry has no difference
    diff = table["noise"]["minus_rule"]["aiq"]
    assert diff["value"] == pytest.approx(table["noise"]["aiq"]["value"]
                                          - table["rule"]["aiq"]["value"], abs=1e-12)
    assert diff["ci"][1] < 0 and "minus_rule" not in table["rule"]


def test_route_report_sets_the_router_beside_the_rule_on_its_one_draw(monkeypatch):
    import agents.routers.bootstrap as bootstrap
    import agents.routers.evaluation as evaluation
    from agents.routers.report import route_report

    data = lengths_dataset(True, n=120)
    rule = make_router("rule", WEAK, STRONG).fit(data).scores(data)
    scores = np.random.default_rng(2).normal(size=data.n_queries)  # a router unlike it
    kw = {"split_by": "query", "n_resamples": 60, "seed": 4}
    # the comparison alone, drawing its own resamples and the rule's curve on them
    decisions = evaluation.threshold_routing(data, scores, 0.0, WEAK, STRONG)
    alone = compare_with_rule(data, {"router": decisions}, rule, weak=WEAK,
                              strong=STRONG, **{k: v for k, v in kw.items() if k != "split_by"})
    calls = {"draws": 0, "rule's own curve": 0}
    draws, curve_points = bootstrap.draws, evaluation.curve_points

    def counted(*args, **kwargs):
        calls["draws"] += 1  # one draw of resamples per call
        yield from draws(*args, **kwargs)

    def rule_curve_again(*args, **kwargs):
        calls["rule's own curve"] += 1  # RuleAtCost computing the rule's curve itself
        return curve_points(*args, **kwargs)

    monkeypatch.setattr(bootstrap, "draws", counted)
    monkeypatch.setattr(evaluation, "curve_points", rule_curve_again)
    report = route_report(data, scores, 0.0, WEAK, STRONG, data.cost, rule=(rule, 0.5), **kw)
    # one draw, on which the rule's curve points are the curve metrics' (never again)
    assert calls == {"draws": 1, "rule's own curve": 0}
    # and the same numbers as the comparison that drew its own: the draws of one seed
    versus = report["router_minus_rule_at_cost"]["accuracy"]
    assert versus == alone["router"]["accuracy"] and versus["ci"][0] < versus["ci"][1]
    assert report["verdict_vs_rule"] == "loses"  # noise against the rule that fits


def test_held_out_table_leads_with_same_cost_and_has_aiq_minus_rule():
    data = lengths_dataset(True, n=160)
    # the rule and two learned routers: the columns are the table's, whichever routers
    result = evaluate(data, Protocol("query", 2, "2 folds by query"), n_resamples=50,
                      routers=("logistic", "knn", "rule"))
    routers = result["routers"]
    assert sorted(routers) == ["knn", "logistic", "rule"]
    rule_aiq = routers["rule"]["curve"]["aiq"]["value"]
    assert "minus_rule" not in routers["rule"]["curve"]  # the rule's own cell: empty
    for name, entry in routers.items():
        if name != "rule":
            minus = entry["curve"]["minus_rule"]["aiq"]
            assert minus["value"] == pytest.approx(entry["curve"]["aiq"]["value"] - rule_aiq,
                                                   abs=1e-12), name
            assert minus["ci"][0] <= minus["value"] <= minus["ci"][1]
    lines = markdown("lengths", result)
    header = next(line for line in lines if line.startswith("| Router |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[1:3] == ["accuracy - random at the same cost (paired)",
                            "accuracy - best rule at the same cost (paired)"]
    assert columns[-2:] == ["AIQ - random (paired)", "AIQ - best rule (paired)"]
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
             for line in lines if line.startswith("| ") and line.count("|") == len(columns) + 1}
    logistic = cells["logistic"]
    at_cost = routers["logistic"]["point"]["minus_random_at_cost"]["accuracy"]["value"]
    assert logistic[1].startswith(f"{at_cost:.3f}")
    aiq_minus_rule = routers["logistic"]["curve"]["minus_rule"]["aiq"]["value"]
    assert logistic[-1].startswith(f"{aiq_minus_rule:.3f}")
    rule_row = next(v for k, v in cells.items() if k.startswith("best training-free rule"))
    assert rule_row[2] == rule_row[-1] == ""
    prose = next(line for line in lines if line.startswith("Accuracy minus random routing"))
    assert "**logistic**: at the same cost, " in prose


# --------------------------------------------------------------------------- the family
def test_registered_and_built_by_name():
    assert ROUTERS["rule"] is RuleRouter
    router = make_router("rule", WEAK, STRONG, members=["longest-first"])
    assert router.models == (WEAK, STRONG) and router.members == ("longest-first",)
    assert router.fit(lengths_dataset(True)).member == "longest-first"  # the only one searched
    with pytest.raises(ValueError, match="two models"):
        make_router("rule", WEAK)
    with pytest.raises(ValueError, match="call fit first"):
        _ = make_router("rule", WEAK, STRONG).member


# --------------------------------------------------------------------------- state
def test_state_round_trips_bit_for_bit():
    data = lengths_dataset(False)
    router = make_router("rule", WEAK, STRONG).fit(data)
    config, arrays = router.to_state()
    loaded = router_from_state(json.loads(json.dumps(config)), arrays)
    assert isinstance(loaded, RuleRouter) and loaded.member == "longest-first"
    again, again_arrays = loaded.to_state()
    assert again == config and sorted(again_arrays) == sorted(arrays) == ["mean", "member",
                                                                          "std"]
    for name, values in arrays.items():
        assert again_arrays[name].tobytes() == values.tobytes()
    assert loaded.predict(data).tobytes() == router.predict(data).tobytes()


def test_bad_state_names_the_bad_value():
    config, arrays = make_router("rule", WEAK, STRONG).fit(lengths_dataset(True)).to_state()
    with pytest.raises(ValueError, match=r"members: expected distinct rules .*'median-first'"):
        router_from_state({**config, "members": ["median-first"]}, arrays)
    with pytest.raises(ValueError, match=r"arrays: 'member': expected one index .*got \[5\.0\]"):
        router_from_state(config, {**arrays, "member": np.array([5.0])})
    with pytest.raises(ValueError, match=r"'member'.*among the members \['longest-first'\]"):
        router_from_state({**config, "members": ["longest-first"]}, arrays)  # chose shortest


# --------------------------------------------------------------------------- CLI
def test_cli_trains_saves_and_scores_the_rule(tmp_path, capsys):
    save = tmp_path / "rule"
    common = ["--json", "--resamples", "50"]
    assert cli.main(["route", "train", "--data", str(EXAMPLE), "--weak", "gpt-4.1-nano",
                     "--strong", "gpt-4.1", "--router", "rule", "--save", str(save),
                     *common]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["router"] == "rule" and trained["rule_member"] in MEMBERS
    label = trained["test"]["rows"]["router"]["label"]
    assert label == f"best training-free rule (chosen on training data: " \
                    f"{trained['rule_member']})"
    assert 0.0 < trained["test"]["rows"]["router"]["strong_share"]["value"] < 1.0
    assert cli.main(["route", "score", "--router", str(save), "--data", str(EXAMPLE),
                     *common]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["router"] == "rule" and scored["rule_member"] == trained["rule_member"]
    assert scored["threshold"] == trained["threshold"]
    # its fit is the search: --cv has nothing to choose, and says so in one line
    with pytest.raises(SystemExit) as stopped:
        cli.main(["route", "train", "--data", str(EXAMPLE), "--weak", "gpt-4.1-nano",
                  "--strong", "gpt-4.1", "--router", "rule", "--cv", "3", "--save",
                  str(tmp_path / "cv")])
    assert stopped.value.code == EXIT_USAGE and not (tmp_path / "cv.json").exists()
    assert "--router rule chooses its rule on the training split" in capsys.readouterr().err


def test_the_cli_sets_a_learned_router_beside_the_rule_of_its_training_split(tmp_path,
                                                                            capsys):
    common = ["--data", str(EXAMPLE), "--weak", "gpt-4.1-nano", "--strong", "gpt-4.1",
              "--resamples", "50"]
    assert cli.main(["route", "train", *common, "--save", str(tmp_path / "lr"),
                     "--json"]) == 0
    test = json.loads(capsys.readouterr().out)["test"]
    assert test["rows"]["rule"]["label"].startswith("best training-free rule (chosen on")
    low, high = test["router_minus_rule_at_cost"]["accuracy"]["ci"]
    assert test["verdict_vs_rule"] == ("beats" if low > 0 else "loses" if high < 0
                                       else "not resolved")
    # AIQ - rule is paired on the resamples; its value is the two curves' difference
    assert test["router_minus_rule"]["aiq"]["value"] == pytest.approx(
        test["rows"]["router"]["aiq"]["value"] - test["rows"]["rule"]["aiq"]["value"])
    assert 0.0 < test["rows"]["rule"]["strong_share"]["value"] < 1.0  # calibrated, not an end
    # the rule's own scores, not the router's: its curve and its routing differ
    assert test["rows"]["rule"]["aiq"] != test["rows"]["router"]["aiq"]
    assert test["router_minus_rule_at_cost"]["accuracy"]["ci"] != [0.0, 0.0]
    # the table: the rule's row and the router's paired row against it
    assert cli.main(["route", "train", *common, "--save", str(tmp_path / "lr2")]) == 0
    table = capsys.readouterr().out
    assert "| best training-free rule (chosen on training data: " in table
    assert f"- best rule at the same cost (paired): {test['verdict_vs_rule']} |" in table
    # the rule travels with the router: route score sets it beside the same rule
    assert cli.main(["route", "score", "--router", str(tmp_path / "lr"), "--data",
                     str(EXAMPLE), "--held-out", "--resamples", "50", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["test"] == test
    saved = json.loads((tmp_path / "lr.json").read_text())
    saved["rule"]["threshold"] = "high"  # a hand-edited file: one clear line
    (tmp_path / "lr.json").write_text(json.dumps(saved))
    with pytest.raises(SystemExit):
        cli.main(["route", "score", "--router", str(tmp_path / "lr"), "--data", str(EXAMPLE)])
    err = capsys.readouterr().err.strip()
    assert "cannot load the router's rule" in err and "'high'" in err and "\n" not in err
    # the rule is not set beside itself
    assert cli.main(["route", "train", *common, "--router", "rule", "--save",
                     str(tmp_path / "rule"), "--json"]) == 0
    assert "rule" not in json.loads(capsys.readouterr().out)["test"]["rows"]
