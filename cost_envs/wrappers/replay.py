"""Task replay: every episode is the next task of a fixed list (BoPO's training and scoring).

Every cost-envs env accepts ``reset(options={"task": task})`` and fixes all of a task's
luck at reset, so replaying a task replays its episode for the same actions. This wrapper
feeds such a list of tasks, in order or shuffled, to any env that takes the option.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from cost_envs.wrappers.chain import find_wrapper


class TaskReplay(gym.Wrapper[Any, Any, Any, Any]):
    """Every ``reset`` replays the next task of a fixed list (in order, or shuffled).

    The list is visited in order, one task per ``reset``, and starts again when it is
    exhausted; with ``shuffle`` each pass visits the tasks in a fresh random order drawn
    from the wrapper's own generator (the env's ``np_random`` is left alone). The index
    of the current task is ``task_index`` (``-1`` before the first reset), which lets a
    wrapper above look up per-task data such as BoPO's boundaries.

    Put it on top of ``HardBudget`` (which passes ``options`` through to the env). A
    ``seed`` given to ``reset`` still reaches the env; the task is always the list's, and
    any other ``options`` are passed on.

    Examples:
        >>> import gymnasium as gym
        >>> import cost_envs
        >>> from cost_envs.wrappers import TaskReplay
        >>> probe = gym.make("cost_envs/AgenticRouting-v0")
        >>> _ = probe.reset(seed=0)
        >>> tasks = probe.unwrapped.sample_tasks(2)
        >>> env = TaskReplay(gym.make("cost_envs/AgenticRouting-v0"), tasks)
        >>> [(env.reset(), env.task_index)[1] for _ in range(3)]
        [0, 1, 0]

    Args:
        env: The environment (possibly wrapped by a budget); its ``reset`` must accept
            ``options={"task": ...}``.
        tasks: The tasks to replay, at least one.
        shuffle: Visit the tasks in a fresh random order each pass (own generator).
        seed: Seed of the shuffling generator.

    Raises:
        ValueError: If ``tasks`` is empty, or ``env`` already has a ``TaskReplay``.
    """

    def __init__(self, env: gym.Env, tasks: Sequence[Any], shuffle: bool = False,
                 seed: int = 0) -> None:
        super().__init__(env)
        if not tasks:
            raise ValueError("TaskReplay: expected at least one task, got none")
        if find_wrapper(env, TaskReplay) is not None:  # it would overwrite our task
            raise ValueError("TaskReplay: env already replays a task list (a TaskReplay "
                             "beneath); wrap the env beneath it instead")
        self.tasks = list(tasks)
        self._shuffle = shuffle
        self._rng = np.random.default_rng(seed)
        self._order: list[int] = []
        self.task_index = -1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        """Reset on the next task of the list."""
        if not self._order:
            order = np.arange(len(self.tasks))
            if self._shuffle:
                self._rng.shuffle(order)
            self._order = order[::-1].tolist()
        self.task_index = self._order.pop()
        options = {**(options or {}), "task": self.tasks[self.task_index]}
        return self.env.reset(seed=seed, options=options)
