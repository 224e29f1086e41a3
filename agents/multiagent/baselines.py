"""Joint policies for a :class:`~cost_envs.multiagent.MultiTenantEnv` from one-tenant rules.

Both run one single-agent allocator per tenant on the tenant's own observation (the
base env's part; the shared state is cut off), so the rule each tenant follows is the
single-agent env's best fixed rule (:func:`best_rule`: :class:`agents.rules.BestFixedRule`
fitted on training tasks of the base env):

* :class:`IndependentTenants` submits every proposal as it is and lets the env's admission
  decide: a tenant whose calls find no free slot or no budget waits.
* :class:`CentralScheduler` sees all proposals first and admits whole proposals, best
  expected value per dollar first, within the capacity and the window's budget left; the
  others hold (``None``) for a step. A proposal is never cut down: on ToolBench and
  ExpertRouting the all-zero action answers at once, so dropping calls would end tasks.

A call's expected value is what the pool's capabilities say it contributes to the task's
need: ``cap_i . e_k`` for model ``i`` and the task embedding ``e_k`` of tenant ``k``'s
observation (the quantity :class:`agents.baselines.CapabilityMatch` and
:class:`agents.baselines.GreedyHeuristic` read); its dollar cost is the price the env will
charge now (base price plus surcharge, :class:`cost_envs.multiagent.Ledger`'s formula).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from agents.rules import BestFixedRule
from cost_envs.multiagent import MultiTenantEnv

#: Builds the single-agent allocator every tenant runs, from an env of the base id.
AllocatorFactory = Callable[[gym.Env], Any]


def best_rule(env: gym.Env, n_tasks: int = 100) -> BestFixedRule:
    """The base env's best fixed rule, fitted on ``n_tasks`` training tasks (the default)."""
    return BestFixedRule(env, n_tasks=n_tasks)


class IndependentTenants:
    """Every tenant runs the single-agent rule on its own observation, ignoring the rest.

    The rule is fitted once, on a separate env of the base id made with the tenants'
    ``env_kwargs`` (their pool and prices; fitting re-seeds the env it runs on), and
    shared by the tenants: rules are memoryless or count their steps in the per-tenant
    ``state`` this class keeps. A step the tenant waited does not count.

    Args:
        env: The multi-tenant env the policy will act in.
        make_allocator: The single-agent allocator, from an env of the base id.
    """

    name = "independent"

    def __init__(self, env: MultiTenantEnv, make_allocator: AllocatorFactory = best_rule
                 ) -> None:
        self.env = env
        self.allocator = make_allocator(gym.make(env.base, **env.env_kwargs))
        self.own = env.observation_layout["own"]
        self.tenants = list(env.possible_agents)
        self.reset()

    def reset(self, observations: Mapping[str, np.ndarray] | None = None) -> None:
        """Start an episode: every tenant at the start of a task."""
        self._state: dict[str, Any] = dict.fromkeys(self.tenants)
        self._start = dict.fromkeys(self.tenants, True)
        self._pending: dict[str, Any] = {}

    def propose(self, observations: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each tenant's single-agent action for its own observation."""
        actions = {}
        for agent, obs in observations.items():
            action, state = self.allocator.predict(
                obs[self.own], state=self._state[agent],
                episode_start=np.array([self._start[agent]]), deterministic=True)
            actions[agent] = np.asarray(action, dtype=np.int8).reshape(-1)
            self._pending[agent] = state
        return actions

    def __call__(self, observations: Mapping[str, np.ndarray]
                 ) -> Mapping[str, np.ndarray | None]:
        """The joint action: every proposal as it is (a subclass may hold one back: None)."""
        return self.propose(observations)

    def observe(self, infos: Mapping[str, Mapping[str, Any]]) -> None:
        """Advance each tenant's rule state, unless it waited; a new task restarts it."""
        for agent, info in infos.items():
            if info["waited"]:
                continue
            self._state[agent] = self._pending[agent]
            self._start[agent] = "task_steps" in info
            if self._start[agent]:
                self._state[agent] = None


class CentralScheduler(IndependentTenants):
    """Admits the tenants' proposals by expected value per dollar (see the module doc).

    Each step it prices every tenant's proposal as the env will (base price plus
    surcharge), scores it ``value * (1 + waits) / price`` (the value of its calls, plus 1
    for the step it advances a task; ``waits``, the steps the tenant's task has waited so
    far, ages a deferred tenant so that none starves), and admits proposals best first
    while every model called has a free slot and the window's budget covers the price.
    The others hold (action ``None``): they wait without taking a slot, and ask again next
    step. Budget left is read from the shared part of the observation; capacities and the
    surge are the env's published limits. It takes :class:`IndependentTenants`' arguments
    and runs its single-agent rules.
    """

    name = "scheduler"

    def __init__(self, env: MultiTenantEnv, make_allocator: AllocatorFactory = best_rule
                 ) -> None:
        super().__init__(env, make_allocator)
        self.capabilities = env.pool.capabilities.astype(np.float64)
        layout = env.tenant_envs[self.tenants[0]].observation_layout
        self.embedding = layout.get("task_embedding")
        self.budget_left = env.observation_layout["budget_left"]
        self.load = env.observation_layout["load"]

    def reset(self, observations: Mapping[str, np.ndarray] | None = None) -> None:
        """Start an episode: no tenant has waited."""
        super().reset(observations)
        self._waits = dict.fromkeys(self.tenants, 0)

    def __call__(self, observations: Mapping[str, np.ndarray]
                 ) -> dict[str, np.ndarray | None]:
        """The proposals that fit, best value per dollar first; ``None`` for the others."""
        proposals = self.propose(observations)
        if not proposals:
            return dict(proposals)
        env = self.env
        first = next(iter(observations.values()))
        budget = env.limits.org_budget
        money = float("inf") if budget is None else float(first[self.budget_left][0]) * budget
        load = first[self.load].astype(np.float64)
        slope = env.limits.price_slope
        ranked = []
        for agent, action in proposals.items():
            tenant = env.tenant_envs[agent]
            called = np.flatnonzero(action)
            costs = tenant.call_costs
            price = tenant.step_cost + float(sum(costs[i] * (1.0 + slope * load[i])
                                                 for i in called))
            value = 1.0
            if self.embedding is not None and called.size:
                need = observations[agent][self.own][self.embedding].astype(np.float64)
                value += float((self.capabilities[called] @ need).sum())
            score = value * (1 + self._waits[agent]) / max(price, 1e-12)
            ranked.append((-score, self.tenants.index(agent), agent, called, price))
        ranked.sort()
        free = list(env.ledger.capacity)
        # the env adds prices in its own order: keep a hair of the budget in hand
        margin = 1e-9 * (1.0 + money) if money != float("inf") else 0.0
        joint: dict[str, np.ndarray | None] = {}
        for _, _, agent, called, price in ranked:
            if all(free[i] >= 1 for i in called) and price <= money - margin:
                for i in called:
                    free[i] -= 1
                money -= price
                joint[agent] = proposals[agent]
            else:
                joint[agent] = None
        return joint

    def observe(self, infos: Mapping[str, Mapping[str, Any]]) -> None:
        """Advance the tenants' rules; count each task's waits for the ageing."""
        super().observe(infos)
        for agent, info in infos.items():
            self._waits[agent] = 0 if "task_steps" in info else (
                self._waits[agent] + bool(info["waited"]))
