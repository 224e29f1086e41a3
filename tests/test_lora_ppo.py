"""LoRA-guided PPO: only adapters and the value head move, the cost term bites; train()."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents import seeds
from agents.callbacks import CostMetricsCallback
from agents.learners import training
from agents.learners.common.adapters import has_lora
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.supervised import (
    SupervisedConfig,
    greedy_traces,
    policy_for,
    relative_costs,
    train_supervised,
)

torch.set_num_threads(1)

ENV_ID = "cost_envs/ToolBench-v0"
TINY_PPO = {"n_steps": 64, "batch_size": 32, "device": "cpu"}
TINY_SUPERVISED = SupervisedConfig(episodes=20, epochs=3, batch_size=64)


def _supervised(env: gym.Env, seed: int = 0) -> tuple[AllocatorPolicy, torch.Tensor]:
    """A briefly supervised LoRA policy on a random base, and the observations it saw."""
    torch.manual_seed(seed)
    policy = policy_for(env, base=None)
    traces = greedy_traces(env, TINY_SUPERVISED.episodes, seed=123)
    train_supervised(policy, traces, relative_costs(env), TINY_SUPERVISED, seed=seed)
    return policy, torch.as_tensor(traces.observations)


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def test_learning_moves_only_adapters_and_value_head(env_id: str) -> None:
    env = gym.make(env_id)
    supervised, _ = _supervised(env)
    supervised_before = _snapshot(supervised)
    model = LoraGuidedPPO.from_supervised(supervised, env, learning_rate=1e-4,
                                          value_lr_scale=3.0, seed=0, **TINY_PPO)
    before = _snapshot(model.policy)
    model.learn(256)
    groups = model.policy.parameter_groups()
    assert len(groups["adapter"]) == 4
    for name, param in groups["adapter"] + groups["value"]:
        assert not torch.equal(param, before[name]), f"{name} did not train"
    for name, param in groups["base"] + groups["action"]:
        assert torch.equal(param, before[name]), f"frozen {name} changed"
    # the warm start is a copy: learning leaves the supervised policy alone
    for name, tensor in supervised.state_dict().items():
        assert torch.equal(tensor, supervised_before[name]), name

    optimizer_groups = {group["name"]: group for group in model.policy.optimizer.param_groups}
    assert set(optimizer_groups) == {"adapter", "value"}
    for name in ("adapter", "value"):
        assert [id(p) for p in optimizer_groups[name]["params"]] == [
            id(p) for _, p in groups[name]]
    assert optimizer_groups["adapter"]["lr"] == pytest.approx(1e-4)
    assert optimizer_groups["value"]["lr"] == pytest.approx(3e-4)
    trainable = {id(p) for p in model.policy.parameters() if p.requires_grad}
    assert trainable == {id(p) for _, p in groups["adapter"] + groups["value"]}


def test_action_lr_scale_trains_the_action_head_and_never_the_base() -> None:
    env = gym.make(ENV_ID)
    supervised, _ = _supervised(env)
    model = LoraGuidedPPO.from_supervised(supervised, env, learning_rate=1e-4,
                                          action_lr_scale=2.0, seed=0, **TINY_PPO)
    before = _snapshot(model.policy)
    model.learn(256)
    groups = model.policy.parameter_groups()
    for name, param in groups["adapter"] + groups["value"] + groups["action"]:
        assert not torch.equal(param, before[name]), f"{name} did not train"
    for name, param in groups["base"]:
        assert torch.equal(param, before[name]), f"frozen {name} changed"
    rates = {group["name"]: group["lr"] for group in model.policy.optimizer.param_groups}
    assert rates == pytest.approx({"adapter": 1e-4, "value": 6e-4, "action": 2e-4})
    with pytest.raises(ValueError, match="action_lr_scale"):
        LoraGuidedPPO.from_supervised(supervised, env, action_lr_scale=0.0, **TINY_PPO)


def test_from_supervised_copies_every_tensor() -> None:
    env = gym.make(ENV_ID)
    supervised, _ = _supervised(env)
    model = LoraGuidedPPO.from_supervised(supervised, env, seed=0, **TINY_PPO)
    expected = supervised.state_dict()
    copied = model.policy.state_dict()
    assert copied.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(copied[name], tensor), name
    # not vacuous: a fresh model starts from zero lora_B and a different random base
    fresh = LoraGuidedPPO(AllocatorPolicy, env, seed=1, **TINY_PPO).policy.state_dict()
    assert any(not torch.equal(fresh[name], tensor) for name, tensor in expected.items()
               if "lora_B" in name)
    assert any(not torch.equal(fresh[name], tensor) for name, tensor in expected.items()
               if "base_layer" in name)


def test_cost_term_lowers_expected_cost_of_calls(env_id: str) -> None:
    env = gym.make(env_id)
    supervised, obs = _supervised(env)
    costs = torch.as_tensor(relative_costs(env))
    expected_cost = {}
    for cost_coef in (0.0, 50.0):
        model = LoraGuidedPPO.from_supervised(supervised, env, cost_coef=cost_coef, seed=0,
                                              **TINY_PPO)
        model.learn(512)
        with torch.no_grad():
            probs = model.policy.action_probabilities(obs)
        expected_cost[cost_coef] = float((probs * costs).sum(dim=1).mean())
    # a seed sweep (0-5, both envs) gave gaps of 0.05-0.10 at 512 steps
    assert expected_cost[50.0] < expected_cost[0.0] - 0.02, expected_cost


def test_policy_without_lora_is_refused() -> None:
    env = gym.make(ENV_ID)
    with pytest.raises(ValueError, match="LoRA"):
        LoraGuidedPPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, **TINY_PPO)
    with pytest.raises(ValueError, match="LoRA"):
        LoraGuidedPPO("MlpPolicy", env, **TINY_PPO)
    with pytest.raises(ValueError, match="LoRA"):
        LoraGuidedPPO.from_supervised(policy_for(env, lora_rank=None), env, **TINY_PPO)


@pytest.mark.parametrize("kwargs", [{"cost_coef": -0.1}, {"value_lr_scale": 0.0}])
def test_negative_cost_coef_or_value_scale_is_refused(kwargs: dict) -> None:
    env = gym.make(ENV_ID)
    with pytest.raises(ValueError, match=repr(next(iter(kwargs.values())))):
        LoraGuidedPPO(AllocatorPolicy, env, **kwargs, **TINY_PPO)


class _Recorder(CostMetricsCallback):
    """Remembers the policy's weights and the first observation when training starts."""

    start_state: dict[str, torch.Tensor] = {}
    first_obs: np.ndarray | None = None

    def _on_training_start(self) -> None:
        super()._on_training_start()
        type(self).start_state = _snapshot(self.model.policy)
        # SB3 resets the env in _setup_learn, before this hook
        type(self).first_obs = np.array(self.model._last_obs[0])


def test_train_ppo_trains_every_group_on_non_evaluation_tasks(monkeypatch) -> None:
    monkeypatch.setattr(training, "CostMetricsCallback", _Recorder)
    seed = 3
    trained = training.train(ENV_ID, "ppo", timesteps=1, seed=seed)
    assert trained.timesteps == training.PPO_SETTINGS["n_steps"]  # one whole rollout
    assert trained.base is None
    assert not has_lora(trained.policy)
    groups = trained.policy.parameter_groups()
    assert not groups["adapter"]
    for name, param in groups["base"] + groups["action"] + groups["value"]:
        assert not torch.equal(param, _Recorder.start_state[name]), f"{name} did not train"

    env = gym.make(ENV_ID)
    train_obs, _ = env.reset(seed=seeds.TRAIN_TASK_SEED + seed)
    np.testing.assert_array_equal(_Recorder.first_obs, train_obs)
    # evaluate() resets with seed 0 once, then continues the task stream
    evaluation = [env.reset(seed=0)[0]] + [env.reset()[0] for _ in range(49)]
    assert not any(np.array_equal(train_obs, obs) for obs in evaluation)


def test_train_lora_runs_no_rl() -> None:
    trained = training.train(ENV_ID, "lora", timesteps=1000, seed=0,
                             supervised=SupervisedConfig(episodes=5, epochs=1))
    assert trained.timesteps == 0
    assert trained.history == []
    assert trained.base == "pretrained"
    assert has_lora(trained.policy)
    lora_b = [p for name, p in trained.policy.parameter_groups()["adapter"] if "lora_B" in name]
    assert all(torch.count_nonzero(p) > 0 for p in lora_b)  # the supervised stage ran


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"method": "sac"}, "'sac'"),
    ({"timesteps": 0}, "timesteps: expected an int >= 1, got 0"),
    ({"seed": -1}, "seed: expected an int >= 0, got -1"),
])
def test_train_rejects_bad_arguments(kwargs: dict, named: str) -> None:
    arguments = {"env_id": ENV_ID, "method": "lora", "timesteps": 1, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=named):
        training.train(**arguments)


def test_train_applies_ppo_overrides_and_refuses_unknown_ones() -> None:
    trained = training.train(ENV_ID, "ppo", timesteps=1, ppo={"n_steps": 128,
                                                             "learning_rate": 1e-3})
    assert trained.timesteps == 128  # one whole rollout of the overridden length
    with pytest.raises(ValueError, match=r"ppo: unknown hyperparameter\(s\) \['n_step'\] "
                       r"for ppo; valid: .*'n_steps'"):
        training.train(ENV_ID, "ppo", timesteps=1, ppo={"n_step": 128})
