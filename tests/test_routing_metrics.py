"""PGR, APGR, CPT on hand-computed curves; random routing; the oracle; the bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from cost_envs.metrics.routing import (
    apgr,
    bootstrap_routing,
    cpt,
    oracle_point,
    oracle_scores,
    pgr,
    random_routing_curve,
    routing_curve,
)

# Four queries: weak right only on q0, strong right on q0-q2 (acc 0.25 vs 0.75).
WEAK = np.array([1, 0, 0, 0], dtype=bool)
STRONG = np.array([1, 1, 1, 0], dtype=bool)
SCORES = np.array([0.1, 0.9, 0.5, 0.3])  # routing order q1, q2, q3, q0


def test_hand_computed_curve() -> None:
    curve = routing_curve(SCORES, WEAK, STRONG, np.ones(4), np.full(4, 10.0))
    np.testing.assert_allclose(curve.strong_share, [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(curve.accuracy, [0.25, 0.5, 0.75, 0.75, 0.75])
    np.testing.assert_allclose(curve.pgr, [0, 0.5, 1, 1, 1])
    np.testing.assert_allclose(curve.cost, [1, 3.25, 5.5, 7.75, 10])
    # 0.25 * (0 + .5) / 2 + 0.25 * (.5 + 1) / 2 + 0.25 + 0.25
    assert curve.apgr == pytest.approx(0.75)
    assert curve.cpt(0.5) == pytest.approx(0.25)
    assert curve.cpt(0.8) == pytest.approx(0.25 + 0.3 / 0.5 * 0.25)  # interpolated: 0.4
    assert curve.cpt(1.0) == pytest.approx(0.5)
    assert (curve.weak_accuracy, curve.strong_accuracy) == (0.25, 0.75)


def test_tied_scores_are_one_point_joined_by_a_line() -> None:
    curve = routing_curve([0.1, 0.9, 0.5, 0.5], WEAK, STRONG)
    np.testing.assert_allclose(curve.strong_share, [0, 0.25, 0.75, 1])
    np.testing.assert_allclose(curve.accuracy, [0.25, 0.5, 0.75, 0.75])
    # between .25 and .75 the line is the expected accuracy of breaking the tie at random
    assert curve.apgr == pytest.approx(0.25 * 0.5 / 2 + 0.5 * 1.5 / 2 + 0.25)
    assert curve.cpt(0.75) == pytest.approx(0.25 + 0.25 / 0.5 * 0.5)


def test_random_routing_is_exactly_the_diagonal() -> None:
    rng = np.random.default_rng(0)
    weak, strong = rng.random(500) < 0.6, rng.random(500) < 0.8
    curve = random_routing_curve(weak, strong)
    np.testing.assert_allclose(curve.strong_share, [0, 1])
    assert curve.apgr == pytest.approx(0.5)
    for level in (0.3, 0.5, 0.8):
        assert curve.cpt(level) == pytest.approx(level)
    # and random score orders average to it
    values = [routing_curve(rng.random(500), weak, strong).apgr for _ in range(200)]
    assert np.mean(values) == pytest.approx(0.5, abs=0.01)


def test_oracle() -> None:
    rng = np.random.default_rng(1)
    weak, strong = rng.random(200) < 0.5, rng.random(200) < 0.7
    share, accuracy = oracle_point(weak, strong)
    assert share == pytest.approx(np.mean(strong & ~weak))
    assert accuracy == pytest.approx(np.mean(strong | weak))
    curve = routing_curve(oracle_scores(weak, strong), weak, strong)
    assert curve.max_accuracy() == pytest.approx(accuracy)
    assert curve.cpt(1.0) <= share + 1e-12
    best_other = max(routing_curve(rng.random(200), weak, strong).apgr for _ in range(300))
    assert curve.apgr > best_other
    assert curve.apgr > 1.0  # the models err on different queries: PGR goes above 1


def test_pgr_needs_a_positive_gap() -> None:
    with pytest.raises(ValueError, match="PGR is undefined"):
        routing_curve(SCORES, STRONG, WEAK).apgr  # noqa: B018
    with pytest.raises(ValueError, match="PGR is undefined"):
        pgr([0.5], 0.5, 0.5)
    assert np.isnan(cpt([0, 1], [0, 0.5], 0.8))  # never reached
    assert apgr([0, 0.5, 1], [0, 1, 1]) == pytest.approx(0.75)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="scores: expected shape"):
        routing_curve([1, 2], WEAK, STRONG)
    with pytest.raises(ValueError, match="two non-empty 1-d arrays"):
        routing_curve(SCORES, WEAK, STRONG[:3])
    with pytest.raises(ValueError, match="scores in"):
        routing_curve(SCORES, WEAK * 2.0, STRONG)
    with pytest.raises(ValueError, match="finite"):
        routing_curve([0, np.nan, 1, 2], WEAK, STRONG)
    with pytest.raises(ValueError, match="reference"):
        bootstrap_routing({"a": SCORES}, WEAK, STRONG, reference="b")
    with pytest.raises(ValueError, match="levels"):
        bootstrap_routing({"a": SCORES}, WEAK, STRONG, levels=(1.5,))
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_routing({"a": SCORES}, WEAK, STRONG, n_resamples=0)


# ---------------------------------------------------------------------------- bootstrap
def data(n: int = 300, seed: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    difficulty = rng.random(n)
    weak = rng.random(n) > difficulty
    strong = rng.random(n) > difficulty * 0.5
    return difficulty + rng.normal(0, 0.05, n), weak, strong


def test_bootstrap_matches_explicit_resamples() -> None:
    scores, weak, strong = data()
    n = len(scores)
    out = bootstrap_routing({"learned": scores}, weak, strong, n_resamples=50, seed=7)
    counts = np.random.default_rng(7).multinomial(n, np.full(n, 1 / n), size=50)
    explicit = {"apgr": [], "cpt_80": []}
    for row in counts:
        idx = np.repeat(np.arange(n), row)
        curve = routing_curve(scores[idx], weak[idx], strong[idx])
        explicit["apgr"].append(curve.apgr)
        explicit["cpt_80"].append(curve.cpt(0.8))
    for key, values in explicit.items():
        np.testing.assert_allclose(out["learned"][key]["ci"],
                                   np.percentile(values, [2.5, 97.5]), rtol=1e-9)
    point = routing_curve(scores, weak, strong)
    assert out["learned"]["apgr"]["value"] == pytest.approx(point.apgr)
    assert out["learned"]["cpt_50"]["value"] == pytest.approx(point.cpt(0.5))


def test_bootstrap_random_oracle_and_paired_differences() -> None:
    scores, weak, strong = data()
    routers = {"learned": scores, "random": None, "oracle": oracle_scores(weak, strong)}
    out = bootstrap_routing(routers, weak, strong, n_resamples=400, seed=0, reference="random")
    rnd = out["random"]
    assert rnd["apgr"]["value"] == 0.5 and rnd["cpt_80"]["value"] == 0.8
    # exact expectations on every resample too: its intervals are points
    assert rnd["apgr"]["ci"] == [0.5, 0.5] and rnd["cpt_80"]["ci"] == [0.8, 0.8]
    assert out["oracle"]["cpt_80"]["ci"][1] < out["learned"]["cpt_80"]["ci"][0]
    diff = out["learned"]["minus_random"]
    assert diff["apgr"]["value"] == pytest.approx(out["learned"]["apgr"]["value"] - 0.5)
    assert diff["cpt_80"]["ci"][1] < 0  # the signal in `data` is strong
    assert "minus_random" not in rnd
    for entry in out.values():
        assert entry["undefined_resamples"] == 0
        for key in ("apgr", "cpt_50", "cpt_80"):
            low, high = entry[key]["ci"]
            assert low <= high
    # the resamples do not depend on which other routers are scored
    alone = bootstrap_routing({"learned": scores}, weak, strong, n_resamples=400, seed=0)
    assert alone["learned"]["apgr"] == out["learned"]["apgr"]
    assert bootstrap_routing(routers, weak, strong, n_resamples=400, seed=0,
                             reference="random") == out
    # several references in one call: the differences of one-reference calls, identical
    both = bootstrap_routing(routers, weak, strong, n_resamples=400, seed=0,
                             reference=("random", "learned"))
    paired = bootstrap_routing({"learned": scores, "oracle": routers["oracle"]}, weak, strong,
                               n_resamples=400, seed=0, reference="learned")
    assert both["oracle"]["minus_learned"] == paired["oracle"]["minus_learned"]
    assert both["oracle"]["minus_random"] == out["oracle"]["minus_random"]
    assert "minus_learned" not in both["learned"] and "minus_learned" in both["random"]
    with pytest.raises(ValueError, match="reference: 'b' is not one of"):
        bootstrap_routing(routers, weak, strong, reference=("random", "b"))


def test_bootstrap_counts_resamples_without_a_gap() -> None:
    weak = np.array([True] * 10 + [False] * 10)
    strong = np.array([True] * 11 + [False] * 9)
    out = bootstrap_routing({"r": np.arange(20.0)}, weak, strong, n_resamples=300, seed=0)
    assert 0 < out["r"]["undefined_resamples"] < 300


def test_paired_difference_against_random_is_the_router_interval_shifted() -> None:
    scores, weak, strong = data()
    levels = (0.5, 0.8)
    out = bootstrap_routing({"learned": scores, "random": None}, weak, strong, levels=levels,
                            n_resamples=500, seed=3, reference="random")
    exact = {"apgr": 0.5, "cpt_50": 0.5, "cpt_80": 0.8}
    for key, value in exact.items():
        learned, diff = out["learned"][key], out["learned"]["minus_random"][key]
        assert out["random"][key] == {"value": value, "ci": [value, value]}
        assert diff["value"] == pytest.approx(learned["value"] - value, abs=1e-12)
        np.testing.assert_allclose(diff["ci"], np.subtract(learned["ci"], value), atol=1e-12)


def test_random_routing_is_undefined_on_the_same_resamples_as_the_others() -> None:
    weak = np.array([True] * 10 + [False] * 10)
    strong = np.array([True] * 11 + [False] * 9)
    out = bootstrap_routing({"r": np.arange(20.0), "random": None}, weak, strong,
                            n_resamples=300, seed=0, reference="random")
    assert out["random"]["undefined_resamples"] == out["r"]["undefined_resamples"] > 0
    np.testing.assert_allclose(out["r"]["minus_random"]["apgr"]["ci"],
                               np.subtract(out["r"]["apgr"]["ci"], 0.5), atol=1e-12)
