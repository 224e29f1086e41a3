"""FlightPlanner-v1: v0's tasks and dynamics, observed the way a careful planner tracks them."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from cost_envs.core import Outcome, State
from cost_envs.envs.flight_planner import (
    MAX_TURNS,
    NO_DROP,
    NO_ROUTE,
    ROUTE_NAMES,
    SEARCH_DROP,
    SEARCH_NOTICE,
    VALIDATOR_DROP,
    FlightPlannerEnv,
    FlightTask,
    _Tables,
)

#: Searchers and validators of at least this strength count as strong (the preset pool's
#: are 0.92 and 0.95; the basic searcher and the small validator 0.45 and 0.55).
STRONG = 0.75
_V0_SLOTS = 15
_NEW_SLOTS = (
    "weak_passes",
    "strong_passes",
    "weak_quotes",
    "strong_quotes",
    "broken_survival",
    "dropped_by_search",
    "dropped_by_validator",
    "plans_proposed",
    "search_drops",
    "validator_drops",
)
# v1's state: v0's five fields, then these counters of what the allocator has seen
_FRESH_PLAN = (0, 0, 0, 0, 1.0)  # weak/strong passes, weak/strong quotes, broken survival
#: Cached observation tails kept before the cache is cleared (only visited ones are kept).
_TAIL_CACHE_LIMIT = 1 << 16


class FlightPlannerV1Env(FlightPlannerEnv):
    """FlightPlanner-v0's tasks and dynamics with an observation that can carry a belief.

    ## Description

    The same setting and generative model as FlightPlanner-v0 (same tasks from the same
    seed, same outcomes and costs for the same actions): a flight network of 9 airports,
    an origin and a destination ``h* = 2`` or ``3`` legs apart, a hop limit ``H = h* + 1``
    and a budget ``B = P_opt * (1 + U(0.03, 0.35))``; planner, search and validator agents
    with a strength ``s`` each, over at most 7 turns, then a commit.

    **Generative model.** All luck is fixed at reset: ``u[t, i], w[t, i] ~ U(0, 1)``. At a
    turn the called agents run in role order:

    * Planners: the strongest called planner proposes a route, replacing the plan. With
      ``u < s`` it is the optimal route. Otherwise, in shares .6/.4 of the rest, it is a
      detour (the cheapest walk with one or two more legs) or a broken route (as many legs
      as the optimum, price ``P_opt * U(0.9, 1.1)``, one leg that does not exist).
    * Searchers: quote the plan at ``price * (1 + 0.02 t) * (1 + 0.5 (1 - s) w)``; the
      best quote is kept. On a broken route a searcher notices the missing leg when
      ``u < 0.5 s``, and the plan is dropped.
    * Validators check connectivity, the hop limit and, if quoted, the budget. A bad plan
      is caught when ``u < s`` and dropped; otherwise the plan is marked validated.

    **What v1 adds.** Whether a plan is broken is hidden, so a careful planner weighs the
    checks it has survived: a broken plan passes a validator of strength ``s`` with
    probability ``1 - s`` and a searcher with ``1 - 0.5 s``, each call on its own luck, so
    ``P(broken | checks passed)`` depends on how many checks of each strength the plan
    passed, not only on whether it passed one. v0 keeps a single "validated" flag; v1 also
    observes those counts, what searches found and why plans were dropped, so that a
    memoryless policy can represent the belief.

    ## Action Space

    ``MultiBinary(m)`` (6 by default): bit ``i`` calls agent ``i``. The all-zero action
    commits the quoted plan, or waits when nothing is quoted.

    ## Observation Space

    ``Box(0, 1, (25,), float32)``, see ``observation_layout``. Slots 0-14 are v0's, in v0's
    positions with v0's values. Then, where counts are divided by the turn limit 7 (and
    capped at 1) and "weak"/"strong" means strength below/at least 0.75:

    * ``weak_passes``, ``strong_passes``: validator calls the current plan passed, by
      validator strength.
    * ``weak_quotes``, ``strong_quotes``: searcher calls that quoted the current plan
      without finding a missing leg, by searcher strength.
    * ``broken_survival``: the probability that a broken plan would have survived every
      check the current plan passed, ``prod (1 - s)`` over validator passes times
      ``prod (1 - 0.5 s)`` over searches (1 with no plan or no checks): the likelihood
      ratio of the evidence, computed from public strengths.
    * ``dropped_by_search``, ``dropped_by_validator``: why the last turn dropped the plan
      (a searcher found a missing leg / a validator rejected it); v0's
      ``dropped_last_turn`` is their sum.
    * ``plans_proposed``, ``search_drops``, ``validator_drops``: planner proposals and
      drops of each kind so far in the episode.

    A failed validation drops the plan, so the current plan's failures are always zero;
    the drop slots record them. A new proposal resets the current plan's counts; a
    cheaper quote resets v0's ``validated`` but keeps the passes (the connectivity
    evidence still holds; the quote is observed). Whether a leg exists, which candidate
    route the plan is, and all luck stay hidden: every slot is a function of the calls
    made and of what they visibly returned.

    ## Rewards

    Eq. 1: ``alpha*S + beta*Q - lam*sum_i c_i z_i - gamma*||z||_0``, with success ``S``
    and quality ``Q = 10 * (0.7 * clip((B - C) / B, 0, 1) + 0.3 * clip(h* / h, 0, 1))``
    (0 when infeasible) paid at commit.

    ## Starting State

    No plan, turn 0, on a task drawn from ``np_random`` (or ``options["task"]``); tasks are
    :class:`FlightTask` and are drawn exactly as FlightPlanner-v0 draws them.

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

    The new slots do not help a rule that reads one number: the best fixed rule of the
    family in ``agents/rules.py`` is v0's one-turn rule, 0.978 success at CPS 0.0402 on the
    evaluation tasks. At the default training budget (20k steps, 5 seeds) PPO does not
    exploit them either (0.975 at CPS 0.0431; its return is below the rule's, paired over
    tasks), while the planner that plays v1 as v0 with a belief about the route reaches
    0.995 at CPS 0.0317 (issue #11).

    **What the slots are worth (issue #23): nothing measurable.** The planner's edge comes
    from knowing the task's parameters, above all the optimal fare relative to the budget,
    which lets one quote a few percent off expose a broken route; the observation shows
    almost nothing of it. The non-privileged Bayes reference
    (``agents.planning.BayesFlightPlanner``: the task prior and the whole episode's
    observations, so it has all the slots say and more) returns 0.961 [0.935, 0.981] on the
    400 evaluation tasks against the one-turn rule's 0.962 (paired difference -0.001
    [-0.025, +0.019], unresolved) and the planner's 1.004; ignoring the v1 slots changes its
    return by -0.0001 [-0.0004, 0]. So no policy is known to beat the one-turn rule here,
    and v1's slots are not shown to be needed by one.

    ## Version History

    * v1: the observation tracks validation counts by strength and search findings (why:
      issue #10 found that v0's binary validated flag lets a fixed one-turn rule beat
      learned policies: "large planner and pro search in one turn, then commit" beat PPO
      on success and cost per success, while a belief-tracking planner that validates a
      plan several times cheaply did far better; the counts were to let a memoryless
      policy represent its belief, which issue #23 found worth nothing measurable, above).
      Tasks, dynamics, costs and the oracle's plans are v0's (the
      oracle searches v0's part of the state, which alone decides outcomes and prices).
    * v0: initial version.
    """

    env_label = "FlightPlanner-v1"
    observation_layout = {
        **FlightPlannerEnv.observation_layout,
        **{name: slice(_V0_SLOTS + k, _V0_SLOTS + k + 1) for k, name in enumerate(_NEW_SLOTS)},
    }

    def _set_observation(self) -> None:
        # v0's constructor, then v1's slots and what counting them needs
        self._is_strong: list[bool] = (self._strength >= STRONG).tolist()
        self._evidence: dict[tuple[int, ...], tuple] = {}  # at most 2**m call sets
        self._tails: dict[State, list[Any]] = {}
        self.observation_space = spaces.Box(
            0.0, 1.0, shape=(_V0_SLOTS + len(_NEW_SLOTS),), dtype=np.float32
        )

    def _initial_state(self, task: FlightTask, tables: _Tables) -> State:
        # v0's fields, the current plan's counts, drop cause, proposals, drops by kind
        return (*super()._initial_state(task, tables), *_FRESH_PLAN, NO_DROP, 0, 0, 0)

    def _transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        # v0's transition is the one home of the dynamics; v1 only counts what was seen.
        base, outcome, cause = self._advance(turn, state[:5], called)
        weak_p, strong_p, weak_q, strong_q, survival, _, proposed, s_drops, v_drops = state[5:]
        if called:
            key = tuple(called)
            evidence = self._evidence.get(key)
            if evidence is None:
                evidence = self._evidence[key] = self._evidence_of(key)
            planner, more_weak_q, more_strong_q, more_weak_p, more_strong_p, factors = evidence
            if planner:  # a new plan: its evidence starts afresh
                weak_p, strong_p, weak_q, strong_q, survival = _FRESH_PLAN
                proposed += 1
            if cause != NO_DROP:  # v0 dropped the plan this turn
                s_drops += cause == SEARCH_DROP
                v_drops += cause == VALIDATOR_DROP
                weak_p, strong_p, weak_q, strong_q, survival = _FRESH_PLAN
            elif base[0] != NO_ROUTE:  # the plan survived every check it met this turn
                weak_q += more_weak_q
                strong_q += more_strong_q
                weak_p += more_weak_p
                strong_p += more_strong_p
                for factor in factors:
                    survival *= factor
        return (*base, weak_p, strong_p, weak_q, strong_q, survival, cause, proposed,
                s_drops, v_drops), outcome

    def _evidence_of(self, called: tuple[int, ...]) -> tuple[bool, int, int, int, int,
                                                             tuple[float, ...]]:
        """What calling ``called`` tells about a plan that survives it (cached per call set).

        Whether a planner was called; the weak and strong searches, the weak and strong
        validator passes; and the factors of ``broken_survival`` in the order they
        multiply: ``1 - 0.5 s`` of each searcher, then ``1 - s`` of each validator, each
        by index (the order fixes the product to the last bit).
        """
        strength, strong = self._strength_list, self._is_strong
        lead, searchers, validators = self._split_by_role(list(called))
        factors = ([1.0 - SEARCH_NOTICE * strength[i] for i in searchers]
                   + [1.0 - strength[i] for i in validators])
        return (lead >= 0,
                sum(not strong[i] for i in searchers), sum(strong[i] for i in searchers),
                sum(not strong[i] for i in validators), sum(strong[i] for i in validators),
                tuple(factors))

    def _search_state(self) -> State:
        # The oracle searches v0's part of the state: the counters v1 adds never change an
        # outcome or a price, so the optimum is the same, and the search does not tell
        # apart states that differ only in what was observed (80 times faster).
        return self._state[:5]

    def _search_transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        return FlightPlannerEnv._transition(self, turn, state, called)

    def _observe(self, turn: int, state: State) -> np.ndarray:
        values = self._observation_values(turn, state[:5])
        counts = state[5:]
        tail = self._tails.get(counts)
        if tail is None:
            if len(self._tails) >= _TAIL_CACHE_LIMIT:
                self._tails.clear()
            tail = self._tails[counts] = self._tail_values(counts)
        values += tail
        return np.array(values, dtype=np.float32)  # one conversion for all 25 slots

    @staticmethod
    def _tail_values(counts: State) -> list[Any]:
        """The 10 slots v1 adds, from the state's counters (they repeat: cached)."""
        weak_p, strong_p, weak_q, strong_q, survival, cause, proposed, s_drops, v_drops = counts
        t = MAX_TURNS
        return [min(weak_p, t) / t, min(strong_p, t) / t, min(weak_q, t) / t,
                min(strong_q, t) / t, survival, cause == SEARCH_DROP, cause == VALIDATOR_DROP,
                min(proposed, t) / t, min(s_drops, t) / t, min(v_drops, t) / t]

    def _describe(self) -> str:
        task = self._task
        if task is None:
            return "no task"
        route, _, quote, validated, _ = self._state[:5]
        weak_p, strong_p, weak_q, strong_q, survival = self._state[5:10]
        plan = "none" if route == NO_ROUTE else ROUTE_NAMES[route]
        return (f"{task.origin}->{task.destination} (h*={task.shortest_hops}, "
                f"H={task.hop_limit}, B={task.budget:.0f}): plan {plan}, quote {quote:.0f}, "
                f"validated {bool(validated)}, passes {weak_p} weak / {strong_p} strong, "
                f"quotes {weak_q} weak / {strong_q} strong, broken survival {survival:.3f}")
