"""HardBudget's per-episode budget: set_budget, the one way to change it, and the env's
ledger as the spend it checks against."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the envs)
from cost_envs.wrappers import HardBudget

ENV_ID = "cost_envs/ExpertRouting-v0"


def test_hard_budget_set_budget_applies_from_the_next_reset() -> None:
    env = HardBudget(gym.make(ENV_ID), budget=0.5)
    env.reset(seed=0)
    env.set_budget(0.001)
    assert env.budget == 0.5  # the running episode keeps its own budget
    env.reset(seed=0)
    assert env.budget == 0.001 and env.remaining_budget == 0.001
    env.reset(seed=1)
    assert env.budget == 0.001  # until set again
    for bad in (-1.0, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="set_budget"):
            env.set_budget(bad)
    assert env.budget == 0.001
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"budget": 0.1})  # no hidden side door: set_budget is the one way


def test_hard_budget_reads_the_env_ledger() -> None:
    env = HardBudget(gym.make(ENV_ID), budget=0.5)
    env.reset(seed=3)
    for _ in range(2):
        _, _, terminated, truncated, _ = env.step(np.ones(3, dtype=np.int8))
        assert env.remaining_budget == 0.5 - env.unwrapped.episode_cost
        if terminated or truncated:
            break
