"""Routing over K models: the cost-quality frontier and RouterBench's AIQ.

A router over any number of models, run at several operating points (thresholds,
willingness to pay, ...), gives points (mean cost per query, mean quality). Mixing two
operating points at random achieves every point on the segment between them, and
spending more never has to lower quality (the extra can be wasted), so what a router
*can* achieve is the **non-decreasing upper convex hull** of its points
(:func:`frontier`): from the cheapest point, up the concave hull to the best point,
flat beyond it.

**AIQ** (RouterBench, Hu et al. 2024: average improvement in quality) is the area under
that frontier over a cost range, divided by the range's width: the frontier's mean
quality across budgets (:func:`aiq`). Below the cheapest point nothing is achievable and
the frontier counts 0. Compare routers on one range (e.g. the cheapest to the dearest
single model's cost): by default the range is the points' own.

With two models, the threshold sweep of :func:`cost_envs.metrics.routing.routing_curve`
gives the points (its ``cost`` and ``accuracy``) and APGR and CPT are its readings on
the strong-call-share axis; AIQ reads the same sweep on the cost axis.
:func:`bootstrap_aiq` gives AIQ an interval, resampling queries or clusters of them as
the bootstrap engine does; :func:`bootstrap_aiqs` scores several routers on the same
resamples, with paired differences. Only numpy is used.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cost_envs.config import paired_arrays
from cost_envs.metrics.bootstrap import (
    check_bootstrap_args,
    cluster_codes,
    interval_around,
    percentile_interval,
    resample_blocks,
    resample_weights,
)


def _points(costs: Any, qualities: Any) -> tuple[np.ndarray, np.ndarray]:
    c, q = paired_arrays(costs, qualities, "costs and qualities")
    if not (np.isfinite(c).all() and np.isfinite(q).all()):
        raise ValueError("costs and qualities: expected finite numbers")
    return c, q


def _cross(o: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    return float((a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]))


def frontier(costs: Any, qualities: Any) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing upper convex hull of (cost, quality) points.

    Returns:
        ``(cost, quality)`` of the hull's vertices, cost strictly ascending, quality
        non-decreasing: from the cheapest point (the best of the cheapest, on ties) to
        the best point (the cheapest of the best). Points on a hull edge are dropped.
    """
    c, q = _points(costs, qualities)
    order = np.lexsort((-q, c))  # by cost, then best quality first
    pts = np.column_stack([c[order], q[order]])
    hull: list[np.ndarray] = []
    for p in pts:
        if hull and p[0] == hull[-1][0]:
            continue  # same cost, worse or equal quality
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()  # hull[-1] is on or below the segment hull[-2] -> p
        hull.append(p)
    array = np.array(hull)
    best = int(np.argmax(array[:, 1]))  # the first maximum: the cheapest of the best
    array = array[: best + 1]
    return array[:, 0], array[:, 1]


def frontier_quality(costs: Any, qualities: Any, at: Any) -> np.ndarray:
    """The frontier's quality at costs ``at`` (0 below its cheapest point, flat beyond)."""
    fc, fq = frontier(costs, qualities)
    x = np.asarray(at, dtype=np.float64)
    return np.where(x < fc[0], 0.0, np.interp(x, fc, fq))


def aiq(costs: Any, qualities: Any, cost_range: Sequence[float] | None = None) -> float:
    """Area under the non-decreasing convex hull of quality against cost, per unit cost.

    Args:
        costs: Mean cost per query of each operating point.
        qualities: Mean quality (accuracy or score) of each operating point.
        cost_range: ``(low, high)`` of the integral, ``low < high``; default the
            points' own range.

    Returns:
        ``(1 / (high - low)) * integral of the frontier over [low, high]``.

    Raises:
        ValueError: On bad points, or a range that is empty (all points at one cost and
            no range given, or ``high <= low``).
    """
    c, q = _points(costs, qualities)
    low, high = (float(c.min()), float(c.max())) if cost_range is None else map(
        float, cost_range)
    if not (np.isfinite(low) and np.isfinite(high) and high > low):
        raise ValueError(f"cost_range: expected low < high, got ({low!r}, {high!r})")
    fc, fq = frontier(c, q)
    start = max(low, float(fc[0]))  # nothing is achievable below the cheapest point
    if start >= high:
        return 0.0
    xs = np.concatenate([[start], fc[(fc > start) & (fc < high)], [high]])
    ys = np.interp(xs, fc, fq)  # flat beyond the best point
    area = np.sum(np.diff(xs) * (ys[1:] + ys[:-1]) / 2.0)  # trapezoids (numpy 1.x lacks trapezoid)
    return float(area / (high - low))


def bootstrap_aiq(
    qualities: Any,
    costs: Any,
    cost_range: Sequence[float],
    *,
    clusters: Any = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """AIQ of a router's operating points with a percentile-bootstrap interval.

    Args:
        qualities: ``(n, k)``: the quality of query ``i`` at operating point ``j``.
        costs: ``(n, k)``: its cost there.
        cost_range: ``(low, high)``, fixed across resamples (compare routers on one).
        clusters: Optional cluster label per query: resample clusters, not queries.
        n_resamples: Bootstrap resamples.
        confidence: Interval coverage.
        seed: Seed of the resampling (the same seed and queries give every router the
            same resamples).

    Returns:
        ``{"value", "ci", "cost_range"}``.
    """
    return bootstrap_aiqs({"_": (qualities, costs)}, cost_range, clusters=clusters,
                          n_resamples=n_resamples, confidence=confidence, seed=seed)["_"]


def _aiq_points(name: str, points: Any) -> tuple[np.ndarray, np.ndarray]:
    try:
        qualities, costs = points
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a (qualities, costs) pair") from None
    return paired_arrays(qualities, costs, "qualities and costs", ndim=2,
                         expected="two (queries, points) arrays of one shape, got")


def bootstrap_aiqs(
    routers: Mapping[str, Any],
    cost_range: Sequence[float],
    *,
    clusters: Any = None,
    reference: str | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """AIQ of several routers on the *same* resamples, with paired differences.

    Routers over K models compared on one query set: their operating points may differ
    in number (a threshold sweep, a willingness-to-pay sweep, the K single models), but
    each resample draws the same queries (or clusters) for all of them, so the interval
    of a difference (``minus_<reference>``) is the paired one, narrower than the two
    intervals side by side suggest.

    Args:
        routers: Name -> ``(qualities, costs)``, each ``(n, k_name)``: query ``i``'s
            quality and cost at the router's operating point ``j`` (one ``n`` for all).
        cost_range: ``(low, high)``, fixed across resamples.
        clusters: Optional cluster label per query: resample clusters, not queries.
        reference: A router's name: every other router also gets
            ``"minus_<reference>"``: ``{"value", "ci"}`` of its AIQ minus the reference's.
        n_resamples: Bootstrap resamples.
        confidence: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        Name -> ``{"value", "ci", "cost_range"}`` (plus ``minus_<reference>``).
    """
    points = {name: _aiq_points(name, p) for name, p in routers.items()}
    if not points or len({q.shape[0] for q, _ in points.values()}) != 1:
        raise ValueError(f"routers: expected at least one, all on the same queries; got "
                         f"{ {k: q.shape[0] for k, (q, _) in points.items()} }")
    if reference is not None and reference not in points:
        raise ValueError(f"reference: {reference!r} is not one of {list(points)}")
    check_bootstrap_args(n_resamples, confidence)
    n = next(iter(points.values()))[0].shape[0]
    codes = cluster_codes(clusters, n)
    span = [float(v) for v in cost_range]
    q_all = np.hstack([q for q, _ in points.values()])
    c_all = np.hstack([c for _, c in points.values()])
    ends = np.cumsum([0] + [q.shape[1] for q, _ in points.values()])
    rng = np.random.default_rng(seed)
    drawn: list[list[float]] = [[] for _ in points]
    for size in resample_blocks(n_resamples, q_all.size):
        weights = resample_weights(rng, size, n, codes)
        total = weights.sum(axis=1, keepdims=True)
        mean_q, mean_c = (weights @ q_all) / total, (weights @ c_all) / total
        for k, (a, b) in enumerate(itertools.pairwise(ends)):
            drawn[k].extend(aiq(mc[a:b], mq[a:b], span)
                            for mc, mq in zip(mean_c, mean_q, strict=True))
    values = {name: np.array(d) for name, d in zip(points, drawn, strict=True)}
    out: dict[str, dict[str, Any]] = {}
    for name, (q, c) in points.items():
        point = aiq(c.mean(axis=0), q.mean(axis=0), span)
        ci = interval_around(point, percentile_interval(values[name], confidence))
        out[name] = {"value": point, "ci": ci, "cost_range": span}
    if reference is not None:
        for name in points:
            if name != reference:
                diff = out[name]["value"] - out[reference]["value"]
                diff_ci = percentile_interval(values[name] - values[reference], confidence)
                out[name][f"minus_{reference}"] = {"value": diff,
                                                   "ci": interval_around(diff, diff_ci)}
    return out
