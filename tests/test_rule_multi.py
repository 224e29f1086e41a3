"""The training-free rule over K models (``"multi-rule"``): its search, routing, state, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from agents import cli
from agents.cli.route import EXIT_USAGE
from agents.routers import CV_GRIDS, ROUTERS, make_router, router_from_state
from agents.routers.evaluation import compare_with_rule
from agents.routers.rule import (
    CHEAPEST_ALONE,
    RuleMultiRouter,
    rule_from_record,
    rule_record,
)
from cost_envs.traces import TraceDataset

MODELS = ("small", "mid", "large")
EXAMPLE = Path(__file__).resolve().parents[1] / "cost_envs" / "data" / "example_traces.jsonl"


def banded(n: int = 150, seed: int = 0, accuracy: tuple[float, ...] = (0.0, 0.0, 0.0)
           ) -> TraceDataset:
    """Prompts of 1 to 40 words: ``small`` is right on the short third, ``mid`` on the
    short two thirds, ``large`` on all (costs 1, 3 and 10); ``accuracy`` adds luck."""
    rng = np.random.default_rng(seed)
    words = rng.integers(1, 41, size=n)
    prompts = tuple(f"q{i} " + "word " * int(k) for i, k in enumerate(words))
    band = np.digitize(words, np.quantile(words, [1 / 3, 2 / 3]))  # 0 short .. 2 long
    luck = rng.random((n, 3)) < np.asarray(accuracy)
    correct = np.column_stack([band <= j for j in range(3)]) | luck
    return TraceDataset(MODELS, tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 3)), np.ones((n, 3)),
                        cost=np.tile((1.0, 3.0, 10.0), (n, 1)))


def test_the_search_picks_longest_first_and_routes_lengths_in_bands_up_the_frontier():
    data = banded()
    router = make_router("multi-rule").fit(data)
    assert isinstance(router, RuleMultiRouter) and router.kind in ROUTERS
    assert router.member == "longest-first"
    assert router.train_aiq["longest-first"] > router.train_aiq["shortest-first"]
    order = np.argsort([len(p) for p in data.prompts], kind="stable")
    for lam in router.lams(data):  # at every lam: the longer the prompt, the dearer model
        assert (np.diff(router.route(data, lam)[order]) >= 0).all()
    # its sweep reaches the three models: every one is on the training frontier
    assert set(np.unique(router.sweep(data))) == {0, 1, 2}


def test_a_model_off_the_training_frontier_is_never_called():
    data = banded()
    # `mid` never right: dearer than `small` and no better, under the frontier
    correct = data.correct.copy()
    correct[:, 1] = False
    off = TraceDataset(MODELS, data.query_ids, data.prompts, correct.astype(float), correct,
                       data.input_tokens, data.output_tokens, cost=data.cost)
    router = make_router("multi-rule").fit(off)
    assert 1 not in set(np.unique(router.sweep(off)))
    assert router.chosen == router.member == "longest-first"


def test_where_the_cheapest_is_the_most_accurate_it_is_called_alone_and_said_so():
    data = banded()
    correct = np.ones_like(data.correct)  # `small` right everywhere: nothing to buy
    cheap = TraceDataset(MODELS, data.query_ids, data.prompts, correct.astype(float), correct,
                         data.input_tokens, data.output_tokens, cost=data.cost)
    router = make_router("multi-rule").fit(cheap)
    assert set(np.unique(router.sweep(cheap))) == {0}
    assert router.chosen == CHEAPEST_ALONE and CHEAPEST_ALONE in router.label


def test_with_two_models_it_is_the_two_model_rule():
    data = banded(accuracy=(0.2, 0.0, 0.0)).select_models(["small", "large"])
    k_rule = make_router("multi-rule").fit(data)
    two = make_router("rule", "small", "large").fit(data)
    assert k_rule.member == two.member
    assert k_rule.train_aiq == pytest.approx(two.train_aiq, abs=1e-12)
    # each lam's decisions are a threshold of the two-model rule's score
    scores = two.scores(data)
    for lam in k_rule.lams(data):
        strong = k_rule.route(data, lam) == 1
        if strong.any() and (~strong).any():
            assert scores[strong].min() >= scores[~strong].max()


def test_state_and_record_round_trip_and_bad_arrays_are_refused():
    data = banded()
    router = make_router("multi-rule").fit(data)
    config, arrays = router.to_state()
    again = router_from_state(config, arrays)
    np.testing.assert_array_equal(again.sweep(data, [0.0, 0.2, 1.0]),
                                  router.sweep(data, [0.0, 0.2, 1.0]))
    rule, lam = rule_from_record(json.loads(json.dumps(rule_record(router, 0.2))))
    assert isinstance(rule, RuleMultiRouter) and lam == 0.2
    with pytest.raises(ValueError, match="'accuracy' in \\[0, 1\\]"):
        router_from_state(config, {**arrays, "accuracy": np.array([0.5, 1.5, 0.2])})
    with pytest.raises(ValueError, match="'member'"):
        router_from_state(config, {**arrays, "member": np.array([7.0])})
    with pytest.raises(ValueError, match="members: expected distinct rules"):
        make_router("multi-rule", members=["tallest-first"])


def test_minus_rule_at_equal_cost_reads_the_rules_operating_points():
    data = banded()
    rule = make_router("multi-rule").fit(data)
    sweep = rule.sweep(data)
    kw = {"n_resamples": 200, "seed": 0}
    # a point of the rule's own sweep is level with it on every resample (a hull vertex
    # or under the hull: never above); the dearest model alone costs as much as the rule
    # calling it everywhere, and the rule gets there right as well
    own = sweep[:, sweep.shape[1] // 2]
    shuffled = np.random.default_rng(1).permutation(own)  # the same calls, lengths ignored
    out = compare_with_rule(data, {"own": own, "shuffled": shuffled}, sweep, **kw)
    assert out["own"]["accuracy"]["value"] <= 1e-12
    assert out["own"]["accuracy"]["ci"][1] <= 1e-12
    assert out["shuffled"]["accuracy"]["ci"][1] < 0  # the rule beats it at its cost
    with pytest.raises(ValueError, match="model indices"):
        compare_with_rule(data, {"own": own}, sweep + 5, **kw)
    with pytest.raises(ValueError, match="weak, strong"):
        compare_with_rule(data, {"own": own}, np.zeros(data.n_queries), **kw)


# ----------------------------------------------------------------------------- CLI
def route(capsys, *args: str) -> dict:
    assert cli.main(["route", *args, "--json", "--resamples", "60"]) == 0
    return json.loads(capsys.readouterr().out)


def test_route_train_and_score_set_a_k_model_router_beside_the_rule(tmp_path, capsys):
    save = tmp_path / "r"
    out = route(capsys, "train", "--data", str(EXAMPLE), "--save", str(save))
    test = out["test"]
    assert out["router"] == "multi-logistic" and "rule" in test["rows"]
    assert test["rule_label"].startswith("best training-free rule (chosen on training data:")
    assert test["verdict_vs_rule"] in ("beats", "loses", "not resolved")
    low, high = test["router_minus_rule_at_cost"]["accuracy"]["ci"]
    assert low <= test["router_minus_rule_at_cost"]["accuracy"]["value"] <= high
    # score sets the router beside the rule it was saved with, on the same numbers
    scored = route(capsys, "score", "--router", str(save), "--data", str(EXAMPLE),
                   "--held-out")
    assert scored["test"]["router_minus_rule_at_cost"] == test["router_minus_rule_at_cost"]
    assert scored["test"]["rows"]["rule"] == test["rows"]["rule"]
    assert cli.main(["route", "score", "--router", str(save), "--data", str(EXAMPLE),
                     "--held-out", "--resamples", "60"]) == 0
    text = capsys.readouterr().out
    assert "| best training-free rule (chosen on training data:" in text
    assert f"multi-logistic - best rule at the same cost: {test['verdict_vs_rule']}" in text


def test_the_rule_alone_has_no_rule_beside_it_and_no_cv(tmp_path, capsys):
    out = route(capsys, "train", "--data", str(EXAMPLE), "--save", str(tmp_path / "r"),
                "--router", "multi-rule")
    assert "rule" not in out["test"]["rows"] and out["rule_member"] in (
        "shortest-first", "longest-first")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["route", "train", "--data", str(EXAMPLE), "--save", str(tmp_path / "q"),
                  "--router", "multi-rule", "--cv", "3"])
    assert exit_.value.code == EXIT_USAGE
    assert "--router multi-rule chooses its rule" in capsys.readouterr().err


def test_the_help_lists_every_router_and_cv_setting_of_the_registry(capsys):
    with pytest.raises(SystemExit):
        cli.main(["route", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    help_of = text[text.index("the router of agents.routers.ROUTERS"):]
    listed = set(re.findall(r"[A-Za-z][\w-]*", help_of))
    assert set(ROUTERS) <= listed and {s for s, _ in CV_GRIDS.values()} <= listed
    assert "none for multi-rule, rule" in help_of
