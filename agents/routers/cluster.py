"""Cluster routing (``"cluster"``): each model's accuracy on the query's nearest cluster.

**What Avengers-Pro does.** It embeds the training queries, clusters them with k-means,
and keeps, per cluster, each model's accuracy and mean cost on the training queries of
that cluster. A new query is embedded, its ``p`` nearest clusters found, and each
model's score (a weighted mix of its normalised accuracy and its normalised cost on
those clusters) ranks the models. Because a router reads a query only through its
cluster, it generalises to a group (a subject, a domain) it never saw exactly as far as
that group's queries fall in clusters of seen queries.

**What :class:`ClusterRouter` does.** The same, in the family's two-model form:

* the clusters: scikit-learn's ``KMeans`` (``k`` clusters, 10 initialisations, seeded
  by ``seed``) over the router's :class:`~agents.routers.features.TextFeatures` design
  rows (standardised statistics, ``hashed_weight`` x text features), the inputs every
  router of the family reads, not a separate sentence embedder (``text_features=
  "minilm"`` gives sentence embeddings); ``k`` is cut to the number of distinct rows
  when there are fewer;
* per cluster ``c`` and model ``j``, the accuracy smoothed toward the model's global
  training accuracy ``g_j`` by a prior worth ``prior`` queries:
  ``p_j(c) = (right_j(c) + prior * g_j) / (n(c) + prior)``, so a cluster of three
  queries does not claim 0% or 100%;
* a query's ``p_j`` is the mean of ``p_j`` over its ``nearest`` nearest clusters
  (Euclidean distance to the centroids; Avengers-Pro's top-``p``), and its score the
  accuracy the strong call is expected to add, ``p_strong - p_weak`` (in ``[-1, 1]``).
  :meth:`ClusterRouter.predict` gives ``(p_weak, p_strong)``; a threshold on the score
  decides, as for every two-model router. The calibration is not floored at 0 (a
  strong call predicted to add nothing is still bought when a share or a cost asks for
  it). With ``nearest = 1`` the score takes at most ``k`` values, one per cluster, and
  the calibration keeps tied queries together, so a calibrated share moves in steps of a
  cluster and may land well off the share asked.

The cost side of Avengers-Pro's score is the threshold's job here (each call at its
logged price: the threshold sweep is the trade-off), so per-cluster costs are not kept.
Settings are fixed and documented (``k = 8``, ``prior = 10``, ``nearest = 1``), or
``k`` is chosen by :func:`~agents.routers.cv.cross_validate` (its grid in
:data:`~agents.routers.cv.CV_GRIDS`). Its state holds the centroids ``(k, d)``, the
smoothed accuracies ``(k, 2)`` and the cluster sizes ``(k,)``: numpy only at load.

**K models** (``"multi-cluster"``, :class:`ClusterMultiRouter`): the same clusters and
smoothed accuracies for every model, traded against each model's mean cost by ``lam``
as :class:`~agents.routers.multi.MultiRouter` trades its predicted correctness (its
``lam`` sweep, calibration and AIQ). That is Avengers-Pro's own setting, K models and a
performance-cost trade-off, with the model's mean cost in place of its per-cluster cost.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import TwoModelRouter, array_of, register
from agents.routers.multi import MultiRouter
from agents.routers.solvers import one_thread
from cost_envs.config import integer, number
from cost_envs.traces import TraceDataset


def fit_kmeans(x: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(centroids, labels)`` of k-means on ``x`` (``k`` cut to the distinct rows)."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    k = min(k, len(np.unique(x, axis=0)))
    # rows closer than the float tolerance: fewer clusters; one thread (solvers.one_thread)
    with warnings.catch_warnings(), one_thread():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x)
    return model.cluster_centers_.astype(np.float64), model.labels_.astype(np.int64)


def nearest_clusters(x: np.ndarray, centroids: np.ndarray, nearest: int) -> np.ndarray:
    """``(n, nearest)``: each row's nearest centroids, closest first (ties: lower index)."""
    d2 = ((x * x).sum(axis=1)[:, None] - 2.0 * x @ centroids.T
          + (centroids * centroids).sum(axis=1)[None, :])
    return np.argsort(d2, axis=1, kind="stable")[:, :min(nearest, len(centroids))]


def smoothed_accuracy(labels: np.ndarray, correct: np.ndarray, k: int, prior: float
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(k, K)`` per-cluster accuracy shrunk toward the global one, and ``(k,)`` sizes."""
    correct = np.asarray(correct, dtype=np.float64)
    size = np.bincount(labels, minlength=k).astype(np.float64)
    right = np.stack([np.bincount(labels, weights=correct[:, j], minlength=k)
                      for j in range(correct.shape[1])], axis=1)
    overall = correct.mean(axis=0)
    return (right + prior * overall) / (size[:, None] + prior), size


class ClusterModel:
    """The clusters and each model's smoothed accuracy on them: the one home of the model.

    Shared by :class:`ClusterRouter` (two models) and :class:`ClusterMultiRouter` (K);
    the dataclasses that use it have the fields ``k``, ``prior``, ``nearest`` and
    ``seed``. Its arrays: ``"centroids"`` ``(k, d)``, ``"accuracy"`` ``(k, K)``,
    ``"size"`` ``(k,)``.
    """

    k: int
    prior: float
    nearest: int
    seed: int

    def _check_clusters(self) -> None:
        integer(self.k, "k", minimum=1)
        number(self.prior, "prior", minimum=0)
        integer(self.nearest, "nearest", minimum=1)
        integer(self.seed, "seed", minimum=0)
        self._centroids: np.ndarray | None = None
        self._accuracy: np.ndarray | None = None
        self._size: np.ndarray | None = None

    def _fit_clusters(self, x: np.ndarray, y: np.ndarray, models: int) -> None:
        if y.shape != (len(x), models):
            raise ValueError(f"targets: expected ({len(x)}, {models}) correctness, got "
                             f"{y.shape}")
        self._centroids, labels = fit_kmeans(x, self.k, self.seed)
        self._accuracy, self._size = smoothed_accuracy(labels, y, len(self._centroids),
                                                       float(self.prior))

    def _clusters(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._centroids is None or self._accuracy is None or self._size is None:
            raise ValueError(f"{type(self).__name__}: call fit first")
        return self._centroids, self._accuracy, self._size

    def _cluster_accuracy(self, x: np.ndarray) -> np.ndarray:
        """``(n, K)``: each model's accuracy, averaged over each row's nearest clusters."""
        centroids, accuracy, _ = self._clusters()
        return accuracy[nearest_clusters(x, centroids, self.nearest)].mean(axis=1)

    def _cluster_arrays(self) -> dict[str, np.ndarray]:
        centroids, accuracy, size = self._clusters()
        return {"centroids": centroids, "accuracy": accuracy, "size": size}

    def _load_clusters(self, arrays: Mapping[str, Any], width: int, models: int) -> None:
        centroids = array_of(arrays, "centroids", 2)
        accuracy, size = array_of(arrays, "accuracy", 2), array_of(arrays, "size", 1)
        k = len(centroids)
        if not 1 <= k <= self.k or centroids.shape[1] != width:
            raise ValueError(f"arrays: 'centroids': expected 1 to {self.k} rows of {width} "
                             f"columns for this config, got {centroids.shape}")
        if accuracy.shape != (k, models) or ((accuracy < 0) | (accuracy > 1)).any():
            raise ValueError(f"arrays: 'accuracy': expected ({k}, {models}) numbers in "
                             f"[0, 1], got shape {accuracy.shape}")
        if size.shape != (k,) or (size < 0).any():
            raise ValueError(f"arrays: 'size': expected {k} counts >= 0, got {size.shape}")
        self._centroids, self._accuracy, self._size = centroids, accuracy, size


@register
@dataclass
class ClusterRouter(ClusterModel, TwoModelRouter):
    """Routes by each model's smoothed accuracy on the query's nearest k-means cluster.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        hashed_weight: Scale of the text features relative to the standardised
            statistics (in the clustering distance).
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
        k: Clusters (default 8, not tuned on any data here), >= 1.
        prior: Strength, in queries, of the pull of a cluster's accuracy toward the
            model's global accuracy (default 10), >= 0.
        nearest: Clusters a query's accuracies are averaged over (default 1), >= 1.
        seed: Seed of k-means' initialisations.
    """

    weak: str
    strong: str
    n_features: int = 512
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True
    k: int = 8
    prior: float = 10.0
    nearest: int = 1
    seed: int = 0

    kind: ClassVar[str] = "cluster"

    def __post_init__(self) -> None:
        self._check_clusters()
        super().__post_init__()

    def targets(self, data: TraceDataset) -> np.ndarray:
        """``(n, 2)``: whether the weak and the strong model answered each query right."""
        return data.correct[:, [data.model_index(m) for m in self.models]]

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        self._fit_clusters(x, y, 2)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        return self._cluster_accuracy(x)

    def cluster_of(self, data: TraceDataset) -> np.ndarray:
        """Each query's nearest cluster, ``(n,)`` (ValueError before ``fit``)."""
        centroids = self._clusters()[0]
        return nearest_clusters(self._design(*self.inputs(data)), centroids, 1)[:, 0]

    # ------------------------------------------------------------------ the score
    def scores_of(self, win: np.ndarray, costs: np.ndarray | None = None) -> np.ndarray:
        """The accuracy the strong call adds: ``p_strong - p_weak`` of a prediction."""
        win = np.asarray(win)
        return win[:, 1] - win[:, 0]

    def scores(self, data: TraceDataset) -> np.ndarray:
        """Expected accuracy added by the strong call on ``data``'s queries; higher: strong."""
        return self.scores_of(self.predict(data))

    def decide(self, win: np.ndarray, point: float, costs: Any = None) -> np.ndarray:
        """1 (strong) where ``p_strong - p_weak`` is at or above ``point``, else 0."""
        return (self.scores_of(win) >= point).astype(np.int64)

    # ------------------------------------------------------------------ state
    def _model_arrays(self) -> dict[str, np.ndarray]:
        return self._cluster_arrays()

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        self._load_clusters(arrays, sum(self.features.widths), 2)


@register
@dataclass
class ClusterMultiRouter(ClusterModel, MultiRouter):
    """Cluster routing over K models: ``argmax_j p_j(cluster) - lam * cost_j / s``.

    As :class:`~agents.routers.multi.MultiRouter` (``lam`` the accuracy given up per unit
    of the dearest model's mean training cost ``s``, each model priced at its mean
    training cost, the ``lam`` sweep and its AIQ), with each model's correctness read
    from the query's nearest clusters as :class:`ClusterRouter` reads it, in place of a
    logistic regression per model. Avengers-Pro's per-cluster costs are not kept: a
    model's call is priced at its mean, as ``"multi-logistic"`` prices it.

    Args:
        models: The models to route between (default: all of the training data's).
        n_features: Hashed n-gram features.
        l2: Unused (a field of the K-model routers' base; no regression here).
        hashed_weight: Scale of the text features in the clustering distance.
        text_features: The text encoder.
        k: Clusters (default 8), >= 1.
        prior: Pull, in queries, toward each model's global accuracy (default 10), >= 0.
        nearest: Clusters a query's accuracies are averaged over (default 1), >= 1.
        seed: Seed of k-means' initialisations.
    """

    k: int = 8
    prior: float = 10.0
    nearest: int = 1
    seed: int = 0

    kind: ClassVar[str] = "multi-cluster"

    def __post_init__(self) -> None:
        self._check_clusters()
        super().__post_init__()

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        self._fit_clusters(x, y, len(self.models))
        self._cost = np.asarray(costs, dtype=np.float64).mean(axis=0)

    def _coefficients(self) -> np.ndarray:
        return self._clusters()[1]  # what "fitted" means to the K-model base

    def _predict(self, x: np.ndarray) -> np.ndarray:
        return self._cluster_accuracy(x)

    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {**self._cluster_arrays(), "cost": self._fitted()[1]}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        self._load_clusters(arrays, sum(self.features.widths), len(self.models))
        cost = array_of(arrays, "cost", 1)
        if cost.shape != (len(self.models),) or (cost < 0).any():
            raise ValueError(f"arrays: 'cost': expected {len(self.models)} costs >= 0, got "
                             f"shape {cost.shape}")
        self._cost = cost
