"""Allocators for many tenants on one pool (:mod:`cost_envs.multiagent`).

:mod:`agents.multiagent.baselines` holds the joint policies built from single-agent
allocators: every tenant alone (:class:`IndependentTenants`) and a central scheduler
(:class:`CentralScheduler`). Shared-parameter PPO through SuperSuit lives in
:mod:`agents.learners.multitenant` (the ``multiagent`` extra), one LoRA adapter per tenant
on its frozen base in :mod:`agents.learners.multitenant_adapters`.
"""

from agents.multiagent.baselines import CentralScheduler, IndependentTenants, best_rule

__all__ = ["CentralScheduler", "IndependentTenants", "best_rule"]
