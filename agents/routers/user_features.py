"""Your own text features on the command line: ``--features MODULE:FUNCTION`` or an entry point.

A router fitted with your own encoder (:func:`~agents.routers.features.register_text_features`)
records the encoder's name, not its code, so another process must have the same encoder
before it can load the router. In Python you register it yourself; ``cost-envs route``
does it from:

* ``--features MODULE:FUNCTION`` (or ``FILE.py:FUNCTION``): ``FUNCTION`` of the importable
  ``MODULE`` (or of the Python file), a callable mapping a list of texts to a
  ``(len(texts), dim)`` matrix (``route train`` fits the router on it; ``route score``
  loads a router saved with it);
* an entry point of the group :data:`ENTRY_POINT_GROUP` whose name is the encoder's,
  declared by an installed package (``[project.entry-points."cost_envs.text_features"]
  my_embeddings = "my_package.features:encode"``): ``route score`` finds it without the
  flag.

The saved router's JSON records, under ``"text_features"``, the encoder's name, its
``MODULE:FUNCTION``, its width and the SHA-256 of its module's source file (of its code,
for a function without one). Loading checks that digest: a different function or an edited
module is refused in one line naming both digests, since a router scores garbage on
features other than those it was fitted on. Nothing is imported from what a router file
says: only the module the flag names or an installed entry point, so loading a file never
runs code of the file's choosing.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import marshal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agents.routers.features import TEXT_ENCODERS, register_text_features

#: The entry-point group ``route score`` looks an encoder up in by its name.
ENTRY_POINT_GROUP = "cost_envs.text_features"


class FeaturesError(ValueError):
    """The text features a router needs cannot be had, or are not those it was fitted on."""


def import_encoder(spec: str) -> Callable[[list[str]], Any]:
    """The callable ``MODULE:FUNCTION`` or ``FILE.py:FUNCTION`` names.

    Raises:
        FeaturesError: One line: a malformed spec, a module or file that cannot be
            imported, no such attribute, or one that is not callable.
    """
    module_name, _, attribute = spec.rpartition(":")
    if not module_name or not attribute:
        raise FeaturesError(f"--features: expected MODULE:FUNCTION or FILE.py:FUNCTION, got "
                            f"{spec!r}")
    try:
        target: Any = _import(module_name)
    except Exception as error:  # the user's module: whatever it raises, one line
        raise FeaturesError(f"--features {spec}: cannot import {module_name!r} "
                            f"({type(error).__name__}: {error})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise FeaturesError(f"--features {spec}: {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise FeaturesError(f"--features {spec}: {attribute!r} is not a callable texts -> "
                            "matrix")
    return target


def _import(module_name: str) -> Any:
    """The module ``module_name`` names: a dotted name, or a ``.py`` file's path."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{module_name}: no such file")
    name = f"cost_envs_features_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{module_name}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it, as import does (dataclasses need it)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def source_digest(encode: Callable[..., Any]) -> str:
    """SHA-256 of the source file of ``encode``'s module (else of its code object)."""
    module = inspect.getmodule(encode)
    path = getattr(module, "__file__", None)
    if path and Path(path).is_file():
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    code = getattr(encode, "__code__", None)
    if code is None:
        raise FeaturesError(f"--features: cannot fingerprint {encode!r} (no source file, no "
                            "code)")
    return hashlib.sha256(marshal.dumps(code)).hexdigest()


def encoder_record(spec: str, encode: Callable[..., Any], dim: int) -> dict[str, Any]:
    """What a saved router records of the encoder ``spec`` names (its ``"text_features"``)."""
    return {"name": spec.rpartition(":")[2].rsplit(".", 1)[-1], "spec": spec, "dim": dim,
            "source_sha256": source_digest(encode)}


def register_spec(spec: str, probe: str) -> dict[str, Any]:
    """Import the encoder ``spec`` names, register it under its function's name.

    Its width is that of its vector for ``probe`` (a training prompt). Returns its record.
    """
    encode = import_encoder(spec)
    try:
        width = np.asarray(encode([probe]), dtype=np.float64).shape
    except Exception as error:  # the user's function: any failure is theirs to see
        raise FeaturesError(f"--features {spec}: failed on a training prompt "
                            f"({type(error).__name__}: {error})") from None
    if len(width) != 2 or width[0] != 1 or width[1] < 1:
        raise FeaturesError(f"--features {spec}: expected a (len(texts), dim) matrix, got "
                            f"shape {width} for one text")
    record = encoder_record(spec, encode, int(width[1]))
    if record["name"] in ("hashed", "minilm"):
        raise FeaturesError(f"--features {spec}: the function may not be named "
                            f"{record['name']!r} (a built-in encoder's name)")
    register_text_features(record["name"], encode, record["dim"])
    return record


def activate(record: Mapping[str, Any], spec: str | None, where: str) -> None:
    """Register the encoder a saved router needs, from ``spec`` or an entry point, checked.

    Raises:
        FeaturesError: One line: no way to find it, or its digest differs from the saved one.
        ValueError: A malformed record (a corrupted file).
    """
    name, saved = record.get("name"), record.get("source_sha256")
    dim = record.get("dim")
    if not (isinstance(name, str) and isinstance(saved, str) and isinstance(dim, int)
            and not isinstance(dim, bool) and dim >= 1):
        raise ValueError(f"{where}: text_features: expected a name, a dim >= 1 and a "
                         f"source_sha256, got {dict(record)!r}")
    if spec is None:
        found = [point for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
                 if point.name == name]
        if not found:
            raise FeaturesError(f"{where}: the router reads your own text features {name!r} "
                             f"(saved from {record.get('spec')!r}): pass --features "
                             f"MODULE:FUNCTION, or install an entry point {name!r} in the "
                             f"group {ENTRY_POINT_GROUP!r}")
        spec = found[0].value
    encode = import_encoder(spec)
    digest = source_digest(encode)
    if digest != saved:
        raise FeaturesError(f"{where}: the router was fitted on text features {name!r} from "
                         f"source sha256 {saved[:16]}..., but {spec} has {digest[:16]}...: "
                         "another function or an edited module; refit the router on it")
    if name in TEXT_ENCODERS and TEXT_ENCODERS[name].encode is encode:
        return
    register_text_features(name, encode, dim)
