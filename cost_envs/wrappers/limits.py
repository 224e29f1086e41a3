"""A step limit that keeps the info contract, like Gymnasium's ``TimeLimit``."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from cost_envs.config import integer


class StepLimit(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Truncates an episode after ``max_steps`` steps and fills its final-step info.

    Gymnasium's ``TimeLimit`` (what ``gym.make(..., max_episode_steps=N)`` adds) truncates
    without the keys the cost_envs info contract promises at the last step. This wrapper
    truncates the same way and merges ``env.unwrapped.truncate()`` into ``info``:
    ``success=False``, ``quality=0.0``, ``episode_cost`` and ``episode_flops``. A step that
    terminates on its own is left as it is.

    Example:
        >>> import gymnasium as gym
        >>> import cost_envs
        >>> from cost_envs.wrappers import StepLimit
        >>> env = StepLimit(gym.make("cost_envs/FlightPlanner-v0"), max_steps=1)
        >>> _ = env.reset(seed=0)
        >>> _, _, terminated, truncated, info = env.step([1, 0, 0, 0, 0, 0])
        >>> terminated, truncated, info["success"], info["episode_cost"]
        (False, True, False, 0.002)

    Args:
        env: An environment whose ``unwrapped`` is an ``OrchestrationEnv``.
        max_steps: Steps per episode, a positive integer.
    """

    def __init__(self, env: gym.Env[Any, Any], max_steps: int) -> None:
        integer(max_steps, "max_steps", minimum=1, where="StepLimit")
        if not hasattr(env.unwrapped, "truncate"):
            raise TypeError(f"StepLimit: expected an env whose unwrapped env is an "
                            f"OrchestrationEnv, got {type(env.unwrapped).__name__}")
        gym.utils.RecordConstructorArgs.__init__(self, max_steps=max_steps)
        gym.Wrapper.__init__(self, env)
        self.max_steps = max_steps
        self._elapsed = 0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, then truncate (with the final-step info) once ``max_steps`` is reached."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        if self._elapsed >= self.max_steps and not (terminated or truncated):
            info.update(self.env.unwrapped.truncate())  # type: ignore[attr-defined]  # __init__'s
            truncated = True
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env and the step count."""
        self._elapsed = 0
        return self.env.reset(seed=seed, options=options)
