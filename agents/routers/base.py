"""The one router interface over K models, and the one registry.

A router reads a query through :class:`~agents.routers.features.TextFeatures`
and **predicts**, for each of its ``K`` models, a win probability
(:meth:`Router.predict`, ``(n, K)``); a separate, replaceable **decision** step
(:meth:`Router.decide`) turns predictions and an operating point into the model that
answers each query. Two models are ``K = 2``: a two-model router's win probability of
the strong model is its score, the probability that the weak model answers wrongly, and
its operating point a threshold on that score (:mod:`~agents.routers.calibration`
sets it on training data). A K-model router predicts each model's correctness and its
operating point is ``lam``, the accuracy traded per unit of cost. A cost-aware rule is
one more :meth:`Router.decide`.

Every router is a dataclass whose fields are its settings; :data:`ROUTERS` maps a name to
its class and :func:`make_router` builds one. ``fit(data)`` learns from the training
queries only; :meth:`Router.to_state` gives ``(config, arrays)`` (JSON values and float64
arrays: ``"mean"``, ``"std"``, then the model's) and :meth:`Router.from_state` rebuilds
a router that predicts exactly as the saved one; a config of another router, unknown or
missing keys, or a misshapen array raise ``ValueError`` naming it. Files:
:mod:`~agents.routers.state`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from agents.routers.features import TextFeatures, design, standardiser
from cost_envs.traces import TraceDataset

#: Version of :meth:`Router.to_state`'s layout.
STATE_FORMAT = 1
#: Queries whose features :meth:`Router.predicted` builds at once (a chunk's design matrix
#: of 512 hashed features is 34 MB).
PREDICT_CHUNK = 8192
#: What :meth:`Router.inputs` returns: per-query arrays, (statistics, text features), and
#: for a router that prices its calls a third, the prompt tokens per model
#: (:class:`agents.routers.priced.PricedLogistic`). Every step after ``inputs`` takes them
#: as a tuple and :func:`take` selects queries from each part alike.
Inputs = tuple[np.ndarray, ...]


def array_of(arrays: Mapping[str, Any], name: str, ndim: int) -> np.ndarray:
    """``arrays[name]`` as finite float64 numbers in ``ndim`` dimensions (ValueError otherwise)."""
    if name not in arrays:
        raise ValueError(f"arrays: missing {name!r}; got {sorted(arrays)}")
    out = np.asarray(arrays[name], dtype=np.float64)
    if out.ndim != ndim or not np.isfinite(out).all():
        raise ValueError(f"arrays: {name!r}: expected finite numbers in {ndim} dimension(s), "
                         f"got shape {out.shape}")
    return out



def arrays_of_shapes(arrays: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
                     ) -> dict[str, np.ndarray]:
    """:func:`array_of` of each name of ``shapes``, each checked to have its shape."""
    out = {name: array_of(arrays, name, len(shape)) for name, shape in shapes.items()}
    for name, shape in shapes.items():
        if out[name].shape != shape:
            raise ValueError(f"arrays: {name!r}: expected shape {shape} for this config, got "
                             f"{out[name].shape}")
    return out

def take(values: Any, rows: np.ndarray) -> Any:
    """The ``rows`` of a router's per-query values.

    ``values``: :meth:`Router.inputs` (a tuple of arrays) or
    :meth:`Router.training_costs` (an array, a mapping of arrays, or ``None``).
    """
    if values is None:
        return None
    if isinstance(values, tuple):
        return tuple(v[rows] for v in values)
    if isinstance(values, Mapping):
        return {k: v[rows] for k, v in values.items()}
    return np.asarray(values)[rows]


class Router(ABC):
    """One router over ``K`` models: features, fit, predict, decide, state.

    Subclasses are dataclasses with the fields ``n_features``, ``hashed_weight`` and
    ``text_features`` (the :class:`TextFeatures` they read) and their own settings; they
    implement :attr:`models`, :meth:`targets`, :meth:`_fit_model`, :meth:`_predict`,
    :meth:`decide` and the model's arrays.
    """

    #: Name in :data:`ROUTERS` and in a saved state.
    kind: ClassVar[str]
    #: Models it routes between: 2, or ``None`` for any number.
    n_models: ClassVar[int | None] = None
    #: Whether its features read the weak model's logged answer (a cascade).
    reads_answers: ClassVar[bool] = False
    #: Keys an older saved state may hold that this class ignores.
    legacy_keys: ClassVar[frozenset[str]] = frozenset()
    #: Settings an older saved state lacks, and what it meant without them: your own
    #: text features used to replace the hashed n-grams.
    legacy_defaults: ClassVar[Mapping[str, Any]] = {"with_ngrams": False}

    n_features: int
    hashed_weight: float
    text_features: str
    #: Your own text features (a registered encoder) beside the hashed n-grams; False:
    #: instead of them. The built-in ``"hashed"`` and ``"minilm"`` ignore it. The built-in
    #: routers have it as a setting; a router of your own without one has this default.
    with_ngrams: bool = True

    def __post_init__(self) -> None:
        self.features  # noqa: B018  (checks n_features, hashed_weight, text_features)
        self._mean: np.ndarray | None = None
        self._std: np.ndarray | None = None

    # ------------------------------------------------------------------ interface
    @property
    @abstractmethod
    def models(self) -> tuple[str, ...]:
        """The models routed between, in the order of :meth:`predict`'s columns."""

    @property
    def features(self) -> TextFeatures:
        """What the router reads of a query (its text statistics and text features)."""
        return TextFeatures(self.text_features, self.n_features, self.hashed_weight,
                            self.reads_answers, self.with_ngrams)

    def inputs(self, data: TraceDataset) -> Inputs:
        """``(statistics, text features)`` of ``data``'s queries: per query, no outcomes.

        Deterministic, so they can be computed once and indexed per fold
        (:meth:`fit_inputs`, :meth:`predict_inputs`).
        """
        return self.features.raw(data, self.models[0] if self.reads_answers else None)

    @abstractmethod
    def targets(self, data: TraceDataset) -> np.ndarray:
        """What the router learns from ``data``'s outcomes (its training labels)."""

    def fit(self, data: TraceDataset, costs: Any = None) -> Router:
        """Fit on ``data``, the training queries only (``costs``: ``(n, m)`` per call)."""
        return self.fit_inputs(self.inputs(data), self.targets(data),
                               self._model_costs(data, costs))

    def fit_inputs(self, inputs: Inputs, targets: np.ndarray, costs: Any = None) -> Router:
        """Fit on precomputed :meth:`inputs` and :meth:`targets` rows (a fold's, say)."""
        stats, text = inputs
        self._mean, self._std = standardiser(stats)
        self._fit_model(self._design(stats, text), np.asarray(targets), costs)
        return self

    def predict(self, data: TraceDataset) -> np.ndarray:
        """Each model's win probability on each query, ``(n, K)`` in :attr:`models` order."""
        return self.predicted(data)[0]

    def predicted(self, data: TraceDataset) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`predict` and :meth:`expected_costs` of ``data``, from one read of it.

        The queries' features are built :data:`PREDICT_CHUNK` queries at a time, so
        scoring holds the design matrix of a chunk, not of every query (100,000 queries'
        512 hashed features alone took 0.4 GB, their copies 1.7 GB).
        """
        wins, costs = [], []
        for lo in range(0, data.n_queries, PREDICT_CHUNK):
            chunk = data if data.n_queries <= PREDICT_CHUNK else data.subset(
                np.arange(lo, min(lo + PREDICT_CHUNK, data.n_queries)))
            inputs = self.inputs(chunk)
            wins.append(self.predict_inputs(inputs))
            costs.append(self.expected_costs_inputs(inputs))
        return np.concatenate(wins), (None if costs[0] is None else np.concatenate(
            [c for c in costs if c is not None]))

    def predict_inputs(self, inputs: Inputs) -> np.ndarray:
        """:meth:`predict` from precomputed :meth:`inputs`."""
        if self._mean is None:
            raise ValueError(f"{type(self).__name__}: call fit first")
        return self._predict(self._design(*inputs))

    @abstractmethod
    def decide(self, win: np.ndarray, point: float, costs: Any = None) -> np.ndarray:
        """Which of :attr:`models` answers each query: ``(n,)`` indices into it.

        Args:
            win: :meth:`predict`'s ``(n, K)`` win probabilities.
            point: The operating point (a threshold, or ``lam``).
            costs: :meth:`expected_costs`'s ``(n, K)`` prices of the calls (a router
                that does not price calls ignores them).
        """

    def expected_costs(self, data: TraceDataset) -> np.ndarray | None:
        """``(n, K)``: each call's price before it is made; ``None`` when not priced."""
        return self.predicted(data)[1]

    def expected_costs_inputs(self, inputs: Any) -> np.ndarray | None:
        """:meth:`expected_costs` from precomputed :meth:`inputs` (``None``: not priced)."""
        return None

    def route(self, data: TraceDataset, point: float) -> np.ndarray:
        """``data``'s column of the model answering each query at ``point``, ``(n,)``."""
        cols = np.array([data.model_index(m) for m in self.models], dtype=np.int64)
        win, costs = self.predicted(data)  # read once: the prediction and the prices share it
        return cols[self.decide(win, point) if costs is None else self.decide(win, point, costs)]

    def decide_inputs(self, inputs: Any, point: float) -> np.ndarray:
        """:meth:`decide` on precomputed :meth:`inputs`: ``(n,)`` indices into :attr:`models`.

        The prices go to :meth:`decide` only for a router that prices calls, so a router
        of your own may define ``decide(win, point)`` alone.
        """
        win, costs = self.predict_inputs(inputs), self.expected_costs_inputs(inputs)
        return self.decide(win, point) if costs is None else self.decide(win, point, costs)

    def training_costs(self, data: TraceDataset, costs: Any = None) -> Any:
        """What :meth:`fit_inputs` reads of ``data``'s calls (``None``: nothing).

        A K-model router reads each call's cost, a cost-aware one its tokens as well;
        per query, so a caller may compute them once and :func:`take` a fold's rows.
        """
        return self._model_costs(data, costs)

    # ------------------------------------------------------------------ subclass hooks
    def _model_costs(self, data: TraceDataset, costs: Any) -> Any:
        """The costs :meth:`_fit_model` reads (none, unless the model prices calls)."""
        for model in self.models:
            data.model_index(model)  # every model must be in the data
        return None

    @abstractmethod
    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        """Fit the model on the design matrix ``x`` and targets ``y``."""

    @abstractmethod
    def _predict(self, x: np.ndarray) -> np.ndarray:
        """``(n, K)`` win probabilities of design-matrix rows."""

    @abstractmethod
    def _model_arrays(self) -> dict[str, np.ndarray]:
        """The fitted model's arrays (after ``"mean"`` and ``"std"`` in a state)."""

    @abstractmethod
    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        """Set the model from a state's arrays, checking their shapes."""

    def _design(self, stats: np.ndarray, text: np.ndarray) -> np.ndarray:
        assert self._mean is not None and self._std is not None
        return design(stats, text, self._mean, self._std, self.hashed_weight)

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)  # type: ignore[call-overload]  # routers: dataclasses
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted router as ``(config, arrays)``: JSON values and float64 arrays."""
        if self._mean is None or self._std is None:
            raise ValueError("to_state: call fit first")
        config = {"router": self.kind, "format": STATE_FORMAT, **self._config()}
        arrays = {"mean": self._mean, "std": self._std, **self._model_arrays()}
        return config, {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()}

    @classmethod
    def from_state(cls, config: Mapping[str, Any], arrays: Mapping[str, Any]) -> Router:
        """The router :meth:`to_state` saved (it predicts exactly as the saved one did).

        Raises:
            ValueError: When ``config`` is another router's or format, has unknown or
                missing keys, or an array is missing or of the wrong shape.
        """
        if config.get("router") != cls.kind or config.get("format") != STATE_FORMAT:
            raise ValueError(f"config: expected router={cls.kind!r}, format={STATE_FORMAT}, "
                             f"got router={config.get('router')!r}, "
                             f"format={config.get('format')!r}")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # dataclasses
        config = {**{k: v for k, v in cls.legacy_defaults.items() if k in names}, **config}
        given = set(config) - {"router", "format"} - cls.legacy_keys
        if given != names:
            raise ValueError(f"config: expected keys {sorted(names)}, got unknown "
                             f"{sorted(given - names)} and missing {sorted(names - given)}")
        router = cls(**{k: config[k] for k in names})
        router._mean, router._std = array_of(arrays, "mean", 1), array_of(arrays, "std", 1)
        statistics = router.features.widths[0]
        if router._mean.shape != (statistics,) or router._std.shape != (statistics,):
            raise ValueError(f"arrays: 'mean' and 'std': expected {statistics} statistics "
                             f"each, got {router._mean.shape} and {router._std.shape}")
        if (router._std <= 0).any():
            raise ValueError("arrays: expected 'std' > 0")
        router._load_model_arrays(arrays)
        return router


class TwoModelRouter(Router):
    """A router between a weak and a strong model: a score and a threshold.

    Subclasses are dataclasses whose first two fields are ``weak`` and ``strong``; the
    built-in ones are :mod:`~agents.routers.two_model`'s. It lives here, beside
    :class:`Router`, because :mod:`~agents.routers.cv` tells it apart too.
    """

    n_models: ClassVar[int | None] = 2
    #: The lowest threshold calibration returns (a cost-aware score's is 0).
    min_threshold: ClassVar[float] = -np.inf
    weak: str
    strong: str

    @property
    def models(self) -> tuple[str, ...]:
        """``(weak, strong)``."""
        return (self.weak, self.strong)

    def targets(self, data: TraceDataset) -> np.ndarray:
        """1 where the weak model is wrong (the strong model is needed)."""
        return ~data.correct[:, data.model_index(self.weak)]

    def scores(self, data: TraceDataset) -> np.ndarray:
        """Scores of ``data``'s queries: P(weak model wrong); higher: the strong model."""
        if self._mean is None:
            raise ValueError("scores: call fit first")
        return self.predict(data)[:, 1]

    def scores_inputs(self, inputs: Inputs) -> np.ndarray:
        """:meth:`scores` from precomputed :meth:`inputs`."""
        return self.scores_of(self.predict_inputs(inputs), self.expected_costs_inputs(inputs))

    def scores_of(self, win: np.ndarray, costs: np.ndarray | None = None) -> np.ndarray:
        """The scores of a prediction already made, without predicting again.

        Args:
            win: :meth:`predict`'s ``(n, 2)``.
            costs: :meth:`expected_costs`'s ``(n, 2)`` (a priced router's scores need them).
        """
        return np.asarray(win)[:, 1]

    def decide(self, win: np.ndarray, point: float, costs: Any = None) -> np.ndarray:
        """1 (strong) where the score is at or above the threshold ``point``, else 0."""
        return (np.asarray(win)[:, 1] >= point).astype(np.int64)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        s = self._score(x)
        return np.column_stack([1.0 - s, s])

    def _score(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


#: The routers by name (filled by the modules defining them; see the package doc).
ROUTERS: dict[str, type[Router]] = {}


def register(cls: type[Router]) -> type[Router]:
    """Class decorator: add ``cls`` to :data:`ROUTERS` under its ``kind``.

    Raises:
        ValueError: Another class is registered under that kind already (a user router
            would otherwise shadow a built-in one silently).
    """
    other = ROUTERS.get(cls.kind)
    if other is not None and other.__qualname__ != cls.__qualname__:
        raise ValueError(f"register: router kind {cls.kind!r} is taken by "
                         f"{other.__module__}.{other.__qualname__}; give {cls.__qualname__} "
                         "another kind")
    ROUTERS[cls.kind] = cls
    return cls


def router_class(name: str) -> type[Router]:
    """``ROUTERS[name]``, naming the choices on a bad name."""
    if name not in ROUTERS:
        raise ValueError(f"router: expected one of {sorted(ROUTERS)}, got {name!r}")
    return ROUTERS[name]


def make_router(name: str, *models: str, **settings: Any) -> Router:
    """A router by name, over its models.

    ``make_router("logistic", weak, strong)``; ``make_router("multi-logistic", m1, m2,
    m3)`` (no models: all of the training data's).
    """
    cls = router_class(name)
    build: Callable[..., Router] = cls  # a dataclass: its fields are the arguments
    if cls.n_models == 2:
        if len(models) != 2:
            raise ValueError(f"router {name!r}: expected two models (weak, strong), got "
                             f"{list(models)}")
        return build(*models, **settings)
    return build(tuple(models), **settings)


def router_from_state(config: Mapping[str, Any], arrays: Mapping[str, Any]) -> Router:
    """The router a :meth:`Router.to_state` saved (any kind)."""
    name = config.get("router")
    if name not in ROUTERS:
        raise ValueError(f"config: 'router' must be one of {sorted(ROUTERS)}, got {name!r}")
    return ROUTERS[name].from_state(config, arrays)
