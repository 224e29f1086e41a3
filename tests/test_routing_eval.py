"""Exact scoring, baselines, calibration, the cluster bootstrap and AIQ of routing on logs."""

from __future__ import annotations

import numpy as np
import pytest

from agents.routers import calibrate_cost, calibrate_share
from agents.routers.evaluation import (
    baselines,
    curve_metrics,
    oracle_routing,
    random_routing,
    routing_probabilities,
    score_routing,
    score_routings,
    single_model,
    threshold_routing,
)
from cost_envs.metrics.bootstrap import bootstrap_means, resample_weights
from cost_envs.metrics.frontier import aiq, bootstrap_aiq, frontier
from cost_envs.metrics.routing import bootstrap_routing, routing_curve
from cost_envs.traces import TraceDataset

MODELS = ("weak", "mid", "strong")


def dataset(n: int = 240, n_groups: int = 8, seed: int = 0) -> TraceDataset:
    """Three models; a group's difficulty shifts every model's accuracy (groups matter)."""
    rng = np.random.default_rng(seed)
    group = np.arange(n) % n_groups
    ease = rng.random(n_groups)[group] * 0.6 + rng.random(n) * 0.4
    correct = np.column_stack([rng.random(n) < ease * k for k in (0.6, 0.8, 1.1)])
    scores = correct.astype(float)
    cost = np.column_stack([np.full(n, 1.0), np.full(n, 2.0), 4.0 + rng.random(n)])
    return TraceDataset(MODELS, tuple(f"q{i}" for i in range(n)),
                        tuple(f"question {i}" for i in range(n)), scores, correct,
                        np.ones((n, 3)), np.ones((n, 3)), cost=cost,
                        groups=tuple(f"g{g}" for g in group))


# ------------------------------------------------------------------ exact scorer
def test_score_routing_counts_every_query_once() -> None:
    data = dataset()
    decisions = np.arange(data.n_queries) % 3
    out = score_routing(data, decisions, strong="strong", n_resamples=0)
    rows = np.arange(data.n_queries)
    assert out["queries"] == data.n_queries
    assert out["accuracy"]["value"] == pytest.approx(data.correct[rows, decisions].mean())
    assert out["cost_per_query"]["value"] == pytest.approx(data.cost[rows, decisions].mean())
    assert out["strong_share"]["value"] == pytest.approx(1 / 3)
    assert out["model_share"] == pytest.approx(dict.fromkeys(MODELS, 1 / 3))
    assert out["accuracy"]["ci"] is None
    with pytest.raises(ValueError, match="model indices in"):
        score_routing(data, decisions + 1)
    with pytest.raises(ValueError, match="summing to 1"):
        routing_probabilities(np.full((4, 3), 0.5), 4, 3)
    with pytest.raises(ValueError, match="expected \\(240,\\) model indices"):
        score_routing(data, decisions[:10])


def test_random_routing_is_its_exact_expectation() -> None:
    data = dataset()
    weak, strong = (score_routing(data, single_model(data, m), n_resamples=0)
                    for m in ("weak", "strong"))
    for share in (0.0, 0.3, 1.0):
        out = score_routing(data, random_routing(data, "weak", "strong", share),
                            strong="strong", n_resamples=0)
        for key in ("accuracy", "cost_per_query"):
            expected = (1 - share) * weak[key]["value"] + share * strong[key]["value"]
            assert out[key]["value"] == pytest.approx(expected, abs=1e-12)
        assert out["strong_share"]["value"] == pytest.approx(share)
    with pytest.raises(ValueError, match="share"):
        random_routing(data, "weak", "strong", 1.5)


def test_oracle_is_best_then_cheapest_per_query() -> None:
    data = dataset()
    oracle = oracle_routing(data)
    out = score_routing(data, oracle, n_resamples=0)
    assert out["accuracy"]["value"] == pytest.approx(data.correct.any(axis=1).mean())
    for i in range(data.n_queries):  # the cheapest of the models right on that query
        right = np.flatnonzero(data.scores[i] == data.scores[i].max())
        assert oracle[i] == right[np.argmin(data.cost[i, right])]
    names = baselines(data, "weak", "strong", 0.25)
    assert set(names) == {"random (25% strong)", "only weak", "only mid", "only strong",
                          "oracle"}
    for name, decisions in names.items():
        if name != "oracle":
            assert score_routing(data, decisions, n_resamples=0)["accuracy"]["value"] <= (
                out["accuracy"]["value"])


def test_score_routing_intervals_resample_groups_when_split_by_group() -> None:
    data = dataset()
    decisions = single_model(data, "mid")
    by_query = score_routing(data, decisions, n_resamples=2000, seed=1)
    by_group = score_routing(data, decisions, split_by="group", n_resamples=2000, seed=1)
    assert by_query["resampled"] == "queries" and by_query["units"] == data.n_queries
    assert by_group["resampled"] == "clusters" and by_group["units"] == 8
    width = {k: np.diff(v["accuracy"]["ci"])[0] for k, v in
             (("query", by_query), ("group", by_group))}
    assert width["group"] > 1.3 * width["query"]  # groups differ: queries are not independent
    assert by_group["accuracy"]["value"] == by_query["accuracy"]["value"]


# ------------------------------------------------------------------ cluster bootstrap
def test_cluster_resampling_draws_whole_clusters() -> None:
    clusters = np.array([0, 0, 1, 2, 2, 2])
    weights = resample_weights(np.random.default_rng(0), 50, 6, clusters)
    counts = np.random.default_rng(0).multinomial(3, np.full(3, 1 / 3), size=50)
    np.testing.assert_array_equal(weights, counts[:, clusters])
    # one item per cluster: the same draws as the item bootstrap
    np.testing.assert_array_equal(resample_weights(np.random.default_rng(4), 9, 6),
                                  resample_weights(np.random.default_rng(4), 9, 6,
                                                   np.arange(6)))


def test_bootstrap_means_matches_explicit_cluster_resamples() -> None:
    values = np.array([1.0, 3.0, 2.0, 10.0, 0.0])
    labels = ["a", "a", "b", "c", "c"]
    out = bootstrap_means({"v": values}, clusters=labels, n_resamples=200, seed=3)
    counts = np.random.default_rng(3).multinomial(3, np.full(3, 1 / 3), size=200)
    codes = np.array([0, 0, 1, 2, 2])
    explicit = [np.repeat(values, row[codes]).mean() for row in counts]
    np.testing.assert_allclose(out["v"]["ci"], np.percentile(explicit, [2.5, 97.5]))
    assert out["v"]["value"] == pytest.approx(values.mean())
    with pytest.raises(ValueError, match="one label per item"):
        bootstrap_means({"v": values}, clusters=["a"])


def test_bootstrap_routing_by_cluster_matches_explicit_resamples() -> None:
    data = dataset()
    w, s = data.correct[:, 0], data.correct[:, 2]
    scores = 1.0 - data.scores[:, 1] + np.arange(data.n_queries) * 1e-4
    codes = data.clusters("group")
    out = bootstrap_routing({"r": scores}, w, s, n_resamples=100, seed=5, clusters=data.groups)
    counts = np.random.default_rng(5).multinomial(8, np.full(8, 1 / 8), size=100)
    apgr = []
    for row in counts:
        idx = np.repeat(np.arange(data.n_queries), row[codes])
        curve = routing_curve(scores[idx], w[idx], s[idx])
        apgr.append(curve.apgr if curve.strong_accuracy > curve.weak_accuracy else np.nan)
    apgr = np.array(apgr)
    np.testing.assert_allclose(out["r"]["apgr"]["ci"],
                               np.percentile(apgr[np.isfinite(apgr)], [2.5, 97.5]), rtol=1e-9)
    assert out["r"]["resampled"] == "clusters" and out["r"]["units"] == 8
    plain = bootstrap_routing({"r": scores}, w, s, n_resamples=100, seed=5)
    assert plain["r"]["resampled"] == "queries" and plain["r"]["units"] == data.n_queries
    same = bootstrap_routing({"r": scores}, w, s, n_resamples=100, seed=5,
                             clusters=range(data.n_queries))
    assert same["r"]["apgr"]["ci"] == pytest.approx(plain["r"]["apgr"]["ci"], rel=1e-12)


def test_curve_metrics_reuse_the_routing_curve() -> None:
    data = dataset()
    scores = 1.0 - data.scores[:, 1]
    out = curve_metrics(data, {"r": scores, "random": None}, "weak", "strong",
                        split_by="group", n_resamples=200, reference="random")
    curve = routing_curve(scores, data.correct[:, 0], data.correct[:, 2], data.cost[:, 0],
                          data.cost[:, 2])
    assert out["r"]["apgr"]["value"] == pytest.approx(curve.apgr)
    assert out["r"]["cpt_80"]["value"] == pytest.approx(curve.cpt(0.8))
    assert out["r"]["resampled"] == "clusters"
    assert out["r"]["aiq"]["value"] == pytest.approx(aiq(curve.cost, curve.accuracy))
    acc = data.accuracy
    assert out["random"]["aiq"]["value"] == pytest.approx((acc[0] + acc[2]) / 2)


# ------------------------------------------------------------------ calibration
def test_calibrate_share_is_the_training_quantile_and_holds_on_new_queries() -> None:
    rng = np.random.default_rng(0)
    train, test = rng.random(2000), rng.random(2000)
    for share in (0.1, 0.5, 0.8):
        cal = calibrate_share(train, share)
        assert cal.threshold == pytest.approx(np.quantile(train, 1 - share))
        assert cal.strong_share == pytest.approx(share, abs=1e-3)
        assert (test >= cal.threshold).mean() == pytest.approx(share, abs=0.03)
    assert calibrate_share(train, 0.0).threshold == np.inf
    assert calibrate_share(train, 1.0).strong_share == 1.0
    cost = calibrate_share(train, 0.5, np.ones(2000), np.full(2000, 3.0)).cost_per_query
    assert cost == pytest.approx(2.0, abs=0.01)
    with pytest.raises(ValueError, match="share"):
        calibrate_share(train, -0.1)


def test_calibrate_cost_spends_up_to_the_target_and_no_more() -> None:
    rng = np.random.default_rng(1)
    scores = np.round(rng.random(300), 2)  # ties: routed together
    wc, sc = rng.random(300) * 0.1, 1.0 + rng.random(300)
    for target in (0.2, 0.5, 0.9):
        cal = calibrate_cost(scores, wc, sc, target)
        strong = scores >= cal.threshold
        spent = np.where(strong, sc, wc).mean()
        assert spent == pytest.approx(cal.cost_per_query) and spent <= target
        assert cal.strong_share == pytest.approx(strong.mean())
        lower = scores[scores < cal.threshold].max()  # the next tie group would overspend
        assert np.where(scores >= lower, sc, wc).mean() > target
    assert calibrate_cost(scores, wc, sc, wc.mean()).threshold == np.inf
    assert calibrate_cost(scores, wc, sc, 10.0).strong_share == 1.0
    with pytest.raises(ValueError, match="the cheapest is"):
        calibrate_cost(scores, wc, sc, wc.mean() / 2)


def test_calibrated_thresholds_route_test_queries() -> None:
    data = dataset()
    train, test = data.split(seed=0, test_fraction=0.5, split_by="group")
    cal = calibrate_share(1.0 - train.scores[:, 1], 0.4)
    decisions = threshold_routing(test, 1.0 - test.scores[:, 1], cal.threshold, "weak",
                                  "strong")
    np.testing.assert_array_equal(decisions == 2, test.scores[:, 1] <= 1 - cal.threshold)
    assert set(decisions.tolist()) <= {0, 2}


# ------------------------------------------------------------------ K models: AIQ
def test_frontier_is_the_non_decreasing_upper_hull() -> None:
    costs = [1.0, 2.0, 3.0, 4.0, 2.5, 1.0]
    quality = [0.5, 0.6, 0.9, 0.8, 0.4, 0.3]
    fc, fq = frontier(costs, quality)
    # (2, 0.6) lies under the chord (1, 0.5)-(3, 0.9); (4, 0.8) is past the best point
    assert fc.tolist() == [1.0, 3.0] and fq.tolist() == [0.5, 0.9]
    fc, fq = frontier([1, 2, 3], [0.5, 0.8, 0.9])
    assert fc.tolist() == [1, 2, 3]  # concave: every point stays


def test_aiq_is_the_mean_frontier_quality_over_the_cost_range() -> None:
    assert aiq([0.0, 2.0], [0.5, 0.9]) == pytest.approx(0.7)
    assert aiq([0.0, 1.0, 2.0], [0.5, 0.9, 0.9]) == pytest.approx((0.7 + 0.9) / 2)
    # spending beyond the best point keeps its quality; below the cheapest point, nothing
    assert aiq([0.0, 1.0], [0.5, 0.9], cost_range=(0.0, 2.0)) == pytest.approx(0.8)
    assert aiq([1.0, 2.0], [0.5, 0.9], cost_range=(0.0, 2.0)) == pytest.approx(0.35)
    # a dominated point adds nothing; an operating point above the chord adds area
    assert aiq([0.0, 2.0, 1.0], [0.5, 0.9, 0.6]) == pytest.approx(0.7)
    assert aiq([0.0, 2.0, 1.0], [0.5, 0.9, 0.85]) > 0.7
    with pytest.raises(ValueError, match="low < high"):
        aiq([1.0, 1.0], [0.2, 0.3])


def test_bootstrap_aiq_matches_explicit_resamples() -> None:
    data = dataset(n=60, n_groups=6)
    q = np.column_stack([data.scores[:, 0], data.scores[:, 1], data.scores[:, 2]])
    c = np.asarray(data.cost)
    span = (1.0, 4.5)
    out = bootstrap_aiq(q, c, span, clusters=data.groups, n_resamples=150, seed=2)
    codes = data.clusters("group")
    counts = np.random.default_rng(2).multinomial(6, np.full(6, 1 / 6), size=150)
    explicit = []
    for row in counts:
        idx = np.repeat(np.arange(60), row[codes])
        explicit.append(aiq(c[idx].mean(axis=0), q[idx].mean(axis=0), span))
    low, high = np.percentile(explicit, [2.5, 97.5])
    assert out["value"] == pytest.approx(aiq(c.mean(axis=0), q.mean(axis=0), span))
    assert out["ci"][0] == pytest.approx(min(low, out["value"]))
    assert out["ci"][1] == pytest.approx(max(high, out["value"]))
    assert out["cost_range"] == [1.0, 4.5]


def test_score_routings_pairs_routers_on_the_same_resamples() -> None:
    data = dataset()
    mid = single_model(data, "mid")
    share = 0.5
    routers = {"mid": mid, "random": random_routing(data, "weak", "strong", share)}
    out = score_routings(data, routers, strong="strong", split_by="group",
                         reference="random", n_resamples=500, seed=4)
    alone = score_routing(data, mid, strong="strong", split_by="group", n_resamples=500,
                          seed=4)
    assert out["mid"]["accuracy"] == alone["accuracy"]  # the same resamples
    diff = out["mid"]["minus_random"]["accuracy"]
    assert diff["value"] == pytest.approx(out["mid"]["accuracy"]["value"]
                                          - out["random"]["accuracy"]["value"])
    # paired: the difference's interval is narrower than the two intervals stacked
    spread = {k: np.diff(out[k]["accuracy"]["ci"])[0] for k in routers}
    assert np.diff(diff["ci"])[0] < spread["mid"] + spread["random"]
    assert "minus_random" not in out["random"]
    with pytest.raises(ValueError, match="reference: 'x' is not one of"):
        score_routings(data, routers, reference="x")
