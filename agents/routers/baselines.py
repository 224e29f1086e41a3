"""The routing literature's baselines on logged outcomes (RouteLLM, RouterBench).

Decisions as :func:`agents.routers.evaluation.score_routing` scores them: random routing
at given shares or a strong-call share (exact expectations, nothing drawn), the single
models' cost-quality frontier and random routing on it at a cost, each model alone, the
per-query oracle and threshold routing. :mod:`agents.routers.evaluation` re-exports
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.routers.inputs import call_costs
from cost_envs.config import number
from cost_envs.metrics.frontier import frontier
from cost_envs.traces import TraceDataset


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
