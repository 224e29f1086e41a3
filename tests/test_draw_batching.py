"""benchmarks/draw_batching.py: its counter-based draw and its replays (not the speed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the ids)
from cost_envs.registration import VECTOR_IDS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "draw_batching.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("draw_batching_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple needs its module
    spec.loader.exec_module(module)
    return module


def test_counter_hash_is_a_pure_keyed_function_of_the_counter(bench) -> None:
    keys = bench.stream_keys(7, 3)
    assert len(set(keys.tolist())) == 3
    np.testing.assert_array_equal(keys, bench.stream_keys(7, 3))  # reproducible
    assert not np.array_equal(keys, bench.stream_keys(8, 3))  # the seed is in the key
    start = np.zeros(3, dtype=np.uint64)
    whole = bench.counter_hash(keys, start, 20)
    np.testing.assert_array_equal(whole, bench.counter_hash(keys, start, 20))
    # different keys, different streams
    assert not set(whole[0].tolist()) & set(whole[1].tolist())
    # one call over several keys is a call per key; a stream read in pieces is the same
    for r in range(3):
        np.testing.assert_array_equal(whole[r], bench.counter_hash(keys[r:r + 1], start[:1],
                                                                   20)[0])
    later = bench.counter_hash(keys, start + np.uint64(12), 8)
    np.testing.assert_array_equal(whole[:, 12:], later)


@pytest.mark.parametrize("env_id", sorted(VECTOR_IDS))
def test_replays_draw_what_the_sub_envs_draw(bench, env_id) -> None:
    """One call and the counter hash give k sub-envs' count of numbers, in their dtypes."""
    env = gym.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point")
    calls = bench.recipe(env.unwrapped)
    env.close()
    assert calls
    k = 3
    args = [bench.scaled(call, k) for call in calls]
    counters = np.zeros(k, dtype=np.uint64)
    one = bench.one_call(np.random.default_rng(0), calls, args)
    hashed = bench.hashed(bench.stream_keys(0, k), counters, calls, args)
    for call, a, h in zip(calls, one, hashed, strict=True):
        size = int(np.prod(call.shape))
        assert a.size == k * size and a.dtype == call.dtype
        assert h.shape[0] == k and h.shape[1] in (size, size + 1)  # float32 in pairs
        if call.method in ("random", "uniform"):
            low, high = call.kwargs.get("low", 0.0), call.kwargs.get("high", 1.0)
            assert h.dtype == call.dtype and low <= h.min() and h.max() < high
    assert counters.min() > 0  # the streams moved on


def test_quick_run_reports_the_ids(bench, tmp_path) -> None:
    out = tmp_path / "draws.md"
    ids = ["cost_envs/ToolBench-v0", "cost_envs/TraceRouting-v0"]
    assert bench.main(["--quick", "--ids", *ids, "--output", str(out)]) == 0
    rows = [line for line in out.read_text(encoding="utf-8").splitlines()
            if line.startswith("| cost_envs/")]
    assert [row.split("|")[1].strip() for row in rows] == ids
