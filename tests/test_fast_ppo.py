"""FastPPO trains SB3's PPO bit for bit; LoRA-guided PPO on it; RecurrentPPO on MultiBinary."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from agents.callbacks import CostMetricsCallback
from agents.lora.fast_optim import clip_grad_norm, optimizer_step
from agents.lora.fast_ppo import FastPPO, fast_bernoulli
from agents.lora.lora_ppo import LoraGuidedPPO
from agents.lora.policies import AllocatorPolicy
from agents.lora.recurrent import FloatActionBuffer, RecurrentPPO, use_float_actions
from agents.lora.supervised import (
    SupervisedConfig,
    greedy_traces,
    policy_for,
    relative_costs,
    train_supervised,
)
from agents.vec_env import make_batched_vec_env

torch.set_num_threads(1)

ENV_ID = "cost_envs/ToolBench-v0"
SMALL = {"n_steps": 64, "batch_size": 32, "n_epochs": 3, "device": "cpu"}


class Recorder(Logger):
    """Keeps every dump's key -> value, timing keys aside."""

    def __init__(self) -> None:
        super().__init__(folder=None, output_formats=[])
        self.dumps: list[dict[str, Any]] = []

    def dump(self, step: int = 0) -> None:
        self.dumps.append({k: v for k, v in self.name_to_value.items()
                           if not k.startswith("time/")})
        super().dump(step)


def _learn(cls: type, n_envs: int, steps: int, **kwargs: Any,
           ) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    model = cls(AllocatorPolicy, make_batched_vec_env(ENV_ID, n_envs, seed=5),
                policy_kwargs={"lora_rank": None}, seed=1, **{**SMALL, **kwargs})
    logger = Recorder()
    model.set_logger(logger)
    callback = CostMetricsCallback()
    model.learn(steps, callback=callback)
    return model, logger.dumps, callback.history


def _same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("n_envs", "kwargs"), [
    (3, {}),
    (1, {"batch_size": 48, "clip_range_vf": 0.1}),  # a short last minibatch, value clipping
    (2, {"target_kl": 0.005}),  # early stopping on the KL estimate
])
def test_fast_ppo_trains_sb3_ppo_bit_for_bit(n_envs: int, kwargs: dict[str, Any]) -> None:
    ours, our_logs, our_history = _learn(FastPPO, n_envs, 4 * 64 * n_envs, **kwargs)
    sb3, sb3_logs, sb3_history = _learn(PPO, n_envs, 4 * 64 * n_envs, **kwargs)
    assert fast_bernoulli(ours.policy)
    assert _same_tensors(ours.policy.state_dict(), sb3.policy.state_dict())
    ours_state = ours.policy.optimizer.state_dict()["state"]
    sb3_state = sb3.policy.optimizer.state_dict()["state"]
    for key in sb3_state:
        assert _same_tensors(ours_state[key], sb3_state[key])
    assert our_logs == sb3_logs and len(our_logs) == 4
    assert our_history == sb3_history
    # it learned something: the weights moved from their initialisation
    fresh = FastPPO(AllocatorPolicy, make_batched_vec_env(ENV_ID, n_envs, seed=5),
                    policy_kwargs={"lora_rank": None}, seed=1, **{**SMALL, **kwargs})
    assert not _same_tensors(fresh.policy.state_dict(), ours.policy.state_dict())


def test_a_policy_off_the_fast_path_trains_through_sb3s_own_code() -> None:
    # A policy overriding evaluate_actions is used as it is (SB3's rollout and update
    # code); SB3's MlpPolicy, with hidden layers in its MlpExtractor, is on the fast path.
    class Overridden(AllocatorPolicy):
        def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor) -> Any:
            return super().evaluate_actions(obs, actions)

    models = []
    for cls, policy in ((FastPPO, Overridden), (PPO, AllocatorPolicy), (FastPPO, "MlpPolicy"),
                        (PPO, "MlpPolicy")):
        model = cls(policy, make_batched_vec_env(ENV_ID, 2, seed=5), seed=1, **SMALL)
        model.set_logger(Recorder())
        model.learn(256)
        models.append(model)
    assert not fast_bernoulli(models[0].policy) and fast_bernoulli(models[2].policy)
    state = [model.policy.state_dict() for model in models]
    assert _same_tensors(state[0], state[1])
    assert _same_tensors(state[2], state[3])


def test_clip_and_adam_step_are_torchs() -> None:
    torch.manual_seed(0)
    shapes = [(16, 5), (16,), (3, 16), (3,), (1,)]
    twins = []
    for _ in range(2):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
        twins.append((params, torch.optim.Adam(params, lr=1e-3, eps=1e-5)))
    for step in range(50):
        grads = [torch.randn(shape) * 10.0 ** (step % 5 - 3) for shape in shapes]
        for index, (params, optimizer) in enumerate(twins):
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad.clone()
            if index == 0:
                torch.nn.utils.clip_grad_norm_(params, 0.5)
                optimizer.step()
            else:
                clip_grad_norm(params, 0.5)
                optimizer_step(optimizer)
    for theirs, ours in zip(twins[0][0], twins[1][0], strict=True):
        assert torch.equal(theirs, ours)


def test_lora_guided_ppo_on_fast_ppo_trains_only_adapter_and_value_groups() -> None:
    env = gym.make(ENV_ID)
    torch.manual_seed(0)
    supervised = policy_for(env, base=None)
    config = SupervisedConfig(episodes=20, epochs=2, batch_size=64)
    train_supervised(supervised, greedy_traces(env, 20, seed=1), relative_costs(env), config,
                     seed=0)
    model = LoraGuidedPPO.from_supervised(supervised, make_batched_vec_env(ENV_ID, 2, seed=5),
                                          learning_rate=1e-4, seed=0, **SMALL)
    assert isinstance(model, FastPPO) and fast_bernoulli(model.policy)
    logger = Recorder()
    model.set_logger(logger)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(256)
    groups = model.policy.parameter_groups()
    for name, param in groups["adapter"] + groups["value"]:
        assert not torch.equal(param, before[name]), f"{name} did not train"
    for name, param in groups["base"] + groups["action"]:
        assert torch.equal(param, before[name]), f"frozen {name} changed"
    assert logger.dumps[-1]["train/cost_term"] > 0


# ------------------------------------------------------------------ RecurrentPPO
@pytest.mark.parametrize("batched", [False, True])
def test_recurrent_ppo_trains_and_acts_on_multibinary(batched: bool) -> None:
    env = make_batched_vec_env(ENV_ID, 3, seed=0) if batched else gym.make(ENV_ID)
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=32, n_epochs=2, seed=0,
                         device="cpu")
    assert isinstance(model.rollout_buffer, FloatActionBuffer)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(3 * 32 * model.n_envs)
    assert model.num_timesteps == 3 * 32 * model.n_envs
    assert model.rollout_buffer.actions.dtype == np.float32
    moved = [k for k, v in model.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert any("lstm_actor" in k for k in moved) and any("action_net" in k for k in moved)
    venv = model.get_env()
    obs, state = venv.reset(), None
    starts = np.ones(venv.num_envs, dtype=bool)
    m = venv.action_space.n
    for _ in range(10):
        actions, state = model.predict(obs, state=state, episode_start=starts)
        assert actions.shape == (venv.num_envs, m)
        assert set(np.unique(actions)) <= {0, 1}
        obs, _, starts, _ = venv.step(actions)


def test_sb3_contribs_recurrent_ppo_is_fixed_by_use_float_actions() -> None:
    from sb3_contrib import RecurrentPPO as ContribRecurrentPPO

    model = ContribRecurrentPPO("MlpLstmPolicy", gym.make(ENV_ID), n_steps=16, batch_size=16,
                                n_epochs=1, seed=0, device="cpu")
    with pytest.raises(RuntimeError, match="can't be cast"):
        model.learn(16)  # the bug this module works around
    model = use_float_actions(ContribRecurrentPPO("MlpLstmPolicy", gym.make(ENV_ID),
                                                  n_steps=16, batch_size=16, n_epochs=1,
                                                  seed=0, device="cpu"))
    model.learn(32)
    assert model.num_timesteps == 32
