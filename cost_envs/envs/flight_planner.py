"""FlightPlanner-v0: book an itinerary within budget using planner, search and validator agents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from cost_envs.core import OrchestrationEnv, Outcome, State
from cost_envs.envs.flight_networks import (
    BROKEN_PRICE,
    budget_level,
    draw_block,
    mean_fare,
)
from cost_envs.pool import AgentPool, AgentSpec, coerce_pool
from cost_envs.reward import RewardWeights
from cost_envs.task_blocks import TaskBlock

SKILLS = ("planning", "search", "validation")
ROLES = ("planner", "search", "validator")
MAX_TURNS = 7
FARE_INFLATION = 0.02  # fares found at turn t cost (1 + 0.02 t) times more
SEARCH_MARKUP = 0.5  # a searcher of strength s pays up to 50% * (1 - s) above the best fare
ROUTE_NAMES = ("optimal", "detour", "broken")
DETOUR_SHARE = 0.6  # of a planner's unlucky proposals; the rest are broken routes
SEARCH_NOTICE = 0.5  # a searcher notices a missing leg with probability 0.5 * strength
NO_ROUTE = -1
#: Why the plan was dropped this turn, as :meth:`FlightPlannerEnv._advance` reports it.
NO_DROP, SEARCH_DROP, VALIDATOR_DROP = 0, 1, 2

_PRESET = (
    ("planner_small", "planner", 0.002, 2.1e13, (0.45, 0.05, 0.10)),
    ("planner_large", "planner", 0.030, 2.1e14, (0.88, 0.10, 0.30)),
    ("search_basic", "search", 0.001, 1e9, (0.0, 0.45, 0.0)),
    ("search_pro", "search", 0.006, 1e11, (0.0, 0.92, 0.05)),
    ("validator_small", "validator", 0.001, 1e12, (0.05, 0.0, 0.55)),
    ("validator_large", "validator", 0.012, 6e13, (0.25, 0.05, 0.95)),
)


def flight_planner_pool() -> AgentPool:
    """The preset pool: a cheap and a strong planner, searcher and validator."""
    return AgentPool(tuple(AgentSpec(*row) for row in _PRESET), SKILLS)


@dataclass(frozen=True, eq=False)
class FlightTask:
    """One FlightPlanner task with all of its randomness (privileged).

    Attributes:
        fares: ``(N, N)`` base fare of each direct leg, ``inf`` where there is none.
        origin: Origin airport.
        destination: Destination airport.
        shortest_hops: ``h*``, the fewest legs from origin to destination (BFS).
        hop_limit: Most legs an itinerary may have (``h* + 1``).
        budget: Price budget ``B_j`` of the itinerary.
        route_hops: Legs of the three candidate routes (optimal, detour, broken), from
            hop-bounded cheapest-walk search on the network.
        route_price: Base price of each candidate route.
        route_connected: Whether every leg of the route exists (False for ``broken``).
        luck: ``(MAX_TURNS, m)`` uniforms: a planner's proposal, a searcher's or
            validator's detection of a bad plan.
        fare_luck: ``(MAX_TURNS, m)`` uniforms: how far above the best fare a search lands.

    ``luck``, ``fare_luck`` and the broken route's price draw (``route_price[2]``) are the
    task's luck, which :func:`with_fresh_luck` redraws; the rest are its parameters.
    """

    fares: np.ndarray
    origin: int
    destination: int
    shortest_hops: int
    hop_limit: int
    budget: float
    route_hops: np.ndarray
    route_price: np.ndarray
    route_connected: np.ndarray
    luck: np.ndarray
    fare_luck: np.ndarray

    @property
    def mean_fare(self) -> float:
        """Average fare of the legs that exist."""
        return float(mean_fare(self.fares))


def with_fresh_luck(task: FlightTask, rng: np.random.Generator) -> FlightTask:
    """The same task with its luck drawn again from ``rng``, its parameters kept.

    The luck is what decides each call's outcome: every agent's ``luck`` and
    ``fare_luck`` at every turn, and the broken route's price draw (``P_opt * U(0.9,
    1.1)``, the fare a search quotes on it). The network, the origin and destination, the
    budget and the optimal and detour routes are shared with ``task``. Replay the result
    with ``reset(options={"task": ...})``: averaging over such draws is averaging over the
    luck for fixed parameters, which is how ``agents.planning``'s value estimates are
    checked. The env never calls this, so its task stream and dynamics are unchanged.
    """
    turns, m = task.luck.shape
    luck = rng.random((turns, m))
    fare_luck = rng.random((turns, m))
    route_price = task.route_price.copy()
    route_price[2] = route_price[0] * rng.uniform(*BROKEN_PRICE)
    for array in (luck, fare_luck, route_price):
        array.flags.writeable = False
    return replace(task, luck=luck, fare_luck=fare_luck, route_price=route_price)


def proposals(luck: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """A planner's proposal (0 optimal, 1 detour, 2 broken) on its luck, element by element."""
    rest = (luck - strength) / np.maximum(1.0 - strength, 1e-12)  # within the unlucky share
    return np.where(luck < strength, 0, np.where(rest < DETOUR_SHARE, 1, 2))


def notices(luck: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """Whether a searcher notices a broken route's missing leg, element by element."""
    return luck < SEARCH_NOTICE * strength


def detects(luck: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """Whether a validator catches a bad plan, element by element."""
    return luck < strength


def markups(fare_luck: np.ndarray, turns: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """A search's price over the best fare at ``turns`` (each element's turn, broadcast)."""
    return (1.0 + FARE_INFLATION * turns) * (1.0 + SEARCH_MARKUP * (1 - strength) * fare_luck)


class _Tables(NamedTuple):
    # per (turn, agent), as nested lists because indexing them is the hot path of step
    proposal: list
    notices: list
    detects: list
    markup: list
    budget_level: float


class FlightPlannerEnv(OrchestrationEnv[FlightTask]):
    """Book a valid multi-leg flight itinerary within a price budget, spending little on agents.

    ## Description

    The FlightPlanner setting of the LoRA-Guided PPO paper. Each task is a generated flight
    network of 9 airports (positions uniform in the unit square, each directed leg present
    with probability 0.32, base fare ``60 + 300 * distance * U(0.8, 1.3)``), an origin and
    a destination ``h* = 2`` or ``3`` legs apart (breadth-first search), a hop limit
    ``H = h* + 1`` and a budget ``B = P_opt * (1 + U(0.03, 0.35))`` where ``P_opt`` is the
    cheapest fare within ``H`` legs (exact hop-bounded min-plus search). The allocator
    calls planner, search and validator agents, each with a strength ``s`` (its capability
    in its role), over at most 7 turns, then commits.

    **Generative model.** All luck is fixed at reset: ``u[t, i], w[t, i] ~ U(0, 1)``. At a
    turn the called agents run in role order:

    * Planners: the strongest called planner proposes a route, replacing the plan. With
      ``u < s`` it is the optimal route. Otherwise, in shares .6/.4 of the rest, it is a
      detour or a broken route. A detour is the cheapest walk with one more leg than the
      optimum (two more if there is none; the optimum itself if neither exists). It
      exceeds the hop limit in about a quarter of tasks and the budget in four of five.
      A broken route uses a leg that does not exist. It has as many legs as the optimum
      and a price of ``P_opt * U(0.9, 1.1)``, so nothing in the observation gives it away.
    * Searchers: quote the plan at ``price * (1 + 0.02 t) * (1 + 0.5 (1 - s) w)``; the
      best quote is kept. On a broken route a searcher notices the missing leg when
      ``u < 0.5 s``, and the plan is dropped.
    * Validators check connectivity, the hop limit and, if quoted, the budget. A bad plan
      is caught when ``u < s`` and dropped; otherwise the plan is marked validated,
      rightly or not.

    Early mistakes propagate: fares rise with every turn, an uncaught broken plan fails
    at commit, a weak search quotes pricier fares, a detour costs hop optimality.

    ## Action Space

    ``MultiBinary(m)`` (6 by default): bit ``i`` calls agent ``i``. The all-zero action
    commits the quoted plan, or waits when nothing is quoted.

    ## Observation Space

    ``Box(0, 1, (15,), float32)``, see ``observation_layout``: turns left, ``h*/H``, the
    budget relative to typical fares, plan facts a controller can see (hops, whether
    within the hop limit, the proposing planner's strength, the quote relative to the
    budget, validated, dropped last turn) and ``task_embedding``, the role needed next
    (plan, search, validate; all zero when ready to commit). Whether a leg exists and
    all luck are hidden.

    ## Rewards

    Eq. 1: ``alpha*S + beta*Q - lam*sum_i c_i z_i - gamma*||z||_0``, with success ``S``
    and quality ``Q = 10 * (0.7 * clip((B - C) / B, 0, 1) + 0.3 * clip(h* / h, 0, 1))``
    (0 when infeasible) paid at commit.

    ## Starting State

    No plan, turn 0, on a task drawn from ``np_random`` (or ``options["task"]``).

    ## Episode End

    Terminated at commit, or after 7 turns (the quoted plan, if any, is committed then).
    Success: the committed itinerary is connected, has at most ``H`` legs and costs at
    most ``B``. The turn limit is part of the task and observed; budgets are wrappers.

    ## Arguments

    * ``pool``: an :class:`AgentPool` over ``SKILLS`` whose roles are ``planner``,
      ``search`` or ``validator`` (at least one planner and one searcher), its dict form
      or a JSON/YAML path. Default: :func:`flight_planner_pool`.
    * ``reward_weights``: :class:`RewardWeights` or a mapping.
    * ``render_mode``: ``None`` or ``"ansi"``.
    * ``budget``, ``on_exceed``: HardBudget built by ``gym.make`` (:mod:`cost_envs.registration`).

    ## Fixed rules

    A fixed rule is better than learning here at the default budget (issues #10, #11). The
    best rule of the family in ``agents/rules.py``, found on training tasks, is the one-turn
    rule (the strongest planner and searcher until a quote within the budget stands, then
    commit): 0.978 success at CPS 0.0402 and a mean Eq. 1 return of 0.962 on the 400
    evaluation tasks of task seed 0, against PPO's 0.971 at 0.0424 and 0.939 (20k steps, 5
    seeds); paired over tasks, every learned row's return is below the rule's. The planner
    of ``agents/planning/flight.py``, which knows the task's routes but not its luck, is
    above the rule (0.995 at CPS 0.0317, return 1.004): a policy that tracks a belief about
    the proposed route has room to gain. v1 adds what such a policy needs to observe.

    ## Version History

    * v0: initial version.
    """

    task_type = FlightTask
    #: Names the env in constructor errors (a subclass with another version sets its own).
    env_label = "FlightPlanner-v0"
    observation_layout = {
        "turns_left": slice(0, 1),
        "hop_ratio": slice(1, 2),
        "budget_level": slice(2, 3),
        "has_plan": slice(3, 4),
        "plan_hops": slice(4, 5),
        "within_hop_limit": slice(5, 6),
        "planner_strength": slice(6, 7),
        "has_quote": slice(7, 8),
        "quote_ratio": slice(8, 9),
        "within_budget": slice(9, 10),
        "validated": slice(10, 11),
        "dropped_last_turn": slice(11, 12),
        "task_embedding": slice(12, 15),
    }

    def __init__(
        self,
        pool: AgentPool | Mapping[str, Any] | str | Path | None = None,
        reward_weights: RewardWeights | Mapping[str, float] | None = None,
        render_mode: str | None = None,
    ) -> None:
        pool = flight_planner_pool() if pool is None else coerce_pool(pool)
        where = f"{self.env_label}: {pool.label}"
        if pool.skills != SKILLS:
            raise ValueError(f"{where}: skills must be {list(SKILLS)}, got {list(pool.skills)}")
        bad = [(a.name, a.role) for a in pool.agents if a.role not in ROLES]
        if bad:
            raise ValueError(f"{where}: agent roles must be one of {list(ROLES)}, got {bad}")
        for role in ROLES[:2]:
            if role not in pool.roles:
                raise ValueError(f"{where}: needs at least one {role!r} agent")
        super().__init__(pool, reward_weights, render_mode)
        roles = np.array(pool.roles)
        self._role_mask = {r: (roles == r).astype(np.int8) for r in ROLES}
        self._role_list = [ROLES.index(r) for r in pool.roles]
        # an agent's strength is its capability in the skill of its own role
        self._strength = pool.capabilities[np.arange(self.n_agents), self._role_list]
        self._strength_list: list[float] = self._strength.tolist()
        self._has_validator = "validator" in pool.roles
        self._by_role: dict[tuple[int, ...], tuple[int, list[int], list[int]]] = {}
        self._set_observation()  # last: a version's observation may read the tables above

    def _set_observation(self) -> None:
        """The observation space, and whatever else observing needs beyond the tables.

        The one step of construction a later version extends (v1: its counters' slots),
        so that every version's constructor, its arguments and their checks are v0's.
        """
        self.observation_space = spaces.Box(0.0, 1.0, shape=(15,), dtype=np.float32)

    def _split_by_role(self, called: list[int]) -> tuple[int, list[int], list[int]]:
        """The strongest called planner (-1 if none), the called searchers and validators.

        Cached per call set (at most ``2**m``): ``step`` needs it at every turn.
        """
        key = tuple(called)
        split = self._by_role.get(key)
        if split is None:
            role, strength = self._role_list, self._strength_list
            planners = [i for i in called if role[i] == 0]
            lead = max(planners, key=strength.__getitem__) if planners else -1
            split = self._by_role[key] = (lead, [i for i in called if role[i] == 1],
                                          [i for i in called if role[i] == 2])
        return split

    # ------------------------------------------------------------------ tasks
    def _generate_block(self, rng: np.random.Generator, n: int) -> TaskBlock:
        (fares, origin, destination, h_star, budget, route_hops, route_price, luck, fare_luck,
         level) = self.draw_block(rng, n)
        tables = self._block_tables(luck, fare_luck)
        connected = np.array([True, True, False])
        for array in (fares, route_hops, route_price, connected, luck, fare_luck):
            array.flags.writeable = False  # tasks are views into these blocks

        def task(b: int) -> tuple[FlightTask, _Tables]:
            h = int(h_star[b])
            return FlightTask(
                fares=fares[b], origin=int(origin[b]), destination=int(destination[b]),
                shortest_hops=h, hop_limit=h + 1, budget=float(budget[b]),
                route_hops=route_hops[b], route_price=route_price[b],
                route_connected=connected, luck=luck[b], fare_luck=fare_luck[b],
            ), _Tables._make([*(table[b].tolist() for table in tables), float(level[b])])

        return TaskBlock(n, task)  # each task's objects built when reached (gc)

    def draw_block(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        """``n`` tasks as ``flight_networks.derive_networks``' arrays (reset's draw).

        The batched env draws and derives through the same functions, for all its
        refilling sub-envs at once.
        """
        return draw_block(rng, n, MAX_TURNS, self.n_agents)

    def _tables(self, task: FlightTask) -> _Tables:
        tables = self._block_tables(task.luck[None], task.fare_luck[None])
        level = budget_level(task.budget, mean_fare(task.fares), task.shortest_hops)
        return _Tables._make([*(table[0].tolist() for table in tables), float(level)])

    def _block_tables(
        self, luck: np.ndarray, fare_luck: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per (task, turn, agent) outcomes, vectorised over a block of tasks.

        Returns the planner's proposal, whether a searcher notices a missing leg, whether a
        validator catches a bad plan, and the fare markup of a search (the rules below,
        each the one home of its outcome: the batched env applies them to the agents of
        its rows alone).
        """
        s = self._strength
        return (proposals(luck, s), notices(luck, s), detects(luck, s),
                markups(fare_luck, np.arange(MAX_TURNS)[:, None], s))

    def _initial_state(self, task: FlightTask, tables: _Tables) -> State:
        self._proposal, self._notices, self._detects, self._markup, self._budget = tables
        self._route_hops = task.route_hops.tolist()
        self._route_connected = task.route_connected.tolist()  # lists: step reads them
        # state: route, planner strength, quote (0 = none), validated, dropped this turn
        return (NO_ROUTE, 0.0, 0.0, 0, 0)

    def _transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        next_state, outcome, _ = self._advance(turn, state, called)
        return next_state, outcome

    def _advance(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None, int]:
        """The transition, plus why the plan was dropped this turn (``*_DROP``).

        The one home of the dynamics: v1 reads the drop's cause from here rather than
        working the rule out again.
        """
        route, p_strength, quote, validated, _ = state
        dropped = cause = NO_DROP
        if not called:
            if quote > 0:
                return ((route, p_strength, quote, validated, 0), self._commit(route, quote),
                        NO_DROP)
        else:
            lead, searchers, validators = self._split_by_role(called)
            if lead >= 0:  # the strongest called planner's proposal replaces the plan
                route, p_strength = self._proposal[turn][lead], self._strength_list[lead]
                quote, validated = 0.0, 0
            if route != NO_ROUTE and searchers:
                notices = self._notices[turn]
                if self._is_broken(route) and any(notices[i] for i in searchers):
                    route, p_strength, quote, validated, dropped = NO_ROUTE, 0.0, 0.0, 0, 1
                    cause = SEARCH_DROP
                else:
                    markup = self._markup[turn]
                    price = self._episode_task("step").route_price[route]
                    best = price * min(map(markup.__getitem__, searchers))
                    if quote == 0 or best < quote:
                        quote, validated = float(best), 0
            if route != NO_ROUTE and validators:
                if self._feasible(route, quote):
                    validated = 1
                elif any(map(self._detects[turn].__getitem__, validators)):
                    route, p_strength, quote, validated, dropped = NO_ROUTE, 0.0, 0.0, 0, 1
                    cause = VALIDATOR_DROP
                else:
                    validated = 1  # a weak validator waved a bad plan through
        state = (route, p_strength, quote, validated, dropped)
        if turn + 1 >= MAX_TURNS:
            return (state, self._commit(route, quote) if quote > 0 else Outcome(False, 0.0),
                    cause)
        return state, None, cause

    def _is_broken(self, route: int) -> bool:
        return not self._route_connected[route]

    def _feasible(self, route: int, quote: float) -> bool:
        task = self._episode_task("step")
        return bool(
            self._route_connected[route]
            and self._route_hops[route] <= task.hop_limit
            and quote <= task.budget
        )

    def _commit(self, route: int, price: float) -> Outcome:
        task = self._episode_task("step")
        if not self._feasible(route, price):
            return Outcome(False, 0.0)
        slack = min(max((task.budget - price) / task.budget, 0.0), 1.0)
        hop_optimality = min(task.shortest_hops / task.route_hops[route], 1.0)
        return Outcome(True, 10.0 * (0.7 * slack + 0.3 * hop_optimality))

    def _observe(self, turn: int, state: State) -> np.ndarray:
        # A Python list and one conversion: much cheaper than item-by-item numpy writes.
        return np.array(self._observation_values(turn, state), dtype=np.float32)

    def _observation_values(self, turn: int, state: State) -> list[Any]:
        """The observation's 15 values (v1 appends its own before the one conversion)."""
        task = self._episode_task("step")
        route, p_strength, quote, validated, dropped = state
        limit, budget = task.hop_limit, task.budget
        head = [(MAX_TURNS - turn) / MAX_TURNS, task.shortest_hops / limit, self._budget]
        if route == NO_ROUTE:  # need a plan
            return [*head, 0, 0, 0, 0, 0, 0, 0, validated, dropped, 1, 0, 0]
        hops = self._route_hops[route]
        quoted = quote > 0
        visibly_bad = hops > limit or quote > budget
        need = (  # plan again / search / validate; all zero when ready to commit
            (1, 0, 0) if visibly_bad else (0, 1, 0) if not quoted
            else (0, 0, 1) if not validated and self._has_validator else (0, 0, 0)
        )
        return [*head, 1, hops / (limit + 2), hops <= limit, p_strength, quoted,
                min(quote / budget, 2.0) / 2, quoted and quote <= budget, validated, dropped,
                *need]

    # ------------------------------------------------------------- helpers
    def rule_based_action(self, observation: np.ndarray) -> np.ndarray:
        """The fixed planner -> search -> validator -> commit cycle, strongest of each role.

        Uses only the observation (the turn is read from ``turns_left``).
        """
        turn = MAX_TURNS - round(float(observation[0]) * MAX_TURNS)
        action = np.zeros(self.n_agents, dtype=np.int8)
        phase = turn % 4
        if phase < 3:
            strongest = self.strongest(ROLES[phase])
            if strongest is not None:
                action[strongest] = 1
        return action

    def strongest(self, role: str) -> int | None:
        """The strongest agent of ``role`` (by capability in its role's skill), or ``None``."""
        mask = self._role_mask[role]
        if not mask.any():
            return None
        return int(np.argmax(np.where(mask, self._strength, -1.0)))

    def _describe(self) -> str:
        task = self._task
        if task is None:
            return "no task"
        route, _, quote, validated, _ = self._state
        plan = "none" if route == NO_ROUTE else ROUTE_NAMES[route]
        return (f"{task.origin}->{task.destination} (h*={task.shortest_hops}, "
                f"H={task.hop_limit}, B={task.budget:.0f}): plan {plan}, quote {quote:.0f}, "
                f"validated {bool(validated)}")
