"""FlightPlanner's task draw, bit for bit as it was before issue #37 point 2 sped it up.

``flight_networks`` derives a block of tasks in an airport-major layout (the tasks on the
last axis: long contiguous loops where numpy's loops over 9 airports were slow), and
``draw_kept`` stacks the draws of several generators. The digests below were recorded from
the code before (commit a65f473) over everything ``draw_block`` and the batched env's
``derive_networks(draw_kept(...))`` return: one generator, several stacked, and networks
sparse enough that the rejection sampling redraws (one generator draws three rounds,
the stacked ones two), which the
preset edge probability almost never needs.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from cost_envs.envs import flight_networks
from cost_envs.envs.flight_networks import derive_networks, draw_block, draw_kept

TURNS, AGENTS = 7, 6


def digest(arrays: tuple[np.ndarray, ...]) -> str:
    """sha256 of the arrays' dtypes, shapes and bytes (values and layout-free)."""
    sha = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        sha.update(f"{array.dtype}{array.shape}".encode())
        sha.update(array.tobytes())
    return sha.hexdigest()[:24]


def one_generator() -> str:
    return digest(draw_block(np.random.default_rng(3), 64, TURNS, AGENTS))


def stacked(n_rngs: int = 5, n: int = 40) -> str:
    rngs = [np.random.default_rng(100 + j) for j in range(n_rngs)]
    return digest(derive_networks(draw_kept(rngs, n, TURNS, AGENTS)))


#: recorded on commit a65f473 (the code before the airport-major derivation)
DIGESTS = {
    "one_generator": "25e1b95c74609d9c546baa10",
    "stacked": "25f9103de926c9da9be7dce9",
    "sparse_one_generator": "4e0d2f8b1f452a8b0e23ab54",
    "sparse_stacked": "241c56fc621a27ef666778c0",
}


def test_one_generator_draws_as_before() -> None:
    assert one_generator() == DIGESTS["one_generator"]


def test_stacked_generators_draw_as_before() -> None:
    assert stacked() == DIGESTS["stacked"]


@pytest.mark.parametrize("case", ["sparse_one_generator", "sparse_stacked"])
def test_rejection_rounds_draw_as_before(case: str, monkeypatch) -> None:
    # at edge probability 0.13 about one network in five has no 2- or 3-leg trip
    monkeypatch.setattr(flight_networks, "EDGE_PROBABILITY", 0.13)
    assert (one_generator() if case == "sparse_one_generator" else stacked()) == DIGESTS[case]


def test_the_derivation_reads_airport_major_arrays() -> None:
    # what makes it fast: the tasks on the last, contiguous axis (np.concatenate of moved
    # axes alone would keep the generators' task-major memory order)
    raw = draw_kept([np.random.default_rng(j) for j in range(3)], 8, TURNS, AGENTS)
    for name in ("xy", "legs", "fare_factor", "hops"):
        array = getattr(raw, name)
        assert array.shape[-1] == 24 and array.flags.c_contiguous, name


def test_mean_fares_replays_numpys_pairwise_sum() -> None:
    # the budget level's mean fare is summed over the tasks' axis in the order numpy sums
    # a task's 81 contiguous fares (eight running sums, then the 81st): equal to the bit
    raw = draw_kept([np.random.default_rng(j) for j in range(4)], 64, TURNS, AGENTS)
    fares = raw.fare_factor * 250.0 + 60.0  # [i, j, b], many digits
    zeroed = np.where(raw.legs, fares, 0.0)
    task_major = np.where(raw.legs, fares, np.inf).transpose(2, 0, 1)
    expected = flight_networks.mean_fare(np.ascontiguousarray(task_major))
    assert (flight_networks._mean_fares(zeroed, raw.hops[0]) == expected).all()
    # a sequential sum differs in the last bits of some tasks (what the test can catch)
    sequential = zeroed.reshape(81, -1).sum(axis=0) / raw.legs.sum(axis=(0, 1))
    assert (sequential != expected).any()


def test_one_call_draws_what_the_calls_drew() -> None:
    # draw_kept's first round is one random() call a generator: uniform(a, b) is
    # a + (b - a) * u of the same uniforms, so the stream and every value are unchanged
    rng, again = np.random.default_rng(9), np.random.default_rng(9)
    raw = flight_networks._draw_raw(rng, 16, TURNS, AGENTS)
    layout = flight_networks._layout(16, TURNS, AGENTS)
    uniforms = again.random(layout["end"])
    unpacked = flight_networks._unpack(uniforms, layout, 16, TURNS, AGENTS)
    for name, value in raw._asdict().items():
        assert np.array_equal(getattr(unpacked, name), value), name
    assert rng.random() == again.random()


if __name__ == "__main__":  # print the digests (to record them)
    import unittest.mock

    print({"one_generator": one_generator(), "stacked": stacked()})
    with unittest.mock.patch.object(flight_networks, "EDGE_PROBABILITY", 0.13):
        print({"sparse_one_generator": one_generator(), "sparse_stacked": stacked()})
