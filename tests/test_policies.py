"""AllocatorPolicy: peft LoRA injected before the optimizer, what trains, and the traps."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from torch import nn

from agents.learners.common.adapters import (
    LoraSettings,
    adapted_linear,
    inject_lora,
    lora_parameter_names,
    verify_optimizer,
)
from agents.learners.common.policies import AllocatorPolicy, MlpEncoder, load_base, tanh_mlp
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import policy_for

torch.set_num_threads(1)

ENV_ID = "cost_envs/ToolBench-v0"
ADAPTERS = {f"features_extractor.net.{i}.lora_{ab}.default.weight"
            for i in (0, 2) for ab in ("A", "B")}
HEADS = {f"{head}.{tensor}" for head in ("action_net", "value_net")
         for tensor in ("weight", "bias")}
BASE = {f"features_extractor.net.{i}.base_layer.{tensor}"
        for i in (0, 2) for tensor in ("weight", "bias")}


@pytest.fixture
def env() -> gym.Env:
    return gym.make(ENV_ID)


def _observations(env: gym.Env, n: int = 32, seed: int = 0) -> torch.Tensor:
    env.observation_space.seed(seed)
    return torch.as_tensor(np.stack([env.observation_space.sample() for _ in range(n)]))


def _optimizer_ids(policy: AllocatorPolicy) -> list[int]:
    return [id(p) for group in policy.optimizer.param_groups for p in group["params"]]


def _randomize_adapters(policy: AllocatorPolicy, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if ".lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)


def test_lora_policy_optimizer_holds_exactly_adapters_and_heads(env: gym.Env) -> None:
    policy = policy_for(env)
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    frozen = {name for name, p in policy.named_parameters() if not p.requires_grad}
    assert trainable == ADAPTERS | HEADS
    assert frozen == BASE
    in_optimizer = _optimizer_ids(policy)
    assert len(in_optimizer) == len(set(in_optimizer))
    assert set(in_optimizer) == {id(p) for p in policy.parameters() if p.requires_grad}


def test_plain_policy_trains_every_parameter(env: gym.Env) -> None:
    from peft.tuners.lora import LoraLayer  # peft takes seconds to import: where used

    policy = policy_for(env, lora_rank=None)
    assert not any(isinstance(layer, LoraLayer) for layer in policy.modules())
    params = list(policy.parameters())
    assert all(p.requires_grad for p in params)
    assert sorted(_optimizer_ids(policy)) == sorted(id(p) for p in params)


def test_peft_lora_layers_have_rank_8_no_dropout_and_zero_b(env: gym.Env) -> None:
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    net = policy_for(env).features_extractor.net
    linears = [net[i] for i in (0, 2)]
    for layer in linears:
        assert isinstance(layer, LoraLinear)
        assert isinstance(layer, LoraLayer)
        assert layer.r == {"default": 8}
        assert isinstance(layer.lora_dropout["default"], nn.Identity)
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
        assert torch.count_nonzero(layer.lora_A["default"].weight) > 0


def test_fresh_adapter_leaves_pretrained_base_function_unchanged(env_id: str) -> None:
    env = gym.make(env_id)
    try:
        path = pretrained_base_path(env_id)
    except FileNotFoundError:  # bases are shipped for the LoRA paper's envs only
        pytest.skip(f"no pretrained base is shipped for {env_id}")
    policy = policy_for(env, base=str(path))
    state, config = load_base(path)
    plain = tanh_mlp(config["obs_dim"], config["hidden_sizes"])
    plain.load_state_dict(state)
    obs = _observations(env)
    with torch.no_grad():
        expected = plain(obs)
        assert torch.equal(policy.features_extractor(obs), expected)
        assert torch.equal(policy.features_extractor.net(obs), expected)


@pytest.mark.parametrize("build", ["policy", "sb3_ppo"])
def test_lora_injected_after_optimizer_is_caught(env: gym.Env, build: str) -> None:
    if build == "policy":
        policy = policy_for(env, lora_rank=None)
    else:
        policy = PPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, n_steps=64,
                     batch_size=32, device="cpu").policy
    verify_optimizer(policy, policy.optimizer)
    inject_lora(policy.features_extractor.net, LoraSettings())
    with pytest.raises(ValueError, match="not in the optimizer") as error:
        verify_optimizer(policy, policy.optimizer)
    message = str(error.value)
    missing = lora_parameter_names(policy)
    assert sorted(missing) == sorted(ADAPTERS)
    for name in missing:
        assert name in message
    # peft froze the base, which SB3's optimizer still holds
    assert "frozen but in the optimizer" in message
    for name in BASE:
        assert name in message


@pytest.mark.parametrize("lora_rank", [8, None])
def test_verify_optimizer_accepts_correctly_built_policy(env: gym.Env, lora_rank) -> None:
    policy = policy_for(env, lora_rank=lora_rank)
    verify_optimizer(policy, policy.optimizer)


def test_ortho_init_with_lora_is_refused(env: gym.Env) -> None:
    with pytest.raises(ValueError, match="ortho_init"):
        policy_for(env, ortho_init=True)


@pytest.mark.parametrize("fixed", [
    {"net_arch": [64]},
    {"features_extractor_class": MlpEncoder},
    {"features_extractor_kwargs": {}},
    {"share_features_extractor": False},
])
def test_architecture_kwargs_are_refused(env: gym.Env, fixed: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(fixed))):
        policy_for(env, **fixed)


@pytest.mark.parametrize("action_space", [spaces.Discrete(8), spaces.MultiDiscrete([2] * 8),
                                          spaces.Box(0.0, 1.0, (8,))])
def test_non_multibinary_action_space_is_refused(env: gym.Env, action_space: gym.Space) -> None:
    with pytest.raises(ValueError, match="MultiBinary"):
        AllocatorPolicy(env.observation_space, action_space, lambda _: 3e-4)


def test_non_flat_observation_space_is_refused() -> None:
    with pytest.raises(ValueError, match="flat Box"):
        AllocatorPolicy(spaces.Box(0.0, 1.0, (3, 4)), spaces.MultiBinary(4), lambda _: 3e-4)


@pytest.mark.parametrize("training", [False, True])
def test_adapted_linear_matches_peft_forward(env: gym.Env, training: bool) -> None:
    policy = policy_for(env)
    _randomize_adapters(policy)
    policy.set_training_mode(training)
    encoder = policy.features_extractor
    obs = _observations(env)
    with torch.no_grad():
        layer = encoder.net[0]
        assert torch.count_nonzero(layer.lora_B["default"].weight) > 0
        adapted = adapted_linear(layer, obs)
        # the adapter really contributes, so agreement is not just base == base
        assert not torch.allclose(adapted, layer.get_base_layer()(obs), atol=1e-3)
        torch.testing.assert_close(adapted, layer(obs), atol=1e-6, rtol=0)
        torch.testing.assert_close(encoder(obs), encoder.net(obs), atol=1e-6, rtol=0)


def test_log_probs_agree_between_rollout_and_update_modes(env: gym.Env) -> None:
    policy = policy_for(env)
    _randomize_adapters(policy)
    obs = _observations(env, n=64)
    policy.set_training_mode(False)
    with torch.no_grad():
        actions, _, rollout_log_prob = policy(obs)
        peft_eval = policy.features_extractor.net(obs)
    policy.set_training_mode(True)
    with torch.no_grad():
        _, update_log_prob, _ = policy.evaluate_actions(obs, actions)
        _, ppo_log_prob, _, _ = policy.evaluate_actions_and_probabilities(obs, actions)
        peft_train = policy.features_extractor.net(obs)
    torch.testing.assert_close(update_log_prob, rollout_log_prob, atol=1e-6, rtol=0)
    torch.testing.assert_close(ppo_log_prob, rollout_log_prob, atol=1e-6, rtol=0)
    # peft's own path (used by merged or disabled adapters) must not drop out either
    torch.testing.assert_close(peft_train, peft_eval, atol=0, rtol=0)


def test_train_only_rejects_unknown_group(env: gym.Env) -> None:
    policy = policy_for(env)
    with pytest.raises(ValueError, match="'encoder'"):
        policy.train_only({"adapter": 1.0, "encoder": 1.0})


@pytest.mark.parametrize("scale", [0, 0.0, -1.0, True])
def test_train_only_rejects_non_positive_multiplier(env: gym.Env, scale) -> None:
    policy = policy_for(env)
    with pytest.raises(ValueError, match="'value'"):
        policy.train_only({"adapter": 1.0, "value": scale})


def test_train_only_freezes_everything_else(env: gym.Env) -> None:
    policy = policy_for(env)
    policy.train_only({"value": 2.0})
    value = {id(p) for _, p in policy.parameter_groups()["value"]}
    assert {id(p) for p in policy.parameters() if p.requires_grad} == value
    assert set(_optimizer_ids(policy)) == value


def test_set_learning_rate_scales_each_group(env: gym.Env) -> None:
    policy = policy_for(env)
    policy.train_only({"adapter": 1.0, "action": 0.5, "value": 4.0})
    policy.set_learning_rate(1e-3)
    rates = {group["name"]: group["lr"] for group in policy.optimizer.param_groups}
    assert rates == pytest.approx({"adapter": 1e-3, "action": 5e-4, "value": 4e-3})


# ------------------------------------------------------- a base handed over as tensors
def test_base_as_tensors_gives_the_same_network_as_the_file() -> None:
    env = gym.make("cost_envs/FlightPlanner-v0")
    path = pretrained_base_path("cost_envs/FlightPlanner-v0")
    state, config = load_base(path)
    obs = _observations(env, n=64)
    policies = []
    for base in (str(path), (state, config)):
        torch.manual_seed(0)  # the same LoRA initialisation for both
        policies.append(policy_for(env, base=base))
    from_file, from_tensors = policies
    assert from_tensors.base is not None
    for name, tensor in from_file.state_dict().items():
        assert torch.equal(tensor, from_tensors.state_dict()[name]), name
    with torch.no_grad():
        assert torch.equal(from_file.action_probabilities(obs),
                           from_tensors.action_probabilities(obs))
    # the policy copied the tensors: changing the caller's state changes nothing
    state["0.weight"].add_(1.0)
    with torch.no_grad():
        assert torch.equal(from_file.action_probabilities(obs),
                           from_tensors.action_probabilities(obs))


def test_base_as_tensors_straight_from_pretraining() -> None:
    from agents.learners.pretrain import pretrain_base

    env = gym.make(ENV_ID)
    state, config = pretrain_base(ENV_ID, n_pools=2, episodes=3, steps=5, hidden_sizes=(16,))
    encoder = MlpEncoder(env.observation_space, hidden_sizes=(16,), lora_rank=None,
                         base=(state, config))
    for name, tensor in state.items():
        assert torch.equal(encoder.net.state_dict()[name], tensor), name
    # and SB3 takes it through policy_kwargs like a path
    model = PPO(AllocatorPolicy, env, n_steps=32, batch_size=32, device="cpu",
                policy_kwargs={"hidden_sizes": (16,), "base": (state, config)})
    assert torch.equal(model.policy.features_extractor.net[0].get_base_layer().weight,
                       state["0.weight"])


@pytest.mark.parametrize(("base", "pattern"), [
    (({}, {"obs_dim": 17, "hidden_sizes": [64, 64]}), r"in memory.*missing \['0\.bias'"),
    (({"0.weight": torch.zeros(64, 17)}, {"hidden_sizes": [64, 64]}),
     r"in memory.*missing keys \['obs_dim'\]"),
    ((None, None), r"in memory.*expected an object"),
    (42, r"base: expected a path .* or a \(state dict, config\) pair, got int"),
])
def test_base_as_tensors_is_checked_like_a_file(env: gym.Env, base, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        policy_for(env, base=base)
