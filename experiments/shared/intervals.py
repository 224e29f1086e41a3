"""A mean with its bootstrap interval as a table cell, and what an interval says about 0."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cost_envs.metrics import bootstrap_mean_ci


def mean_cell(values: np.ndarray, resamples: int, signed: bool = False) -> str:
    """``mean [low, high]`` of ``values`` (95%, ``resamples`` bootstrap resamples), 3 decimals.

    ``signed``: each number with its sign (a difference).
    """
    return interval_text(bootstrap_mean_ci(values, n_resamples=resamples), signed)


def interval_text(interval: Sequence[float], signed: bool = False) -> str:
    """``mean [low, high]`` of a ``(mean, low, high)`` triple, 3 decimals (signed: with signs)."""
    mean, low, high = interval
    form = "+.3f" if signed else ".3f"
    return f"{mean:{form}} [{low:{form}}, {high:{form}}]"


def verdict(low: float, high: float) -> str:
    """Whether the interval ``[low, high]`` of a difference resolves it from 0, and how."""
    if low > 0:
        return "resolved above 0"
    if high < 0:
        return "resolved below 0"
    return "not resolved: the interval holds 0"
