"""LoRA-guided PPO: PPO whose updates live in the adapter subspace, warm-started from supervision.

What differs from SB3's PPO, and nothing else:

* **What trains.** Exactly the LoRA ``A``/``B`` matrices of the encoder and the value
  head (groups ``adapter`` and ``value`` of
  :class:`~agents.learners.common.policies.AllocatorPolicy`).
  The frozen base and the action head learned in the supervised stage stay fixed, so the
  policy can only move within the span of the adapters. The optimizer holds those tensors
  and no others (checked at setup). Beyond the paper, ``action_lr_scale`` also trains the
  action head (issue #11: with a frozen head and a saturated warm start the paper's
  configuration cannot leave its teacher); the base stays frozen either way.
* **Learning rates.** The adapter uses ``learning_rate`` (5e-5, the paper's A.4); the value
  head, trained from the supervised fit rather than from a pretrained model, uses
  ``learning_rate * value_lr_scale``.
* **Loss.** SB3's clipped surrogate + entropy + value loss, plus the expected-cost term
  ``cost_coef * E_t[sum_i c_i p_{t,i}]`` with ``p_t`` the current call probabilities (with
  the autoregressive distribution, each agent's given the rollout action's earlier bits:
  a surrogate whose gradient ignores how the earlier bits' own probabilities move) and
  ``c_i`` each agent's price over the pool's highest.
* **Warm start.** :meth:`LoraGuidedPPO.from_supervised` copies every tensor of a
  supervised allocator (base, adapters, heads) into the new model.

Defaults follow the paper's A.4: clip 0.2, entropy 0.01, value 0.5, GAE 0.95, r = 8.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.utils import explained_variance

from agents.learners.common.adapters import verify_optimizer
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.ppo import (
    FastPPO,
    as_floats,
    bernoulli_entropy,
    bernoulli_heads,
    bernoulli_log_prob,
    clip_fractions,
)
from agents.learners.supervised import relative_prices
from cost_envs.config import number


class LoraGuidedPPO(FastPPO):
    """PPO restricted to the adapter subspace with an expected-cost penalty.

    Args:
        policy: :class:`AllocatorPolicy` (or its class path); it must carry LoRA.
        env: The environment or VecEnv.
        cost_coef: ``lambda_c`` of the expected-cost term.
        learning_rate: Adapter learning rate.
        value_lr_scale: Value-head learning rate over the adapter's.
        action_lr_scale: ``None`` (the paper's) keeps the supervised action head frozen;
            a positive number trains it too, at that multiple of the adapter's rate.
        **kwargs: Everything else of SB3's ``PPO``.
    """

    policy: AllocatorPolicy  # _setup_model refuses any other

    def __init__(
        self,
        policy: type[AllocatorPolicy] | str,
        env: gym.Env | Any,
        cost_coef: float = 0.05,
        learning_rate: float = 5e-5,
        value_lr_scale: float = 6.0,
        action_lr_scale: float | None = None,
        n_steps: int = 512,
        batch_size: int = 64,
        gae_lambda: float = 0.95,
        clip_range: float = 0.2,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        **kwargs: Any,
    ) -> None:
        self.cost_coef = number(cost_coef, "cost_coef", minimum=0)
        self.value_lr_scale = number(value_lr_scale, "value_lr_scale", minimum=0,
                                     inclusive=False)
        self.action_lr_scale = (None if action_lr_scale is None else
                                number(action_lr_scale, "action_lr_scale", minimum=0,
                                       inclusive=False))
        self.aux_coef = self.cost_coef
        super().__init__(policy, env, learning_rate=learning_rate, n_steps=n_steps,
                         batch_size=batch_size, gae_lambda=gae_lambda, clip_range=clip_range,
                         ent_coef=ent_coef, vf_coef=vf_coef, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        if not isinstance(self.policy, AllocatorPolicy) or self.policy.lora_rank is None:
            raise ValueError("LoraGuidedPPO needs an AllocatorPolicy with LoRA adapters "
                             f"(lora_rank set), got {type(self.policy).__name__}")
        groups = {"adapter": 1.0, "value": self.value_lr_scale}
        if self.action_lr_scale is not None:
            groups["action"] = self.action_lr_scale
        self.policy.train_only(groups)
        env = self.get_env()
        if env is None:
            raise ValueError("LoraGuidedPPO needs an environment: its expected-cost term "
                             "reads the agents' prices from the env's pool")
        pool = env.get_attr("pool")[0]
        self._relative_costs = torch.as_tensor(relative_prices(pool.costs))

    @classmethod
    def from_supervised(
        cls, supervised: AllocatorPolicy, env: gym.Env | Any, **kwargs: Any
    ) -> LoraGuidedPPO:
        """A model whose policy starts as a copy of ``supervised`` (same architecture)."""
        policy_kwargs = dict(kwargs.pop("policy_kwargs", None) or {})
        policy_kwargs.update(hidden_sizes=supervised.hidden_sizes,
                             lora_rank=supervised.lora_rank, lora_alpha=supervised.lora_alpha,
                             action_distribution=supervised.action_distribution)
        model = cls(AllocatorPolicy, env, policy_kwargs=policy_kwargs, **kwargs)
        model.policy.load_state_dict(supervised.state_dict())
        return model

    def _update_learning_rate(self, optimizers: Any) -> None:
        # SB3 would give every parameter group the same rate; keep each group's scale.
        learning_rate = self.lr_schedule(self._current_progress_remaining)
        self.logger.record("train/learning_rate", learning_rate)
        self.policy.set_learning_rate(learning_rate)

    def train(self) -> None:
        """One PPO update over the rollout buffer (SB3's, plus the expected-cost term).

        :class:`~agents.learners.ppo.FastPPO`'s update loop; the cost term comes from
        :meth:`_evaluate` (the call probabilities) and :meth:`_aux_loss`.
        """
        verify_optimizer(self.policy, self.policy.optimizer)
        super().train()

    def _evaluate(self, obs: torch.Tensor, actions: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, Any]:
        if self._fast_heads:  # evaluate_actions_and_probabilities' operations, in its order
            logits, values = bernoulli_heads(self.policy, obs)
            log_prob = bernoulli_log_prob(logits, actions)
            entropy = bernoulli_entropy(logits)
            return values, log_prob, entropy, torch.sigmoid(logits)
        return self.policy.evaluate_actions_and_probabilities(obs, actions)

    def _fused_costs(self) -> torch.Tensor:
        return self._relative_costs

    def _aux_loss(self, aux: Any) -> torch.Tensor:
        # ``E_t[sum_i c_i p_{t,i}]``, weighted by ``aux_coef`` (``cost_coef``)
        return (aux * self._relative_costs).sum(dim=1).mean()

    def _record_train_logs(self, logs: dict[str, list[torch.Tensor]],
                           ratios: list[torch.Tensor], kl_per_epoch: list[list[Any]],
                           clip_range: float, clip_range_vf: float | None,
                           loss: torch.Tensor) -> None:
        """Means over every minibatch of every epoch, the cost term as ``train/cost_term``.

        (SB3 averages ``approx_kl`` over the last epoch only.)
        """
        values = {"entropy_loss": as_floats(logs["entropy"]),
                  "policy_gradient_loss": as_floats(logs["pg"]),
                  "value_loss": as_floats(logs["value"]), "cost_term": as_floats(logs["aux"]),
                  "clip_fraction": clip_fractions(ratios, clip_range),
                  "approx_kl": [float(kl) for epoch in kl_per_epoch for kl in epoch]}
        for key, floats in values.items():
            self.logger.record(f"train/{key}", float(np.mean(floats)) if floats else 0.0)
        self.logger.record("train/explained_variance", explained_variance(
            self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten()))
        self.logger.record("train/clip_range", clip_range)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
