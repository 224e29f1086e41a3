"""Saved routers: one file format for every router of the family (no pickle).

:func:`save_router` writes two files side by side: ``<path>.safetensors`` holds the
state's arrays (float64, :meth:`~agents.routers.base.Router.to_state`), ``<path>.json`` the
rest: the router's name, its models and operating point, what it was calibrated for, the
state's config, a digest of the safetensors bytes (so a weights file from another save is
refused), and the training data's fingerprint and split. A two-model router's JSON names
its ``"weak"`` and ``"strong"`` model and its ``"threshold"`` (``null``: no strong call); a
K-model router's its ``"models"`` and ``"lam"``. The pair is one set
(:func:`agents.files.write_files_atomic`): committed by one rename of a record, so a save
killed at any moment, ``kill -9`` included, leaves the old pair or the new one, and
:func:`load_router` reads it through :func:`agents.files.reading_files`, which finishes
such a save first. :func:`load_router` reads either kind with ``safetensors.numpy`` and a
strict JSON parser only (nothing is unpickled) and returns a :class:`SavedRouter`.
``cost-envs route`` saves and loads routers through here.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import cost_envs
from agents.files import check_creatable, reading_files, write_files_atomic
from agents.routers.base import ROUTERS, Router
from agents.weight_files import ROUTER_DTYPES, check_weights, read_weights
from cost_envs.config_files import json_loads
from cost_envs.limits import MAX_CONFIG_BYTES, check_regular_file

#: ``format`` tag of a saved router's JSON file, and the layout version it follows.
FILE_FORMAT = "cost-envs-router"
FILE_VERSION = 1


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
        name: The router's name in :data:`~agents.routers.ROUTERS`.
        router: The fitted router.
        models: The models it routes between, in its order (two: weak, strong).
        point: Its operating point: a threshold (``inf``: no strong call) or ``lam``.
        meta: The whole JSON document (calibration, training data, versions).
    """

    name: str
    router: Any
    models: tuple[str, ...]
    point: float
    meta: dict[str, Any]

    @property
    def two_model(self) -> bool:
        """Whether it is a weak/strong router with a threshold."""
        return ROUTERS[self.name].n_models == 2

    @property
    def weak(self) -> str:
        """The weak model (two-model routers)."""
        return self.models[0]

    @property
    def strong(self) -> str:
        """The strong model (two-model routers)."""
        return self.models[1]

    @property
    def threshold(self) -> float:
        """The threshold of a two-model router (its operating point)."""
        return self.point

    @property
    def lam(self) -> float:
        """The ``lam`` of a K-model router (its operating point)."""
        return self.point


def _write(path: str | Path, router: Any, head: dict[str, Any], meta: dict[str, Any]
           ) -> tuple[Path, Path]:
    """The two files of any router: ``head`` and ``meta`` in the JSON beside its state."""
    from safetensors.numpy import save

    config, arrays = router.to_state()
    weights = save({k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()})
    doc = {"format": FILE_FORMAT, "version": FILE_VERSION, "cost_envs": cost_envs.__version__,
           **head, **meta, "state": config,
           "arrays": {k: list(v.shape) for k, v in arrays.items()},
           "arrays_sha256": hashlib.sha256(weights).hexdigest()}
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    json_path, weights_path = router_files(path)
    write_files_atomic(json_path.parent, {json_path.name: text, weights_path.name: weights})
    return json_path, weights_path


def save_router(path: str | Path, router: Router, point: float,
                meta: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write a fitted ``router`` at operating ``point`` as ``<path>.json`` + ``.safetensors``.

    Args:
        path: Where to write (see :func:`router_files`).
        router: A fitted router of :data:`~agents.routers.ROUTERS`.
        point: A two-model router's threshold (``inf`` is saved as ``null``), or a
            K-model router's ``lam`` (a finite number >= 0).
        meta: More JSON-able facts to record (calibration, training data).

    Returns:
        The two paths written.
    """
    head: dict[str, Any]
    if router.n_models == 2:
        head = {"router": router.kind, "weak": router.models[0], "strong": router.models[1],
                "threshold": None if math.isinf(point) else float(point)}
    else:
        if not (isinstance(point, (int, float)) and math.isfinite(point) and point >= 0):
            raise ValueError(f"lam: expected a finite number >= 0, got {point!r}")
        head = {"router": router.kind, "models": list(router.models), "lam": float(point)}
    return _write(path, router, head, meta or {})


def _document(json_path: Path) -> dict[str, Any]:
    check_regular_file(json_path, "saved router", MAX_CONFIG_BYTES)  # before reading
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
    multi = doc.get("router") in ROUTERS and ROUTERS[doc["router"]].n_models != 2
    head = (("models", list),) if multi else (("weak", str), ("strong", str))
    for key, kind in (("router", str), *head, ("state", dict), ("arrays", dict),
                      ("arrays_sha256", str)):
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"{json_path}: {key}: expected a {kind.__name__}, got "
                             f"{doc.get(key)!r}")
    if multi:
        lam = doc.get("lam")
        if (isinstance(lam, bool) or not isinstance(lam, (int, float))
                or not math.isfinite(lam) or lam < 0):
            raise ValueError(f"{json_path}: lam: expected a number >= 0, got {lam!r}")
        return doc
    threshold = doc.get("threshold")
    if threshold is not None and (isinstance(threshold, bool)
                                  or not isinstance(threshold, (int, float))):
        raise ValueError(f"{json_path}: threshold: expected a number or null, got {threshold!r}")
    return doc


def _arrays(weights_path: Path, doc: dict[str, Any]) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    content = read_weights(weights_path, "router weights")  # a regular file, size limit
    if hashlib.sha256(content).hexdigest() != doc["arrays_sha256"]:
        raise ValueError(f"{weights_path}: does not match its JSON file (arrays_sha256 "
                         "differs): another save's weights, or a corrupted file")
    check_weights(content, str(weights_path), ROUTER_DTYPES)  # one header policy for every file
    try:
        arrays = load(content)
    except (SafetensorError, ValueError) as error:
        raise ValueError(f"{weights_path}: not a valid safetensors file "
                         f"({' '.join(str(error).split())})") from None
    shapes = {k: list(v.shape) for k, v in arrays.items()}
    if shapes != doc["arrays"]:
        raise ValueError(f"{weights_path}: arrays {shapes} differ from the JSON's "
                         f"{doc['arrays']}")
    # A NaN or infinite coefficient would route every query silently wrong: refuse it here,
    # as the allocators' loader refuses non-finite tensors.
    broken = sorted(name for name, array in arrays.items() if not np.isfinite(array).all())
    if broken:
        raise ValueError(f"{weights_path}: arrays {broken} hold NaN or infinite values; "
                         "expected finite numbers")
    return arrays


def load_router(path: str | Path, features: str | None = None) -> SavedRouter:
    """Read a router :func:`save_router` wrote (``path`` with or without a suffix).

    A router fitted on your own text features (its JSON's ``"text_features"``) needs
    them: from ``features`` (``MODULE:FUNCTION``) or an installed entry point, checked
    against the saved digest (:func:`agents.routers.user_features.activate`).

    Raises:
        FileNotFoundError: If either file is missing.
        ValueError: One line naming the file, on anything that is not such a router: a
            foreign or corrupted JSON or safetensors file, a weights file from another
            save, an unknown router name or a state its class refuses, or a killed save's
            record that does not match the files
            (:func:`agents.files.finish_interrupted`).
    """
    json_path, weights_path = router_files(path)
    # One set, read as such: a save killed after its commit point is finished first, and
    # no save of the directory starts while the two files are read (agents.files).
    with reading_files(json_path.parent, (json_path.name, weights_path.name)) as where:
        json_file, weights_file = where[json_path.name], where[weights_path.name]
        for file in (json_file, weights_file):  # what exists but is no file: readers say
            if not file.exists():
                raise FileNotFoundError(f"{file}: no such file (a saved router is "
                                        f"{json_path.name} and {weights_path.name})")
        doc = _document(json_file)
        arrays = _arrays(weights_file, doc)
    if doc["router"] not in ROUTERS:
        raise ValueError(f"{json_path}: router {doc['router']!r} is not one of "
                         f"{list(ROUTERS)}")
    record = doc.get("text_features")
    if record is not None:
        from agents.routers.user_features import activate

        if not isinstance(record, dict):
            raise ValueError(f"{json_path}: text_features: expected an object, got {record!r}")
        activate(record, features, str(json_path))
    two = ROUTERS[doc["router"]].n_models == 2
    for key in ("router", "weak", "strong") if two else ("router", "models"):
        if doc["state"].get(key, doc[key]) != doc[key]:
            raise ValueError(f"{json_path}: state: {key} {doc['state'][key]!r} is not the "
                             f"file's {doc[key]!r}")
    try:
        router = ROUTERS[doc["router"]].from_state(doc["state"], arrays)
    except (ValueError, TypeError, KeyError) as error:  # a crafted state
        raise ValueError(f"{json_path}: {error}") from None
    if two:
        point = math.inf if doc["threshold"] is None else float(doc["threshold"])
    else:
        point = float(doc["lam"])
    return SavedRouter(doc["router"], router, tuple(router.models), point, doc)


# ------------------------------------------------------------------- training overlap
#: Hex digits kept of each training prompt's SHA-256 (64 bits: no chance collisions).
DIGEST_CHARS = 16


def prompt_digests(prompts: Any) -> list[str]:
    """The sorted distinct prompts' SHA-256 prefixes: which queries training saw.

    Recorded in a saved router's JSON (``training.train_prompt_sha256``) so that scoring
    can say which scored queries it was trained on, without keeping their texts.
    """
    return sorted({hashlib.sha256(p.encode("utf-8")).hexdigest()[:DIGEST_CHARS]
                   for p in prompts})


def training_overlap(data: Any, training: dict[str, Any]) -> dict[str, Any]:
    """How many of ``data``'s queries, and which of its groups, a router was trained on.

    Args:
        data: The scored queries (a :class:`~cost_envs.traces.TraceDataset`).
        training: The saved JSON's ``"training"`` facts. Files saved without prompt
            digests fall back to the fingerprints (all of the queries, or none).

    Returns:
        ``{"queries": trained-on queries, "of": data's queries, "groups": scored groups
        that were training groups}``.
    """
    digests = training.get("train_prompt_sha256")
    if digests is None:
        seen = data.fingerprint in (training.get("fingerprint"),
                                    training.get("train_fingerprint"))
        queries = data.n_queries if seen else 0
    else:
        known = set(digests)
        queries = sum(hashlib.sha256(p.encode("utf-8")).hexdigest()[:DIGEST_CHARS] in known
                      for p in data.prompts)
    scored = set(data.groups or ())
    groups = sorted(scored & set(training.get("train_groups") or ()))
    return {"queries": int(queries), "of": data.n_queries, "groups": groups}
