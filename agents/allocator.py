"""Allocators: anything that maps observations to MultiBinary actions.

The call signature is a Stable-Baselines3 model's ``predict``, so trained SB3 models, the
baselines of :mod:`agents.baselines`, the routers of :mod:`agents.routers` and user code
are interchangeable in evaluation: anything with that ``predict`` is an allocator.

:class:`Allocator` is the base class of the project's own rule-based allocators: a
subclass writes :meth:`Allocator.act` for one observation and inherits a ``predict`` that
takes one observation or a batch ``(n, obs_dim)``, as SB3's does.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Allocator:
    """Base class: one observation's action in :meth:`act`, SB3's ``predict`` for free.

    Attributes:
        privileged: True when the allocator reads hidden env state rather than the
            observation (the hindsight oracle); evaluation then checks that it was built
            on the env it is scored on.
    """

    privileged = False

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation (a float32 1-D array)."""
        raise NotImplementedError

    def act_with(self, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        """The action for one observation, given SB3's ``deterministic`` flag.

        Override this instead of :meth:`act` when the action depends on the flag (a
        learned policy behind the allocator); by default it is :meth:`act`'s.
        """
        return self.act(observation)

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """SB3-compatible ``predict``: one observation -> one action, a batch -> a batch.

        Args:
            observation: ``(obs_dim,)`` or ``(n, obs_dim)``.
            state: Passed back unchanged (these allocators are memoryless).
            episode_start: Unused; part of SB3's signature.
            deterministic: Passed to :meth:`act_with` (rule-based allocators ignore it).

        Returns:
            ``(action, state)``: an int8 ``(m,)`` action or an ``(n, m)`` batch.
        """
        obs = np.asarray(observation, dtype=np.float32)
        if obs.ndim == 1:
            return self.act_with(obs, deterministic), state
        return np.stack([self.act_with(row, deterministic) for row in obs]), state
