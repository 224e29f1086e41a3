"""The numerical cores of the learned routers: L2 logistic regression and nearest neighbours.

Both run on scikit-learn (a dependency of the package, imported only when a router is
fitted or a neighbour is looked up) with a numpy implementation of the *same* problem as
the fallback where scikit-learn is not installed:

* :func:`fit_logistic`: ``min_w sum_i logloss_i + (l2 / 2) * |w|^2``, the intercept not
  penalised: :class:`sklearn.linear_model.LogisticRegression` with ``C = 1 / l2`` (its
  objective is ``C * sum_i logloss_i + |w|^2 / 2``, the same minimiser), or Newton's
  method in numpy. The problem is strictly convex, so both give the same weights up to
  the solvers' tolerance. :func:`logistic_scores` is the one way scores are read from
  the weights (a fitted router and a loaded one score identically, without scikit-learn);
* :func:`neighbour_share`: for each query, the share of its ``k`` nearest training
  points (Euclidean) whose label is 1: :class:`sklearn.neighbors.NearestNeighbors`
  (brute force), or the same brute force in numpy. Equal distances may break ties
  differently between the two.

``backend`` is ``"sklearn"``, ``"numpy"`` or ``None`` (scikit-learn when it imports).
:func:`backend_name` says which one a call used, for reports.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from cost_envs.config import integer, number, one_of

BACKENDS = ("sklearn", "numpy")
SKLEARN_MISSING = ("scikit-learn is not installed (it is a dependency of cost-envs: "
                   "pip install scikit-learn)")
#: Logits are clipped to this magnitude before the sigmoid (probabilities in (0, 1)).
LOGIT_CLIP = 30.0


def sklearn_available() -> bool:
    """Whether scikit-learn can be imported."""
    return importlib.util.find_spec("sklearn") is not None


def resolve_backend(backend: str | None) -> str:
    """``backend`` itself, or for ``None`` scikit-learn when installed, else numpy.

    Raises:
        ValueError: For a name not in :data:`BACKENDS`.
        ImportError: For ``"sklearn"`` when scikit-learn is not installed.
    """
    if backend is None:
        return "sklearn" if sklearn_available() else "numpy"
    one_of(backend, "backend", BACKENDS)
    if backend == "sklearn" and not sklearn_available():
        raise ImportError(SKLEARN_MISSING)
    return backend


def backend_name(backend: str | None = None) -> str:
    """What :func:`resolve_backend` picks, with scikit-learn's version (for reports)."""
    chosen = resolve_backend(backend)
    if chosen == "numpy":
        return "numpy"
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


def fit_logistic(x: Any, y: Any, l2: float, backend: str | None = None,
                 tol: float = 1e-8, max_iter: int = 1000) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (intercept not penalised): ``(coef, intercept)``.

    Labels of one class only give zero weights and the intercept at the clip
    (:data:`LOGIT_CLIP`, signed): the maximum-likelihood intercept is infinite.

    Args:
        x: Features ``(n, d)``.
        y: 0/1 labels ``(n,)``.
        l2: Penalty on the squared weights, > 0.
        backend: ``"sklearn"``, ``"numpy"`` or ``None`` (see :func:`resolve_backend`).
        tol: Solver tolerance.
        max_iter: Solver iterations at most.
    """
    number(l2, "l2", minimum=0, inclusive=False)
    integer(max_iter, "max_iter", minimum=1)
    x, y = _xy(x, y)
    if y.min() == y.max():
        return np.zeros(x.shape[1]), LOGIT_CLIP if y[0] == 1 else -LOGIT_CLIP
    if resolve_backend(backend) == "numpy":
        return _newton(x, y, float(l2), tol, max_iter)
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0 / l2, tol=tol, max_iter=max_iter).fit(x, y)
    return model.coef_[0].astype(np.float64), float(model.intercept_[0])


def _newton(x: np.ndarray, y: np.ndarray, l2: float, tol: float, max_iter: int
            ) -> tuple[np.ndarray, float]:
    """Newton's method on the same objective as :func:`fit_logistic`."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    penalty = np.full(xb.shape[1], l2)
    penalty[-1] = 0.0
    w = np.zeros(xb.shape[1])
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -LOGIT_CLIP, LOGIT_CLIP)))
        grad = xb.T @ (p - y) + penalty * w
        hess = (xb.T * (p * (1 - p))) @ xb + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < tol:
            break
    return w[:-1], float(w[-1])


def logistic_scores(x: Any, coef: np.ndarray, intercept: float) -> np.ndarray:
    """``sigmoid(x @ coef + intercept)``, logits clipped to +-:data:`LOGIT_CLIP`."""
    z = np.asarray(x, dtype=np.float64) @ coef + intercept
    return 1.0 / (1.0 + np.exp(-np.clip(z, -LOGIT_CLIP, LOGIT_CLIP)))


def neighbour_share(train_x: Any, train_y: Any, x: Any, k: int,
                    backend: str | None = None) -> np.ndarray:
    """Share of label 1 among each row's ``k`` nearest training rows (Euclidean).

    ``k`` larger than the training set uses all of it.

    Args:
        train_x: Training features ``(n, d)``.
        train_y: Their 0/1 labels ``(n,)``.
        x: Features of the queries to score ``(q, d)``.
        k: Neighbours, >= 1.
        backend: ``"sklearn"``, ``"numpy"`` or ``None`` (see :func:`resolve_backend`).
    """
    integer(k, "k", minimum=1)
    train_x, train_y = _xy(train_x, train_y)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != train_x.shape[1]:
        raise ValueError(f"x: expected (q, {train_x.shape[1]}) features, got {x.shape}")
    k = min(k, len(train_x))
    if resolve_backend(backend) == "sklearn":
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(train_x)
        index = nn.kneighbors(x, return_distance=False)
    else:
        d2 = ((x ** 2).sum(axis=1)[:, None] - 2.0 * x @ train_x.T
              + (train_x ** 2).sum(axis=1)[None, :])
        index = np.argsort(d2, axis=1, kind="stable")[:, :k]
    return train_y[index].mean(axis=1)
