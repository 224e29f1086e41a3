"""FlightPlanner's planner: an exact belief over the plan, Monte-Carlo rollouts to act.

FlightPlanner hides whether the current plan is broken (its docstring: a broken route
has as many legs as the optimum and a price near it, so nothing in one observation gives
it away), and that is what decides whether committing succeeds. A planner that only
re-drew the luck from the start would not know what the episode so far says about the
plan, so this one keeps a belief: the posterior over which candidate route the plan is
(none, optimal, detour, broken) jointly with the broken route's price draw, updated
exactly (up to a 20-point grid over that draw) from each call it made and what the
observation showed. It then acts by one-step lookahead: every sensible joint action,
each followed by a one-turn rule (every planner-searcher pair), scored on the same
Monte-Carlo draws of the hidden route and of the luck to come (common random numbers).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.planning.common import Planner
from cost_envs.envs.flight_planner import (
    BROKEN_PRICE,
    DETOUR_SHARE,
    FARE_INFLATION,
    MAX_TURNS,
    SEARCH_DROP,
    SEARCH_MARKUP,
    SEARCH_NOTICE,
    VALIDATOR_DROP,
    FlightPlannerEnv,
    FlightTask,
)

#: The planner's route labels (the env's are optimal 0, detour 1, broken 2, none -1).
NONE, OPT, DET, BRK = 0, 1, 2, 3
#: Midpoints of the broken route's price multiplier ``U(0.9, 1.1)``.
GRID = BROKEN_PRICE[0] + (BROKEN_PRICE[1] - BROKEN_PRICE[0]) * (np.arange(20) + 0.5) / 20
_EDGE = 1e-6  # relative slack at the ends of a markup's support: quotes come back as float32


@dataclass(frozen=True)
class FlightModel:
    """What the planner knows of one task: its parameters, none of its luck.

    Attributes:
        hops: Legs of each planner route label (none 0, optimal, detour, broken).
        prices: ``(4, len(GRID))`` base price of each label for each grid value of the
            broken route's price multiplier (only the broken row depends on it). A model
            may hold more columns, one per (hypothesis, grid value): the Bayes reference
            (:mod:`agents.planning.flight_bayes`) stacks tasks of equal legs this way.
        budget: The budget ``B``.
        hop_limit: The hop limit ``H``.
        shortest_hops: ``h*``.
    """

    hops: np.ndarray
    prices: np.ndarray
    budget: float
    hop_limit: int
    shortest_hops: int

    @classmethod
    def of(cls, task: FlightTask) -> FlightModel:
        """Reads the optimal and detour routes, the budget and the limits; no luck."""
        h_opt, h_det = (int(h) for h in task.route_hops[:2])
        p_opt, p_det = (float(p) for p in task.route_price[:2])
        prices = np.stack([np.zeros_like(GRID), np.full_like(GRID, p_opt),
                           np.full_like(GRID, p_det), p_opt * GRID])
        return cls(np.array([0, h_opt, h_det, h_opt]), prices, float(task.budget),
                   int(task.hop_limit), int(task.shortest_hops))

    def quality(self, route: np.ndarray, quote: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 1's ``alpha S + beta Q`` factors: success and quality of committing."""
        return _quality(route, self.hops[route], quote, self.budget, self.hop_limit,
                        self.shortest_hops)


def _quality(route: np.ndarray, hops: Any, quote: np.ndarray, budget: Any, hop_limit: Any,
             shortest_hops: Any) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`FlightModel.quality` of routes whose legs and task are given (arrays or scalars)."""
    success = (route == OPT) | (route == DET)
    success &= (hops <= hop_limit) & (quote > 0) & (quote <= budget)
    slack = np.clip((budget - quote) / budget, 0.0, 1.0)
    optimality = np.minimum(shortest_hops / np.maximum(hops, 1), 1.0)
    return success, np.where(success, 10.0 * (0.7 * slack + 0.3 * optimality), 0.0)


def _markup_laws(x: np.ndarray, spread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Survival and density at ``x`` of ``min_i (1 + spread_i w_i)``, ``w_i ~ U(0, 1)``."""
    width = np.maximum(spread, 1e-12).reshape(-1, *[1] * x.ndim)
    z = (x[None] - 1.0) / width
    inside = (z >= -_EDGE / width) & (z <= 1.0 + _EDGE / width)
    each = np.clip(1.0 - z, 0.0, 1.0)  # survival of each searcher's markup
    survival = np.prod(each, axis=0)
    density = np.zeros_like(x)
    for i in range(len(spread)):
        others = np.prod(np.delete(each, i, axis=0), axis=0)
        density += np.where(inside[i], others / width[i], 0.0)
    return survival, density


def _markup_density(x: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """``_markup_laws(x, spread)[1]``, bit for bit, without the survival it does not need.

    With one searcher the density is ``1 / width`` inside the support (0 + that, and
    the product of no other survivals, 1, over the width); with more, the general loop.
    """
    if len(spread) != 1:
        return _markup_laws(x, spread)[1]
    width = max(float(spread[0]), 1e-12)
    z = (x - 1.0) / width
    inside = (z >= -_EDGE / width) & (z <= 1.0 + _EDGE / width)
    return np.where(inside, 1.0 / width, 0.0)


@dataclass
class Seen:
    """What one observation shows of the plan (v0's slots, which v1 keeps in place)."""

    has_plan: bool
    hops: int
    quote: float  # 0 when none; the float32 ratio turned back into money
    capped: bool  # the quote is at least twice the budget (the ratio saturates)
    ratio: float
    dropped: bool
    cause: int | None = None  # why it was dropped (v1's slots: *_DROP), None if not read


def read_observation(env: FlightPlannerEnv, observation: np.ndarray, model: FlightModel
                     ) -> tuple[int, Seen]:
    """The turn and what the plan shows, from v0's slots of ``observation``."""
    layout = env.observation_layout
    at = {name: float(observation[layout[name].start]) for name in (
        "turns_left", "has_plan", "plan_hops", "has_quote", "quote_ratio",
        "dropped_last_turn")}
    turn = MAX_TURNS - round(at["turns_left"] * MAX_TURNS)
    ratio = at["quote_ratio"] if at["has_quote"] > 0.5 else 0.0
    seen = Seen(has_plan=at["has_plan"] > 0.5,
                hops=round(at["plan_hops"] * (model.hop_limit + 2)),
                quote=ratio * 2.0 * model.budget, capped=ratio >= 1.0, ratio=ratio,
                dropped=at["dropped_last_turn"] > 0.5)
    return turn, seen


class Belief:
    """The posterior over (plan's route label, broken price multiplier) given the episode.

    ``weights[r, k]`` is ``P(route r, multiplier GRID[k] | calls made, what was seen)``
    (``k`` runs over the model's price columns).
    Every check's outcome enters through its exact likelihood under the generative model:
    a proposal's shares, the plan's legs, a search noticing a missing leg or not, the
    density of the quote it returned (or, when the kept quote did not move, the chance
    that the new one was no cheaper), a validator passing or dropping the plan.
    """

    def __init__(self, model: FlightModel) -> None:
        self.model = model
        self.weights: np.ndarray = np.zeros(model.prices.shape)
        self.weights[NONE] = 1.0 / model.prices.shape[1]
        self.quote = 0.0
        self.ratio = 0.0

    def broken(self) -> float:
        """``P(the plan is broken)`` (0 with no plan)."""
        return float(self.weights[BRK].sum())

    def update(self, env: FlightPlannerEnv, turn: int, called: list[int], seen: Seen,
               strict: bool = True) -> tuple[float, bool]:
        """Condition on the turn ``turn`` that called ``called`` and ended showing ``seen``.

        Returns the evidence, the probability of what was seen under the belief before
        (times the density of the quote when a search moved it), and whether the quote
        counted (False when it had probability 0 and was set aside, see below; the
        evidence then leaves it out). The planner needs neither; the Bayes reference
        weighs its hypotheses by them. ``seen.cause``, when given, tells which check
        dropped the plan. What was seen may have probability 0 under the model: then
        ``strict`` raises, else the belief is left as it was and the evidence is 0.
        """
        model, w = self.model, self.weights
        roles, strength = env.pool.roles, env._strength
        planners = [i for i in called if roles[i] == "planner"]
        searchers = np.array([strength[i] for i in called if roles[i] == "search"])
        validators = np.array([strength[i] for i in called if roles[i] == "validator"])
        q0 = self.quote
        if planners:
            s = max(strength[i] for i in planners)
            prior = np.array([0.0, s, DETOUR_SHARE * (1 - s), (1 - DETOUR_SHARE) * (1 - s)])
            w = prior[:, None] * w.sum(axis=0)[None]
            q0 = 0.0
        catch = 1.0 - np.prod(1.0 - validators)
        inflation = 1.0 + FARE_INFLATION * turn
        spread = SEARCH_MARKUP * (1.0 - searchers)
        notice = np.zeros((4, 1))
        if len(searchers):
            notice[BRK] = 1.0 - np.prod(1.0 - SEARCH_NOTICE * searchers)
        over_limit = (model.hops > model.hop_limit)[:, None]
        likelihood = np.ones_like(w)
        # the quote's factor, kept apart (see below); None: 1 (its product, ``base * 1``, is
        # ``base``, of its layout: the weights are always C-ordered)
        quote_law: np.ndarray | None = None
        moved = False
        if seen.dropped:
            if len(searchers) and not 0 < q0 <= model.budget:
                scale = np.maximum(model.prices * inflation, 1e-12)
                over_budget = _markup_laws(model.budget / scale, spread)[0]
            else:
                over_budget = np.full_like(w, float(q0 > model.budget))
            infeasible = np.where(over_limit, 1.0, over_budget)
            infeasible[BRK] = 1.0
            if seen.cause == SEARCH_DROP:
                likelihood = np.broadcast_to(notice, w.shape).copy()
            elif seen.cause == VALIDATOR_DROP:
                likelihood = (1.0 - notice) * catch * infeasible
            else:
                likelihood = notice + (1.0 - notice) * catch * infeasible
            likelihood[NONE] = 0.0
        elif not seen.has_plan:
            likelihood[NONE + 1:] = 0.0
        else:
            likelihood[NONE] = 0.0
            likelihood *= (model.hops == seen.hops)[:, None]
            if len(searchers):
                likelihood *= 1.0 - notice
                if seen.capped or not (q0 == 0 or seen.ratio != self.ratio):
                    scale = np.maximum(model.prices * inflation, 1e-12)
                    level = 2 * model.budget if seen.capped else q0
                    quote_law = _markup_laws(level / scale, spread)[0]
                else:
                    moved = True  # the quote's density: below, where it counts
            if len(validators):
                bad = over_limit | (seen.quote > model.budget)
                bad = np.broadcast_to(bad, w.shape).copy()
                bad[BRK] = True
                likelihood *= np.where(bad, 1.0 - catch, 1.0)
        base = w * likelihood
        if moved:
            quote_law = self._quote_density(base, seen.quote, inflation, spread)
        posterior = base if quote_law is None else base * quote_law
        counted = bool(posterior.sum() > 0)
        if not counted:
            # The broken route's price draw is held on a grid, so a belief that an earlier
            # quote pinned to one grid point can find a later quote (another searcher, more
            # fare inflation) just outside that point's support, though the true draw,
            # between grid points, allows it. The quote then says nothing this turn; every
            # other check still counts. (Seed 0's task 530 of FlightPlanner-v0 does this.)
            posterior = base
        if seen.dropped:
            posterior = np.vstack([posterior.sum(axis=0)[None], np.zeros((3, w.shape[1]))])
        total = float(posterior.sum())
        if not total > 0 and not strict:
            return 0.0, counted
        if not total > 0:  # what was seen is impossible whatever the quote says
            raise ValueError(f"Belief: turn {turn}'s observation has probability 0 under the "
                             "model; was the planner given another env's observations?")
        self.weights = posterior / total
        self.quote, self.ratio = (seen.quote, seen.ratio) if seen.has_plan else (0.0, 0.0)
        return total, counted

    def _quote_density(self, base: np.ndarray, quote: float, inflation: float,
                       spread: np.ndarray) -> np.ndarray:
        """A quote that moved: its density in units of the price (1 where ``base`` is 0).

        What :meth:`update` multiplies ``base`` (the belief times the other checks'
        likelihood) by. Every entry is a function of that entry's price alone, so it is
        computed only on the route labels where ``base`` is not all 0 (elsewhere the
        product is 0 whatever it is, the density being finite): the same operations on the
        same numbers there. The product ``base * law`` takes ``base``'s layout, as
        ``base * density`` did (C-ordered: numpy's choice when the layouts differ), so the
        posterior and its sums are bit-identical.
        """
        prices = self.model.prices
        law = np.ones_like(base)  # base * law: of base's layout, as base * the full density
        for row in np.flatnonzero(base.any(axis=1)):
            scale = np.maximum(prices[row] * inflation, 1e-12)
            law[row] = _markup_density(quote / scale, spread) / scale
        return law


@dataclass(frozen=True)
class _Pool:
    """The pool as arrays, for the vectorised rollouts."""

    strength: np.ndarray
    is_planner: np.ndarray
    is_search: np.ndarray
    is_validator: np.ndarray
    penalty: np.ndarray  # Eq. 1's lam * c_i + gamma per call

    @classmethod
    def of(cls, env: FlightPlannerEnv) -> _Pool:
        roles = np.array(env.pool.roles)
        weights = env.reward_weights
        return cls(env._strength.astype(float), roles == "planner", roles == "search",
                   roles == "validator", weights.lam * env.pool.costs + weights.gamma)


def simulate(model: FlightModel, pool: _Pool, alpha_beta: tuple[float, float], turn: int,
             first: np.ndarray, bases: np.ndarray, route: np.ndarray, multiplier: np.ndarray,
             quote: float, luck: np.ndarray, fare_luck: np.ndarray) -> np.ndarray:
    """Returns from ``turn`` on: ``first`` action, then a one-turn rule, on sampled scenarios.

    The env's dynamics restated over arrays (``FlightPlannerEnv._advance`` steps one
    episode at a time; here every candidate, rule and scenario steps at once).

    Args:
        model: The task's parameters.
        pool: The pool's strengths, roles and per-call penalties.
        alpha_beta: Eq. 1's success and quality weights.
        turn: The turn to start from.
        first: ``(A, m)`` bool, the candidate actions at ``turn``.
        bases: ``(P, m)`` bool, each one-turn rule's plan-and-search action; the rule
            commits once a quote within the budget and the hop limit stands.
        route: ``(N,)`` the plan's route label in each scenario.
        multiplier: ``(N,)`` the grid index of the broken price multiplier.
        quote: The kept quote now (0 if none).
        luck: ``(N, MAX_TURNS, m)`` each scenario's ``u`` (turns from ``turn`` on).
        fare_luck: ``(N, MAX_TURNS, m)`` each scenario's ``w``.

    Returns:
        ``(A, P, N)`` episode return from ``turn`` on (the env's Eq. 1 weights).
    """
    return simulate_stacks([(model, route, multiplier, quote)], pool, alpha_beta, turn, first,
                           bases, luck, fare_luck)


def simulate_stacks(stacks: list[tuple[FlightModel, np.ndarray, np.ndarray, float]],
                    pool: _Pool, alpha_beta: tuple[float, float], turn: int, first: np.ndarray,
                    bases: np.ndarray, luck: np.ndarray, fare_luck: np.ndarray) -> np.ndarray:
    """:func:`simulate` of the scenarios of several models at once (the rollouts' one home).

    The Bayes reference (:mod:`agents.planning.flight_bayes`) draws its scenarios from
    several stacked models; one call for them all, instead of one per model, pays
    numpy's per-operation overhead (which dominates these small arrays) once a turn.
    Each row's arithmetic is what a call of :func:`simulate` with its own model does,
    operation for operation, so the returns are equal bit for bit
    (``tests/test_planning_flight_bayes.py`` checks it against a call per model).

    Args:
        stacks: ``(model, route, multiplier, quote)`` per model: its scenarios' route
            labels ``(N_s,)`` and price columns ``(N_s,)`` in ``model.prices``, and its
            kept quote.
        pool: The pool's strengths, roles and per-call penalties.
        alpha_beta: Eq. 1's success and quality weights.
        turn: The turn to start from.
        first: ``(A, m)`` bool, the candidate actions at ``turn``.
        bases: ``(P, m)`` bool, the one-turn rules' actions (as :func:`simulate`'s).
        luck: ``(sum N_s, MAX_TURNS, m)`` the scenarios' ``u``, the stacks' in their order.
        fare_luck: Their ``w``, alike.

    Returns:
        ``(A, P, sum N_s)``: each stack's :func:`simulate` along the last axis, in order.
    """
    n_first, n_bases = len(first), len(bases)
    # The rows are stack-major, each stack's block laid out as simulate's own call lays it
    # ((A, P, N_s) flattened): the per-call penalty sums below (BLAS) then see each row
    # where that call would, so not even their summation order can differ.
    sizes = [len(route) for _, route, _, _ in stacks]
    offsets = np.cumsum([0, *sizes])
    blocks = [(n_first * n_bases * lo, n_first * n_bases * hi)
              for lo, hi in itertools.pairwise(offsets)]
    # Per scenario: its model's legs and prices at its column (4 route labels each), budget
    # and limits; the rows read them through their scenario.
    hops = np.concatenate([np.repeat(model.hops[:, None], len(route), axis=1)
                           for model, route, _, _ in stacks], axis=1)
    prices = np.concatenate([model.prices[:, multiplier] for model, _, multiplier, _ in stacks],
                            axis=1)
    budget, hop_limit, shortest = (np.concatenate([np.full(len(route), getattr(model, name))
                                                   for model, route, _, _ in stacks])
                                   for name in ("budget", "hop_limit", "shortest_hops"))
    r = np.concatenate([np.broadcast_to(route, (n_first, n_bases, len(route))).ravel()
                        for _, route, _, _ in stacks])
    scen = np.concatenate([np.broadcast_to(np.arange(lo, hi), (n_first, n_bases, hi - lo))
                           .ravel() for lo, hi in itertools.pairwise(offsets)])
    q = np.concatenate([np.full(n_first * n_bases * len(route), float(quote))
                        for _, route, _, quote in stacks])
    budget, hop_limit, shortest = budget[scen], hop_limit[scen], shortest[scen]
    alpha, beta = alpha_beta
    # Agents run along the first axis ((m, rows), agent-major): reductions over the agents
    # are then a few wide elementwise passes, not one tiny reduction a row. They are exact
    # (any, min, max; the lead planner is argmax's first maximum), so no value changes.
    m = first.shape[1]
    first_cols = np.concatenate([np.broadcast_to(first.T[:, :, None, None], (
        m, n_first, n_bases, n)).reshape(m, -1) for n in sizes], axis=1)
    base_cols = np.concatenate([np.broadcast_to(bases.T[:, None, :, None], (
        m, n_first, n_bases, n)).reshape(m, -1) for n in sizes], axis=1)
    # Each check reads only its role's agents (another agent's row there is all False, and
    # any, min and the first maximum are unchanged without it).
    planner, searcher, validator = (np.flatnonzero(is_role) for is_role in (
        pool.is_planner, pool.is_search, pool.is_validator))
    strength = pool.strength[:, None]
    notice_chance = SEARCH_NOTICE * strength[searcher]
    markup_scale = SEARCH_MARKUP * (1.0 - strength[searcher])
    total = np.zeros(r.shape)
    # Only the rows still playing step (a finished row's return is final): ``live`` holds
    # their positions, and every per-row array below holds theirs alone, in order.
    live = np.arange(len(r))
    # The per-call penalties: the BLAS sums of each turn's (rows, m) calls. A row's sum
    # reads that row alone, at its position (its summation order may depend on it), and
    # after the first turn a row calls its rule's agents or no one; so each row's sum of
    # the first action's calls and of its rule's, computed once on the whole arrays at
    # their positions (per stack, as before), are every sum a turn would take (no calls:
    # - 0.0). A row ends by committing (no calls) or with the last turn.
    penalties = []
    for cols in (first_cols, base_cols):
        calls = np.ascontiguousarray(cols.T, dtype=float)
        penalties.append(np.concatenate([calls[lo:hi] @ pool.penalty for lo, hi in blocks]))
    first_penalty, base_penalty = penalties
    # the luck by turn, agent-major: (MAX_TURNS, m, scenarios), each turn's rows contiguous
    luck, fare_luck = (np.ascontiguousarray(x.transpose(1, 2, 0)) for x in (luck, fare_luck))
    # a row's legs and price of route r: [r, scenario] of these, read flat (r * n + scenario)
    n_scenarios, hops, prices = hops.shape[1], hops.ravel(), prices.ravel()

    def step(t: int, act: np.ndarray, r: np.ndarray, q: np.ndarray, scen: np.ndarray,
             budget: np.ndarray, hop_limit: np.ndarray, shortest: np.ndarray
             ) -> tuple[np.ndarray, ...]:
        """Turn ``t`` of rows calling ``act``: their route, quote, commit and Eq. 1 gain."""
        n = len(r)
        commit = ~act.any(axis=0) & (q > 0)
        u, w = np.take(luck[t], scen, axis=1), np.take(fare_luck[t, searcher], scen, axis=1)
        planners = np.where(act[planner], strength[planner], -1.0)
        lead, top = _first_max(planners)
        lead = planner[lead]
        planned = top >= 0
        s = pool.strength[lead]
        ul = u.ravel()[lead * n + np.arange(n)]
        rest = (ul - s) / np.maximum(1.0 - s, 1e-12)
        proposal = np.where(ul < s, OPT, np.where(rest < DETOUR_SHARE, DET, BRK))
        r = np.where(planned, proposal, r)
        q = np.where(planned, 0.0, q)
        search = act[searcher]
        searched = search.any(axis=0) & (r != NONE)
        notice = searched & (r == BRK) & (search & (u[searcher] < notice_chance)).any(axis=0)
        markup = np.where(search, 1.0 + markup_scale * w, np.inf).min(axis=0)
        fresh = prices[r * n_scenarios + scen] * (1.0 + FARE_INFLATION * t) * markup
        better = searched & ~notice & ((q == 0) | (fresh < q))
        q = np.where(notice, 0.0, np.where(better, fresh, q))
        r = np.where(notice, NONE, r)
        validate = act[validator]
        checked = validate.any(axis=0) & (r != NONE)
        feasible = (r != BRK) & (hops[r * n_scenarios + scen] <= hop_limit) & (q <= budget)
        caught = checked & ~feasible & (validate & (u[validator] < strength[validator])
                                        ).any(axis=0)
        r = np.where(caught, NONE, r)
        q = np.where(caught, 0.0, q)
        success, quality = _quality(r, hops[r * n_scenarios + scen], q, budget, hop_limit,
                                    shortest)
        return r, q, commit, alpha * success + beta * quality

    # The first turn plays the candidate's action whatever the rule, so the rows of one
    # (candidate, scenario) are alike until then: it steps the first rule's rows (``one``)
    # and each row takes its own's outcome (``its``), the same numbers.
    one = np.concatenate([np.arange(lo, hi).reshape(n_first, n_bases, -1)[:, 0].ravel()
                          for lo, hi in blocks])
    its = np.concatenate([n_first * lo + np.broadcast_to(
        np.arange(n_first * (hi - lo)).reshape(n_first, 1, -1), (n_first, n_bases, hi - lo)
    ).ravel() for lo, hi in itertools.pairwise(offsets)])
    for t in range(turn, MAX_TURNS):
        if t == turn:
            total -= first_penalty
            outcome = step(t, first_cols[:, one], r[one], q[one], scen[one], budget[one],
                           hop_limit[one], shortest[one])
            r, q, commit, gain = (x[its] for x in outcome)
        else:
            good = (r != NONE) & (hops[r * n_scenarios + scen] <= hop_limit) & (q > 0)
            good &= q <= budget
            total[live] -= np.where(good, 0.0, base_penalty)
            r, q, commit, gain = step(t, base_cols & ~good, r, q, scen, budget, hop_limit,
                                      shortest)
        ends = np.ones(len(live), dtype=bool) if t + 1 >= MAX_TURNS else commit
        total[live] += np.where(ends, gain, 0.0)
        keep = np.flatnonzero(~ends)
        live, r, q, scen = live[keep], r[keep], q[keep], scen[keep]
        budget, hop_limit, shortest = budget[keep], hop_limit[keep], shortest[keep]
        base_cols, base_penalty = np.take(base_cols, keep, axis=1), base_penalty[keep]
        if not len(live):
            break
    return np.concatenate([total[lo:hi].reshape(n_first, n_bases, -1) for lo, hi in blocks],
                          axis=2)


def _first_max(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``argmax`` and ``max`` along the first axis of ``(k, n)`` (ties: the first), in passes."""
    lead = np.zeros(values.shape[1], dtype=np.intp)
    top = values[0]
    for i in range(1, len(values)):
        higher = values[i] > top
        lead[higher] = i
        top = np.where(higher, values[i], top)
    return lead, top


class FlightPlanner(Planner):
    """Privileged: a belief-tracking rollout planner that knows the task but not its luck.

    **What it knows.** The env's generative model (its docstring's, in code: proposal
    shares ``s`` / ``.6 (1 - s)`` / ``.4 (1 - s)``, fare inflation and search markups, a
    searcher noticing a missing leg with ``0.5 s``, a validator catching a bad plan with
    ``s``, Eq. 1 and the env's reward weights), the pool with its prices and strengths,
    and the current task's parameters: the budget, the hop limit, ``h*``, and the legs and
    base price of the optimal and the detour routes. It reads the turn and what the plan
    shows (legs, quote, dropped) from the observation (v0's slots, also v1's).

    **What it does not know.** The luck: every agent's ``luck`` and ``fare_luck`` at every
    turn, and the broken route's price draw ``P_opt * U(0.9, 1.1)`` (what a search quotes
    on it); :func:`cost_envs.envs.flight_planner.with_fresh_luck` redraws exactly these.
    It never reads ``FlightTask.luck``, ``fare_luck``, ``route_price[2]`` or the env's
    state, so which route the plan is stays hidden from it as from any policy.

    **What it does.** It keeps :class:`Belief`, the exact posterior over the plan's route
    and the broken price (on a 20-point grid), from its own calls and the observations.
    At each step it scores every joint action that calls at most one planner (more are
    dominated: only the strongest proposes) or, with no plan, exactly one, each followed
    by every one-turn rule (one planner and one searcher until a quote within the budget
    and the hop limit stands, then commit: :class:`agents.baselines.OneTurnPlanSearch`),
    on ``samples`` scenarios of the hidden route, the broken price and the luck to come,
    drawn from the belief and shared by all candidates (common random numbers). It plays
    the first action of the best pair (ties to the cheaper action). Each score is an
    unbiased estimate of that pair's expected Eq. 1 return from here, so this is one step
    of policy improvement over the best one-turn rule, the rule family that matched PPO.
    The draws are seeded by ``seed``, the task's parameters and the turn, so the planner
    is a deterministic policy of each task and plays the same way in any task order.
    On v1 it reads v0's slots, which v1 keeps in place: v1's counts are functions of what
    the belief already holds (only the cause of a drop is not, and after a drop the plan
    is gone), so it plays v1's tasks exactly as v0's.

    On the 400 evaluation tasks of task seed 0 (default weights, 32 samples, about 4 ms
    of CPU an episode on one core) it succeeds on 398 (0.995) at CPS 0.0317 with a mean return of
    1.004, against the one-turn rule's 0.978, 0.0402 and 0.962, RuleBased's 0.940, 0.0568
    and 0.836 and the hindsight oracle's 0.998, 0.0058 and 1.126 (v0 and v1 alike); paired
    over tasks it gains 0.042 on the one-turn rule (standard error 0.010; 0.067, 0.054 and
    0.034 on the task sets of seeds 1-3). Told the current plan's route (still blind to the
    luck to come) it would reach 1.009: the belief costs little, and the gap to the oracle
    is the price of not knowing which cheap call will work (the oracle's success and
    quality are no higher, its cost is a fifth). The mean score of its best first
    (action, rule) pair at the start, 1.000, is what one step of improvement guarantees.
    The number of samples moves the return by no more than 400 tasks can measure (4:
    0.986, 8: 0.989, 256: 0.994; paired standard errors near 0.01), but 4 samples lose
    success (0.950) and 256 take 25 ms of CPU an episode.

    Args:
        env: A FlightPlanner env (v0 or v1, any pool), possibly wrapped; the planner reads
            the task of this env.
        samples: Scenarios per decision (more: closer to the best pair, slower).
        seed: Seeds the scenarios.
    """

    env: FlightPlannerEnv  # checked by __init__

    def __init__(self, env: gym.Env, samples: int = 32, seed: int = 0) -> None:
        super().__init__(env)
        if not isinstance(self.env, FlightPlannerEnv):
            raise ValueError(f"FlightPlanner: needs FlightPlanner's generative model (routes, "
                             f"quotes, checks); it applies to cost_envs/FlightPlanner-v0 and "
                             f"-v1, not {self.env.env_name}")
        if not (isinstance(samples, int) and samples >= 1):
            raise ValueError(f"FlightPlanner: samples must be an integer >= 1, got {samples!r}")
        self.samples, self.seed = samples, int(seed)
        self._pool = _Pool.of(self.env)
        table = self.env.joint_actions_by_cost()[0].astype(bool)
        n_planners = table[:, self._pool.is_planner].sum(axis=1)
        self._candidates = {False: table[n_planners == 1], True: table[n_planners <= 1]}
        pairs = [(p, s) for p in np.flatnonzero(self._pool.is_planner)
                 for s in np.flatnonzero(self._pool.is_search)]
        self.bases = np.zeros((len(pairs), self.n_agents), dtype=bool)
        for row, pair in enumerate(pairs):
            self.bases[row, list(pair)] = True
        self._turns_left = self.env.observation_layout["turns_left"].start
        self.belief: Belief | None = None
        self._task: FlightTask | None = None
        self._last: tuple[int, list[int]] | None = None

    def follow(self, observation: np.ndarray) -> tuple[int, Seen]:
        """Bring the belief up to the observed turn (a new one at each episode's start).

        :meth:`action_values` calls this; with :meth:`played`, it lets the planner follow
        an episode whose actions another policy chose. Returns the turn and what it saw.
        """
        task = self.env.task
        if task is None:
            raise ValueError("FlightPlanner: the env has no task yet; reset it first")
        if task is not self._task or self.belief is None:
            self._task, self.belief, self._last = task, Belief(FlightModel.of(task)), None
        turn, seen = read_observation(self.env, observation, self.belief.model)
        if turn == 0:
            self.belief, self._last = Belief(self.belief.model), None
        elif self._last is not None and self._last[0] == turn - 1:
            self.belief.update(self.env, turn - 1, self._last[1], seen)
            self._last = None
        elif self._last is None or self._last[0] != turn:
            raise ValueError(f"FlightPlanner: turn {turn} does not follow the planner's last "
                             "action; it must choose every action of the episode")
        return turn, seen

    def action_values(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Candidate actions ``(A, m)`` and their scores ``(A, P, samples)`` from here.

        Score ``[a, p, n]`` is the return of candidate ``a`` then one-turn rule ``p``
        (:attr:`bases`) in scenario ``n``: its mean estimates that pair's expected return.
        """
        turn, seen = self.follow(observation)
        belief = self.belief
        assert belief is not None
        model = belief.model
        key = np.array([model.budget, *model.prices[1:3, 0]]).view(np.uint32).tolist()
        rng = np.random.default_rng([self.seed, turn, *key])
        flat = belief.weights.ravel()
        picks = rng.choice(flat.size, size=self.samples, p=flat / flat.sum())
        route, multiplier = np.divmod(picks, len(GRID))
        shape = (self.samples, MAX_TURNS, self.n_agents)
        luck, fare_luck = rng.random(shape), rng.random(shape)
        candidates = self._candidates[seen.has_plan]
        weights = self.env.reward_weights
        values = simulate(model, self._pool, (weights.alpha, weights.beta), turn, candidates,
                          self.bases, route, multiplier, belief.quote, luck, fare_luck)
        return candidates.astype(np.int8), values

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The first action of the best (action, one-turn rule) pair."""
        candidates, values = self.action_values(observation)
        best = self.choose(observation, candidates, values)
        turn = MAX_TURNS - round(float(observation[self._turns_left]) * MAX_TURNS)
        self.played(turn, candidates[best])
        return candidates[best].copy()

    def choose(self, observation: np.ndarray, candidates: np.ndarray, values: np.ndarray
               ) -> int:
        """The row of ``candidates`` to play: the best pair's (ties to the cheapest)."""
        return int(np.argmax(values.mean(axis=2).max(axis=1)))

    def note_action(self, observation: np.ndarray, action: np.ndarray) -> None:
        """The action another policy played at ``observation``: the next turn follows it."""
        self.played(MAX_TURNS - round(float(observation[self._turns_left]) * MAX_TURNS), action)

    def played(self, turn: int, action: np.ndarray) -> None:
        """Note the action played at ``turn``: the next observation is read against it.

        :meth:`act` calls this; call it yourself to let the planner follow an episode
        in which another policy chose the action.
        """
        self._last = (int(turn), np.flatnonzero(np.asarray(action)).tolist())

