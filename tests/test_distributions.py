"""The autoregressive action head: an exact joint law over which agents to call."""

from __future__ import annotations

import itertools
import tempfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import cost_envs  # noqa: F401  (registers the ids)
from agents.learners.common.distributions import (
    AutoregressiveBernoulliDistribution,
    AutoregressiveHead,
)
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.supervised import SupervisedConfig, Traces, policy_for, train_supervised

LARGE, MEDIUM = 6, 7  # ToolBench-v0's llm_large and llm_medium


def _distribution(m: int, seed: int = 0, batch: int = 3
                  ) -> tuple[AutoregressiveBernoulliDistribution, AutoregressiveHead]:
    torch.manual_seed(seed)
    head = AutoregressiveHead(latent_dim=5, n_agents=m)
    with torch.no_grad():
        head.coupling.normal_(0.0, 2.0)
    features = torch.randn(batch, 5)
    return AutoregressiveBernoulliDistribution(m).proba_distribution(head(features), head), head


def _all_actions(m: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product((0.0, 1.0), repeat=m)))


def test_log_prob_is_a_normalised_joint_law():
    m = 4
    distribution, _ = _distribution(m)
    actions = _all_actions(m)
    total = torch.zeros(3)
    for action in actions:
        total += distribution.log_prob(action.expand(3, m)).exp()
    torch.testing.assert_close(total, torch.ones(3))


def test_samples_follow_log_prob():
    m = 3
    torch.manual_seed(1)
    head = AutoregressiveHead(latent_dim=2, n_agents=m)
    with torch.no_grad():
        head.coupling.copy_(torch.tensor([[0.0, 0, 0], [3.0, 0, 0], [-2.0, 2.5, 0]]))
    with torch.no_grad():
        logits = head(torch.zeros(20000, 2))
    distribution = AutoregressiveBernoulliDistribution(m).proba_distribution(logits, head)
    samples = distribution.sample()
    codes = (samples @ torch.tensor([4.0, 2.0, 1.0])).long()
    frequency = torch.bincount(codes, minlength=8).double() / len(codes)
    expected = torch.stack([distribution.log_prob(action.expand(20000, m))[0].exp()
                            for action in _all_actions(m)])  # product order: the codes' order
    assert float((frequency - expected.detach().double()).abs().max()) < 0.015


def test_a_later_agent_depends_on_an_earlier_one():
    """'Medium only if not large': the coupling makes medium's call depend on large's bit."""
    m = 8
    head = AutoregressiveHead(latent_dim=1, n_agents=m)
    with torch.no_grad():
        head.linear.weight.zero_()
        head.linear.bias.fill_(-5.0)
        head.linear.bias[MEDIUM] = 4.0
        head.coupling[MEDIUM, LARGE] = -9.0
    distribution = AutoregressiveBernoulliDistribution(m).proba_distribution(
        head(torch.zeros(2, 1)), head)
    actions = torch.zeros(2, m)
    actions[0, LARGE] = 1.0
    probabilities = distribution.conditional_probabilities(actions).detach()
    assert float(probabilities[0, MEDIUM]) < 0.01  # large called: medium is not
    assert float(probabilities[1, MEDIUM]) > 0.97  # large not called: medium is
    # An earlier agent never sees a later one's bit.
    assert torch.equal(probabilities[0, :LARGE], probabilities[1, :LARGE])


def test_a_fresh_head_is_the_independent_one():
    env = gym.make("cost_envs/ToolBench-v0")
    torch.manual_seed(0)
    independent = policy_for(env, lora_rank=None)
    torch.manual_seed(0)
    autoregressive = policy_for(env, lora_rank=None, action_distribution="autoregressive")
    assert float(autoregressive.action_net.coupling.abs().sum()) == 0.0
    obs = torch.rand(16, 17)
    actions = torch.randint(0, 2, (16, 8)).float()
    values_a, log_a, entropy_a = independent.evaluate_actions(obs, actions)
    values_b, log_b, entropy_b = autoregressive.evaluate_actions(obs, actions)
    torch.testing.assert_close(log_a, log_b)
    torch.testing.assert_close(entropy_a, entropy_b)
    torch.testing.assert_close(values_a, values_b)


def test_mode_is_the_greedy_chain():
    distribution, head = _distribution(6, seed=3, batch=50)
    mode = distribution.mode()
    logits = head.conditional_logits(distribution.state_logits, mode)
    assert torch.equal(mode, (logits > 0).float())


def test_entropy_is_the_chain_rule_estimate_at_the_scored_actions():
    m = 3
    distribution, _ = _distribution(m, seed=4, batch=1)
    actions = _all_actions(m)
    probabilities = torch.stack([distribution.log_prob(a[None]).exp()[0] for a in actions])
    exact = float(-(probabilities * probabilities.log()).sum())
    estimates = []
    for action in actions:
        distribution.log_prob(action[None])
        estimates.append(float(distribution.entropy()[0]))
    # Averaged over the law, the estimate at an action is the joint entropy.
    assert float((probabilities * torch.tensor(estimates)).sum()) == pytest.approx(exact, 1e-5)


def test_supervision_fits_a_joint_that_independent_bits_cannot():
    """Labels 'large alone' or 'medium alone', half each, at the same observation."""
    env = gym.make("cost_envs/ToolBench-v0")
    obs = np.tile(np.linspace(0, 1, 17, dtype=np.float32), (512, 1))
    labels = np.zeros((512, 8), dtype=np.float32)
    labels[:256, LARGE] = 1.0
    labels[256:, MEDIUM] = 1.0
    traces = Traces(obs, labels, np.zeros(512, dtype=np.float32))
    config = SupervisedConfig(epochs=200, batch_size=512, learning_rate=0.05, lambda_1=0.0,
                              lambda_c=0.0, lambda_cov=0.0)
    costs = np.zeros(8, dtype=np.float32)
    fitted = {}
    for head in ("independent", "autoregressive"):
        torch.manual_seed(0)
        policy = policy_for(env, lora_rank=None, action_distribution=head)
        train_supervised(policy, traces, costs, config)
        features = policy.extract_features(torch.as_tensor(obs[:2]))
        with torch.no_grad():
            both = torch.zeros(2, 8)
            both[0, LARGE] = 1.0  # row 0: large called; row 1: not
            fitted[head] = policy.call_probabilities(features, both)[:, MEDIUM]
    assert float(fitted["autoregressive"][0]) < 0.1 < 0.9 < float(fitted["autoregressive"][1])
    assert float(abs(fitted["independent"][0] - 0.5)) < 0.1  # it can only say half
    assert torch.equal(fitted["independent"][0], fitted["independent"][1])


def test_an_autoregressive_model_saves_and_loads():
    from agents.learners.checkpoints import load_allocator, save_allocator
    from agents.learners.training import train

    trained = train("cost_envs/ToolBench-v0", "ppo", 256, seed=0, n_envs=2,
                    action_distribution="autoregressive")
    with torch.no_grad():  # a coupling no training run of this size would give
        trained.policy.action_net.coupling.normal_()
    with tempfile.TemporaryDirectory() as directory:
        save_allocator(trained, directory)
        loaded = load_allocator(directory)
    assert loaded.policy.action_distribution == "autoregressive"
    assert torch.equal(loaded.policy.action_net.coupling, trained.policy.action_net.coupling)
    obs = np.random.default_rng(0).random((64, 17), dtype=np.float32)
    assert np.array_equal(loaded.predict(obs)[0], trained.predict(obs)[0])


def test_a_saved_config_with_a_bad_distribution_is_one_line(tmp_path):
    import json

    from agents.learners.checkpoints import load_allocator, save_allocator
    from agents.learners.training import train

    path = save_allocator(train("cost_envs/ToolBench-v0", "ppo", 64, seed=0,
                                ppo={"n_steps": 64}), tmp_path / "model")
    config = json.loads((path / "config.json").read_text())
    assert "action_distribution" not in config["architecture"]  # independent: as before
    config["architecture"]["action_distribution"] = "joint"
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"architecture.action_distribution: expected one of "
                                         r"\['independent', 'autoregressive'\], got 'joint'"):
        load_allocator(path)


def test_a_bad_action_distribution_is_one_line():
    env = gym.make("cost_envs/ToolBench-v0")
    with pytest.raises(ValueError, match=r"action_distribution: expected one of \['independent', "
                                         r"'autoregressive'\], got 'joint'"):
        AllocatorPolicy(env.observation_space, env.action_space, lambda _: 1e-3,
                        action_distribution="joint")
    from agents.learners.training import train

    with pytest.raises(ValueError, match="action_distribution: expected one of"):
        train("cost_envs/ToolBench-v0", "ppo", 64, action_distribution="made")
