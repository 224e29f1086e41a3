"""Routing between a weak and a strong model: PGR, APGR and CPT (RouteLLM's metrics).

A *router* gives each query a score; routing the queries whose score is above a threshold
to the strong model and the rest to the weak one, and sweeping the threshold from
``+inf`` to ``-inf``, traces a curve of (share of queries sent to the strong model,
accuracy). On it (RouteLLM, Ong et al. 2024, section 5.1):

* ``PGR = (accuracy - acc_weak) / (acc_strong - acc_weak)``, the performance gap
  recovered (0 with only the weak model, 1 with only the strong one; above 1 is possible
  when the models err on different queries).
* ``APGR``: the area under PGR against the strong-call share over ``[0, 1]``. Here it
  is the exact area under the piecewise-linear curve (trapezoids); RouteLLM averages PGR
  over 10 evenly spaced shares, which approximates the same integral.
* ``CPT(x%)``: the smallest strong-call share whose PGR reaches ``x%``.

Queries with equal scores cannot be separated by a threshold, so the curve has a point
only where the score changes; between two points the curve is the straight line a router
achieves by sending a random part of the tied queries to the strong model. That line is
also how CPT is read off between points.

**Random routing** sends each query to the strong model with probability ``r``; its
expected accuracy is linear in ``r``, so its PGR is ``r``, its APGR exactly 0.5 and its
CPT(x%) exactly ``x``. **The per-query oracle** sends to the strong model exactly the
queries only the strong model gets right (:func:`oracle_scores`): it reaches the best
accuracy either model allows at the smallest strong-call share (:func:`oracle_point`).

:func:`bootstrap_routing` gives percentile-bootstrap intervals over queries (or over
clusters of queries, such as held-out subjects) for several routers at once, on the
*same* resamples, with paired differences against a reference.
Random routing's expected PGR is its strong-call share on *every* resample too, so its
resampled values are the exact ones: its intervals are points, and a paired difference
against it is the other router's interval shifted by the exact value (drawing one random
order per resample instead would add that order's noise to every such difference).
Only numpy is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cost_envs.config import number, paired_arrays
from cost_envs.metrics.bootstrap import (
    Interval,
    check_bootstrap_args,
    cluster_codes,
    percentile_interval,
    resample_blocks,
    resample_weights,
)

#: CPT levels reported by default.
DEFAULT_LEVELS = (0.5, 0.8)
#: Largest resample block (resamples x queries) held in memory at once.
_BLOCK = 1 << 21


def _outcomes(weak: Any, strong: Any) -> tuple[np.ndarray, np.ndarray]:
    w, s = paired_arrays(weak, strong, "weak_correct and strong_correct")
    for name, a in (("weak_correct", w), ("strong_correct", s)):
        if not (np.isfinite(a).all() and (a >= 0).all() and (a <= 1).all()):
            raise ValueError(f"{name}: expected booleans or scores in [0, 1]")
    return w, s


def _scores(scores: Any, n: int) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.shape != (n,):
        raise ValueError(f"scores: expected shape ({n},), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("scores: expected finite numbers")
    return x


def pgr(accuracy: Any, weak_accuracy: float, strong_accuracy: float) -> np.ndarray:
    """Performance gap recovered: ``(accuracy - weak) / (strong - weak)``.

    Raises:
        ValueError: If the strong model is not more accurate than the weak one (the gap
            is not positive and PGR is undefined).
    """
    gap = strong_accuracy - weak_accuracy
    if not gap > 0:
        raise ValueError(f"PGR is undefined: the strong model's accuracy {strong_accuracy:.4f} "
                         f"does not exceed the weak model's {weak_accuracy:.4f}")
    return (np.asarray(accuracy, dtype=np.float64) - weak_accuracy) / gap


def apgr(share: Any, pgr_values: Any) -> float:
    """Area under PGR against the strong-call share (trapezoids over the given points)."""
    x, y = np.asarray(share, dtype=np.float64), np.asarray(pgr_values, dtype=np.float64)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


def cpt(share: Any, pgr_values: Any, level: float) -> float:
    """The smallest strong-call share at which PGR reaches ``level`` (e.g. 0.8).

    Points are joined by straight lines (see the module doc); ``nan`` if PGR never
    reaches ``level``.
    """
    x, y = np.asarray(share, dtype=np.float64), np.asarray(pgr_values, dtype=np.float64)
    return float(first_crossing(x[None, :], y[None, :], level)[0])


def first_crossing(x: np.ndarray, y: np.ndarray, level: float) -> np.ndarray:
    """Row-wise first ``x`` where the polyline ``(x, y)`` reaches ``level`` (nan: never).

    ``x`` and ``y`` are ``(rows, points)``: one curve per row (a resample's PGR against
    its strong-call share, say); between points the curve is a straight line.
    """
    reached = y >= level - 1e-12
    first = np.argmax(reached, axis=1)
    rows = np.arange(len(x))
    out = np.full(len(x), np.nan)
    ok = reached[rows, first]
    at_start = ok & (first == 0)
    out[at_start] = x[rows[at_start], 0]
    mid = ok & (first > 0)
    r, k = rows[mid], first[mid]
    x0, x1, y0, y1 = x[r, k - 1], x[r, k], y[r, k - 1], y[r, k]
    out[mid] = x0 + (level - y0) / (y1 - y0) * (x1 - x0)
    return out


@dataclass(frozen=True)
class RoutingCurve:
    """Accuracy and cost of a router at every threshold, strong-call share ascending.

    Attributes:
        strong_share: Share of queries sent to the strong model, from 0 to 1.
        accuracy: Mean correctness at each point.
        cost: Mean cost per query at each point (nan without costs).
        weak_accuracy: Accuracy of the weak model alone (the point at share 0).
        strong_accuracy: Accuracy of the strong model alone (the point at share 1).
    """

    strong_share: np.ndarray
    accuracy: np.ndarray
    cost: np.ndarray
    weak_accuracy: float
    strong_accuracy: float

    @property
    def pgr(self) -> np.ndarray:
        """PGR at every point (raises ``ValueError`` when the gap is not positive)."""
        return pgr(self.accuracy, self.weak_accuracy, self.strong_accuracy)

    @property
    def apgr(self) -> float:
        """Area under PGR against the strong-call share."""
        return apgr(self.strong_share, self.pgr)

    def cpt(self, level: float) -> float:
        """Smallest strong-call share reaching PGR ``level``."""
        return cpt(self.strong_share, self.pgr, level)

    def max_accuracy(self) -> float:
        """The best accuracy on the curve."""
        return float(self.accuracy.max())


def _group_ends(sorted_scores: np.ndarray) -> np.ndarray:
    """1-based counts at which a group of equal scores ends (the curve's points)."""
    change = np.flatnonzero(sorted_scores[1:] != sorted_scores[:-1]) + 1
    return np.append(change, len(sorted_scores))


def threshold_order(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(routing order, curve points) of a router's scores.

    The order sends higher scores to the strong model first (stable on ties); the points
    are the 1-based counts of queries sent strong where a group of equal scores ends.
    """
    order = np.argsort(-scores, kind="stable")
    return order, _group_ends(scores[order])


def routing_curve(
    scores: Any,
    weak_correct: Any,
    strong_correct: Any,
    weak_cost: Any = None,
    strong_cost: Any = None,
) -> RoutingCurve:
    """The threshold sweep of a router: higher scores go to the strong model first.

    Args:
        scores: One score per query.
        weak_correct: Correctness (or score in ``[0, 1]``) of the weak model per query.
        strong_correct: The same for the strong model.
        weak_cost: Optional cost of the weak model per query.
        strong_cost: Optional cost of the strong model per query.

    Returns:
        The :class:`RoutingCurve`, one point per distinct score plus the origin.
    """
    w, s = _outcomes(weak_correct, strong_correct)
    n = len(w)
    x = _scores(scores, n)
    order, ends = threshold_order(x)
    count = np.concatenate([[0], ends])
    strong_part = np.concatenate([[0.0], np.cumsum(s[order])[ends - 1]])
    weak_part = np.concatenate([[0.0], np.cumsum(w[order])[ends - 1]])
    accuracy = (strong_part + w.sum() - weak_part) / n
    if weak_cost is None or strong_cost is None:
        cost = np.full(len(count), np.nan)
    else:
        wc = np.asarray(weak_cost, dtype=np.float64)[order]
        sc = np.asarray(strong_cost, dtype=np.float64)[order]
        if wc.shape != (n,) or sc.shape != (n,):
            raise ValueError(f"weak_cost and strong_cost: expected shape ({n},)")
        cost = (np.concatenate([[0.0], np.cumsum(sc)[ends - 1]]) + wc.sum()
                - np.concatenate([[0.0], np.cumsum(wc)[ends - 1]])) / n
    return RoutingCurve(count / n, accuracy, cost, float(w.mean()), float(s.mean()))


def random_routing_curve(weak_correct: Any, strong_correct: Any, weak_cost: Any = None,
                         strong_cost: Any = None) -> RoutingCurve:
    """Expected curve of random routing: the straight line from all-weak to all-strong."""
    return routing_curve(np.zeros(len(np.asarray(weak_correct))), weak_correct,
                         strong_correct, weak_cost, strong_cost)


def oracle_scores(weak_correct: Any, strong_correct: Any) -> np.ndarray:
    """Scores of the per-query oracle router: strong minus weak correctness.

    +1 where only the strong model is right, -1 where only the weak one is, 0 otherwise
    (with scores in ``[0, 1]``, their difference).
    """
    w, s = _outcomes(weak_correct, strong_correct)
    return s - w


def oracle_point(weak_correct: Any, strong_correct: Any) -> tuple[float, float]:
    """(strong-call share, accuracy) of the per-query oracle.

    It sends to the strong model exactly the queries where the strong model does better,
    so it reaches the best accuracy any router can, at the smallest share.
    """
    w, s = _outcomes(weak_correct, strong_correct)
    strong = s > w
    return float(strong.mean()), float(np.where(strong, s, w).mean())


# ---------------------------------------------------------------------------- bootstrap
def finite_interval(values: np.ndarray, confidence: float) -> list[float]:
    """The percentile interval of the finite ``values`` (resamples with PGR undefined are nan).

    A list, the JSON form of an :class:`Interval` in these JSON-ready results.
    """
    valid = values[np.isfinite(values)]
    if valid.size == 0:
        return list(Interval(float("nan"), float("nan")))
    return list(percentile_interval(valid, confidence))


def random_metrics(weights: np.ndarray, w: np.ndarray, s: np.ndarray,
                    levels: Sequence[float]) -> dict[str, np.ndarray]:
    """Random routing on a block of resamples: its exact expectations, APGR 0.5 and CPT(x) = x.

    Its expected PGR at strong-call share ``r`` is ``r`` on any resample, so nothing is
    drawn; only resamples without a gap (PGR undefined) are nan, as for every router.
    """
    defined = weights @ (s - w) > 0
    out = {"apgr": np.where(defined, 0.5, np.nan)}
    for level in levels:
        out[cpt_key(level)] = np.where(defined, float(level), np.nan)
    return out


def _resampled_metrics(
    weights: np.ndarray, order: np.ndarray, ends: np.ndarray,
    w: np.ndarray, s: np.ndarray, levels: Sequence[float],
) -> dict[str, np.ndarray]:
    """APGR and CPTs of one router on a block of resamples (``weights``: counts per query).

    ``order`` is the router's routing order, ``ends`` its curve's points. Shares and
    accuracies are over each resample's own size (the total weight: ``n`` when queries
    are resampled, varying when clusters are).
    """
    b = weights.shape[0]
    n = weights.sum(axis=1, keepdims=True)
    wt, ws, ss = weights[:, order], w[order], s[order]
    count = np.cumsum(wt, axis=1)[:, ends - 1]
    strong_part = np.cumsum(wt * ss, axis=1)[:, ends - 1]
    weak_part = np.cumsum(wt * ws, axis=1)[:, ends - 1]
    total_weak, total_strong = weak_part[:, -1], strong_part[:, -1]
    zeros = np.zeros((b, 1))
    share = np.hstack([zeros, count]) / n
    accuracy = (np.hstack([zeros, strong_part]) + total_weak[:, None]
                - np.hstack([zeros, weak_part])) / n
    gap = (total_strong - total_weak) / n[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (accuracy - (total_weak / n[:, 0])[:, None]) / gap[:, None]
    p[gap <= 0] = np.nan  # PGR undefined on this resample
    out = {"apgr": np.sum(np.diff(share, axis=1) * (p[:, 1:] + p[:, :-1]) / 2.0, axis=1)}
    for level in levels:
        out[cpt_key(level)] = first_crossing(share, p, level)
    return out


def cpt_key(level: float) -> str:
    """The JSON key of CPT at ``level``: ``0.5`` -> ``"cpt_50"``."""
    return f"cpt_{round(100 * level):d}"


def bootstrap_routing(
    routers: Mapping[str, Any],
    weak_correct: Any,
    strong_correct: Any,
    levels: Sequence[float] = DEFAULT_LEVELS,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    reference: str | Sequence[str] | None = None,
    clusters: Any = None,
) -> dict[str, dict[str, Any]]:
    """APGR and CPT of several routers with percentile-bootstrap intervals.

    Every router is scored on the same resamples, so differences between routers are
    paired. Queries are resampled, or, given ``clusters``, whole clusters are (the
    cluster bootstrap of :func:`~cost_envs.metrics.bootstrap.resample_weights`: the
    interval to report when the test split holds out whole groups).

    Args:
        routers: Name -> scores (one per query), or ``None`` for random routing, whose
            values are the exact expectations (APGR 0.5, CPT(x) = x) on every resample
            as well: its intervals are points, and paired differences against it reduce
            to the other router's interval shifted.
        weak_correct: Correctness of the weak model per query.
        strong_correct: Correctness of the strong model per query.
        levels: CPT levels (PGR fractions in ``(0, 1]``).
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling.
        confidence: Interval coverage.
        reference: Name of a router to difference the others against (router minus
            reference, per resample), a sequence of such names, or ``None``.
        clusters: Optional cluster label per query (e.g. the test queries' groups):
            resample clusters instead of queries.

    Returns:
        Name -> ``{"apgr": {"value", "ci"}, "cpt_50": {...}, ..., "undefined_resamples"}``;
        for each ``reference``, every other router also has ``"minus_<reference>"`` with
        the paired differences of every metric. ``undefined_resamples`` counts resamples on
        which the strong model was not better (PGR undefined, left out of the intervals).
        Every entry says what was resampled: ``"resampled"`` is ``"queries"`` or
        ``"clusters"``, and ``"units"`` how many there were.
    """
    w, s = _outcomes(weak_correct, strong_correct)
    n = len(w)
    if not routers:
        raise ValueError("routers: expected at least one router")
    references = ([] if reference is None else [reference] if isinstance(reference, str)
                  else list(reference))
    for ref in references:
        if ref not in routers:
            raise ValueError(f"reference: {ref!r} is not one of {list(routers)}")
    check_bootstrap_args(n_resamples, confidence)
    codes = cluster_codes(clusters, n)
    for level in levels:
        number(level, "levels", minimum=0, maximum=1, inclusive=(False, True))
    keys = ["apgr", *(cpt_key(level) for level in levels)]
    plans: dict[str, tuple[np.ndarray | None, np.ndarray | None]] = {}
    points: dict[str, dict[str, float]] = {}
    for name, scores in routers.items():
        if scores is None:
            plans[name] = (None, None)
            points[name] = {"apgr": 0.5, **{cpt_key(lv): float(lv) for lv in levels}}
            continue
        x = _scores(scores, n)
        plans[name] = threshold_order(x)
        curve = routing_curve(x, w, s)
        try:
            points[name] = {"apgr": curve.apgr,
                            **{cpt_key(lv): curve.cpt(lv) for lv in levels}}
        except ValueError:
            points[name] = dict.fromkeys(keys, float("nan"))
    rng = np.random.default_rng(seed)
    samples: dict[str, dict[str, list[np.ndarray]]] = {
        name: {k: [] for k in keys} for name in routers}
    # Resamples as multinomial counts per query (a float matrix, hence the smaller block).
    for size in resample_blocks(n_resamples, n, block_cells=_BLOCK):
        weights = resample_weights(rng, size, n, codes)
        for name, (order, ends) in plans.items():
            metrics = (random_metrics(weights, w, s, levels) if order is None or ends is None
                       else _resampled_metrics(weights, order, ends, w, s, levels))
            for key in keys:
                samples[name][key].append(metrics[key])
    stacked = {name: {k: np.concatenate(v) for k, v in d.items()} for name, d in samples.items()}
    out: dict[str, dict[str, Any]] = {}
    for name in routers:
        entry: dict[str, Any] = {
            key: {"value": points[name][key], "ci": finite_interval(stacked[name][key], confidence)}
            for key in keys
        }
        entry["undefined_resamples"] = int(np.isnan(stacked[name]["apgr"]).sum())
        entry["resampled"] = "queries" if codes is None else "clusters"
        entry["units"] = n if codes is None else int(codes.max()) + 1
        for ref in references:
            if name != ref:
                entry[f"minus_{ref}"] = {
                    key: {"value": points[name][key] - points[ref][key],
                          "ci": finite_interval(stacked[name][key] - stacked[ref][key], confidence)}
                    for key in keys
                }
        out[name] = entry
    return out
