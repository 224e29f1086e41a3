"""FlightPlanner's task draw: random flight networks, their trips, routes and budgets.

The one home of the generative model of a task's parameters (and of its luck arrays'
draw order), used by :class:`~cost_envs.envs.flight_planner.FlightPlannerEnv`'s
``draw_block`` (its resets and the batched env's queues) and by ``with_fresh_luck``.
Everything is vectorised over a block of tasks; the env turns a block into tasks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

N_AIRPORTS = 9
EDGE_PROBABILITY = 0.32
BROKEN_PRICE = (0.9, 1.1)  # a broken route costs P_opt * U(0.9, 1.1)


def cheapest_walks_from(fares: np.ndarray, origin: np.ndarray, max_hops: int) -> np.ndarray:
    """``best[b, k, j]``: cheapest walk of exactly ``k`` legs from ``origin[b]`` to ``j``.

    Min-plus products of the origin's row with the fare matrix (Bellman-Ford by hop count).
    """
    n, size = fares.shape[0], fares.shape[1]
    best = np.full((n, max_hops + 1, size), np.inf)
    best[np.arange(n), 0, origin] = 0.0
    for k in range(1, max_hops + 1):
        best[:, k] = np.min(best[:, k - 1, :, None] + fares, axis=1)
    return best


def mean_fare(fares: np.ndarray) -> np.ndarray:
    """Average finite fare over the last two axes (one formula for blocks and single tasks)."""
    finite = np.isfinite(fares)
    return np.where(finite, fares, 0.0).sum(axis=(-2, -1)) / finite.sum(axis=(-2, -1))


def budget_level(budget: Any, fare: Any, shortest_hops: Any) -> Any:
    """The budget relative to a typical fare for the trip, a visible hint of its slack."""
    return np.minimum(budget / (fare * shortest_hops), 2.0) / 2


def draw_block(rng: np.random.Generator, n: int, turns: int,
               n_agents: int) -> tuple[np.ndarray, ...]:
    """``n`` tasks as :func:`draw_networks`' arrays, redrawing networks without a trip.

    Args:
        rng: The generator (consumed as every reset of the env consumes it).
        n: Number of tasks.
        turns: Turns per episode (the luck arrays' second axis).
        n_agents: Agents in the pool (the luck arrays' last axis).
    """
    parts: list[tuple[np.ndarray, ...]] = []
    while (drawn := sum(len(part[0]) for part in parts)) < n:  # rejection sampling
        parts.append(draw_networks(rng, n - drawn, turns, n_agents))
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def draw_networks(rng: np.random.Generator, n: int, turns: int,
                  n_agents: int) -> tuple[np.ndarray, ...]:
    """The tasks of ``n`` drawn networks that have a 2- or 3-leg trip (some have none).

    Returns:
        ``(fares, origin, destination, shortest_hops, budget, route_hops, route_price,
        luck, fare_luck, budget_level)``, one row per kept network.
    """
    size = N_AIRPORTS
    xy = rng.random((n, size, 2))
    distance = np.linalg.norm(xy[:, :, None, :] - xy[:, None, :, :], axis=-1)
    legs = rng.random((n, size, size)) < EDGE_PROBABILITY
    legs[:, np.arange(size), np.arange(size)] = False
    fares = np.where(legs, 60.0 + 300.0 * distance * rng.uniform(0.8, 1.3, legs.shape),
                     np.inf)
    # h*(i, j) for every pair by breadth-first search (boolean matrix powers)
    first = np.where(legs, 1, 99)
    frontier = legs.astype(np.int64)
    for hops in (2, 3):
        frontier = np.minimum(frontier @ legs.astype(np.int64), 1)
        first = np.where((first == 99) & (frontier > 0), hops, first)
    candidates = ((first == 2) | (first == 3)) & ~np.eye(size, dtype=bool)
    pick = rng.random((n, size, size)) * candidates
    slack = rng.uniform(0.03, 0.35, n)
    broken_price = rng.uniform(*BROKEN_PRICE, n)
    luck = rng.random((n, turns, n_agents))
    fare_luck = rng.random((n, turns, n_agents))
    # Everything below is vectorised over the block; the loop only slices.
    keep = np.flatnonzero(candidates.any(axis=(1, 2)))
    origin, destination = np.divmod(pick[keep].reshape(len(keep), -1).argmax(axis=1), size)
    h_star = first[keep, origin, destination]
    walks = cheapest_walks_from(fares[keep], origin, max_hops=6)
    rows = np.arange(len(keep))
    prices = walks[rows, :, destination]  # (kept, k): cheapest walk of exactly k legs
    within = np.where(np.arange(prices.shape[1]) <= h_star[:, None] + 1, prices, np.inf)
    h_opt = within.argmin(axis=1)
    p_opt = prices[rows, h_opt]
    detour = np.where(np.isfinite(prices[rows, h_opt + 1]), h_opt + 1,
                      np.where(np.isfinite(prices[rows, h_opt + 2]), h_opt + 2, h_opt))
    route_hops = np.stack([h_opt, detour, h_opt], axis=1)
    route_price = np.stack([p_opt, prices[rows, detour], p_opt * broken_price[keep]], axis=1)
    budget = p_opt * (1.0 + slack[keep])
    level = budget_level(budget, mean_fare(fares[keep]), h_star)
    return (fares[keep], origin, destination, h_star, budget, route_hops, route_price,
            luck[keep], fare_luck[keep], level)
