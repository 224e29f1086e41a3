"""Array operations the batched envs share: faster forms of common numpy idioms.

Each gives exactly what the idiom it replaces gives (the same values, the same bits);
only the speed differs, measured on the batched envs' shapes (rows of sub-envs, a few
columns of agents).
"""

from __future__ import annotations

import numpy as np


def any_per_row(mask: np.ndarray) -> np.ndarray:
    """``mask.any(axis=1)`` for a 2-D boolean array, by a matmul (several times faster)."""
    return (mask.astype(np.float32) @ np.ones(mask.shape[1], dtype=np.float32)) > 0


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
