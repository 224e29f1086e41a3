"""HardBudget's per-episode budget: set_budget, the one way to change it, and the env's
ledger as the spend it checks against."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cost_envs
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


@pytest.mark.parametrize("on_exceed", ["mask", "truncate"])
@pytest.mark.parametrize("env_id", sorted(cost_envs.ENV_IDS))
def test_hard_budget_never_lets_the_ledger_pass_the_budget(env_id: str, on_exceed: str) -> None:
    # Random requests against a budget of about half of "call everyone once": it binds in
    # most episodes. The env's ledger must stay within the budget to the last bit (the
    # wrapper prices each action with the env's own price()), not merely "about" within.
    probe = gym.make(env_id)
    probe.reset(seed=0)
    budget = 0.5 * float(probe.unwrapped.call_costs.sum() + probe.unwrapped.step_cost)
    env = HardBudget(gym.make(env_id), budget=budget, on_exceed=on_exceed)
    m = env.action_space.n
    rng = np.random.default_rng(1)
    bound = 0
    for episode in range(20):
        env.reset(seed=episode)
        done, binds = False, False
        while not done:
            requested = (rng.random(m) < 0.7).astype(np.int8)
            _, _, terminated, truncated, info = env.step(requested)
            done = terminated or truncated
            binds |= bool(info.get("budget_exceeded")) or bool(
                (info["calls"] != requested).any())
            assert env.unwrapped.episode_cost <= env.budget, (episode, env.unwrapped.episode_cost)
            assert info["budget_remaining"] >= 0.0
        bound += binds
    assert bound >= 5, bound  # the budget did bind: the check above was tested
