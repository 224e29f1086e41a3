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
order depends on the layout, is replayed addition by addition: :func:`_mean_fares`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

N_AIRPORTS = 9
EDGE_PROBABILITY = 0.32
BROKEN_PRICE = (0.9, 1.1)  # a broken route costs P_opt * U(0.9, 1.1)
FARE_FACTOR = (0.8, 1.3)  # a leg's fare is 60 + 300 * distance * U(0.8, 1.3)
SLACK = (0.03, 0.35)  # the budget is P_opt * (1 + U(0.03, 0.35))
_DIAGONAL = np.arange(N_AIRPORTS)
_BITS = np.arange(N_AIRPORTS, dtype=np.int16)
_SELF = (1 << _BITS).astype(np.int16)[:, None]  # bit i of airport i's mask, [i, b]
_TO = _BITS[None, :, None]  # airport j's bit, on the middle axis of [i, j, b]
_STOPS = _BITS[:, None, None]  # airport k's bit, on the leading axis of [k, i, b]
_ROUTE_HOPS = 6  # cheapest walks are searched up to h* + 1 legs, detours two more
_ROWS_AT = np.arange(_ROUTE_HOPS + 3)[:, None]  # a column of row numbers
_FIRST, _SECOND = np.triu_indices(N_AIRPORTS, 1)  # each pair of airports once, i < j
_PAIRS = len(_FIRST)
_PAIR_OF = np.full(N_AIRPORTS**2, _PAIRS)  # [i * 9 + j]: the pair's row (diagonal: a 0)
_PAIR_OF[_FIRST * N_AIRPORTS + _SECOND] = np.arange(_PAIRS)
_PAIR_OF[_SECOND * N_AIRPORTS + _FIRST] = np.arange(_PAIRS)
_MASKS = np.arange(2**N_AIRPORTS)[:, None]
_TRIP_ROWS = (_MASKS >> np.arange(N_AIRPORTS) & 1) != 0  # [mask, j]: bit j of the mask
_TRIP_FACTORS = _TRIP_ROWS.astype(np.float64)
_LEG_COUNT = _TRIP_ROWS.sum(axis=1)  # [mask]: its population count
#: Tasks :func:`derive_networks` derives at once (see there).
DERIVED_TASKS = 512


def cheapest_walks(fares: np.ndarray, origin: np.ndarray, destination: np.ndarray,
                   max_hops: int) -> np.ndarray:
    """``prices[k, b]``: cheapest walk of exactly ``k`` legs, ``origin[b]`` to ``destination[b]``.

    ``k = 0 .. max_hops``; ``fares`` is airport-major, ``[i, j, b]``. Min-plus products of
    the origin's row with the fare matrix (Bellman-Ford by hop count): ``best[j, b]``, the
    cheapest walk to every airport, is one elementwise reduction over the previous stop
    ``i`` (the leading axis) a hop. The first hop is the origin's row itself (``0 + fare``,
    the minimum of it and infinities); the last is searched into the destination alone.
    Min is exact in any order, and each walk is summed leg by leg from the origin, as a
    full search sums it. Rows are read by ``take`` on the flat arrays (one gather each).
    """
    size, n = fares.shape[0], fares.shape[2]
    tasks = np.arange(n)
    flat = fares.reshape(-1)  # [(i * size + j) * n + b]
    at_destination = destination * n + tasks  # [j * n + b] of j = destination
    prices = np.empty((max_hops + 1, n))
    prices[0] = np.where(origin == destination, 0.0, np.inf)
    best = flat.take(origin * (size * n) + _ROWS_AT[:size] * n + tasks)  # one leg: [j, b]
    prices[1] = best.reshape(-1).take(at_destination)
    via = np.empty_like(fares)  # [i, j, b]: one buffer for every hop
    for k in range(2, max_hops):
        np.add(best[:, None, :], fares, out=via)
        best = np.minimum.reduce(via, axis=0)
        prices[k] = best.reshape(-1).take(at_destination)
    into = flat.take(_ROWS_AT[:size] * (size * n) + at_destination)  # [i, b]
    into += best
    prices[max_hops] = np.minimum.reduce(into, axis=0)
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

    ``xy``: ``[i, axis, b]``; ``legs``, ``fare_factor``: ``[i, j, b]``; ``luck``,
    ``fare_luck``: task-major as drawn (read per task); ``hops``: :func:`reach_masks` of
    ``legs`` (they decide which networks are kept, so they are computed with the draws);
    ``trip``: each network's trip ``origin * 9 + destination``, the draw's ``pick``
    uniforms' choice among its trips (:func:`_trips`).
    """

    xy: np.ndarray
    legs: np.ndarray
    fare_factor: np.ndarray
    trip: np.ndarray
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

    The first round (in which, at the preset edge probability, every network is kept but
    about once in 10^10) is one ``random`` call per generator, its uniforms laid out as
    :func:`_draw_raw`'s calls consume them (``uniform(a, b)`` is ``a + (b - a) * u`` of
    the next uniform ``u``, the same double), and turned into the airport-major arrays
    in one operation over every generator: the generator's own per-call work was half
    of a refill's draw. A round that loses a network goes on by :func:`_draw_rounds`.
    """
    size, k = N_AIRPORTS, len(rngs)
    layout = _layout(n, turns, n_agents)
    uniforms = np.empty((k, layout["end"]))
    for row, rng in zip(uniforms, rngs, strict=True):
        rng.random(out=row)

    def part(name: str, *shape: int) -> np.ndarray:  # [generator, task, ...] (views)
        start, stop = layout[name]
        return uniforms[:, start:stop].reshape(k, n, *shape)

    def airport_major(values: np.ndarray, dtype: type = np.float64) -> np.ndarray:
        out = np.empty((*values.shape[2:], k, n), dtype)
        np.copyto(out, values.transpose(*range(2, values.ndim), 0, 1))
        return out

    legs = airport_major(part("legs", size, size) < EDGE_PROBABILITY, np.bool_)
    legs[_DIAGONAL, _DIAGONAL] = False
    legs = legs.reshape(size, size, k * n)
    hops = reach_masks(legs)
    trips = trip_masks(hops)
    if not (trips != 0).any(axis=0).all():  # a network lost: the rounds, as drawn
        return _draw_rounds(rngs, n, turns, n_agents,
                            [_unpack(row, layout, n, turns, n_agents) for row in uniforms])
    fare_factor = np.empty((size, size, k, n))  # low + (high - low) * u, airport-major
    np.multiply(part("fare_factor", size, size).transpose(2, 3, 0, 1),
                FARE_FACTOR[1] - FARE_FACTOR[0], out=fare_factor)
    fare_factor += FARE_FACTOR[0]

    def scaled(name: str, low: float, high: float) -> np.ndarray:
        return (part(name) * (high - low) + low).reshape(k * n)

    xy = airport_major(part("xy", size, 2)).reshape(size, 2, k * n)
    trip = _trips(part("pick", size * size), trips).reshape(k * n)
    slack = scaled("slack", *SLACK)
    broken_price = scaled("broken_price", *BROKEN_PRICE)
    luck = part("luck", turns, n_agents).reshape(k * n, turns, n_agents)
    fare_luck = part("fare_luck", turns, n_agents).reshape(k * n, turns, n_agents)
    return RawNetworks(xy, legs, fare_factor.reshape(size, size, k * n), trip, slack,
                       broken_price, luck, fare_luck, hops)


def _layout(n: int, turns: int, n_agents: int) -> dict[str, Any]:
    """Where each of :func:`_draw_raw`'s draws lies in a generator's uniforms, in call order."""
    layout: dict[str, Any] = {}
    at = 0
    for name, count in (("xy", N_AIRPORTS * 2), ("legs", N_AIRPORTS**2),
                        ("fare_factor", N_AIRPORTS**2), ("pick", N_AIRPORTS**2),
                        ("slack", 1), ("broken_price", 1), ("luck", turns * n_agents),
                        ("fare_luck", turns * n_agents)):
        layout[name] = (at, at + n * count)
        at += n * count
    layout["end"] = at
    return layout


def _unpack(uniforms: np.ndarray, layout: dict[str, Any], n: int, turns: int,
            n_agents: int) -> _Draws:
    """One generator's first round as :func:`_draw_raw` returns it, from its uniforms."""
    size = N_AIRPORTS

    def part(name: str, *shape: int) -> np.ndarray:
        start, stop = layout[name]
        return uniforms[start:stop].reshape(n, *shape)

    legs = part("legs", size, size) < EDGE_PROBABILITY
    legs[:, _DIAGONAL, _DIAGONAL] = False
    low, high = FARE_FACTOR
    return _Draws(part("xy", size, 2), legs, low + (high - low) * part("fare_factor", size, size),
                  part("pick", size, size), SLACK[0] + (SLACK[1] - SLACK[0]) * part("slack"),
                  BROKEN_PRICE[0] + (BROKEN_PRICE[1] - BROKEN_PRICE[0]) * part("broken_price"),
                  part("luck", turns, n_agents), part("fare_luck", turns, n_agents))


def _trips(pick: np.ndarray, trips: np.ndarray) -> np.ndarray:
    """Each network's trip ``i * 9 + j``: the first of the largest ``pick`` among its trips.

    ``pick``: ``[..., i * 9 + j]`` task-major, the tasks' leading axes flattening to the
    last axis of ``trips`` (:func:`trip_masks`, ``[i, b]``). Each pick is multiplied by 1.0
    on a trip and 0.0 elsewhere, as it always was (a table's rows: a masked copy of a
    strided ``pick`` by ``np.where`` is several times slower).
    """
    masked = _TRIP_FACTORS.take(trips.T, axis=0).reshape(pick.shape)
    masked *= pick
    return masked.argmax(axis=-1)


def _draw_rounds(rngs: Sequence[np.random.Generator], n: int, turns: int, n_agents: int,
                 first: list[_Draws]) -> RawNetworks:
    """:func:`draw_kept` from its first round's draws (``first``, one per generator) on.

    The kept networks are stacked once, at the end (the search for trips is then run again
    on them).
    """
    drawn: list[list[_Draws]] = [[] for _ in rngs]  # each generator's rounds, in order
    kept: list[list[np.ndarray]] = [[] for _ in rngs]
    need = dict.fromkeys(range(len(rngs)), n)
    round_ = dict(enumerate(first))
    while need:
        legs = _stack_airport_major([raw.legs for raw in round_.values()])
        keep = (trip_masks(reach_masks(legs)) != 0).any(axis=0)
        at = 0
        for j, raw in round_.items():
            k = len(raw.slack)
            drawn[j].append(raw)
            kept[j].append(keep[at:at + k])
            at += k
            need[j] -= int(kept[j][-1].sum())
            if need[j] == 0:
                del need[j]
        round_ = {j: _draw_raw(rngs[j], k, turns, n_agents) for j, k in need.items()}
    parts = [raw for per_rng in drawn for raw in per_rng]
    keep = np.concatenate([mask for per_rng in kept for mask in per_rng])
    legs = _stack_airport_major([raw.legs for raw in parts])[..., keep]
    hops = reach_masks(legs)

    def task_major(name: str) -> np.ndarray:
        return np.concatenate([getattr(raw, name) for raw in parts])[keep]

    def airport_major(name: str) -> np.ndarray:
        return _stack_airport_major([getattr(raw, name) for raw in parts])[..., keep]

    pick = task_major("pick")
    return RawNetworks(airport_major("xy"), legs, airport_major("fare_factor"),
                       _trips(pick.reshape(len(pick), -1), trip_masks(hops)),
                       task_major("slack"), task_major("broken_price"), task_major("luck"),
                       task_major("fare_luck"), hops)


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
    fare_factor = rng.uniform(*FARE_FACTOR, legs.shape)
    pick = rng.random((n, size, size))
    slack = rng.uniform(*SLACK, n)
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
    floats a task each) stay in the cache: in the batched env's steady state at N=1024
    (refills of up to 1,024 tasks) the step took about 8% more CPU time in slices of
    1,024, 6% more in slices of 256 or 128 (fewer temporaries than when 256 was chosen).
    Tasks are independent: the values are the same either way.

    Args:
        raw: :func:`draw_kept`'s networks.
        with_fares: Whether to return the fares (the batched env does not keep them).

    Returns:
        ``(fares, origin, destination, shortest_hops, budget, route_hops, route_price,
        luck, fare_luck, budget_level)``, one row per network (fares ``(n, 9, 9)``, or
        ``None`` without ``with_fares``).
    """
    n = raw.slack.shape[0]
    with np.errstate(divide="ignore"):  # the fares of the legs that do not exist
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
                       raw.trip[tasks], raw.slack[tasks], raw.broken_price[tasks],
                       raw.luck[tasks], raw.fare_luck[tasks], raw.hops[..., tasks])


def _derive_slice(raw: RawNetworks, with_fares: bool) -> tuple[Any, ...]:
    """:func:`derive_networks`' arrays of the tasks of ``raw``, but its luck."""
    size = N_AIRPORTS
    x, y = raw.xy[:, 0], raw.xy[:, 1]
    n = x.shape[1]
    rows = np.arange(n)
    # Euclidean distance as np.linalg.norm computes it (sqrt of the squares' sum), without
    # its reduction over an axis of length 2 (seven times slower), of each pair of
    # airports once (i < j: (x_j - x_i)^2 is (x_i - x_j)^2 to the bit), times 300, then
    # spread to [i, j, b] (the diagonal's 0 has no leg)
    distance = np.empty((_PAIRS + 1, n))
    dx = np.subtract(x[_FIRST], x[_SECOND], out=distance[:_PAIRS])
    dy = y[_FIRST] - y[_SECOND]
    dx *= dx
    dy *= dy
    dx += dy
    np.sqrt(dx, out=dx)
    dx *= 300.0  # 60 + 300 * distance * factor, product by product
    distance[_PAIRS] = 0.0
    fares = distance.take(_PAIR_OF, axis=0).reshape(size, size, n)
    fares *= raw.fare_factor
    fares += 60.0
    # the fares without a leg: 0 for the mean fare, infinite for the walks (a positive
    # fare over 1.0 is itself, over 0.0 infinite: a branch-free pass, where a masked
    # write of the infinities took three times longer)
    legs = raw.legs.astype(np.float64)
    level_fares = _mean_fares(fares * legs, raw.hops[0])
    fares /= legs
    origin, destination = np.divmod(raw.trip, size)
    # the fewest legs from origin to destination (99: none of 1 to 3)
    at = raw.hops.reshape(3, -1).take(origin * n + rows, axis=1)
    hop = (at >> destination) & 1 != 0  # [h - 1, b]: destination h legs away
    h_star = np.where(hop[0], 1, np.where(hop[1], 2, np.where(hop[2], 3, 99)))
    # [k, b]: the cheapest walks; the optimum among those within h* + 1 legs (the first
    # of equal prices), the detour with one more leg or else two, if any
    prices = cheapest_walks(fares, origin, destination, _ROUTE_HOPS)
    within = np.where(_ROWS_AT[:_ROUTE_HOPS + 1] <= h_star + 1, prices, np.inf)
    h_opt = within.argmin(axis=0)
    flat = prices.reshape(-1)
    at_opt = h_opt * n + rows
    p_opt = flat.take(at_opt)
    detour = np.where(np.isfinite(flat.take(at_opt + n)), h_opt + 1,
                      np.where(np.isfinite(flat.take(at_opt + 2 * n)), h_opt + 2, h_opt))
    route_hops = np.stack([h_opt, detour, h_opt], axis=1)
    route_price = np.stack([p_opt, flat.take(detour * n + rows), p_opt * raw.broken_price],
                           axis=1)
    budget = p_opt * (1.0 + raw.slack)
    level = budget_level(budget, level_fares, h_star)
    # [b, i, j], as tasks hold them
    held = np.ascontiguousarray(fares.transpose(2, 0, 1)) if with_fares else None
    return held, origin, destination, h_star, budget, route_hops, route_price, level


def _mean_fares(zeroed: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
    """:func:`mean_fare` of airport-major fares ``[i, j, b]``, to the bit, without a transpose.

    ``zeroed``: the fares, 0 where no leg. ``mean_fare`` sums a task's 81 fares as numpy
    sums 81 contiguous doubles (pairwise summation): eight running sums of every eighth
    fare in order, added as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then
    the 81st. Here the same additions run over the tasks' axis (a reduction over a leading
    axis adds row after row). The count of legs is the population count of each
    airport's ``neighbours`` mask (:func:`reach_masks`' first hop).
    """
    size, n = zeroed.shape[0], zeroed.shape[2]
    flat = zeroed.reshape(size * size, n)
    r = np.add.reduce(flat[:80].reshape(10, 8, n), axis=0)
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    total += flat[80]
    return total / _LEG_COUNT.take(neighbours, axis=0).sum(axis=0)
