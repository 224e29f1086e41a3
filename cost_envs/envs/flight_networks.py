"""FlightPlanner's task draw: random flight networks, their trips, routes and budgets.

The one home of the generative model of a task's parameters (and of its luck arrays'
draw order), used by :class:`~cost_envs.envs.flight_planner.FlightPlannerEnv`'s
``draw_block`` (its resets and the batched env's queues) and by ``with_fresh_luck``.
Everything is vectorised over a block of tasks; the env turns a block into tasks.

**Layout.** The per-airport arrays of the derivation are airport-major, the tasks on the
last, contiguous axis (``legs[i, j, b]``): an operation then runs one long loop over the
tasks, where on ``[b, i, j]`` numpy broadcasts in loops of 9 airports, several times
slower per element. Every value is computed by the same operations on the same operands
as task-major code would be, so the layout changes no bit (``mean_fare``'s sum, whose
order depends on the layout, reads the task-major fares it always read).
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
_SELF = (1 << _BITS).astype(np.int16)[:, None]  # bit i of airport i's mask, [i, b]
_TO = _BITS[None, :, None]  # airport j's bit, on the middle axis of [i, j, b]
_STOPS = _BITS[:, None, None]  # airport k's bit, on the leading axis of [k, i, b]
_ROUTE_HOPS = 6  # cheapest walks are searched up to h* + 1 legs, detours two more
#: Tasks :func:`derive_networks` derives at once (see there).
DERIVED_TASKS = 256


def cheapest_walks(fares: np.ndarray, origin: np.ndarray, destination: np.ndarray,
                   max_hops: int) -> np.ndarray:
    """``prices[k, b]``: cheapest walk of exactly ``k`` legs, ``origin[b]`` to ``destination[b]``.

    ``k = 0 .. max_hops``; ``fares`` is airport-major, ``[i, j, b]``. Min-plus products of
    the origin's row with the fare matrix (Bellman-Ford by hop count): ``best[j, b]``, the
    cheapest walk to every airport, is one elementwise reduction over the previous stop
    ``i`` (the leading axis) a hop. The first hop is the origin's row itself (``0 + fare``,
    the minimum of it and infinities); the last is searched into the destination alone.
    Min is exact in any order, and each walk is summed leg by leg from the origin, as a
    full search sums it.
    """
    size, n = fares.shape[0], fares.shape[2]
    tasks = np.arange(n)
    flat = fares.reshape(size, -1)  # [i, j * n + b]
    prices = np.empty((max_hops + 1, n))
    prices[0] = np.where(origin == destination, 0.0, np.inf)
    best = np.ascontiguousarray(fares[origin, :, tasks].T)  # one leg: [j, b]
    prices[1] = best[destination, tasks]
    via = np.empty_like(fares)  # [i, j, b]: one buffer for every hop
    for k in range(2, max_hops):
        np.add(best[:, None, :], fares, out=via)
        best = np.minimum.reduce(via, axis=0)
        prices[k] = best[destination, tasks]
    into = flat[:, destination * n + tasks]  # [i, b]: the fares into the destination
    prices[max_hops] = np.minimum.reduce(best + into, axis=0)
    return prices


def mean_fare(fares: np.ndarray) -> np.ndarray:
    """Average finite fare over the last two axes (one formula for blocks and single tasks)."""
    finite = np.isfinite(fares)
    return np.where(finite, fares, 0.0).sum(axis=(-2, -1)) / finite.sum(axis=(-2, -1))


def budget_level(budget: Any, fare: Any, shortest_hops: Any) -> Any:
    """The budget relative to a typical fare for the trip, a visible hint of its slack."""
    return np.minimum(budget / (fare * shortest_hops), 2.0) / 2


class RawNetworks(NamedTuple):
    """A block of networks' draws, airport-major where per airport, before any derivation.

    ``xy``: ``[i, axis, b]``; ``legs``, ``fare_factor``: ``[i, j, b]``; ``pick``,
    ``luck``, ``fare_luck``: task-major as drawn (read per task); ``hops``:
    :func:`reach_masks` of ``legs`` (they decide which networks are kept, so they are
    computed with the draws).
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
    over the networks of every generator. The kept networks are stacked once, at the end
    (a loss is rare: a trip's search is then run again on them).
    """
    drawn: list[list[_Draws]] = [[] for _ in rngs]  # each generator's rounds, in order
    kept: list[list[np.ndarray]] = [[] for _ in rngs]
    need = dict.fromkeys(range(len(rngs)), n)
    first: tuple[np.ndarray, np.ndarray] | None = None  # round one's legs and hops
    while need:
        round_ = {j: _draw_raw(rngs[j], k, turns, n_agents) for j, k in need.items()}
        legs = _stack_airport_major([raw.legs for raw in round_.values()])
        hops = reach_masks(legs)
        keep = (trip_masks(hops) != 0).any(axis=0)
        first = (legs, hops) if first is None else first
        at = 0
        for j, raw in round_.items():
            k = len(raw.slack)
            drawn[j].append(raw)
            kept[j].append(keep[at:at + k])
            at += k
            need[j] -= int(kept[j][-1].sum())
            if need[j] == 0:
                del need[j]
    parts = [raw for per_rng in drawn for raw in per_rng]
    keep = np.concatenate([mask for per_rng in kept for mask in per_rng])
    assert first is not None
    legs, hops = first
    if len(parts) > len(rngs):  # a loss: the rows of later rounds go after their generator's
        legs = _stack_airport_major([raw.legs for raw in parts])[..., keep]
        hops = reach_masks(legs)

    def task_major(name: str) -> np.ndarray:
        column = [getattr(raw, name) for raw in parts]
        stacked = column[0] if len(column) == 1 else np.concatenate(column)
        return stacked if keep.all() else stacked[keep]

    def airport_major(name: str) -> np.ndarray:
        stacked = _stack_airport_major([getattr(raw, name) for raw in parts])
        return stacked if keep.all() else stacked[..., keep]

    return RawNetworks(airport_major("xy"), legs, airport_major("fare_factor"),
                       task_major("pick"), task_major("slack"), task_major("broken_price"),
                       task_major("luck"), task_major("fare_luck"), hops)


class _Draws(NamedTuple):
    """One generator's draws for ``n`` networks, task-major as drawn."""

    xy: np.ndarray
    legs: np.ndarray
    fare_factor: np.ndarray
    pick: np.ndarray
    slack: np.ndarray
    broken_price: np.ndarray
    luck: np.ndarray
    fare_luck: np.ndarray


def _draw_raw(rng: np.random.Generator, n: int, turns: int, n_agents: int) -> _Draws:
    """The generator's draws for ``n`` networks, in their one order."""
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
    return _Draws(xy, legs, fare_factor, pick, slack, broken_price, luck, fare_luck)


def _stack_airport_major(arrays: list[np.ndarray]) -> np.ndarray:
    """Task-major arrays ``[b, ...]`` stacked on the tasks and moved to the last axis."""
    last = (*range(1, arrays[0].ndim), 0)  # the tasks' axis last (np.moveaxis, but cheaper)
    moved = [a.transpose(last) for a in arrays]
    if len(moved) == 1:
        return np.ascontiguousarray(moved[0])
    # into a C-ordered array: concatenate alone would keep its inputs' task-major order
    out = np.empty((*moved[0].shape[:-1], sum(a.shape[-1] for a in moved)), arrays[0].dtype)
    return np.concatenate(moved, axis=-1, out=out)


def reach_masks(legs: np.ndarray) -> np.ndarray:
    """Breadth-first search over a block of networks (``legs[i, j, b]``), on bit masks.

    Returns:
        ``(3, N_AIRPORTS, n)`` int16: ``[h - 1, i, b]`` holds, as the bits of an integer,
        the airports reachable from ``i`` in exactly ``h`` legs (h = 1, 2, 3): the next
        hop's mask is the OR of the out-neighbour masks of the airports in the last one.
    """
    out = np.empty((3, *legs.shape[1:]), dtype=np.int16)
    neighbours = out[0]
    np.sum(legs.astype(np.int16) << _TO, axis=1, dtype=np.int16, out=neighbours)
    for h in (1, 2):
        # [k, i, b]: airport k's out-neighbours where k is in i's last mask, OR-ed over k
        chosen = ((out[h - 1][None] >> _STOPS) & 1) * neighbours[:, None, :]
        np.bitwise_or.reduce(chosen, axis=0, out=out[h])
    return out


def trip_masks(hops: np.ndarray) -> np.ndarray:
    """Each airport's trip destinations, bits ``[i, b]``: 2 or 3 legs away at the fewest, not i."""
    return (hops[1] | hops[2]) & ~hops[0] & ~_SELF


def _bit(masks: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Bit ``j[b]`` of each mask (``masks`` shaped ``(n,)``)."""
    return (masks >> j) & 1 != 0


def derive_networks(raw: RawNetworks, with_fares: bool = True) -> tuple[Any, ...]:
    """Each kept network's task, vectorised over the block (of one or several generators).

    Derived :data:`DERIVED_TASKS` tasks at a time, so that a slice's temporaries (81
    floats a task each) stay in the cache: a refill's pass over 1,024 tasks was about a
    fifth slower in one piece. Tasks are independent: the values are the same either way.

    Args:
        raw: :func:`draw_kept`'s networks.
        with_fares: Whether to return the fares (the batched env does not keep them).

    Returns:
        ``(fares, origin, destination, shortest_hops, budget, route_hops, route_price,
        luck, fare_luck, budget_level)``, one row per network (fares ``(n, 9, 9)``, or
        ``None`` without ``with_fares``).
    """
    n = raw.slack.shape[0]
    slices = [_derive_slice(_slice(raw, slice(start, start + DERIVED_TASKS)), with_fares)
              for start in range(0, n, DERIVED_TASKS)]
    derived = slices[0] if len(slices) == 1 else [
        None if column[0] is None else np.concatenate(column)
        for column in zip(*slices, strict=True)]
    fares, origin, destination, h_star, budget, route_hops, route_price, level = derived
    return (fares, origin, destination, h_star, budget, route_hops, route_price, raw.luck,
            raw.fare_luck, level)


def _slice(raw: RawNetworks, tasks: slice) -> RawNetworks:
    """Some tasks of ``raw`` (views: airport-major arrays on their last axis)."""
    return RawNetworks(raw.xy[..., tasks], raw.legs[..., tasks], raw.fare_factor[..., tasks],
                       raw.pick[tasks], raw.slack[tasks], raw.broken_price[tasks],
                       raw.luck[tasks], raw.fare_luck[tasks], raw.hops[..., tasks])


def _derive_slice(raw: RawNetworks, with_fares: bool) -> tuple[Any, ...]:
    """:func:`derive_networks`' arrays of the tasks of ``raw``, but its luck."""
    size = N_AIRPORTS
    x, y = raw.xy[:, 0], raw.xy[:, 1]
    n = x.shape[1]
    rows = np.arange(n)
    # Euclidean distance as np.linalg.norm computes it (sqrt of the squares' sum), without
    # its reduction over an axis of length 2 (seven times slower); [i, j, b], in place
    fares = x[:, None, :] - x[None, :, :]
    dy = y[:, None, :] - y[None, :, :]
    fares *= fares
    dy *= dy
    fares += dy
    np.sqrt(fares, out=fares)
    fares *= 300.0  # 60 + 300 * distance * factor, product by product
    fares *= raw.fare_factor
    fares += 60.0
    np.copyto(fares, np.inf, where=~raw.legs)
    # the first (origin, destination) of the largest pick among the trips, in task-major
    # order ([i, j, b] to [b, i * 9 + j]: a 1-byte transpose)
    candidates = ((trip_masks(raw.hops)[:, None, :] >> _TO) & 1 != 0).reshape(size * size, n)
    pick = raw.pick.reshape(n, -1) * candidates.T
    origin, destination = np.divmod(pick.argmax(axis=1), size)
    # the fewest legs from origin to destination (99: none of 1 to 3)
    at = raw.hops.reshape(3, -1)[:, origin * n + rows]
    h_star = np.where(_bit(at[0], destination), 1, np.where(
        _bit(at[1], destination), 2, np.where(_bit(at[2], destination), 3, 99)))
    prices = cheapest_walks(fares, origin, destination, _ROUTE_HOPS).T  # [b, k]
    within = np.where(np.arange(prices.shape[1]) <= h_star[:, None] + 1, prices, np.inf)
    h_opt = within.argmin(axis=1)
    p_opt = prices[rows, h_opt]
    detour = np.where(np.isfinite(prices[rows, h_opt + 1]), h_opt + 1,
                      np.where(np.isfinite(prices[rows, h_opt + 2]), h_opt + 2, h_opt))
    route_hops = np.stack([h_opt, detour, h_opt], axis=1)
    route_price = np.stack([p_opt, prices[rows, detour], p_opt * raw.broken_price], axis=1)
    budget = p_opt * (1.0 + raw.slack)
    fares = np.ascontiguousarray(fares.transpose(2, 0, 1))  # [b, i, j], as tasks hold them
    level = budget_level(budget, mean_fare(fares), h_star)
    return (fares if with_fares else None, origin, destination, h_star, budget, route_hops,
            route_price, level)
