"""Episode cost accounting, like Gymnasium's ``RecordEpisodeStatistics`` but for money."""

from __future__ import annotations

from typing import Any, Protocol, SupportsFloat, cast

import gymnasium as gym
import numpy as np

from cost_envs.wrappers.episode import EpisodeWrapper


class _Ledger(Protocol):
    """What :class:`CostAccounting` reads of ``env.unwrapped`` (checked at construction)."""

    @property
    def episode_cost(self) -> float: ...
    @property
    def episode_flops(self) -> float: ...


class CostAccounting(EpisodeWrapper, gym.utils.RecordConstructorArgs):
    """Adds an episode's cost, FLOPs, outcome, length and per-agent calls to the final ``info``.

    At the step that ends an episode (terminated or truncated), ``info[stats_key]`` is
    set to a fresh dict::

        {"cost": float, "flops": float, "success": bool, "quality": float,
         "length": int, "calls": np.ndarray}  # calls: int64 call count per agent

    ``cost`` and ``flops`` are the env's own ledger (``env.unwrapped.episode_cost`` and
    ``episode_flops``, the one place an episode's spend is summed), read at the last step
    whatever ended the episode; ``calls`` sums the per-step ``info["calls"]``; ``success``
    and ``quality`` come from the final ``info`` (``False`` and ``0.0`` when absent, e.g.
    when a foreign ``TimeLimit`` truncates). Unlike ``RecordEpisodeStatistics`` there is
    no wall-clock time, so the statistics are a deterministic function of the seed and
    the actions.

    The default key ``"episode"`` is also used by Gymnasium's ``RecordEpisodeStatistics``
    and SB3's ``Monitor`` (``{"r", "l", "t"}``). When ``info`` already holds a dict under
    that key (an inner ``RecordEpisodeStatistics``), the cost statistics are merged into a
    copy of it. An *outer* ``Monitor`` or ``RecordEpisodeStatistics`` overwrites (or
    rejects) the key, so pass another ``stats_key`` when stacking under one of them.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import cost_envs
        >>> from cost_envs.wrappers import CostAccounting
        >>> env = CostAccounting(gym.make("cost_envs/ToolBench-v0"))
        >>> _ = env.reset(seed=0)
        >>> _, _, terminated, _, info = env.step(np.zeros(8, dtype=np.int8))  # answer now
        >>> terminated, sorted(info["episode"])
        (True, ['calls', 'cost', 'flops', 'length', 'quality', 'success'])

    Args:
        env: The environment to wrap: a cost-envs env (its unwrapped env keeps the
            ``episode_cost`` / ``episode_flops`` ledger and its steps carry ``calls``).
        stats_key: The ``info`` key of the episode statistics.
    """

    def __init__(self, env: gym.Env[Any, Any], stats_key: str = "episode") -> None:
        if not isinstance(stats_key, str) or not stats_key:
            raise ValueError(
                f"CostAccounting: stats_key: expected a non-empty string, got {stats_key!r}"
            )
        gym.utils.RecordConstructorArgs.__init__(self, stats_key=stats_key)
        gym.Wrapper.__init__(self, env)
        self._stats_key = stats_key
        ledger = env.unwrapped
        if not (hasattr(ledger, "episode_cost") and hasattr(ledger, "episode_flops")):
            raise ValueError(f"CostAccounting: expected a cost-envs environment (with an "
                             f"episode_cost ledger), got {type(ledger).__name__}")
        self._ledger = cast(_Ledger, ledger)  # its attributes were checked just above
        self._n_agents = int(np.prod(env.action_space.shape)) if env.action_space.shape else 0
        self._start_episode()

    def _start_episode(self) -> None:
        self._length = 0
        # Allocated once per episode and handed out at its end, so no copy is needed.
        self._calls = np.zeros(self._n_agents, dtype=np.int64)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env, accumulate the step's cost, and report totals at the episode end.

        Args:
            action: The action, forwarded unchanged.

        Returns:
            The env's 5-tuple; on the final step ``info[stats_key]`` holds the totals.
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._calls += info["calls"]
        self._length += 1
        if terminated or truncated:
            stats: dict[str, Any] = {
                "cost": self._ledger.episode_cost,
                "flops": self._ledger.episode_flops,
                "success": bool(info.get("success", False)),
                "quality": float(info.get("quality", 0.0)),
                "length": self._length,
                "calls": self._calls,
            }
            previous = info.get(self._stats_key)
            info[self._stats_key] = {**previous, **stats} if isinstance(previous, dict) else stats
            self._start_episode()
        return obs, reward, terminated, truncated, info

    def _episode_started(self, obs: Any) -> None:
        if self._length:  # else the totals are still the zeros of _start_episode
            self._start_episode()
