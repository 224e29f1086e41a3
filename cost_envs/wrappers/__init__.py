"""Wrappers: budgets, tiers, step limits, accounting and task replay, like Gymnasium's own.

Put ``HardBudget`` and ``StepLimit`` directly on the environment, below accounting
wrappers such as ``CostAccounting``: a budget truncation does not step the wrappers
beneath it, so they would not see the episode end. ``gym.make(id, budget=...,
on_exceed=...)`` builds ``HardBudget`` in that place, inside the made env
(:mod:`cost_envs.registration`).
"""

from cost_envs.wrappers.accounting import CostAccounting
from cost_envs.wrappers.budget import HardBudget
from cost_envs.wrappers.limits import StepLimit
from cost_envs.wrappers.replay import TaskReplay
from cost_envs.wrappers.tiers import TIERS, BudgetTier

__all__ = ["TIERS", "BudgetTier", "CostAccounting", "HardBudget", "StepLimit", "TaskReplay"]
