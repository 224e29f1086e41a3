"""TaskReplay refuses to sit on another TaskReplay: the inner one would overwrite the task
the outer one sets, so a rule fitted "on training tasks" would silently see the inner
list (the evaluation tasks, in the experiments)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import cost_envs  # noqa: F401
from cost_envs.wrappers import HardBudget, TaskReplay


def _tasks(n: int, seed: int) -> list:
    probe = gym.make("cost_envs/AgenticRouting-v0")
    probe.reset(seed=seed)
    return probe.unwrapped.sample_tasks(n)


def test_a_replay_on_a_replay_is_refused_in_one_line() -> None:
    inner = TaskReplay(HardBudget(gym.make("cost_envs/AgenticRouting-v0"), budget=1.0),
                       _tasks(2, 0))
    with pytest.raises(ValueError, match="already replays a task list") as error:
        TaskReplay(inner, _tasks(2, 1))
    assert "\n" not in str(error.value)


def test_a_replay_replays_its_own_tasks_in_order() -> None:
    tasks = _tasks(3, 5)
    env = TaskReplay(gym.make("cost_envs/AgenticRouting-v0"), tasks)
    seen = []
    for _ in range(4):
        env.reset()
        seen.append(env.unwrapped.task)
    assert seen == [tasks[0], tasks[1], tasks[2], tasks[0]]
