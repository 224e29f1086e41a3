"""The learned weak/strong routers by name, one interface, and their saved state.

:data:`ROUTERS` maps a name to a router class; every router is built as
``ROUTERS[name](weak, strong, **settings)`` and has:

* ``fit(train: TraceDataset) -> self``: learn from the training queries only; the target
  is 1 where the weak model's answer is wrong (the strong model is needed);
* ``scores(data: TraceDataset) -> np.ndarray``: one score per query, higher = send to the
  strong model (thresholds: :mod:`agents.routing.calibration`);
* ``to_state() -> (config, arrays)`` and the classmethod ``from_state(config, arrays)``.

The routers:

* ``"logistic"``: :class:`~agents.routing.trace_router.TraceRouter`: L2 logistic
  regression (scikit-learn, :mod:`agents.routing.solvers`) on seven standardised text
  statistics and hashed word n-grams (or MiniLM sentence embeddings:
  ``text_features="minilm"``, the ``embeddings`` extra) scaled by ``hashed_weight``;
* ``"knn"``: :class:`KNNRouter`: the same inputs, and as score the share of the ``k``
  nearest training queries (Euclidean) on which the weak model was wrong;
* ``"cascade"``: :class:`~agents.routing.trace_router.CascadeRouter`: the logistic
  regression that also reads the weak model's logged answer (needs answer texts).

**State contract** (what a CLI saves and loads; never pickle):

* ``config``: a dict of JSON values: ``"router"`` (the name in :data:`ROUTERS`),
  ``"format"`` (:data:`~agents.routing.trace_router.STATE_FORMAT`) and every constructor
  argument (``weak``, ``strong``, ``n_features``, ``l2``, ``hashed_weight``,
  ``text_features``, and ``k`` for kNN). ``json.dumps(config)`` works as it is.
* ``arrays``: a dict of C-contiguous float64 numpy arrays: ``"mean"`` and ``"std"`` (the
  statistics' standardisation), then ``"coef"`` (logistic and cascade: the weights, then
  the intercept) or ``"train_x"`` and ``"train_y"`` (kNN: the training design matrix and
  0/1 labels; a kNN state holds its training features, not their texts).
  ``safetensors.numpy.save_file(arrays, path, metadata={"config": json.dumps(config)})``
  saves them as they are; for JSON, ``array.tolist()`` each and ``np.asarray`` back.
* :func:`router_from_state` (or ``ROUTERS[config["router"]].from_state``) rebuilds a
  router that scores every query exactly as the saved one did (a logistic state scores
  without scikit-learn; a kNN state needs it, or falls back to numpy). Text features are
  recomputed from the prompts when scoring: hashed n-grams are deterministic across
  processes; MiniLM needs the ``embeddings`` extra where the router is loaded.
* A config of another router or format, unknown or missing keys, or a missing or
  misshapen array raise ``ValueError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routing.solvers import neighbour_share
from agents.routing.trace_router import CascadeRouter, TraceRouter, _array
from cost_envs.config import integer


@dataclass
class KNNRouter(TraceRouter):
    """Scores a query by the share of its ``k`` nearest training queries the weak model got wrong.

    The inputs are :class:`~agents.routing.trace_router.TraceRouter`'s (standardised
    statistics and ``hashed_weight`` x word features); neighbours are found by
    :func:`~agents.routing.solvers.neighbour_share` (scikit-learn's brute-force
    ``NearestNeighbors``). Scores are multiples of ``1 / k``, so many queries tie: the
    routing curve and the threshold calibration keep tied queries together. ``l2`` is
    unused; ``TraceRouter.cross_validate`` (``l2`` by APGR) is the logistic router's and
    does not apply, while :func:`agents.routing.router_cv.cross_validate` chooses ``k``
    (by AIQ).

    Args:
        weak: Name of the weak model.
        strong: Name of the strong model.
        n_features: Hashed n-gram features.
        l2: Unused (kept for the shared constructor).
        hashed_weight: Scale of the word features in the distance.
        text_features: ``"hashed"`` or ``"minilm"``.
        k: Neighbours (default 25, a common choice, not tuned on any data here).
    """

    k: int = 25
    kind: ClassVar[str] = "knn"

    def __post_init__(self) -> None:
        super().__post_init__()
        integer(self.k, "k", minimum=1)
        self._train_x: np.ndarray | None = None
        self._train_y: np.ndarray | None = None

    def _fit_model(self, x: np.ndarray, y: np.ndarray) -> None:
        self._train_x, self._train_y = x, y

    def _score_model(self, x: np.ndarray) -> np.ndarray:
        assert self._train_x is not None and self._train_y is not None
        return neighbour_share(self._train_x, self._train_y, x, self.k)

    def _model_arrays(self) -> dict[str, np.ndarray]:
        assert self._train_x is not None and self._train_y is not None
        return {"train_x": self._train_x, "train_y": self._train_y}

    def _load_model_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        x, y = _array(arrays, "train_x", 2), _array(arrays, "train_y", 1)
        if len(x) != len(y) or not np.isin(y, (0.0, 1.0)).all():
            raise ValueError(f"arrays: expected 'train_y' of {len(x)} 0/1 labels, got "
                             f"shape {y.shape}")
        self._train_x, self._train_y = x, y


#: The learned routers by name (see the module doc for the interface).
ROUTERS: dict[str, type[TraceRouter]] = {
    "logistic": TraceRouter,
    "knn": KNNRouter,
    "cascade": CascadeRouter,
}


def make_router(name: str, weak: str, strong: str, **settings: Any) -> TraceRouter:
    """``ROUTERS[name](weak, strong, **settings)``, naming the choices on a bad name."""
    if name not in ROUTERS:
        raise ValueError(f"router: expected one of {sorted(ROUTERS)}, got {name!r}")
    return ROUTERS[name](weak, strong, **settings)


def router_from_state(config: Mapping[str, Any], arrays: Mapping[str, Any]) -> TraceRouter:
    """The router a :meth:`~agents.routing.trace_router.TraceRouter.to_state` saved."""
    name = config.get("router")
    if name not in ROUTERS:
        raise ValueError(f"config: 'router' must be one of {sorted(ROUTERS)}, got {name!r}")
    return ROUTERS[name].from_state(config, arrays)
