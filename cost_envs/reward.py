"""The reward of the LoRA-Guided PPO paper (its Eq. 1).

    r_t = alpha * S_t + beta * Q_t - lam * sum_i c_i z_{t,i} - gamma * ||z_t||_0

``S_t`` is 1 on the step that ends an episode successfully (else 0), ``Q_t`` the episode's
quality in ``[0, 10]`` on the final step (else 0), ``c_i`` agent i's price, ``z_t`` the
MultiBinary action that actually ran and ``||z_t||_0`` the number of calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from cost_envs.config import number, reject_unknown


@dataclass(frozen=True)
class RewardWeights:
    """Weights of Eq. 1. All finite and non-negative.

    Args:
        alpha: Bonus for success.
        beta: Weight of quality (0..10).
        lam: Price of money: reward lost per unit of cost.
        gamma: Reward lost per agent call, whatever its price.
    """

    alpha: float = 1.0
    beta: float = 0.05
    lam: float = 5.0
    gamma: float = 0.005

    def __post_init__(self) -> None:
        for f in fields(self):
            value = number(getattr(self, f.name), f"RewardWeights.{f.name}", minimum=0)
            object.__setattr__(self, f.name, value)

    def __call__(self, success: bool, quality: float, step_cost: float, n_calls: int) -> float:
        """Eq. 1 for one step; pass ``success=False, quality=0`` on non-final steps."""
        return (
            self.alpha * float(success)
            + self.beta * quality
            - self.lam * step_cost
            - self.gamma * n_calls
        )

    @classmethod
    def coerce(cls, value: RewardWeights | Mapping[str, Any] | None) -> RewardWeights:
        """Accept weights, a mapping of some of their fields, or ``None`` for the defaults."""
        if value is None:
            return cls()
        if isinstance(value, RewardWeights):
            return value
        if isinstance(value, Mapping):
            reject_unknown(value, [f.name for f in fields(cls)], "reward_weights")
            return cls(**value)
        raise ValueError(
            f"reward_weights: expected RewardWeights, a mapping or None, got {value!r}"
        )
