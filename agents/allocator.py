"""The Allocator protocol: anything that maps observations to MultiBinary actions.

It is the call signature of a Stable-Baselines3 model's ``predict``, so trained SB3 models
and the baselines of :mod:`agents.baselines` are interchangeable in evaluation.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Allocator(Protocol):
    """Decides which agents to call given an observation."""

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """Return ``(action, state)`` like ``stable_baselines3.common.base_class.BaseAlgorithm``."""
        ...
