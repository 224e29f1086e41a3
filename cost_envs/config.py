"""User input, checked in one place: the typed value checks.

**Value checks.** :func:`number`, :func:`integer`, :func:`probability`, :func:`boolean`,
:func:`text`, :func:`one_of`, :func:`paired_arrays`, :func:`reject_unknown` and
:func:`require_keys` return the checked value or raise a one-line ``ValueError`` of the form
``<where>: <name>: expected <what>, got <value>``, where ``where`` says where the value
came from (a file and an entry, an env, a dataclass) and ``name`` is its key::

    cost = number(entry["cost"], "cost", minimum=0, where="pool.yaml: agents[2]")
    # ValueError: pool.yaml: agents[2]: cost: expected a finite number >= 0, got -1

:func:`records` reads a file's list of records (a pool's agents, a price table's models)
with those checks, naming each record as ``<file>: <list>[i]``.

**Files.** The one reader of YAML and JSON configuration files is
:mod:`cost_envs.config_files` (a module of its own only to keep each under 500 lines).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")



# ------------------------------------------------------------------------ value checks
def is_number(value: Any) -> bool:
    """A real number: a Python or numpy int or float, not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _prefix(name: str | None, where: str | None) -> str:
    return ": ".join(part for part in (where, name) if part)


def _shown(value: Any) -> str:
    """``repr(value)``, shortened for an integer too large to print usefully."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        digits = str(abs(value))
        return f"an integer of {len(digits)} digits ({digits[:8]}...), too large for a float"
    return repr(value)


def _invalid(value: Any, name: str | None, where: str | None, expected: str) -> ValueError:
    return ValueError(f"{_prefix(name, where)}: expected {expected}, got {_shown(value)}")


def _range(kind: str, minimum: float | None, maximum: float | None,
           inclusive: tuple[bool, bool], show: str) -> str:
    """``"a finite number >= 0"``, ``"an int in [1, 8]"``, ``"a number in (0, 1)"``, ..."""
    low = "" if minimum is None else format(minimum, show)
    high = "" if maximum is None else format(maximum, show)
    if minimum is not None and maximum is not None:
        left, right = "[" if inclusive[0] else "(", "]" if inclusive[1] else ")"
        return f"{kind} in {left}{low}, {high}{right}"
    if minimum is not None:
        return f"{kind} {'>=' if inclusive[0] else '>'} {low}"
    if maximum is not None:
        return f"{kind} {'<=' if inclusive[1] else '<'} {high}"
    return kind


def _within(value: float, minimum: float | None, maximum: float | None,
            inclusive: tuple[bool, bool]) -> bool:
    if minimum is not None and not (value >= minimum if inclusive[0] else value > minimum):
        return False
    return maximum is None or (value <= maximum if inclusive[1] else value < maximum)


def number(value: Any, name: str | None, *, minimum: float | None = None,
           maximum: float | None = None, inclusive: bool | tuple[bool, bool] = True,
           where: str | None = None) -> float:
    """``value`` as a float, if it is a finite real number within the bounds.

    Args:
        value: The value to check (a bool is not a number).
        name: Its key or argument name, as the user wrote it.
        minimum: Smallest allowed value, if any.
        maximum: Largest allowed value, if any.
        inclusive: Whether the bounds are allowed themselves: one flag for both, or
            ``(lower, upper)``.
        where: Where the value came from (a file and entry, an env, a class).

    Raises:
        ValueError: ``<where>: <name>: expected a finite number >= 0, got -1`` and the
            like; also for NaN, infinities and integers too large for a float.
    """
    bounds = (inclusive, inclusive) if isinstance(inclusive, bool) else inclusive
    kind = "a number" if minimum is not None and maximum is not None else "a finite number"
    if not is_number(value):
        raise _invalid(value, name, where, _range(kind, minimum, maximum, bounds, "g"))
    try:
        result = float(value)
    except OverflowError:  # an int beyond 1.8e308
        raise _invalid(value, name, where, _range(kind, minimum, maximum, bounds, "g")) from None
    if not math.isfinite(result) or not _within(result, minimum, maximum, bounds):
        raise _invalid(value, name, where, _range(kind, minimum, maximum, bounds, "g"))
    return result


def integer(value: Any, name: str | None, *, minimum: int | None = None,
            maximum: int | None = None, where: str | None = None) -> int:
    """``value`` as an int, if it is a Python or numpy integer (not a bool) within bounds.

    Raises:
        ValueError: ``<where>: <name>: expected an int in [1, 8], got 9`` and the like.
    """
    if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
            or not _within(int(value), minimum, maximum, (True, True))):
        raise _invalid(value, name, where, _range("an int", minimum, maximum, (True, True), ""))
    return int(value)


def probability(value: Any, name: str | None, *, where: str | None = None) -> float:
    """``value`` as a float in ``[0, 1]`` (see :func:`number`)."""
    return number(value, name, minimum=0, maximum=1, where=where)


def boolean(value: Any, name: str | None, *, where: str | None = None) -> bool:
    """``value`` as a bool, if it is ``True`` or ``False`` (numpy's included)."""
    if not isinstance(value, (bool, np.bool_)):
        raise _invalid(value, name, where, "True or False")
    return bool(value)


def text(value: Any, name: str | None, *, where: str | None = None) -> str:
    """``value``, if it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise _invalid(value, name, where, "a non-empty string")
    return value


def one_of(value: T, name: str | None, options: Collection[Any], *,
           where: str | None = None) -> T:
    """``value``, if it is one of ``options``; the error suggests the closest option."""
    try:
        if value in options:
            return value
    except TypeError:  # an unhashable value looked up in a set or a dict
        pass
    hint = suggestion(value, options) if isinstance(value, str) else ""
    raise ValueError(f"{_invalid(value, name, where, f'one of {list(options)}')}{hint}")


def paired_arrays(first: Any, second: Any, names: str, *, ndim: int = 1,
                  expected: str = "two non-empty 1-d arrays of one length, got shapes"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays over the same items, as non-empty float64 arrays of one shape.

    Args:
        first: The first array (a column per item, or ``ndim`` axes).
        second: The second, of the same shape.
        names: What the two are called in the error.
        ndim: Their number of dimensions.
        expected: The error's words between ``expected`` and the two shapes.

    Raises:
        ValueError: ``<names>: expected <expected> <shape> and <shape>``.
    """
    a = np.asarray(first, dtype=np.float64)
    b = np.asarray(second, dtype=np.float64)
    if a.ndim != ndim or a.shape != b.shape or a.size == 0:
        raise ValueError(f"{names}: expected {expected} {a.shape} and {b.shape}")
    return a, b


def suggestion(word: str, options: Iterable[Any]) -> str:
    """``"; did you mean 'x'?"`` for the option closest to a misspelled ``word``, or ``""``."""
    close = difflib.get_close_matches(word, [str(o) for o in options], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def reject_unknown(mapping: Mapping[Any, Any], allowed: Sequence[str], where: str) -> None:
    """Raise ``ValueError`` naming the keys of ``mapping`` not in ``allowed``.

    Raises:
        ValueError: ``<where>: unknown key(s) ['costs']; expected some of [...]; did you
            mean 'cost'?``
    """
    unknown = sorted(str(k) for k in mapping if k not in allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected some of "
                         f"{list(allowed)}{suggestion(unknown[0], allowed)}")


def require_keys(mapping: Mapping[Any, Any], required: Sequence[str], where: str) -> None:
    """Raise ``ValueError`` naming the keys of ``required`` that ``mapping`` lacks."""
    missing = [k for k in required if k not in mapping]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}; expected {list(required)}")


def records(entries: Any, name: str, source: str, build: Callable[[Mapping[str, Any]], T], *,
            allowed: Sequence[str], required: Sequence[str],
            not_a_mapping: Callable[[Any], str]) -> list[T]:
    """A file's non-empty list ``name`` of records, each checked and then built.

    The one reading of a list of records (a pool's agents, a price table's models): each
    record must be a mapping with only ``allowed`` keys and every ``required`` one, and
    every error, ``build``'s own ``ValueError`` included (the record's dataclass checking
    its values), names the record as ``<source>: <name>[i]``.

    Args:
        entries: The list as read from the file.
        name: Its key in the file.
        source: Where the file came from; prefixed to every error message.
        build: The record's object from its checked mapping.
        allowed: The keys a record may have.
        required: The keys a record must have.
        not_a_mapping: What the error says after the record's name when a record is not a
            mapping (``"expected ..."``), given the record.

    Raises:
        ValueError: Naming ``source``, the record, the offending key and what was expected.
    """
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{source}: {name}: expected a non-empty list, got {entries!r}")
    built = []
    for i, entry in enumerate(entries):
        where = f"{source}: {name}[{i}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: {not_a_mapping(entry)}")
        reject_unknown(entry, allowed, where)
        require_keys(entry, required, where)
        try:
            built.append(build(entry))
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    return built


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
                             f"{list(presets)} or a {cls.__name__}{suggestion(value, presets)}")
        return presets[value]
    if isinstance(value, Mapping):
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # T: a config dataclass
        reject_unknown(value, [f.name for f in fields], what)
        required = [f.name for f in fields if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in value]
        if missing:
            raise ValueError(f"{what}: {value.get('name', dict(value))!r} is missing "
                             f"key(s) {missing}")
        return cls(**value)
    raise ValueError(f"{what}: expected a {cls.__name__}, a mapping or a name, got {value!r}")
