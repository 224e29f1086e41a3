"""The routing report's K-model block (experiments/traces/multi.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agents.routers import SINGLE_MODELS
from agents.routers.evaluation import call_costs, rule_verdict
from cost_envs.traces import TraceDataset
from experiments.traces.heldout import Protocol, splits_of
from experiments.traces.multi import (
    HALFWAY,
    MULTI_ROWS,
    RULE_ROW,
    TARGETS,
    _out_of_fold,
    evaluate_multi,
    markdown,
)

MODELS = ("small", "mid", "large")
KINDS = ("capital of the country", "sum of the numbers", "integral of the series")


def crafted(n: int = 300, n_groups: int = 10, seed: int = 0) -> TraceDataset:
    """Three models; a query's words say the cheapest one that gets it right (95% luck)."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]
    prompts = tuple(f"what is the {KINDS[k]} {x}?" for k, x in zip(kind, noise, strict=True))
    correct = np.column_stack([(kind <= j) & (rng.random(n) < 0.95) for j in range(3)])
    return TraceDataset(MODELS, tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 3)), np.ones((n, 3)),
                        cost=np.tile((1.0, 3.0, 10.0), (n, 1)),
                        groups=tuple(f"g{i % n_groups}" for i in range(n)))


PROTOCOL = Protocol("group", 5, "5 folds by group")


@pytest.mark.parametrize("kind", ["multi-logistic", "multi-priced"])
def test_held_out_decisions_never_read_the_held_out_outcomes(kind: str) -> None:
    data = crafted()
    splits = splits_of(data, PROTOCOL)
    c = call_costs(data)
    base, chosen, lams = _out_of_fold(data, splits, c, kind, 3, "group")
    assert base.shape == (data.n_queries, len(TARGETS)) and len(chosen) == len(lams) == 5
    test = splits[2][1]
    correct = data.correct.copy()
    correct[test] = ~correct[test]
    flipped = dataclasses.replace(data, correct=correct, scores=correct.astype(float))
    again, chosen_again, lams_again = _out_of_fold(flipped, splits, c, kind, 3, "group")
    # every fold but the ones training on the flipped queries is unchanged; the fold that
    # holds them out routes them exactly as before
    np.testing.assert_array_equal(again[test], base[test])
    assert chosen_again[2] == chosen[2] and lams_again[2] == lams[2]
    assert not np.array_equal(again, base)  # the other folds did train on them


def test_on_three_models_the_router_beats_the_frontier_on_unseen_groups() -> None:
    data = crafted()
    result = evaluate_multi(data, PROTOCOL, n_resamples=200)
    assert result["resampled"] == "clusters" and result["units"] == 10
    assert result["models"] == list(MODELS) and result["held_out"] == data.n_queries
    for name in ("multi-logistic", "multi-logistic (cv)", "multi-priced"):
        row = result["rows"][name]
        assert row["verdict"] == "beats random"  # the single models' frontier, paired
        assert row["aiq"][f"minus_{SINGLE_MODELS}"]["ci"][0] > 0.05
        assert row["halfway"]["minus_frontier"]["accuracy"]["ci"][0] > 0
        # the two-model table's reference points, matched within each resample: the same
        # shares (share difference 0 on every resample) and the same cost (0 up to rounding)
        assert row["halfway"]["minus_random"]["strong_share"] == {"value": 0.0,
                                                                  "ci": [0.0, 0.0]}
        assert max(map(abs, row["halfway"]["minus_frontier"]["cost_per_query"]["ci"])) < 1e-12
        assert row["verdict_at_cost"] == "beats random"
        # calibrated on training for 5.5 per query (halfway from 1 to 10): on unseen groups
        # it lands above (training predictions are sharper) but far below `large` alone
        assert 5.5 < row["halfway"]["cost_per_query"]["value"] < 8.0
        assert len(row["halfway_lam"]) == 5
    assert len(result["rows"]["multi-logistic (cv)"]["cv"]) == 5
    assert "cv" not in result["rows"]["multi-logistic"]
    assert HALFWAY in TARGETS


def test_the_block_says_the_logs_have_two_models_and_reports_skips() -> None:
    data = crafted(150)
    result = evaluate_multi(data, PROTOCOL, n_resamples=50)
    text = "\n".join(markdown({"Crafted": result, "Elsewhere": {"skipped": "x not found"}}))
    assert "No shipped log has more than two models" in text
    assert text.count("| Crafted (150 queries, 10 groups resampled) |") == len(MULTI_ROWS)
    assert "| Elsewhere | skipped: x not found |" in text
    assert "l2 chosen per training fold" in text
    # the best training-free rule's row, and every learned row against it at its cost
    rule = result["rows"][RULE_ROW]
    assert len(rule["rule_members"]) == 5 and "minus_rule_at_cost" not in rule
    assert rule["label"].startswith("best training-free rule (chosen on ")
    assert f"| {rule['label']} |" in text and "accuracy - best rule at the same cost" in text
    for name, row in result["rows"].items():
        if name != RULE_ROW:
            diff = row["minus_rule_at_cost"]["accuracy"]
            assert row["verdict_vs_rule"] == rule_verdict(diff)
            assert f"{row['verdict_vs_rule']}: {diff['value']:.3f}" in text


@pytest.mark.parametrize("protocol", [Protocol("query", None, "half split")])
def test_a_query_split_resamples_queries(protocol) -> None:
    data = crafted(200)
    result = evaluate_multi(data, protocol, n_resamples=50)
    assert result["resampled"] == "queries" and result["units"] == result["held_out"] == 100
