"""OrchestrationEnv: the machinery every cost-envs environment shares.

A concrete environment supplies four things:

* ``_generate_block(rng, n)``: ``n`` tasks drawn from ``rng``, each with its *tables*
  (whatever this pool's dynamics precompute from it, vectorised over the block), as a
  list or a :class:`~cost_envs.task_blocks.TaskBlock` (built task by task). A task
  holds *all* of an episode's randomness, including each agent's luck at each turn, so
  that what happens is a function of (task, actions) alone.
* ``_tables(task)``: the same tables for one task (used when a task is replayed).
* ``_initial_state(task, tables)``: the progress state at turn 0, a small hashable tuple.
* ``_transition(turn, state, called)``: a *pure* function of the sorted list of called
  agent indices giving the next state and, when the episode ends, its :class:`Outcome`.
  It must end the episode by the task's last turn. Plain Python on these tiny inputs is
  several times faster than numpy, and ``step`` is the hot path.
* ``_observe(turn, state)``: the observation; privileged parts of the task stay out.

and may override ``_task_prices(task, tables)`` when what a call costs depends on the task
(tokens x price): it returns the episode's :class:`Prices`, including a ``step_cost`` paid
on every step whatever the action (a controller's own tokens, the default small model).

This base class then validates actions, keeps the cost/FLOPs ledger, fills ``info``,
computes the reward (Eq. 1), replays tasks given through ``reset(options={"task": t})``
and, because transitions are pure and the luck is fixed, finds the true hindsight optimum
(:meth:`oracle_plan`) by exact uniform-cost search over the same transition function the
episode runs on.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from cost_envs.actions import binary_actions, describe
from cost_envs.pool import AgentPool
from cost_envs.reward import RewardWeights

TaskT = TypeVar("TaskT")
State = tuple

#: Largest pool the exact oracle enumerates (2**16 joint actions per turn).
MAX_ORACLE_AGENTS = 16
_INF = float("inf")


class UnsupportedRenderModeError(ValueError, TypeError):
    """A render mode the env does not have.

    Also a ``TypeError`` because SB3's ``make_vec_env`` first tries
    ``render_mode="rgb_array"`` and falls back to no rendering only on ``TypeError``.
    """


@dataclass(frozen=True)
class Outcome:
    """How an episode ended: success and quality in ``[0, 10]``."""

    success: bool
    quality: float


class Prices(NamedTuple):
    """What calls cost in the current episode.

    Attributes:
        call_costs: Money per call of each agent, shape ``(m,)``.
        call_flops: FLOPs per call of each agent, shape ``(m,)``.
        step_cost: Money paid on every step whatever the action (0 by default).
        step_flops: FLOPs spent on every step whatever the action.
    """

    call_costs: np.ndarray
    call_flops: np.ndarray
    step_cost: float = 0.0
    step_flops: float = 0.0


@dataclass(frozen=True)
class OraclePlan:
    """The minimum-cost successful action sequence from a given point of an episode."""

    actions: tuple[np.ndarray, ...]
    cost: float
    quality: float


class OrchestrationEnv(gym.Env[np.ndarray, np.ndarray], Generic[TaskT]):
    """Base class: ``MultiBinary(m)`` over an :class:`AgentPool`, bit i = call agent i.

    Args:
        pool: The agents that can be called.
        reward_weights: Eq. 1 weights (a :class:`RewardWeights`, a mapping or ``None``).
        render_mode: ``None`` or ``"ansi"``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}
    #: Tasks drawn from ``np_random`` at a time; drawing in blocks keeps ``reset`` cheap.
    task_block: int = 64
    #: Class of this env's tasks, checked by ``reset(options={"task": ...})``.
    task_type: type = object
    #: True when the all-zero action goes on more cheaply (a default model runs the step)
    #: rather than ending the episode; ``HardBudget`` may then mask an action down to it.
    zero_action_fallback: bool = False
    #: Named slices of the observation vector; baselines find the task embedding here.
    observation_layout: dict[str, slice] = {}
    #: Every env's observation is a vector (each sets a 1-D ``Box`` in ``__init__``).
    observation_space: spaces.Box

    def __init__(
        self,
        pool: AgentPool,
        reward_weights: RewardWeights | Mapping[str, float] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise UnsupportedRenderModeError(
                f"render_mode: expected None or one of {self.metadata['render_modes']}, "
                f"got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.pool = pool
        self.reward_weights = RewardWeights.coerce(reward_weights)
        self.n_agents = len(pool)
        self.action_space = spaces.MultiBinary(self.n_agents)
        self._costs = pool.costs
        self._cost_list: list[float] = pool.costs.tolist()
        self._flops_list: list[float] = pool.flops.tolist()
        self._step_cost = 0.0
        self._step_flops = 0.0
        self._action_shape = (self.n_agents,)
        self._task_queue: Sequence[tuple[TaskT, Any]] = ()
        self._queue_at = 0  # the next task's index in _task_queue
        self._task: TaskT | None = None
        self._state: State = ()
        self._turn = 0
        self._finished = True
        self._episode_cost = 0.0
        self._episode_flops = 0.0
        self._oracle_cache: dict[tuple[int, State], np.ndarray] = {}
        self._sorted_actions: tuple[np.ndarray, np.ndarray] | None = None
        self._sorted_called: list[list[int]] = []

    # ------------------------------------------------------------------ hooks
    def _generate_block(self, rng: np.random.Generator,
                        n: int) -> Sequence[tuple[TaskT, Any]]:
        raise NotImplementedError

    def _tables(self, task: TaskT) -> Any:
        raise NotImplementedError

    def _check_task(self, task: TaskT) -> None:
        """Raise ``ValueError`` if a replayed task was drawn for a pool of another size.

        Tasks keep their per-agent luck in ``task.luck``, agents on the last axis.
        """
        drawn_for = task.luck.shape[-1]  # type: ignore[attr-defined]  # TaskT has luck (above)
        if drawn_for != self.n_agents:
            raise ValueError(
                f"{self.env_name}: options['task'] was drawn for {drawn_for} agents, "
                f"this env has {self.n_agents}"
            )

    def _initial_state(self, task: TaskT, tables: Any) -> State:
        raise NotImplementedError

    def _task_prices(self, task: TaskT, tables: Any) -> Prices | None:
        """The episode's prices; ``None`` (the default) keeps the pool's fixed prices."""
        return None

    def _transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        raise NotImplementedError

    def _observe(self, turn: int, state: State) -> np.ndarray:
        raise NotImplementedError

    def _describe(self) -> str:
        return f"turn {self._turn} state {self._state}"

    # ------------------------------------------------------------- public API
    def rule_based_action(self, observation: np.ndarray) -> np.ndarray:
        """The env's fixed rule (the RuleBased baseline), from ``observation`` only."""
        raise NotImplementedError(f"{self.env_name} has no fixed rule")

    @property
    def env_name(self) -> str:
        """Registered id when made through ``gym.make``, else the class name."""
        return self.spec.id if self.spec is not None else type(self).__name__

    @property
    def task(self) -> TaskT | None:
        """The current episode's task (privileged: for replay and analysis, not policies)."""
        return self._task

    def _episode_task(self, caller: str) -> TaskT:
        """The current episode's task, for ``caller``, which needs one.

        Raises:
            ResetNeeded: Before the first ``reset``.
        """
        if self._task is None:
            raise ResetNeeded(f"{self.env_name}: {caller} needs an episode: call reset() first")
        return self._task

    @property
    def turn(self) -> int:
        """Number of steps taken in the current episode."""
        return self._turn

    @property
    def call_costs(self) -> np.ndarray:
        """Money per call of each agent in the current episode (a read-only array)."""
        costs = self._costs.view()
        costs.flags.writeable = False
        return costs

    @property
    def call_flops(self) -> np.ndarray:
        """FLOPs per call of each agent in the current episode (a fresh array)."""
        return np.array(self._flops_list)

    @property
    def step_cost(self) -> float:
        """Money every step of the current episode costs whatever the action."""
        return self._step_cost

    @property
    def step_flops(self) -> float:
        """FLOPs every step of the current episode spends whatever the action."""
        return self._step_flops

    @property
    def episode_cost(self) -> float:
        """Money spent so far in the current episode: the one ledger wrappers read."""
        return self._episode_cost

    @property
    def episode_flops(self) -> float:
        """FLOPs spent so far in the current episode."""
        return self._episode_flops

    def sample_tasks(self, n: int) -> list[TaskT]:
        """Draw ``n`` tasks from ``np_random`` without starting an episode.

        This advances ``np_random``: tasks drawn by later resets differ from those of an
        env that did not call it. Replay the returned tasks with
        ``reset(options={"task": t})``, or re-seed with ``reset(seed=...)``.
        """
        return [task for task, _ in self._generate_block(self.np_random, n)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode on the next task, or on ``options["task"]`` to replay one."""
        super().reset(seed=seed)
        if seed is not None:
            self._task_queue = ()  # the new seed defines the task stream from here on
        if options:  # most resets have none: skip building sets on the hot path
            unknown = sorted(set(options) - {"task"})
            if unknown:
                raise ValueError(f"{self.env_name}: unknown reset option(s) {unknown}; "
                                 "expected only 'task'")
        if options and "task" in options:
            task: TaskT = options["task"]
            if not isinstance(task, self.task_type):
                raise ValueError(
                    f"{self.env_name}: options['task'] must be a {self.task_type.__name__}, "
                    f"got {type(task).__name__}"
                )
            self._check_task(task)
            tables = self._tables(task)
        else:
            if self._queue_at >= len(self._task_queue):
                self._task_queue = self._generate_block(self.np_random, self.task_block)
                self._queue_at = 0
            task, tables = self._task_queue[self._queue_at]
            self._queue_at += 1
        self._task = task
        self._set_prices(self._task_prices(task, tables))
        self._state = self._initial_state(task, tables)
        self._turn = 0
        self._finished = False
        self._episode_cost = 0.0
        self._episode_flops = 0.0
        self._oracle_cache = {}
        return self._observe(0, self._state), {}

    def _set_prices(self, prices: Prices | None) -> None:
        if prices is None:
            return
        costs = np.asarray(prices.call_costs, dtype=np.float64)
        flops = np.asarray(prices.call_flops, dtype=np.float64)
        if costs.shape != (self.n_agents,) or flops.shape != (self.n_agents,):
            raise ValueError(f"{self.env_name}: task prices must have shape ({self.n_agents},)")
        cost_list, flops_list = costs.tolist(), flops.tolist()
        step_cost, step_flops = float(prices.step_cost), float(prices.step_flops)
        # This runs at every reset (every step of a one-step env): Python comparisons on
        # these few floats cost a tenth of numpy's isfinite/all. NaN and inf fail them too.
        if not all(0.0 <= v < _INF for v in (*cost_list, *flops_list, step_cost, step_flops)):
            steps = [step_cost, step_flops]
            for what, values in (("call_costs", cost_list), ("call_flops", flops_list),
                                 ("step_cost/step_flops", steps)):
                if not all(0.0 <= v < _INF for v in values):
                    raise ValueError(f"{self.env_name}: task prices: {what} must be finite "
                                     f"and >= 0, got {values}")
        self._costs = costs
        self._cost_list = cost_list
        self._flops_list = flops_list
        self._step_cost = step_cost
        self._step_flops = step_flops
        self._sorted_actions = None  # the cheapest-first order depends on the prices

    def step(
        self, action: np.ndarray
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Run the agents selected by ``action`` for one turn."""
        if self._finished:
            raise ResetNeeded(f"{self.env_name}: call reset() before step() "
                              "(the episode has not started or has ended)")
        calls = self.validate_action(action)
        called = calls.nonzero()[0].tolist()
        cost, flops = self.price(called)
        n_calls = len(called)
        self._state, outcome = self._transition(self._turn, self._state, called)
        self._turn += 1
        self._episode_cost += cost
        self._episode_flops += flops
        info: dict[str, Any] = {"cost": cost, "flops": flops, "calls": calls}
        if outcome is None:
            reward = self.reward_weights(False, 0.0, cost, n_calls)
        else:
            self._finished = True
            reward = self.reward_weights(outcome.success, outcome.quality, cost, n_calls)
            info.update(self._final_info(outcome))
        return self._observe(self._turn, self._state), reward, outcome is not None, False, info

    def validate_action(self, action: Any) -> np.ndarray:
        """Return ``action`` as a fresh int8 0/1 array, or raise ``ValueError``.

        The check every env form shares (:func:`cost_envs.actions.binary_actions`).
        """
        calls = binary_actions(action, self._action_shape)
        if calls is not None:
            return calls
        raise ValueError(
            f"{self.env_name}: invalid action {describe(action)}: expected an element of "
            f"MultiBinary({self.n_agents}), an array of shape ({self.n_agents},) holding "
            f"only 0 and 1 (bit i calls agent {list(self.pool.names)}[i])"
        )

    def price(self, called: list[int]) -> tuple[float, float]:
        """Money and FLOPs of calling the agents ``called`` (indices, ascending).

        The one place calls are priced: the episode's ``step_cost`` plus a sequential sum in
        index order, so a wrapper that checks ``spent + price <= budget`` agrees to the last
        bit with the env's ledger.
        """
        cost, flops = self._step_cost, self._step_flops
        for i in called:
            cost += self._cost_list[i]
            flops += self._flops_list[i]
        return cost, flops

    def truncate(self) -> dict[str, Any]:
        """End the episode early for a wrapper (budget, time) and return its final info keys.

        The episode counts as failed (``success=False``, ``quality=0``); the env then needs
        ``reset`` like after any other ending, and the oracle stops planning.
        """
        self._finished = True
        return self._final_info(Outcome(success=False, quality=0.0))

    def _final_info(self, outcome: Outcome) -> dict[str, Any]:
        return {
            "success": bool(outcome.success),
            # SB3's own success logging (the success rate in its logger, rl-zoo3's
            # evaluation) reads this key at episode ends; every final info has it.
            "is_success": bool(outcome.success),
            "quality": float(outcome.quality),
            "episode_cost": self._episode_cost,
            "episode_flops": self._episode_flops,
        }

    def render(self) -> str | None:
        """Text summary of the episode so far (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return (
            f"{self.env_name} turn {self._turn}: spent {self._episode_cost:.4f}, "
            f"{self._episode_flops:.3g} FLOPs\n{self._describe()}"
        )

    # ---------------------------------------------------------------- oracle
    def oracle_plan(self) -> OraclePlan | None:
        """Privileged: the cheapest action sequence that succeeds from the current point.

        Exact uniform-cost search over (turn, state) using the episode's own transition
        function and the task's fixed luck. Successors are generated lazily in order of
        action cost, so only (state, action) pairs cheaper than the optimum are evaluated.
        Returns ``None`` when no sequence succeeds.
        """
        if self._finished:
            return None
        _, costs = self.joint_actions_by_cost()
        called_lists = self._sorted_called
        counter = itertools.count()
        start = (self._turn, self._search_state())
        # heap items: (g, tiebreak, node, action index or -1 for "arrived", payload)
        heap: list[tuple[float, int, Any, int, Any]] = [(0.0, next(counter), start, -1, None)]
        parents: dict[Any, Any] = {}
        while heap:
            g, _, node, k, payload = heapq.heappop(heap)
            if k < 0:  # arrival at node with total cost g
                if node in parents:
                    continue
                parents[node] = payload
                if node[0] == "end":
                    return self._unwind(node, parents)
                heapq.heappush(heap, (g + costs[0], next(counter), node, 0, None))
                continue
            turn, state = node
            next_state, outcome = self._search_transition(turn, state, called_lists[k])
            child = ("end", next(counter), outcome.quality) if (
                outcome is not None and outcome.success) else (turn + 1, next_state)
            if outcome is None or outcome.success:
                heapq.heappush(heap, (g, next(counter), child, -1, (node, k)))
            if k + 1 < len(costs):
                g_node = g - costs[k]
                heapq.heappush(heap, (g_node + costs[k + 1], next(counter), node, k + 1, None))
        return None

    def _search_state(self) -> State:
        """The state :meth:`oracle_plan` searches from: the episode's, by default.

        An env whose state also records what was merely observed (FlightPlanner-v1's
        counters) returns the part that decides outcomes and prices, with
        :meth:`_search_transition` over it, so the search does not tell apart states that
        differ only in what was seen.
        """
        return self._state

    def _search_transition(self, turn: int, state: State,
                           called: list[int]) -> tuple[State, Outcome | None]:
        """The transition :meth:`oracle_plan` searches with: the episode's, by default."""
        return self._transition(turn, state, called)

    def oracle_action(self) -> np.ndarray:
        """Privileged: the next action of :meth:`oracle_plan` (all zeros if none succeeds)."""
        key = (self._turn, self._state)
        if key not in self._oracle_cache:
            plan = self.oracle_plan()
            turn, state = key
            if plan is None:
                self._oracle_cache[key] = np.zeros(self.n_agents, dtype=np.int8)
            else:
                for action in plan.actions:
                    self._oracle_cache[(turn, state)] = action
                    state, _ = self._transition(turn, state, action.nonzero()[0].tolist())
                    turn += 1
        return self._oracle_cache[key].copy()

    def _unwind(self, end: Any, parents: dict[Any, Any]) -> OraclePlan:
        actions, _ = self.joint_actions_by_cost()
        ranks = []
        node = end
        while parents[node] is not None:
            node, k = parents[node]
            ranks.append(k)
        ranks.reverse()
        # Re-price step by step as the episode's ledger will, so from turn 0 plan.cost equals
        # the episode's cost to the last bit (the search's running g may not).
        cost = 0.0
        for k in ranks:
            cost += self.price(self._sorted_called[k])[0]
        return OraclePlan(tuple(actions[k] for k in ranks), cost=cost, quality=float(end[2]))

    def joint_actions_by_cost(self) -> tuple[np.ndarray, np.ndarray]:
        """All ``2**m`` joint actions as a read-only ``(2**m, m)`` int8 table, cheapest first.

        Ties in cost are broken by fewer calls. Returns ``(table, costs)``.
        """
        if self._sorted_actions is None:
            m = self.n_agents
            if m > MAX_ORACLE_AGENTS:
                raise ValueError(
                    f"{self.env_name}: the exact oracle enumerates 2**m joint actions and "
                    f"supports pools of at most {MAX_ORACLE_AGENTS} agents, got m={m}"
                )
            codes = np.arange(2**m, dtype=np.int64)
            bits = ((codes[:, None] >> np.arange(m)) & 1).astype(np.int8)
            cost = self._step_cost + bits @ self._costs
            order = np.lexsort((bits.sum(axis=1), cost))  # cheapest first, then fewest calls
            table = bits[order]
            table.flags.writeable = False
            self._sorted_actions = (table, cost[order])
            self._sorted_called = [row.nonzero()[0].tolist() for row in table]
        return self._sorted_actions
