"""The two-model routers (``K = 2``): logistic, kNN and the cascade.

Each predicts from a query whether the weak model answers it wrongly; that probability is
the router's score (:meth:`TwoModelRouter.scores`, the strong model's column of
:meth:`~agents.routers.base.Router.predict`), and a threshold on it decides
(:meth:`TwoModelRouter.decide`; sweeping it gives the routing curve of
:mod:`cost_envs.metrics.routing`: APGR, CPT(50%), CPT(80%)).

* ``"logistic"`` (:class:`LogisticRouter`): L2 logistic regression
  (:func:`~agents.routers.solvers.fit_logistic`) on the standardised text
  statistics and ``hashed_weight`` x text features;
* ``"knn"`` (:class:`KNNRouter`): the share of the ``k`` nearest training queries
  (Euclidean, same inputs) on which the weak model was wrong;
* ``"cascade"`` (:class:`CascadeRouter`): the weak model is always called first and the
  logistic regression also reads its logged *answer* (statistics and text features of it,
  :func:`~agents.routers.statistics.answer_statistics`); never the strong model's
  answer, never a label. Its cost curve is :func:`cascade_curve`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import TwoModelRouter, array_of, register
from agents.routers.cv import cross_validate
from agents.routers.solvers import fit_logistic, logistic_scores, neighbour_share
from cost_envs.config import integer, number
from cost_envs.metrics.routing import RoutingCurve, routing_curve
from cost_envs.traces import TraceDataset


@dataclass
class TwoModelLogistic(TwoModelRouter):
    """The settings of a two-model router whose model is a logistic regression.

    One home of the fields, their order and their defaults for :class:`LogisticRouter`
    (and :class:`CascadeRouter`) and :class:`~agents.routers.priced.PricedRouter`: the
    two models, the text features and the regression's ``l2``.
    """

    weak: str
    strong: str
    n_features: int = 512
    l2: float = 10.0
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True


@register
@dataclass
class LogisticRouter(TwoModelLogistic):
    """Scores queries by the logistic probability that the weak model answers wrongly.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        l2: Logistic regression penalty, > 0.
        hashed_weight: Scale of the text features relative to the standardised
            statistics (0 ignores the words).
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own
            (:func:`~agents.routers.features.register_text_features`).
    """

    kind: ClassVar[str] = "logistic"

    def __post_init__(self) -> None:
        number(self.l2, "l2", minimum=0, inclusive=False)
        super().__post_init__()
        self._coef: np.ndarray | None = None

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        self._coef = np.append(*fit_logistic(x, np.asarray(y, dtype=np.float64), self.l2))

    def _score(self, x: np.ndarray) -> np.ndarray:
        assert self._coef is not None
        return logistic_scores(x, self._coef[:-1], float(self._coef[-1]))

    def _model_arrays(self) -> dict[str, np.ndarray]:
        assert self._coef is not None
        return {"coef": self._coef}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        coef = array_of(arrays, "coef", 1)
        width = sum(self.features.widths) + 1
        if coef.shape != (width,):
            raise ValueError(f"arrays: 'coef': expected {width} weights (statistics, text "
                             f"features, intercept) for this config, got {coef.shape[0]}")
        self._coef = coef

    def cross_validate(
        self, data: TraceDataset, l2_grid: Sequence[float] = (1.0, 10.0, 100.0),
        weight_grid: Sequence[float] = (0.0, 1.0, 4.0), folds: int = 5, seed: int = 0,
        split_by: str = "query", costs: Any = None,
    ) -> dict[str, Any]:
        """``l2`` and ``hashed_weight`` by cross-validation on ``data``, then fit on all.

        :func:`agents.routers.cv.cross_validate` (mean validation-fold AIQ) over
        ``l2_grid`` x ``weight_grid``: the GSM8K report's choice. ``costs``: ``(n, m)``
        cost of each call of ``data`` (default its own).

        Returns:
            ``{"l2", "hashed_weight", "cv_aiq": {"l2=...,w=...": mean AIQ}}``.
        """
        others = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("weak", "strong", "l2", "hashed_weight")}
        choice = cross_validate(self.kind, data, weak=self.weak, strong=self.strong,
                                settings=others, grid={"l2": l2_grid,
                                                       "hashed_weight": weight_grid},
                                folds=folds, split_by=split_by, seed=seed, costs=costs)
        self.l2, self.hashed_weight = choice.chosen["l2"], choice.chosen["hashed_weight"]
        self.fit(data)
        table = {k.replace("hashed_weight=", "w="): v for k, v in choice.table.items()}
        return {"l2": self.l2, "hashed_weight": self.hashed_weight, "cv_aiq": table}


@register
@dataclass
class CascadeRouter(LogisticRouter):
    """The cascade's escalation score: the weak model has answered; will it be wrong?

    The weak model is called on every query; the router reads its logged answer and the
    prompt (statistics of both, standardised; text features of the answer, then of the
    prompt, ``n_features`` each, scaled by ``hashed_weight``) and the queries scored
    highest are escalated to the strong model. The strong model's answer and the
    correctness labels are never inputs; the data must log the weak model's answers.

    Args:
        weak: Name of the weak model, called first.
        strong: Name of the strong model, called on escalation.
        n_features: Hashed n-gram features of the answer, and as many of the prompt.
        l2: Logistic regression penalty.
        hashed_weight: Scale of the text features (0: the statistics alone).
        text_features: The text encoder.
    """

    n_features: int = 256
    kind: ClassVar[str] = "cascade"
    reads_answers: ClassVar[bool] = True


@register
@dataclass
class KNNRouter(TwoModelRouter):
    """Scores a query by the share of its ``k`` nearest training queries the weak model got wrong.

    Neighbours by :func:`~agents.routers.solvers.neighbour_share` (scikit-learn's
    brute-force ``NearestNeighbors``, Euclidean, on the logistic router's inputs). Scores
    are multiples of ``1 / k``, so many queries tie: the routing curve and the threshold
    calibration keep tied queries together. A kNN state holds its training features, not
    their texts.

    Args:
        weak: Name of the weak model.
        strong: Name of the strong model.
        n_features: Hashed n-gram features.
        hashed_weight: Scale of the text features in the distance.
        text_features: The text encoder.
        k: Neighbours (default 25, a common choice, not tuned on any data here).
    """

    weak: str
    strong: str
    n_features: int = 512
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True
    k: int = 25

    kind: ClassVar[str] = "knn"
    #: States saved before the family had one base class held an unused ``l2``.
    legacy_keys: ClassVar[frozenset[str]] = frozenset({"l2"})

    def __post_init__(self) -> None:
        integer(self.k, "k", minimum=1)
        super().__post_init__()
        self._train_x: np.ndarray | None = None
        self._train_y: np.ndarray | None = None

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        self._train_x, self._train_y = x, np.asarray(y, dtype=np.float64)

    def _score(self, x: np.ndarray) -> np.ndarray:
        assert self._train_x is not None and self._train_y is not None
        return neighbour_share(self._train_x, self._train_y, x, self.k)

    def _model_arrays(self) -> dict[str, np.ndarray]:
        assert self._train_x is not None and self._train_y is not None
        return {"train_x": self._train_x, "train_y": self._train_y}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        x, y = array_of(arrays, "train_x", 2), array_of(arrays, "train_y", 1)
        if x.shape[1] != sum(self.features.widths):
            raise ValueError(f"arrays: 'train_x': expected {sum(self.features.widths)} "
                             f"columns for this config, got {x.shape[1]}")
        if len(x) != len(y) or not np.isin(y, (0.0, 1.0)).all():
            raise ValueError(f"arrays: expected 'train_y' of {len(x)} 0/1 labels, got "
                             f"shape {y.shape}")
        self._train_x, self._train_y = x, y


def cascade_curve(scores: Any, weak_correct: Any, strong_correct: Any, weak_cost: Any,
                  strong_cost: Any) -> RoutingCurve:
    """The routing curve of a cascade: the weak call is paid on every query.

    Strong-call share and accuracy are :func:`routing_curve`'s (an escalated query is
    answered by the strong model); the cost of an escalated query is the weak call plus
    the strong one, so the curve's cost runs from the weak model's mean cost (share 0)
    to the sum of both models' (share 1).
    """
    weak_cost = np.asarray(weak_cost, dtype=np.float64)
    return routing_curve(scores, weak_correct, strong_correct, weak_cost,
                         weak_cost + np.asarray(strong_cost, dtype=np.float64))
