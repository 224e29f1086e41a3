"""Typed configuration from user input: a dataclass, its dict form, or a preset's name."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def coerce_config(cls: type[T], value: Any, presets: Mapping[str, T], what: str) -> T:
    """``value`` as a ``cls``: an instance, the name of a preset, or a mapping of fields.

    A mapping must name only ``cls``'s fields and every field without a default; the
    dataclass validates the values themselves.

    Raises:
        ValueError: Naming ``what``, on an unknown preset, unknown or missing keys, or a
            value of another kind.
    """
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        if value not in presets:
            raise ValueError(f"{what}: unknown name {value!r}; expected one of "
                             f"{list(presets)} or a {cls.__name__}")
        return presets[value]
    if isinstance(value, Mapping):
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        allowed = [f.name for f in fields]
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ValueError(f"{what}: unknown key(s) {unknown}; expected some of {allowed}")
        required = [f.name for f in fields if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in value]
        if missing:
            raise ValueError(f"{what}: {value.get('name', dict(value))!r} is missing "
                             f"key(s) {missing}")
        return cls(**value)
    raise ValueError(f"{what}: expected a {cls.__name__}, a mapping or a name, got {value!r}")


def read_config_file(path: str | Path) -> Any:
    """The data of a ``.json``, ``.yaml`` or ``.yml`` file (pools, price tables).

    Raises:
        ValueError: Naming the file, on another suffix, text that is not UTF-8, or
            invalid JSON/YAML.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ValueError(f"{path}: expected a .json, .yaml or .yml file, got {suffix!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text: {err}") from None
    try:
        return json.loads(text) if suffix == ".json" else load_yaml(text)
    except (json.JSONDecodeError, ValueError) as err:
        raise ValueError(f"{path}: not valid {suffix[1:].upper()}: {err}") from None
    except Exception as err:  # yaml.YAMLError does not subclass ValueError
        raise ValueError(f"{path}: not valid YAML: {err}") from None


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that reads ``1e9`` and ``2.0e14`` as floats.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so the
    FLOP counts people naturally write (``1.4e13``) would load as strings. YAML 1.2's
    float rule is added here, on a private loader class.
    """
    import yaml  # only needed for YAML pools

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?\.(?:inf|Inf|INF)$"
                   r"|^\.(?:nan|NaN|NAN)$"),
        list("-+0123456789."),
    )
    return yaml.load(text, Loader=Loader)  # a SafeLoader subclass: no arbitrary objects


