"""Elo ratings per query (``"elo"``): RouteLLM's similarity-weighted ranking, two models.

**What RouteLLM does.** Its ``sw_ranking`` router treats the training comparisons
(Chatbot Arena battles: two models, one prompt, a winner or a tie) as games, and for a
new query computes Elo (Bradley-Terry) ratings of the models from those games, each
game weighted by how similar its prompt is to the query (cosine similarity of
embeddings, the weight growing exponentially with it). The strong model is called where
its rating-implied probability of beating the weak one is at or above a threshold.
Plain Elo, every game weighted alike, is the same with no similarity: one rating per
model, the same for every query.

**What :class:`EloRouter` does.** Every training query is a game between the router's
two models: won by the model that answered right when exactly one did, a tie (half a
win each, as Elo scores a draw) when both or neither did. A query's weight on a game
is ``exp(gamma * (cos(q, q_i) - 1))`` (1 for the same prompt, falling with the cosine of
the family's design rows, :class:`~agents.routers.features.TextFeatures`). With two
players the Bradley-Terry ratings of weighted games give the strong model a winning
probability equal to its weighted share of the points, so the score is

    ``score(q) = sum_i w_i(q) * points_strong_i / sum_i w_i(q)``

in ``[0, 1]``: ``1/2 + (P(strong right, weak wrong) - P(weak right, strong wrong)) / 2``
near the query, monotone in the accuracy the strong call is expected to add. ``gamma``
is a fixed, documented setting (default 10, not tuned on any data here; a
cross-validation grid in :data:`~agents.routers.cv.CV_GRIDS`). ``gamma = 0`` is plain
Elo, a **query-independent baseline**: every query gets the same score, so a threshold
sends all queries or none, and its curve is the straight line between the two models
(random routing's). RouteLLM's exact weighting of similarities differs (a power of the
normalised similarity); the exponential here is one of that family. Like the kNN
router's, its state holds the training rows (``"train_x"``, normalised to unit length)
and the strong model's points (``"points"``), not the texts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import TwoModelRouter, array_of, register
from cost_envs.config import number
from cost_envs.traces import TraceDataset

#: Queries scored at a time (a block of similarities is this x the training queries).
BLOCK = 1024


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a row of zeros stays zeros)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


def weighted_points(train_x: np.ndarray, points: np.ndarray, x: np.ndarray, gamma: float
                    ) -> np.ndarray:
    """Each row's similarity-weighted mean of ``points`` over the training rows.

    ``train_x`` and ``x`` rows of unit length; weights ``exp(gamma * (cos - 1))``.
    """
    x = unit_rows(x)
    out = np.empty(len(x))
    for lo in range(0, len(x), BLOCK):
        cos = np.clip(x[lo:lo + BLOCK] @ train_x.T, -1.0, 1.0)
        # scaled by the row's largest weight (the ratios are the same): no overflow, and
        # at least one weight of 1, so the mean is defined for any gamma
        w = np.exp(gamma * (cos - cos.max(axis=1, keepdims=True)))
        out[lo:lo + BLOCK] = (w @ points) / w.sum(axis=1)
    return out


@register
@dataclass
class EloRouter(TwoModelRouter):
    """Scores a query by the strong model's similarity-weighted share of the points.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        hashed_weight: Scale of the text features relative to the statistics.
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
        gamma: How fast a game's weight falls with its prompt's dissimilarity
            (default 10), >= 0; 0: plain Elo, the same score for every query.
    """

    weak: str
    strong: str
    n_features: int = 512
    hashed_weight: float = 1.0
    text_features: str = "hashed"
    with_ngrams: bool = True
    gamma: float = 10.0

    kind: ClassVar[str] = "elo"

    def __post_init__(self) -> None:
        number(self.gamma, "gamma", minimum=0)
        super().__post_init__()
        self._train_x: np.ndarray | None = None
        self._points: np.ndarray | None = None

    def targets(self, data: TraceDataset) -> np.ndarray:
        """``(n, 2)``: whether the weak and the strong model answered each query right."""
        return data.correct[:, [data.model_index(m) for m in self.models]]

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        if y.shape != (len(x), 2):
            raise ValueError(f"targets: expected ({len(x)}, 2) correctness, got {y.shape}")
        right = np.asarray(y, dtype=np.float64)
        self._train_x = unit_rows(x)
        self._points = 0.5 + 0.5 * (right[:, 1] - right[:, 0])  # win 1, tie 1/2, loss 0

    def _score(self, x: np.ndarray) -> np.ndarray:
        if self._train_x is None or self._points is None:
            raise ValueError("EloRouter: call fit first")
        return weighted_points(self._train_x, self._points, x, float(self.gamma))

    def _model_arrays(self) -> dict[str, np.ndarray]:
        if self._train_x is None or self._points is None:
            raise ValueError("EloRouter: call fit first")
        return {"train_x": self._train_x, "points": self._points}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        x, points = array_of(arrays, "train_x", 2), array_of(arrays, "points", 1)
        if x.shape[1] != sum(self.features.widths):
            raise ValueError(f"arrays: 'train_x': expected {sum(self.features.widths)} "
                             f"columns for this config, got {x.shape[1]}")
        if len(points) != len(x) or not np.isin(points, (0.0, 0.5, 1.0)).all():
            raise ValueError(f"arrays: expected 'points' of {len(x)} values 0, 1/2 or 1, "
                             f"got shape {points.shape}")
        self._train_x, self._points = x, points
