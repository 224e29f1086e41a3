"""Routers scored exactly on logged outcomes: every test query once, the usual baselines.

A router's *decisions* say which model answers each test query: ``(n,)`` model indices,
or an ``(n, m)`` matrix of probabilities (each row sums to 1) for a randomised router,
whose score is then its exact expectation. :func:`score_routing` scores decisions on a
:class:`~cost_envs.traces.TraceDataset` over every query exactly once (no episodes, no
cap): accuracy, mean score, cost per query, the share of calls to each model and to the
strong one, with bootstrap intervals over queries, or over groups when the split held
out whole groups (``split_by="group"``: the cluster bootstrap of
:func:`cost_envs.metrics.bootstrap.bootstrap_means`). :func:`score_routings` scores
several routers on the same resamples, with paired differences against a reference
(a router minus random routing at its own strong-call share, say).

The baselines, as the routing literature defines them (RouteLLM, RouterBench):

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

:func:`curve_metrics` reads a score-based router's threshold curve: APGR and CPT with
intervals (:func:`cost_envs.metrics.routing.bootstrap_routing`, clusters when split by
group) and AIQ on the cost axis (:func:`cost_envs.metrics.frontier.aiq`). Thresholds
for a target strong-call share or cost are :mod:`agents.routing.calibration`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cost_envs.config import number, one_of
from cost_envs.metrics.bootstrap import bootstrap_means
from cost_envs.metrics.frontier import bootstrap_aiq, frontier
from cost_envs.metrics.routing import DEFAULT_LEVELS, bootstrap_routing, threshold_order
from cost_envs.prices import default_price_table
from cost_envs.traces import SPLIT_BY, TraceDataset


def call_costs(data: TraceDataset, costs: Any = None) -> np.ndarray:
    """The ``(n, m)`` cost of each call: ``costs`` if given, else the data's own.

    The data's own are its logged costs where logged, else tokens x the packaged price
    table's prices (as TraceRouting-v0 prices them).
    """
    if costs is None:
        return data.call_costs(default_price_table())
    out = np.asarray(costs, dtype=np.float64)
    if out.shape != (data.n_queries, data.n_models) or not np.isfinite(out).all():
        raise ValueError(f"costs: expected finite numbers of shape ({data.n_queries}, "
                         f"{data.n_models}), got shape {out.shape}")
    return out


def routing_probabilities(decisions: Any, n_queries: int, n_models: int) -> np.ndarray:
    """Decisions as an ``(n, m)`` matrix of routing probabilities.

    Args:
        decisions: ``(n,)`` model indices in ``[0, m)``, or an ``(n, m)`` matrix of
            probabilities in ``[0, 1]`` whose rows sum to 1.
        n_queries: ``n``.
        n_models: ``m``.

    Raises:
        ValueError: On another shape, an index out of range or rows that are not
            distributions.
    """
    x = np.asarray(decisions)
    if x.shape == (n_queries,):
        if not np.issubdtype(x.dtype, np.integer) or x.min() < 0 or x.max() >= n_models:
            raise ValueError(f"decisions: expected model indices in [0, {n_models}), got "
                             f"{x.dtype} values in [{x.min()}, {x.max()}]")
        out = np.zeros((n_queries, n_models))
        out[np.arange(n_queries), x] = 1.0
        return out
    if x.shape != (n_queries, n_models):
        raise ValueError(f"decisions: expected ({n_queries},) model indices or a "
                         f"({n_queries}, {n_models}) probability matrix, got shape {x.shape}")
    x = x.astype(np.float64)
    if not (np.isfinite(x).all() and (x >= 0).all() and np.allclose(x.sum(axis=1), 1.0)):
        raise ValueError("decisions: expected rows of probabilities in [0, 1] summing to 1")
    return x


def resample_clusters(data: TraceDataset, split_by: str) -> np.ndarray | None:
    """What a bootstrap over ``data`` resamples: ``None`` (queries) or its groups."""
    one_of(split_by, "split_by", SPLIT_BY)
    return data.clusters("group") if split_by == "group" else None


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
    if reference is not None and reference not in routers:
        raise ValueError(f"reference: {reference!r} is not one of {list(routers)}")
    c = call_costs(data, costs)
    probs = {name: routing_probabilities(d, data.n_queries, data.n_models)
             for name, d in routers.items()}
    per = {name: _columns(data, p, c, strong) for name, p in probs.items()}
    columns = {(name, None, k): v for name, cols in per.items() for k, v in cols.items()}
    if reference is not None:
        columns.update({(name, reference, k): v - per[reference][k]
                        for name, cols in per.items() if name != reference
                        for k, v in cols.items()})
    clusters = resample_clusters(data, split_by)
    keys = list(columns)
    if n_resamples == 0:
        values = {key: {"value": float(v.mean()), "ci": None} for key, v in columns.items()}
    else:
        drawn = bootstrap_means({str(i): columns[key] for i, key in enumerate(keys)},
                                clusters=clusters, n_resamples=n_resamples,
                                confidence=confidence, seed=seed)
        values = {key: drawn[str(i)] for i, key in enumerate(keys)}
    out: dict[str, dict[str, Any]] = {}
    for name, p in probs.items():
        entry: dict[str, Any] = {k: values[(name, None, k)] for k in per[name]}
        if reference is not None and name != reference:
            entry[f"minus_{reference}"] = {k: values[(name, reference, k)] for k in per[name]}
        entry["model_share"] = dict(zip(data.models, p.mean(axis=0).tolist(), strict=True))
        entry["queries"] = data.n_queries
        entry["resampled"] = "queries" if clusters is None else "clusters"
        entry["units"] = data.n_queries if clusters is None else int(clusters.max()) + 1
        out[name] = entry
    return out


# -------------------------------------------------------------------------- baselines
def single_model(data: TraceDataset, model: str) -> np.ndarray:
    """Every query to ``model``: ``(n,)`` indices."""
    return np.full(data.n_queries, data.model_index(model), dtype=np.int64)


def random_shares(data: TraceDataset, shares: Mapping[str, float] | None = None
                  ) -> np.ndarray:
    """Random routing over any number of models at given shares: ``(n, m)`` probabilities.

    Each query goes to model ``j`` with probability ``shares[j]``, independently; scored
    by :func:`score_routing` this is its exact expectation (nothing is drawn): accuracy
    and cost are the share-weighted means of the single models'.

    Args:
        data: The queries.
        shares: Model name -> probability (models not named get 0), summing to 1;
            ``None``: uniform over all of ``data``'s models.

    Raises:
        ValueError: On an unknown model, a share outside [0, 1] or shares not summing to 1.
    """
    if shares is None:
        return np.full((data.n_queries, data.n_models), 1.0 / data.n_models)
    p = np.zeros(data.n_models)
    for name, share in shares.items():
        if name not in data.models:
            raise ValueError(f"shares: no model {name!r}; the data has {list(data.models)}")
        p[data.model_index(name)] += number(share, f"shares[{name!r}]", minimum=0, maximum=1)
    if not np.isclose(p.sum(), 1.0):
        raise ValueError(f"shares: expected probabilities summing to 1, got {p.sum():.6g}")
    return np.tile(p / p.sum(), (data.n_queries, 1))


def random_routing(data: TraceDataset, weak: str, strong: str, share: float) -> np.ndarray:
    """Random routing at strong-call share ``share``: ``(n, m)`` probabilities (exact).

    The two-model case of :func:`random_shares`: each query goes to ``strong`` with
    probability ``share`` and to ``weak`` otherwise; its exact expectation is linear
    between the two models', ``(1 - share) * weak + share * strong``.
    """
    number(share, "share", minimum=0, maximum=1)
    shares = {weak: 1.0 - share}
    shares[strong] = shares.get(strong, 0.0) + share
    return random_shares(data, shares)


def single_model_frontier(data: TraceDataset, costs: Any = None) -> dict[str, Any]:
    """The cost-quality frontier of the single models: what random routing reaches.

    Each model alone is a point (mean cost per query, mean score); mixing two of them at
    random reaches every point between, so the best any *non-learned* router does at a
    budget is the non-decreasing upper convex hull of the points
    (:func:`cost_envs.metrics.frontier.frontier`). A router over K models earns its keep
    by lying above it (its AIQ above the hull's).

    Returns:
        ``{"points": {model: [cost, quality]}, "models": the hull's models, cheapest
        first, "cost": their costs, "quality": their qualities}``.
    """
    c = call_costs(data, costs).mean(axis=0)
    q = data.scores.mean(axis=0)
    fc, fq = frontier(c, q)
    hull = [next(j for j in range(data.n_models) if c[j] == x and q[j] == y)
            for x, y in zip(fc, fq, strict=True)]
    return {"points": {m: [float(c[j]), float(q[j])] for j, m in enumerate(data.models)},
            "models": [data.models[j] for j in hull], "cost": fc.tolist(),
            "quality": fq.tolist()}


def hull_routing(data: TraceDataset, budget: float, costs: Any = None) -> np.ndarray:
    """Random routing on the single-model frontier at mean cost ``budget``: ``(n, m)``.

    The two adjacent hull models around ``budget``, mixed so that the mean cost per query
    is ``budget`` (exact expectation): the best non-learned routing at that cost. Below
    the cheapest hull model it is that model; above the best, the best.
    """
    number(budget, "budget", minimum=0)
    hull = single_model_frontier(data, costs)
    fc, models = np.array(hull["cost"]), hull["models"]
    k = int(np.searchsorted(fc, budget))
    if k == 0 or k == len(fc):
        return random_shares(data, {models[min(k, len(fc) - 1)]: 1.0})
    share = (budget - fc[k - 1]) / (fc[k] - fc[k - 1])
    return random_shares(data, {models[k - 1]: 1.0 - share, models[k]: share})


def oracle_routing(data: TraceDataset, costs: Any = None) -> np.ndarray:
    """The per-query oracle: the best-scoring model of each query, the cheapest on ties.

    It knows the outcomes, so it is an upper reference, not a router: it reaches the best
    accuracy any routing can, at the lowest cost among routings that do.
    """
    c = call_costs(data, costs)
    best = data.scores == data.scores.max(axis=1, keepdims=True)
    return np.argmin(np.where(best, c, np.inf), axis=1).astype(np.int64)


def threshold_routing(data: TraceDataset, scores: Any, threshold: float, weak: str,
                      strong: str) -> np.ndarray:
    """``strong`` where a router's score is >= ``threshold``, else ``weak``: ``(n,)``."""
    x = np.asarray(scores, dtype=np.float64)
    if x.shape != (data.n_queries,):
        raise ValueError(f"scores: expected shape ({data.n_queries},), got {x.shape}")
    return np.where(x >= threshold, data.model_index(strong),
                    data.model_index(weak)).astype(np.int64)


def baselines(data: TraceDataset, weak: str, strong: str, share: float,
              costs: Any = None) -> dict[str, np.ndarray]:
    """The literature's baselines on ``data``: random at ``share``, each model, the oracle."""
    out = {f"random ({share:.0%} strong)": random_routing(data, weak, strong, share)}
    out.update({f"only {m}": single_model(data, m) for m in data.models})
    out["oracle"] = oracle_routing(data, costs)
    return out


def model_baselines(data: TraceDataset, shares: Mapping[str, float] | None = None,
                    costs: Any = None) -> dict[str, np.ndarray]:
    """The K-model baselines: random at ``shares`` (default uniform), each model, the oracle."""
    label = "uniform" if shares is None else ", ".join(f"{m} {p:.0%}" for m, p in shares.items())
    out = {f"random ({label})": random_shares(data, shares)}
    out.update({f"only {m}": single_model(data, m) for m in data.models})
    out["oracle"] = oracle_routing(data, costs)
    return out


# ---------------------------------------------------------------------- threshold curves
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
) -> dict[str, dict[str, Any]]:
    """APGR, CPTs (with intervals) and AIQ of score-based routers' threshold curves.

    Args:
        data: The test queries.
        routers: Name -> scores per query (higher: strong), or ``None`` for random
            routing (exact: APGR 0.5, CPT(x) = x).
        weak: The weak model.
        strong: The strong model.
        costs: ``(n, m)`` cost of each call (default :func:`call_costs`).
        split_by: ``"group"`` resamples whole groups (the cluster bootstrap).
        levels: CPT levels.
        n_resamples: Bootstrap resamples.
        confidence: Interval coverage.
        seed: Seed of the resampling.
        reference: Router(s) to difference the others against, as
            :func:`~cost_envs.metrics.routing.bootstrap_routing`.
        cost_range: AIQ's cost range; default the two models' mean costs (from all
            weak to all strong).

    Returns:
        :func:`~cost_envs.metrics.routing.bootstrap_routing`'s entries, each with
        ``"aiq"``: ``{"value", "ci", "cost_range"}`` (accuracy against cost per query,
        :func:`~cost_envs.metrics.frontier.bootstrap_aiq`, resampled as the others).
    """
    iw, is_ = data.model_index(weak), data.model_index(strong)
    w, s = data.correct[:, iw], data.correct[:, is_]
    c = call_costs(data, costs)
    out = bootstrap_routing(routers, w, s, levels, n_resamples=n_resamples,
                            confidence=confidence, seed=seed, reference=reference,
                            clusters=resample_clusters(data, split_by))
    ends = sorted((float(c[:, iw].mean()), float(c[:, is_].mean())))
    span = ends if cost_range is None else [float(v) for v in cost_range]
    clusters = resample_clusters(data, split_by)
    for name, scores in routers.items():
        strong_at = curve_routing(None if scores is None else np.asarray(scores, np.float64),
                                  data.n_queries)
        qualities = np.where(strong_at, s[:, None], w[:, None])
        point_costs = np.where(strong_at, c[:, is_, None], c[:, iw, None])
        if span[1] > span[0]:
            out[name]["aiq"] = bootstrap_aiq(qualities, point_costs, span, clusters=clusters,
                                             n_resamples=n_resamples, confidence=confidence,
                                             seed=seed)
        else:  # both models cost the same on average: no cost range to integrate over
            out[name]["aiq"] = {"value": float("nan"), "ci": [float("nan")] * 2,
                                "cost_range": span}
    return out


def curve_routing(scores: np.ndarray | None, n: int) -> np.ndarray:
    """Which queries go strong at each point of a threshold curve: ``(n, points)`` bool.

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
