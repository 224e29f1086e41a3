"""The base of the wrappers whose own state starts afresh with each episode."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class EpisodeWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """A wrapper that starts its own episode state when the env resets.

    ``reset`` forwards ``seed`` and ``options`` to the env unchanged, then calls
    :meth:`_episode_started` with the first observation: the one place where a wrapper
    that keeps per-episode state (:class:`~cost_envs.wrappers.CostAccounting`'s totals,
    :class:`~cost_envs.wrappers.HardBudget`'s budget and prices) learns that an episode
    began.
    """

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env, then the wrapper's state of the new episode.

        Args:
            seed: Passed to the env's ``reset``.
            options: Passed to the env's ``reset``.

        Returns:
            The env's ``(observation, info)``.
        """
        obs, info = self.env.reset(seed=seed, options=options)
        self._episode_started(obs)
        return obs, info

    def _episode_started(self, obs: Any) -> None:
        """Start the wrapper's state of the episode whose first observation is ``obs``."""
