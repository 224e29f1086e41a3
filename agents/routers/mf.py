"""RouteLLM's matrix-factorisation router (``"mf"``), in numpy.

**What RouteLLM does.** Its ``mf`` router scores a model ``m`` on a query ``q`` by a
bilinear form of a learned model embedding and a projection of the query's embedding,

    ``s_m(q) = w2 . (v_m / |v_m|  *  W1 e(q))``

(``e(q)`` an OpenAI text embedding, ``W1`` a learned projection to ``dim = 128``, ``v_m``
the model's embedding, normalised, ``w2`` a learned vector, ``*`` elementwise), and the
probability that the strong model wins a comparison as
``sigmoid(s_strong(q) - s_weak(q))``. It is trained on preference data (Chatbot Arena
battles and judged comparisons: which of two answers won) by the logistic loss of that
probability; the router calls the strong model where it is at or above a threshold.

**What :class:`MFRouter` does.** The same model and loss, fitted in numpy:

* the query's vector is the family's design row
  (:class:`~agents.routers.features.TextFeatures`: standardised statistics and
  ``hashed_weight`` x text features; ``text_features="minilm"`` for sentence
  embeddings) rather than an OpenAI embedding;
* the "battles" are the logged outcomes: a training query on which exactly one of the
  two models answered right is a comparison that model won; queries both answered right,
  or both wrong, are ties and are left out, as RouteLLM leaves out ties;
* only the router's two models have embeddings (RouteLLM's cover every model of the
  arena); with two models the score is a logistic function of a rank-one linear map of
  the query (``(W1^T (w2 * (v_s/|v_s| - v_w/|v_w|))) . x``), learned through the
  factorisation;
* full-batch Adam (learning rate ``lr``, ``steps`` steps) on the mean logistic loss plus
  ``l2 / 2`` x the squared norm of all weights, from a seeded Gaussian start: fixed,
  documented settings (``dim = 32``, ``l2 = 1e-3``, ``steps = 300``, ``lr = 0.01``), not
  tuned on any data here; ``l2`` has a cross-validation grid
  (:data:`~agents.routers.cv.CV_GRIDS`).

Its score, :meth:`MFRouter.scores`, is P(the strong model wins | the two disagree): in
``(0, 1)``, higher for the strong model, thresholded as every two-model router's. With no
disagreement in training it is 0.5 on every query. Its state: ``"w1"`` ``(dim, d)``,
``"w2"`` ``(dim,)`` and ``"v"`` ``(2, dim)`` (weak, strong).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import TwoModelRouter, arrays_of_shapes, register
from agents.routers.solvers import LOGIT_CLIP
from cost_envs.config import integer, number
from cost_envs.traces import TraceDataset

#: Adam's moment decays and its guard against division by 0 (the usual values).
ADAM = (0.9, 0.999, 1e-8)


def _unit(v: np.ndarray) -> tuple[np.ndarray, float]:
    norm = max(float(np.linalg.norm(v)), 1e-12)
    return v / norm, norm


def mf_direction(w1: np.ndarray, w2: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``(d,)``: the query weights of ``s_strong - s_weak`` (a linear map of the query)."""
    return w1.T @ (w2 * (_unit(v[1])[0] - _unit(v[0])[0]))


def fit_mf(x: np.ndarray, won: np.ndarray, dim: int, l2: float, steps: int, lr: float,
           seed: int) -> dict[str, np.ndarray]:
    """RouteLLM's bilinear model by full-batch Adam: ``{"w1", "w2", "v"}``.

    Args:
        x: Design rows of the comparisons ``(n, d)``.
        won: 1 where the strong model won, 0 where the weak one did ``(n,)``.
        dim: The latent width.
        l2: Penalty on the squared weights.
        steps: Adam steps.
        lr: Adam's learning rate.
        seed: Seed of the Gaussian start.
    """
    rng = np.random.default_rng(seed)
    d = x.shape[1]
    params = {"w1": rng.normal(0.0, 1.0 / np.sqrt(d), (dim, d)),
              "w2": rng.normal(0.0, 1.0 / np.sqrt(dim), dim),
              "v": rng.normal(0.0, 1.0, (2, dim))}
    if len(x) == 0:
        params["w2"][:] = 0.0  # no comparison to learn from: 0.5 everywhere
        return params
    moments = {k: (np.zeros_like(p), np.zeros_like(p)) for k, p in params.items()}
    b1, b2, eps = ADAM
    for t in range(1, steps + 1):
        w1, w2, v = params["w1"], params["w2"], params["v"]
        (uw, nw), (us, ns) = _unit(v[0]), _unit(v[1])
        a = w2 * (us - uw)  # (dim,): logit = a . (w1 x)
        logit = np.clip(x @ (w1.T @ a), -LOGIT_CLIP, LOGIT_CLIP)
        g = (1.0 / (1.0 + np.exp(-logit)) - won) / len(x)  # d loss / d logit
        r = x.T @ g  # (d,)
        da = w1 @ r  # d loss / d a
        dunit = da * w2  # d loss / d us (and minus that for uw)
        grads = {"w1": np.outer(a, r) + l2 * w1,
                 "w2": da * (us - uw) + l2 * w2,
                 "v": np.stack([-(dunit - uw * (uw @ dunit)) / nw,
                                (dunit - us * (us @ dunit)) / ns]) + l2 * v}
        for k, grad in grads.items():
            m, s = moments[k]
            m[:] = b1 * m + (1 - b1) * grad
            s[:] = b2 * s + (1 - b2) * grad * grad
            params[k] = params[k] - lr * (m / (1 - b1 ** t)) / (np.sqrt(s / (1 - b2 ** t))
                                                                + eps)
    return params


@register
@dataclass
class MFRouter(TwoModelRouter):
    """Scores queries by a bilinear model's probability that the strong model wins.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        hashed_weight: Scale of the text features relative to the statistics.
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
        dim: Latent width of the model and query embeddings (default 32), >= 1.
        l2: Penalty on the squared weights (default 0.001), >= 0.
        steps: Full-batch Adam steps (default 300), >= 1.
        lr: Adam's learning rate (default 0.01), > 0.
        seed: Seed of the initial weights.
    """

    weak: str
    strong: str
    n_features: int = 512
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True
    dim: int = 32
    l2: float = 1e-3
    steps: int = 300
    lr: float = 0.01
    seed: int = 0

    kind: ClassVar[str] = "mf"

    def __post_init__(self) -> None:
        integer(self.dim, "dim", minimum=1)
        number(self.l2, "l2", minimum=0)
        integer(self.steps, "steps", minimum=1)
        number(self.lr, "lr", minimum=0, inclusive=False)
        integer(self.seed, "seed", minimum=0)
        super().__post_init__()
        self._params: dict[str, np.ndarray] | None = None

    def targets(self, data: TraceDataset) -> np.ndarray:
        """``(n, 2)``: whether the weak and the strong model answered each query right."""
        return data.correct[:, [data.model_index(m) for m in self.models]]

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        if y.shape != (len(x), 2):
            raise ValueError(f"targets: expected ({len(x)}, 2) correctness, got {y.shape}")
        right = np.asarray(y, dtype=bool)
        battle = right[:, 0] != right[:, 1]  # ties (both right, both wrong) left out
        self._params = fit_mf(x[battle], right[battle, 1].astype(np.float64), self.dim,
                              float(self.l2), self.steps, float(self.lr), self.seed)

    def _score(self, x: np.ndarray) -> np.ndarray:
        if self._params is None:
            raise ValueError("MFRouter: call fit first")
        p = self._params
        z = x @ mf_direction(p["w1"], p["w2"], p["v"])
        return 1.0 / (1.0 + np.exp(-np.clip(z, -LOGIT_CLIP, LOGIT_CLIP)))

    def _model_arrays(self) -> dict[str, np.ndarray]:
        if self._params is None:
            raise ValueError("MFRouter: call fit first")
        return dict(self._params)

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        d, k = sum(self.features.widths), self.dim
        shapes = {"w1": (k, d), "w2": (k,), "v": (2, k)}
        self._params = arrays_of_shapes(arrays, shapes)
