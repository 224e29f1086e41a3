"""FlightPlanner's Bayes reference: a planner that knows the prior over tasks, not the task.

:class:`~agents.planning.flight.FlightPlanner` knows the current task's parameters (the
legs and prices of the optimal and detour routes, the budget, the hop limit, ``h*``) and
not its luck. :class:`BayesFlightPlanner` knows only what a policy could know: the env's
generative model, its pool, prices and reward weights, the *prior* over tasks, and the
observations of the episode so far. It keeps a posterior over the task's parameters and
the plan, and acts on it as the planner does.

**What the observation reveals.** Only ratios: the game is the same in any currency
(success is ``price <= B``, quality reads ``(B - price) / B``), so the planner works in
units of the budget ``B``. At reset: ``h*`` exactly (``hop_ratio = h* / (h* + 1)``) and
so the hop limit, and the budget level ``B / (2 F h*)``, with ``F`` the network's mean
fare. Later: the legs of every plan that stands at the end of a turn, its best quote
over ``B`` (a float32, saturating at twice the budget), whether it was dropped, and the
agents called. v1 adds counts of the checks the plan passed, which are functions of the
calls and of what v0's slots showed, and one thing v0 hides: which check dropped a plan
(a search notices only a missing leg, so a search drop says the plan was broken). Hidden:
the optimal route's price ``P_opt / B = 1 / (1 + slack)``, its legs (``h*`` or
``h* + 1``), the detour's legs and price, the broken route's price draw, and the luck.

**The posterior.** Particles are tasks drawn by the env's own sampler (``draw_block`` of a
twin env seeded ``PRIOR_TASK_SEED + seed``), of which those with the observed ``h*``
count. The budget is ``B = P_opt (1 + slack)`` with ``slack ~ U(0.03, 0.35)`` drawn apart
from the network, so given a particle's network the observed level fixes its slack:
``slack = 2 L F h* / P_opt - 1``. The particle's weight is the density of the level,
``1[slack in [0.03, 0.35]] / 0.32 * 2 F h* / P_opt`` (Rao-Blackwellised: the slack is
integrated exactly, not sampled). Each particle becomes a
:class:`~agents.planning.flight.FlightModel` in units of ``B``; particles with the same
legs (optimal, detour) are stacked as price columns of one model, so the planner's exact
:class:`~agents.planning.flight.Belief` runs over (plan's route, particle, broken price
multiplier) at once, and each stack is weighted by the evidence ``Belief.update``
returns (the probability of each turn's observation, times the density of a quote that
moved, in units of ``B`` for every stack). This is importance sampling from the prior:
exact as the particles grow, apart from the planner's grid over the broken price.

**How it acts.** As the planner does (:meth:`FlightPlanner.act`, reused): every sensible
joint action, each followed by every one-turn rule, scored on ``samples`` scenarios drawn
from the posterior (a stack, its particle, the plan's route, the broken multiplier) and
on shared draws of the luck to come; the scenarios of each stack are simulated with that
stack's model, all stacks in one call (:func:`~agents.planning.flight.simulate_stacks`,
reused). Unlike the planner it plays the best pair's first action only where that pair
beats the best rule's own action by 2 standard errors, paired on the scenarios
(:meth:`BayesFlightPlanner.choose`), else the rule's action.

**The approximation.** The scores are unbiased estimates of each (action, rule) pair's
expected return under the posterior; the rules read only the observation. Two things
are approximate. *The posterior*: the particles are finite, so it is made defensive.
Every (optimal, detour) legs pattern of the prior keeps a 1% share of its particles
nearest to the observed level, so that a rare pattern missing from the consistent
particles cannot rule out the truth; a pattern with few particles is smoothed (their
prices scaled by up to 3%, in copies); each optimal price is paired with 6 quantiles of
its stack's detour prices rather than its own detour's (treating the two as independent
given the legs and the level), so that a detour's quote, which pins the detour's price,
does not pin the optimal price by chance and make a later quote of the optimal route
read as a broken one (:meth:`FlightPrior.given`); a stack that cannot explain a quote
that another stack explains keeps ``1e-6`` of its weight rather than none
(:meth:`BayesFlightPlanner.update`); a plan whose legs no particle has (a student's
calls can show one) widens the posterior to stacks of those legs rather than end the
episode. If the observed level is saturated (``B >= 2 F h*``,
rare) the slack is only bounded below, and each particle takes the middle of its range.
*The choice*: the best of about a hundred noisy means is biased up (the winner's curse).
The planner, whose posterior is narrow, gains by taking it; with a posterior nearly as
wide as the prior (the level says little about ``P_opt / B``) the best-looking pair is
often a cheap gamble that loses, so the margin keeps the rule's action unless the
evidence for another is clear: one step of conservative policy improvement.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import numpy as np

from agents.planning.flight import (
    BRK,
    GRID,
    NONE,
    Belief,
    FlightModel,
    FlightPlanner,
    Seen,
    read_observation,
    simulate_stacks,
)
from agents.seeds import PRIOR_TASK_SEED
from cost_envs.envs.flight_networks import mean_fare
from cost_envs.envs.flight_planner import (
    MAX_TURNS,
    SEARCH_DROP,
    VALIDATOR_DROP,
    FlightPlannerEnv,
)
from cost_envs.envs.flight_planner_v1 import FlightPlannerV1Env

#: v0's slots, which v1 keeps in place: the scenario draws are seeded by these alone.
_V0_SLOTS = max(part.stop for part in FlightPlannerEnv.observation_layout.values())
#: The budget's slack ``U(0.03, 0.35)`` over the optimal price (``flight_networks``).
SLACK = (0.03, 0.35)
#: Particles of each (optimal, detour) legs pattern nearest to the observed budget level
#: that the posterior keeps with the weight :data:`DEFENSIVE` in all, whatever the level.
MIN_PARTICLES = 20
DEFENSIVE = 0.01
#: A stack of fewer particles is smoothed: each becomes copies (at least DENSE in all) with
#: prices scaled by up to +-BANDWIDTH (a kernel estimate), so that a quote of the optimal
#: route, which a strong search pins within a few percent, finds a particle near it.
DENSE = 100
BANDWIDTH = 0.03
#: Each particle's optimal price goes with this many quantiles of its stack's detour prices
#: (:meth:`FlightPrior._unpaired`).
DETOURS = 6
#: The weight kept by a stack that cannot explain a quote another stack explains.
STRANDED = 1e-6


@dataclass(frozen=True)
class FlightPrior:
    """Tasks of the prior, by their parameters alone (no luck).

    Attributes:
        shortest_hops: ``(N,)`` ``h*`` of each particle.
        hops: ``(N, 2)`` legs of its optimal and detour routes.
        prices: ``(N, 2)`` base price of its optimal and detour routes.
        fare_scale: ``(N,)`` its mean fare times ``h*`` (the budget level's divisor / 2).
        dense: Legs patterns with fewer particles are smoothed (:data:`DENSE`; 1: never).
        bandwidth: How far the smoothing scales their prices (:data:`BANDWIDTH`).
        detours: Quantiles of the detour's price each optimal price is paired with
            (:data:`DETOURS`; 1: each particle keeps its own).
        slack: The budget's slack range the level is weighed with (:data:`SLACK`, the
            env's; a learned prior's own: :mod:`agents.planning.learned_prior_flight`).
    """

    shortest_hops: np.ndarray
    hops: np.ndarray
    prices: np.ndarray
    fare_scale: np.ndarray
    dense: int = DENSE
    bandwidth: float = BANDWIDTH
    detours: int = DETOURS
    slack: tuple[float, float] = SLACK
    #: What :meth:`given` reads of the particles of one ``h*``, by ``h*`` (:meth:`_of`).
    _by_hops: dict[int, tuple[Any, ...]] = field(default_factory=dict, init=False,
                                                         repr=False, compare=False)

    @classmethod
    def draw(cls, env: FlightPlannerEnv, n: int, seed: int = 0) -> FlightPrior:
        """``n`` tasks from ``env``'s own sampler, on a twin seeded ``PRIOR_TASK_SEED + seed``.

        The twin shares ``env``'s pool, so the tasks are those ``env`` would draw from
        that seed (v0 and v1 draw alike); ``env``'s own task stream is untouched.
        """
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"FlightPrior: n must be an integer >= 1, got {n!r}")
        twin = FlightPlannerEnv(pool=env.pool)
        twin.reset(seed=PRIOR_TASK_SEED + seed)
        fares, _, _, h_star, _, route_hops, route_price, *_ = twin.draw_block(twin.np_random, n)
        return cls(h_star.astype(int), route_hops[:, :2].astype(int), route_price[:, :2],
                   mean_fare(fares) * h_star)

    def given(self, shortest_hops: int, level: float) -> list[tuple[FlightModel, np.ndarray]]:
        """The posterior at reset: one stacked model per (optimal, detour) legs, with weights.

        Args:
            shortest_hops: The observed ``h*``.
            level: The observed budget level ``min(B / (F h*), 2) / 2``.

        Returns:
            ``(model, weights)`` per stack: ``model.prices`` holds ``len(GRID)`` columns per
            particle (in units of ``B``), ``weights`` each particle's unnormalised weight,
            the density of ``level`` given its network (all positive).

        A finite prior can miss a legs pattern among the particles consistent with the
        level, and then a plan's legs would rule out the truth. So the posterior is a
        defensive mixture: the consistent particles (weight ``1 - DEFENSIVE`` up to
        normalisation) and, in every legs pattern of the prior's ``h*`` tasks, the
        :data:`MIN_PARTICLES` particles whose slack is nearest to its range, their slack
        clipped into it (their prices then disagree a little with the level), sharing
        :data:`DEFENSIVE` in proportion to the pattern's prior share; with no consistent
        particle, those alone. A pattern of fewer than ``dense`` particles is smoothed
        (each particle's prices scaled by up to ``bandwidth``, in copies).

        Raises:
            ValueError: If no particle of the prior has ``h*``.
        """
        mine_prices, scale, patterns, pattern, groups = self._of(shortest_hops)
        p_opt = mine_prices[:, 0]
        lo, hi = self.slack
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
        spare = np.zeros_like(weight)
        for rows in groups:
            near = rows[np.argsort(miss[rows], kind="stable")[:MIN_PARTICLES]]
            spare[near] = len(rows) / len(near)  # the pattern's prior share
        if weight.sum() > 0:
            weight = weight / weight.sum() + DEFENSIVE * spare / spare.sum()
        else:  # no particle is consistent with the level: the nearest ones stand in
            weight = spare
        keep = weight > 0
        prices = mine_prices[keep] / (p_opt[keep] * (1.0 + slack[keep]))[:, None]
        pattern, weight = pattern[keep], weight[keep]
        stacks = []
        for k in np.unique(pattern):  # the kept legs patterns, in np.unique's (sorted) order
            legs, rows = patterns[k], np.flatnonzero(pattern == k)
            opt, det, mass = prices[rows, 0], prices[rows, 1], weight[rows]
            if len(rows) < self.dense:  # few particles: smooth their prices (see DENSE)
                copies = -(-self.dense // len(rows))
                shift = 1.0 + np.linspace(-self.bandwidth, self.bandwidth, copies)
                shift = np.clip(np.outer(opt, shift), 1 / (1 + hi), 1 / (1 + lo)) / opt[:, None]
                opt, det = (opt[:, None] * shift).ravel(), (det[:, None] * shift).ravel()
                mass = np.repeat(mass / copies, copies)
            if self.detours > 1:
                opt, det, mass = self._unpaired(opt, det, mass)
            columns = np.stack([np.zeros_like(opt), opt, det, opt], axis=1)  # (n, 4)
            columns = np.repeat(columns, len(GRID), axis=0).T  # (4, n * len(GRID))
            columns[BRK] *= np.tile(GRID, len(opt))
            model = FlightModel(np.array([0, legs[0], legs[1], legs[0]]), columns, 1.0,
                                shortest_hops + 1, shortest_hops)
            stacks.append((model, mass))
        return stacks

    def _of(self, shortest_hops: int) -> tuple[Any, ...]:
        """The prices and fare scales of the particles with ``h*``, and their legs patterns.

        ``(prices, fare_scale, patterns, pattern, groups)``: ``patterns`` the distinct
        (optimal, detour) legs (``np.unique``'s sorted rows), ``pattern`` each particle's
        row in it, ``groups`` the particles of each. They depend on ``h*`` alone, so each
        ``h*`` is read once.

        Raises:
            ValueError: If no particle of the prior has ``h*``.
        """
        if shortest_hops not in self._by_hops:
            mine = self.shortest_hops == shortest_hops
            if not mine.any():
                raise ValueError(f"FlightPrior: no particle of the prior has h*={shortest_hops}; "
                                 "draw more particles")
            patterns, pattern = np.unique(self.hops[mine], axis=0, return_inverse=True)
            pattern = pattern.ravel()
            groups = [np.flatnonzero(pattern == k) for k in range(len(patterns))]
            self._by_hops[shortest_hops] = (self.prices[mine], self.fare_scale[mine], patterns,
                                            pattern, groups)
        return self._by_hops[shortest_hops]

    def _unpaired(self, opt: np.ndarray, det: np.ndarray, mass: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each optimal price with each of ``detours`` quantiles of the detour prices.

        A quote of the detour pins its price to a few percent; paired with it, the few
        particles left would pin the optimal price too, by chance, and a later quote of
        the optimal route that misses them would read as a broken route. Unpaired (the
        detour's price independent of the optimal's given the legs and the level, an
        approximation), every optimal price stays.
        """
        order = np.argsort(det)
        cumulative = np.cumsum(mass[order]) / mass.sum()
        levels = (np.arange(self.detours) + 0.5) / self.detours
        quantiles = det[order][np.minimum(np.searchsorted(cumulative, levels),
                                          len(det) - 1)]
        n = len(opt)
        return (np.repeat(opt, self.detours), np.tile(quantiles, n),
                np.repeat(mass / self.detours, self.detours))


class BayesFlightPlanner(FlightPlanner):
    """Not privileged: the planner's rollouts on a posterior over the task (module docstring).

    It reads the env's pool, prices, reward weights and observation layout, never its
    task or state; each episode's posterior starts afresh at turn 0 (read from the
    observation), so it follows an episode through :meth:`act` (or SB3's ``predict``)
    as the planner does: it must choose every action of the episode.

    On the 400 evaluation tasks of task seed 0 (default weights, 2000 particles, 32
    samples, margin 2; ``benchmarks/flight_bayes.py``) it succeeds on 0.965 with a mean
    return of 0.960 [0.935, 0.981], against the one-turn rule's 0.978 and 0.962 and the
    planner's 0.995 and 1.004. Paired over tasks it is not resolved from the rule
    (-0.001 [-0.025, 0.019]) and is below the planner (-0.043 [-0.069, -0.021]): it
    closes -0.03 [-0.81, 0.42] of the rule-to-planner gap. Without the margin (the
    planner's choice) it returns 0.937 [0.905, 0.963] (256 samples: 0.950), below the
    rule. The planner's edge is what the task tells it: knowing ``P_opt / B`` it reads a
    broken route from a quote about 4% off the optimal fare, which the level (whose
    posterior of ``P_opt / B`` is nearly the prior's, standard deviation 0.064 against
    0.067) cannot tell a policy; told the task's parameters (a prior of that one task,
    no margin) it plays as the planner does. On v1 it returns 0.961, and 0.960
    blind to v1's history slots (which then plays v1 as v0; paired difference -0.0001
    [-0.0004, 0]): the one thing those slots add to what it remembers, which check
    dropped a plan, changes nothing measurable. About 9 ms of CPU an episode on this
    2-core AMD EPYC (the planner 4 ms; 100 v1 episodes each, 2026-12-07: 34 and 21 before
    the rollouts and the belief update were vectorised, to the same values bit for bit).

    Args:
        env: A FlightPlanner env (v0 or v1, any pool), possibly wrapped.
        n_particles: Tasks drawn from the prior (:meth:`FlightPrior.draw`).
        samples: Scenarios per decision.
        seed: Seeds the prior's draw (``PRIOR_TASK_SEED + seed``) and the scenarios: a
            fixed seed, a fixed policy.
        history_slots: On v1, read which check dropped a plan (``dropped_by_search``,
            ``dropped_by_validator``); False plays v1 as v0 (the other slots v1 adds are
            functions of what the posterior already holds). Ignored on v0.
        prior: The prior's particles themselves instead of a draw.
        margin: Standard errors by which the best pair must beat the best one-turn rule's
            own action to be played (:meth:`choose`; 0: always, as the planner does).
    """

    name = "bayes-planner"
    privileged = False

    def __init__(self, env: gym.Env, n_particles: int = 2000, samples: int = 32, seed: int = 0,
                 history_slots: bool = True, prior: FlightPrior | None = None,
                 margin: float = 2.0) -> None:
        super().__init__(env, samples=samples, seed=seed)
        if not margin >= 0:
            raise ValueError(f"BayesFlightPlanner: margin must be >= 0, got {margin!r}")
        self.margin = float(margin)
        self.prior = FlightPrior.draw(self.env, n_particles, seed) if prior is None else prior
        self._layout = self.env.observation_layout
        self._causes = None
        if history_slots and isinstance(self.env, FlightPlannerV1Env):
            self._causes = (self._layout["dropped_by_search"].start,
                            self._layout["dropped_by_validator"].start)
        self.stacks: list[tuple[Belief, float]] = []
        self._prior_stacks: list[tuple[FlightModel, np.ndarray]] = []
        self._history: list[np.ndarray] = []
        self._turns: list[tuple[int, list[int], Seen]] = []
        #: Turns that no posterior explained, even widened (:meth:`update`), all episodes.
        self.unexplained = 0

    def follow(self, observation: np.ndarray) -> tuple[int, Seen]:
        """Bring the posterior up to the observed turn (a fresh one at turn 0)."""
        obs = np.asarray(observation, dtype=np.float32)
        turn = MAX_TURNS - round(float(obs[self._turns_left]) * MAX_TURNS)
        if turn == 0:
            self._start(obs)
        elif self._last is None or not self.stacks or self._last[0] != turn - 1:
            raise ValueError(f"BayesFlightPlanner: turn {turn} does not follow its last "
                             "action; it must choose every action of the episode")
        model = self.stacks[0][0].model
        turn, seen = read_observation(self.env, obs, model)
        if self._causes is not None and seen.dropped:
            by_search, by_validator = (float(obs[i]) > 0.5 for i in self._causes)
            seen.cause = SEARCH_DROP if by_search else VALIDATOR_DROP if by_validator else None
        if turn > 0:
            assert self._last is not None  # a turn after the first: checked above
            self.update(turn - 1, self._last[1], seen)
            self._last = None
        self._history.append(obs[:_V0_SLOTS])  # seeds the scenarios: v1 as v0 if blind
        return turn, seen

    def _start(self, obs: np.ndarray) -> None:
        ratio = float(obs[self._layout["hop_ratio"].start])
        shortest = round(ratio / (1.0 - ratio))  # h* / (h* + 1)
        level = float(obs[self._layout["budget_level"].start])
        self._prior_stacks = self.prior.given(shortest, level)
        self.stacks = _beliefs(self._prior_stacks)
        self._history, self._last, self._turns = [], None, []

    def update(self, turn: int, called: list[int], seen: Seen) -> None:
        """Condition every stack on turn ``turn``'s calls and what they showed, and reweigh.

        A stack's weight is multiplied by its evidence. A stack whose every hypothesis
        gives the quote probability 0 (``Belief.update`` then sets the quote aside) has an
        evidence without the quote's density: where another stack explains the quote, it
        keeps ``STRANDED`` of its weight instead (not 0: its few particles or the grid
        may be what missed the quote, and it must stay to explain later turns).

        A finite prior can lack the plan's legs altogether (2000 particles hold no
        detour of ``h* + 3`` legs, which a student's planner call can show): then no
        stack explains the turn, and the posterior is widened (:meth:`_widened`) rather
        than the episode abandoned. If even that explains nothing, the posterior stays
        as it was and :attr:`unexplained` counts the turn.
        """
        stacks = _conditioned(self.env, self.stacks, turn, called, seen)
        if not stacks:
            stacks = self._widened(turn, called, seen)
        if not stacks:
            self.unexplained += 1
            return
        self.stacks = stacks
        self._turns.append((turn, called, seen))

    def _widened(self, turn: int, called: list[int], seen: Seen) -> list[tuple[Belief, float]]:
        """The posterior of a prior whose particles also take the plan's legs, or none.

        Each stack of the reset posterior lends its particles (prices, weights) to a
        stack with the plan's observed legs as the detour's, and to one with them as the
        optimal route's (the broken route's too, which shares them); the episode's turns
        so far and this one are replayed on those stacks alone (the stacks of the
        original legs explain none of it). Prices keep the particles' (in units of the
        budget), an approximation: the quotes that follow reweigh them as any other.
        """
        if not seen.has_plan or seen.dropped:
            return []
        patterns = {(int(model.hops[1]), int(model.hops[2])) for model, _ in self._prior_stacks}
        widened: dict[tuple[int, int], tuple[FlightModel, np.ndarray]] = {}
        for model, weights in self._prior_stacks:
            optimal, detour = int(model.hops[1]), int(model.hops[2])
            for legs in ((optimal, seen.hops), (seen.hops, detour)):
                if legs in patterns:
                    continue
                if legs in widened:  # two parents of one pattern: their particles pooled
                    first, mass = widened[legs]
                    widened[legs] = (replace(first, prices=np.hstack([first.prices,
                                                                       model.prices])),
                                     np.concatenate([mass, weights]))
                else:
                    hops = np.array([0, legs[0], legs[1], legs[0]])
                    widened[legs] = (replace(model, hops=hops), weights)
        stacks = _beliefs(list(widened.values()))
        for step in [*self._turns, (turn, called, seen)]:
            stacks = _conditioned(self.env, stacks, *step)
        return stacks

    def action_values(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Candidate actions ``(A, m)`` and their scores ``(A, P, samples)`` from here."""
        turn, seen = self.follow(observation)
        seen_so_far = np.concatenate(self._history).view(np.uint32).tolist()
        rng = np.random.default_rng([self.seed, turn, *seen_so_far])
        sizes = np.cumsum([0] + [belief.weights.size for belief, _ in self.stacks])
        flat = np.empty(sizes[-1])
        for (belief, weight), lo, hi in zip(self.stacks, sizes[:-1], sizes[1:], strict=True):
            np.multiply(belief.weights.ravel(), weight, out=flat[lo:hi])
        picks = _choice(rng, flat, self.samples)
        shape = (self.samples, MAX_TURNS, self.n_agents)
        luck, fare_luck = rng.random(shape), rng.random(shape)
        candidates = self._candidates[seen.has_plan]
        weights = self.env.reward_weights
        drawn, order = [], []
        for (belief, _), lo, hi in zip(self.stacks, sizes[:-1], sizes[1:], strict=True):
            mine = np.flatnonzero((picks >= lo) & (picks < hi))
            if not mine.size:
                continue
            route, column = np.divmod(picks[mine] - lo, belief.weights.shape[1])
            drawn.append((belief.model, route, column, belief.quote))
            order.append(mine)
        # every stack's scenarios in one call (one pass of numpy's overheads, not one a stack)
        mine = np.concatenate(order)
        values = simulate_stacks(drawn, self._pool, (weights.alpha, weights.beta), turn,
                                 candidates, self.bases, luck[mine], fare_luck[mine])
        return candidates.astype(np.int8), values

    def choose(self, observation: np.ndarray, candidates: np.ndarray, values: np.ndarray
               ) -> int:
        """The best pair's action where it beats the rules' own by ``margin`` standard errors.

        The incumbent is the action of the best one-turn rule here (commit once a quote
        within the budget and the hop limit stands, else its planner and searcher). The
        best pair's score is the maximum of many noisy means, so it is biased up (the
        winner's curse); with a posterior as wide as the prior's this picks cheap gambles
        that lose. So the best pair's action is played only where its paired advantage
        over the incumbent's pair, on the same scenarios, exceeds ``margin`` standard
        errors; ``margin=0`` is the planner's rule.
        """
        means = values.mean(axis=2)
        best = int(np.argmax(means.max(axis=1)))
        if self.margin <= 0:
            return best
        layout = self._layout
        good = all(float(observation[layout[name].start]) > 0.5
                   for name in ("has_plan", "within_hop_limit", "within_budget"))
        rows = [np.zeros(self.n_agents, dtype=bool) if good else base for base in self.bases]
        index = [int(np.flatnonzero((candidates.astype(bool) == row).all(axis=1))[0])
                 for row in rows]
        rule = int(np.argmax([means[i, p] for p, i in enumerate(index)]))
        mine = values[best, int(np.argmax(means[best]))] - values[index[rule], rule]
        error = mine.std(ddof=1) / np.sqrt(len(mine)) if len(mine) > 1 else np.inf
        return best if mine.mean() > self.margin * error else index[rule]

    def posterior(self) -> dict[str, Any]:
        """Summary of the current posterior: ``P(plan broken)`` and ``E[P_opt / B]``."""
        broken = sum(weight * belief.broken() for belief, weight in self.stacks)
        p_opt = sum(weight * float(belief.weights.sum(axis=0) @ belief.model.prices[1])
                    for belief, weight in self.stacks)
        return {"broken": float(broken), "optimal_price": p_opt}


def _choice(rng: np.random.Generator, flat: np.ndarray, size: int) -> np.ndarray:
    """``rng.choice(len(flat), size, p=flat / flat.sum())``, bit for bit, on the nonzero entries.

    ``Generator.choice`` checks ``p`` (a compensated sum), takes its running sum, divides
    it by its last value and searches it for ``size`` uniforms (``rng.random(size)``).
    Most of a posterior's weights are 0 (routes ruled out, prices a quote missed), and
    adding 0 leaves a running sum as it was, so the running sum of the nonzero entries
    alone holds every value the full one takes, in order; a uniform's first index past
    it is a nonzero entry's. So the draws, and ``rng``'s state after, are ``choice``'s
    (``tests/test_planning_flight_bayes.py`` checks it on real states).
    """
    nonzero = np.flatnonzero(flat != 0)  # (on the mask: several times faster)
    cdf = np.cumsum(flat[nonzero] / flat.sum())
    cdf /= cdf[-1]
    return nonzero[cdf.searchsorted(rng.random(size), side="right")]


def _beliefs(stacks: list[tuple[FlightModel, np.ndarray]]) -> list[tuple[Belief, float]]:
    """Fresh beliefs (no plan yet) of weighted stacks, the stacks' weights normalised."""
    total = sum(float(weights.sum()) for _, weights in stacks)
    beliefs = []
    for model, weights in stacks:
        belief = Belief(model)
        belief.weights[NONE] = np.repeat(weights / weights.sum(), len(GRID)) / len(GRID)
        beliefs.append((belief, float(weights.sum()) / total))
    return beliefs


def _conditioned(env: FlightPlannerEnv, stacks: list[tuple[Belief, float]], turn: int,
                 called: list[int], seen: Seen) -> list[tuple[Belief, float]]:
    """The stacks that explain the turn, reweighed by their evidence (none if none does)."""
    results = [belief.update(env, turn, called, seen, strict=False) for belief, _ in stacks]
    counted = any(ok and evidence > 0 for evidence, ok in results)
    kept = []
    for (belief, weight), (evidence, ok) in zip(stacks, results, strict=True):
        if evidence > 0:
            stranded = counted and not ok
            kept.append((belief, weight * (STRANDED if stranded else evidence)))
    total = sum(weight for _, weight in kept)
    return [(belief, weight / total) for belief, weight in kept]
