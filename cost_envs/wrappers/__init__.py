"""Wrappers: per-episode budgets and cost accounting, composable like Gymnasium's own."""

from cost_envs.wrappers.accounting import CostAccounting
from cost_envs.wrappers.budget import HardBudget

__all__ = ["CostAccounting", "HardBudget"]
