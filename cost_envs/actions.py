"""One check for the actions every env form is stepped with: single, batched, multi-tenant.

An action is a 0/1 array of the action space's shape (``MultiBinary(m)``, or
``(num_envs, m)`` for a batched env). :func:`binary_actions` turns what a caller passes into
a fresh int8 array, or says it is not one; each env then raises its own one-line
``ValueError`` naming its space, so that the three forms refuse the same inputs in the same
way and before any state changes (issue #26). Refused besides wrong shapes and values
(2, -1, NaN, 0.5, text): byte strings, ``bytearray`` and ``memoryview`` (their items are
byte codes, not bits), masked arrays (``np.asarray`` would drop the mask and act on the
hidden values), ragged nesting, and objects whose ``__array__`` raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Inputs whose conversion to an array would not mean what it looks like.
_OPAQUE = (bytes, bytearray, memoryview, str, np.ma.MaskedArray)
#: Arrays up to this size are checked byte by byte in one copy, larger ones in place.
_SMALL = 256
#: Longest description of a bad action in a message.
_SHOWN = 120


def binary_actions(actions: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """``actions`` as a fresh int8 0/1 array of ``shape``, or ``None`` if it is not one."""
    if type(actions) is np.ndarray:
        a = actions
    else:
        if isinstance(actions, _OPAQUE) or (isinstance(actions, (list, tuple)) and any(
                isinstance(item, _OPAQUE) for item in actions)):
            return None
        try:
            a = np.asarray(actions)
        except Exception:  # ragged nesting, an __array__ that raises: a bad action as any
            return None
    if a.shape != shape:
        return None
    kind = a.dtype.kind
    if kind in "biu" and a.itemsize == 1:
        # bytes other than 0 and 1 survive the translate (-1 is byte 255): one C pass,
        # about ten times faster than numpy's comparisons on the small arrays of a step;
        # a large batch is read in place instead of copied (the largest byte must be <= 1)
        if (not a.tobytes().translate(None, b"\x00\x01") if a.size <= _SMALL
                else a.size == 0 or int(np.ascontiguousarray(a).view(np.uint8).max()) <= 1):
            return a.astype(np.int8)
    elif kind in "biuf" and ((a == 0) | (a == 1)).all():  # NaN fails both tests
        return a.astype(np.int8)
    return None


def describe(action: Any) -> str:
    """A one-line description of a bad action for an error message."""
    try:
        text = " ".join(repr(action).split())
    except Exception:  # a repr that raises says nothing more than the type
        text = f"<{type(action).__name__}>"
    if isinstance(action, np.ndarray):  # the shape and dtype first: a long repr is cut
        text = f"{type(action).__name__} of shape {action.shape}, dtype {action.dtype}: {text}"
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."
