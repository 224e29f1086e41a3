"""A router's threshold, fitted on training data only: for a strong-call share or a cost.

A score-based router sends a query to the strong model when its score is at or above a
threshold. Its default (0.5 for a probability) says nothing about how many queries that
is: on RouteLLM's MMLU outcomes it sent 8% of them to GPT-4. These functions choose the
threshold from the *training* queries' scores, so the test queries are never looked at:

* :func:`calibrate_share`: a target share of strong calls, as RouteLLM's
  ``calibrate_threshold`` does: the ``1 - share`` quantile of the training scores
  (numpy's default linear interpolation, RouteLLM's ``np.percentile``);
* :func:`calibrate_cost`: a target mean cost per query: the most strong calls whose mean
  training cost stays within the target, read off the training threshold curve
  (:func:`cost_envs.metrics.routing.routing_curve`, which keeps tied scores together).

For a K-model router (:mod:`agents.routers.multi`) the operating point is ``lam``
instead of a threshold: :func:`calibrate_lam` takes the smallest ``lam`` of its training
sweep whose mean training cost per query is within a target.

:func:`calibrate` is the one entry for any router of the family: a threshold or a
``lam`` for a target share or cost, with what it gives on training. On the test queries
the share and the cost land near the targets, not on them: how near is what a test split
measures (:func:`agents.routers.report.calibration_drift`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cost_envs.config import number
from cost_envs.metrics.routing import routing_curve


@dataclass(frozen=True)
class Calibration:
    """A threshold and what it gives on the training queries.

    Attributes:
        threshold: Scores at or above it go to the strong model (``inf``: none do).
        strong_share: Share of training queries it sends to the strong model.
        cost_per_query: Mean training cost per query (``nan`` when no costs were given).
    """

    threshold: float
    strong_share: float
    cost_per_query: float


def _train_scores(scores: Any) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"train_scores: expected a non-empty 1-d array of finite numbers, "
                         f"got shape {x.shape}")
    return x


def _costs(weak_cost: Any, strong_cost: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    wc = np.asarray(weak_cost, dtype=np.float64)
    sc = np.asarray(strong_cost, dtype=np.float64)
    if wc.shape != (n,) or sc.shape != (n,) or not (np.isfinite(wc).all()
                                                   and np.isfinite(sc).all()):
        raise ValueError(f"weak_cost and strong_cost: expected finite numbers of shape ({n},), "
                         f"got {wc.shape} and {sc.shape}")
    return wc, sc


def _train_cost(x: np.ndarray, threshold: float, weak_cost: Any, strong_cost: Any) -> float:
    if weak_cost is None or strong_cost is None:
        return float("nan")
    wc, sc = _costs(weak_cost, strong_cost, len(x))
    return float(np.where(x >= threshold, sc, wc).mean())


def _floored(threshold: float, floor: float) -> float:
    """``threshold`` raised to ``floor`` (a router's lowest sensible operating point)."""
    if not isinstance(floor, int | float) or np.isnan(floor) or floor == np.inf:
        raise ValueError(f"floor: expected a number < inf (-inf: none), got {floor!r}")
    return max(threshold, float(floor))


def calibrate_share(train_scores: Any, share: float, weak_cost: Any = None,
                    strong_cost: Any = None, floor: float = -np.inf) -> Calibration:
    """The threshold sending about ``share`` of the training queries to the strong model.

    Args:
        train_scores: The router's scores of the training queries.
        share: Target strong-call share in ``[0, 1]``; 0 gives ``inf`` (no strong call).
        weak_cost: Optional cost of the weak model on each training query, to report
            the threshold's training cost per query.
        strong_cost: The same for the strong model.
        floor: The lowest threshold to return (a cost-aware router's 0: it never pays
            for a call it predicts to lose accuracy, whatever the share asked).

    Returns:
        The :class:`Calibration` (its ``strong_share`` is the share achieved on the
        training scores: ties, or the floor, may keep it off the target).
    """
    x = _train_scores(train_scores)
    number(share, "share", minimum=0, maximum=1)
    threshold = float("inf") if share == 0 else float(np.quantile(x, 1.0 - share))
    threshold = _floored(threshold, floor)
    return Calibration(threshold, float((x >= threshold).mean()),
                       _train_cost(x, threshold, weak_cost, strong_cost))


def calibrate_cost(train_scores: Any, weak_cost: Any, strong_cost: Any,
                   target: float, floor: float = -np.inf) -> Calibration:
    """The threshold with the most strong calls whose mean training cost is <= ``target``.

    Tied scores are routed together, so the candidates are the training curve's points;
    of those within the target (up to a relative 1e-12) and whose threshold is at least
    ``floor``, the one with the most strong calls is chosen. The threshold is the lowest
    training score it sends to the strong model (``inf`` when it sends none).

    Args:
        train_scores: The router's scores of the training queries.
        weak_cost: Cost of the weak model on each training query.
        strong_cost: Cost of the strong model on each training query.
        target: Mean cost per query to stay within, >= 0.
        floor: The lowest threshold to return (as :func:`calibrate_share`'s). Fewer
            strong calls are not always cheaper (a strong call can cost less than the
            weak one on some queries), so the floor restricts the candidates rather than
            moving the chosen one.

    Raises:
        ValueError: If no threshold at or above ``floor`` keeps the training cost within
            ``target`` (naming the cheapest such point).
    """
    x = _train_scores(train_scores)
    number(target, "target", minimum=0)
    _floored(-np.inf, floor)  # checks floor
    wc, sc = _costs(weak_cost, strong_cost, len(x))
    zeros = np.zeros(len(x))
    curve = routing_curve(x, zeros, zeros, wc, sc)
    calls = np.round(curve.strong_share * len(x)).astype(np.int64)  # at each point
    ordered = np.sort(x)[::-1]
    thresholds = np.where(calls == 0, np.inf, ordered[np.maximum(calls - 1, 0)])
    allowed = thresholds >= floor
    within = np.flatnonzero((curve.cost <= target * (1 + 1e-12)) & allowed)
    if within.size == 0:
        raise ValueError(f"target={target!r}: no threshold keeps the mean training cost per "
                         f"query within it; the cheapest is "
                         f"{curve.cost[allowed].min():.6g}")
    best = within[-1]
    return Calibration(float(thresholds[best]), int(calls[best]) / len(x),
                       float(curve.cost[best]))


@dataclass(frozen=True)
class LamCalibration:
    """A K-model router's ``lam`` and what it gives on the training queries.

    Attributes:
        lam: The operating point (:meth:`agents.routers.multi.MultiRouter.route`).
        cost_per_query: Mean training cost per query at ``lam``.
        model_share: Share of training queries sent to each column of the costs.
    """

    lam: float
    cost_per_query: float
    model_share: tuple[float, ...]


def calibrate_lam(lams: Any, train_decisions: Any, train_costs: Any,
                  target: float) -> LamCalibration:
    """The smallest ``lam`` whose mean training cost per query is <= ``target``.

    A K-model router (:class:`~agents.routers.multi.MultiRouter`) trades predicted
    correctness against cost by ``lam``: 0 sends each query to the model most likely
    right, and a larger ``lam`` never moves a query to a dearer-priced model. Of the
    training sweep's operating points within the target (up to a relative 1e-12), the
    smallest ``lam`` is the one that gives up the least predicted correctness; only
    training queries are read.

    Args:
        lams: ``(points,)`` the sweep's ``lam`` values, ascending
            (:meth:`~agents.routers.multi.MultiRouter.lams` of the training data).
        train_decisions: ``(n, points)`` the column of ``train_costs`` each training query
            goes to at each point (:meth:`~agents.routers.multi.MultiRouter.sweep`).
        train_costs: ``(n, m)`` cost of each call on the training queries.
        target: Mean cost per query to stay within, >= 0.

    Raises:
        ValueError: On misshapen inputs, or if no point keeps the training cost within
            ``target`` (naming the cheapest the sweep reaches).
    """
    number(target, "target", minimum=0)
    grid = np.asarray(lams, dtype=np.float64)
    d = np.asarray(train_decisions)
    c = np.asarray(train_costs, dtype=np.float64)
    if (grid.ndim != 1 or grid.size == 0 or not np.isfinite(grid).all()
            or (np.diff(grid) < 0).any()):
        raise ValueError(f"lams: expected a non-empty ascending 1-d array of finite numbers, "
                         f"got shape {grid.shape}")
    if c.ndim != 2 or c.shape[0] == 0 or not np.isfinite(c).all():
        raise ValueError(f"train_costs: expected a non-empty (n, m) array of finite numbers, "
                         f"got shape {c.shape}")
    if (d.shape != (c.shape[0], grid.size) or not np.issubdtype(d.dtype, np.integer)
            or d.min() < 0 or d.max() >= c.shape[1]):
        raise ValueError(f"train_decisions: expected ({c.shape[0]}, {grid.size}) column "
                         f"indices in [0, {c.shape[1]}), got {d.dtype} {d.shape}")
    cost = c[np.arange(c.shape[0])[:, None], d].mean(axis=0)
    within = np.flatnonzero(cost <= target * (1 + 1e-12))
    if within.size == 0:
        raise ValueError(f"target={target!r}: no lam keeps the mean training cost per query "
                         f"within it; the cheapest is {cost.min():.6g}")
    k = int(within[0])
    share = np.bincount(d[:, k], minlength=c.shape[1]) / c.shape[0]
    return LamCalibration(float(grid[k]), float(cost[k]), tuple(share.tolist()))


def calibrate(router: Any, train: Any, costs: Any = None, *, share: float | None = None,
              cost: float | None = None) -> tuple[float, dict[str, Any]]:
    """Any router's operating point on its training queries, for one target.

    A two-model router gets a threshold: :func:`calibrate_cost` for ``cost``, else
    :func:`calibrate_share` for ``share`` (default 0.5). A K-model router gets a ``lam``:
    :func:`calibrate_lam` for ``cost`` (default halfway between the cheapest and the
    dearest model's mean training cost); ``share`` is refused.

    Args:
        router: A fitted router of :data:`~agents.routers.ROUTERS`.
        train: Its training queries (a :class:`~cost_envs.traces.TraceDataset`).
        costs: ``(n, K)`` cost of each of the router's models on each training query
            (default: the data's own, in the router's model order).
        share: Target strong-call share (two-model routers).
        cost: Target mean cost per query.

    Returns:
        ``(point, facts)``: the threshold or ``lam``, and what it was set for and gives
        on training (``"target"``: ``"strong_share"`` or ``"cost_per_query"``,
        ``"value"``, ``"train_strong_share"`` / ``"train_cost_per_query"`` /
        ``"train_model_share"``).

    Raises:
        ValueError: On a share for a K-model router, or a cost no point reaches.
    """
    from agents.routers.evaluation import call_costs

    if costs is None:
        cols = [train.model_index(m) for m in router.models]
        costs = call_costs(train)[:, cols]
    c = np.asarray(costs, dtype=np.float64)
    if router.n_models != 2:
        if share is not None:
            raise ValueError(f"share={share!r}: a strong-call share is a two-model target; "
                             "a K-model router is calibrated for a cost per query")
        lams = router.lams(train)
        mean = c.mean(axis=0)
        target = float(mean.min() + mean.max()) / 2 if cost is None else cost
        lam = calibrate_lam(lams, router.sweep(train, lams), c, target)
        return lam.lam, {"target": "cost_per_query", "value": target, "default": cost is None,
                         "train_cost_per_query": lam.cost_per_query,
                         "train_model_share": dict(zip(router.models, lam.model_share,
                                                       strict=True))}
    scores = router.scores(train)
    floor = getattr(router, "min_threshold", -np.inf)  # a router of your own may lack it
    if cost is not None:
        two = calibrate_cost(scores, c[:, 0], c[:, 1], cost, floor)
        facts: dict[str, Any] = {"target": "cost_per_query", "value": cost}
    else:
        target_share = 0.5 if share is None else share
        two = calibrate_share(scores, target_share, c[:, 0], c[:, 1], floor)
        facts = {"target": "strong_share", "value": target_share}
    return two.threshold, {**facts, "train_strong_share": two.strong_share,
                           "train_cost_per_query": two.cost_per_query}
