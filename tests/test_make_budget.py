"""Budgets as a ``gym.make`` argument (cost_envs.registration) and SB3's ``is_success``."""

from __future__ import annotations

import math
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv

import cost_envs
from cost_envs.wrappers import HardBudget
from cost_envs.wrappers.chain import find_wrapper

TOOLBENCH = "cost_envs/ToolBench-v0"
STEPS = 2000


def _monitors(venv: VecEnv) -> list[Monitor]:
    found = []
    for env in venv.envs:  # type: ignore[attr-defined]  # a DummyVecEnv's
        while not isinstance(env, Monitor):
            env = env.env
        found.append(env)
    return found


def _random_run(venv: VecEnv, steps: int) -> tuple[int, int, int]:
    """Episodes ended, of which cut short by the budget, and steps in ended episodes."""
    rng = np.random.default_rng(0)
    venv.seed(0)
    venv.reset()
    ended = cut = done_steps = 0
    running = np.zeros(venv.num_envs, dtype=int)
    for _ in range(steps):
        actions = rng.integers(0, 2, size=(venv.num_envs, *venv.action_space.shape))
        _, _, dones, infos = venv.step(actions)
        running += 1
        for i in np.flatnonzero(dones):
            ended += 1
            cut += bool(infos[i].get("budget_exceeded"))
            done_steps += int(running[i])
            running[i] = 0
    return ended, cut, done_steps


@pytest.mark.parametrize("on_exceed", ["truncate", "mask"])
def test_monitor_sees_every_episode_of_a_budgeted_env(on_exceed: str) -> None:
    budget = 0.05  # tight: a large share of episodes end by the budget
    venv = make_vec_env(TOOLBENCH, n_envs=2, seed=0,
                        env_kwargs={"budget": budget, "on_exceed": on_exceed})
    ended, cut, done_steps = _random_run(venv, STEPS // 2)
    monitors = _monitors(venv)
    assert cut > 0.1 * ended  # the budget does end episodes: the test can tell
    assert sum(len(m.get_episode_rewards()) for m in monitors) == ended
    assert sum(sum(m.get_episode_lengths()) for m in monitors) == done_steps
    # the budget sits beneath the monitor
    assert find_wrapper(monitors[0].env, HardBudget) is not None


def test_budget_as_outer_wrapper_hides_episodes_from_monitor() -> None:
    """The contrast: ``wrapper_class=HardBudget`` puts the budget above the Monitor."""
    venv = make_vec_env(TOOLBENCH, n_envs=1, seed=0, wrapper_class=HardBudget,
                        wrapper_kwargs={"budget": 0.05, "on_exceed": "truncate"})
    ended, cut, _ = _random_run(venv, 500)
    seen = len(_monitors(venv)[0].get_episode_rewards())
    assert seen == ended - cut and cut > 0


def _final_infos(env: gym.Env, episodes: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    finals = []
    env.reset(seed=3)
    while len(finals) < episodes:
        _, _, terminated, truncated, info = env.step(rng.integers(0, 2, env.action_space.shape))
        if terminated or truncated:
            finals.append(info)
            env.reset()
    return finals


@pytest.mark.parametrize("env_id", list(cost_envs.ENV_IDS))
def test_is_success_equals_success_at_every_episode_end(env_id: str) -> None:
    plain = _final_infos(gym.make(env_id), 20)
    budgeted = _final_infos(gym.make(env_id, budget=0.0, on_exceed="truncate"), 20)
    assert any(info.get("budget_exceeded") for info in budgeted)  # cut-short ends covered
    for info in plain + budgeted:
        assert info["is_success"] is info["success"]


def test_sb3_success_buffer_fills_from_the_env() -> None:
    from stable_baselines3 import PPO

    venv = make_vec_env(TOOLBENCH, n_envs=1, seed=0, env_kwargs={"budget": 0.1})
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    assert len(model.ep_success_buffer) > 0
    assert set(model.ep_success_buffer) <= {True, False}


def test_without_budget_make_is_unchanged() -> None:
    env = gym.make(TOOLBENCH)
    assert find_wrapper(env, HardBudget) is None
    assert env.spec is not None and env.spec.kwargs == {} and env.spec.additional_wrappers == ()
    assert type(env.unwrapped) is cost_envs.ToolBenchEnv


def _trajectory(env: gym.Env, seed: int = 5) -> list[tuple[float, bool, float]]:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    out = []
    for _ in range(60):
        _, reward, terminated, truncated, info = env.step(rng.integers(0, 2, 8))
        out.append((float(reward), bool(truncated), float(info["budget_remaining"])))
        if terminated or truncated:
            env.reset()
    return out


def test_spec_and_pickle_rebuild_the_same_budgeted_env() -> None:
    env = gym.make(TOOLBENCH, budget=0.05, on_exceed="truncate")
    assert env.spec is not None
    assert env.spec.kwargs == {"budget": 0.05, "on_exceed": "truncate"}
    remade = gym.make(env.spec)
    unpickled = pickle.loads(pickle.dumps(env))
    for other in (remade, unpickled):
        budgets = []
        chain = other
        while isinstance(chain, gym.Wrapper):  # exactly one budget, not one per rebuild
            budgets += [chain] if isinstance(chain, HardBudget) else []
            chain = chain.env
        assert [(b.budget, b.on_exceed) for b in budgets] == [(0.05, "truncate")]
    reference = _trajectory(env)
    assert _trajectory(remade) == reference == _trajectory(unpickled)
    assert any(truncated for _, truncated, _ in reference)


def test_default_on_exceed_is_mask() -> None:
    env = gym.make(TOOLBENCH, budget=0.05)
    budget = find_wrapper(env, HardBudget)
    assert budget is not None and budget.on_exceed == "mask"


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"budget": -1.0}, "-1.0"),
    ({"budget": math.nan}, "nan"),
    ({"budget": math.inf}, "inf"),
    ({"budget": "0.2"}, "'0.2'"),
    ({"budget": True}, "True"),
    ({"budget": 0.2, "on_exceed": "clip"}, "'clip'"),
    ({"on_exceed": "truncate"}, "'truncate'"),
])
def test_bad_budget_arguments_raise_value_error_naming_the_value(
        kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=f"(budget|on_exceed).*{named.replace('.', '[.]')}"):
        gym.make(TOOLBENCH, **kwargs)
