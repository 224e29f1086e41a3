"""FastPPO trains SB3's PPO bit for bit; LoRA-guided PPO on it; RecurrentPPO on MultiBinary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from agents.callbacks import CostMetricsCallback
from agents.learners.common.fast_optim import clip_grad_norm, optimizer_step
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.common.recurrent import FloatActionBuffer, RecurrentPPO, use_float_actions
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.ppo import FastPPO, fast_bernoulli
from agents.learners.supervised import (
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


def test_a_global_module_hook_sees_every_layer_the_rollout_calls() -> None:
    """A global forward hook (a profiler, say) is called for the rollout's layers, as in SB3."""
    from stable_baselines3.common.callbacks import BaseCallback

    seen: list[str] = []

    class DuringRollouts(BaseCallback):  # the hook is up while the rollout runs only
        def _on_rollout_start(self) -> None:
            self.handle = torch.nn.modules.module.register_module_forward_hook(
                lambda module, args, out: seen.append(type(module).__name__))

        def _on_rollout_end(self) -> None:
            self.handle.remove()

        def _on_step(self) -> bool:
            return True

    model = FastPPO(AllocatorPolicy, make_batched_vec_env(ENV_ID, 2, seed=5),
                    policy_kwargs={"lora_rank": None}, seed=1, **SMALL)
    model.set_logger(Recorder())
    model.learn(128, callback=DuringRollouts())
    assert seen.count("Linear") >= 64 * 4  # each step: the encoder's two layers, two heads


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


def test_fused_loss_is_float_close_to_sb3_and_learns_the_same(monkeypatch) -> None:
    # The loss's gradient by hand, and (plain network) the network's, in numpy: the same
    # updates up to float rounding. After 4 updates of 3 epochs the weights agree to about
    # 1e-6 and the training curve is the same.
    from agents.learners.common.fused_numpy import NumpyFusedStep

    by_hand = []
    real_step = NumpyFusedStep.gradient
    monkeypatch.setattr(NumpyFusedStep, "gradient",
                        lambda *args: by_hand.append(1) or real_step(*args))
    fused, fused_logs, fused_history = _learn(FastPPO, 3, 4 * 64 * 3, fused_loss=True)
    # every minibatch but the first (Adam has no state before it) goes by hand
    assert len(by_hand) == 4 * 3 * (3 * 64 // 32) - 1  # updates x epochs x minibatches
    sb3, sb3_logs, sb3_history = _learn(PPO, 3, 4 * 64 * 3)
    ours, theirs = fused.policy.state_dict(), sb3.policy.state_dict()
    difference = max(float((ours[k] - theirs[k]).abs().max()) for k in theirs)
    assert 0 < difference < 1e-5 or difference == 0
    compared = 0
    for mine, reference in zip(fused_logs, sb3_logs, strict=True):
        for key in ("train/policy_gradient_loss", "train/value_loss", "train/entropy_loss"):
            if key in reference:  # the first dump comes before the first update
                assert mine[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key
                compared += 1
    assert compared == 9
    assert [h["rollout/success_rate"] for h in fused_history] == [
        h["rollout/success_rate"] for h in sb3_history]


def _a_minibatch(policy: Any) -> tuple[torch.Tensor, ...]:
    """A random ToolBench minibatch of 64 and the cost term's costs, for gradient checks."""
    from agents.learners.ppo import bernoulli_heads, bernoulli_log_prob

    obs, actions = torch.rand(64, 17), torch.randint(0, 2, (64, 8)).float()
    advantages, returns, old_values = torch.randn(64), torch.randn(64), torch.randn(64)
    costs = torch.rand(8)
    with torch.no_grad():
        logits, _ = bernoulli_heads(policy, obs)
        old_log_prob = bernoulli_log_prob(logits, actions) + 0.3 * torch.randn(64)
    return obs, actions, advantages, returns, old_values, costs, old_log_prob


def test_fused_loss_gradient_matches_autograd_with_every_term() -> None:
    from agents.learners.common.fused_loss import BernoulliPPOLoss
    from agents.learners.ppo import bernoulli_entropy, bernoulli_heads, bernoulli_log_prob

    torch.manual_seed(0)
    policy = policy_for(gym.make(ENV_ID), base=None)
    (obs, actions, advantages, returns, old_values, costs,
     old_log_prob) = _a_minibatch(policy)
    params = [p for p in policy.parameters() if p.requires_grad]

    def eager() -> torch.Tensor:
        logits, values = bernoulli_heads(policy, obs)
        values = values.flatten()
        ratio = torch.exp(bernoulli_log_prob(logits, actions) - old_log_prob)
        policy_loss = -torch.min(advantages * ratio,
                                 advantages * torch.clamp(ratio, 0.8, 1.2)).mean()
        values_pred = old_values + torch.clamp(values - old_values, -0.1, 0.1)
        value_loss = torch.nn.functional.mse_loss(returns, values_pred)
        cost_term = (torch.sigmoid(logits) * costs).sum(dim=1).mean()
        return (policy_loss - 0.01 * bernoulli_entropy(logits).mean() + 0.5 * value_loss
                + 0.3 * cost_term)

    settings = {"clip_range": 0.2, "clip_range_vf": 0.1, "ent_coef": 0.01, "vf_coef": 0.5,
                "aux_coef": 0.3, "costs": costs, "out": []}
    expected = torch.autograd.grad(eager(), params)
    logits, values = bernoulli_heads(policy, obs)
    loss = BernoulliPPOLoss.apply(logits, values, (actions, old_values, old_log_prob,
                                                   advantages, returns), settings)
    assert float(loss) == pytest.approx(float(eager()), rel=1e-6)
    for ours, theirs in zip(torch.autograd.grad(loss, params), expected, strict=True):
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    # a wrong sign anywhere (here: no value clipping) is caught
    settings["clip_range_vf"] = None
    logits, values = bernoulli_heads(policy, obs)
    loss = BernoulliPPOLoss.apply(logits, values, (actions, old_values, old_log_prob,
                                                   advantages, returns), settings)
    assert not all(torch.allclose(ours, theirs, rtol=1e-5, atol=1e-7) for ours, theirs in
                   zip(torch.autograd.grad(loss, params), expected, strict=True))


def test_the_plain_networks_backward_by_hand_is_autograds() -> None:
    # The fused update's last step (agents.learners.common.fused_network): every parameter's
    # gradient written by hand, for the PPO baseline's plain network only.
    from agents.learners.common.fused_network import TanhNetwork, fused_step
    from agents.learners.ppo import bernoulli_entropy, bernoulli_heads, bernoulli_log_prob

    torch.manual_seed(0)
    model = FastPPO(AllocatorPolicy, make_batched_vec_env(ENV_ID, 2, seed=5),
                    policy_kwargs={"lora_rank": None}, seed=1, **SMALL)
    policy = model.policy
    network = TanhNetwork.of(policy)
    assert network is not None and len(network.encoder) == 2
    (obs, actions, advantages, returns, old_values, costs,
     old_log_prob) = _a_minibatch(policy)
    params = list(policy.parameters())

    def eager() -> torch.Tensor:
        logits, values = bernoulli_heads(policy, obs)
        ratio = torch.exp(bernoulli_log_prob(logits, actions) - old_log_prob)
        policy_loss = -torch.min(advantages * ratio,
                                 advantages * torch.clamp(ratio, 0.8, 1.2)).mean()
        value_loss = torch.nn.functional.mse_loss(returns, values.flatten())
        cost_term = (torch.sigmoid(logits) * costs).sum(dim=1).mean()
        return (policy_loss - 0.01 * bernoulli_entropy(logits).mean() + 0.5 * value_loss
                + 0.3 * cost_term)

    expected = torch.autograd.grad(eager(), params)
    for param in params:  # stale values the backward must overwrite, not add to
        param.grad = torch.full_like(param, 7.0)
    settings = {"clip_range": 0.2, "clip_range_vf": None, "ent_coef": 0.01, "vf_coef": 0.5,
                "aux_coef": 0.3, "costs": costs, "out": []}
    loss = fused_step(network, obs, (actions, old_values, old_log_prob, advantages, returns),
                      settings)
    assert not loss.requires_grad and float(loss) == pytest.approx(float(eager()), rel=1e-6)
    assert len(settings["out"]) == 6
    for param, theirs in zip(params, expected, strict=True):
        assert torch.allclose(param.grad, theirs, rtol=1e-5, atol=1e-7)
    # Anything else keeps autograd: LoRA adapters (a frozen base), a frozen layer.
    assert TanhNetwork.of(policy_for(gym.make(ENV_ID), base=None)) is None
    policy.value_net.bias.requires_grad_(False)
    assert TanhNetwork.of(policy) is None


def test_train_and_configs_take_fused_loss_as_a_ppo_setting() -> None:
    from agents.learners.common.ppo_args import accepted
    from agents.learners.training import train

    assert accepted("ppo")["fused_loss"] is False and "fused_loss" in accepted("lora-ppo")
    settings = {"n_steps": 64, "batch_size": 32, "n_epochs": 2}
    plain = train(ENV_ID, "ppo", 512, seed=0, n_envs=2, ppo=settings)
    fused = train(ENV_ID, "ppo", 512, seed=0, n_envs=2, ppo={**settings, "fused_loss": True})
    ours, theirs = fused.policy.state_dict(), plain.policy.state_dict()
    difference = max(float((ours[k] - theirs[k]).abs().max()) for k in theirs)
    assert 0 < difference < 1e-4  # it reached the learner: float-close, not the same bits
    with pytest.raises(ValueError, match="fused_loss"):
        train(ENV_ID, "ppo", 512, ppo={"fused_loss": "yes"})


@pytest.mark.slow
def test_corl_and_the_multi_tenant_learners_train_sb3s_ppo_bit_for_bit(monkeypatch) -> None:
    # They train with FastPPO now; each must give the weights SB3's PPO gives.
    from agents.learners import corl
    from agents.learners import multitenant as tenant_training
    from agents.learners import multitenant_adapters as tenant_adapters

    def both(module: Any, run: Callable[[], Any]) -> tuple[Any, Any]:
        ours = run()
        monkeypatch.setattr(module, "FastPPO", PPO)
        theirs = run()
        monkeypatch.undo()
        return ours, theirs

    ours, theirs = both(corl, lambda: corl.train_shared_ppo(
        1024, seed=3, env_id="cost_envs/ExpertRouting-v1")[0])
    assert _same_tensors(ours.state_dict(), theirs.state_dict())
    small = {"n_steps": 128}
    ours, theirs = both(tenant_training, lambda: tenant_training.train_shared(
        "cost_envs/MultiTenantToolBench-v0", 1024, seed=2, ppo=small))
    assert _same_tensors(ours.policy.state_dict(), theirs.policy.state_dict())
    ours, theirs = both(tenant_adapters, lambda: tenant_adapters.train_adapters(
        theirs, 256, seed=1, ppo=small))
    for tenant in ours.policies:
        assert _same_tensors(ours.policies[tenant].state_dict(),
                             theirs.policies[tenant].state_dict())


@pytest.mark.parametrize("every_term", [False, True])
def test_the_numpy_fused_step_is_the_torch_fused_step(every_term: bool) -> None:
    # agents.learners.common.fused_numpy: the same loss, gradient, clipping and Adam step
    # as fused_step + FlatAdam, up to float rounding; with value clipping and the cost term.
    from agents.learners.common.fast_optim import FlatAdam
    from agents.learners.common.fused_network import TanhNetwork, fused_step
    from agents.learners.common.fused_numpy import NumpyFusedStep

    torch.manual_seed(0)
    states = []
    for use_numpy in (False, True):
        model = FastPPO(AllocatorPolicy, make_batched_vec_env(ENV_ID, 2, seed=5),
                        policy_kwargs={"lora_rank": None}, seed=1, **SMALL)
        policy, params = model.policy, list(model.policy.parameters())
        if not use_numpy:
            batch = _a_minibatch(policy)
        obs, actions, advantages, returns, old_values, costs, old_log_prob = batch
        sum((p * p).sum() for p in params).backward()  # Adam's state, a first step
        policy.optimizer.step()
        flat = FlatAdam.attach(policy.optimizer, params)
        network = TanhNetwork.of(policy)
        assert flat is not None and network is not None
        settings = {"clip_range": 0.2, "clip_range_vf": 0.1 if every_term else None,
                    "ent_coef": 0.01, "vf_coef": 0.5, "aux_coef": 0.3,
                    "costs": costs if every_term else None, "out": []}
        if use_numpy:
            step = NumpyFusedStep(network, flat, settings, True, 0.5)
            out = step.gradient(*(t.numpy() for t in (obs, actions, old_values, old_log_prob,
                                                     advantages, returns)))
            grad = flat.buffers["grad"].clone()
            step.update()
            logged = [float(out[i]) for i in (0, 1, 2, 3)]
            assert (out[4] is not None) == every_term
        else:
            normalized = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            loss = fused_step(network, obs, (actions, old_values, old_log_prob, normalized,
                                             returns), settings)
            grad = flat.buffers["grad"].clone()
            flat.clip(0.5)
            flat.step()
            logged = [float(loss), *(float(v) for v in settings["out"][:3])]
        buffers = [flat.buffers[k].clone() for k in ("param", "exp_avg", "exp_avg_sq")]
        flat.release()  # writes the step count into Adam's state
        states.append((logged, grad, *buffers,
                       [float(policy.optimizer.state[p]["step"]) for p in params]))
    (torch_logs, *torch_state, torch_steps), (numpy_logs, *numpy_state, numpy_steps) = states
    assert numpy_logs == pytest.approx(torch_logs, rel=1e-5)
    assert numpy_steps == torch_steps == [2.0] * len(torch_steps)
    for ours, theirs in zip(numpy_state, torch_state, strict=True):
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("clip_range_vf", [None, 0.1])
def test_the_exact_backward_is_autograds_bit_for_bit(monkeypatch, clip_range_vf) -> None:
    # agents.learners.common.exact_backward: SB3's loss and autograd's gradients of it,
    # replayed without a graph, to the last bit; on a minibatch of 48 (not a power of 2:
    # the means' divisions round) with advantages, ties and value clipping.
    from agents.learners.common.exact_backward import ExactStep
    from agents.learners.common.fused_network import TanhNetwork

    torch.manual_seed(0)
    model = FastPPO(AllocatorPolicy, make_batched_vec_env(ENV_ID, 2, seed=5),
                    policy_kwargs={"lora_rank": None}, seed=1, **SMALL)
    policy, params = model.policy, list(model.policy.parameters())
    obs, actions, advantages, returns, old_values, _, old_log_prob = (
        t[:48] for t in _a_minibatch(policy))
    old_values = old_values * 0.05  # some values inside the value clip range, some out
    model._fast_heads = True  # what train() sets for this policy
    logs: dict[str, list[torch.Tensor]] = {"aux": []}
    eager = model._eager_loss(obs, actions, old_values, old_log_prob, advantages, returns,
                              0.2, clip_range_vf, logs)
    expected = torch.autograd.grad(eager[0], params)
    for param in params:  # stale values the backward must overwrite, not add to
        param.grad = torch.full_like(param, 7.0)
    network = TanhNetwork.of(policy)
    assert network is not None
    step = ExactStep(network)
    ours = step.loss(obs, actions, old_values, old_log_prob, advantages, returns, 0.2,
                     clip_range_vf, model.ent_coef, model.vf_coef, True)
    assert all(torch.equal(a.detach(), b) for a, b in zip(eager, ours, strict=True))
    step.backward()
    for param, theirs in zip(params, expected, strict=True):
        assert torch.equal(param.grad, theirs)
    # FastPPO trains through it (every minibatch but the first, before Adam has state)
    calls = []
    real = ExactStep.backward
    monkeypatch.setattr(ExactStep, "backward", lambda self: calls.append(1) or real(self))
    _learn(FastPPO, 2, 2 * 64 * 2)
    assert len(calls) == 2 * 3 * (2 * 64 // 32) - 1
