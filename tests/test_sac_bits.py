"""Issue #38's discrete SAC per bit (agents.learners.sac_bits): its mechanisms and wiring."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

import cost_envs  # noqa: F401  # registers the ids
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.sac_bits import (
    SACPerBit,
    actor_objective,
    bit_entropies,
    bit_log_probs,
    soft_targets,
    temperature_objective,
)
from agents.learners.training import quiet_logger, train

torch.set_num_threads(1)
ENV_ID = "cost_envs/ToolBench-v0"


class Bandit(gym.Env[np.ndarray, np.ndarray]):
    """One-step episodes in one of two states (one-hot); each bit pays its state's weight.

    The best action calls bits 0 and 2 in state 0 and bit 1 in state 1.
    """

    WEIGHTS = np.array([[1.0, -1.0, 0.5], [-0.5, 1.0, -1.0]])
    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.MultiBinary(3)

    def __init__(self) -> None:
        self.state = 0

    def _obs(self) -> np.ndarray:
        return np.eye(2, dtype=np.float32)[self.state]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = float(self.WEIGHTS[self.state] @ np.asarray(action, dtype=np.float64))
        return self._obs(), reward, True, False, {}


def bandit_model(seed: int = 0, **kwargs: Any) -> SACPerBit:
    set_random_seed(seed)
    venv = DummyVecEnv([Bandit for _ in range(4)])
    venv.seed(seed)
    settings = {"learning_starts": 64, "batch_size": 64, "rollout_steps": 16,
                "learning_rate": 3e-3, "tau": 0.05, **kwargs}
    model = SACPerBit(AllocatorPolicy, venv, policy_kwargs={"hidden_sizes": (16,)}, **settings)
    quiet_logger(model)
    return model


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------------ the per-bit policy
def test_each_bit_is_a_bernoulli_of_its_logit() -> None:
    logits = torch.tensor([[0.0, 2.0, -1.0]])
    log_pi = bit_log_probs(logits)
    p = torch.sigmoid(logits)
    torch.testing.assert_close(log_pi[..., 1], p.log())
    torch.testing.assert_close(log_pi[..., 0], (1 - p).log())
    torch.testing.assert_close(bit_entropies(logits),
                               -(p * p.log() + (1 - p) * (1 - p).log()))
    assert bit_entropies(torch.zeros(1, 1)).item() == pytest.approx(math.log(2))


def test_actions_are_drawn_from_the_policy_and_the_greedy_one_is_exported() -> None:
    model = bandit_model()
    with torch.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.copy_(torch.tensor([2.0, -1.0, 0.0]))
    actions = model.behaviour(np.zeros((20_000, 2), np.float32), 0.5)
    expected = [_sigmoid(2.0), _sigmoid(-1.0), 0.5]
    np.testing.assert_allclose(actions.mean(axis=0), expected, atol=0.012)
    obs = np.eye(2, dtype=np.float32)
    assert model.predict(obs)[0].tolist() == [[1, 0, 0], [1, 0, 0]]  # a tie goes to 0
    assert np.array_equal(model.policy.predict(obs, deterministic=True)[0],
                          model.predict(obs)[0])


# ------------------------------------------------------------------ targets and losses
def test_soft_target_is_each_branchs_expectation_of_min_q_minus_alpha_log_pi() -> None:
    # one transition, two bits: pi_0(1) = sigmoid(0) = 0.5, pi_1(1) = sigmoid(ln 3) = 0.75
    next_logits = torch.tensor([[0.0, math.log(3.0)]])
    q1 = torch.tensor([[[1.0, 4.0], [2.0, -1.0]]])
    q2 = torch.tensor([[[3.0, 2.0], [0.0, 5.0]]])   # min: (1, 2), (0, -1)
    alpha = torch.tensor([0.1, 0.2])
    returns, discounts = torch.tensor([0.5]), torch.tensor([0.9])
    v0 = 0.5 * (1.0 - 0.1 * math.log(0.5)) + 0.5 * (2.0 - 0.1 * math.log(0.5))
    v1 = 0.25 * (0.0 - 0.2 * math.log(0.25)) + 0.75 * (-1.0 - 0.2 * math.log(0.75))
    expected = torch.tensor([[0.5 + 0.9 * v0, 0.5 + 0.9 * v1]])
    got = soft_targets(next_logits, q1, q2, alpha, returns, discounts)
    torch.testing.assert_close(got, expected)
    mean = soft_targets(next_logits, q1, q2, alpha, returns, discounts, mean_targets=True)
    torch.testing.assert_close(mean, expected.mean().expand(1, 2))
    # a terminated transition does not bootstrap; a shared temperature broadcasts
    ended = soft_targets(next_logits, q1, q2, torch.tensor([0.1]), returns, torch.zeros(1))
    torch.testing.assert_close(ended, torch.tensor([[0.5, 0.5]]))


def test_actor_objective_sums_each_bits_expected_alpha_log_pi_minus_q() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]])
    q_min = torch.tensor([[[1.0, 2.0], [0.0, -1.0]], [[0.5, 0.0], [1.0, 1.0]]])
    alpha = torch.tensor([0.1, 0.2])

    def bit(p1: float, q0: float, q1: float, a: float) -> float:
        return ((1 - p1) * (a * math.log(1 - p1) - q0) + p1 * (a * math.log(p1) - q1))

    row0 = bit(0.5, 1.0, 2.0, 0.1) + bit(0.75, 0.0, -1.0, 0.2)
    row1 = bit(0.75, 0.5, 0.0, 0.1) + bit(0.5, 1.0, 1.0, 0.2)
    got = actor_objective(logits, q_min, alpha)
    assert got.item() == pytest.approx((row0 + row1) / 2, abs=1e-6)
    # its gradient moves each bit toward its better value: bit 0 of row 0 toward 1
    logits.requires_grad_(True)
    actor_objective(logits, q_min, torch.zeros(2)).backward()
    assert logits.grad is not None and logits.grad[0, 0] < 0 and logits.grad[0, 1] > 0


def test_temperature_falls_above_the_target_entropy_and_rises_below() -> None:
    target = 0.2 * math.log(2)
    for entropy, direction in ((0.6, -1), (0.05, +1)):
        log_alpha = torch.zeros(3, requires_grad=True)
        optimizer = torch.optim.Adam([log_alpha], lr=0.1)
        for _ in range(5):
            optimizer.zero_grad()
            temperature_objective(log_alpha, torch.full((8, 3), entropy), target).backward()
            optimizer.step()
        assert (torch.sign(log_alpha.detach()) == direction).all()
    # per bit: each temperature follows its own bit's entropy
    log_alpha = torch.zeros(2, requires_grad=True)
    temperature_objective(log_alpha, torch.tensor([[0.6, 0.05]]), target).backward()
    assert log_alpha.grad is not None and log_alpha.grad[0] > 0 > log_alpha.grad[1]


# ------------------------------------------------------------------ the update
def test_each_loss_reaches_only_its_own_parameters() -> None:
    model = bandit_model()
    model.learn(128)
    obs, actions, returns, next_obs, discounts = model.replay.sample(model._rng, 32)
    policy = dict(model.policy.named_parameters())
    groups = {"actor": [p for n, p in policy.items() if not n.startswith("value_net.")],
              "value": [p for n, p in policy.items() if n.startswith("value_net.")],
              "critics": model.critic_parameters,
              "targets": [*model.q1_target.parameters(), *model.q2_target.parameters()],
              "alpha": [model.log_alpha]}

    def reached(loss: torch.Tensor) -> set[str]:
        for params in groups.values():
            for p in params:
                p.grad = None
        loss.backward()
        return {name for name, params in groups.items()
                if any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)}

    assert reached(model.critic_loss(obs, actions, returns, next_obs, discounts)) == {"critics"}
    actor, entropies = model.actor_loss(obs)
    assert reached(actor) == {"actor"}
    assert reached(temperature_objective(model.log_alpha, entropies,
                                         model.target_entropy)) == {"alpha"}
    # the optimisers hold exactly those: the value head and the targets never train
    actor_params = {id(p) for g in model.actor_optimizer.param_groups for p in g["params"]}
    assert actor_params == {id(p) for p in groups["actor"]}
    assert not any(p.requires_grad for p in groups["value"] + groups["targets"])


def test_the_critics_take_their_own_widths_and_the_actor_stays_the_allocator() -> None:
    wide, plain = bandit_model(critic_hidden_sizes=[96, 48]), bandit_model()
    assert [layer.out_features for layer in wide.q1.torso if hasattr(layer, "out_features")] \
        == [96, 48]
    assert [layer.out_features for layer in wide.q2_target.torso
            if hasattr(layer, "out_features")] == [96, 48]
    # the actor (the allocator that is saved and served) keeps the policy's widths
    assert {n: p.shape for n, p in wide.policy.named_parameters()} \
        == {n: p.shape for n, p in plain.policy.named_parameters()}


def test_a_gradient_step_moves_the_targets_by_polyak_and_the_temperature_toward_target() -> None:
    model = bandit_model(tau=0.25)
    model.learn(128)
    old_targets = [p.clone() for p in model.q1_target.parameters()]
    alpha_before = model.alpha().clone()
    model.train_step()
    for old, online, new in zip(old_targets, model.q1.parameters(),
                                model.q1_target.parameters(), strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online.detach())
    # the young policy is near uniform (entropy ~ log 2 > 0.2 log 2): every temperature falls
    assert (model.alpha() < alpha_before).all()


def test_sac_learns_the_best_action_of_each_state_of_a_bandit_bit_for_bit() -> None:
    model = bandit_model().learn(3072)
    obs = np.eye(2, dtype=np.float32)
    assert model.predict(obs)[0].tolist() == [[1, 0, 1], [0, 1, 0]]
    # rewards of order 1 sharpen the policy past the target entropy, so the temperatures
    # rose from their start to pull it back (they fall while it is above: the test above)
    entropy = bit_entropies(model.logits(torch.as_tensor(obs))).mean().item()
    assert entropy < model.target_entropy and (model.alpha() > model.initial_alpha).all()
    # the same seed trains the same weights
    again = bandit_model().learn(3072)
    for net, other in ((model.policy, again.policy), (model.q1, again.q1),
                       (model.q2_target, again.q2_target)):
        assert all(torch.equal(v, other.state_dict()[k]) for k, v in net.state_dict().items())
    assert torch.equal(model.log_alpha, again.log_alpha)


# ------------------------------------------------------------------ wiring
def test_train_dispatches_sac_bits_and_the_model_saves_and_loads(tmp_path) -> None:
    from agents.learners.checkpoints import load_allocator, save_allocator
    from agents.learners.common.ppo_args import accepted
    from agents.learners.hyperparameter_names import accepted_names

    settings = {"rollout_steps": 16, "learning_starts": 128, "batch_size": 64}
    trained = train(ENV_ID, "sac-bits", 512, n_envs=8, ppo=settings)
    assert trained.method == "sac-bits" and trained.timesteps == 512 and trained.base is None
    assert len(trained.history) == 4  # a row per rollout of 8 x 16 steps
    loaded = load_allocator(save_allocator(trained, tmp_path / "model"))
    obs = np.random.default_rng(0).random((64, 17), dtype=np.float32)
    assert np.array_equal(loaded.predict(obs)[0], trained.predict(obs)[0])
    assert accepted_names("sac-bits") == frozenset(accepted("sac-bits"))
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        train(ENV_ID, "sac-bits", 64, ppo={"exploration_fraction": 0.2})  # BDQ's, not SAC's
    # a list hyperparameter passes train's checks as a list, a bad one names itself
    wide = train(ENV_ID, "sac-bits", 64, ppo={**settings, "critic_hidden_sizes": [8, 4]})
    assert isinstance(wide.policy, AllocatorPolicy)
    with pytest.raises(ValueError, match=r"ppo: critic_hidden_sizes\[0\]"):
        train(ENV_ID, "sac-bits", 64, ppo={"critic_hidden_sizes": [0]})


@pytest.mark.parametrize(("key", "value", "message"), [
    ("tau", 0.0, r"SACPerBit: tau: expected a number in \(0, 1\], got 0.0"),
    ("target_entropy_ratio", 1.5, r"target_entropy_ratio: expected a number in \(0, 1\), got 1.5"),
    ("initial_alpha", 0.0, "initial_alpha: expected a positive number, got 0.0"),
    ("gamma", 1.5, r"SACPerBit: gamma: expected a number in \[0, 1\], got 1.5"),
    ("critic_hidden_sizes", [64, 0], r"critic_hidden_sizes\[1\]")])
def test_bad_arguments_are_one_line_errors_naming_the_value(key: str, value: float,
                                                            message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bandit_model(**{key: value})


def test_the_cli_trains_sac_bits() -> None:
    import argparse

    from agents.cli.train import add_train

    parser = argparse.ArgumentParser()
    add_train(parser)
    args = parser.parse_args(["--env", ENV_ID, "--method", "sac-bits", "--out", "x"])
    assert args.method == "sac-bits"
