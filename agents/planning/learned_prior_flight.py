"""A learned prior for FlightPlanner's Bayes reference: the family's form, parameters fitted.

:class:`~agents.planning.flight_bayes.BayesFlightPlanner` draws its particles from the
env's own network generator (:mod:`cost_envs.envs.flight_networks`) and knows the pool.
A user whose pool fits the family knows the *form* (the env's code) but not the numbers.
This module estimates them from logged episodes of FlightPlanner-v1, using only what an
episode shows (the observations, ``terminated`` and the ``info`` contract's ``cost``,
``flops`` and ``calls``; never the task), and builds the Bayes reference on them (issue
#38 point 2), as :mod:`agents.planning.learned_prior` does for ToolBench (whose log,
random logger and least-squares price fit this module shares).

**What the particles depend on.** A particle is a task's ``h*``, its optimal and detour
routes' legs and prices and its mean fare times ``h*``
(:class:`~agents.planning.flight_bayes.FlightPrior`); the posterior reads them in units
of the budget ``B = P_opt (1 + slack)``. They come from the generator's parameters: the
airports (9, positions uniform in the unit square), each directed leg's probability
(:data:`~cost_envs.envs.flight_networks.EDGE_PROBABILITY`), the fare law ``60 + 300 x
distance x U(lo, hi)`` (:data:`~cost_envs.envs.flight_networks.FARE_FACTOR`), the trip
(uniform among the pairs 2 or 3 legs apart), the slack ``U(lo, hi)``
(:data:`~cost_envs.envs.flight_networks.SLACK`, which the posterior also weighs with) and
the broken route's price multiplier ``U(0.9, 1.1)`` (the belief's grid). The belief and
the rollouts also read the pool (each agent's strength, price, FLOPs) and the dynamics'
constants (the detour share, the search's notice rate, markup and fare inflation).

**The log** (:class:`FlightLog`): :func:`~agents.planning.learned_prior.log_random` on
FlightPlanner-v1's batched env (the uniform random allocator: each agent called with
probability 1/2).

**What is fitted** (:func:`fit`):

* *the pool's strengths*, read exactly from the observation: a step that calls one
  planner and keeps a plan shows its strength (``planner_strength``); a step that keeps
  a plan through checks multiplies v1's ``broken_survival`` by ``1 - 0.5 s`` per
  searcher and ``1 - s`` per validator called, so least squares on the log of the
  ratio over the calls gives every searcher's and validator's ``s``;
* *prices and FLOPs*: least squares on ``calls`` (:func:`~agents.planning.learned_prior.
  fit_prices`), exact to rounding;
* *the generator's edge probability, fare factor range and slack range*: a simulated
  moment fit (indirect inference): the likelihood of what an episode shows is an integral
  over random networks with no closed form, so the parameters are those whose simulated
  statistics match the log's (:func:`statistics`): the share of ``h* = 2``; quantiles of
  the budget level per ``h*`` (the level is ``B / (2 F h*)``, a function of the fare law
  and the slack); and, at each episode's first turn (where the random allocator's action
  is independent of the task, so nothing selects the tasks), of the steps that call a
  planner and no validator: the plan's legs over ``h*``, whether a search dropped it,
  quantiles of its quote over the budget for plans of ``h*`` and ``h* + 1`` legs (the
  optimal quote is ``markup / (1 + slack)``, so these show the slack), and the mean
  quote in the lower and upper half of the levels. The simulation draws tasks of the
  family's form at the candidate parameters on common random numbers
  (:func:`draw_tasks`, ``n_sim`` of them) and plays the log's own first-turn actions on
  them with the env's outcome rules (:func:`first_turn`); each statistic's difference is
  divided by its per-observation scale (an indicator's standard deviation, a
  variable's interquartile range on the log), and the sum of squares is minimised by
  Nelder-Mead from a generic start (the edge probability first set alone,
  the best of a grid, the others at the start: the share of ``h* = 2`` alone has two
  roots).

**Not fitted: taken as the family's form.** The number of airports (9) and their
uniform positions (the edge probability and the fare law absorb what the observation
shows of the network's size and shape); the fare law's intercept and slope (60, 300: the
observation shows only ratios to the budget, so fares are known up to scale, and with
these two fixed the factor's range spans every fare law of the form up to scale); the
trip's law; the broken route's price multiplier ``U(0.9, 1.1)`` (a quote shows it only
on a plan that is later found broken, and the belief's grid is built on it); the
dynamics' constants (the detour share 0.6, the notice rate 0.5, the markup 0.5, the fare
inflation 0.02, 7 turns). Not fitted because they are the user's: the Eq. 1 weights, the
agents' names and roles.

**The teacher** (:meth:`FittedFlight.teacher`): a
:class:`~agents.planning.flight_bayes.BayesFlightPlanner` on a twin FlightPlanner-v1
with the fitted pool (strengths, prices, FLOPs; ``env``'s reward weights), whose
particles are drawn by :func:`draw_tasks` at the fitted parameters on the true-prior
reference's own seed (``PRIOR_TASK_SEED + seed``; at the true parameters they are the
reference's particles bit for bit) and whose posterior weighs the level with the fitted
slack range. It reads the real env's observations only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agents.planning.flight_bayes import BayesFlightPlanner, FlightPrior
from agents.planning.learned_prior import EpisodeLog, fit_prices, log_random
from agents.seeds import PRIOR_TASK_SEED
from cost_envs.envs.flight_networks import (
    BROKEN_PRICE,
    EDGE_PROBABILITY,
    FARE_FACTOR,
    N_AIRPORTS,
    SLACK,
    RawNetworks,
    _layout,  # the generator's draw order: the form, shared so the draws stay the env's
    _trips,
    derive_networks,
    mean_fare,
    reach_masks,
    trip_masks,
)
from cost_envs.envs.flight_planner import (
    MAX_TURNS,
    ROLES,
    SEARCH_NOTICE,
    SKILLS,
    FlightPlannerEnv,
    markups,
    notices,
    proposals,
)
from cost_envs.envs.flight_planner_v1 import FlightPlannerV1Env
from cost_envs.pool import AgentPool, AgentSpec

ENV_ID = "cost_envs/FlightPlanner-v1"
_LAYOUT = FlightPlannerV1Env.observation_layout
_DIAGONAL = np.arange(N_AIRPORTS)
#: Quantiles the moment fit matches.
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: Tasks each simulation of the moment fit draws (common random numbers across candidates).
N_SIM = 20_000
#: Seeds the moment fit's simulations (apart from every task stream the tables use).
SIM_SEED = 90_000
#: The generic start of the moment fit: fare factor and slack ranges.
START = {"fare_factor": (0.5, 1.5), "slack": (0.1, 0.3)}
#: The edge probabilities the moment fit starts from (the best of them).
EDGE_GRID = np.linspace(0.05, 0.6, 12)


@dataclass(frozen=True)
class FlightLog(EpisodeLog):
    """Logged steps of FlightPlanner-v1 episodes (observations of 25 slots).

    :class:`~agents.planning.learned_prior.EpisodeLog`'s fields.
    """

    width: ClassVar[int] = 25


def log_flight(steps: int, seed: int, n_envs: int = 64,
               env_kwargs: dict[str, Any] | None = None) -> FlightLog:
    """``steps`` steps of the uniform random allocator on FlightPlanner-v1's batched env."""
    log = log_random(env_kwargs, steps, seed, n_envs=n_envs, env_id=ENV_ID, log_type=FlightLog)
    assert isinstance(log, FlightLog)
    return log


@dataclass(frozen=True)
class FlightLaw:
    """The generator's fitted parameters (the rest is the family's form: module docstring).

    Attributes:
        edge_probability: Each directed leg's probability.
        fare_factor: ``(lo, hi)``: a leg's fare is ``60 + 300 x distance x U(lo, hi)``.
        slack: ``(lo, hi)``: the budget is ``P_opt (1 + U(lo, hi))``.
    """

    edge_probability: float = EDGE_PROBABILITY
    fare_factor: tuple[float, float] = FARE_FACTOR
    slack: tuple[float, float] = SLACK

    def __post_init__(self) -> None:
        if not 0.0 < self.edge_probability < 1.0:
            raise ValueError(f"FlightLaw: edge_probability must be in (0, 1), got "
                             f"{self.edge_probability!r}")
        for name in ("fare_factor", "slack"):
            lo, hi = getattr(self, name)
            if not 0.0 <= lo < hi:
                raise ValueError(f"FlightLaw: {name} must be (lo, hi) with 0 <= lo < hi, "
                                 f"got {(lo, hi)!r}")


def draw_tasks(law: FlightLaw, rng: np.random.Generator, n: int, n_agents: int,
               with_fares: bool = True) -> tuple[Any, ...]:
    """``n`` tasks of the family's form at ``law``: ``derive_networks``' arrays.

    The env's draw (``flight_networks.draw_block``: the same uniforms in the same order,
    rounds of rejection for networks without a 2- or 3-leg trip, the same derivation),
    with ``law``'s edge probability, fare factor and slack: at the env's own parameters it
    returns the env's tasks from the same generator, bit for bit.
    """
    size, turns = N_AIRPORTS, MAX_TURNS
    parts: dict[str, list[np.ndarray]] = {}
    need = n
    while need:
        layout = _layout(need, turns, n_agents)
        uniforms = rng.random(layout["end"])

        def part(name: str, *shape: int, k: int = need, u: np.ndarray = uniforms,
                 at: dict[str, Any] = layout) -> np.ndarray:
            start, stop = at[name]
            return u[start:stop].reshape(k, *shape)

        legs = part("legs", size, size) < law.edge_probability
        legs[:, _DIAGONAL, _DIAGONAL] = False
        keep = (trip_masks(reach_masks(np.ascontiguousarray(legs.transpose(1, 2, 0)))) != 0
                ).any(axis=0)
        (f_lo, f_hi), (s_lo, s_hi), (b_lo, b_hi) = law.fare_factor, law.slack, BROKEN_PRICE
        draws = {"xy": part("xy", size, 2), "legs": legs,
                 "fare_factor": part("fare_factor", size, size) * (f_hi - f_lo) + f_lo,
                 "pick": part("pick", size * size),
                 "slack": part("slack") * (s_hi - s_lo) + s_lo,
                 "broken_price": part("broken_price") * (b_hi - b_lo) + b_lo,
                 "luck": part("luck", turns, n_agents),
                 "fare_luck": part("fare_luck", turns, n_agents)}
        for name, values in draws.items():
            parts.setdefault(name, []).append(values[keep])
        need -= int(keep.sum())
    kept = {name: np.concatenate(values) for name, values in parts.items()}

    def airport_major(name: str) -> np.ndarray:
        values = kept[name]
        return np.ascontiguousarray(values.transpose(*range(1, values.ndim), 0))

    legs = airport_major("legs")
    hops = reach_masks(legs)
    raw = RawNetworks(airport_major("xy"), legs, airport_major("fare_factor"),
                      _trips(kept["pick"], trip_masks(hops)), kept["slack"],
                      kept["broken_price"], kept["luck"], kept["fare_luck"], hops)
    return derive_networks(raw, with_fares=with_fares)


def prior_of(law: FlightLaw, n: int, pool: AgentPool, seed: int = 0) -> FlightPrior:
    """``n`` particles of ``law`` on the true-prior reference's seed ``PRIOR_TASK_SEED + seed``.

    Drawn from the generator :meth:`FlightPrior.draw` draws from (a twin env of ``pool``
    reset with that seed; only its generator is used, at the state its reset leaves), so
    at the env's parameters these are the reference's particles bit for bit (the control).
    """
    twin = FlightPlannerEnv(pool=pool)
    twin.reset(seed=PRIOR_TASK_SEED + seed)
    fares, _, _, h_star, _, route_hops, route_price, *_ = draw_tasks(
        law, twin.np_random, n, twin.n_agents)
    return FlightPrior(h_star.astype(int), route_hops[:, :2].astype(int), route_price[:, :2],
                       mean_fare(fares) * h_star, slack=law.slack)


@dataclass(frozen=True, eq=False)
class FittedFlight:
    """FlightPlanner's parameters: fitted (:func:`fit`) or the env's own (:func:`true_parameters`).

    Compared by identity (it holds arrays); compare the attributes.

    Attributes:
        law: The generator's parameters.
        strengths: ``(m,)`` each agent's strength (its capability in its role's skill).
        costs: ``(m,)`` price per call.
        flops: ``(m,)`` FLOPs per call.
        names: The agents' names (the user's).
        roles: The agents' roles (the user's).
        episodes: Logged episodes the fit read (0: the true parameters).
        steps: Logged steps.
        first_turns: First-turn steps the moment fit matched (a planner, no validator).
        distance: The moment fit's final objective.
    """

    law: FlightLaw
    strengths: np.ndarray
    costs: np.ndarray
    flops: np.ndarray
    names: tuple[str, ...]
    roles: tuple[str, ...]
    episodes: int = 0
    steps: int = 0
    first_turns: int = 0
    distance: float = 0.0

    def pool(self) -> AgentPool:
        """The fitted pool: the agents' names and roles, the fitted numbers."""
        agents = []
        for name, role, cost, flops, strength in zip(self.names, self.roles, self.costs,
                                                     self.flops, self.strengths, strict=True):
            caps = [0.0] * len(SKILLS)
            caps[ROLES.index(role)] = float(strength)
            agents.append(AgentSpec(name, role, float(cost), float(flops), tuple(caps)))
        return AgentPool(tuple(agents), SKILLS)

    def env(self, like: gym.Env) -> FlightPlannerV1Env:
        """A FlightPlanner-v1 with the fitted pool and ``like``'s reward weights."""
        base = like.unwrapped
        assert isinstance(base, FlightPlannerV1Env)
        return FlightPlannerV1Env(pool=self.pool(), reward_weights=base.reward_weights)

    def prior(self, n: int, seed: int = 0) -> FlightPrior:
        """The teacher's particles (:func:`prior_of` at the fitted law)."""
        return prior_of(self.law, n, self.pool(), seed)

    def teacher(self, env: gym.Env, n_particles: int = 2000, seed: int = 0,
                **kwargs: Any) -> BayesFlightPlanner:
        """The Bayes reference of the fitted parameters, to label ``env``'s observations.

        Built on :meth:`env` (the fitted pool, ``env``'s weights) with ``n_particles``
        particles of :meth:`prior`; ``seed`` seeds both as the true-prior reference's
        ``seed`` does; ``kwargs`` go to :class:`BayesFlightPlanner` (``samples``,
        ``margin``).
        """
        return BayesFlightPlanner(self.env(env), seed=seed,
                                  prior=self.prior(n_particles, seed), **kwargs)


def true_parameters(env: gym.Env) -> FittedFlight:
    """The parameters ``env`` draws its tasks with (the generator's constants, its pool)."""
    base = env.unwrapped
    assert isinstance(base, FlightPlannerV1Env)
    pool = base.pool
    return FittedFlight(FlightLaw(), np.array(base._strength, dtype=np.float64),
                        np.array(pool.costs), np.array(pool.flops),
                        tuple(a.name for a in pool.agents), tuple(pool.roles))


# ------------------------------------------------------------------ reading the log
def _slot(obs: np.ndarray, name: str) -> np.ndarray:
    return obs[:, _LAYOUT[name].start].astype(np.float64)


def shortest_hops(obs: np.ndarray) -> np.ndarray:
    """``h*`` from ``hop_ratio = h* / (h* + 1)``."""
    ratio = _slot(obs, "hop_ratio")
    return np.rint(ratio / np.maximum(1.0 - ratio, 1e-9)).astype(np.int64)


def turns(obs: np.ndarray) -> np.ndarray:
    """The turn of each observation, from ``turns_left``."""
    return (MAX_TURNS - np.rint(_slot(obs, "turns_left") * MAX_TURNS)).astype(np.int64)


def _next_in_episode(log: EpisodeLog) -> np.ndarray:
    """Whether each step's next row is the same episode's next observation."""
    same = np.zeros(log.steps, dtype=bool)
    same[:-1] = log.episode[1:] == log.episode[:-1]
    return same


def fit_strengths(log: EpisodeLog, roles: tuple[str, ...]) -> np.ndarray:
    """Each agent's strength, read from the observations (module docstring).

    Raises:
        ValueError: If the log never shows some agent's strength.
    """
    roles_array = np.array(roles)
    planner, search, validator = (roles_array == role for role in ROLES)
    calls = log.calls.astype(bool)
    nxt = _next_in_episode(log)
    after = np.zeros_like(log.obs)
    after[:-1] = log.obs[1:]
    kept = nxt & (_slot(after, "has_plan") > 0.5)
    strengths = np.full(len(roles), np.nan)
    alone = kept & (calls[:, planner].sum(axis=1) == 1)
    shown = _slot(after, "planner_strength")
    for i in np.flatnonzero(planner):
        rows = alone & calls[:, i]
        if rows.any():
            strengths[i] = float(np.median(shown[rows]))
    # checks a standing plan survived: log(survival after / before) = sum of log factors
    checks = search | validator
    rows = (kept & (_slot(log.obs, "has_plan") > 0.5) & ~calls[:, planner].any(axis=1)
            & calls[:, checks].any(axis=1))
    before, now = _slot(log.obs, "broken_survival"), _slot(after, "broken_survival")
    rows &= (before > 0) & (now > 0)
    if rows.any():
        x = calls[rows][:, checks].astype(np.float64)
        y = np.log(now[rows]) - np.log(before[rows])
        seen = x.any(axis=0)
        factors, *_ = np.linalg.lstsq(x[:, seen], y, rcond=None)
        index = np.flatnonzero(checks)[seen]
        one_minus = np.clip(np.exp(factors), 0.0, 1.0)
        strengths[index] = np.where(search[index], (1.0 - one_minus) / SEARCH_NOTICE,
                                    1.0 - one_minus)
    if np.isnan(strengths).any():
        missing = [roles[i] + f" #{i}" for i in np.flatnonzero(np.isnan(strengths))]
        raise ValueError(f"fit_strengths: the log never shows the strength of {missing}")
    return np.clip(strengths, 0.0, 1.0)


@dataclass(frozen=True)
class Shown:
    """What the moment fit reads: each episode's start and its first turn's outcome.

    ``h_star``, ``level`` ``(E,)``: every episode's. The rest, ``(Q,)``: the first-turn
    steps that call a planner and no validator: ``calls`` ``(Q, m)``, ``h`` (their
    ``h*``), ``at`` (their level), ``searched`` (a searcher called), ``dropped``, ``legs``
    (the plan's legs minus ``h*``; -1 if dropped), ``ratio`` (the quote over the budget,
    ``min(q / B, 2) / 2``; 0 if none).
    """

    h_star: np.ndarray
    level: np.ndarray
    calls: np.ndarray
    h: np.ndarray
    at: np.ndarray
    searched: np.ndarray
    dropped: np.ndarray
    legs: np.ndarray
    ratio: np.ndarray


def shown(log: EpisodeLog, roles: tuple[str, ...]) -> Shown:
    """The log's :class:`Shown`: first observations, and the qualifying first turns."""
    first = np.ones(log.steps, dtype=bool)
    first[1:] = log.episode[1:] != log.episode[:-1]
    first &= turns(log.obs) == 0
    h_star, level = shortest_hops(log.obs), _slot(log.obs, "budget_level")
    roles_array = np.array(roles)
    calls = log.calls.astype(bool)
    rows = (first & _next_in_episode(log) & calls[:, roles_array == "planner"].any(axis=1)
            & ~calls[:, roles_array == "validator"].any(axis=1))
    index = np.flatnonzero(rows)
    after = log.obs[index + 1]
    dropped = _slot(after, "dropped_last_turn") > 0.5
    h = h_star[index]
    legs = np.where(dropped, -1, np.rint(_slot(after, "plan_hops") * (h + 3)) - h)
    ratio = np.where(_slot(after, "has_quote") > 0.5, _slot(after, "quote_ratio"), 0.0)
    searched = np.asarray(calls[index][:, roles_array == "search"].any(axis=1))
    return Shown(h_star[first], level[first], calls[index], h, level[index], searched,
                 np.asarray(dropped),
                 legs.astype(np.int64), ratio)


def first_turn(tasks: tuple[Any, ...], calls: np.ndarray, strengths: np.ndarray,
               roles: tuple[str, ...]) -> Shown:
    """What the first turn of ``calls[k]`` shows on task ``k``: the env's rules, vectorised.

    ``tasks``: :func:`draw_tasks`' arrays (as many tasks as rows of ``calls``; each call
    set has a planner and no validator). The strongest called planner proposes
    (``proposals`` on its luck), a called searcher that notices a broken route drops it
    (``notices``), else the plan is quoted at its price times the called searchers' best
    markup at turn 0 (``markups``): ``FlightPlannerEnv._advance`` at turn 0.
    """
    _, _, _, h_star, budget, route_hops, route_price, luck, fare_luck, level = tasks
    n = len(calls)
    roles_array = np.array(roles)
    planner, search = roles_array == "planner", roles_array == "search"
    rows = np.arange(n)
    # the strongest called planner (the first of equal strengths, as max() picks)
    order = np.where(calls & planner, strengths, -1.0)
    lead = np.argmax(order, axis=1)
    route = proposals(luck[rows, 0, lead], strengths[lead])
    searchers = calls & search
    noticed = (notices(luck[:, 0, :], strengths) & searchers).any(axis=1)
    dropped = (route == 2) & noticed
    markup = np.where(searchers, markups(fare_luck[:, 0, :], np.zeros(1), strengths), np.inf)
    best = route_price[rows, route] * markup.min(axis=1)
    searched = searchers.any(axis=1)
    ratio = np.where(searched & ~dropped, np.minimum(best / budget, 2.0) / 2.0, 0.0)
    legs = np.where(dropped, -1, route_hops[rows, route] - h_star)
    return Shown(h_star, level, calls, h_star, level, searched, dropped, legs.astype(np.int64),
                 ratio.astype(np.float32).astype(np.float64))


def statistics(seen: Shown) -> tuple[np.ndarray, np.ndarray]:
    """The moment fit's statistics of ``seen`` and each one's per-observation scale."""
    values: list[float] = []
    scales: list[float] = []

    def share(mask: np.ndarray) -> None:
        p = float(mask.mean()) if len(mask) else 0.0
        values.append(p)
        scales.append(max(np.sqrt(p * (1 - p)), 0.05))

    def quantiles(x: np.ndarray) -> None:
        if len(x) < 2:
            values.extend([0.0] * len(QUANTILES))
            scales.extend([1.0] * len(QUANTILES))
            return
        q = np.quantile(x, QUANTILES)
        values.extend(q.tolist())
        iqr = float(np.subtract(*np.quantile(x, [0.75, 0.25])))
        scales.extend([max(iqr, 1e-3)] * len(QUANTILES))

    share(seen.h_star == 2)
    for h in (2, 3):
        quantiles(seen.level[seen.h_star == h])
    standing = ~seen.dropped
    for extra in (0, 1, 2):
        share(seen.legs[standing] == extra)
    share(seen.dropped[seen.searched])
    quoted = seen.searched & standing
    for extra in (0, 1):
        quantiles(seen.ratio[quoted & (seen.legs == extra)])
    mine = quoted & (seen.legs == 0)
    if mine.sum() >= 4:
        middle = np.median(seen.at[mine])
        low, high = seen.ratio[mine & (seen.at <= middle)], seen.ratio[mine & (seen.at > middle)]
        iqr = float(np.subtract(*np.quantile(seen.ratio[mine], [0.75, 0.25])))
        for half in (low, high):
            values.append(float(half.mean()) if len(half) else 0.0)
            scales.append(max(iqr, 1e-3))
    else:
        values.extend([0.0, 0.0])
        scales.extend([1.0, 1.0])
    return np.array(values), np.array(scales)


def _law_of(z: np.ndarray) -> FlightLaw:
    p = float(1.0 / (1.0 + np.exp(-z[0])))
    f_lo, s_lo = float(np.exp(z[1])), float(np.exp(z[3]))
    return FlightLaw(p, (f_lo, f_lo + float(np.exp(z[2]))), (s_lo, s_lo + float(np.exp(z[4]))))


def _z_of(law: FlightLaw) -> np.ndarray:
    p = law.edge_probability
    (f_lo, f_hi), (s_lo, s_hi) = law.fare_factor, law.slack
    return np.array([np.log(p / (1 - p)), np.log(f_lo), np.log(f_hi - f_lo), np.log(s_lo),
                     np.log(s_hi - s_lo)])


def moment_distance(law: FlightLaw, target: np.ndarray, scales: np.ndarray, calls: np.ndarray,
                    strengths: np.ndarray, roles: tuple[str, ...], n_sim: int = N_SIM,
                    seed: int = SIM_SEED) -> float:
    """The moment fit's objective at ``law``: scaled squared distance of the statistics.

    ``n_sim`` tasks of ``law`` drawn from ``seed`` (the same uniforms for every ``law``),
    the log's qualifying first-turn call sets ``calls`` played on them in turn.
    """
    tasks = draw_tasks(law, np.random.default_rng(seed), n_sim, len(roles), with_fares=False)
    played = calls[np.arange(n_sim) % len(calls)]
    simulated, _ = statistics(first_turn(tasks, played, strengths, roles))
    return float((((simulated - target) / scales) ** 2).sum())


def fit_law(seen: Shown, strengths: np.ndarray, roles: tuple[str, ...], n_sim: int = N_SIM,
            seed: int = SIM_SEED, max_evaluations: int = 300) -> tuple[FlightLaw, float]:
    """The generator's parameters of the moment fit (module docstring), and its distance.

    The edge probability first alone, the best of :data:`EDGE_GRID` with the others at
    :data:`START` (the share of ``h* = 2`` is not monotone in it: sparse networks keep few
    trips, mostly of 2 legs, so a root of that share alone can be the wrong one; the
    detours' legs tell them apart), then every parameter by Nelder-Mead from there.
    """
    from scipy.optimize import minimize  # type: ignore[import-untyped]  # no stubs

    if len(seen.calls) == 0:
        raise ValueError("fit_law: the log has no first turn that calls a planner and no "
                         "validator")
    target, scales = statistics(seen)
    grid = [moment_distance(FlightLaw(float(p), START["fare_factor"], START["slack"]), target,
                            scales, seen.calls, strengths, roles, n_sim, seed)
            for p in EDGE_GRID]
    start = FlightLaw(float(EDGE_GRID[int(np.argmin(grid))]), START["fare_factor"],
                      START["slack"])

    def objective(z: np.ndarray) -> float:
        try:
            law = _law_of(z)
        except ValueError:
            return 1e9
        if not 0.02 < law.edge_probability < 0.98 or law.fare_factor[1] > 20 \
                or law.slack[1] > 5:
            return 1e9
        return moment_distance(law, target, scales, seen.calls, strengths, roles, n_sim, seed)

    result = minimize(objective, _z_of(start), method="Nelder-Mead",
                      options={"maxfev": max_evaluations, "xatol": 1e-3, "fatol": 1e-4,
                               "initial_simplex": _z_of(start) + np.vstack(
                                   [np.zeros(5), 0.3 * np.eye(5)])})
    return _law_of(result.x), float(result.fun)


def fit(log: EpisodeLog, like: gym.Env, n_sim: int = N_SIM,
        max_evaluations: int = 300) -> FittedFlight:
    """Every parameter of the module docstring's list, from ``log`` alone.

    ``like``: the env the log was played on, for what is the user's (the agents' names
    and roles); nothing of its pool's numbers or its generator is read.
    """
    base = like.unwrapped
    assert isinstance(base, FlightPlannerV1Env)
    names = tuple(a.name for a in base.pool.agents)
    roles = tuple(a.role for a in base.pool.agents)
    strengths = fit_strengths(log, roles)
    seen = shown(log, roles)
    law, distance = fit_law(seen, strengths, roles, n_sim=n_sim,
                            max_evaluations=max_evaluations)
    costs = np.clip(fit_prices(log.calls, log.cost), 0.0, None)
    flops = np.clip(fit_prices(log.calls, log.flops), 0.0, None)
    return FittedFlight(law, strengths, costs, flops, names, roles,
                        episodes=len(seen.h_star), steps=log.steps,
                        first_turns=len(seen.calls), distance=distance)
