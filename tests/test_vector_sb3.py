"""agents/vec_env.py: a batched env as SB3's VecEnv, step for step a DummyVecEnv of single envs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

import cost_envs  # noqa: F401
from agents.vec_env import BatchedVecEnv, make_batched_vec_env

ENV_ID = "cost_envs/ToolBench-v0"
N = 5
BUDGETS = [0.0, 0.004, 0.015, 0.04, 10.0]


def dummy(**kwargs: Any) -> DummyVecEnv:
    def single(i: int) -> Any:
        extra = {} if "on_exceed" not in kwargs else {"budget": BUDGETS[i]}
        return lambda: gym.make(ENV_ID, **kwargs, **extra)

    return DummyVecEnv([single(i) for i in range(N)])


def same(ours: Any, theirs: Any, where: str) -> None:
    if isinstance(theirs, dict):
        assert sorted(ours) == sorted(theirs), f"{where}: {sorted(ours)} != {sorted(theirs)}"
        for key in theirs:
            same(ours[key], theirs[key], f"{where}[{key}]")
    elif isinstance(theirs, np.ndarray):
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), where
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{where}: {ours!r} != {theirs!r}"


@pytest.mark.parametrize("budget", [None, "mask", "truncate"])
def test_steps_like_a_dummy_vec_env_of_single_envs(budget: str | None) -> None:
    kwargs = {} if budget is None else {"on_exceed": budget}
    ours = make_batched_vec_env(ENV_ID, N, seed=4, monitor=False,
                                **kwargs, **({} if budget is None else {"budget": BUDGETS}))
    theirs = dummy(**kwargs)
    theirs.seed(4)
    same(ours.reset(), theirs.reset(), "reset")
    rng = np.random.default_rng(0)
    dones = 0
    for t in range(250):
        actions = rng.integers(0, 2, (N, 8)).astype(np.float32)  # SB3 hands out floats
        ours.step_async(actions)
        theirs.step_async(actions)
        (o1, r1, d1, i1), (o2, r2, d2, i2) = ours.step_wait(), theirs.step_wait()
        same(o1, o2, f"obs {t}")
        same(r1, r2, f"rewards {t}")
        same(d1, d2, f"dones {t}")
        for k in range(N):
            same(i1[k], i2[k], f"info {t} env {k}")
        dones += int(d1.sum())
    assert dones > 100
    if budget is not None:
        same(get_action_masks(ours), get_action_masks(theirs), "action masks")


def test_ppo_and_maskable_ppo_train_on_it() -> None:
    venv = make_batched_vec_env(ENV_ID, 16, seed=0)
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=64, n_epochs=1, seed=0)
    model.learn(512)
    assert model.num_timesteps >= 512 and len(model.ep_info_buffer) > 0
    masked = make_batched_vec_env(ENV_ID, 8, seed=0, budget=0.01)
    masks = get_action_masks(masked)
    assert masks.shape == (8, 16) and masks[:, 0::2].all() and not masks[:, 1::2].all()
    model = MaskablePPO("MlpPolicy", masked, n_steps=16, batch_size=64, n_epochs=1, seed=0)
    model.learn(256)
    assert model.num_timesteps >= 256


def test_needs_same_step_autoreset() -> None:
    env = gym.make_vec(ENV_ID, 2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="SAME_STEP"):
        BatchedVecEnv(env)
    with pytest.raises(ValueError, match="no batched implementation"):
        make_batched_vec_env("CartPole-v1", 2)  # every cost_envs id has one
    venv = make_batched_vec_env(ENV_ID, 2, monitor=False)
    with pytest.raises(ValueError, match="set_attr"):
        venv.set_attr("x", 1, indices=[0])
    # A method runs once on the batched env: meant for sub-env 0, it would act on both.
    budgeted = make_batched_vec_env(ENV_ID, 2, monitor=False, budget=0.05)
    with pytest.raises(ValueError, match=r"env_method\('set_budget'\).*indices=\[0\]"):
        budgeted.env_method("set_budget", 0.01, indices=[0])
    assert budgeted.get_attr("budget") == [0.05, 0.05]
    assert len(budgeted.env_method("action_masks")) == 2


def test_module_example_runs() -> None:
    import doctest

    import agents.vec_env

    result = doctest.testmod(agents.vec_env, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
