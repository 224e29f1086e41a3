"""The limits tenants share: capacity, an organisation budget, prices rising with load.

Capacity is per model per step, the budget per window of steps.

One home for the admission rule, so the env (:mod:`cost_envs.multiagent.tenants`) and a
central scheduler that plans around it (``agents.multiagent``) price and check a call the
same way. Plain Python floats and lists: a step admits a handful of small requests, and
numpy's per-call overhead would dominate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cost_envs.config import integer, number


@dataclass(frozen=True)
class SharedLimits:
    """What the tenants of one pool share, checked at construction.

    Args:
        capacity: Calls each model serves per step: one int for every model, a sequence
            of one int per model, or ``None`` for no limit.
        org_budget: Money the organisation may spend per window (``None``: no limit).
        budget_window: Steps per budget window; the window's spend restarts at 0 at every
            multiple of it.
        price_slope: Surge pricing: a call to model ``i`` costs its base price times
            ``1 + price_slope * load_i``, where ``load_i`` is the share of model ``i``'s
            capacity the previous step used (0: fixed prices). Needs a capacity.
    """

    capacity: int | tuple[int, ...] | None = 2
    org_budget: float | None = None
    budget_window: int = 10
    price_slope: float = 0.0

    def __post_init__(self) -> None:
        where = "SharedLimits"
        capacity = self.capacity
        if isinstance(capacity, Sequence) and not isinstance(capacity, str):
            capacity = tuple(integer(c, f"capacity[{i}]", minimum=1, where=where)
                             for i, c in enumerate(capacity))
            if not capacity:
                raise ValueError(f"{where}: capacity: expected one int >= 1 per model, "
                                 "got an empty sequence")
        elif capacity is not None:
            capacity = integer(capacity, "capacity (calls per model per step, or None)",
                               minimum=1, where=where)
        object.__setattr__(self, "capacity", capacity)
        if self.org_budget is not None:
            object.__setattr__(self, "org_budget",
                               number(self.org_budget, "org_budget", minimum=0, where=where))
        object.__setattr__(self, "budget_window",
                           integer(self.budget_window, "budget_window", minimum=1, where=where))
        slope = number(self.price_slope, "price_slope", minimum=0, where=where)
        if slope > 0 and capacity is None:
            raise ValueError(f"{where}: price_slope={slope} needs a capacity (load is the "
                             "share of capacity used); expected capacity=<calls per step>")
        object.__setattr__(self, "price_slope", slope)

    def capacities(self, n_models: int) -> list[float]:
        """Calls per step of each of ``n_models`` models (``inf`` without a limit)."""
        if self.capacity is None:
            return [float("inf")] * n_models
        if isinstance(self.capacity, tuple):
            if len(self.capacity) != n_models:
                raise ValueError(f"SharedLimits: capacity has {len(self.capacity)} entries, "
                                 f"the pool has {n_models} models; expected one per model")
            return [float(c) for c in self.capacity]
        return [float(self.capacity)] * n_models


class Ledger:
    """The shared state of one episode: this step's free capacity, the window's spend.

    Args:
        limits: The shared limits.
        n_models: Models in the pool.
        n_tenants: Tenants calling them (a model's load without a capacity is the share
            of tenants that called it).
    """

    def __init__(self, limits: SharedLimits, n_models: int, n_tenants: int) -> None:
        self.limits = limits
        self.n_models = n_models
        self.capacity = limits.capacities(n_models)
        self._scale = [c if c != float("inf") else float(n_tenants) for c in self.capacity]
        self.budget = float("inf") if limits.org_budget is None else limits.org_budget
        self.reset()

    def reset(self) -> None:
        """The state at step 0: nothing used, the first window's budget untouched."""
        self.step_index = 0
        self.window_spent = 0.0
        #: Share of each model's capacity the previous step used, in [0, 1] (without a
        #: capacity: the share of tenants that called it).
        self.load = [0.0] * self.n_models
        self.used = [0] * self.n_models

    def start_step(self) -> None:
        """Open a step: every model's capacity free again."""
        self.used = [0] * self.n_models

    def surcharge(self, called: list[int], base_costs: list[float]) -> float:
        """Money ``called`` costs on top of the base prices this step (surge pricing)."""
        slope = self.limits.price_slope
        if slope == 0.0:
            return 0.0
        load = self.load
        return sum(base_costs[i] * slope * load[i] for i in called)

    def admits(self, called: list[int], price: float) -> bool:
        """Whether every model in ``called`` has a free slot and ``price`` fits the window."""
        used, capacity = self.used, self.capacity
        for i in called:
            if used[i] + 1 > capacity[i]:
                return False
        return self.window_spent + price <= self.budget

    def admit(self, called: list[int], price: float) -> None:
        """Take the slots of ``called`` and add ``price`` to the window's spend."""
        for i in called:
            self.used[i] += 1
        self.window_spent += price

    def end_step(self) -> None:
        """Close a step: its use becomes the load the next step's prices and tenants see."""
        self.load = [u / c for u, c in zip(self.used, self._scale, strict=True)]
        self.step_index += 1
        if self.step_index % self.limits.budget_window == 0:
            self.window_spent = 0.0  # the next step opens a new window

    @property
    def budget_left(self) -> float:
        """Share of the window's budget still unspent, in [0, 1] (1 without a budget)."""
        if self.budget == float("inf"):
            return 1.0
        if self.budget == 0.0:
            return 0.0
        return max(0.0, 1.0 - self.window_spent / self.budget)
