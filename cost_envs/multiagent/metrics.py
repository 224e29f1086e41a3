"""System metrics of a multi-tenant episode: throughput, latency, spend, fairness.

:func:`run_episode` plays one episode with a joint policy and returns a :class:`TenantRun`,
which reads every metric from the tenants' infos (the env's ledger): nothing is added up
twice. Tasks the horizon cut (``task_cut``) are not finished tasks: they count in the spend,
never in throughput, latency or successes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cost_envs.multiagent.tenants import MultiTenantEnv

#: A joint policy: every live tenant's observation -> every live tenant's action.
JointPolicy = Callable[[Mapping[str, np.ndarray]], Mapping[str, Any]]


def jain_index(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)``: 1 when all equal, ``1/n`` at worst.

    All zeros count as fair (1.0): nobody got less than anybody.

    Raises:
        ValueError: An empty, negative or non-finite input.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all() or (x < 0).any():
        raise ValueError(f"jain_index: expected a non-empty 1-D sequence of finite numbers "
                         f">= 0, got {values!r}")
    squares = float((x * x).sum())
    if squares == 0.0:
        return 1.0
    return float(x.sum()) ** 2 / (x.size * squares)


@dataclass
class TenantRun:
    """What one episode did, per tenant (built by :func:`run_episode` or :meth:`record`).

    Attributes:
        tenants: Tenant names, in the env's order.
        steps: Steps the episode ran.
        spend: Money each tenant spent (surcharges included), cut tasks included.
        completed: Tasks each tenant finished (success or not) before the horizon.
        successes: Of those, the successful ones.
        task_steps: Steps of every completed task, waits included (its latency).
        waits: Steps each tenant waited.
    """

    tenants: list[str]
    steps: int = 0
    spend: dict[str, float] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    successes: dict[str, int] = field(default_factory=dict)
    task_steps: list[int] = field(default_factory=list)
    waits: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for table in (self.spend, self.completed, self.successes, self.waits):
            for agent in self.tenants:
                table.setdefault(agent, 0)

    def record(self, infos: Mapping[str, Mapping[str, Any]]) -> None:
        """Add one step's infos."""
        self.steps += 1
        for agent, info in infos.items():
            self.spend[agent] += info["cost"]
            self.waits[agent] += bool(info.get("waited", False))
            if "task_steps" in info and not info["task_cut"]:
                self.completed[agent] += 1
                self.successes[agent] += bool(info["success"])
                self.task_steps.append(int(info["task_steps"]))

    def metrics(self) -> dict[str, float]:
        """The headline numbers of the episode.

        Returns:
            ``throughput`` (successful tasks per step, all tenants: a task that fails
            fast is not work done), ``finished_per_step`` (tasks ended, success or not),
            ``success_rate`` (of finished tasks), ``latency`` (mean steps per finished
            task, waits included; NaN when none finished), ``spend_per_tenant`` (mean),
            ``fairness`` (Jain's index over the tenants' successful tasks), ``org_cps``
            (total spend per success, over at least one), ``wait_share`` (share of
            tenant-steps spent waiting).
        """
        completed = sum(self.completed.values())
        successes = sum(self.successes.values())
        spend = sum(self.spend.values())
        steps = max(1, self.steps)
        n = len(self.tenants)
        return {
            "throughput": successes / steps,
            "finished_per_step": completed / steps,
            "success_rate": successes / completed if completed else 0.0,
            "latency": float(np.mean(self.task_steps)) if self.task_steps else float("nan"),
            "spend_per_tenant": spend / n,
            "fairness": jain_index([self.successes[a] for a in self.tenants]),
            "org_cps": spend / max(1, successes),
            "wait_share": sum(self.waits.values()) / (steps * n),
        }


def run_episode(env: MultiTenantEnv, policy: JointPolicy, seed: int | None = None) -> TenantRun:
    """Play one episode of ``env`` with ``policy`` and record it.

    A policy with an ``observe(infos)`` method is told every step's infos (whether each
    tenant waited), and one with ``reset(observations)`` is reset at the start.
    """
    observations, _ = env.reset(seed=seed)
    if hasattr(policy, "reset"):
        policy.reset(observations)
    run = TenantRun(list(env.possible_agents))
    while env.agents:
        observations, _, _, _, infos = env.step(policy(observations))
        run.record(infos)
        if hasattr(policy, "observe"):
            policy.observe(infos)
    return run
