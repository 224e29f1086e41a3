"""Array operations the batched envs share: faster forms of common numpy idioms.

Each gives exactly what the idiom it replaces gives (the same values, the same bits);
only the speed differs, measured on the batched envs' shapes (rows of sub-envs, a few
columns of agents).
"""

from __future__ import annotations

import numpy as np


def any_per_row(mask: np.ndarray) -> np.ndarray:
    """``mask.any(axis=1)`` for a 2-D boolean array, several times faster.

    A contiguous row of 1, 2, 4 or 8 booleans is read as one unsigned integer (nonzero
    when any is); other widths by a float32 matmul.
    """
    width = mask.shape[1]
    if width in (1, 2, 4, 8) and mask.dtype == np.bool_ and mask.flags.c_contiguous:
        return mask.view(_ROW_AS_INTEGER[width])[:, 0] != 0
    return (mask.astype(np.float32) @ np.ones(width, dtype=np.float32)) > 0


_ROW_AS_INTEGER = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def pick(table: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``table[rows, cols]`` for a C-contiguous ``table``, by one ``take`` on the flat table.

    Several times faster than numpy's two-array indexing; the same values.
    """
    flat = table.reshape(table.shape[0] * table.shape[1], *table.shape[2:])
    return flat.take(rows * table.shape[1] + cols, axis=0)


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (the ledger's properties hand these out)."""
    view = array.view()
    view.flags.writeable = False
    return view
