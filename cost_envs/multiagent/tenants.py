"""MultiTenant: N orchestrators share one pool, its capacity and the organisation's budget."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import concatenate

from cost_envs.actions import binary_actions, describe
from cost_envs.config import integer, one_of, reject_unknown
from cost_envs.core import OrchestrationEnv
from cost_envs.extras import missing_modules
from cost_envs.limits import check_memory, tenant_bytes
from cost_envs.multiagent.shared import Ledger, SharedLimits
from cost_envs.registration import FACTORIES

#: Single-agent ids a tenant may run (one task stream each, the same pool for all).
BASE_IDS = ("cost_envs/ToolBench-v0", "cost_envs/ExpertRouting-v0",
            "cost_envs/AgenticRouting-v0", "cost_envs/FlightPlanner-v0")
#: Entries appended to each tenant's own observation.
SHARED_FEATURES = ("budget_left", "waited_last_step")


def _parallel_base() -> type:
    """PettingZoo's ``ParallelEnv`` when PettingZoo is installed, else ``object``.

    The env needs nothing from PettingZoo (it implements the whole ``ParallelEnv`` API
    itself), so ``cost_envs`` imports without the extra; with it, the class *is* a
    ``ParallelEnv``, which SuperSuit's vector constructors check with ``isinstance``.
    Imported by name, not with an import statement: cost_envs imports no extra's module
    statically (tests/test_packaging.py).
    """
    if missing_modules(["pettingzoo"]):
        return object
    return importlib.import_module("pettingzoo").ParallelEnv


class TenantActions(spaces.MultiBinary):
    """A tenant's ``MultiBinary(m)`` whose batches also take 0.0/1.0 floats.

    Stable-Baselines3 hands ``MultiBinary`` actions over as float32 0.0/1.0 (its Bernoulli
    samples), and SuperSuit's ``concat_vec_envs_v1`` gathers each copy's rows with
    Gymnasium's ``concatenate`` into an array of the space's dtype, int8, which NumPy
    refuses to fill from floats: PettingZoo's plain SB3 recipe crashed at its first step.
    This subclass registers its own ``concatenate`` (Gymnasium's extension point for
    spaces), which checks each row as the env does and stores it as int8. Everything else,
    equality with ``MultiBinary(m)`` included, is ``MultiBinary``'s.
    """


@concatenate.register(TenantActions)
def _concatenate_tenant_actions(space: TenantActions, items: Any, out: np.ndarray
                                ) -> np.ndarray:
    rows = []
    for item in items:
        row = binary_actions(item, space.shape)
        if row is None:
            raise ValueError(f"{MultiTenantEnv.metadata['name']}: invalid action "
                             f"{describe(item)}: expected an element of {space}, an array "
                             f"of shape {space.shape} holding only 0 and 1")
        rows.append(row)
    return np.stack(rows, axis=0, out=out)


class MultiTenantEnv(_parallel_base()):  # type: ignore[misc]  # pettingzoo's, imported lazily
    """N tenants, each working through its own task stream on one shared pool.

    ## Description

    Every tenant is an orchestrator running tasks of the same single-agent env (``base``,
    e.g. ``cost_envs/ToolBench-v0``) back to back: when its task ends, its next task starts
    on the following step. The env composes ``n_tenants`` instances of that env, one per
    tenant, and steps each through its own ``step``: the tasks, their luck, the transitions,
    prices, rewards and the info contract are exactly the single-agent env's. What the
    tenants share is enforced here, at every step, in a fixed admission order:

    * **Capacity**: model ``i`` serves at most ``capacity_i`` calls per step (2 by default).
    * **Organisation budget**: the tenants together spend at most ``org_budget`` per window
      of ``budget_window`` steps (no limit by default).
    * **Surge prices** (optional): a call to model ``i`` costs its base price times
      ``1 + price_slope * load_i``, ``load_i`` being the share of its capacity the previous
      step used, so at ``price_slope=1`` a model used to capacity costs double.

    Admission is all or nothing per tenant. Tenants are considered in the order
    ``t mod N, t mod N + 1, ...`` at step ``t`` (a rotation, so that no tenant is always
    last; no randomness). A tenant is admitted when every model it calls still has a free
    slot and its price (the base env's price of the action plus the surcharge) fits the
    window's remaining budget; it then runs its step and pays. Otherwise **the tenant
    waits**: its env does not move, nothing is spent, ``info["waited"]`` is True, and the
    task it is on takes one more step. Each wait adds exactly one step to that task's latency
    (``task_steps`` in its final info). The next step the tenant acts again, on the same
    own observation (a deterministic policy that ignores the shared state asks again for
    the same calls). An action that calls nothing always fits the capacity; it still waits
    when the base env charges a step cost (ExpertRouting's controller, AgenticRouting's small
    model) that the window can no longer pay.

    ## Action Space

    Per tenant, the base env's ``MultiBinary(m)`` over the shared pool (bit i = call model
    i), as a :class:`TenantActions` so that SuperSuit's vector envs accept the float 0.0/1.0
    actions of Stable-Baselines3. Every live tenant must be given an action; a malformed
    one raises ``ValueError`` naming the tenant and the expected space. ``None`` holds: the
    tenant waits this step by choice (exactly as if its calls had found no slot), which
    lets a central scheduler defer a tenant.

    ## Observation Space

    Per tenant, ``Box(0, 1, (d + 2 + m,), float32)``: the base env's own observation (``d``
    entries, its ``observation_layout``), then the share of the window's budget left
    (1 without a budget), whether this tenant waited on the last step, and each model's
    load on the last step (the share of its capacity used; without a capacity, the share
    of tenants that called it). :attr:`observation_layout` names the slices.

    ## Rewards

    The base env's Eq. 1 reward for the step, with the surcharge counted as cost
    (``- lam * surcharge``); 0 on a step the tenant waits.

    ## Starting State

    ``reset(seed=s)`` derives one seed per tenant from ``s`` (``SeedSequence(s).spawn``),
    so tenant ``k`` sees the same task stream whatever ``n_tenants`` is, and resets each
    tenant's env with it. Every random draw is made by the base envs at their resets: the
    same seed and actions give the same trajectories. Loads start at 0, the budget full.

    ## Episode End

    Tasks end inside the episode (``terminated`` stays False: a tenant never leaves). The
    episode is truncated for every tenant after ``max_steps`` steps (100 by default); the
    tasks in flight then end as failed, with ``task_cut`` True in their final info.

    ## Info

    Per tenant and step: ``cost`` (base price plus surcharge), ``flops``, ``calls`` (int8,
    the calls that ran: zeros on a wait), ``waited``, ``surcharge``. On the step a task
    ends: ``success``, ``is_success``, ``quality``, ``episode_cost`` (the task's spend,
    surcharges included), ``episode_flops``, ``task_steps`` (steps from its start to its
    end, waits included), ``task_waits``, ``task_cut``.

    ## Arguments

    * ``base``: one of :data:`BASE_IDS` (default ``cost_envs/ToolBench-v0``).
    * ``n_tenants``: tenants, >= 1 (default 4).
    * ``capacity``, ``org_budget``, ``budget_window``, ``price_slope``: the
      :class:`~cost_envs.multiagent.shared.SharedLimits`.
    * ``max_steps``: steps per episode (default 100).
    * ``env_kwargs``: arguments of the base env (its pool, reward weights, ...).

    ## Version History

    * v0: initial version.
    """

    metadata: dict[str, Any] = {"name": "multi_tenant_v0", "render_modes": ["ansi"],
                                "is_parallelizable": True}

    def __init__(self, base: str = "cost_envs/ToolBench-v0", n_tenants: int = 4, *,
                 capacity: int | tuple[int, ...] | None = 2, org_budget: float | None = None,
                 budget_window: int = 10, price_slope: float = 0.0, max_steps: int = 100,
                 env_kwargs: Mapping[str, Any] | None = None,
                 render_mode: str | None = None) -> None:
        where = "MultiTenantEnv"
        one_of(base, "base", BASE_IDS, where=where)
        if render_mode is not None:
            one_of(render_mode, "render_mode", self.metadata["render_modes"], where=where)
        self.render_mode = render_mode
        self.base = base
        self.n_tenants = integer(n_tenants, "n_tenants", minimum=1, where=where)
        self.max_steps = integer(max_steps, "max_steps", minimum=1, where=where)
        self.limits = SharedLimits(capacity, org_budget, budget_window, price_slope)
        kwargs = dict(env_kwargs or {})
        reject_unknown(kwargs, [p for p in _env_arguments(base) if p != "render_mode"],
                       f"{where}: env_kwargs")
        #: The base env's arguments (a copy): what a policy fitted on a separate env of
        #: ``base`` must be given to see the tenants' pool and prices.
        self.env_kwargs: dict[str, Any] = kwargs
        first = _make_base(base, dict(kwargs))  # sizes the tenants before they are built
        check_memory(tenant_bytes(first, self.n_tenants), f"{where}: n_tenants={n_tenants}",
                     "use fewer tenants")
        self.possible_agents = [f"tenant_{k}" for k in range(self.n_tenants)]
        self.agents: list[str] = []
        self.tenant_envs: dict[str, OrchestrationEnv] = {
            agent: first if k == 0 else _make_base(base, dict(kwargs))
            for k, agent in enumerate(self.possible_agents)}
        self.n_models = first.n_agents
        self.pool = first.pool
        self.ledger = Ledger(self.limits, self.n_models, self.n_tenants)
        width = int(np.prod(first.observation_space.shape or (0,)))  # a flat Box
        self.observation_layout = {"own": slice(0, width),
                                   "budget_left": slice(width, width + 1),
                                   "waited_last_step": slice(width + 1, width + 2),
                                   "load": slice(width + 2, width + 2 + self.n_models)}
        self._obs_space = spaces.Box(0.0, 1.0, (width + 2 + self.n_models,), np.float32)
        self._act_space = TenantActions(self.n_models)
        self._lam = first.reward_weights.lam
        self._seeded = False
        self._steps = 0

    # ----------------------------------------------------------------- spaces
    def observation_space(self, agent: str) -> spaces.Box:
        """The tenant's observation space (the same object for every call)."""
        self._check_agent(agent)
        return self._obs_space

    def action_space(self, agent: str) -> TenantActions:
        """The tenant's ``MultiBinary(m)`` (the same object for every call and tenant).

        A :class:`TenantActions`, so that SuperSuit's vector envs take SB3's float actions.
        """
        self._check_agent(agent)
        return self._act_space

    def _check_agent(self, agent: str) -> None:
        if agent not in self.tenant_envs:
            raise ValueError(f"{self.metadata['name']}: unknown tenant {agent!r}; expected "
                             f"one of {self.possible_agents}")

    # ------------------------------------------------------------------- API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Start an episode: every tenant on the next task of its own stream.

        Args:
            seed: Seeds every tenant's stream (see Starting State); ``None`` continues the
                streams (a fresh entropy seed at the first reset).
            options: Accepted for PettingZoo's API (its test passes one) and not used.
        """
        if seed is None and not self._seeded:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        child_seeds: list[int | None] = [None] * self.n_tenants
        if seed is not None:
            integer(seed, "seed", minimum=0, where=self.metadata["name"])
            children = np.random.SeedSequence(seed).spawn(self.n_tenants)
            child_seeds = [int(c.generate_state(1)[0]) for c in children]
            self._seeded = True
        self.agents = list(self.possible_agents)
        self.ledger.reset()
        self._steps = 0
        self._own: dict[str, np.ndarray] = {}
        self._task_cost: dict[str, float] = {}
        self._base_costs: dict[str, list[float]] = {}
        self._task_steps: dict[str, int] = {}
        self._task_waits: dict[str, int] = {}
        self._waited: dict[str, bool] = {}
        self._in_flight = dict.fromkeys(self.possible_agents, True)
        for agent, child in zip(self.possible_agents, child_seeds, strict=True):
            self._own[agent], _ = self.tenant_envs[agent].reset(seed=child)
            self._start_task(agent)
        return self._observations(), {agent: {} for agent in self.agents}

    def _start_task(self, agent: str) -> None:
        # the base env's prices are fixed for a task (ExpertRouting's depend on it)
        self._base_costs[agent] = self.tenant_envs[agent].call_costs.tolist()
        self._task_cost[agent] = 0.0
        self._task_steps[agent] = 0
        self._task_waits[agent] = 0
        self._waited[agent] = False

    def step(self, actions: Mapping[str, Any]) -> tuple[
            dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool],
            dict[str, dict[str, Any]]]:
        """Admit, run and price every tenant's action for one step (see the class doc)."""
        if not self.agents:
            raise gym.error.ResetNeeded(f"{self.metadata['name']}: call reset() before "
                                        "step() (the episode has not started or has ended)")
        requests = self._validate(actions)
        ledger = self.ledger
        ledger.start_step()
        n = self.n_tenants
        start = self._steps % n
        last = self._steps + 1 >= self.max_steps
        rewards: dict[str, float] = {}
        infos: dict[str, dict[str, Any]] = {}
        for j in range(n):
            agent = self.possible_agents[(start + j) % n]
            env = self.tenant_envs[agent]
            request = requests[agent]
            self._task_steps[agent] += 1
            if request is not None:
                calls, called = request
                base_cost, _ = env.price(called)
                surcharge = ledger.surcharge(called, self._base_costs[agent])
                price = base_cost + surcharge
            if request is None or not ledger.admits(called, price):
                self._waited[agent] = True
                self._task_waits[agent] += 1
                rewards[agent] = 0.0
                infos[agent] = {"cost": 0.0, "flops": 0.0,
                                "calls": np.zeros(self.n_models, dtype=np.int8),
                                "waited": True, "surcharge": 0.0}
                continue
            ledger.admit(called, price)
            self._waited[agent] = False
            own, reward, terminated, truncated, info = env.step(calls)
            self._task_cost[agent] += price
            info["cost"] = price
            info["waited"] = False
            info["surcharge"] = surcharge
            rewards[agent] = reward - self._lam * surcharge
            infos[agent] = info
            if terminated or truncated:
                self._finish_task(agent, info, cut=False)
                if not last:  # the next task starts on the next step
                    own, _ = env.reset()
                    self._start_task(agent)
                    self._in_flight[agent] = True
                else:
                    self._in_flight[agent] = False
            self._own[agent] = own
        ledger.end_step()
        self._steps += 1
        if last:  # the horizon cuts the tasks still running
            for agent in self.possible_agents:
                if self._in_flight[agent]:
                    infos[agent].update(self.tenant_envs[agent].truncate())
                    self._finish_task(agent, infos[agent], cut=True)
            self.agents = []
        observations = self._observations()
        terminations = dict.fromkeys(self.possible_agents, False)
        truncations = dict.fromkeys(self.possible_agents, last)
        order = self.possible_agents  # the tenants' order, not this step's admission order
        return (observations, {a: rewards[a] for a in order}, terminations, truncations,
                {a: infos[a] for a in order})

    def _finish_task(self, agent: str, info: dict[str, Any], *, cut: bool) -> None:
        info["episode_cost"] = self._task_cost[agent]
        info["task_steps"] = self._task_steps[agent]
        info["task_waits"] = self._task_waits[agent]
        info["task_cut"] = cut

    def _validate(self, actions: Mapping[str, Any]
                  ) -> dict[str, tuple[np.ndarray, list[int]] | None]:
        name = self.metadata["name"]
        if not isinstance(actions, Mapping):
            raise ValueError(f"{name}: actions: expected a dict from tenant to action, got "
                             f"{type(actions).__name__}")
        unknown = [a for a in actions if a not in self.tenant_envs]
        missing = [a for a in self.agents if a not in actions]
        if unknown or missing:
            raise ValueError(f"{name}: actions: expected one action for each of "
                             f"{self.agents}, got unknown {unknown}, missing {missing}")
        requests: dict[str, tuple[np.ndarray, list[int]] | None] = {}
        for agent in self.agents:
            if actions[agent] is None:  # the tenant holds: it waits by choice
                requests[agent] = None
                continue
            calls = binary_actions(actions[agent], (self.n_models,))
            if calls is None:
                raise ValueError(
                    f"{name}: tenant {agent!r}: invalid action {describe(actions[agent])}: "
                    f"expected an element of MultiBinary({self.n_models}), an array of shape "
                    f"({self.n_models},) holding only 0 and 1 (or None: the tenant waits)")
            requests[agent] = (calls, calls.nonzero()[0].tolist())
        return requests

    def _observations(self) -> dict[str, np.ndarray]:
        ledger = self.ledger
        shared = (np.array([ledger.budget_left, 0.0, *ledger.load], np.float32),
                  np.array([ledger.budget_left, 1.0, *ledger.load], np.float32))
        return {agent: np.concatenate((self._own[agent], shared[self._waited[agent]]))
                for agent in self.possible_agents}

    def render(self) -> str | None:
        """Text summary of the step (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        if not hasattr(self, "_task_steps"):  # the per-task counters start at reset
            raise gym.error.ResetNeeded(f"{self.metadata['name']}: call reset() before "
                                        "render()")
        ledger = self.ledger
        lines = [f"{self.metadata['name']} on {self.base} step {self._steps}: window spend "
                 f"{ledger.window_spent:.4f}, load {[round(x, 2) for x in ledger.load]}"]
        lines += [f"  {agent}: task step {self._task_steps[agent]}, waits "
                  f"{self._task_waits[agent]}, task cost {self._task_cost[agent]:.4f}"
                  for agent in self.possible_agents]
        return "\n".join(lines)

    def close(self) -> None:
        """Close every tenant's env."""
        for env in self.tenant_envs.values():
            env.close()


def _env_arguments(base: str) -> list[str]:
    return list(inspect.signature(FACTORIES[base].env_class).parameters)


def _make_base(base: str, kwargs: dict[str, Any]) -> OrchestrationEnv:
    """The base env itself (no Gymnasium checker wrappers: each tenant steps it directly)."""
    env = gym.make(base, disable_env_checker=True, **kwargs)
    return env.unwrapped  # type: ignore[return-value]  # FACTORIES' ids: OrchestrationEnvs
