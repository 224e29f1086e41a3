"""A router's settings chosen by cross-validation on its training data only: one function.

:func:`cross_validate` chooses the settings of :data:`CV_GRIDS` (``l2`` of the logistic,
cascade, K-model and matrix-factorisation routers, ``k`` of the kNN router and of the
cluster router's k-means, the MLP's ``alpha``, the SVM's ``C``, the Elo router's
``gamma``; any other grid on request) by
:data:`CV_FOLDS` folds of the *training* queries it is given, never the test queries: the
caller passes the training split, and a held-out evaluation calls it inside each of its
training folds (nested), so no choice sees a query it is scored on. The folds keep
clusters whole (:meth:`~cost_envs.traces.TraceDataset.fold_ids`): by prompt
(``split_by="query"``), or by group (``"group"``), so that a choice meant for unseen
groups is also judged on groups its fits did not see.

The criterion is each validation fold's AIQ (RouterBench's area under the non-decreasing
convex hull of accuracy against cost per query, normalised to the fold's cost range:
:func:`cost_envs.metrics.frontier.aiq`), averaged over the folds: for a two-model router
its threshold curve (:func:`agents.routers.evaluation.curve_routing`; a cascade pays
the weak call on every query), for a K-model router its ``lam`` sweep. AIQ is defined
whenever the models' costs differ, also where the dearer model is not the more accurate
(RouterArena's case, where APGR is not). Ties go to the earlier grid value. It is the
one criterion: the GSM8K report's own choice
(:meth:`~agents.routers.two_model.LogisticRouter.cross_validate`) uses it too.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.routers.base import (
    Inputs,
    Router,
    TwoModelRouter,
    make_router,
    router_class,
    take,
)
from agents.routers.bootstrap import threshold_aiq
from agents.routers.evaluation import call_costs
from agents.routers.multi import MultiRouter
from cost_envs.config import integer
from cost_envs.metrics.frontier import aiq
from cost_envs.traces import SPLIT_BY, TraceDataset

#: Folds of a cross-validation unless told otherwise.
CV_FOLDS = 5
#: The setting each router's cross-validation chooses, and its candidates (none was
#: chosen on the shipped data: a decade of ``l2`` each way of the default, and ``k``
#: around the default 25).
CV_GRIDS: dict[str, tuple[str, tuple[float, ...]]] = {
    "logistic": ("l2", (1.0, 10.0, 100.0)),
    "cascade": ("l2", (1.0, 10.0, 100.0)),
    "knn": ("k", (5, 10, 25, 50)),
    "priced": ("l2", (1.0, 10.0, 100.0)),
    "multi-logistic": ("l2", (1.0, 10.0, 100.0)),
    "multi-priced": ("l2", (1.0, 10.0, 100.0)),
    # the anchors' routers (issue #39): a decade each way of the default; k doubling
    "cluster": ("k", (4, 8, 16, 32)),
    "multi-cluster": ("k", (4, 8, 16, 32)),
    "mlp": ("alpha", (0.001, 0.01, 0.1)),
    "svm": ("C", (0.01, 0.1, 1.0)),
    "mf": ("l2", (0.0001, 0.001, 0.01)),
    "elo": ("gamma", (1.0, 10.0, 100.0)),
}


@dataclass(frozen=True)
class CVChoice:
    """What :func:`cross_validate` chose and why.

    Attributes:
        chosen: Each setting searched and its chosen value.
        table: Each candidate's mean validation criterion (``nan`` where no fold had
            one), keyed ``"l2=10"`` (``"l2=10,hashed_weight=1"`` for several settings).
        folds: Folds actually used (fewer than asked when there are fewer clusters).
        split_by: What the folds kept whole.
    """

    chosen: dict[str, float]
    table: dict[str, float]
    folds: int
    split_by: str

    @property
    def setting(self) -> str:
        """The setting's name, when one was searched (``"l2"`` or ``"k"``)."""
        return ",".join(self.chosen)

    @property
    def value(self) -> float:
        """Its chosen value, when one setting was searched."""
        if len(self.chosen) != 1:
            raise ValueError(f"value: {len(self.chosen)} settings were chosen; read .chosen")
        return next(iter(self.chosen.values()))

    def settings(self) -> dict[str, Any]:
        """The chosen settings as constructor arguments."""
        return {k: int(v) if k == "k" else float(v) for k, v in self.chosen.items()}

    def as_json(self) -> dict[str, Any]:
        """JSON values (``nan`` as ``None``)."""
        chosen = self.settings()
        head: dict[str, Any] = ({"setting": self.setting, "value": chosen[self.setting]}
                                if len(chosen) == 1 else {"settings": chosen})
        return {**head, "criterion": "mean validation-fold AIQ",
                "folds": self.folds, "split_by": self.split_by,
                "table": {k: None if np.isnan(v) else v for k, v in self.table.items()}}


def _fold_aiq(q: np.ndarray, c: np.ndarray, span: Sequence[float]) -> float:
    """AIQ of operating points (per-query qualities and costs, ``(n, points)``)."""
    if not span[1] > span[0]:
        return float("nan")
    return aiq(c.mean(axis=0), q.mean(axis=0), span)


def _fold_value(router: Router, inputs: Inputs, val: TraceDataset, costs: np.ndarray,
                ) -> float:
    """The AIQ on validation fold ``val`` of a router fitted on the other folds."""
    if isinstance(router, TwoModelRouter):
        scores = router.scores_inputs(inputs)
        iw, is_ = val.model_index(router.weak), val.model_index(router.strong)
        c = costs.copy()
        if router.reads_answers:  # a cascade pays the weak call on every query
            c[:, is_] += c[:, iw]
        ends = sorted((float(costs[:, iw].mean()), float(costs[:, is_].mean())))
        # linear in the fold's queries (no queries x curve-points matrix: issue #24)
        return threshold_aiq(scores, val.scores[:, iw], val.scores[:, is_], c[:, iw],
                             c[:, is_], ends)
    if not isinstance(router, MultiRouter):
        raise TypeError(f"cross-validation: expected a two-model or a multi-model router, got "
                        f"{type(router).__name__}")
    cols = np.array([val.model_index(m) for m in router.models], dtype=np.int64)
    d = cols[router.sweep_inputs(inputs)]
    rows = np.arange(val.n_queries)[:, None]
    mean = costs[:, cols].mean(axis=0)
    return _fold_aiq(val.scores[rows, d], costs[rows, d], [float(mean.min()),
                                                          float(mean.max())])


def cross_validate(
    kind: str,
    train: TraceDataset,
    *,
    weak: str | None = None,
    strong: str | None = None,
    models: Sequence[str] = (),
    settings: Mapping[str, Any] | None = None,
    grid: Mapping[str, Sequence[float]] | None = None,
    costs: Any = None,
    folds: int = CV_FOLDS,
    split_by: str = "query",
    seed: int = 0,
    raw: Inputs | None = None,
) -> CVChoice:
    """Choose ``kind``'s settings by folds of ``train`` (training data only).

    Args:
        kind: A router name of :data:`~agents.routers.ROUTERS`: two-model (needs
            ``weak`` and ``strong``) or K-model (over ``models``, default all of
            ``train``'s).
        train: The training queries (only these are read).
        weak: The weak model (two-model routers).
        strong: The strong model (two-model routers).
        models: The K-model router's models.
        settings: The router's other settings (fixed).
        grid: Setting -> candidates (default :data:`CV_GRIDS`' one setting); several
            settings are searched over all their combinations.
        costs: ``(n, m)`` cost of each call of ``train`` (default its own).
        folds: Folds asked for; at most one per cluster is used (at least 2).
        split_by: ``"query"`` (folds of prompts) or ``"group"`` (of whole groups).
        seed: Seed of the fold assignment.
        raw: The router's :meth:`~agents.routers.base.Router.inputs` of
            ``train``, when the caller has them (a nested evaluation computes them once).

    Raises:
        ValueError: On an unknown router, a bad ``folds`` or ``split_by``,
            an empty grid, or fewer than two clusters to fold.
    """
    cls = router_class(kind)
    integer(folds, "folds", minimum=2)
    if split_by not in SPLIT_BY:
        raise ValueError(f"split_by: expected one of {list(SPLIT_BY)}, got {split_by!r}")
    if grid is None:
        if kind not in CV_GRIDS:
            raise ValueError(f"grid: {kind!r} has no default grid; pass one")
        name, values = CV_GRIDS[kind]
        grid = {name: values}
    if not grid or not all(len(v) for v in grid.values()):
        raise ValueError(f"grid: expected settings with candidates, got {dict(grid)!r}")
    n_clusters = int(train.clusters(split_by).max()) + 1
    if n_clusters < 2:
        raise ValueError(f"cross-validation by {split_by}: the training data has only one "
                         f"{split_by}; expected at least two")
    folds = min(folds, n_clusters)
    fold = train.fold_ids(folds, seed, split_by)
    c = call_costs(train, costs)
    fixed = dict(settings or {})
    names = (weak or "", strong or "") if cls.n_models == 2 else tuple(models or train.models)

    def build(values: Sequence[float]) -> Router:
        return make_router(kind, *names, **{**fixed, **dict(zip(grid, values, strict=True))})

    probe = build([v[0] for v in grid.values()])
    for model in probe.models:
        train.model_index(model)  # every model must be in the data
    raw = probe.inputs(train) if raw is None else raw
    if any(len(part) != train.n_queries for part in raw):  # a priced router's tokens too
        raise ValueError(f"raw: expected the inputs of {train.n_queries} queries, got "
                         f"{' and '.join(str(len(part)) for part in raw)} rows")
    target = probe.targets(train)
    model_costs = probe.training_costs(train, c)
    table: dict[str, float] = {}
    candidates = list(itertools.product(*grid.values()))
    for values in candidates:
        router = build(values)
        scores = []
        for k in range(folds):
            tr, va = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            router.fit_inputs(take(raw, tr), target[tr], take(model_costs, tr))
            scores.append(_fold_value(router, take(raw, va), train.subset(va),
                                      c[va]))
        finite = [v for v in scores if np.isfinite(v)]
        key = ",".join(f"{n}={v:g}" for n, v in zip(grid, values, strict=True))
        table[key] = float(np.mean(finite)) if finite else float("nan")
    scored = [(v, i) for i, v in enumerate(table.values()) if np.isfinite(v)]
    if scored:
        best = candidates[max(scored, key=lambda t: (t[0], -t[1]))[1]]
    else:  # no fold had a cost range (equal costs): nothing to choose on; the defaults
        # every concrete router is a dataclass (Router's subclasses are declared so)
        fields = cls.__dataclass_fields__  # type: ignore[attr-defined]  # see above
        best = tuple(fields[n].default for n in grid)
    return CVChoice({n: float(v) for n, v in zip(grid, best, strict=True)}, table, folds,
                    split_by)
