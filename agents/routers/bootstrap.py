"""Every routing metric on one draw of bootstrap resamples, in memory linear in the queries.

A routing table's intervals are all read off the same resamples (queries, or whole groups
when groups were held out: the cluster bootstrap), drawn once by :func:`run`, block by
block, each block a ``(resamples, queries)`` array of counts of bounded size
(:data:`BLOCK_CELLS`), so memory grows with the number of queries and never with its
square. The draws are those of :func:`cost_envs.metrics.bootstrap.resample_weights` with
the same seed, whatever the block size, so every metric here has the resamples the
single-purpose bootstraps of :mod:`cost_envs.metrics` would have drawn. Accumulators
read each block:

* :class:`PointScores`: accuracy, quality, cost per query and call shares of routing
  decisions, and the two random references **matched within each resample**: random
  routing at the router's own model shares of that resample (the share difference is
  exactly 0 on every resample) and random routing on the single models' frontier at the
  router's own cost per query of that resample (:func:`frontier_mix`; with two models,
  random routing at the cost-matched share), with paired differences;
* :class:`CurveScores`: APGR and CPTs of threshold routers
  (:mod:`cost_envs.metrics.routing`'s definitions) and AIQ on the cost axis
  (:func:`cost_envs.metrics.frontier.aiq`'s definition). A curve's mean cost and quality
  at every threshold come from cumulative sums along the routing order
  (:func:`curve_points`), and :func:`frontier_aiq` drops, in vectorised passes, every
  point lying on or under the chord of its neighbours (such a point is never a frontier
  vertex) before the frontier's own loop runs on the few that remain. The old way built
  a queries x thresholds matrix (0.37 GB at 2,942 queries); this is O(queries) memory and
  about O(queries) time per resample (``benchmarks/routing_scale.py`` measures a whole
  routing table up to 100k queries and 1,000 resamples; its figures, with the machine and
  its load, are in ``benchmarks/results/routing_scale.md``).

:func:`threshold_aiq` is one curve's AIQ on all its queries (no resampling), linear too:
what a cross-validation fold reads.

The private helpers of :mod:`cost_envs.metrics.routing` imported here (PGR's first
crossing, random routing's exact values, the interval of finite values) keep one
definition of each metric; they would be public if that module took resample weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from cost_envs.metrics.bootstrap import (
    interval_around,
    percentile_interval,
    resample_blocks,
    resample_weights,
)
from cost_envs.metrics.frontier import aiq, frontier

# PGR's crossings, random routing's exact values, the intervals: cost_envs.metrics.routing's
from cost_envs.metrics.routing import (
    cpt_key,
    finite_interval,
    first_crossing,
    random_metrics,
    routing_curve,
    threshold_order,
)

#: Largest block of resample weights (resamples x queries) held at once: 16 MB.
BLOCK_CELLS = 1 << 21
#: Vectorised chord passes before the frontier's loop takes the points that remain.
MAX_PASSES = 64
#: Router name -> part (``""``: its own, or a reference) -> metric -> one value per draw.
Metrics = dict[str, dict[str, dict[str, np.ndarray]]]


class Accumulator(Protocol):
    """What :func:`run` feeds: each block of resample weights, then the results."""

    def add(self, weights: np.ndarray) -> None:
        """Read one ``(resamples, queries)`` block of resample counts."""

    def result(self, confidence: float) -> dict[str, dict[str, Any]]:
        """Name -> metric -> ``{"value", "ci"}`` at coverage ``confidence``."""


def draws(n: int, codes: np.ndarray | None, n_resamples: int, seed: int,
          cells: int | None = None) -> Iterator[np.ndarray]:
    """The resample weights, ``(block, n)`` counts per block (the engine's stream)."""
    rng = np.random.default_rng(seed)
    for size in resample_blocks(n_resamples, n, block_cells=cells or BLOCK_CELLS):
        yield resample_weights(rng, size, n, codes)


def run(accumulators: Sequence[Accumulator], n: int, codes: np.ndarray | None,
        n_resamples: int, confidence: float, seed: int) -> list[dict[str, dict[str, Any]]]:
    """Feed every block of one draw to every accumulator; their results, in order.

    In one BLAS thread: the blocks' matrix-vector products are too small to share, and two
    threads on two cores took 1.7 times the CPU and twice the wall time of one (30,000
    queries, ``benchmarks/routing_scale.py``); one thread also adds in one order on any
    machine, as the committed tables were made (``OMP_NUM_THREADS=1``).
    """
    from agents.routers.solvers import one_thread

    with one_thread():
        for weights in draws(n, codes, n_resamples, seed):
            for acc in accumulators:
                acc.add(weights)
        return [acc.result(confidence) for acc in accumulators]


def _entry(point: float, drawn: list[np.ndarray] | None, confidence: float
           ) -> dict[str, Any]:
    if drawn is None:
        return {"value": point, "ci": None}
    ci = percentile_interval(np.concatenate(drawn), confidence)
    return {"value": point, "ci": interval_around(point, ci)}


# --------------------------------------------------------------------- threshold curves
def curve_points(weights: np.ndarray, order: np.ndarray, ends: np.ndarray,
                 weak: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """Mean of a per-query value at every point of a threshold curve, per resample.

    Args:
        weights: ``(b, n)`` resample counts.
        order: The routing order (highest score first).
        ends: The curve's points: how many queries of ``order`` go strong at each.
        weak: ``(n,)`` the value when a query goes to the weak model.
        strong: ``(n,)`` the value when it goes to the strong one.

    Returns:
        ``(b, len(ends) + 1)``: column 0 all weak, column ``k`` the first ``ends[k - 1]``
        queries of ``order`` strong.
    """
    return _along(weights[:, order], ends, [(weak, strong - weak)], order,
                  weights.sum(axis=1), weights)[0]


def _along(ordered: np.ndarray, ends: np.ndarray, values: Sequence[tuple[np.ndarray, Any]],
           order: np.ndarray, total: np.ndarray, weights: np.ndarray) -> list[np.ndarray]:
    """Curve means of several values from one gather of the weights (``ordered``).

    Each value is ``(base, step)``: its per-query value with every query weak, and what a
    strong call adds (``None``: the count itself, for the strong-call share).
    """
    out = []
    every = len(ends) == ordered.shape[1]  # all scores distinct: every query is a point
    for base, step in values:
        curve = np.empty((ordered.shape[0], len(ends) + 1))
        curve[:, 0] = 0.0
        if every:  # cumulative sums straight into the curve, no gather
            np.multiply(ordered, 1.0 if step is None else step[order], out=curve[:, 1:])
            np.cumsum(curve[:, 1:], axis=1, out=curve[:, 1:])
        else:
            run = ordered.copy() if step is None else ordered * step[order]
            np.cumsum(run, axis=1, out=run)
            curve[:, 1:] = run[:, ends - 1]
        if base is not None:
            curve += (weights @ base)[:, None]
        curve /= total[:, None]
        out.append(curve)
    return out


def hull_candidates(costs: np.ndarray, qualities: np.ndarray, max_passes: int = MAX_PASSES
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The points of one curve that may be frontier vertices; the frontier is unchanged.

    Sorted by cost (a no-op for the usual curve, whose cost rises with each strong call),
    each cost's best quality kept, then passes drop every point on or under the chord of
    its two neighbours: it is a convex combination of points of the set, lowered, so the
    non-decreasing hull is the same without it (ties included: the hull drops points on
    an edge too). ``max_passes`` bounds the passes; what remains is exact either way.
    """
    c, q = costs, qualities
    if np.any(c[1:] < c[:-1]):
        order = np.lexsort((-q, c))
        c, q = c[order], q[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    q, c = np.maximum.reduceat(q, starts), c[starts]
    for _ in range(max_passes):
        if len(c) < 3:
            break
        cross = ((c[1:-1] - c[:-2]) * (q[2:] - q[:-2])
                 - (q[1:-1] - q[:-2]) * (c[2:] - c[:-2]))
        under = cross >= 0
        if not under.any():
            break
        keep = np.ones(len(c), dtype=bool)
        keep[1:-1] = ~under
        c, q = c[keep], q[keep]
    return c, q


#: One curve's :func:`hull_candidates` per resample: ``(costs, qualities)`` of each.
Hulls = list[tuple[np.ndarray, np.ndarray]]


def curve_hulls(costs: np.ndarray, qualities: np.ndarray) -> Hulls:
    """:func:`hull_candidates` of each row's points (one curve per resample)."""
    return [hull_candidates(c, q) for c, q in zip(costs, qualities, strict=True)]


def hulls_aiq(hulls: Hulls, cost_range: Sequence[float]) -> np.ndarray:
    """:func:`~cost_envs.metrics.frontier.aiq` of each resample's hull candidates: ``(b,)``."""
    return np.array([aiq(c, q, cost_range) for c, q in hulls])


def frontier_aiq(costs: np.ndarray, qualities: np.ndarray, cost_range: Sequence[float]
                 ) -> np.ndarray:
    """:func:`~cost_envs.metrics.frontier.aiq` of each row's points: ``(b,)``."""
    return hulls_aiq(curve_hulls(costs, qualities), cost_range)


def threshold_aiq(scores: np.ndarray, weak_quality: np.ndarray, strong_quality: np.ndarray,
                  weak_cost: np.ndarray, strong_cost: np.ndarray,
                  cost_range: Sequence[float]) -> float:
    """AIQ of a threshold router's curve on all its queries, linear in the queries.

    The value of :func:`~cost_envs.metrics.frontier.aiq` on the column means of
    :func:`agents.routers.evaluation.curve_routing`'s matrices (what cross-validation
    reads per fold), without building them; ``nan`` when the range is empty.
    """
    if not cost_range[1] > cost_range[0]:
        return float("nan")
    order, ends = threshold_order(np.asarray(scores, dtype=np.float64))
    ones = np.ones((1, len(order)))
    return float(frontier_aiq(curve_points(ones, order, ends, weak_cost, strong_cost),
                              curve_points(ones, order, ends, weak_quality, strong_quality),
                              cost_range)[0])


class CurveScores:
    """APGR, CPTs and AIQ of threshold routers, on every block of one draw.

    Args:
        routers: Name -> ``(scores or None, weak_cost, strong_cost)``: one score per query
            (higher: strong; ``None``: random routing, its two end points) and the
            per-query cost of each call for that router (a cascade's strong call includes
            the weak one).
        weak: ``(n,)`` weak model's correctness (or score in ``[0, 1]``).
        strong: ``(n,)`` the strong model's.
        levels: CPT levels.
        cost_range: AIQ's ``(low, high)`` (``high <= low``: AIQ is ``nan``).
        references: Names to difference the others against, paired.
        resampled: Whether intervals are drawn (``False``: point values only).

    Each threshold curve's :func:`hull_candidates` on the block :meth:`add` read last are
    kept: :meth:`hulls` hands them on, so that another accumulator fed the same block
    after this one (:class:`~agents.routers.evaluation.RuleAtCost`) reads a curve's
    points without computing them again.
    """

    def __init__(self, routers: Mapping[str, tuple[Any, np.ndarray, np.ndarray]],
                 weak: np.ndarray, strong: np.ndarray, levels: Sequence[float],
                 cost_range: Sequence[float], references: Sequence[str] = (),
                 resampled: bool = True) -> None:
        self.w, self.s, self.levels = weak, strong, list(levels)
        self.span = [float(v) for v in cost_range]
        self.references = list(references)
        self.keys = ["apgr", *(cpt_key(lv) for lv in self.levels)]
        self.plans: dict[str, Any] = {}
        self.points: dict[str, dict[str, float]] = {}
        #: Name -> (the block of weights, its hull candidates per resample) last computed.
        self.last: dict[str, tuple[np.ndarray, Hulls]] = {}
        n = len(weak)
        for name, (scores, wc, sc) in routers.items():
            plan = None if scores is None else threshold_order(scores)
            self.plans[name] = (plan, wc, sc)
            if plan is None:
                self.points[name] = {"apgr": 0.5, **{cpt_key(lv): float(lv)
                                                     for lv in self.levels}}
            else:
                curve = routing_curve(scores, weak, strong)
                try:
                    self.points[name] = {"apgr": curve.apgr, **{
                        cpt_key(lv): curve.cpt(lv) for lv in self.levels}}
                except ValueError:  # no gap between the models: PGR undefined
                    self.points[name] = dict.fromkeys(self.keys, float("nan"))
            self.points[name]["aiq"] = float(self._aiq(np.ones((1, n)), name)[0])
        self.drawn: dict[str, dict[str, list[np.ndarray]]] | None = (
            {name: {k: [] for k in [*self.keys, "aiq"]} for name in routers}
            if resampled else None)

    def _aiq(self, weights: np.ndarray, name: str) -> np.ndarray:
        """AIQ of one router's curve on each resample (point values: one row of ones)."""
        return self._metrics(weights, name, pgr=False)["aiq"]

    def _metrics(self, weights: np.ndarray, name: str, pgr: bool = True
                 ) -> dict[str, np.ndarray]:
        """APGR, CPTs (with ``pgr``) and AIQ of one router on a block of resamples.

        One gather of the weights along the routing order gives the curve's share,
        accuracy and cost at every point (cumulative sums); PGR, its area and its first
        crossings are :mod:`cost_envs.metrics.routing`'s definitions on them.
        """
        plan, wc, sc = self.plans[name]
        out: dict[str, np.ndarray] = {}
        total = weights.sum(axis=1)
        if plan is None:  # random routing: the straight line between the two ends
            if pgr:
                out.update(random_metrics(weights, self.w, self.s, self.levels))
            ends_q = np.column_stack([weights @ self.w, weights @ self.s]) / total[:, None]
            ends_c = np.column_stack([weights @ wc, weights @ sc]) / total[:, None]
            out["aiq"] = (frontier_aiq(ends_c, ends_q, self.span)
                          if self.span[1] > self.span[0]
                          else np.full(weights.shape[0], np.nan))
            return out
        order, ends = plan
        wanted = [(self.w, self.s - self.w), (wc, sc - wc)]
        if pgr:
            wanted.append((None, None))
        curves = _along(weights[:, order], ends, wanted, order, total, weights)
        accuracy, cost = curves[0], curves[1]
        if pgr:
            share = curves[2]
            gap = (weights @ (self.s - self.w)) / total
            with np.errstate(divide="ignore", invalid="ignore"):
                p = (accuracy - accuracy[:, :1]) / gap[:, None]
            p[gap <= 0] = np.nan  # PGR undefined on this resample
            out["apgr"] = np.sum(np.diff(share, axis=1) * (p[:, 1:] + p[:, :-1]) / 2.0,
                                 axis=1)
            for level in self.levels:
                out[cpt_key(level)] = first_crossing(share, p, level)
        hulls = curve_hulls(cost, accuracy)
        self.last[name] = (weights, hulls)
        out["aiq"] = (hulls_aiq(hulls, self.span) if self.span[1] > self.span[0]
                      else np.full(weights.shape[0], np.nan))
        return out

    def hulls(self, name: str, weights: np.ndarray) -> Hulls:
        """A threshold router's curve on each resample of ``weights``, as hull candidates.

        Those :meth:`add` computed when ``weights`` is the very block it read last (the
        curve's points computed once per block), else computed now.
        """
        if self.plans[name][0] is None:
            raise ValueError(f"{name!r}: random routing has no threshold curve")
        last = self.last.get(name)
        if last is None or last[0] is not weights:
            self._metrics(weights, name, pgr=False)
        return self.last[name][1]

    def add(self, weights: np.ndarray) -> None:
        """Read one block of resample weights."""
        if self.drawn is None:
            return
        for name in self.plans:
            for key, values in self._metrics(weights, name).items():
                self.drawn[name][key].append(values)

    def result(self, confidence: float) -> dict[str, dict[str, Any]]:
        """Name -> each metric's ``{"value", "ci"}``, paired differences, undefined count.

        ``"apgr"``, ``"cpt_.."``, ``"aiq"`` (with its ``cost_range``),
        ``"undefined_resamples"`` and ``"minus_<reference>"`` of each metric.
        """
        keys = [*self.keys, "aiq"]
        stacked = (None if self.drawn is None else
                   {name: {k: np.concatenate(v) for k, v in d.items()}
                    for name, d in self.drawn.items()})
        out: dict[str, dict[str, Any]] = {}
        for name, point in self.points.items():
            entry: dict[str, Any] = {}
            for key in keys:
                ci = None if stacked is None else finite_interval(stacked[name][key], confidence)
                if ci is not None and key == "aiq" and np.isfinite(point[key]):
                    ci = interval_around(point[key], ci)
                entry[key] = {"value": point[key], "ci": ci}
            entry["aiq"]["cost_range"] = self.span
            entry["undefined_resamples"] = (0 if stacked is None else
                                            int(np.isnan(stacked[name]["apgr"]).sum()))
            for ref in self.references:
                if ref == name:
                    continue
                diff = {}
                for key in keys:
                    value = point[key] - self.points[ref][key]
                    ci = (None if stacked is None else
                          finite_interval(stacked[name][key] - stacked[ref][key], confidence))
                    diff[key] = {"value": value, "ci": ci}
                entry[f"minus_{ref}"] = diff
            out[name] = entry
        return out


# ---------------------------------------------------------------------- point decisions
def frontier_mix(model_costs: np.ndarray, model_qualities: np.ndarray,
                 budgets: np.ndarray) -> np.ndarray:
    """Random routing on the single models' frontier at each row's budget: ``(b, m)``.

    Row ``i``'s models have mean costs ``model_costs[i]`` and qualities
    ``model_qualities[i]``; the two adjacent frontier models around ``budgets[i]`` are
    mixed so that the mean cost is the budget (below the cheapest frontier model: that
    model; beyond the best: the best), as
    :func:`agents.routers.evaluation.hull_routing` does on a whole test set.
    """
    out = np.zeros(model_costs.shape)
    for i, (c, q, budget) in enumerate(zip(model_costs, model_qualities, budgets,
                                           strict=True)):
        fc, fq = frontier(c, q)
        hull = [next(j for j in range(len(c)) if c[j] == x and q[j] == y)
                for x, y in zip(fc, fq, strict=True)]
        k = int(np.searchsorted(fc, budget))
        if k == 0 or k == len(fc):
            out[i, hull[min(k, len(fc) - 1)]] = 1.0
        else:
            share = (budget - fc[k - 1]) / (fc[k] - fc[k - 1])
            out[i, hull[k - 1]], out[i, hull[k]] = 1.0 - share, share
    return out


#: The metrics of every point entry and of its references.
POINT_METRICS = ("accuracy", "quality", "cost_per_query", "strong_share")


class PointScores:
    """Routing decisions against random routing matched within each resample.

    Args:
        correct: ``(n, m)`` correctness of each model.
        quality: ``(n, m)`` logged score of each model.
        costs: ``(n, m)`` the price of each call: what the random references pay.
        routers: Name -> ``(probabilities (n, m), costs (n, m))``: the routing and what
            its calls cost (a cascade's escalations pay both calls).
        strong: Index of the model whose share is ``strong_share``.
        resampled: Whether intervals are drawn (``False``: point values only).
    """

    def __init__(self, correct: np.ndarray, quality: np.ndarray, costs: np.ndarray,
                 routers: Mapping[str, tuple[np.ndarray, np.ndarray]], strong: int,
                 resampled: bool = True) -> None:
        self.m, self.strong, self.names = correct.shape[1], strong, list(routers)
        columns = [correct, quality, costs]
        for p, c in routers.values():  # per router: accuracy, quality, cost, shares
            columns += [(p * correct).sum(axis=1, keepdims=True),
                        (p * quality).sum(axis=1, keepdims=True),
                        (p * c).sum(axis=1, keepdims=True), p]
        self.columns = np.hstack(columns)
        self.point = self._metrics(self.columns.mean(axis=0, keepdims=True))
        self.drawn: list[Metrics] | None = [] if resampled else None

    def _metrics(self, means: np.ndarray) -> Metrics:
        """Every router's metrics and its references' from ``(b, columns)`` means."""
        m = self.m
        acc, qual, cost = means[:, :m], means[:, m:2 * m], means[:, 2 * m:3 * m]
        out: Metrics = {}
        for k, name in enumerate(self.names):
            base = 3 * m + k * (3 + m)
            shares = means[:, base + 3:base + 3 + m]
            own = {"accuracy": means[:, base], "quality": means[:, base + 1],
                   "cost_per_query": means[:, base + 2], "strong_share": shares[:, self.strong]}
            mix = frontier_mix(cost, qual, own["cost_per_query"])
            at_cost = {"accuracy": (mix * acc).sum(axis=1), "quality": (mix * qual).sum(axis=1),
                       "cost_per_query": (mix * cost).sum(axis=1),
                       "strong_share": mix[:, self.strong]}
            # inside the frontier's range the mix costs the budget by construction
            inside = (mix > 0).sum(axis=1) == 2
            at_cost["cost_per_query"] = np.where(inside, own["cost_per_query"],
                                                 at_cost["cost_per_query"])
            at_share = {"accuracy": (shares * acc).sum(axis=1),
                        "quality": (shares * qual).sum(axis=1),
                        "cost_per_query": (shares * cost).sum(axis=1),
                        "strong_share": shares[:, self.strong]}
            out[name] = {"": own, "random_at_share": at_share, "random_at_cost": at_cost}
            for ref in ("random_at_share", "random_at_cost"):
                out[name][f"minus_{ref}"] = {key: own[key] - out[name][ref][key]
                                             for key in POINT_METRICS}
        return out

    def add(self, weights: np.ndarray) -> None:
        """Read one block of resample weights."""
        if self.drawn is not None:
            self.drawn.append(self._metrics(
                (weights @ self.columns) / weights.sum(axis=1, keepdims=True)))

    def result(self, confidence: float) -> dict[str, dict[str, Any]]:
        """Name -> the router's metrics, its two references and the paired differences.

        ``"random_at_share"``, ``"random_at_cost"``, ``"minus_random_at_share"`` and
        ``"minus_random_at_cost"``, each ``{metric: {"value", "ci"}}``.
        """
        out: dict[str, dict[str, Any]] = {}
        for name, parts in self.point.items():
            entry: dict[str, Any] = {}
            for part, metrics in parts.items():
                values = {key: _entry(float(v[0]), None if self.drawn is None else
                                      [d[name][part][key] for d in self.drawn], confidence)
                          for key, v in metrics.items()}
                if part:
                    entry[part] = values
                else:
                    entry.update(values)
            out[name] = entry
        return out
