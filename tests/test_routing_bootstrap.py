"""The linear routing bootstrap (agents/routers/bootstrap.py): same values as the
quadratic definition, random references matched within each resample, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from agents.routers.bootstrap import (
    curve_points,
    draws,
    frontier_aiq,
    frontier_mix,
    hull_candidates,
    threshold_aiq,
)
from agents.routers.evaluation import (
    call_costs,
    compare_with_random,
    curve_metrics,
    random_routing,
    score_routings,
    score_table,
)
from cost_envs.metrics.bootstrap import cluster_codes, resample_weights
from cost_envs.metrics.frontier import aiq
from cost_envs.metrics.routing import bootstrap_routing, threshold_order
from cost_envs.traces import TraceDataset


def two_models(n: int = 300, n_groups: int = 10, seed: int = 0,
               cheap_strong: bool = False) -> TraceDataset:
    """Weak and strong; groups shift accuracy; optionally the strong call is sometimes
    the cheaper one (so a curve's cost is not monotone in its strong calls)."""
    rng = np.random.default_rng(seed)
    group = np.arange(n) % n_groups
    ease = rng.random(n_groups)[group] * 0.5 + rng.random(n) * 0.5
    correct = np.column_stack([rng.random(n) < ease * 0.7, rng.random(n) < ease * 1.2])
    cost = np.column_stack([1.0 + rng.random(n), 3.0 + 2.0 * rng.random(n)])
    if cheap_strong:
        cost[::7, 1] = 0.5
    return TraceDataset(("weak", "strong"), tuple(f"q{i}" for i in range(n)),
                        tuple(f"question {i} " + "x" * (i % 17) for i in range(n)),
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=cost, groups=tuple(f"g{g}" for g in group))


def reference_aiq(scores: np.ndarray | None, w: np.ndarray, s: np.ndarray, wc: np.ndarray,
                  sc: np.ndarray, span: list[float], codes: np.ndarray | None,
                  n_resamples: int, seed: int) -> tuple[float, np.ndarray]:
    """The old, quadratic definition: an (n, points) matrix of who goes strong at each
    threshold, its column means per resample, then AIQ of those points."""
    n = len(w)
    if scores is None:
        strong_at = np.column_stack([np.zeros(n, bool), np.ones(n, bool)])
    else:
        order = np.argsort(-scores, kind="stable")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        sorted_scores = scores[order]
        ends = np.append(np.flatnonzero(sorted_scores[1:] != sorted_scores[:-1]) + 1, n)
        strong_at = rank[:, None] < np.concatenate([[0], ends])[None, :]
    q = np.where(strong_at, s[:, None], w[:, None])
    c = np.where(strong_at, sc[:, None], wc[:, None])
    point = aiq(c.mean(axis=0), q.mean(axis=0), span)
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        weights = resample_weights(rng, 1, n, codes)[0]
        values.append(aiq(weights @ c / weights.sum(), weights @ q / weights.sum(), span))
    return point, np.array(values)


@pytest.mark.parametrize("split_by", ["query", "group"])
@pytest.mark.parametrize("cheap_strong", [False, True])
def test_curve_aiq_equals_the_quadratic_definition(split_by: str, cheap_strong: bool) -> None:
    data = two_models(cheap_strong=cheap_strong)
    rng = np.random.default_rng(3)
    scores = data.correct[:, 1] - 0.5 * data.correct[:, 0] + rng.normal(0, 0.8, data.n_queries)
    scores[:60] = 0.25  # a block of ties: one curve point for all of them
    c = call_costs(data)
    span = sorted((float(c[:, 0].mean()), float(c[:, 1].mean())))
    codes = cluster_codes(data.clusters("group"), data.n_queries) if split_by == "group" else None
    out = curve_metrics(data, {"r": scores, "random": None}, "weak", "strong",
                        split_by=split_by, n_resamples=200, seed=5, reference="random")
    w, s = data.correct[:, 0].astype(float), data.correct[:, 1].astype(float)
    for name, x in (("r", scores), ("random", None)):
        point, values = reference_aiq(x, w, s, c[:, 0], c[:, 1], span, codes, 200, 5)
        assert out[name]["aiq"]["value"] == pytest.approx(point, rel=1e-12, abs=1e-12)
        low, high = np.quantile(values, [0.025, 0.975])
        assert out[name]["aiq"]["ci"] == pytest.approx([min(low, point), max(high, point)],
                                                       rel=1e-12, abs=1e-12)
    # APGR and CPT: bootstrap_routing's, on the same resamples
    old = bootstrap_routing({"r": scores, "random": None}, w, s, n_resamples=200, seed=5,
                            reference="random",
                            clusters=data.clusters("group") if split_by == "group" else None)
    for key in ("apgr", "cpt_50", "cpt_80"):
        for got, want in ((out["r"][key], old["r"][key]),
                          (out["r"]["minus_random"][key], old["r"]["minus_random"][key])):
            assert got["value"] == want["value"]  # point values: the same routing_curve
            assert got["ci"] == pytest.approx(want["ci"], rel=1e-12, abs=1e-12)
    assert out["r"]["undefined_resamples"] == old["r"]["undefined_resamples"]
    assert out["r"]["units"] == (10 if split_by == "group" else data.n_queries)


def test_hull_candidates_keep_the_frontier() -> None:
    rng = np.random.default_rng(0)
    for trial in range(200):
        k = int(rng.integers(1, 60))
        c = np.round(rng.random(k) * 5, 1 if trial % 2 else 6)  # ties in cost half the time
        q = np.round(rng.random(k), 1 if trial % 3 == 0 else 6)
        if trial % 4 == 0:
            c, q = np.sort(c), np.cumsum(rng.normal(size=k))  # a path, sorted by cost
        kept_c, kept_q = hull_candidates(c, q)
        assert len(kept_c) <= len(np.unique(c))
        for span in ([0.0, 5.0], [1.0, 2.5], [float(c.min()), float(c.max()) + 1.0]):
            assert aiq(kept_c, kept_q, span) == pytest.approx(aiq(c, q, span), abs=1e-12)


def test_curve_points_are_the_column_means_of_the_matrix() -> None:
    rng = np.random.default_rng(1)
    n = 50
    scores = rng.integers(0, 8, n).astype(float)  # many ties
    weak, strong = rng.random(n), rng.random(n)
    order, ends = threshold_order(scores)
    weights = next(draws(n, None, 4, seed=2))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    matrix = np.where(rank[:, None] < np.concatenate([[0], ends])[None, :],
                      strong[:, None], weak[:, None])
    expected = weights @ matrix / weights.sum(axis=1, keepdims=True)
    assert curve_points(weights, order, ends, weak, strong) == pytest.approx(expected)
    assert frontier_aiq(expected, expected, [0.0, 1.0]).shape == (4,)
    # a fold's AIQ as cross-validation reads it: the matrices' column means, or linear
    cost_w, cost_s = rng.random(n), 2.0 + rng.random(n)
    costs = np.where(rank[:, None] < np.concatenate([[0], ends])[None, :],
                     cost_s[:, None], cost_w[:, None])
    assert threshold_aiq(scores, weak, strong, cost_w, cost_s, [0.5, 2.5]) == pytest.approx(
        aiq(costs.mean(axis=0), matrix.mean(axis=0), [0.5, 2.5]), abs=1e-12)
    assert np.isnan(threshold_aiq(scores, weak, strong, cost_w, cost_s, [1.0, 1.0]))


# ------------------------------------------------------------------ matched references
def resampled_differences(data: TraceDataset, decisions: np.ndarray, split_by: str,
                          n_resamples: int = 300) -> dict[str, np.ndarray]:
    """Per-resample router-minus-reference values, recomputed here from the weights."""
    c = call_costs(data)
    codes = cluster_codes(data.clusters("group"), data.n_queries) if split_by == "group" else None
    rows = np.arange(data.n_queries)
    out: dict[str, list[float]] = {"share_at_share": [], "cost_at_cost": [],
                                   "share_fixed": []}
    share = decisions.mean()
    for weights in draws(data.n_queries, codes, n_resamples, seed=0):
        for wt in weights / weights.sum(axis=1, keepdims=True):
            router_share = float(wt @ (decisions == 1))
            router_cost = float(wt @ c[rows, decisions])
            model_cost = wt @ c
            matched = frontier_mix(model_cost[None], (wt @ data.scores)[None],
                                   np.array([router_cost]))[0]
            out["share_at_share"].append(router_share - router_share)
            out["cost_at_cost"].append(router_cost - float(matched @ model_cost))
            out["share_fixed"].append(router_share - share)
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("split_by", ["query", "group"])
def test_random_references_are_matched_in_every_resample(split_by: str) -> None:
    data = two_models()
    rng = np.random.default_rng(4)
    decisions = (data.correct[:, 1] > data.correct[:, 0]) | (rng.random(data.n_queries) < 0.3)
    decisions = decisions.astype(np.int64)
    out = compare_with_random(data, {"r": decisions}, split_by=split_by, n_resamples=300)["r"]
    # the share difference at the same share is exactly 0, every resample
    assert out["minus_random_at_share"]["strong_share"] == {"value": 0.0, "ci": [0.0, 0.0]}
    assert out["random_at_share"]["strong_share"]["ci"] == out["strong_share"]["ci"]
    # the cost difference at the same cost is 0 up to rounding, every resample
    diff = out["minus_random_at_cost"]["cost_per_query"]
    assert abs(diff["value"]) < 1e-12 and max(map(abs, diff["ci"])) < 1e-12
    # recomputed by hand: matched is 0 on every resample, fixed-at-the-test-share is not
    by_hand = resampled_differences(data, decisions, split_by)
    assert np.all(by_hand["share_at_share"] == 0.0)
    assert np.abs(by_hand["cost_at_cost"]).max() < 1e-12
    assert np.ptp(by_hand["share_fixed"]) > 0.02
    # the old fixed reference shows a share difference that is not 0 across resamples
    fixed = score_routings(data, {"r": decisions, "random": random_routing(
        data, "weak", "strong", float(decisions.mean()))}, strong="strong",
        reference="random", split_by=split_by, n_resamples=300)
    low, high = fixed["r"]["minus_random"]["strong_share"]["ci"]
    assert low < -0.01 and high > 0.01


def test_a_random_router_is_not_told_apart_from_random() -> None:
    data = two_models(n=400)
    # the exact random router: identical to its reference on every resample
    exact = compare_with_random(data, {"random": random_routing(data, "weak", "strong", 0.4)},
                                split_by="group", n_resamples=200)["random"]
    for ref in ("minus_random_at_share", "minus_random_at_cost"):
        for key in ("accuracy", "cost_per_query", "strong_share"):
            assert max(map(abs, exact[ref][key]["ci"])) < 1e-12
    # routers that draw their decisions at random: their interval holds 0 at both
    # references (20 draws; a 95% interval may miss once by chance)
    rng = np.random.default_rng(7)
    drawn = {f"coin {k}": (rng.random(data.n_queries) < 0.5).astype(np.int64)
             for k in range(20)}
    out = compare_with_random(data, drawn, n_resamples=400)
    for ref in ("minus_random_at_share", "minus_random_at_cost"):
        holds = [e[ref]["accuracy"]["ci"][0] <= 0 <= e[ref]["accuracy"]["ci"][1]
                 for e in out.values()]
        assert sum(holds) >= 18, (ref, sum(holds))


def test_score_table_is_both_on_one_draw() -> None:
    data = two_models()
    scores = data.correct[:, 1] + np.linspace(0, 0.5, data.n_queries)
    decisions = (scores >= np.median(scores)).astype(np.int64)
    both = score_table(data, {"r": decisions}, {"r": scores, "random": None}, weak="weak",
                       strong="strong", curve_reference="random", n_resamples=100, seed=3)
    points = compare_with_random(data, {"r": decisions}, n_resamples=100, seed=3)
    curves = curve_metrics(data, {"r": scores, "random": None}, "weak", "strong",
                           reference="random", n_resamples=100, seed=3)
    assert both["points"] == points and both["curves"] == curves
    # a cascade's own costs: its escalations pay both calls, its references do not
    cascade = call_costs(data).copy()
    cascade[:, 1] += cascade[:, 0]
    paid = compare_with_random(data, {"r": decisions}, router_costs={"r": cascade},
                               n_resamples=0)["r"]
    assert paid["cost_per_query"]["value"] > points["r"]["cost_per_query"]["value"]
    assert paid["random_at_share"] == {k: {"value": v["value"], "ci": None}
                                       for k, v in points["r"]["random_at_share"].items()}


def test_bad_input_is_one_line() -> None:
    data = two_models(n=40)
    with pytest.raises(ValueError, match=r"routers\['r'\]: expected 40 finite scores"):
        curve_metrics(data, {"r": np.ones(3)}, "weak", "strong", n_resamples=10)
    with pytest.raises(ValueError, match="reference: 'x' is not one of"):
        curve_metrics(data, {"r": np.ones(40)}, "weak", "strong", reference="x")
    with pytest.raises(ValueError, match="router_costs: 'x' is not one of"):
        compare_with_random(data, {"r": np.zeros(40, np.int64)}, router_costs={"x": None})
    with pytest.raises(ValueError, match="n_resamples: curve metrics need at least 1"):
        score_table(data, {}, {"r": np.ones(40)}, weak="weak", n_resamples=0)
    with pytest.raises(ValueError, match="split_by"):
        compare_with_random(data, {"r": np.zeros(40, np.int64)}, split_by="subject")


def test_the_held_out_table_compares_at_the_same_share_and_the_same_cost() -> None:
    from experiments.traces.heldout import Protocol, evaluate, markdown

    data = two_models(n=200)
    result = evaluate(data, Protocol("group", 4, "4 folds by group"), n_resamples=100)
    for entry in result["routers"].values():
        point = entry["point"]
        assert point["minus_random"]["strong_share"] == {"value": 0.0, "ci": [0.0, 0.0]}
        assert max(map(abs, point["minus_random_at_cost"]["cost_per_query"]["ci"])) < 1e-12
        assert entry["random_at_cost"]["cost_per_query"]["value"] == pytest.approx(
            point["cost_per_query"]["value"])
        assert "aiq" in entry["curve"]["minus_random"]
    text = "\n".join(markdown("synthetic", result))
    assert "accuracy - random at the same cost (paired)" in text
    assert "at the same cost, " in text


def test_the_resamples_are_read_in_one_blas_thread_whatever_the_process_allows() -> None:
    """Two BLAS threads on two cores took 1.7 times the CPU and twice the wall time."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from agents.routers.bootstrap import run

    class Threads:
        seen: set[int] = set()

        def add(self, weights: np.ndarray) -> None:
            self.seen |= {pool["num_threads"] for pool in threadpool_info()
                          if pool["user_api"] == "blas"}

        def result(self, confidence: float) -> dict:
            return {}

    threads = Threads()
    with threadpool_limits(limits=2, user_api="blas"):
        run([threads], 50, None, 20, 0.95, seed=0)
        assert {pool["num_threads"] for pool in threadpool_info()
                if pool["user_api"] == "blas"} == {2}  # what the caller allowed, restored
    assert threads.seen == {1}
