"""FlightPlanner's Bayes reference and planner: their fast paths against straightforward ones.

The rollouts, the scenario draw, the belief update and the posterior at reset were
vectorised for speed (issue #37: the Bayes teacher labels every DAgger state); each test
here keeps the straightforward computation as its oracle and requires the fast one to
equal it bit for bit on real v1 episodes, so the teacher's labels cannot move.
"""

from __future__ import annotations

import itertools

import numpy as np
from test_planning_flight_bayes import PARTICLES, V1, _actions, _tasks

from agents.planning import BayesFlightPlanner, planner
from agents.planning.flight import (
    BRK,
    DET,
    DETOUR_SHARE,
    FARE_INFLATION,
    MAX_TURNS,
    OPT,
    SEARCH_MARKUP,
    SEARCH_NOTICE,
    _quality,
)
from agents.planning.flight_bayes import GRID, FlightPrior
from cost_envs.envs.flight_planner import SEARCH_DROP, VALIDATOR_DROP


def test_one_rollout_call_for_all_stacks_returns_what_a_call_per_stack_does(monkeypatch):
    """The stacks' scenarios in one :func:`simulate_stacks` call equal a call per stack.

    The oracle is the loop ``action_values`` ran before (one :func:`simulate` per stack
    with scenarios, its draws recomputed from the planner's state), on the states of real
    v1 episodes; the values, not only the actions chosen, must be equal bit for bit, so
    the labels the Bayes teacher gives are unchanged.
    """
    from agents.planning import flight_bayes
    from agents.planning.flight import simulate

    env, tasks = _tasks(12, seed=3, env_id=V1)
    agent = BayesFlightPlanner(env, n_particles=PARTICLES)
    real = flight_bayes.simulate_stacks
    stacked = []

    def checked(stacks, pool, alpha_beta, turn, first, bases, luck, fare_luck):
        values = real(stacks, pool, alpha_beta, turn, first, bases, luck, fare_luck)
        seen = np.concatenate(agent._history).view(np.uint32).tolist()
        rng = np.random.default_rng([agent.seed, turn, *seen])
        flats = [weight * belief.weights.ravel() for belief, weight in agent.stacks]
        sizes = np.cumsum([0] + [len(flat) for flat in flats])
        flat = np.concatenate(flats)
        picks = rng.choice(flat.size, size=agent.samples, p=flat / flat.sum())
        shape = (agent.samples, MAX_TURNS, agent.n_agents)
        own_luck, own_fare_luck = rng.random(shape), rng.random(shape)
        expected = []
        for (belief, _), lo, hi in zip(agent.stacks, sizes[:-1], sizes[1:], strict=True):
            mine = (picks >= lo) & (picks < hi)
            if mine.any():
                route, column = np.divmod(picks[mine] - lo, belief.weights.shape[1])
                expected.append(simulate(belief.model, pool, alpha_beta, turn, first, bases,
                                         route, column, belief.quote, own_luck[mine],
                                         own_fare_luck[mine]))
        stacked.append(len(expected))
        np.testing.assert_array_equal(values, np.concatenate(expected, axis=2))
        return values

    monkeypatch.setattr(flight_bayes, "simulate_stacks", checked)
    for task in tasks:
        _actions(agent, env, task)
    assert max(stacked) > 1 and len(stacked) > len(tasks)  # several stacks, later turns


def _rowwise_simulate_stacks(stacks, pool, alpha_beta, turn, first, bases, luck, fare_luck):
    """:func:`simulate_stacks` as it was (scenario rows, agents along the last axis): the oracle."""
    n_first, n_bases = len(first), len(bases)
    sizes = [len(route) for _, route, _, _ in stacks]
    offsets = np.cumsum([0, *sizes])
    blocks = [(n_first * n_bases * lo, n_first * n_bases * hi)
              for lo, hi in itertools.pairwise(offsets)]
    hops = np.concatenate([np.repeat(model.hops[:, None], len(route), axis=1)
                           for model, route, _, _ in stacks], axis=1)
    prices = np.concatenate([model.prices[:, column] for model, _, column, _ in stacks], axis=1)
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
    total, active = np.zeros(r.shape), np.ones(r.shape, dtype=bool)
    alpha, beta = alpha_beta
    first_rows = np.concatenate([np.broadcast_to(first[:, None, None], (
        n_first, n_bases, n, first.shape[1])).reshape(-1, first.shape[1]) for n in sizes])
    base_rows = np.concatenate([np.broadcast_to(bases[None, :, None], (
        n_first, n_bases, n, bases.shape[1])).reshape(-1, bases.shape[1]) for n in sizes])
    strength = pool.strength
    for t in range(turn, MAX_TURNS):
        if t == turn:
            act = first_rows
        else:
            good = (r != 0) & (hops[r, scen] <= hop_limit) & (q > 0) & (q <= budget)
            act = base_rows & ~good[:, None]
        act = act & active[:, None]
        calls = act.astype(float)
        for lo, hi in blocks:
            total[lo:hi] -= calls[lo:hi] @ pool.penalty
        commit = active & ~act.any(axis=1) & (q > 0)
        u, w = luck[scen, t], fare_luck[scen, t]
        planners = np.where(act & pool.is_planner, strength, -1.0)
        lead, planned = planners.argmax(axis=1), planners.max(axis=1) >= 0
        s = strength[lead]
        ul = u[np.arange(len(u)), lead]
        rest = (ul - s) / np.maximum(1.0 - s, 1e-12)
        proposal = np.where(ul < s, OPT, np.where(rest < DETOUR_SHARE, DET, BRK))
        r, q = np.where(planned, proposal, r), np.where(planned, 0.0, q)
        search = act & pool.is_search
        searched = search.any(axis=1) & (r != 0)
        notice = searched & (r == BRK) & (search & (u < SEARCH_NOTICE * strength)).any(axis=1)
        markup = np.where(search, 1.0 + SEARCH_MARKUP * (1.0 - strength) * w,
                          np.inf).min(axis=1)
        fresh = prices[r, scen] * (1.0 + FARE_INFLATION * t) * markup
        better = searched & ~notice & ((q == 0) | (fresh < q))
        q = np.where(notice, 0.0, np.where(better, fresh, q))
        r = np.where(notice, 0, r)
        validate = act & pool.is_validator
        checked = validate.any(axis=1) & (r != 0)
        feasible = (r != BRK) & (hops[r, scen] <= hop_limit) & (q <= budget)
        caught = checked & ~feasible & (validate & (u < strength)).any(axis=1)
        r, q = np.where(caught, 0, r), np.where(caught, 0.0, q)
        ends = commit | (active & (t + 1 >= MAX_TURNS))
        success, quality = _quality(r, hops[r, scen], q, budget, hop_limit, shortest)
        total += np.where(ends, alpha * success + beta * quality, 0.0)
        active &= ~ends
    return np.concatenate([total[lo:hi].reshape(n_first, n_bases, -1) for lo, hi in blocks],
                          axis=2)


def test_the_agent_major_rollouts_equal_the_row_major_ones_bit_for_bit(monkeypatch):
    """:func:`simulate_stacks` (agents along the first axis) returns what the row-major loop did.

    On the states of real v1 episodes, of the Bayes reference (several stacks) and of the
    planner (one model): every value equal, so no label of either teacher moves.
    """
    from agents.planning import flight, flight_bayes

    real, calls = flight.simulate_stacks, []

    def checked(*args):
        values = real(*args)
        np.testing.assert_array_equal(values, _rowwise_simulate_stacks(*args))
        calls.append(len(args[0]))
        return values

    monkeypatch.setattr(flight_bayes, "simulate_stacks", checked)
    monkeypatch.setattr(flight, "simulate_stacks", checked)
    env, tasks = _tasks(8, seed=3, env_id=V1)
    for agent in (BayesFlightPlanner(env, n_particles=PARTICLES), planner(env)):
        for task in tasks:
            _actions(agent, env, task)
    assert max(calls) > 1 and calls.count(1) > len(tasks)


class _Uniforms:
    """A stand-in generator whose ``random`` returns given uniforms."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def random(self, size: int) -> np.ndarray:
        assert size == len(self.values)
        return self.values


def test_the_scenario_draw_is_generator_choices_bit_for_bit(monkeypatch):
    """``_choice`` (running sum over the nonzero weights) draws what ``rng.choice`` draws.

    On the posteriors of real v1 episodes (most weights 0): the same picks, and the
    generator left in the same state (the luck drawn after it is unchanged).
    """
    import copy

    from agents.planning import flight_bayes

    real, zeros = flight_bayes._choice, []

    def checked(rng, flat, size):
        twin = copy.deepcopy(rng)
        picks = real(rng, flat, size)
        np.testing.assert_array_equal(picks, twin.choice(flat.size, size=size,
                                                         p=flat / flat.sum()))
        assert rng.bit_generator.state == twin.bit_generator.state
        # uniforms on the running sum's own values and next to them: any rounding apart
        # from choice's (another sum, order or side) moves a pick
        full = np.cumsum(flat / flat.sum())
        full /= full[-1]
        edges = full[np.flatnonzero(flat)[::97]]
        edges = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, 1)])
        edges = edges[edges < 1]
        np.testing.assert_array_equal(real(_Uniforms(edges), flat, len(edges)),
                                      full.searchsorted(edges, side="right"))
        zeros.append((flat == 0).mean())
        return picks

    monkeypatch.setattr(flight_bayes, "_choice", checked)
    env, tasks = _tasks(8, seed=3, env_id=V1)
    agent = BayesFlightPlanner(env, n_particles=PARTICLES)
    for task in tasks:
        _actions(agent, env, task)
    assert len(zeros) > len(tasks) and max(zeros) > 0.5


def _full_markup_laws(x, spread):
    """``_markup_laws`` as it was: survival and density at every entry of ``x`` (2-D)."""
    width = np.maximum(spread, 1e-12)[:, None, None]
    z = (x[None] - 1.0) / width
    inside = (z >= -1e-6 / width) & (z <= 1.0 + 1e-6 / width)
    each = np.clip(1.0 - z, 0.0, 1.0)
    survival = np.prod(each, axis=0)
    density = np.zeros_like(x)
    for i in range(len(spread)):
        others = np.prod(np.delete(each, i, axis=0), axis=0)
        density += np.where(inside[i], others / width[i], 0.0)
    return survival, density


def _full_update(belief, env, turn, called, seen):
    """``Belief.update`` as it was (every law at every entry): the oracle, non-strict."""
    model, w = belief.model, belief.weights
    roles, strength = env.pool.roles, env._strength
    planners = [i for i in called if roles[i] == "planner"]
    searchers = np.array([strength[i] for i in called if roles[i] == "search"])
    validators = np.array([strength[i] for i in called if roles[i] == "validator"])
    q0 = belief.quote
    if planners:
        s = max(strength[i] for i in planners)
        prior = np.array([0.0, s, DETOUR_SHARE * (1 - s), (1 - DETOUR_SHARE) * (1 - s)])
        w = prior[:, None] * w.sum(axis=0)[None]
        q0 = 0.0
    catch = 1.0 - np.prod(1.0 - validators)
    scale = np.maximum(model.prices * (1.0 + FARE_INFLATION * turn), 1e-12)
    spread = SEARCH_MARKUP * (1.0 - searchers)
    notice = np.zeros((4, 1))
    if len(searchers):
        notice[BRK] = 1.0 - np.prod(1.0 - SEARCH_NOTICE * searchers)
    over_limit = (model.hops > model.hop_limit)[:, None]
    likelihood, quote_law = np.ones_like(w), np.ones_like(w)
    if seen.dropped:
        if len(searchers) and not 0 < q0 <= model.budget:
            over_budget = _full_markup_laws(model.budget / scale, spread)[0]
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
        likelihood[0] = 0.0
    elif not seen.has_plan:
        likelihood[1:] = 0.0
    else:
        likelihood[0] = 0.0
        likelihood *= (model.hops == seen.hops)[:, None]
        if len(searchers):
            likelihood *= 1.0 - notice
            if seen.capped:
                quote_law = _full_markup_laws(2 * model.budget / scale, spread)[0]
            elif q0 == 0 or seen.ratio != belief.ratio:
                quote_law = _full_markup_laws(seen.quote / scale, spread)[1] / scale
            else:
                quote_law = _full_markup_laws(q0 / scale, spread)[0]
        if len(validators):
            bad = np.broadcast_to(over_limit | (seen.quote > model.budget), w.shape).copy()
            bad[BRK] = True
            likelihood *= np.where(bad, 1.0 - catch, 1.0)
    posterior = w * likelihood * quote_law
    counted = bool(posterior.sum() > 0)
    if not counted:
        posterior = w * likelihood
    if seen.dropped:
        posterior = np.vstack([posterior.sum(axis=0)[None], np.zeros((3, w.shape[1]))])
    total = float(posterior.sum())
    if not total > 0:
        return 0.0, counted, belief.weights
    return total, counted, posterior / total


def test_the_belief_update_equals_every_law_at_every_entry_bit_for_bit(monkeypatch):
    """``Belief.update`` (a moved quote's density only where the belief can be) is the full one.

    On real v1 episodes of the Bayes reference and the planner, every update's evidence
    and posterior (its values and its memory layout, which its later sums read) equal
    the update that evaluated every law at every entry.
    """
    from agents.planning.flight import Belief

    real, seen_kinds = Belief.update, set()

    def checked(self, env, turn, called, seen, strict=True):
        expected = _full_update(self, env, turn, list(called), seen)
        out = real(self, env, turn, called, seen, strict)
        assert out == expected[:2]
        np.testing.assert_array_equal(self.weights, expected[2])
        assert self.weights.flags.c_contiguous == expected[2].flags.c_contiguous
        seen_kinds.add((seen.dropped, seen.has_plan, seen.capped, len(called)))
        return out

    monkeypatch.setattr(Belief, "update", checked)
    env, tasks = _tasks(8, seed=3, env_id=V1)
    for agent in (BayesFlightPlanner(env, n_particles=PARTICLES), planner(env)):
        for task in tasks:
            _actions(agent, env, task)
    assert len(seen_kinds) >= 4


def _reference_given(prior, shortest_hops, level):
    """``FlightPrior.given`` as it was (every h*'s particles read afresh): the oracle."""
    from agents.planning import flight_bayes

    mine = prior.shortest_hops == shortest_hops
    if not mine.any():
        raise ValueError(f"FlightPrior: no particle of the prior has h*={shortest_hops}; "
                         "draw more particles")
    p_opt, scale = prior.prices[mine, 0], prior.fare_scale[mine]
    lo, hi = prior.slack
    if level < 1.0:
        slack = 2.0 * level * scale / p_opt - 1.0
        weight = np.where((slack >= lo) & (slack <= hi), 2.0 * scale / p_opt / (hi - lo), 0.0)
    else:  # saturated: B >= 2 F h*, so slack >= 2 F h* / P_opt - 1
        floor = np.maximum(2.0 * scale / p_opt - 1.0, lo)
        weight = np.clip((hi - floor) / (hi - lo), 0.0, 1.0)
        slack = (floor + hi) / 2.0
    miss = np.maximum(lo - slack, slack - hi)  # how far outside the slack's range
    slack = np.clip(slack, lo, hi)
    # the defensive share: in each legs pattern the particles nearest to the level
    hops = prior.hops[mine]
    patterns, pattern = np.unique(hops, axis=0, return_inverse=True)
    pattern = pattern.ravel()
    spare = np.zeros_like(weight)
    for k in range(len(patterns)):
        rows = np.flatnonzero(pattern == k)
        near = rows[np.argsort(miss[rows], kind="stable")[:flight_bayes.MIN_PARTICLES]]
        spare[near] = len(rows) / len(near)  # the pattern's prior share
    if weight.sum() > 0:
        weight = weight / weight.sum() + flight_bayes.DEFENSIVE * spare / spare.sum()
    else:  # no particle is consistent with the level: the nearest ones stand in
        weight = spare
    keep = weight > 0
    prices = prior.prices[mine][keep] / (p_opt[keep] * (1.0 + slack[keep]))[:, None]
    hops, weight = hops[keep], weight[keep]
    stacks = []
    for legs in np.unique(hops, axis=0):
        rows = np.flatnonzero((hops == legs).all(axis=1))
        opt, det, mass = prices[rows, 0], prices[rows, 1], weight[rows]
        if len(rows) < prior.dense:  # few particles: smooth their prices (see DENSE)
            copies = -(-prior.dense // len(rows))
            shift = 1.0 + np.linspace(-prior.bandwidth, prior.bandwidth, copies)
            shift = np.clip(np.outer(opt, shift), 1 / (1 + hi), 1 / (1 + lo)) / opt[:, None]
            opt, det = (opt[:, None] * shift).ravel(), (det[:, None] * shift).ravel()
            mass = np.repeat(mass / copies, copies)
        if prior.detours > 1:
            opt, det, mass = prior._unpaired(opt, det, mass)
        columns = np.stack([np.zeros_like(opt), opt, det, opt], axis=1)  # (n, 4)
        columns = np.repeat(columns, len(GRID), axis=0).T  # (4, n * len(GRID))
        columns[BRK] *= np.tile(GRID, len(opt))
        model = flight_bayes.FlightModel(np.array([0, legs[0], legs[1], legs[0]]), columns,
                                         1.0, shortest_hops + 1, shortest_hops)
        stacks.append((model, mass))
    return stacks


def test_the_posterior_at_reset_reads_each_h_stars_particles_once_and_is_unchanged():
    """``given`` (the particles of an h* read once, by :meth:`FlightPrior._of`) is the old one.

    On the first observations of real v1 tasks (several h*, in turn, on one prior),
    every stack's legs, prices and weights equal those of the reading afresh, bit for bit.
    """
    env, tasks = _tasks(40, seed=3, env_id=V1)
    prior = FlightPrior.draw(env.unwrapped, PARTICLES)
    hops = set()
    for task in tasks:
        obs, _ = env.reset(options={"task": task})
        level = float(obs[env.unwrapped.observation_layout["budget_level"].start])
        for saturated in (level, 1.0):
            mine = prior.given(task.shortest_hops, saturated)
            theirs = _reference_given(prior, task.shortest_hops, saturated)
            assert len(mine) == len(theirs)
            for (model, mass), (model_, mass_) in zip(mine, theirs, strict=True):
                np.testing.assert_array_equal(model.hops, model_.hops)
                np.testing.assert_array_equal(model.prices, model_.prices)
                np.testing.assert_array_equal(mass, mass_)
                assert (model.budget, model.hop_limit, model.shortest_hops) == (
                    model_.budget, model_.hop_limit, model_.shortest_hops)
        hops.add(task.shortest_hops)
    assert len(hops) >= 2
