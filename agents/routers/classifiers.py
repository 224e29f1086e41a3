"""The classifier routers of the libraries' baselines: ``"mlp"`` and ``"svm"``.

LLMRouter and LLMRouterBench ship an MLP and an SVM router among their baselines: a
classifier from a query's embedding to the model that should answer it. Here each is a
two-model router of the family: it learns, as the logistic router does, whether the
weak model answers a query wrongly (:meth:`~agents.routers.base.TwoModelRouter.targets`)
from the same inputs (:class:`~agents.routers.features.TextFeatures`: standardised
statistics and ``hashed_weight`` x text features), and its score is that probability.
What differs from the libraries: they predict the best model's label among K (and read
sentence embeddings); these predict the weak model's failure between two (and read the
family's features: ``text_features="minilm"`` for sentence embeddings), so a threshold
sweeps their cost-accuracy curve as every two-model router's.

* ``"mlp"`` (:class:`MLPRouter`): scikit-learn's ``MLPClassifier``, one hidden layer of
  ``hidden`` ReLU units, Adam, L2 penalty ``alpha``, at most ``max_iter`` epochs,
  seeded by ``seed`` (initial weights and batch order; fixed settings, not tuned on any
  data here: 64 units, ``alpha = 0.01``, 200 epochs). Stopping at ``max_iter`` before
  scikit-learn's tolerance is met is not an error (its warning is silenced).
* ``"svm"`` (:class:`SVMRouter`): a linear SVM (scikit-learn's ``LinearSVC``, penalty
  ``C``, default 0.1) with probabilities from Platt's sigmoid, fitted by
  ``CalibratedClassifierCV`` on ``folds`` (default 3, unshuffled stratified) folds: one
  SVM and one sigmoid per fold, the probability their mean. Where a class has fewer
  training queries than ``folds``, the score is the training rate of weak failures (a
  constant: no curve to learn).

Both states hold numpy arrays only (no pickle), and a loaded router computes the
probabilities in numpy as scikit-learn did: the MLP's layer weights ``"w0"``, ``"b0"``,
``"w1"``, ``"b1"``; the SVM's per-fold ``"svm_coef"`` ``(folds, d)``,
``"svm_intercept"`` ``(folds,)`` and ``"platt"`` ``(folds, 2)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import TwoModelRouter, arrays_of_shapes, register
from agents.routers.solvers import LOGIT_CLIP, one_thread
from cost_envs.config import integer, number


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -LOGIT_CLIP, LOGIT_CLIP)))


def _labels(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or not np.isin(y, (0.0, 1.0)).all():
        raise ValueError(f"targets: expected 0/1 labels (n,), got shape {y.shape}")
    return y


def _constant_logit(y: np.ndarray) -> float:
    """The logit of the training rate, clipped (one class: the clip, signed)."""
    rate = float(y.mean())
    if rate in (0.0, 1.0):
        return LOGIT_CLIP if rate == 1.0 else -LOGIT_CLIP
    return float(np.clip(np.log(rate / (1.0 - rate)), -LOGIT_CLIP, LOGIT_CLIP))


@register
@dataclass
class MLPRouter(TwoModelRouter):
    """Scores queries by a one-hidden-layer network's probability that the weak model is wrong.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        hashed_weight: Scale of the text features relative to the statistics.
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
        hidden: Hidden ReLU units (default 64), >= 1.
        alpha: L2 penalty of the weights (default 0.01), >= 0.
        max_iter: Training epochs at most (default 200), >= 1.
        seed: Seed of the initial weights and the batch order.
    """

    weak: str
    strong: str
    n_features: int = 512
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True
    hidden: int = 64
    alpha: float = 0.01
    max_iter: int = 200
    seed: int = 0

    kind: ClassVar[str] = "mlp"

    def __post_init__(self) -> None:
        integer(self.hidden, "hidden", minimum=1)
        number(self.alpha, "alpha", minimum=0)
        integer(self.max_iter, "max_iter", minimum=1)
        integer(self.seed, "seed", minimum=0)
        super().__post_init__()
        self._layers: dict[str, np.ndarray] | None = None

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        y = _labels(y)
        if y.min() == y.max():  # one class: no network to fit, the rate at the clip
            self._layers = {"w0": np.zeros((x.shape[1], self.hidden)),
                            "b0": np.zeros(self.hidden), "w1": np.zeros(self.hidden),
                            "b1": np.array([_constant_logit(y)])}
            return
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier

        model = MLPClassifier(hidden_layer_sizes=(self.hidden,), alpha=self.alpha,
                              max_iter=self.max_iter, random_state=self.seed)
        # stopping at max_iter is the documented setting; one thread (solvers.one_thread)
        with warnings.catch_warnings(), one_thread():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(x, y)
        w0, w1 = model.coefs_
        b0, b1 = model.intercepts_
        self._layers = {"w0": w0.astype(np.float64), "b0": b0.astype(np.float64),
                        "w1": w1[:, 0].astype(np.float64), "b1": b1.astype(np.float64)}

    def _score(self, x: np.ndarray) -> np.ndarray:
        if self._layers is None:
            raise ValueError("MLPRouter: call fit first")
        layer = self._layers
        hidden = np.maximum(x @ layer["w0"] + layer["b0"], 0.0)
        return _sigmoid(hidden @ layer["w1"] + layer["b1"][0])

    def _model_arrays(self) -> dict[str, np.ndarray]:
        if self._layers is None:
            raise ValueError("MLPRouter: call fit first")
        return dict(self._layers)

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        d, h = sum(self.features.widths), self.hidden
        self._layers = arrays_of_shapes(arrays, {"w0": (d, h), "b0": (h,), "w1": (h,), "b1": (1,)})


@register
@dataclass
class SVMRouter(TwoModelRouter):
    """Scores queries by a calibrated linear SVM's probability that the weak model is wrong.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        hashed_weight: Scale of the text features relative to the statistics.
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
        C: The SVM's penalty on margin violations (default 0.1), > 0.
        folds: Folds of the sigmoid calibration (default 3), >= 2.
        seed: Seed of the SVM's coordinate descent.
    """

    weak: str
    strong: str
    n_features: int = 512
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True
    C: float = 0.1
    folds: int = 3
    seed: int = 0

    kind: ClassVar[str] = "svm"

    def __post_init__(self) -> None:
        number(self.C, "C", minimum=0, inclusive=False)
        integer(self.folds, "folds", minimum=2)
        integer(self.seed, "seed", minimum=0)
        super().__post_init__()
        self._svm: dict[str, np.ndarray] | None = None

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        y = _labels(y)
        if min(int(y.sum()), int(len(y) - y.sum())) < self.folds:  # too few to calibrate
            self._svm = {"svm_coef": np.zeros((self.folds, x.shape[1])),
                         "svm_intercept": np.zeros(self.folds),
                         "platt": np.tile([0.0, -_constant_logit(y)], (self.folds, 1))}
            return
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.svm import LinearSVC

        svm = LinearSVC(C=self.C, max_iter=10_000, random_state=self.seed)
        model = CalibratedClassifierCV(svm, method="sigmoid", cv=self.folds)
        with warnings.catch_warnings(), one_thread():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(x, y)
        fitted = model.calibrated_classifiers_
        self._svm = {
            "svm_coef": np.array([c.estimator.coef_[0] for c in fitted], dtype=np.float64),
            "svm_intercept": np.array([c.estimator.intercept_[0] for c in fitted],
                                      dtype=np.float64),
            "platt": np.array([[c.calibrators[0].a_, c.calibrators[0].b_] for c in fitted],
                              dtype=np.float64)}

    def _score(self, x: np.ndarray) -> np.ndarray:
        if self._svm is None:
            raise ValueError("SVMRouter: call fit first")
        margin = x @ self._svm["svm_coef"].T + self._svm["svm_intercept"]  # (n, folds)
        a, b = self._svm["platt"][:, 0], self._svm["platt"][:, 1]
        return _sigmoid(-(a * margin + b)).mean(axis=1)  # Platt: 1 / (1 + exp(a f + b))

    def _model_arrays(self) -> dict[str, np.ndarray]:
        if self._svm is None:
            raise ValueError("SVMRouter: call fit first")
        return dict(self._svm)

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        d, k = sum(self.features.widths), self.folds
        self._svm = arrays_of_shapes(arrays, {"svm_coef": (k, d), "svm_intercept": (k,),
                                    "platt": (k, 2)})
