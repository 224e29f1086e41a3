"""Routers scored exactly on logged outcomes: every test query once, the usual baselines.

A router's *decisions* say which model answers each test query: ``(n,)`` model indices,
or an ``(n, m)`` matrix of probabilities (each row sums to 1) for a randomised router,
whose score is then its exact expectation. :func:`score_routing` scores decisions on a
:class:`~cost_envs.traces.TraceDataset` over every query exactly once (no episodes, no
cap): accuracy, mean score, cost per query, the share of calls to each model and to the
strong one, with bootstrap intervals over queries, or over groups when the split held
out whole groups (``split_by="group"``: the cluster bootstrap of
:func:`cost_envs.metrics.bootstrap.bootstrap_means`). :func:`score_routings` scores
several routers on the same resamples, with paired differences against a reference.

**Against random routing**, :func:`compare_with_random` is the comparison every table
makes: each router beside random routing at the *same share* of calls to each model and
on the single models' frontier at the *same cost* per query, both matched to the router
within each bootstrap resample (a reference fixed at the whole test set's share would
leave a share difference that varies from resample to resample, and widen or bias the
paired interval), with paired differences.

The baselines (:mod:`agents.routers.baselines`, re-exported here), as the routing
literature defines them (RouteLLM, RouterBench):

* :func:`random_routing`: each query goes to the strong model with probability ``r``
  (the strong-call share); its exact expectation, nothing drawn; :func:`random_shares`
  is the same over K models at given shares (uniform by default);
* :func:`single_model_frontier` and :func:`hull_routing`: the cost-quality frontier of
  the single models (their non-decreasing convex hull), which random routing between
  them reaches, and the random routing at a given cost on it;
* :func:`single_model`: every query to one model;
* :func:`oracle_routing`: the per-query oracle: the model with the best score on that
  query, the cheapest of those on ties (with two models: the strong one exactly where
  only it is right).

:func:`baselines` gathers the two-model ones, :func:`model_baselines` the K-model ones.

:func:`curve_metrics` reads a score-based router's threshold curve: APGR and CPT
(:mod:`cost_envs.metrics.routing`'s definitions) and AIQ on the cost axis
(:func:`cost_envs.metrics.frontier.aiq`), with intervals (clusters when split by group),
in memory and time linear in the queries (:mod:`agents.routers.bootstrap`);
:func:`score_table` runs it and :func:`compare_with_random` on one draw of resamples.
:func:`compare_with_rule` pairs routers with a rule instead of random routing: the rule's
curve (a two-model rule's threshold curve, a K-model rule's operating points) read at each
router's cost per query, on the same resamples;
:func:`score_table` runs it too (``rule=``) on its draw, reading the rule's curve points
its curve metrics computed.
Thresholds for a target strong-call share or cost are :mod:`agents.routers.calibration`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from agents.routers.baselines import (
    baselines,
    hull_routing,
    model_baselines,
    oracle_routing,
    random_routing,
    random_shares,
    single_model,
    single_model_frontier,
    threshold_routing,
)
from agents.routers.bootstrap import (
    CurveScores,
    Hulls,
    PointScores,
    curve_hulls,
    curve_points,
    run,
)
from agents.routers.inputs import call_costs, resample_clusters, routing_probabilities
from cost_envs.config import one_of
from cost_envs.metrics.bootstrap import (
    ResampledMeans,
    bootstrap_means,
    check_bootstrap_args,
    cluster_codes,
    interval_around,
    percentile_interval,
)
from cost_envs.metrics.frontier import frontier
from cost_envs.metrics.routing import DEFAULT_LEVELS, threshold_order
from cost_envs.traces import SPLIT_BY, TraceDataset

__all__ = [
    "RuleAtCost", "baselines", "call_costs", "compare_with_random", "compare_with_rule",
    "curve_metrics", "curve_routing",
    "hull_routing", "model_baselines", "oracle_routing", "random_routing", "random_shares",
    "resample_clusters", "routing_probabilities", "rule_verdict", "score_routing",
    "score_routings",
    "score_table", "single_model", "single_model_frontier", "sweep_hulls", "threshold_hulls",
    "threshold_routing",
]


def score_routing(
    data: TraceDataset,
    decisions: Any,
    costs: Any = None,
    *,
    strong: str | None = None,
    split_by: str = "query",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Accuracy, cost and call shares of routing decisions over every query exactly once.

    Args:
        data: The test queries.
        decisions: Which model answers each query (see :func:`routing_probabilities`).
        costs: ``(n, m)`` cost of each call (default :func:`call_costs`).
        strong: The strong model's name, for ``strong_share``.
        split_by: ``"query"`` resamples queries; ``"group"`` resamples whole groups
            (the split held out groups, so groups are the sampling unit).
        n_resamples: Bootstrap resamples; 0 for point values only (``ci`` ``None``).
        confidence: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        ``{"queries", "accuracy", "quality", "cost_per_query", "strong_share" (with
        ``strong``): {"value", "ci"}, "model_share": {model: share}, "resampled",
        "units"}``; ``quality`` is the mean logged score (equal to accuracy for 0/1
        outcomes).
    """
    return score_routings(data, {"_": decisions}, costs, strong=strong, split_by=split_by,
                          n_resamples=n_resamples, confidence=confidence, seed=seed)["_"]


def _columns(data: TraceDataset, p: np.ndarray, c: np.ndarray, strong: str | None
             ) -> dict[str, np.ndarray]:
    """Per-query expected outcomes of routing probabilities ``p``."""
    out = {"accuracy": (p * data.correct).sum(axis=1), "quality": (p * data.scores).sum(axis=1),
           "cost_per_query": (p * c).sum(axis=1)}
    if strong is not None:
        out["strong_share"] = p[:, data.model_index(strong)]
    return out


def score_routings(
    data: TraceDataset,
    routers: Mapping[str, Any],
    costs: Any = None,
    *,
    strong: str | None = None,
    split_by: str = "query",
    reference: str | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """:func:`score_routing` of several routers on the *same* resamples, paired.

    Args:
        data: The test queries.
        routers: Name -> decisions (see :func:`routing_probabilities`).
        costs: ``(n, m)`` cost of each call (default :func:`call_costs`).
        strong: The strong model's name, for ``strong_share``.
        split_by: ``"query"`` resamples queries; ``"group"`` whole groups.
        reference: A router's name: every other router also gets ``"minus_<reference>"``,
            its metrics minus the reference's, per resample (paired intervals).
        n_resamples: Bootstrap resamples; 0 for point values only.
        confidence: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        Name -> :func:`score_routing`'s dictionary (plus ``minus_<reference>``).
    """
    if not routers:
        raise ValueError("routers: expected at least one router")
    probs, columns = _routing_columns(data, routers, call_costs(data, costs), strong,
                                      reference)
    clusters = resample_clusters(data, split_by)
    keys = list(columns)
    if n_resamples == 0:
        values = {key: {"value": float(v.mean()), "ci": None} for key, v in columns.items()}
    else:
        drawn = bootstrap_means({str(i): columns[key] for i, key in enumerate(keys)},
                                clusters=clusters, n_resamples=n_resamples,
                                confidence=confidence, seed=seed)
        values = {key: drawn[str(i)] for i, key in enumerate(keys)}
    units = {"resampled": "queries" if clusters is None else "clusters",
             "units": data.n_queries if clusters is None else int(clusters.max()) + 1}
    return _routing_entries(data, probs, values, reference, units)


#: (router, None or the reference it is compared with, metric): a routing's per-query column.
_Key = tuple[str, str | None, str]


def _routing_columns(data: TraceDataset, routers: Mapping[str, Any], c: np.ndarray,
                     strong: str | None, reference: str | None
                     ) -> tuple[dict[str, np.ndarray], dict[_Key, np.ndarray]]:
    """Each routing's probabilities, and the per-query values whose means it is scored by."""
    if reference is not None and reference not in routers:
        raise ValueError(f"reference: {reference!r} is not one of {list(routers)}")
    probs = {name: routing_probabilities(d, data.n_queries, data.n_models)
             for name, d in routers.items()}
    per = {name: _columns(data, p, c, strong) for name, p in probs.items()}
    columns: dict[_Key, np.ndarray] = {
        (name, None, k): v for name, cols in per.items() for k, v in cols.items()}
    if reference is not None:
        columns.update({(name, reference, k): v - per[reference][k]
                        for name, cols in per.items() if name != reference
                        for k, v in cols.items()})
    return probs, columns


def _routing_entries(data: TraceDataset, probs: Mapping[str, np.ndarray],
                     values: Mapping[_Key, dict[str, Any]], reference: str | None,
                     units: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`score_routings`' dictionary from the columns' means and intervals."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in probs.items():
        entry: dict[str, Any] = {k: v for (n, ref, k), v in values.items()
                                 if n == name and ref is None}
        if reference is not None and name != reference:
            entry[f"minus_{reference}"] = {k: v for (n, ref, k), v in values.items()
                                           if n == name and ref == reference}
        entry["model_share"] = dict(zip(data.models, p.mean(axis=0).tolist(), strict=True))
        entry["queries"] = data.n_queries
        entry.update(units)
        out[name] = entry
    return out


# ---------------------------------------------------------------------- threshold curves
def _curve_inputs(data: TraceDataset, routers: Mapping[str, Any], weak: str, strong: str,
                  c: np.ndarray, router_costs: Mapping[str, Any] | None
                  ) -> dict[str, tuple[Any, np.ndarray, np.ndarray]]:
    """Name -> (scores or None, weak cost, strong cost) of each curve router."""
    iw, is_ = data.model_index(weak), data.model_index(strong)
    out = {}
    for name, scores in routers.items():
        own = c if router_costs is None or name not in router_costs else call_costs(
            data, router_costs[name])
        x = None if scores is None else np.asarray(scores, dtype=np.float64)
        if x is not None and (x.shape != (data.n_queries,) or not np.isfinite(x).all()):
            raise ValueError(f"routers[{name!r}]: expected {data.n_queries} finite scores, "
                             f"got shape {x.shape}")
        out[name] = (x, own[:, iw], own[:, is_])
    return out


def _references(reference: str | Sequence[str] | None, names: Sequence[str]) -> list[str]:
    refs = [] if reference is None else [reference] if isinstance(reference, str) else list(
        reference)
    for ref in refs:
        if ref not in names:
            raise ValueError(f"reference: {ref!r} is not one of {list(names)}")
    return refs


def curve_metrics(
    data: TraceDataset,
    routers: Mapping[str, Any],
    weak: str,
    strong: str,
    costs: Any = None,
    *,
    split_by: str = "query",
    levels: Sequence[float] = DEFAULT_LEVELS,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    reference: str | Sequence[str] | None = None,
    cost_range: Sequence[float] | None = None,
    router_costs: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """APGR, CPTs and AIQ (with intervals) of score-based routers' threshold curves.

    Linear in the queries, in memory and time per resample
    (:class:`~agents.routers.bootstrap.CurveScores`); the values are those of
    :func:`~cost_envs.metrics.routing.bootstrap_routing` and of
    :func:`~cost_envs.metrics.frontier.bootstrap_aiq` on the :func:`curve_routing`
    matrices, up to float rounding, on the same resamples.

    Args:
        data: The test queries.
        routers: Name -> scores per query (higher: strong), or ``None`` for random
            routing (exact: APGR 0.5, CPT(x) = x, AIQ of the straight line).
        weak: The weak model.
        strong: The strong model.
        costs: ``(n, m)`` cost of each call (default :func:`call_costs`).
        split_by: ``"group"`` resamples whole groups (the cluster bootstrap).
        levels: CPT levels.
        n_resamples: Bootstrap resamples.
        confidence: Interval coverage.
        seed: Seed of the resampling.
        reference: Router(s) to difference the others against (paired, every metric
            AIQ included).
        cost_range: AIQ's cost range; default the two models' mean costs (from all
            weak to all strong).
        router_costs: Name -> ``(n, m)`` costs of that router's calls where they differ
            from ``costs`` (a cascade's escalation pays both calls).

    Returns:
        Name -> ``{"apgr", "cpt_50", ..., "aiq": {"value", "ci"}, "undefined_resamples",
        "resampled", "units"}`` (``aiq`` also has its ``cost_range``), plus
        ``"minus_<reference>"`` of every metric.
    """
    return score_table(data, {}, routers, weak=weak, strong=strong, costs=costs,
                       router_costs=router_costs, split_by=split_by, levels=levels,
                       n_resamples=n_resamples, confidence=confidence, seed=seed,
                       curve_reference=reference, cost_range=cost_range)["curves"]


def compare_with_random(
    data: TraceDataset,
    routers: Mapping[str, Any],
    costs: Any = None,
    *,
    router_costs: Mapping[str, Any] | None = None,
    strong: str | None = None,
    split_by: str = "query",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Routing decisions against random routing at the same share and at the same cost.

    Both references are matched to the router **within each resample**: random routing
    at the model shares the router has on that resample (so every share difference is
    exactly 0 on every resample, and a router that is random itself is not told apart
    from it), and random routing on the single models' frontier at the cost per query
    the router has on that resample (with two models, the cost-matched share between
    them; :func:`~agents.routers.bootstrap.frontier_mix`). The references pay
    ``costs``, the routers their own (``router_costs``).

    Args:
        data: The test queries.
        routers: Name -> decisions (see :func:`routing_probabilities`).
        costs: ``(n, m)`` cost of each call (default :func:`call_costs`).
        router_costs: Name -> ``(n, m)`` costs of that router's calls where they differ.
        strong: The model whose share is ``strong_share`` (default the dearest on
            average).
        split_by: ``"query"`` resamples queries; ``"group"`` whole groups.
        n_resamples: Bootstrap resamples; 0 for point values only (``ci`` ``None``).
        confidence: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        Name -> ``{"accuracy", "quality", "cost_per_query", "strong_share",
        "random_at_share", "random_at_cost", "minus_random_at_share",
        "minus_random_at_cost", "model_share", "strong", "queries", "resampled",
        "units"}``; the references and differences hold the four metrics, each
        ``{"value", "ci"}``.
    """
    return score_table(data, routers, {}, strong=strong, costs=costs,
                       router_costs=router_costs, split_by=split_by,
                       n_resamples=n_resamples, confidence=confidence, seed=seed)["points"]


def score_table(
    data: TraceDataset,
    decisions: Mapping[str, Any],
    curves: Mapping[str, Any],
    *,
    weak: str | None = None,
    strong: str | None = None,
    costs: Any = None,
    router_costs: Mapping[str, Any] | None = None,
    split_by: str = "query",
    levels: Sequence[float] = DEFAULT_LEVELS,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    curve_reference: str | Sequence[str] | None = None,
    cost_range: Sequence[float] | None = None,
    routings: Mapping[str, Any] | None = None,
    rule: str | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """The table's comparisons (with random routing, curves, routings, a rule), one draw.

    :func:`compare_with_random`, :func:`curve_metrics`, :func:`score_routings` and
    :func:`compare_with_rule` on one draw of resamples.

    They read the same resamples (as they would with the same ``seed`` apart), drawn
    once: the draw is most of the time at 100k queries. The arguments are theirs, and
    ``routings``: name -> decisions scored as :func:`score_routings` scores them (the
    models alone, the oracle), with ``strong`` and no reference; ``rule``: the name of a
    score rule among ``curves``, which every router of ``decisions`` is set against at
    its own cost per query, as :func:`compare_with_rule` sets it (its curve's points on
    each block are those its curve metrics computed, not computed twice).

    Returns:
        ``{"points": compare_with_random's, "curves": curve_metrics', "routings":
        score_routings', "rule": compare_with_rule's}`` (``"rule"`` empty without it).
    """
    one_of(split_by, "split_by", SPLIT_BY)
    check_bootstrap_args(1 if n_resamples == 0 else n_resamples, confidence)  # 0: points only
    if curves and n_resamples == 0:
        raise ValueError("n_resamples: curve metrics need at least 1 resample, got 0")
    c = call_costs(data, costs)
    if strong is None:
        strong = data.models[int(np.argmax(c.mean(axis=0)))]
    is_ = data.model_index(strong)
    own = dict(router_costs or {})
    for name in own:
        if name not in decisions and name not in curves:
            raise ValueError(f"router_costs: {name!r} is not one of "
                             f"{[*decisions, *curves]}")
    if rule is not None and (curves.get(rule) is None or not decisions):
        raise ValueError(f"rule: expected routers and the name of a score rule among the "
                         f"curves {list(curves)}, got {rule!r}")
    chosen = {name: routing_probabilities(d, data.n_queries, data.n_models)
              for name, d in decisions.items()}
    paid = {name: call_costs(data, own[name]) if name in own else c for name in decisions}
    accumulators: list[Any] = []
    if decisions:
        accumulators.append(PointScores(data.correct.astype(np.float64), data.scores, c, {
            name: (p, paid[name]) for name, p in chosen.items()}, is_,
            resampled=n_resamples > 0))
    if curves:
        if weak is None:
            raise ValueError("weak: the curve metrics need the weak model's name")
        iw = data.model_index(weak)
        refs = _references(curve_reference, list(curves))
        ends = sorted((float(c[:, iw].mean()), float(c[:, is_].mean())))
        inputs = _curve_inputs(data, curves, weak, strong, c, own)
        curve_scores = CurveScores(
            inputs, data.correct[:, iw].astype(np.float64),
            data.correct[:, is_].astype(np.float64),
            levels, ends if cost_range is None else cost_range, refs)
        accumulators.append(curve_scores)
    if routings:
        probs, columns = _routing_columns(data, routings, c, strong, None)
        accumulators.append(ResampledMeans(columns))
    if rule is not None:  # after the curves: it reads the rule's hulls they computed
        accumulators.append(_rule_at_cost(
            data, chosen, paid, lambda weights: curve_scores.hulls(rule, weights)))
    clusters = resample_clusters(data, split_by)
    codes = cluster_codes(clusters, data.n_queries)
    results = run(accumulators, data.n_queries, codes, n_resamples, confidence, seed)
    units = {"resampled": "queries" if codes is None else "clusters",
             "units": data.n_queries if codes is None else int(codes.max()) + 1}
    out: dict[str, dict[str, dict[str, Any]]] = {"points": {}, "curves": {}, "routings": {},
                                                 "rule": {}}
    if decisions:
        points = results.pop(0)
        for name, p in chosen.items():
            out["points"][name] = {**points[name], "strong": strong, "model_share": dict(
                zip(data.models, p.mean(axis=0).tolist(), strict=True)),
                "queries": data.n_queries, **units}
    if curves:
        out["curves"] = {name: {**entry, **units} for name, entry in results.pop(0).items()}
    if routings:
        means = cast(Mapping[_Key, dict[str, Any]], results.pop(0))  # ResampledMeans' keys
        out["routings"] = _routing_entries(data, probs, means, None, units)
    if rule is not None:
        out["rule"] = results.pop(0)
    return out


def curve_routing(scores: np.ndarray | None, n: int) -> np.ndarray:
    """Which queries go strong at each point of a threshold curve: ``(n, points)`` bool.

    Quadratic in memory (``n x (n + 1)`` for distinct scores): for a curve's metrics use
    :func:`curve_metrics`, or :func:`~agents.routers.bootstrap.curve_points` on
    one row of weights, which are linear.

    Column ``k`` is the routing at the curve's ``k``-th point (0: all weak; last: all
    strong); ``None`` (random routing) has the two end points only (its curve is the
    straight line between them).
    """
    if scores is None:
        return np.column_stack([np.zeros(n, bool), np.ones(n, bool)])
    order, ends = threshold_order(scores)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank[:, None] < np.concatenate([[0], ends])[None, :]


class RuleAtCost:
    """Routers' accuracy minus a rule's at the same cost, within each resample.

    On every resample the rule's curve (accuracy and cost per query at each of its
    operating points) is reduced to its non-decreasing convex hull (the best the rule
    reaches at a cost, randomising between two adjacent points, as random routing at the
    same cost mixes the models on their frontier) and read at each router's cost per
    query on that resample (``np.interp``: below the rule's cheapest point, that point;
    beyond its best, the best). What :func:`run` feeds.

    Args:
        routers: Name -> ``((n,) correctness, (n,) cost)`` of the router's own routing.
        hulls: The rule's curve on each resample of a block, as
            :func:`~agents.routers.bootstrap.hull_candidates`: :func:`threshold_hulls` (a
            two-model rule's threshold curve; or a
            :meth:`~agents.routers.bootstrap.CurveScores.hulls` that has it and is fed
            each block first: the curve's points computed once) or :func:`sweep_hulls` (a
            K-model rule's operating points).
    """

    def __init__(self, routers: Mapping[str, tuple[np.ndarray, np.ndarray]],
                 hulls: Callable[[np.ndarray], Hulls]) -> None:
        self.hulls = hulls
        self.names = list(routers)
        self.columns = np.column_stack([np.asarray(v, dtype=np.float64)
                                        for pair in routers.values() for v in pair])
        self.point = self._minus_rule(np.ones((1, len(self.columns))))
        self.drawn: list[np.ndarray] = []

    def _minus_rule(self, weights: np.ndarray) -> np.ndarray:
        """``(b, routers)``: each router's accuracy minus the rule's at its cost."""
        means = (weights @ self.columns) / weights.sum(axis=1, keepdims=True)
        out = np.empty((weights.shape[0], len(self.names)))
        for i, candidates in enumerate(self.hulls(weights)):
            hull_cost, hull_accuracy = frontier(*candidates)
            out[i] = means[i, 0::2] - np.interp(means[i, 1::2], hull_cost, hull_accuracy)
        return out

    def add(self, weights: np.ndarray) -> None:
        """Read one block of resample weights."""
        self.drawn.append(self._minus_rule(weights))

    def result(self, confidence: float) -> dict[str, dict[str, Any]]:
        """Name -> ``{"accuracy": {"value", "ci"}}``: router minus rule, paired."""
        drawn = np.concatenate(self.drawn) if self.drawn else None
        out: dict[str, dict[str, Any]] = {}
        for k, name in enumerate(self.names):
            value = float(self.point[0, k])
            ci = None if drawn is None else interval_around(
                value, percentile_interval(drawn[:, k], confidence))
            out[name] = {"accuracy": {"value": value, "ci": ci}}
        return out


def threshold_hulls(rule_scores: np.ndarray, correct: np.ndarray, costs: np.ndarray
                    ) -> Callable[[np.ndarray], Hulls]:
    """A two-model rule's threshold curve on each resample, as hull candidates.

    Args:
        rule_scores: ``(n,)`` the rule's score of each query (higher: strong).
        correct: ``(n, 2)`` the weak and the strong model's correctness.
        costs: ``(n, 2)`` what the rule's weak and strong calls cost.
    """
    order, ends = threshold_order(np.asarray(rule_scores, dtype=np.float64))
    correct, costs = np.asarray(correct, dtype=np.float64), np.asarray(costs, dtype=np.float64)

    def hulls(weights: np.ndarray) -> Hulls:
        accuracy = curve_points(weights, order, ends, correct[:, 0], correct[:, 1])
        cost = curve_points(weights, order, ends, costs[:, 0], costs[:, 1])
        return curve_hulls(cost, accuracy)

    return hulls


def sweep_hulls(correct: np.ndarray, costs: np.ndarray) -> Callable[[np.ndarray], Hulls]:
    """A K-model rule's operating points on each resample, as hull candidates.

    Args:
        correct: ``(n, points)`` whether the model answering each query at each of the
            rule's operating points is right.
        costs: ``(n, points)`` what that call costs.
    """
    correct, costs = np.asarray(correct, dtype=np.float64), np.asarray(costs, dtype=np.float64)

    def hulls(weights: np.ndarray) -> Hulls:
        total = weights.sum(axis=1, keepdims=True)
        return curve_hulls((weights @ costs) / total, (weights @ correct) / total)

    return hulls


def rule_verdict(diff: Mapping[str, Any]) -> str:
    """How a paired router-minus-rule interval (``{"value", "ci"}``) reads."""
    low, high = diff["ci"]
    return "beats" if low > 0 else "loses" if high < 0 else "not resolved"


def compare_with_rule(
    data: TraceDataset,
    routers: Mapping[str, Any],
    rule: Any,
    *,
    weak: str | None = None,
    strong: str | None = None,
    costs: Any = None,
    router_costs: Mapping[str, Any] | None = None,
    split_by: str = "query",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Each router's accuracy minus a rule's curve at the router's cost, paired.

    The rule's curve is read on the same resamples, at the router's cost per query on
    each (:class:`RuleAtCost`): the paired difference "router minus the rule at equal
    cost", as :func:`compare_with_random` pairs a router with random routing at equal
    cost. With the ``seed`` and ``split_by`` of :func:`score_table`, the resamples are
    its resamples; where a table has a two-model rule's curve,
    ``score_table(..., rule=)`` gives the same numbers without drawing the resamples and
    the rule's curve again.

    Args:
        data: The test queries.
        routers: Name -> decisions (see :func:`routing_probabilities`).
        rule: ``(n,)`` a two-model rule's score of each query (higher: ``strong``): its
            threshold curve between ``weak`` and ``strong``; or ``(n, points)`` integer
            column indices of ``data``: the model answering each query at each of a
            K-model rule's operating points (its ``lam`` sweep,
            :class:`~agents.routers.rule.RuleMultiRouter`).
        weak: The weak model (a two-model rule's).
        strong: The strong model (a two-model rule's).
        costs: ``(n, m)`` cost of each call (default :func:`call_costs`): the rule's.
        router_costs: Name -> ``(n, m)`` costs of that router's calls where they differ.
        split_by: ``"query"`` resamples queries; ``"group"`` whole groups.
        n_resamples: Bootstrap resamples (>= 1).
        confidence: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        Name -> ``{"accuracy": {"value", "ci"}}``.
    """
    one_of(split_by, "split_by", SPLIT_BY)
    check_bootstrap_args(n_resamples, confidence)
    c = call_costs(data, costs)
    own = dict(router_costs or {})
    probs = {name: routing_probabilities(d, data.n_queries, data.n_models)
             for name, d in routers.items()}
    paid = {name: call_costs(data, own[name]) if name in own else c for name in routers}
    points = np.asarray(rule)
    if points.ndim == 2:  # a K-model rule's operating points
        if (points.shape[0] != data.n_queries or points.size == 0
                or not np.issubdtype(points.dtype, np.integer) or points.min() < 0
                or points.max() >= data.n_models):
            raise ValueError(f"rule: expected ({data.n_queries}, points) model indices in "
                             f"[0, {data.n_models}), got {points.dtype} {points.shape}")
        rows = np.arange(data.n_queries)[:, None]
        accumulator = _rule_at_cost(data, probs, paid, sweep_hulls(
            data.correct[rows, points], c[rows, points]))
    else:
        if weak is None or strong is None:
            raise ValueError("weak, strong: a two-model rule's scores need both models' "
                             f"names, got {weak!r} and {strong!r}")
        cols = [data.model_index(weak), data.model_index(strong)]
        accumulator = _rule_at_cost(data, probs, paid, threshold_hulls(
            points, data.correct[:, cols], c[:, cols]))
    codes = cluster_codes(resample_clusters(data, split_by), data.n_queries)
    return run([accumulator], data.n_queries, codes, n_resamples, confidence, seed)[0]


def _rule_at_cost(data: TraceDataset, probs: Mapping[str, np.ndarray],
                  paid: Mapping[str, np.ndarray], hulls: Callable[[np.ndarray], Hulls]
                  ) -> RuleAtCost:
    """:class:`RuleAtCost` of routers (probabilities, costs of their calls), a rule's curve."""
    return RuleAtCost({name: ((p * data.correct).sum(axis=1), (p * paid[name]).sum(axis=1))
                       for name, p in probs.items()}, hulls)
