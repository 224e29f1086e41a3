"""A router's settings chosen by cross-validation on its training data only.

:func:`cross_validate` picks one setting of a router (:data:`CV_GRIDS`: ``l2`` of the
logistic, cascade and K-model routers, ``k`` of the kNN router) by folds of the
*training* queries it is given, never the test queries: the caller passes the training
split, and a held-out evaluation calls it inside each of its training folds (nested), so
no choice sees a query it is scored on. The folds keep clusters whole
(:meth:`~cost_envs.traces.TraceDataset.fold_ids`): by prompt, or by group
(``split_by="group"``), so that a choice meant for unseen groups is also judged on
groups its fits did not see.

The criterion is each validation fold's AIQ (RouterBench's area under the non-decreasing
convex hull of accuracy against cost per query, normalised to the fold's cost range:
:func:`cost_envs.metrics.frontier.aiq`), averaged over the folds: for a two-model router
its threshold curve (:func:`agents.routing.routing_eval.curve_routing`; a cascade pays
the weak call on every query), for a K-model router its ``lam`` sweep. AIQ is defined
whenever the models' costs differ, also where the dearer model is not the more accurate
(RouterArena's case, where APGR is not). Ties go to the earlier grid value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.routing.multi_router import MULTI_ROUTERS
from agents.routing.routers import make_router
from agents.routing.routing_eval import call_costs, curve_routing
from cost_envs.config import integer
from cost_envs.metrics.frontier import aiq
from cost_envs.traces import SPLIT_BY, TraceDataset

#: The setting each router's cross-validation chooses, and its candidates (none was
#: chosen on the shipped data: a decade of ``l2`` each way of the default, and ``k``
#: around the default 25).
CV_GRIDS: dict[str, tuple[str, tuple[float, ...]]] = {
    "logistic": ("l2", (1.0, 10.0, 100.0)),
    "cascade": ("l2", (1.0, 10.0, 100.0)),
    "knn": ("k", (5, 10, 25, 50)),
    "multi-logistic": ("l2", (1.0, 10.0, 100.0)),
}


@dataclass(frozen=True)
class CVChoice:
    """What :func:`cross_validate` chose and why.

    Attributes:
        setting: The name of the setting chosen (``"l2"`` or ``"k"``).
        value: Its chosen value.
        table: Each candidate's mean validation AIQ (``nan`` where no fold had a cost
            range).
        folds: Folds actually used (fewer than asked when there are fewer clusters).
        split_by: What the folds kept whole.
    """

    setting: str
    value: float
    table: dict[str, float]
    folds: int
    split_by: str

    def settings(self) -> dict[str, Any]:
        """The chosen setting as a constructor argument."""
        return {self.setting: int(self.value) if self.setting == "k" else float(self.value)}

    def as_json(self) -> dict[str, Any]:
        """JSON values (``nan`` as ``None``)."""
        return {"setting": self.setting, "value": self.settings()[self.setting],
                "criterion": "mean validation-fold AIQ", "folds": self.folds,
                "split_by": self.split_by,
                "table": {k: None if np.isnan(v) else v for k, v in self.table.items()}}


def _fold_aiq(q: np.ndarray, c: np.ndarray, span: Sequence[float]) -> float:
    """AIQ of operating points (per-query qualities and costs, ``(n, points)``)."""
    if not span[1] > span[0]:
        return float("nan")
    return aiq(c.mean(axis=0), q.mean(axis=0), span)


def _two_model_aiq(router: Any, raw: tuple[np.ndarray, np.ndarray], y: np.ndarray,
                   tr: np.ndarray, va: np.ndarray, val: TraceDataset, costs: np.ndarray,
                   cascade: bool) -> float:
    stats, text = raw
    scores = router._fit_raw(stats[tr], text[tr], y[tr])._scores_raw(stats[va], text[va])
    iw, is_ = val.model_index(router.weak), val.model_index(router.strong)
    c = costs.copy()
    if cascade:  # a cascade pays the weak call on every query
        c[:, is_] += c[:, iw]
    strong_at = curve_routing(scores, val.n_queries)
    q = np.where(strong_at, val.scores[:, is_, None], val.scores[:, iw, None])
    cc = np.where(strong_at, c[:, is_, None], c[:, iw, None])
    ends = sorted((float(costs[:, iw].mean()), float(costs[:, is_].mean())))
    return _fold_aiq(q, cc, ends)


def _multi_aiq(router: Any, raw: tuple[np.ndarray, np.ndarray], correct: np.ndarray,
               tr: np.ndarray, va: np.ndarray, val: TraceDataset, costs: np.ndarray,
               cols: np.ndarray) -> float:
    stats, text = raw
    router._fit_raw(stats[tr], text[tr], correct[tr], costs[tr][:, cols])
    d = router._sweep(router._correctness_raw(stats[va], text[va]), cols)
    rows = np.arange(val.n_queries)[:, None]
    c = costs[va]
    mean = c[:, cols].mean(axis=0)
    return _fold_aiq(val.scores[rows, d], c[rows, d], [float(mean.min()), float(mean.max())])


def cross_validate(
    kind: str,
    train: TraceDataset,
    *,
    weak: str | None = None,
    strong: str | None = None,
    models: Sequence[str] = (),
    settings: Mapping[str, Any] | None = None,
    costs: Any = None,
    folds: int = 5,
    split_by: str = "group",
    seed: int = 0,
    raw: tuple[np.ndarray, np.ndarray] | None = None,
) -> CVChoice:
    """Choose ``kind``'s :data:`CV_GRIDS` setting by folds of ``train`` (training data only).

    Args:
        kind: A router name: two-model (:data:`agents.routing.routers.ROUTERS`, needs
            ``weak`` and ``strong``) or K-model (``"multi-logistic"``, over ``models``,
            default all of ``train``'s).
        train: The training queries (only these are read).
        weak: The weak model (two-model routers).
        strong: The strong model (two-model routers).
        models: The K-model router's models.
        settings: The router's other settings (fixed).
        costs: ``(n, m)`` cost of each call of ``train`` (default its own).
        folds: Folds asked for; at most one per cluster is used (at least 2).
        split_by: ``"group"`` (folds of whole groups) or ``"query"`` (of prompts).
        seed: Seed of the fold assignment.
        raw: The router's raw inputs of ``train``'s queries (``router._raw(train)``), when
            the caller has them (a nested evaluation computes them once for all folds);
            computed here otherwise.

    Raises:
        ValueError: On an unknown router, a bad ``folds`` or ``split_by``, or fewer than
            two clusters to fold.
    """
    if kind not in CV_GRIDS:
        raise ValueError(f"router: expected one of {sorted(CV_GRIDS)}, got {kind!r}")
    integer(folds, "folds", minimum=2)
    if split_by not in SPLIT_BY:
        raise ValueError(f"split_by: expected one of {list(SPLIT_BY)}, got {split_by!r}")
    n_clusters = int(train.clusters(split_by).max()) + 1
    if n_clusters < 2:
        raise ValueError(f"cross-validation by {split_by}: the training data has only one "
                         f"{split_by}; expected at least two")
    folds = min(folds, n_clusters)
    fold = train.fold_ids(folds, seed, split_by)
    c = call_costs(train, costs)
    setting, grid = CV_GRIDS[kind]
    fixed = dict(settings or {})
    multi = kind in MULTI_ROUTERS

    def build(value: float) -> Any:
        if multi:
            return MULTI_ROUTERS[kind](tuple(models) or train.models,
                                       **{**fixed, setting: value})
        return make_router(kind, weak or "", strong or "", **{**fixed, setting: value})

    router = build(grid[0])
    # a router's inputs are per query: computed once, indexed per fold
    if multi:
        cols = router._columns(train)
        raw = router._reader()._raw(train) if raw is None else raw
        target = train.correct[:, cols]
    else:
        train.model_index(strong or ""), train.model_index(weak or "")  # both must exist
        raw = router._raw(train) if raw is None else raw
        target = router.labels(train)
    if len(raw[0]) != train.n_queries or len(raw[1]) != train.n_queries:
        raise ValueError(f"raw: expected the inputs of {train.n_queries} queries, got "
                         f"{len(raw[0])} and {len(raw[1])} rows")
    table: dict[str, float] = {}
    for value in grid:
        router = build(value)
        values = []
        for k in range(folds):
            tr, va = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            held = train.subset(va)
            if multi:
                values.append(_multi_aiq(router, raw, target, tr, va, held, c, cols))
            else:
                values.append(_two_model_aiq(router, raw, target, tr, va, held, c[va],
                                             kind == "cascade"))
        finite = [v for v in values if np.isfinite(v)]
        table[f"{setting}={value:g}"] = float(np.mean(finite)) if finite else float("nan")
    scored = [(v, i) for i, v in enumerate(table.values()) if np.isfinite(v)]
    if scored:
        best = float(grid[max(scored, key=lambda t: (t[0], -t[1]))[1]])
    else:  # no fold had a cost range (equal costs): nothing to choose on; the default
        best = float(router.__class__.__dataclass_fields__[setting].default)
    return CVChoice(setting, best, table, folds, split_by)
