"""The numerical cores of the learned routers: L2 logistic regression and nearest neighbours.

Both run on scikit-learn, imported only when a router is fitted or a neighbour is looked
up (a loaded logistic router scores with numpy alone):

* :func:`fit_logistic`: ``min_w sum_i logloss_i + (l2 / 2) * |w|^2``, the intercept not
  penalised: :class:`sklearn.linear_model.LogisticRegression` with ``C = 1 / l2`` (its
  objective is ``C * sum_i logloss_i + |w|^2 / 2``, the same minimiser; the tests check
  the gradient of ours vanishes at its solution). :func:`logistic_scores` is the one way
  scores are read from the weights, so a fitted router and a loaded one score alike;
* :func:`neighbour_share`: for each query, the share of its ``k`` nearest training
  points (Euclidean) whose label is 1: :class:`sklearn.neighbors.NearestNeighbors`,
  brute force (exact; equal distances keep scikit-learn's order).

:class:`LogisticRegression` wraps the first two as an estimator (``fit``,
``predict_proba``); :func:`solver_name` names the library and its version, for reports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_envs.config import integer, number

#: Logits are clipped to this magnitude before the sigmoid (probabilities in (0, 1)).
LOGIT_CLIP = 30.0


def solver_name() -> str:
    """The solvers' library and version (for reports)."""
    import sklearn

    return f"scikit-learn {sklearn.__version__}"


def _xy(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape != (len(x),) or len(x) == 0:
        raise ValueError(f"fit: expected x (n, d) and y (n,), got {x.shape} and {y.shape}")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("fit: expected 0/1 labels y")
    return x, y


def fit_logistic(x: Any, y: Any, l2: float, tol: float = 1e-8, max_iter: int = 1000
                 ) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (intercept not penalised): ``(coef, intercept)``.

    Labels of one class only give zero weights and the intercept at the clip
    (:data:`LOGIT_CLIP`, signed): the maximum-likelihood intercept is infinite.

    Args:
        x: Features ``(n, d)``.
        y: 0/1 labels ``(n,)``.
        l2: Penalty on the squared weights, > 0.
        tol: Solver tolerance.
        max_iter: Solver iterations at most.
    """
    number(l2, "l2", minimum=0, inclusive=False)
    integer(max_iter, "max_iter", minimum=1)
    x, y = _xy(x, y)
    if y.min() == y.max():
        return np.zeros(x.shape[1]), LOGIT_CLIP if y[0] == 1 else -LOGIT_CLIP
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0 / l2, tol=tol, max_iter=max_iter).fit(x, y)
    return model.coef_[0].astype(np.float64), float(model.intercept_[0])


def logistic_scores(x: Any, coef: np.ndarray, intercept: float) -> np.ndarray:
    """``sigmoid(x @ coef + intercept)``, logits clipped to +-:data:`LOGIT_CLIP`."""
    z = np.asarray(x, dtype=np.float64) @ coef + intercept
    return 1.0 / (1.0 + np.exp(-np.clip(z, -LOGIT_CLIP, LOGIT_CLIP)))


def neighbour_share(train_x: Any, train_y: Any, x: Any, k: int) -> np.ndarray:
    """Share of label 1 among each row's ``k`` nearest training rows (Euclidean).

    ``k`` larger than the training set uses all of it.

    Args:
        train_x: Training features ``(n, d)``.
        train_y: Their 0/1 labels ``(n,)``.
        x: Features of the queries to score ``(q, d)``.
        k: Neighbours, >= 1.
    """
    integer(k, "k", minimum=1)
    train_x, train_y = _xy(train_x, train_y)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != train_x.shape[1]:
        raise ValueError(f"x: expected (q, {train_x.shape[1]}) features, got {x.shape}")
    k = min(k, len(train_x))
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(train_x)
    index = nn.kneighbors(x, return_distance=False)
    return train_y[index].mean(axis=1)


class LogisticRegression:
    """L2-regularised logistic regression (intercept not penalised), as an estimator.

    Fitted by :func:`fit_logistic`, scored by :func:`logistic_scores`.

    Args:
        l2: Penalty on the squared weights, > 0.
        max_iter: Solver iterations at most.
        tol: Solver tolerance.
    """

    def __init__(self, l2: float = 10.0, max_iter: int = 1000, tol: float = 1e-8) -> None:
        number(l2, "l2", minimum=0, inclusive=False)
        integer(max_iter, "max_iter", minimum=1)
        self.l2, self.max_iter, self.tol = float(l2), max_iter, tol
        #: The weights, then the intercept (``(d + 1,)``), once fitted.
        self.coef_: np.ndarray | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> LogisticRegression:
        """Fit to features ``x`` ``(n, d)`` and 0/1 labels ``y`` ``(n,)``."""
        coef, intercept = fit_logistic(x, y, self.l2, self.tol, self.max_iter)
        self.coef_ = np.append(coef, intercept)
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Probability of label 1 for each row of ``x``."""
        if self.coef_ is None:
            raise ValueError("predict_proba: call fit first")
        return logistic_scores(x, self.coef_[:-1], float(self.coef_[-1]))


def one_thread() -> Any:
    """A context in which BLAS and OpenMP run one thread each (threadpoolctl's limits).

    threadpoolctl is a dependency of scikit-learn, so it is there wherever the solvers are.

    scikit-learn's k-means and MLP on a few hundred rows spent 50 to 100 times longer
    with two BLAS threads and two OpenMP threads competing for two cores (5 s against
    0.06 s for ``KMeans(8, n_init=10)`` on 405 rows of 519 features) than with one of
    each; one thread also keeps their sums in one order, whatever the machine's cores.
    """
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    return threadpool_limits(limits=1)
