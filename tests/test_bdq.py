"""Issue #38's branching dueling Q-network (agents.learners.bdq): its mechanisms and wiring."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

import cost_envs  # noqa: F401  # registers the ids
from agents.learners.bdq import (
    BranchingDQN,
    BranchingQNetwork,
    NStepTransitions,
    double_q_targets,
    dueling_q,
    linear_epsilon,
)
from agents.learners.common.policies import AllocatorPolicy
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


def bandit_model(seed: int = 0, **kwargs: Any) -> BranchingDQN:
    set_random_seed(seed)
    venv = DummyVecEnv([Bandit for _ in range(4)])
    venv.seed(seed)
    settings = {"learning_starts": 64, "batch_size": 64, "rollout_steps": 16,
                "exploration_fraction": 0.5, "learning_rate": 3e-3, "n_steps": 1,
                "target_update_interval": 50, **kwargs}
    model = BranchingDQN(AllocatorPolicy, venv, policy_kwargs={"hidden_sizes": (16,)},
                         **settings)
    quiet_logger(model)
    return model


# ------------------------------------------------------------------ network
def test_dueling_aggregation_subtracts_each_branchs_mean_advantage() -> None:
    value = torch.tensor([[1.0], [-2.0]])
    advantages = torch.tensor([[[0.0, 4.0], [3.0, 1.0]], [[1.0, 1.0], [-1.0, 5.0]]])
    q = dueling_q(value, advantages)
    expected = torch.tensor([[[-1.0, 3.0], [2.0, 0.0]], [[-2.0, -2.0], [-5.0, 1.0]]])
    torch.testing.assert_close(q, expected)
    # identifiable: each branch's sub-actions average to the state value
    torch.testing.assert_close(q.mean(dim=-1), value.expand(2, 2))
    net = BranchingQNetwork(5, 3, (8,))
    obs = torch.randn(4, 5)
    with torch.no_grad():
        out = net(obs)
        torch.testing.assert_close(out.mean(dim=-1),
                                   net.value(net.torso(obs)).expand(4, 3))
    assert out.shape == (4, 3, 2)


def test_greedy_action_is_each_branchs_argmax_and_the_exported_policy_agrees() -> None:
    model = bandit_model()
    with torch.no_grad():  # move the heads off their initialisation
        for param in model.q_net.parameters():
            param.add_(torch.randn_like(param))
    model.sync_policy()
    obs = torch.randn(256, 2)
    with torch.no_grad():
        q = model.q_net(obs)
    greedy = model.q_net.greedy(obs)
    assert torch.equal(greedy, (q[..., 1] > q[..., 0]).long())
    assert np.array_equal(model.predict(obs.numpy())[0], greedy.numpy())
    # the library's allocator: call agent i iff p_i > 0.5, i.e. Q_i(s, 1) > Q_i(s, 0)
    exported, _ = model.policy.predict(obs.numpy(), deterministic=True)
    assert np.array_equal(exported, greedy.numpy())
    with torch.no_grad():
        torch.testing.assert_close(model.policy.predict_values(obs).squeeze(-1),
                                   q.mean(dim=-1)[:, 0])


# ------------------------------------------------------------------ targets
class Table(nn.Module):
    """A network that returns fixed Q-values whatever the observation."""

    def __init__(self, q: list[list[float]]) -> None:
        super().__init__()
        self.q = torch.tensor(q)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q.expand(len(obs), *self.q.shape)


def test_double_q_target_values_the_online_argmax_with_the_target_network() -> None:
    online = Table([[0.0, 1.0], [5.0, 2.0], [0.0, 3.0]])   # argmax 1, 0, 1
    target = Table([[7.0, 2.0], [1.0, 9.0], [4.0, 6.0]])   # its own argmax would be 0, 1, 1
    next_obs = torch.zeros(2, 1)
    returns = torch.tensor([1.0, -1.0])
    discounts = torch.tensor([0.5, 0.0])
    per_branch = double_q_targets(online, target, next_obs, returns, discounts,
                                  per_branch=True)
    torch.testing.assert_close(per_branch, torch.tensor([[2.0, 1.5, 4.0], [-1.0, -1.0, -1.0]]))
    mean = double_q_targets(online, target, next_obs, returns, discounts)
    # the paper's target: the mean over branches of (2, 1, 6) = 3
    torch.testing.assert_close(mean, torch.tensor([[2.5, 2.5, 2.5], [-1.0, -1.0, -1.0]]))


# ------------------------------------------------------------------ n-step
def test_n_step_returns_of_a_hand_made_episode() -> None:
    gamma = 0.5
    obs = [np.full(1, float(t), dtype=np.float32) for t in range(6)]
    act = np.zeros(2, dtype=np.int8)
    steps = NStepTransitions(n_envs=2, n=3, gamma=gamma)
    rewards = [1.0, 2.0, 3.0, 4.0]
    out = [steps.add(0, obs[t], act, rewards[t], obs[t + 1], t == 3, False) for t in range(4)]
    assert [len(o) for o in out] == [0, 0, 1, 3]
    first = out[2][0]  # 1 + 0.5 * 2 + 0.25 * 3, bootstrapped gamma^3 from s3
    assert (first.obs[0], first.ret, first.next_obs[0], first.discount) == (0.0, 2.75, 3.0, 0.125)
    # the episode terminates after r3: the rest end there, no bootstrap
    assert [(t.obs[0], t.ret, t.next_obs[0], t.discount) for t in out[3]] == [
        (1.0, 4.5, 4.0, 0.0), (2.0, 5.0, 4.0, 0.0), (3.0, 4.0, 4.0, 0.0)]
    # truncated (a budget, a time limit): bootstrapped from the last observation
    for t in range(2):
        assert steps.add(1, obs[t], act, 1.0, obs[t + 1], False, False) == []
    cut = steps.add(1, obs[2], act, 1.0, obs[5], False, True)
    assert [(t.obs[0], t.ret, t.next_obs[0], t.discount) for t in cut] == [
        (0.0, 1.75, 5.0, 0.125), (1.0, 1.5, 5.0, 0.25), (2.0, 1.0, 5.0, 0.5)]


def test_a_truncated_step_bootstraps_from_the_terminal_observation() -> None:
    model = bandit_model(n_steps=1)
    obs = np.zeros((4, 2), dtype=np.float32)
    new_obs = np.ones((4, 2), dtype=np.float32)
    final = np.full(2, 7.0, dtype=np.float32)
    infos: list[dict[str, Any]] = [{}, {"terminal_observation": final},
                                   {"terminal_observation": final, "TimeLimit.truncated": True},
                                   {}]
    model._remember(obs, np.zeros((4, 3), np.int8), np.array([1.0, 2.0, 3.0, 4.0]), new_obs,
                    np.array([False, True, True, False]), infos)
    replay = model.replay
    assert replay.size == 4
    np.testing.assert_allclose(replay.discounts[:4], [0.99, 0.0, 0.99, 0.99], rtol=1e-6)
    np.testing.assert_array_equal(replay.next_obs[1], final)
    np.testing.assert_array_equal(replay.next_obs[2], final)
    np.testing.assert_array_equal(replay.next_obs[3], new_obs[3])


# ------------------------------------------------------------------ learning
def test_the_target_network_is_copied_every_target_update_interval_steps() -> None:
    model = bandit_model(target_update_interval=3)
    model.learn(128)  # fills the replay (64 transitions before the first gradient step)
    model.target_syncs = 0
    model.sync_target()
    model.target_syncs = 0
    model._n_updates = 0
    synced = {k: v.clone() for k, v in model.q_net.state_dict().items()}
    for _ in range(2):
        model.train_step()
    target = model.q_net_target.state_dict()
    assert all(torch.equal(target[k], synced[k]) for k in synced)  # frozen between syncs
    assert any(not torch.equal(v, synced[k]) for k, v in model.q_net.state_dict().items())
    model.train_step()
    target = model.q_net_target.state_dict()
    assert model.target_syncs == 1
    assert all(torch.equal(v, target[k]) for k, v in model.q_net.state_dict().items())


def test_epsilon_falls_linearly_then_stays() -> None:
    assert linear_epsilon(0.0, 1.0, 0.1, 0.5) == 1.0
    assert linear_epsilon(0.25, 1.0, 0.1, 0.5) == pytest.approx(0.55)
    assert linear_epsilon(0.75, 1.0, 0.1, 0.5) == 0.1
    model = bandit_model()
    actions = model.explore(np.zeros((4000, 2), np.float32), epsilon=0.5)
    greedy = model.predict(np.zeros((4000, 2), np.float32))[0]
    # each bit random with probability 0.5: it differs from the greedy bit a quarter of times
    assert abs(np.mean(actions != greedy) - 0.25) < 0.02
    assert np.array_equal(model.explore(np.zeros((8, 2), np.float32), 0.0),
                          model.predict(np.zeros((8, 2), np.float32))[0])


def test_bdq_learns_the_best_action_of_each_state_of_a_bandit() -> None:
    model = bandit_model().learn(4096)
    actions = model.predict(np.eye(2, dtype=np.float32))[0]
    assert actions.tolist() == [[1, 0, 1], [0, 1, 0]]
    assert model.exploration_rate == pytest.approx(0.05)
    assert np.array_equal(model.policy.predict(np.eye(2, dtype=np.float32), deterministic=True)[0],
                          actions)
    # the same seed trains the same weights
    again = bandit_model().learn(4096)
    assert all(torch.equal(v, again.q_net.state_dict()[k])
               for k, v in model.q_net.state_dict().items())


# ------------------------------------------------------------------ wiring
def test_train_dispatches_bdq_and_the_model_saves_and_loads(tmp_path) -> None:
    from agents.learners.checkpoints import load_allocator, save_allocator
    from agents.learners.common.ppo_args import accepted
    from agents.learners.hyperparameter_names import accepted_names

    settings = {"rollout_steps": 16, "learning_starts": 128, "batch_size": 64}
    trained = train(ENV_ID, "bdq", 512, n_envs=8, ppo=settings)
    assert trained.method == "bdq" and trained.timesteps == 512 and trained.base is None
    assert len(trained.history) == 4  # a row per rollout of 8 x 16 steps
    loaded = load_allocator(save_allocator(trained, tmp_path / "model"))
    obs = np.random.default_rng(0).random((64, 17), dtype=np.float32)
    assert np.array_equal(loaded.predict(obs)[0], trained.predict(obs)[0])
    assert accepted_names("bdq") == frozenset(accepted("bdq"))
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        train(ENV_ID, "bdq", 64, ppo={"clip_range": 0.2})  # a PPO setting, not BDQ's
    with pytest.raises(ValueError, match="only 'independent'"):
        train(ENV_ID, "bdq", 64, action_distribution="autoregressive")


def test_the_cli_trains_bdq() -> None:
    import argparse

    from agents.cli.train import add_train

    parser = argparse.ArgumentParser()
    add_train(parser)
    args = parser.parse_args(["--env", ENV_ID, "--method", "bdq", "--out", "x"])
    assert args.method == "bdq"
