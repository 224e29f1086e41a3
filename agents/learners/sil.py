"""PPO with self-imitation of its own best episodes (SIL; Oh et al., ICML 2018).

Issue #38 asks for learners that use nothing but interaction. PPO on ToolBench-v0 stops
at about half of the rule-to-planner gap (0.54 [0.33, 0.73] at 1M steps) while a
memoryless student taught by a reference reaches 0.92: what it lacks is credit and
exploration, not capacity. Self-imitation keeps what exploration found: every whole
episode the agent played goes into a replay buffer with each step's discounted
return-to-go ``R``, and after each PPO update
:class:`SelfImitationPPO` takes ``sil_updates`` extra gradient steps on minibatches of it,

    loss = -log pi(a|s) * max(R - V(s), 0) + sil_value_coef * 0.5 * max(R - V(s), 0)**2,

so the policy moves toward its own past actions only where they turned out better than
its value estimate (an episode worse than expected teaches nothing: the clip at 0). The
replay holds only the agent's own episodes (observations, actions, rewards): no planner,
no reference, no env internals. The PPO update itself is :class:`FastPPO`'s, unchanged;
the minibatches are drawn among the stored steps whose ``R - V(s)`` is positive at the
time of the update (the other steps' loss is zero).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from agents.learners.common.episodes import EpisodeTracker
from agents.learners.common.fast_optim import clip_grad_norm, optimizer_step
from agents.learners.ppo import FastPPO
from agents.learners.supervised import discounted_returns
from cost_envs.config import integer


class SelfImitationPPO(FastPPO):
    """:class:`FastPPO` plus self-imitation updates (module docstring).

    Takes FastPPO's arguments and the ``sil_*`` ones: SIL steps after each PPO update,
    their minibatch size, the loss's weight, the value term's weight, the replay's size.
    """

    # Defaults: one SIL minibatch for every 64 steps collected (an eighth of PPO's 10
    # epochs of gradient steps), the paper's value weight, a replay of the last 100k steps.
    def __init__(self, *args: Any, sil_updates: int = 128, sil_batch_size: int = 64,
                 sil_coef: float = 1.0, sil_value_coef: float = 0.01,
                 sil_capacity: int = 100_000, **kwargs: Any) -> None:
        self.sil_updates = integer(sil_updates, "sil_updates", minimum=0)
        self.sil_batch_size = integer(sil_batch_size, "sil_batch_size", minimum=1)
        self.sil_capacity = integer(sil_capacity, "sil_capacity", minimum=1)
        for name, value in (("sil_coef", sil_coef), ("sil_value_coef", sil_value_coef)):
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        self.sil_coef = float(sil_coef)
        self.sil_value_coef = float(sil_value_coef)
        super().__init__(*args, **kwargs)
        self._tracker = EpisodeTracker(self.n_envs)
        obs_dim = int(np.prod(self.observation_space.shape or (1,)))
        act_dim = int(np.prod(self.action_space.shape or (1,)))
        self._obs = np.zeros((self.sil_capacity, obs_dim), dtype=np.float32)
        self._actions = np.zeros((self.sil_capacity, act_dim), dtype=np.float32)
        self._returns = np.zeros(self.sil_capacity, dtype=np.float32)
        self._size = 0
        self._next = 0
        #: SIL gradient steps taken (beside PPO's).
        self.sil_steps = 0

    # ------------------------------------------------------------------ replay
    def remember(self, obs: np.ndarray, actions: np.ndarray, returns: np.ndarray) -> None:
        """Store steps (rows) in the ring buffer, the oldest overwritten first."""
        for row in range(len(returns)):
            self._obs[self._next] = obs[row].reshape(-1)
            self._actions[self._next] = actions[row].reshape(-1)
            self._returns[self._next] = returns[row]
            self._next = (self._next + 1) % self.sil_capacity
            self._size = min(self._size + 1, self.sil_capacity)

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback,
                         rollout_buffer: RolloutBuffer, n_rollout_steps: int) -> bool:
        """FastPPO's rollout, then its whole episodes into the replay."""
        if not super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps):
            return False
        buffer = rollout_buffer
        assert self._last_episode_starts is not None  # set by the rollout just run
        for segment in self._tracker.segments(buffer.rewards, buffer.episode_starts,
                                              self._last_episode_starts):
            if segment.whole and segment.done:  # the start of a carried episode is gone
                rows = slice(segment.start, segment.stop)
                self.remember(buffer.observations[rows, segment.env],
                              buffer.actions[rows, segment.env],
                              discounted_returns(buffer.rewards[rows, segment.env], self.gamma))
        return True

    # ------------------------------------------------------------------ update
    def train(self) -> None:
        """FastPPO's update, then :attr:`sil_updates` self-imitation steps."""
        super().train()
        self.self_imitate()

    def self_imitate(self) -> None:
        """The :attr:`sil_updates` self-imitation steps that follow each PPO update."""
        candidates = self.better_than_value()
        losses = [self.self_imitation_step(candidates) for _ in range(self.sil_updates)
                  if len(candidates)]
        if losses:
            self.logger.record("train/sil_loss", float(np.mean(losses)))
        self.logger.record("train/sil_replay", self._size)
        self.logger.record("train/sil_candidates", len(candidates))

    def better_than_value(self) -> np.ndarray:
        """Rows of the replay whose return beats the current value estimate.

        Computed once per update (a forward pass over the replay); each step then recomputes
        ``R - V(s)`` of its own minibatch, so the clip at 0 is exact for the step.
        """
        if self._size == 0 or self.sil_coef == 0:
            return np.zeros(0, dtype=np.int64)
        with torch.no_grad():
            values = self.policy.predict_values(torch.as_tensor(self._obs[:self._size]))
        return np.flatnonzero(self._returns[:self._size] > values.flatten().numpy())

    def self_imitation_step(self, candidates: np.ndarray) -> float:
        """One SIL gradient step on a minibatch drawn from ``candidates``; its loss."""
        # the minibatch's draw from numpy's global stream, as PPO's own permutations
        chosen = candidates[np.random.randint(len(candidates), size=self.sil_batch_size)]
        self.policy.set_training_mode(True)
        values, log_prob, _ = self.policy.evaluate_actions(
            torch.as_tensor(self._obs[chosen]), torch.as_tensor(self._actions[chosen]))
        advantage = torch.clamp(torch.as_tensor(self._returns[chosen]) - values.flatten(),
                                min=0.0)
        loss = self.sil_coef * (-(log_prob * advantage.detach()).mean()
                                + self.sil_value_coef * 0.5 * (advantage ** 2).mean())
        optimizer = self.policy.optimizer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(list(self.policy.parameters()), self.max_grad_norm)
        optimizer_step(optimizer)
        self.sil_steps += 1
        return float(loss.detach())
