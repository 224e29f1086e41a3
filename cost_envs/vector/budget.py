"""VectorHardBudget: :class:`~cost_envs.wrappers.HardBudget` for every sub-env of a batched env.

Each sub-env has its own budget; the check, the masking and the truncation are
``HardBudget``'s, row by row and bit for bit (the same comparisons ``spent + price <=
budget`` on the same floats), so ``gym.make_vec(id, n, budget=b, on_exceed=mode)`` with
``vectorization_mode="vector_entry_point"`` returns what the ``"sync"`` mode (``HardBudget``
inside each single env) returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import VectorWrapper

from cost_envs.config import number
from cost_envs.vector.base import BatchedOrchestrationEnv
from cost_envs.vector.info import VectorInfo
from cost_envs.wrappers.budget import check_budget_args


class VectorHardBudget(VectorWrapper):
    """Caps each sub-env's episode spend: its ledger never exceeds its budget.

    Per sub-env exactly :class:`~cost_envs.wrappers.HardBudget`: an action that would
    overspend is masked down to the requested agents that fit, in bit order
    (``on_exceed="mask"``), or the episode is truncated without stepping
    (``"truncate"``, and ``"mask"`` when nothing requested fits); ``info`` gets
    ``budget_remaining`` at every step and ``budget_exceeded`` on a cut-short step.
    :meth:`action_masks` gives ``MaskablePPO``'s mask for each sub-env.

    It sits directly on a :class:`BatchedOrchestrationEnv` (the one whose ledger and prices
    it reads) and filters each step from inside it (``attach_budget``), so the budget
    takes effect before autoreset, as ``HardBudget`` inside a single env does.

    Args:
        env: The batched env.
        budget: Money per episode: one number for every sub-env, or one per sub-env
            (finite, ``>= 0``).
        on_exceed: ``"mask"`` or ``"truncate"``.

    Raises:
        ValueError: A bad budget or ``on_exceed``.
        TypeError: If ``env`` is not a batched orchestration env.
    """

    def __init__(self, env: BatchedOrchestrationEnv, budget: Any,
                 on_exceed: str = "mask") -> None:
        if not isinstance(env, BatchedOrchestrationEnv):
            raise TypeError("VectorHardBudget: expected a BatchedOrchestrationEnv (a cost_envs "
                            f"batched env, unwrapped), got {type(env).__name__}")
        super().__init__(env)
        self._base = env
        check_budget_args(0.0, on_exceed)  # on_exceed only: the budgets are checked below
        budgets = self._budgets(budget, "budget")
        self._budget = budgets.copy()
        self._next_budget = budgets
        self._on_exceed = on_exceed
        self._truncate = on_exceed == "truncate"
        self._fallback = bool(getattr(env.single_env, "zero_action_fallback", False))
        env.attach_budget(self)

    def _budgets(self, budget: Any, what: str) -> np.ndarray:
        n = self._base.num_envs
        values = np.asarray(budget, dtype=object)
        if values.ndim == 0:
            values = np.full(n, budget, dtype=object)
        if values.shape != (n,):
            raise ValueError(f"VectorHardBudget: {what}: expected a number or {n} numbers "
                             f"(one per sub-env), got shape {values.shape}")
        return np.array([number(b, what, minimum=0, where="VectorHardBudget")
                         for b in values.tolist()], dtype=np.float64)

    @property
    def budget(self) -> np.ndarray:
        """Each sub-env's budget for its current episode (a copy)."""
        return self._budget.copy()

    @property
    def on_exceed(self) -> str:
        """``"mask"`` or ``"truncate"``."""
        return self._on_exceed

    @property
    def remaining_budget(self) -> np.ndarray:
        """Money left in each sub-env's episode (its budget minus its ``episode_cost``)."""
        return self._budget - self._base.episode_cost

    def set_budget(self, budget: Any) -> None:
        """Use ``budget`` (a number, or one per sub-env) from each sub-env's next reset on."""
        self._next_budget = self._budgets(budget, "set_budget")

    def action_masks(self) -> np.ndarray:
        """``MaskablePPO`` masks, ``(num_envs, 2*m)``: ``[can be 0, can be 1]`` per agent.

        Row ``j`` is what ``HardBudget.action_masks`` gives for sub-env ``j``: index ``2i``
        always True, ``2i+1`` True iff agent ``i`` alone fits the remaining budget.
        """
        base = self._base
        spent = base.episode_cost[:, None]
        masks = np.ones((base.num_envs, 2 * base.n_agents), dtype=np.bool_)
        masks[:, 1::2] = (spent + (base.step_cost[:, None] + base.call_costs)
                          <= self._budget[:, None])
        return masks

    # -------------------------------------------------- hooks of the base env
    def before_step(self, calls: np.ndarray,
                    stepping: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The calls to run and the sub-envs to cut short (``HardBudget.step``'s check)."""
        base = self._base
        spent, budget = base.episode_cost, self._budget
        cost, _ = base.price(np.arange(base.num_envs), calls)
        over = stepping & (spent + cost > budget)
        if self._truncate or not over.any():  # truncate: cut short, calls as asked
            return calls, over
        idx = over.nonzero()[0]
        kept, fits = self._affordable(idx, calls[idx])
        calls = calls.copy()
        calls[idx] = kept
        fallback_fits = (self._fallback
                         & (spent[idx] + base.step_cost[idx] <= budget[idx]))
        cut = np.zeros(base.num_envs, dtype=np.bool_)
        cut[idx] = ~fits & ~fallback_fits
        return calls, cut

    def _affordable(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``HardBudget._affordable`` row by row: requested agents that still fit, in bit order."""
        base = self._base
        spent, budget = base.episode_cost[idx], self._budget[idx]
        costs = base.call_costs[idx]
        total = base.step_cost[idx].copy()
        kept = np.zeros_like(calls)
        for i in range(base.n_agents):
            keep = (calls[:, i] != 0) & (spent + (total + costs[:, i]) <= budget)
            total = np.where(keep, total + costs[:, i], total)
            kept[:, i] = keep
        return kept, np.any(kept, axis=1)  # np.any: numpy's stubs type an array's .any() a union

    def after_step(self, info: VectorInfo, stepping: np.ndarray, cut: np.ndarray) -> None:
        """Add ``budget_remaining`` (every stepped sub-env) and ``budget_exceeded``."""
        if cut.any():
            info.set("budget_exceeded", cut, True, np.bool_)
        remaining = self._budget - self._base.episode_cost
        info.set("budget_remaining", stepping, remaining[stepping], np.float64)

    def on_reset(self, idx: np.ndarray) -> None:
        """Sub-envs ``idx`` start an episode: their next budget becomes current."""
        self._budget[idx] = self._next_budget[idx]
