"""Gymnasium's vector ``info`` convention, built from whole columns instead of env by env.

``SyncVectorEnv`` assembles a step's ``info`` one sub-env at a time (``VectorEnv._add_info``):
every key a sub-env reported becomes an array of length ``num_envs``, zero where that
sub-env did not report it, beside a boolean mask ``_key``. :class:`VectorInfo` builds the
same dict from per-key columns, so a batched env's ``info`` equals ``SyncVectorEnv``'s over
the single envs, dtypes included (a Python ``float`` becomes ``float64``, a ``bool``
``bool``, an ``int8`` array an ``int8`` column).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class VectorInfo:
    """A step's info under construction: per key, a full column and the mask of who has it.

    Args:
        num_envs: Number of sub-envs.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def set(self, key: str, rows: np.ndarray, values: Any, dtype: Any,
            mask: np.ndarray | None = None) -> None:
        """Sub-envs ``rows`` (indices or a boolean mask) report ``key`` with ``values``.

        Args:
            key: The info key.
            rows: Which sub-envs report it.
            values: Their values (broadcast), a row each for array-valued keys.
            dtype: The column's dtype (``float64`` for a Python float, ``bool`` ...).
            mask: ``rows`` as a boolean mask, when the caller has it: a new key's mask is
                then a copy of it rather than built by scattering ``rows``.
        """
        values = np.asarray(values)
        entry = self.columns.get(key)
        if entry is None:
            shape = (self.num_envs, *values.shape[1:]) if values.ndim > 1 else (self.num_envs,)
            column = np.zeros(shape, dtype=dtype)
            column[rows] = values
            if mask is not None:
                self.columns[key] = (column, mask.copy())
                return
            entry = self.columns[key] = (column, np.zeros(self.num_envs, dtype=np.bool_))
        else:
            entry[0][rows] = values
        entry[1][rows] = True

    def put(self, key: str, column: np.ndarray, mask: np.ndarray) -> None:
        """A new key's whole column (zero where ``mask`` is False) and its mask, as given."""
        self.columns[key] = (column, mask)

    def drop(self, rows: np.ndarray) -> None:
        """Forget what sub-envs ``rows`` (a boolean mask) reported, as if they had not."""
        for column, mask in self.columns.values():
            column[rows] = 0
            mask[rows] = False

    def subset(self, rows: np.ndarray) -> dict[str, Any]:
        """The info of sub-envs ``rows`` (a boolean mask) alone, in the vector convention."""
        out: dict[str, Any] = {}
        for key, (column, mask) in self.columns.items():
            keep = mask & rows
            if keep.any():
                values = np.zeros_like(column)
                values[keep] = column[keep]
                out[key], out[f"_{key}"] = values, keep
        return out

    def as_dict(self) -> dict[str, Any]:
        """The info dict: every key some sub-env reported, each with its ``_key`` mask."""
        out: dict[str, Any] = {}
        for key, (column, mask) in self.columns.items():
            if mask.any():
                out[key], out[f"_{key}"] = column, mask
        return out
