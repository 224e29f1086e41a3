"""Saved routers: the router interface, the name lookup, and safe save/load (no pickle).

**The router interface** that ``cost-envs route`` (:mod:`agents.cli_route`) drives:

* ``ROUTERS[name](weak, strong)`` builds an unfitted router for two model names;
* ``router.fit(train) -> router``: fit on a :class:`~cost_envs.traces.TraceDataset`
  (the training split only);
* ``router.scores(data) -> np.ndarray``: one float per query of ``data``, higher meaning
  "send it to the strong model" (a threshold on it routes);
* ``router.to_state() -> dict``: everything needed to rebuild the fitted router, as one
  dict whose top-level values are either JSON-able (names, settings, numbers) or numpy
  arrays (the weights);
* ``type(router).from_state(state) -> router``: the inverse, raising ``ValueError`` on a
  state it cannot use.

:data:`ROUTERS` maps ``"logistic"`` to :class:`LogisticTraceRouter`, an adapter around
:class:`~agents.routing.trace_router.TraceRouter` with that interface. A module of routers
with the same interface can replace the lookup by rebinding :data:`ROUTERS` (one line).

**Saved files.** :func:`save_router` writes two files side by side, all or nothing
(:func:`agents.files.write_files_atomic`): ``<path>.safetensors`` holds the state's arrays
(float64), ``<path>.json`` the rest: the router's name, the weak and strong models, the
threshold and what it was calibrated for, the state's JSON part, a digest of the
safetensors bytes (so a weights file from another save is refused), and the training data's
fingerprint and split. :func:`load_router` reads them with ``safetensors.numpy`` and a
strict JSON parser only: nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

import cost_envs
from agents.files import check_creatable, write_files_atomic
from agents.routing.router_features import STATISTICS
from agents.routing.trace_router import LogisticRegression, TraceRouter
from cost_envs.config_files import json_loads
from cost_envs.traces import TraceDataset

#: ``format`` tag of a saved router's JSON file, and the layout version it follows.
FILE_FORMAT = "cost-envs-router"
FILE_VERSION = 1


class Router(Protocol):
    """What ``cost-envs route`` needs of a router (see the module doc)."""

    def fit(self, train: TraceDataset) -> Router:
        """Fit on the training split; returns the router itself."""
        ...

    def scores(self, data: TraceDataset) -> np.ndarray:
        """One score per query of ``data``; higher: send it to the strong model."""
        ...

    def to_state(self) -> dict[str, Any]:
        """JSON-able values and numpy arrays that ``from_state`` rebuilds it from."""
        ...


class LogisticTraceRouter:
    """:class:`TraceRouter` (logistic regression on text statistics and hashed n-grams).

    An adapter giving it the router interface of the module doc; its state is the
    settings (``n_features``, ``l2``, ``hashed_weight``) and three arrays: the
    standardisation's ``mean`` and ``std`` of the text statistics and the regression's
    ``coef`` (statistics, hashed features, then the intercept).

    Args:
        weak: The weak model's name.
        strong: The strong model's name.
    """

    name = "logistic"
    features = "text statistics + hashed word 1-2-grams"

    def __init__(self, weak: str, strong: str) -> None:
        self.router = TraceRouter(weak, strong)

    def fit(self, train: TraceDataset) -> LogisticTraceRouter:
        """Fit on the training split."""
        self.router.fit(train)
        return self

    def scores(self, data: TraceDataset) -> np.ndarray:
        """The probability that the weak model fails each query of ``data``."""
        return self.router.scores(data)

    def to_state(self) -> dict[str, Any]:
        """Settings and fitted arrays (see the class doc)."""
        r = self.router
        if r._model is None or r._model.coef_ is None:
            raise ValueError("to_state: call fit first")
        return {"weak": r.weak, "strong": r.strong, "features": self.features,
                "statistics": list(STATISTICS), "n_features": r.n_features, "l2": r.l2,
                "hashed_weight": r.hashed_weight, "mean": r._mean, "std": r._std,
                "coef": r._model.coef_}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LogisticTraceRouter:
        """The fitted router of :meth:`to_state`'s ``state``.

        Raises:
            ValueError: On a missing key, a bad setting or arrays of the wrong shape.
        """
        missing = [k for k in ("weak", "strong", "n_features", "l2", "hashed_weight", "mean",
                               "std", "coef") if k not in state]
        if missing:
            raise ValueError(f"logistic router state: missing {missing}")
        if state.get("statistics", list(STATISTICS)) != list(STATISTICS):
            raise ValueError(f"logistic router state: statistics {state['statistics']} are "
                             f"not this version's {list(STATISTICS)}")
        if not all(isinstance(state[k], str) and state[k] for k in ("weak", "strong")):
            raise ValueError("logistic router state: weak, strong: expected model names")
        try:
            r = TraceRouter(state["weak"], state["strong"], n_features=state["n_features"],
                            l2=state["l2"], hashed_weight=state["hashed_weight"])
        except TypeError as error:  # a crafted value of another type
            raise ValueError(f"logistic router state: {error}") from None
        shapes = {"mean": (len(STATISTICS),), "std": (len(STATISTICS),),
                  "coef": (len(STATISTICS) + r.n_features + 1,)}
        arrays = {}
        for key, shape in shapes.items():
            array = np.asarray(state[key], dtype=np.float64)
            if array.shape != shape or not np.isfinite(array).all():
                raise ValueError(f"logistic router state: {key}: expected {shape} finite "
                                 f"numbers, got shape {array.shape}")
            arrays[key] = array
        if (arrays["std"] <= 0).any():
            raise ValueError("logistic router state: std: expected positive numbers")
        r._mean, r._std = arrays["mean"], arrays["std"]
        r._model = LogisticRegression(r.l2)
        r._model.coef_ = arrays["coef"]
        out = cls(r.weak, r.strong)
        out.router = r
        return out


#: Router name -> class built as ``cls(weak, strong)`` (the interface of the module doc).
ROUTERS: dict[str, Any] = {"logistic": LogisticTraceRouter}


# ------------------------------------------------------------------------ files
def router_files(path: str | Path) -> tuple[Path, Path]:
    """``(<path>.json, <path>.safetensors)``; a ``.json`` or ``.safetensors`` suffix is dropped."""
    path = Path(path)
    if path.suffix in (".json", ".safetensors"):
        path = path.with_suffix("")
    return path.with_name(path.name + ".json"), path.with_name(path.name + ".safetensors")


def check_router_writable(path: str | Path) -> None:
    """Raise ``ValueError`` unless :func:`save_router` can write ``path`` (run it first)."""
    for file in router_files(path):
        if file.exists() and not file.is_file():
            raise ValueError(f"{file} exists and is not a file")
        check_creatable(file)


@dataclass(frozen=True)
class SavedRouter:
    """A fitted router and what its JSON file records.

    Attributes:
        name: The router's name in :data:`ROUTERS`.
        router: The fitted router.
        weak: The weak model.
        strong: The strong model.
        threshold: Scores at or above it go to the strong model (``inf``: none do).
        meta: The whole JSON document (calibration, training data, versions).
    """

    name: str
    router: Any
    weak: str
    strong: str
    threshold: float
    meta: dict[str, Any]


def save_router(path: str | Path, name: str, router: Any, weak: str, strong: str,
                threshold: float, meta: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``router`` as ``<path>.json`` + ``<path>.safetensors``, atomically.

    Args:
        path: Where to write (see :func:`router_files`).
        name: The router's name in :data:`ROUTERS`.
        router: A fitted router.
        weak: The weak model it routes between.
        strong: The strong model.
        threshold: Its threshold (``inf`` is saved as ``null``).
        meta: More JSON-able facts to record (calibration, training data).

    Returns:
        The two paths written.
    """
    from safetensors.numpy import save

    state = router.to_state()
    arrays = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in state.items()
              if isinstance(v, np.ndarray)}
    weights = save(arrays)
    doc = {"format": FILE_FORMAT, "version": FILE_VERSION, "cost_envs": cost_envs.__version__,
           "router": name, "weak": weak, "strong": strong,
           "threshold": None if math.isinf(threshold) else float(threshold), **meta,
           "state": {k: v for k, v in state.items() if k not in arrays},
           "arrays": {k: list(v.shape) for k, v in arrays.items()},
           "arrays_sha256": hashlib.sha256(weights).hexdigest()}
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    json_path, weights_path = router_files(path)
    write_files_atomic(json_path.parent, {json_path.name: text, weights_path.name: weights})
    return json_path, weights_path


def _document(json_path: Path) -> dict[str, Any]:
    try:
        doc = json_loads(json_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{json_path}: not a cost-envs router file (not UTF-8 text)") from None
    except ValueError as error:  # JSONDecodeError included
        raise ValueError(f"{json_path}: not a cost-envs router file ({error})") from None
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise ValueError(f"{json_path}: not a cost-envs router file (no \"format\": "
                         f"\"{FILE_FORMAT}\")")
    if doc.get("version") != FILE_VERSION:
        raise ValueError(f"{json_path}: router file version {doc.get('version')!r}; this "
                         f"cost-envs reads version {FILE_VERSION}")
    for key, kind in (("router", str), ("weak", str), ("strong", str), ("state", dict),
                      ("arrays", dict), ("arrays_sha256", str)):
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"{json_path}: {key}: expected a {kind.__name__}, got "
                             f"{doc.get(key)!r}")
    threshold = doc.get("threshold")
    if threshold is not None and (isinstance(threshold, bool)
                                  or not isinstance(threshold, (int, float))):
        raise ValueError(f"{json_path}: threshold: expected a number or null, got {threshold!r}")
    return doc


def _arrays(weights_path: Path, doc: dict[str, Any]) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    content = weights_path.read_bytes()
    if hashlib.sha256(content).hexdigest() != doc["arrays_sha256"]:
        raise ValueError(f"{weights_path}: does not match its JSON file (arrays_sha256 "
                         "differs): another save's weights, or a corrupted file")
    try:
        arrays = load(content)
    except (SafetensorError, ValueError) as error:
        raise ValueError(f"{weights_path}: not a valid safetensors file "
                         f"({' '.join(str(error).split())})") from None
    shapes = {k: list(v.shape) for k, v in arrays.items()}
    if shapes != doc["arrays"]:
        raise ValueError(f"{weights_path}: arrays {shapes} differ from the JSON's "
                         f"{doc['arrays']}")
    return arrays


def load_router(path: str | Path) -> SavedRouter:
    """Read a router :func:`save_router` wrote (``path`` with or without a suffix).

    Raises:
        FileNotFoundError: If either file is missing.
        ValueError: One line naming the file, on anything that is not such a router: a
            foreign or corrupted JSON or safetensors file, a weights file from another
            save, an unknown router name or a state its class refuses.
    """
    json_path, weights_path = router_files(path)
    for file in (json_path, weights_path):
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no such file (a saved router is "
                                    f"{json_path.name} and {weights_path.name})")
    doc = _document(json_path)
    arrays = _arrays(weights_path, doc)
    if doc["router"] not in ROUTERS:
        raise ValueError(f"{json_path}: router {doc['router']!r} is not one of {list(ROUTERS)}")
    overlap = sorted(set(arrays) & set(doc["state"]))
    if overlap:
        raise ValueError(f"{json_path}: state keys {overlap} are also arrays")
    for key in ("weak", "strong"):
        if doc["state"].get(key, doc[key]) != doc[key]:
            raise ValueError(f"{json_path}: state: {key} {doc['state'][key]!r} is not the "
                             f"file's {doc[key]!r}")
    try:
        router = ROUTERS[doc["router"]].from_state({**doc["state"], **arrays})
    except (ValueError, TypeError, KeyError) as error:  # a crafted state
        raise ValueError(f"{json_path}: {error}") from None
    threshold = math.inf if doc["threshold"] is None else float(doc["threshold"])
    return SavedRouter(doc["router"], router, doc["weak"], doc["strong"], threshold, doc)
