"""Discrete soft actor-critic per bit (SAC-discrete, Christodoulou 2019, over factored actions).

Issue #38, point 1: a learner that uses nothing but interaction (observation, reward,
``info``). BDQ (:mod:`agents.learners.bdq`) learns a value per bit and explores with
epsilon; SAC learns the same per-bit values but a *stochastic* policy beside them, whose
exploration is its own entropy, held at a target by a learned temperature. What that
could buy over BDQ: the exploring bits are drawn where the policy is unsure, not uniformly,
and the policy is trained on every bit's expected value under itself (no argmax noise).

**Policy** (the actor). The allocator network itself
(:class:`~agents.learners.common.policies.AllocatorPolicy`, plain, independent head): a
tanh torso and one logit ``l_d`` per bit, so each bit is an independent Bernoulli,
``pi_d(1 | s) = sigmoid(l_d)`` (a per-branch softmax over {0, 1} with logits ``(0, l_d)``).
It trains in place (its ``base`` and ``action`` groups; the unused ``value`` head is
frozen), so the model saves, loads, evaluates and serves as every allocator; its
deterministic action, "call iff ``p > 0.5``", is the greedy one.

**Critics.** Two Q-networks of BDQ's form
(:class:`~agents.learners.bdq.BranchingQNetwork`: own torso, a value stream, one two-way
advantage branch per bit), each with a target copy Polyak-averaged by ``tau`` after each
gradient step. Each branch's soft target is an expectation over that branch's policy at
the next state of the smaller twin target value minus the temperature times its
log-probability::

    V_d(s') = sum_a pi_d(a | s') [min_i Q^-_{i,d}(s', a) - alpha_d log pi_d(a | s')]
    y_d     = R^(n) + gamma^n V_d(s')                        (0 bootstrap if terminated)

(``mean_targets=True``: every branch's target is the mean of the ``y_d`` over branches,
BDQ's default target.) Both critics regress each branch's ``Q_{i,d}(s, a_d)`` of the
replayed action on ``y_d`` (squared error averaged over branches and the batch).

**Actor loss.** The joint log-probability is the sum of the bits', so the joint policy's
objective splits into a sum over bits of each branch's expectation, with the critics'
smaller value held fixed::

    J_pi = E_s sum_d sum_a pi_d(a | s) [alpha_d log pi_d(a | s) - min_i Q_{i,d}(s, a)]

**Temperature.** ``alpha_d = exp(log_alpha_d)``, one per bit (``shared_temperature``: one
for all), trained on ``log_alpha_d * (H_d(s) - H_target)`` (detached entropy): it falls
while a bit's policy entropy is above ``H_target = target_entropy_ratio * log 2`` and rises
below it. Starting at ``initial_alpha`` (the rewards are of order 1, so SAC's usual 1
would keep the policy uniform for a third of the run).

**Loop.** BDQ's (:class:`~agents.learners.bdq.OffPolicyBits`): the 16 batched sub-envs,
each step's n-step transitions into a uniform replay, ``gradient_steps`` gradient steps
every ``train_freq`` batched steps once ``learning_starts`` are stored; actions drawn from
the policy itself (no epsilon), with the run's own generator, so a seed fixes the run.
Each gradient step: the critics, then the actor on the updated critics, then the
temperature, then the targets' Polyak step.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.common.vec_env import VecEnv

from agents.learners.bdq import BranchingQNetwork, OffPolicyBits
from agents.learners.common.fast_optim import clip_grad_norm
from agents.learners.common.policies import AllocatorPolicy, check_widths
from cost_envs.config import boolean, number

#: The policy's groups that train (:data:`agents.learners.common.policies.PARAMETER_GROUPS`):
#: the torso and the logits; the value head is not SAC's.
ACTOR_GROUPS = {"base": 1.0, "action": 1.0}


def bit_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """``(batch, m, 2)``: each bit's log-probability of 0 and of 1 under its logit.

    ``log pi_d(1) = log sigmoid(l_d)``, ``log pi_d(0) = log sigmoid(-l_d)``: the per-branch
    softmax over logits ``(0, l_d)``, computed stably.
    """
    return torch.stack((F.logsigmoid(-logits), F.logsigmoid(logits)), dim=-1)


def bit_entropies(logits: torch.Tensor) -> torch.Tensor:
    """``(batch, m)``: each bit's policy entropy, ``-sum_a pi_d(a) log pi_d(a)``."""
    log_probs = bit_log_probs(logits)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def soft_targets(next_logits: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor,
                 alpha: torch.Tensor, returns: torch.Tensor, discounts: torch.Tensor,
                 mean_targets: bool = False) -> torch.Tensor:
    """``(batch, m)`` per-branch soft TD targets (module docstring, Critics).

    Args:
        next_logits: ``(batch, m)`` the policy's logits at the next observations.
        next_q1: ``(batch, m, 2)`` the first target critic there.
        next_q2: ``(batch, m, 2)`` the second.
        alpha: ``(m,)`` or ``(1,)`` temperatures.
        returns: ``(batch,)`` n-step discounted rewards.
        discounts: ``(batch,)`` ``gamma^n``, or 0 where the episode terminated.
        mean_targets: Every branch's target the mean over branches.
    """
    log_pi = bit_log_probs(next_logits)
    soft_q = torch.min(next_q1, next_q2) - alpha.view(1, -1, 1) * log_pi
    values = (log_pi.exp() * soft_q).sum(dim=-1)
    targets = returns.unsqueeze(-1) + discounts.unsqueeze(-1) * values
    if mean_targets:
        targets = targets.mean(dim=-1, keepdim=True).expand_as(targets)
    return targets


def actor_objective(logits: torch.Tensor, q_min: torch.Tensor, alpha: torch.Tensor
                    ) -> torch.Tensor:
    """``J_pi``: the bits' expected ``alpha log pi - Q`` summed, averaged over the batch.

    Args:
        logits: ``(batch, m)`` the policy's logits (with their graph).
        q_min: ``(batch, m, 2)`` the smaller critic's values, held fixed.
        alpha: ``(m,)`` or ``(1,)`` temperatures.
    """
    log_pi = bit_log_probs(logits)
    per_bit = (log_pi.exp() * (alpha.view(1, -1, 1) * log_pi - q_min)).sum(dim=-1)
    return per_bit.sum(dim=-1).mean()


def temperature_objective(log_alpha: torch.Tensor, entropies: torch.Tensor,
                          target_entropy: float) -> torch.Tensor:
    """``log_alpha * (H - H_target)`` averaged: ``alpha`` falls while ``H`` is above target.

    Args:
        log_alpha: ``(m,)`` per bit or ``(1,)`` shared.
        entropies: ``(batch, m)`` the policy's bit entropies (no graph).
        target_entropy: ``H_target`` per bit.
    """
    gap = (entropies - target_entropy).mean(dim=0)  # (m,)
    if log_alpha.numel() == 1:
        gap = gap.mean().view(1)
    return (log_alpha * gap).sum()


class SACPerBit(OffPolicyBits):
    """Discrete SAC over a ``MultiBinary`` action's bits (module docstring).

    Args:
        policy: The policy class, trained as the actor (``AllocatorPolicy``).
        env: A VecEnv with a flat ``Box`` observation and a ``MultiBinary(m)`` action.
        learning_rate: Adam's step size for the actor, the critics and the temperature.
        buffer_size: Transitions the replay keeps.
        learning_starts: Transitions stored before the first gradient step.
        batch_size: Transitions per gradient step.
        gamma: Discount.
        train_freq: Steps of the batched env between two rounds of gradient steps.
        gradient_steps: Gradient steps per round.
        n_steps: The n of the n-step return (1: BDQ's choice on validation tasks).
        tau: The targets' Polyak step (``target <- tau online + (1 - tau) target``).
        initial_alpha: The temperatures' starting value.
        target_entropy_ratio: ``H_target`` as a share of ``log 2`` per bit, in (0, 1).
        shared_temperature: One temperature for every bit instead of one each.
        mean_targets: Every branch's soft target the mean over branches (BDQ's target).
        critic_hidden_sizes: The critics' torso widths (default the policy's
            ``hidden_sizes``): a wider critic without changing the allocator the actor is.
        max_grad_norm: Gradient clipping (global norm) of the actor and of the critics.
        rollout_steps: Steps per sub-env between two callback rollout boundaries.
        stats_window_size: SB3's window of episode statistics.
        tensorboard_log: SB3's TensorBoard folder.
        policy_kwargs: ``AllocatorPolicy`` arguments (``hidden_sizes``, also the critics'
            torso; ``lora_rank`` must be ``None`` and ``action_distribution``
            ``independent``).
        verbose: SB3 verbosity.
        device: Only ``cpu``.

    Raises:
        ValueError: A bad hyperparameter or an env the loop does not handle.
    """

    def __init__(
        self,
        policy: type[AllocatorPolicy],
        env: VecEnv,
        learning_rate: float = 3e-4,
        buffer_size: int = 100_000,
        learning_starts: int = 5_000,
        batch_size: int = 256,
        gamma: float = 0.99,
        train_freq: int = 1,
        gradient_steps: int = 1,
        n_steps: int = 1,
        tau: float = 0.005,
        initial_alpha: float = 0.05,
        target_entropy_ratio: float = 0.2,
        shared_temperature: bool = False,
        mean_targets: bool = False,
        critic_hidden_sizes: Sequence[int] | None = None,
        max_grad_norm: float = 10.0,
        rollout_steps: int = 512,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        device: str = "cpu",
    ) -> None:
        where = "SACPerBit"
        self.tau = number(tau, "tau", minimum=0, where=where)
        if not 0 < self.tau <= 1:
            raise ValueError(f"{where}: tau: expected a number in (0, 1], got {tau}")
        self.initial_alpha = number(initial_alpha, "initial_alpha", minimum=0, where=where)
        if self.initial_alpha <= 0:
            raise ValueError(f"{where}: initial_alpha: expected a positive number, got "
                             f"{initial_alpha}")
        self.target_entropy_ratio = number(target_entropy_ratio, "target_entropy_ratio",
                                           minimum=0, where=where)
        if not 0 < self.target_entropy_ratio < 1:
            raise ValueError(f"{where}: target_entropy_ratio: expected a number in (0, 1), "
                             f"got {target_entropy_ratio}")
        self.shared_temperature = boolean(shared_temperature, "shared_temperature",
                                          where=where)
        self.mean_targets = boolean(mean_targets, "mean_targets", where=where)
        self.critic_hidden_sizes = (None if critic_hidden_sizes is None else tuple(
            check_widths(critic_hidden_sizes, f"{where}: critic_hidden_sizes")))
        #: ``H_target`` per bit, in nats.
        self.target_entropy = self.target_entropy_ratio * math.log(2.0)
        super().__init__(policy, env, learning_rate, buffer_size, learning_starts, batch_size,
                         gamma, train_freq, gradient_steps, n_steps, max_grad_norm,
                         rollout_steps, stats_window_size, tensorboard_log, policy_kwargs,
                         verbose, device, where)

    # ------------------------------------------------------------------ model
    def build_networks(self, obs_dim: int, hidden: tuple[int, ...]) -> None:
        """The actor's optimiser (the policy's), twin critics, their targets, temperatures."""
        assert isinstance(self.learning_rate, float)  # checked in __init__
        self.policy.train_only(ACTOR_GROUPS)  # its optimizer: the torso and the logits only
        self.actor_optimizer = self.policy.optimizer
        widths = self.critic_hidden_sizes or hidden
        self.q1 = BranchingQNetwork(obs_dim, self.n_bits, widths)
        self.q2 = BranchingQNetwork(obs_dim, self.n_bits, widths)
        self.q1_target, self.q2_target = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.q1_target.requires_grad_(False)
        self.q2_target.requires_grad_(False)
        self.critic_parameters = [*self.q1.parameters(), *self.q2.parameters()]
        self.critic_optimizer = torch.optim.Adam(self.critic_parameters, lr=self.learning_rate)
        temperatures = 1 if self.shared_temperature else self.n_bits
        self.log_alpha = torch.full((temperatures,), math.log(self.initial_alpha),
                                    requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=self.learning_rate)
        #: The last gradient step's figures (logged at each rollout boundary).
        self.last: dict[str, float] = {}

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """``(batch, m)`` the policy's per-bit logits."""
        return self.policy.action_net(self.policy.shared_features(obs))

    def alpha(self) -> torch.Tensor:
        """The temperatures, detached: ``(m,)`` or ``(1,)``."""
        return self.log_alpha.detach().exp()

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """Each bit's more likely value (call iff ``p > 0.5``; a tie goes to 0)."""
        return (self.logits(obs) > 0).long()

    # ------------------------------------------------------------------ acting
    def behaviour(self, obs: np.ndarray, progress: float) -> np.ndarray:
        """Each bit drawn from the policy (its entropy is the exploration; no schedule)."""
        with torch.no_grad():
            probs = torch.sigmoid(self.logits(torch.as_tensor(obs, dtype=torch.float32)))
        return (self._rng.random(probs.shape) < probs.numpy()).astype(np.int8)

    # ------------------------------------------------------------------ learning
    def critic_loss(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
                    next_obs: torch.Tensor, discounts: torch.Tensor) -> torch.Tensor:
        """Both critics' squared errors against the per-branch soft targets."""
        with torch.no_grad():
            targets = soft_targets(self.logits(next_obs), self.q1_target(next_obs),
                                   self.q2_target(next_obs), self.alpha(), returns, discounts,
                                   self.mean_targets)
        index = actions.long().unsqueeze(-1)
        loss = torch.zeros(())
        for critic in (self.q1, self.q2):
            loss = loss + F.mse_loss(critic(obs).gather(-1, index).squeeze(-1), targets)
        return loss

    def actor_loss(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``J_pi`` on ``obs`` (critics held fixed) and the bits' entropies ``(batch, m)``."""
        logits = self.logits(obs)
        with torch.no_grad():
            q_min = torch.min(self.q1(obs), self.q2(obs))
        return actor_objective(logits, q_min, self.alpha()), bit_entropies(logits.detach())

    def train_step(self) -> float:
        """Critics, actor, temperature, Polyak targets (module docstring); the critic loss."""
        obs, actions, returns, next_obs, discounts = self.replay.sample(self._rng,
                                                                        self.batch_size)
        critic_loss = self.critic_loss(obs, actions, returns, next_obs, discounts)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        clip_grad_norm(self.critic_parameters, self.max_grad_norm)
        self.critic_optimizer.step()

        actor_loss, entropies = self.actor_loss(obs)
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        clip_grad_norm([p for group in self.actor_optimizer.param_groups
                        for p in group["params"]], self.max_grad_norm)
        self.actor_optimizer.step()

        alpha_loss = temperature_objective(self.log_alpha, entropies, self.target_entropy)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optimizer.step()

        self.update_targets()
        self._n_updates += 1
        self.last = {"actor_loss": float(actor_loss.detach()),
                     "entropy": float(entropies.mean()),
                     "alpha": float(self.alpha().mean())}
        return float(critic_loss.detach())

    def update_targets(self) -> None:
        """One Polyak step of each target critic toward its online one."""
        for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
            polyak_update(online.parameters(), target.parameters(), self.tau)

    def record_rollout(self, losses: list[float]) -> None:
        """The loop's records, the last actor loss, bit entropy and mean temperature."""
        for key, value in self.last.items():
            self.logger.record(f"train/{key}", value)
        super().record_rollout(losses)

    def learn(self, total_timesteps: int, callback: MaybeCallback = None,
              log_interval: int = 1, tb_log_name: str = "sac_bits",
              reset_num_timesteps: bool = True, progress_bar: bool = False
              ) -> SACPerBit:
        """Train for ``total_timesteps`` env steps, rounded up to whole rollouts."""
        super().learn(total_timesteps, callback, log_interval, tb_log_name,
                      reset_num_timesteps, progress_bar)
        return self
