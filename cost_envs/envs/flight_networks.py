"""FlightPlanner's task draw: random flight networks, their trips, routes and budgets.

The one home of the generative model of a task's parameters (and of its luck arrays'
draw order), used by :class:`~cost_envs.envs.flight_planner.FlightPlannerEnv`'s
``draw_block`` (its resets and the batched env's queues) and by ``with_fresh_luck``.
Everything is vectorised over a block of tasks; the env turns a block into tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

N_AIRPORTS = 9
EDGE_PROBABILITY = 0.32
BROKEN_PRICE = (0.9, 1.1)  # a broken route costs P_opt * U(0.9, 1.1)
_DIAGONAL = np.arange(N_AIRPORTS)
_BITS = np.arange(N_AIRPORTS, dtype=np.int16)
_SELF = (1 << _BITS).astype(np.int16)  # bit i of airport i's mask
_NO_HOPS = np.zeros((0, 3, N_AIRPORTS), dtype=np.int16)


def cheapest_walks_from(fares: np.ndarray, origin: np.ndarray, max_hops: int) -> np.ndarray:
    """``best[b, k, j]``: cheapest walk of exactly ``k`` legs from ``origin[b]`` to ``j``.

    Min-plus products of the origin's row with the fare matrix (Bellman-Ford by hop count),
    as a running minimum over the previous stop (min is exact in any order; a reduction
    over the middle axis costs twice as much).
    """
    n, size = fares.shape[0], fares.shape[1]
    best = np.full((n, max_hops + 1, size), np.inf)
    best[np.arange(n), 0, origin] = 0.0
    legs_from = [fares[:, i, :] for i in range(size)]
    for k in range(1, max_hops + 1):
        previous = best[:, k - 1]
        walk = previous[:, 0, None] + legs_from[0]
        for i in range(1, size):
            np.minimum(walk, previous[:, i, None] + legs_from[i], out=walk)
        best[:, k] = walk
    return best


def mean_fare(fares: np.ndarray) -> np.ndarray:
    """Average finite fare over the last two axes (one formula for blocks and single tasks)."""
    finite = np.isfinite(fares)
    return np.where(finite, fares, 0.0).sum(axis=(-2, -1)) / finite.sum(axis=(-2, -1))


def budget_level(budget: Any, fare: Any, shortest_hops: Any) -> Any:
    """The budget relative to a typical fare for the trip, a visible hint of its slack."""
    return np.minimum(budget / (fare * shortest_hops), 2.0) / 2


class RawNetworks(NamedTuple):
    """The generator's draws for a block of networks, before any derivation.

    ``hops``: :func:`reach_masks` of ``legs`` (they decide which networks are kept, so
    they are computed with the draws).
    """

    xy: np.ndarray
    legs: np.ndarray
    fare_factor: np.ndarray
    pick: np.ndarray
    slack: np.ndarray
    broken_price: np.ndarray
    luck: np.ndarray
    fare_luck: np.ndarray
    hops: np.ndarray


def draw_block(rng: np.random.Generator, n: int, turns: int,
               n_agents: int) -> tuple[np.ndarray, ...]:
    """``n`` tasks as :func:`derive_networks`' arrays, redrawing networks without a trip.

    Args:
        rng: The generator (consumed as every reset of the env consumes it).
        n: Number of tasks.
        turns: Turns per episode (the luck arrays' second axis).
        n_agents: Agents in the pool (the luck arrays' last axis).
    """
    return derive_networks(draw_kept([rng], n, turns, n_agents))


def draw_kept(rngs: Sequence[np.random.Generator], n: int, turns: int,
              n_agents: int) -> RawNetworks:
    """``n`` networks with a 2- or 3-leg trip from each generator, stacked generator by generator.

    Rejection sampling: each generator draws ``n`` networks, then as many more as it lost
    (a network without such a trip), until it has ``n``: every generator is consumed as
    :func:`draw_block` consumes it alone, while the search for trips runs once per round
    over the networks of every generator.
    """
    kept: list[list[RawNetworks]] = [[] for _ in rngs]
    need = dict.fromkeys(range(len(rngs)), n)
    while need:
        drawn = [_draw_raw(rngs[j], k, turns, n_agents) for j, k in need.items()]
        legs = np.concatenate([raw.legs for raw in drawn]) if len(drawn) > 1 else drawn[0].legs
        hops = reach_masks(legs)
        keep = (trip_masks(hops) != 0).any(axis=1)
        at = 0
        for (j, k), raw in zip(list(need.items()), drawn, strict=True):
            rows = at + np.flatnonzero(keep[at:at + k])
            kept[j].append(raw._replace(hops=hops[rows]) if len(rows) == k
                           else RawNetworks._make([*(a[rows - at] for a in raw[:-1]), hops[rows]]))
            at += k
            need[j] -= len(rows)
            if need[j] == 0:
                del need[j]
    parts = [part for per_rng in kept for part in per_rng]
    if len(parts) == 1:
        return parts[0]
    return RawNetworks(*(np.concatenate(column) for column in zip(*parts, strict=True)))


def _draw_raw(rng: np.random.Generator, n: int, turns: int, n_agents: int) -> RawNetworks:
    """The generator's draws for ``n`` networks, in their one order (``hops`` left empty)."""
    size = N_AIRPORTS
    xy = rng.random((n, size, 2))
    legs = rng.random((n, size, size)) < EDGE_PROBABILITY
    legs[:, _DIAGONAL, _DIAGONAL] = False
    fare_factor = rng.uniform(0.8, 1.3, legs.shape)
    pick = rng.random((n, size, size))
    slack = rng.uniform(0.03, 0.35, n)
    broken_price = rng.uniform(*BROKEN_PRICE, n)
    luck = rng.random((n, turns, n_agents))
    fare_luck = rng.random((n, turns, n_agents))
    return RawNetworks(xy, legs, fare_factor, pick, slack, broken_price, luck, fare_luck,
                       _NO_HOPS)


def reach_masks(legs: np.ndarray) -> np.ndarray:
    """Breadth-first search over a block of networks, on bit masks.

    Returns:
        ``(n, 3, N_AIRPORTS)`` int16: ``[b, h - 1, i]`` holds, as the bits of an integer,
        the airports reachable from ``i`` in exactly ``h`` legs (h = 1, 2, 3): the next
        hop's mask is the OR of the out-neighbour masks of the airports in the last one.
    """
    out = np.zeros((len(legs), 3, N_AIRPORTS), dtype=np.int16)
    out[:, 0] = neighbours = (legs.astype(np.int16) << _BITS).sum(axis=2, dtype=np.int16)
    for h in (1, 2):
        reach, step = out[:, h - 1], out[:, h]
        for k in range(N_AIRPORTS):
            step |= ((reach >> k) & 1) * neighbours[:, k:k + 1]
    return out


def trip_masks(hops: np.ndarray) -> np.ndarray:
    """Each airport's trip destinations as bits: 2 or 3 legs away at the fewest, not itself."""
    return (hops[:, 1] | hops[:, 2]) & ~hops[:, 0] & ~_SELF


def _bit(masks: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Bit ``j[b]`` of each mask (``masks`` shaped ``(n,)``)."""
    return (masks >> j) & 1 != 0


def derive_networks(raw: RawNetworks) -> tuple[np.ndarray, ...]:
    """Each kept network's task, vectorised over the block (of one or several generators).

    Returns:
        ``(fares, origin, destination, shortest_hops, budget, route_hops, route_price,
        luck, fare_luck, budget_level)``, one row per network.
    """
    size = N_AIRPORTS
    xy, legs, hops = raw.xy, raw.legs, raw.hops
    # Euclidean distance as np.linalg.norm computes it (sqrt of the squares' sum), without
    # its reduction over an axis of length 2 (seven times slower)
    dx = xy[:, :, None, 0] - xy[:, None, :, 0]
    dy = xy[:, :, None, 1] - xy[:, None, :, 1]
    distance = np.sqrt(dx * dx + dy * dy)
    fares = np.where(legs, 60.0 + 300.0 * distance * raw.fare_factor, np.inf)
    candidates = (trip_masks(hops)[:, :, None] >> _BITS) & 1 != 0
    pick = raw.pick * candidates
    n = len(legs)
    origin, destination = np.divmod(pick.reshape(n, -1).argmax(axis=1), size)
    rows = np.arange(n)
    # the fewest legs from origin to destination (99: none of 1 to 3)
    at = hops[rows, :, origin]
    h_star = np.where(_bit(at[:, 0], destination), 1, np.where(
        _bit(at[:, 1], destination), 2, np.where(_bit(at[:, 2], destination), 3, 99)))
    walks = cheapest_walks_from(fares, origin, max_hops=6)
    prices = walks[rows, :, destination]  # (n, k): cheapest walk of exactly k legs
    within = np.where(np.arange(prices.shape[1]) <= h_star[:, None] + 1, prices, np.inf)
    h_opt = within.argmin(axis=1)
    p_opt = prices[rows, h_opt]
    detour = np.where(np.isfinite(prices[rows, h_opt + 1]), h_opt + 1,
                      np.where(np.isfinite(prices[rows, h_opt + 2]), h_opt + 2, h_opt))
    route_hops = np.stack([h_opt, detour, h_opt], axis=1)
    route_price = np.stack([p_opt, prices[rows, detour], p_opt * raw.broken_price], axis=1)
    budget = p_opt * (1.0 + raw.slack)
    level = budget_level(budget, mean_fare(fares), h_star)
    return (fares, origin, destination, h_star, budget, route_hops, route_price,
            raw.luck, raw.fare_luck, level)
