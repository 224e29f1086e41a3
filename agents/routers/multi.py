"""The K-model router: predicted correctness of each model, traded against its cost.

:class:`MultiRouter` (``"multi-logistic"`` in :data:`~agents.routers.ROUTERS`)
predicts, for each model ``j``, the probability ``p_j(q)`` that it answers query ``q``
correctly (one L2 logistic regression per model,
:func:`~agents.routers.solvers.fit_logistic`, on the family's
:class:`~agents.routers.features.TextFeatures`) and decides

    ``argmax_j  p_j(q) - lam * cost_j / cost_scale``

(ties to the cheaper model). ``cost_j`` is model ``j``'s mean cost per call on the
training queries: a call's own cost is not known before it is made (its output tokens
are not), so the router prices each model at its expected cost. ``cost_scale`` is the
dearest model's, so ``lam`` is the accuracy the router gives up to save the dearest
model's cost: ``lam = 0`` sends each query to the model most likely right, a large
``lam`` everything to the cheapest. For a query, the chosen model's price never rises
with ``lam``, so sweeping ``lam`` (:meth:`MultiRouter.lams` gives the exact points where
some decision changes) traces a cost-quality curve; :func:`sweep_metrics` reads its AIQ
(RouterBench's area under the non-decreasing convex hull,
:func:`cost_envs.metrics.frontier.bootstrap_aiqs`) with intervals over queries, or over
groups when the split held out groups, paired with the single models' own frontier
(what random routing between them reaches: a K-model router earns its keep above it).

Its state (:meth:`~agents.routers.base.Router.to_state`) has the arrays
``"mean"``, ``"std"``, ``"coef"`` ``(K, d + 1)`` (each model's weights, then intercept)
and ``"cost"`` ``(K,)``; a loaded router routes exactly as the saved one (numpy only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import Router, array_of, register
from agents.routers.evaluation import call_costs, resample_clusters
from agents.routers.solvers import fit_logistic, logistic_scores
from cost_envs.config import integer, number
from cost_envs.metrics.frontier import bootstrap_aiqs
from cost_envs.traces import TraceDataset

#: Name of the single models' entry in :func:`sweep_metrics`.
SINGLE_MODELS = "single models"


class PerModelLogistic(Router):
    """A router whose model is one L2 logistic regression per model: ``p_j(q)``.

    The correctness model of :class:`MultiRouter` and of the priced routers
    (:mod:`~agents.routers.priced`, which put it before
    :class:`~agents.routers.base.TwoModelRouter` for two models): ``predict`` gives each
    model's probability of answering the query right. Subclasses are dataclasses with an
    ``l2`` field; their targets are ``(n, K)`` correctness. Its arrays: ``"coef"``
    ``(K, d + 1)`` (each model's weights, then intercept).
    """

    l2: float

    def __post_init__(self) -> None:
        number(self.l2, "l2", minimum=0, inclusive=False)
        super().__post_init__()
        self._coef: np.ndarray | None = None

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        if y.shape != (len(x), len(self.models)):
            raise ValueError(f"targets: expected ({len(x)}, {len(self.models)}) correctness, "
                             f"got {y.shape}")
        self._coef = np.array([np.append(*fit_logistic(x, y[:, j].astype(np.float64), self.l2))
                               for j in range(y.shape[1])])

    def _coefficients(self) -> np.ndarray:
        if self._coef is None:
            raise ValueError(f"{type(self).__name__}: call fit first")
        return self._coef

    def _predict(self, x: np.ndarray) -> np.ndarray:
        return np.column_stack([logistic_scores(x, w[:-1], float(w[-1]))
                                for w in self._coefficients()])

    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {"coef": self._coefficients()}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        shape = (len(self.models), sum(self.features.widths) + 1)
        coef = array_of(arrays, "coef", 2)
        if coef.shape != shape:
            raise ValueError(f"arrays: 'coef': expected shape {shape} for this config, "
                             f"got {coef.shape}")
        self._coef = coef


@register
@dataclass
class MultiRouter(PerModelLogistic):
    """Routes each query to the model with the best predicted correctness net of cost.

    Args:
        models: The models to route between (default: all of the training data's, in
            its order; fixed at :meth:`fit`).
        n_features: Hashed n-gram features.
        l2: Logistic regression penalty (each model's).
        hashed_weight: Scale of the text features relative to the statistics.
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
    """

    models: tuple[str, ...] = ()
    n_features: int = 512
    l2: float = 10.0
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True

    kind: ClassVar[str] = "multi-logistic"

    def __post_init__(self) -> None:
        if isinstance(self.models, str) or not all(
                isinstance(m, str) and m for m in self.models):
            raise ValueError(f"models: expected a list of model names, got {self.models!r}")
        self.models = tuple(self.models)
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"models: expected unique names, got {list(self.models)}")
        super().__post_init__()
        self._cost: np.ndarray | None = None

    def _columns(self, data: TraceDataset) -> np.ndarray:
        """The data's column of each of the router's models (KeyError naming a missing one)."""
        return np.array([data.model_index(m) for m in self.models], dtype=np.int64)

    def targets(self, data: TraceDataset) -> np.ndarray:
        """``(n, K)``: whether each of the router's models answered each query right."""
        return data.correct[:, self._columns(data)]

    def fit(self, data: TraceDataset, costs: Any = None) -> MultiRouter:
        """Fit one correctness model per model on ``data`` (the training split).

        Args:
            data: The training queries.
            costs: ``(n, m)`` cost of each call (default: the data's own,
                :func:`~agents.routers.evaluation.call_costs`); their means per model
                are the costs the router trades against.
        """
        if not self.models:
            self.models = data.models
        if len(self.models) < 2:
            raise ValueError(f"models: expected at least two to route between, got "
                             f"{list(self.models)}")
        super().fit(data, costs)
        return self

    def _model_costs(self, data: TraceDataset, costs: Any) -> Any:  # PricedMultiRouter's: a dict
        return call_costs(data, costs)[:, self._columns(data)]

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        super()._fit_model(x, y, costs)
        self._cost = np.asarray(costs).mean(axis=0)

    def _fitted(self) -> tuple[np.ndarray, np.ndarray]:
        coef = self._coefficients()
        if self._cost is None:
            raise ValueError(f"{type(self).__name__}: call fit first")
        return coef, self._cost

    @property
    def model_costs(self) -> np.ndarray:
        """Each model's mean training cost per call, ``(K,)``: what the router trades."""
        return self._fitted()[1].copy()

    def correctness(self, data: TraceDataset) -> np.ndarray:
        """Predicted probability that each model answers each query right, ``(n, K)``.

        Read from the prompts only (no outcomes); columns in :attr:`models` order.
        """
        return self.predict(data)

    def _unit_costs(self, costs: Any = None, n: int = 1) -> np.ndarray:
        """``(n, K)`` costs in units of the dearest model's mean training cost.

        ``costs``: per-query prices of the calls (a priced router's
        :meth:`expected_costs`); ``None``: each model at its mean training cost.
        """
        cost = self._fitted()[1]
        scale = float(cost.max())
        c = (np.broadcast_to(cost, (n, len(cost))) if costs is None
             else np.asarray(costs, dtype=np.float64))
        return c / scale if scale > 0 else c

    def decide(self, win: np.ndarray, point: float, costs: Any = None) -> np.ndarray:
        """Index of the best predicted correctness net of ``point`` (``lam``) x unit cost."""
        return self._route(np.asarray(win), np.array([float(point)]),
                           np.arange(len(self.models)), costs)[:, 0]

    def route(self, data: TraceDataset, lam: float = 0.0) -> np.ndarray:
        """Which model answers each query at ``lam``: ``(n,)`` column indices of ``data``.

        Scored as they are by :func:`~agents.routers.evaluation.score_routing`.
        """
        number(lam, "lam", minimum=0)
        return super().route(data, lam)

    def _route(self, p: np.ndarray, lams: np.ndarray, cols: np.ndarray,
               costs: Any = None) -> np.ndarray:
        """``(n, len(lams))`` data columns: argmax of utility, the cheaper model on ties."""
        unit = self._unit_costs(costs, len(p))
        out = np.empty((len(p), len(lams)), dtype=np.int64)
        for k, lam in enumerate(lams):
            utility = p - lam * unit
            best = utility >= utility.max(axis=1, keepdims=True) - 1e-12
            out[:, k] = cols[np.argmin(np.where(best, unit, np.inf), axis=1)]
        return out

    def lams(self, data: TraceDataset, max_points: int = 200) -> np.ndarray:
        """The ``lam`` values at which some query of ``data`` changes model, from 0.

        For a query, the model it goes to gives way to a cheaper ``k`` where their
        utilities meet, ``lam = (p_j - p_k) / (unit cost_j - unit cost_k)``
        (:func:`decision_changes`: only the crossings where the decision changes, not
        those of two models neither of which is chosen there); at the largest such value
        every query is at its cheapest model. Between two values no decision changes, so
        the sweep over them is the whole cost-quality curve. Read from predictions only.
        More than ``max_points`` values are thinned evenly (by rank), keeping 0 and the
        largest.
        """
        integer(max_points, "max_points", minimum=2)
        win, costs = self.predicted(data)
        return self._lams(win, max_points, costs)

    def _lams(self, p: np.ndarray, max_points: int = 200, costs: Any = None) -> np.ndarray:
        """:meth:`lams` from predicted correctness ``p`` (and per-query ``costs``)."""
        unit = self._unit_costs(costs, len(p))
        start = self._route(p, np.zeros(1), np.arange(p.shape[1]), costs)[:, 0]
        points = np.unique(decision_changes(p, unit, start))
        if len(points) > max_points - 1:
            points = points[np.unique(np.linspace(0, len(points) - 1, max_points - 1
                                                  ).round().astype(np.int64))]
        return np.concatenate([[0.0], points[points > 0]])

    def lams_inputs(self, inputs: Any, max_points: int = 200) -> np.ndarray:
        """:meth:`lams` from precomputed :meth:`inputs`."""
        integer(max_points, "max_points", minimum=2)
        return self._lams(self.predict_inputs(inputs), max_points,
                          self.expected_costs_inputs(inputs))

    def sweep_inputs(self, inputs: Any, lams: Sequence[float] | np.ndarray | None = None
                     ) -> np.ndarray:
        """:meth:`sweep` from precomputed :meth:`inputs`: indices into :attr:`models`."""
        return self._sweep(self.predict_inputs(inputs), np.arange(len(self.models)), lams,
                           self.expected_costs_inputs(inputs))

    def sweep(self, data: TraceDataset, lams: Sequence[float] | np.ndarray | None = None
              ) -> np.ndarray:
        """Decisions at each ``lam`` (default :meth:`lams`): ``(n, points)`` data columns."""
        win, costs = self.predicted(data)
        return self._sweep(win, self._columns(data), lams, costs)

    def _sweep(self, p: np.ndarray, cols: np.ndarray,
               lams: Sequence[float] | np.ndarray | None = None, costs: Any = None
               ) -> np.ndarray:
        """:meth:`sweep` from predicted correctness ``p`` and the models' data columns."""
        grid = self._lams(p, costs=costs) if lams is None else np.asarray(lams,
                                                                           dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0 or not (np.isfinite(grid).all() and
                                                    (grid >= 0).all()):
            raise ValueError(f"lams: expected a non-empty list of numbers >= 0, got {lams!r}")
        return self._route(p, grid, cols, costs)

    # ------------------------------------------------------------------ state
    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {**super()._model_arrays(), "cost": self._fitted()[1]}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        if len(self.models) < 2:
            raise ValueError(f"config: models: expected at least two, got {self.models}")
        super()._load_model_arrays(arrays)
        cost = array_of(arrays, "cost", 1)
        if cost.shape != (len(self.models),):
            raise ValueError(f"arrays: 'cost': expected shape {(len(self.models),)} for this "
                             f"config, got {cost.shape}")
        if (cost < 0).any():
            raise ValueError("arrays: expected 'cost' >= 0")
        self._cost = cost


def decision_changes(p: np.ndarray, unit: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Every ``lam`` at which a query's choice ``argmax_j p_j - lam * unit_j`` changes.

    As ``lam`` grows a query's choice only moves to cheaper models (the dearer a model,
    the faster its utility falls), so it changes at most ``K - 1`` times: the corners of
    the upper envelope of its ``K`` lines. From the model chosen at 0 (``start``, with
    :meth:`MultiRouter.decide`'s ties), each step goes to the first ``lam`` where a
    cheaper model's line meets the current one, and on to the cheapest model meeting it
    there (the one above after it). A crossing of two models neither of which is chosen
    at that ``lam`` is no change and is not returned (with two models every crossing of
    a dearer, more likely right model is one). ``O(n K)`` memory per step.

    Args:
        p: ``(n, K)`` predicted correctness.
        unit: ``(n, K)`` costs of the calls (in the router's units).
        start: ``(n,)`` the model chosen at ``lam = 0``.

    Returns:
        The changes of all queries, one per query and change, unsorted (``> 0``).
    """
    rows = np.arange(len(p))
    current, found = np.asarray(start), []
    for _ in range(p.shape[1] - 1):
        dc = unit[rows, current][:, None] - unit
        cheaper = dc > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            meet = np.where(cheaper, (p[rows, current][:, None] - p) / dc, np.inf)
        first = meet.min(axis=1)
        moving = np.isfinite(first)
        if not moving.any():
            break
        found.append(first[moving])
        there = cheaper & (meet <= first[:, None])
        current = np.where(moving, np.argmin(np.where(there, unit, np.inf), axis=1), current)
    return np.concatenate(found) if found else np.empty(0)


def sweep_metrics(
    data: TraceDataset,
    sweeps: Mapping[str, Any],
    costs: Any = None,
    *,
    split_by: str = "query",
    cost_range: Sequence[float] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """AIQ of K-model routers' sweeps beside the single models' frontier, paired.

    Args:
        data: The test queries.
        sweeps: Name -> ``(n, points)`` data column indices: the model that answers each
            query at each operating point (:meth:`MultiRouter.sweep`).
        costs: ``(n, m)`` cost of each call (default the data's own).
        split_by: ``"group"`` resamples whole groups (the cluster bootstrap).
        cost_range: AIQ's range; default the cheapest to the dearest single model's mean
            cost.
        n_resamples: Bootstrap resamples.
        confidence: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        Name -> ``{"value", "ci", "cost_range", "cost", "quality"}`` (AIQ and its
        interval; the mean cost and quality at each operating point), one entry
        :data:`SINGLE_MODELS` (each model alone, whose frontier random routing reaches),
        and for each router ``"minus_single models"``: its AIQ minus theirs, paired.
    """
    if SINGLE_MODELS in sweeps:
        raise ValueError(f"sweeps: {SINGLE_MODELS!r} is the single models' entry; rename it")
    c = call_costs(data, costs)
    rows = np.arange(data.n_queries)[:, None]
    points = {SINGLE_MODELS: (data.scores, c)}
    for name, decisions in sweeps.items():
        d = np.asarray(decisions)
        if (d.ndim != 2 or d.shape[0] != data.n_queries or d.size == 0
                or not np.issubdtype(d.dtype, np.integer) or d.min() < 0
                or d.max() >= data.n_models):
            raise ValueError(f"sweeps[{name!r}]: expected ({data.n_queries}, points) model "
                             f"indices in [0, {data.n_models}), got {d.dtype} {d.shape}")
        points[name] = (data.scores[rows, d], c[rows, d])
    mean_cost = c.mean(axis=0)
    span = ([float(mean_cost.min()), float(mean_cost.max())] if cost_range is None
            else [float(v) for v in cost_range])
    out = bootstrap_aiqs(points, span, clusters=resample_clusters(data, split_by),
                         reference=SINGLE_MODELS, n_resamples=n_resamples,
                         confidence=confidence, seed=seed)
    for name, (q, cc) in points.items():
        out[name].update(cost=cc.mean(axis=0).tolist(), quality=q.mean(axis=0).tolist())
    return out
