"""FlightPlanner-v0 batched: planner, search and validator calls as array operations.

The single env's ``_advance`` (:class:`~cost_envs.envs.flight_planner.FlightPlannerEnv`)
over the rows of the sub-envs that step, with the single env's own outcome rules
(``proposals``, ``notices``, ``detects``, ``markups``, applied to the turn's luck of the
agents each concerns): the strongest called planner's proposal replaces the plan, a
searcher that notices a missing leg drops a broken plan and otherwise the cheapest called
searcher's quote is kept when it is the first or a lower one, a validator passes a
feasible plan and drops an infeasible one it detects. The all-zero action commits a
quoted plan; the last turn commits whatever is quoted.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cost_envs.envs.flight_networks import derive_networks, draw_kept
from cost_envs.envs.flight_planner import (
    MAX_TURNS,
    NO_DROP,
    NO_ROUTE,
    SEARCH_DROP,
    SEARCH_NOTICE,
    VALIDATOR_DROP,
    FlightPlannerEnv,
    detects,
    markups,
    notices,
    proposals,
)
from cost_envs.envs.flight_planner_v1 import STRONG, FlightPlannerV1Env
from cost_envs.vector.array_ops import any_per_row, pick
from cost_envs.vector.base import BatchedOrchestrationEnv

#: ``route_connected`` of every task: the optimal and the detour route exist, the broken
#: route misses a leg.
_CONNECTED = np.array([True, True, False])


class FlightBlock(NamedTuple):
    """What the queue keeps of ``FlightPlannerEnv.draw_block``'s arrays: what a step reads.

    Not the fares (a task's routes are priced at the draw), nor the airports; hop counts
    in int8 (at most 6, or 99: no trip). The luck is kept as the outcomes it decides
    (:class:`FlightOutcomes`) when the pool's joint actions have codes, else as drawn.
    """

    shortest_hops: np.ndarray
    budget: np.ndarray
    route_hops: np.ndarray
    route_price: np.ndarray
    budget_level: np.ndarray
    luck: np.ndarray
    fare_luck: np.ndarray


class FlightOutcomes(NamedTuple):
    """A block's task parameters (as :class:`FlightBlock`) and its luck's outcomes.

    Per task, turn and call set, by the single env's rules (``proposals``, ``notices``,
    ``markups``, ``detects``, each applied to the luck of the agents it concerns, as the
    step applied them): ``proposal[b, t, p]``, planner ``p``'s proposal; ``noticed[b, t,
    s]``, whether a searcher of the set ``s`` (bits over the searchers) notices a missing
    leg; ``markup[b, t, s]``, the set's cheapest markup (the minimum is exact in any order;
    ``inf`` for the empty set); ``detected[b, t, v]``, whether a validator of the set
    ``v`` catches a bad plan. A step then reads one element of each for its call set, in
    place of about thirty operations on the turn's luck. 294 bytes a task with the preset
    pool, against 672 for its luck.
    """

    shortest_hops: np.ndarray
    budget: np.ndarray
    route_hops: np.ndarray
    route_price: np.ndarray
    budget_level: np.ndarray
    proposal: np.ndarray
    noticed: np.ndarray
    markup: np.ndarray
    detected: np.ndarray


#: The observation's turns left, ``(MAX_TURNS - turn) / MAX_TURNS``, by turn.
_TURNS_LEFT = (MAX_TURNS - np.arange(MAX_TURNS + 1)) / MAX_TURNS

#: Most agents of one role whose call sets a step reads from :class:`FlightOutcomes`.
MAX_TABLED_ROLE = 6


def _by_set(values: np.ndarray, combine: np.ufunc, empty: Any) -> np.ndarray:
    """``out[b, t, s]``: ``values[b, t, j]`` combined over the agents ``j`` of each set ``s``.

    Sets are the bits of ``s``; the empty set holds ``empty``. Each set is its set without
    its highest agent combined with that agent (``combine`` is exact in any order: min,
    or), one operation a set, written into its column of the table (a transposed copy of
    a set-major table took ten times longer).
    """
    k = values.shape[2]
    flat = values.reshape(values.shape[0] * values.shape[1], k)
    table = np.empty((flat.shape[0], 2**k), values.dtype)
    table[:, 0] = empty
    for s in range(1, 2**k):
        high = s.bit_length() - 1
        combine(table[:, s - (1 << high)], flat[:, high], out=table[:, s])
    return table.reshape(*values.shape[:2], 2**k)


class FlightPlannerVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` FlightPlanner-v0 envs stepped together with numpy.

    A :class:`~cost_envs.vector.base.BatchedOrchestrationEnv` of ``FlightPlannerEnv``: its
    keywords are that env's arguments (``pool``, ``reward_weights``).
    """

    env_class = FlightPlannerEnv
    single_env: FlightPlannerEnv

    observe_all = True

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n = self.num_envs
        single = self.single_env
        role = np.array(single._role_list)
        self._planner, self._searcher, self._validator = (role == r for r in range(3))
        self._searcher_columns = self._searcher.nonzero()[0]
        self._validator_columns = self._validator.nonzero()[0]
        # each role's agents as bits of the joint-action code (the base's _step_codes)
        self._planner_bits, self._searcher_bits, self._validator_bits = (
            int((mask * (1 << np.arange(self.n_agents))).sum())
            for mask in (self._planner, self._searcher, self._validator))
        self._strength = single._strength
        self._searcher_strength = self._strength[self._searcher_columns]
        # the strongest called planner of every joint-action code (argmax's first of
        # equals; 0 without a planner, as argmax of a row of -inf), when codes exist
        self._lead_of: np.ndarray | None = None
        if self._bits is not None:
            codes = np.arange(2**self.n_agents)
            called = (codes[:, None] >> np.arange(self.n_agents)) & 1 != 0
            self._lead_of = np.argmax(np.where(called & self._planner, self._strength,
                                               -np.inf), axis=1)
            # [role, code]: whether any agent, a planner, a searcher, a validator is called
            self._roles_of = np.stack([codes != 0, *((codes & bits) != 0 for bits in (
                self._planner_bits, self._searcher_bits, self._validator_bits))])
        self._has_validator = single._has_validator
        self._all = np.arange(n)
        self._route = np.full(n, NO_ROUTE, dtype=np.int64)
        self._p_strength = np.zeros(n)
        self._quote = np.zeros(n)
        self._validated = np.zeros(n, dtype=np.int64)
        self._dropped = np.zeros(n, dtype=np.int64)
        # the current task's parameters, per sub-env (read every step without a gather
        # through the queue)
        self._h_star = np.zeros(n, dtype=np.int64)
        self._task_budget = np.ones(n)
        self._level = np.zeros(n)
        self._hops_of = np.ones((n, 3), dtype=np.int64)
        self._price_of = np.zeros((n, 3))
        self._width = self.single_observation_space.shape[0]
        # the task's luck (or its outcomes), (turn, ...) rows of each sub-env: read a row a
        # step from here (small, cache-resident) rather than from the queue
        self._planner_columns = self._planner.nonzero()[0]
        self._tabled = (self._lead_of is not None and max(
            len(self._planner_columns), len(self._searcher_columns),
            len(self._validator_columns)) <= MAX_TABLED_ROLE)
        if self._tabled:
            assert self._lead_of is not None
            codes = np.arange(2**self.n_agents)
            # each code's lead planner among the planners (0 without one), and its sets of
            # searchers and validators as bits over the role's columns
            self._plan_column_of = np.maximum(
                np.searchsorted(self._planner_columns, self._lead_of), 0).clip(
                    0, len(self._planner_columns) - 1)
            self._search_set_of, self._validator_set_of = (
                ((codes[:, None] >> columns) & 1) @ (1 << np.arange(len(columns)))
                for columns in (self._searcher_columns, self._validator_columns))
            self._sets = 2 ** len(self._searcher_columns), 2 ** len(self._validator_columns)
            self._proposal = np.zeros((n * MAX_TURNS, len(self._planner_columns)), np.int8)
            self._noticed = np.zeros((n * MAX_TURNS, self._sets[0]), dtype=np.bool_)
            self._markup = np.zeros((n * MAX_TURNS, self._sets[0]))
            self._detected = np.zeros((n * MAX_TURNS, self._sets[1]), dtype=np.bool_)
        else:
            self._luck = np.zeros((n * MAX_TURNS, self.n_agents))
            self._fare_luck = np.zeros((n * MAX_TURNS, self.n_agents))

    def _draw_many(self, rngs: list[np.random.Generator],
                   n: int) -> FlightBlock | FlightOutcomes:
        # the rejection sampling's search for trips and every task's derivation run once
        # over the networks of all the generators (draw_block's work for one)
        (_, _, _, h_star, budget, route_hops, route_price, luck, fare_luck,
         level) = derive_networks(draw_kept(rngs, n, MAX_TURNS, self.n_agents), False)
        head = (h_star.astype(np.int8), budget, route_hops.astype(np.int8), route_price, level)
        if not self._tabled:
            return FlightBlock(*head, luck, fare_luck)
        return FlightOutcomes(*head, *self._outcomes(luck, fare_luck))

    def _outcomes(self, luck: np.ndarray, fare_luck: np.ndarray) -> tuple[np.ndarray, ...]:
        """:class:`FlightOutcomes`' tables of a block's luck ``(b, turn, agent)``."""
        strength = self._strength
        planners, searchers = self._planner_columns, self._searcher_columns
        validators = self._validator_columns
        proposal = proposals(luck[:, :, planners], strength[planners]).astype(np.int8)
        notice = notices(luck[:, :, searchers], self._searcher_strength)
        markup_of = markups(fare_luck[:, :, searchers], np.arange(MAX_TURNS)[:, None],
                            self._searcher_strength)
        detect = detects(luck[:, :, validators], strength[validators])
        return (proposal, _by_set(notice, np.logical_or, False),
                _by_set(markup_of, np.minimum, np.inf), _by_set(detect, np.logical_or, False))

    def _draw(self, rng: np.random.Generator, n: int) -> FlightBlock | FlightOutcomes:
        return self._draw_many([rng], n)

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        blocks = self.blocks
        self._h_star[idx] = blocks.shortest_hops[rows]
        self._task_budget[idx] = blocks.budget[rows]
        self._level[idx] = blocks.budget_level[rows]
        self._hops_of[idx] = blocks.route_hops.take(rows, axis=0)
        self._price_of[idx] = blocks.route_price.take(rows, axis=0)
        if self._tabled:
            for mine, queued in ((self._proposal, blocks.proposal),
                                 (self._noticed, blocks.noticed),
                                 (self._markup, blocks.markup),
                                 (self._detected, blocks.detected)):
                mine.reshape(-1, MAX_TURNS, mine.shape[1])[idx] = queued.take(rows, axis=0)
        else:
            m = self.n_agents
            self._luck.reshape(-1, MAX_TURNS, m)[idx] = blocks.luck.take(rows, axis=0)
            self._fare_luck.reshape(-1, MAX_TURNS, m)[idx] = blocks.fare_luck.take(rows, axis=0)
        self._route[idx] = NO_ROUTE
        self._p_strength[idx] = 0.0
        self._quote[idx] = 0.0
        self._validated[idx] = 0
        self._dropped[idx] = 0

    def _feasible(self, idx: np.ndarray, route: np.ndarray, quote: np.ndarray) -> np.ndarray:
        """``FlightPlannerEnv._feasible`` row by row (``route`` must not be ``NO_ROUTE``)."""
        return (_CONNECTED[route] & (pick(self._hops_of, idx, route) <= self._h_star[idx] + 1)
                & (quote <= self._task_budget[idx]))

    def _commit(self, idx: np.ndarray, route: np.ndarray,
                price: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``FlightPlannerEnv._commit`` row by row: success and quality."""
        safe = np.maximum(route, 0)
        ok = (route != NO_ROUTE) & self._feasible(idx, safe, price)
        budget = self._task_budget[idx]
        slack = np.minimum(np.maximum((budget - price) / budget, 0.0), 1.0)
        hop_optimality = np.minimum(self._h_star[idx] / pick(self._hops_of, idx, safe), 1.0)
        return ok, np.where(ok, 10.0 * (0.7 * slack + 0.3 * hop_optimality), 0.0)

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ended, success, quality, _, _ = self._advance(idx, calls)
        return ended, success, quality

    def _advance(self, idx: np.ndarray, calls: np.ndarray) -> tuple[np.ndarray, ...]:
        """The transition, why the plan was dropped (``*_DROP``) and whether a planner ran.

        The single env's ``_advance`` over rows; v1's counters read the last two.
        """
        k = len(idx)
        turn = self._turn[idx]
        route, p_strength, quote = self._route[idx], self._p_strength[idx], self._quote[idx]
        validated = self._validated[idx]
        at = idx * MAX_TURNS + turn
        called = calls != 0
        acting, planning, searched, checked, lead = self._roles(called)
        committing = ~acting & (quote > 0)
        # this turn's outcomes by the single env's rules, of the agents they concern alone:
        # the lead planner's proposal, the called searchers' and validators' (from the
        # task's tables by the call set's code, or from the turn's luck)
        strength = self._strength
        if self._tabled:
            code = self._step_codes
            searchers_set = self._search_set_of[code]
            proposal = pick(self._proposal, at, self._plan_column_of[code])
            noticed = pick(self._noticed, at, searchers_set)
            markup = pick(self._markup, at, searchers_set)
            detected = pick(self._detected, at, self._validator_set_of[code])
        else:
            proposal, noticed, markup, detected = self._outcomes_of(at, turn, called, lead)
        route = np.where(planning, proposal, route)
        p_strength = np.where(planning, strength[lead], p_strength)
        quote = np.where(planning, 0.0, quote)
        validated = np.where(planning, 0, validated)
        searching = searched & (route != NO_ROUTE)
        drop = searching & (route == 2) & noticed  # a broken plan's missing leg noticed
        best = pick(self._price_of, idx, np.maximum(route, 0)) * markup
        better = searching & ~drop & ((quote == 0) | (best < quote))
        quote = np.where(better, best, quote)
        validated = np.where(better, 0, validated)
        checking = checked & (route != NO_ROUTE) & ~drop  # a dropped plan is not checked
        caught = checking & ~self._feasible(idx, np.maximum(route, 0), quote) & detected
        validated = np.where(checking & ~caught, 1, validated)  # weak validators wave through
        dropped = drop | caught  # either drop leaves no plan (one check or the other ran)
        route, p_strength, quote, validated = (
            np.where(dropped, NO_ROUTE, route), np.where(dropped, 0.0, p_strength),
            np.where(dropped, 0.0, quote), np.where(dropped, 0, validated))
        last = turn + 1 >= MAX_TURNS
        ended = committing | last
        # commit the ending sub-envs' plans (only theirs: the others' are not scored)
        success, quality = np.zeros(k, dtype=np.bool_), np.zeros(k)
        at = ended.nonzero()[0]
        if len(at):
            ok, score = self._commit(idx[at], route[at], quote[at])
            ok &= quote[at] > 0
            success[at], quality[at] = ok, np.where(ok, score, 0.0)
        self._route[idx], self._p_strength[idx], self._quote[idx] = route, p_strength, quote
        self._validated[idx], self._dropped[idx] = validated, dropped
        cause = np.where(drop, SEARCH_DROP, np.where(caught, VALIDATOR_DROP, NO_DROP))
        return ended, success, quality, cause, planning

    def _outcomes_of(self, at: np.ndarray, turn: np.ndarray, called: np.ndarray,
                     lead: np.ndarray) -> tuple[np.ndarray, ...]:
        """The turn's outcomes from its luck, row by row (pools without the tables).

        The lead planner's proposal; whether a called searcher notices a missing leg; the
        cheapest called searcher's markup (``inf`` without one); whether a called
        validator catches a bad plan.
        """
        luck, fare_luck = self._luck.take(at, axis=0), self._fare_luck.take(at, axis=0)
        strength = self._strength
        proposal = proposals(pick(luck, self._all[:len(at)], lead), strength[lead])
        searchers, searcher_strength = self._searcher_columns, self._searcher_strength
        search_calls = called.take(searchers, axis=1)
        noticed = any_per_row(search_calls & notices(luck.take(searchers, axis=1),
                                                     searcher_strength))
        # a running minimum over the searchers' columns (min is exact; a row min over a
        # short axis costs several times more)
        markup_of = markups(fare_luck.take(searchers, axis=1), turn[:, None],
                            searcher_strength)
        markup = np.where(search_calls[:, 0], markup_of[:, 0], np.inf)
        for j in range(1, len(searchers)):
            markup = np.minimum(markup, np.where(search_calls[:, j], markup_of[:, j], np.inf))
        detected = np.ones(len(at), dtype=np.bool_)
        if self._validator_columns.size:
            validators = self._validator_columns
            detected = any_per_row(called.take(validators, axis=1) & detects(
                luck.take(validators, axis=1), strength[validators]))
        return proposal, noticed, markup, detected

    def _roles(self, called: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per row: whether any agent, a planner, a searcher, a validator was called; the lead.

        The lead: the strongest called planner (argmax's first of equals, as max; 0
        without a planner). By the base's action codes when there are (table lookups),
        else row by row.
        """
        code = self._step_codes  # the base's codes of these calls (None above 16 agents)
        if code is None or self._lead_of is None:
            roles = [any_per_row(called & role) for role in
                     (self._planner, self._searcher, self._validator)]
            lead = np.argmax(np.where(called & self._planner, self._strength, -np.inf),
                             axis=1)
            return any_per_row(called), *roles, lead
        return (*self._roles_of.take(code, axis=1), self._lead_of[code])

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        rows = self._all if isinstance(idx, slice) else idx
        route, quote = self._route[idx], self._quote[idx]
        validated = self._validated[idx]
        h_star = self._h_star[idx]
        limit, budget = h_star + 1, self._task_budget[idx]
        # written slot by slot into the rows of its transpose (contiguous writes, where an
        # observation's column is strided), handed out as the (k, width) view
        slots = np.zeros((self._width, len(rows)), dtype=np.float32)  # v1 fills the rest
        slots[0] = _TURNS_LEFT.take(self._turn[idx])
        slots[1] = h_star / limit
        slots[2] = self._level[idx]
        slots[10] = validated
        slots[11] = self._dropped[idx]
        planned = route != NO_ROUTE
        hops = pick(self._hops_of, rows, np.maximum(route, 0))
        quoted = quote > 0
        visibly_bad = (hops > limit) | (quote > budget)
        # the plan's facts, zero without a plan
        slots[3] = planned
        slots[4] = np.where(planned, hops / (limit + 2), 0.0)
        slots[5] = planned & (hops <= limit)
        slots[6] = np.where(planned, self._p_strength[idx], 0.0)
        slots[7] = planned & quoted
        slots[8] = np.where(planned, np.minimum(quote / budget, 2.0) / 2, 0.0)
        slots[9] = planned & quoted & (quote <= budget)
        search = ~visibly_bad & ~quoted
        validate = ~visibly_bad & quoted & (validated == 0) & self._has_validator
        slots[12] = ~planned | visibly_bad
        slots[13] = planned & search
        slots[14] = planned & validate
        return slots.T


class FlightPlannerV1VectorEnv(FlightPlannerVectorEnv):
    """``num_envs`` FlightPlanner-v1 envs: v0's batched dynamics, v1's counters and view.

    As ``FlightPlannerV1Env._transition``: a called planner starts the plan's evidence
    afresh; a drop counts by its cause; a plan that survives counts each called searcher's
    quote and validator's pass (weak or strong) and multiplies the broken-route survival
    by each one's miss chance, searchers then validators, in index order.
    """

    env_class = FlightPlannerV1Env
    single_env: FlightPlannerV1Env

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n = self.num_envs
        # weak/strong passes, weak/strong quotes, drop cause, proposals, drops by kind
        self._counts = np.zeros((n, 8), dtype=np.int64)
        self._survival = np.ones(n)
        self._strong = self._strength >= STRONG
        # with action codes: what each call set shows a plan that survives it, by the
        # single env's _evidence_of (its one home): the counts it adds (weak/strong passes,
        # weak/strong quotes) and its survival factors in the order they multiply, padded
        # with 1.0 (x * 1.0 is x: the product is the single env's to the last bit)
        self._seen_of: np.ndarray | None = None
        self._factors_of = np.ones((1, 0))
        if self._bits is not None:
            m = self.n_agents
            evidence = [self.single_env._evidence_of(tuple(i for i in range(m) if code >> i & 1))
                        for code in range(2**m)]
            self._seen_of = np.array([(weak_p, strong_p, weak_q, strong_q) for
                                      _, weak_q, strong_q, weak_p, strong_p, _ in evidence],
                                     dtype=np.int64)
            self._factors_of = np.ones((2**m, max(len(e[-1]) for e in evidence)))
            for code, (*_, factors) in enumerate(evidence):
                self._factors_of[code, :len(factors)] = factors

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        super()._start(idx, rows)
        self._counts[idx] = 0
        self._survival[idx] = 1.0

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ended, success, quality, cause, planning = self._advance(idx, calls)
        counts, survival = self._counts.take(idx, axis=0), self._survival[idx]
        fresh = planning | (cause != NO_DROP)
        counts[:, 5] += planning
        counts[:, 6] += cause == SEARCH_DROP
        counts[:, 7] += cause == VALIDATOR_DROP
        counts[:, :4] *= ~fresh[:, None]
        survival = np.where(fresh, 1.0, survival)
        kept = (cause == NO_DROP) & (self._route[idx] != NO_ROUTE)
        code = self._step_codes
        if code is not None and self._seen_of is not None:
            counts[:, :4] += self._seen_of.take(code, axis=0) * kept[:, None]
            factors, product = self._factors_of.take(code, axis=0), survival
            for j in range(factors.shape[1]):
                product = product * factors[:, j]
            survival = np.where(kept, product, survival)
        else:
            survival = self._count_row_by_row(calls != 0, kept, counts, survival)
        counts[:, 4] = cause
        self._counts[idx], self._survival[idx] = counts, survival
        return ended, success, quality

    def _count_row_by_row(self, called: np.ndarray, kept: np.ndarray, counts: np.ndarray,
                          survival: np.ndarray) -> np.ndarray:
        """The counts (in place) and survival of calls without codes, agent by agent."""
        for role, (weak, strong), miss in ((self._searcher, (2, 3), SEARCH_NOTICE),
                                           (self._validator, (0, 1), 1.0)):
            for i in np.flatnonzero(role).tolist():
                hit = kept & called[:, i]
                counts[:, strong if self._strong[i] else weak] += hit
                survival = np.where(hit, survival * (1.0 - miss * self._strength[i]), survival)
        return survival

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        obs = super()._observe(idx)  # v0's 15 slots, then v1's, written in place
        slots, counts, t = obs.T, self._counts[idx].T, MAX_TURNS
        slots[15:19] = np.minimum(counts[:4], t) / t
        slots[19] = self._survival[idx]
        slots[20] = counts[4] == SEARCH_DROP
        slots[21] = counts[4] == VALIDATOR_DROP
        slots[22:25] = np.minimum(counts[5:8], t) / t
        return obs

