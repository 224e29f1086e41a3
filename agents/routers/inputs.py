"""What every routing score reads: call costs, decisions as probabilities, resampling units.

The base of :mod:`agents.routers.evaluation` (which re-exports it): nothing here
imports another routing module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_envs.config import one_of
from cost_envs.prices import default_price_table
from cost_envs.traces import SPLIT_BY, TraceDataset


def call_costs(data: TraceDataset, costs: Any = None) -> np.ndarray:
    """The ``(n, m)`` cost of each call: ``costs`` if given, else the data's own.

    The data's own are its logged costs where logged, else tokens x the packaged price
    table's prices (as TraceRouting-v0 prices them).
    """
    if costs is None:
        return data.call_costs(default_price_table())
    out = np.asarray(costs, dtype=np.float64)
    if out.shape != (data.n_queries, data.n_models) or not np.isfinite(out).all():
        raise ValueError(f"costs: expected finite numbers of shape ({data.n_queries}, "
                         f"{data.n_models}), got shape {out.shape}")
    return out


def routing_probabilities(decisions: Any, n_queries: int, n_models: int) -> np.ndarray:
    """Decisions as an ``(n, m)`` matrix of routing probabilities.

    Args:
        decisions: ``(n,)`` model indices in ``[0, m)``, or an ``(n, m)`` matrix of
            probabilities in ``[0, 1]`` whose rows sum to 1.
        n_queries: ``n``.
        n_models: ``m``.

    Raises:
        ValueError: On another shape, an index out of range or rows that are not
            distributions.
    """
    x = np.asarray(decisions)
    if x.shape == (n_queries,):
        if not np.issubdtype(x.dtype, np.integer) or x.min() < 0 or x.max() >= n_models:
            raise ValueError(f"decisions: expected model indices in [0, {n_models}), got "
                             f"{x.dtype} values in [{x.min()}, {x.max()}]")
        out = np.zeros((n_queries, n_models))
        out[np.arange(n_queries), x] = 1.0
        return out
    if x.shape != (n_queries, n_models):
        raise ValueError(f"decisions: expected ({n_queries},) model indices or a "
                         f"({n_queries}, {n_models}) probability matrix, got shape {x.shape}")
    x = x.astype(np.float64)
    if not (np.isfinite(x).all() and (x >= 0).all() and np.allclose(x.sum(axis=1), 1.0)):
        raise ValueError("decisions: expected rows of probabilities in [0, 1] summing to 1")
    return x


def resample_clusters(data: TraceDataset, split_by: str) -> np.ndarray | None:
    """What a bootstrap over ``data`` resamples: ``None`` (queries) or its groups."""
    one_of(split_by, "split_by", SPLIT_BY)
    return data.clusters("group") if split_by == "group" else None
