"""Task draws batched across sub-envs: what they cost a batched step, and what batching saves.

Usage: ``python benchmarks/draw_batching.py [--num-envs N] [--batches B] [--chunk C]
[--rounds R] [--ids ID ...] [--quick] [--output FILE.md]``

Issue #37, point 1, as a measurement. Each batched env draws a sub-env's tasks from that
sub-env's own numpy ``Generator``, a block (``task_block`` tasks) at a time, with the
single env's generator calls; the question is whether one set of generator calls for all
the sub-envs refilling together would make a step faster, which would change the task
stream (every committed result regenerated). For every id with a batched env, at N =
1024 sub-envs, in the **steady state** of ``benchmarks/vector_throughput.py`` (its
helpers: the first ``FIRST_CYCLES`` = 1.5 queue cycles after a seeded reset are run
untimed, then at least ``--batches`` (1,600) batches in whole cycles, the same random
actions), in chunks of ``--chunk`` (100) batches:

1. **step**: the native env runs the chunk (the refills inside the clock as they come).
   Inside it, a timer around the family's per-sub-env draw code measures **per-sub-env
   draw code**: the base env's ``_draw_many`` (each sub-env's ``_draw``, i.e. the single
   env's ``draw_block`` with its own small array work, and the ``np.concatenate`` that
   stacks them); ToolBench's ``draw_calls`` (one float32 call per sub-env, into a scratch
   array); FlightPlanner's ``flight_networks._draw_raw`` (each generator's round of draws;
   the search for trips and the derivation already run once for all). Which sub-envs
   refilled in which step is logged (a wrapper on ``_refill``).
2. Right after, untimed setup aside, the same refills are replayed three ways, in an
   order rotated chunk by chunk, each timed alone:

   * **generator calls**: the generator calls of one sub-env's ``_draw`` (recorded once
     per id through a recording proxy of a ``Generator``: method, arguments, shape and
     dtype) made for each refilling sub-env on its own ``Generator``: the calls
     themselves, without the Python and stacking around them;
   * **one call**: the same numbers (same count and dtype) for all the sub-envs of a
     refill in one ``Generator`` call per recorded call (sizes multiplied by the number
     of sub-envs, array arguments tiled; a permutation per sub-env as one
     ``Generator.permuted`` of a tiled array): the least a batched draw from one stream
     could cost;
   * **counter hash**: the same count of numbers from a counter-based generator, one
     vectorised numpy call over (sub-env key, counter): two rounds of the SplitMix64
     finaliser on uint64 (:func:`counter_hash`), turned into the dtype's uniforms
     (float64 from 53 bits, float32 from 24, integers by a modulo, a permutation by
     ``argsort`` of 64-bit keys). A stream change keyed by seed and sub-env would draw
     this way, so that one call serves many sub-envs and a single env draws the same
     numbers. Only uniforms are costed: a beta, normal or lognormal draw would add its
     transform, so this column is a lower bound of such a stream's cost.

Per round (``--rounds``, 5: each a fresh env, reset with seed 0, the same window) the sums
over the chunks give each cost as a share of the step's time, and the **bound on the
speed-up** of the step were the per-sub-env draw code replaced by one call (or by the
counter hash) at no other cost: ``T / (T - D + X)`` - 1, with ``T`` the step's time, ``D``
the per-sub-env draw code's and ``X`` the replacement's. Everything a batched draw would
still do besides (the transforms, the derivation) is left out, so the bound is an upper
one. Each figure is the median over rounds, ``[min, max]`` beside it. Beside them: a
block's generator calls and their numbers, the sub-envs refilled per batch and per refill
(a ``_refill`` call: the sub-envs that ran out of tasks in one step, which one call could
serve), and the step's µs per batch (median over rounds).

``--quick`` (N = 32, 32 steady batches, 2 rounds) checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

import cost_envs.envs.flight_networks as flight_networks
from cost_envs.registration import VECTOR_IDS
from cost_envs.vector.flight_planner import FlightPlannerVectorEnv
from cost_envs.vector.toolbench import ToolBenchVectorEnv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the machine line and the output
from vector_throughput import FIRST_CYCLES, _actions, _run, cycle, steady_batches

ROUNDS = 5
QUICK = {"num_envs": 32, "batches": 32, "chunk": 16, "rounds": 2}
WAYS = ("calls", "one_call", "hash")  # the replays, in the order of the first chunk

# ------------------------------------------------------------ counter-based draws
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of uint64 ``z``, in place (``scratch``: an array like ``z``)."""
    for shift, factor in ((30, _M1), (27, _M2), (31, None)):
        np.right_shift(z, shift, out=scratch)
        z ^= scratch
        if factor is not None:
            z *= factor  # wraps modulo 2**64, as uint64 arrays do
    return z


def stream_keys(seed: int, n: int) -> np.ndarray:
    """``n`` sub-envs' 64-bit keys of ``seed`` (sub-env ``i``'s a hash of ``(seed, i)``)."""
    z = np.arange(n, dtype=np.uint64) + np.array([seed], np.uint64) * _GOLDEN  # wraps
    return _mix(_mix(z, np.empty_like(z)) + _GOLDEN, np.empty_like(z))


def counter_hash(keys: np.ndarray, counters: np.ndarray, count: int) -> np.ndarray:
    """64 random bits at positions ``counters[r] .. counters[r] + count - 1`` of stream ``keys[r]``.

    A counter-based generator: bit ``j`` of stream ``key`` is ``mix(mix(j * golden) +
    key)``, a pure function of ``(key, j)``, so one call over several keys equals a call
    per key, and a stream can be read from any position. Returns ``(len(keys), count)``
    uint64.
    """
    z = counters.astype(np.uint64)[:, None] + np.arange(count, dtype=np.uint64)
    z *= _GOLDEN
    scratch = np.empty_like(z)
    _mix(z, scratch)
    z += keys.astype(np.uint64)[:, None]
    return _mix(z, scratch)


# --------------------------------------------------------- a draw, recorded
#: The parameters of the ``Generator`` methods the families call, in their order.
PARAMS = {
    "random": ("size", "dtype", "out"),
    "integers": ("low", "high", "size", "dtype", "endpoint"),
    "uniform": ("low", "high", "size"),
    "beta": ("a", "b", "size"),
    "normal": ("loc", "scale", "size"),
    "lognormal": ("mean", "sigma", "size"),
    "permutation": ("x", "axis"),
}


class Call(NamedTuple):
    """One generator call of a draw: its method, its arguments by name, its result's shape."""

    method: str
    kwargs: dict[str, Any]
    shape: tuple[int, ...]
    dtype: np.dtype


class Recorder:
    """A ``Generator`` that records its calls (the methods of :data:`PARAMS` only)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.calls: list[Call] = []

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in PARAMS:
            raise AttributeError(f"draw_batching: Generator.{method} is not recorded; add it "
                                 "to PARAMS (and to the replays)")

        def call(*args: Any, **kwargs: Any) -> Any:
            result = getattr(self.rng, method)(*args, **kwargs)
            named = {**dict(zip(PARAMS[method], args, strict=False)), **kwargs}
            out = named.pop("out", None)
            if out is not None:  # replays draw new arrays of the shape `out` was filled to
                named["size"] = np.shape(out)
            self.calls.append(Call(method, named, np.shape(result), np.asarray(result).dtype))
            return result
        return call


def recipe(batched: Any) -> list[Call]:
    """The generator calls of one sub-env's block (``_draw(rng, task_block)``), in order."""
    recorder = Recorder(np.random.default_rng(0))
    batched._draw(recorder, batched.task_block)
    return recorder.calls


def scaled(call: Call, k: int) -> dict[str, Any]:
    """``call``'s arguments for ``k`` sub-envs at once (leading axis ``k`` times as long)."""
    lead = call.shape[0] if call.shape else 1
    kwargs = dict(call.kwargs)
    if call.method == "permutation":  # k permutations: rows of a tiled array, permuted
        x = kwargs["x"]
        base = np.arange(x) if np.ndim(x) == 0 else np.asarray(x)
        return {"x": np.tile(base, (k, *([1] * base.ndim))), "axis": 1}
    for name, value in kwargs.items():
        if isinstance(value, np.ndarray) and value.ndim and value.shape[0] == lead:
            kwargs[name] = np.concatenate([value] * k)
    if kwargs.get("size") is not None:
        kwargs["size"] = (k * lead, *call.shape[1:])
    return kwargs


def one_call(rng: np.random.Generator, calls: list[Call],
             args: list[dict[str, Any]]) -> list[np.ndarray]:
    """Each recorded call once, with ``args`` (:func:`scaled`'s) for all the sub-envs."""
    return [rng.permuted(kwargs["x"], axis=1) if call.method == "permutation"
            else getattr(rng, call.method)(**kwargs)
            for call, kwargs in zip(calls, args, strict=True)]


def per_sub_env(rngs: list[np.random.Generator], calls: list[Call]) -> None:
    """Each recorded call made by every generator of ``rngs``, one after the other."""
    for rng in rngs:
        for call in calls:
            getattr(rng, call.method)(**call.kwargs)


def hashed(keys: np.ndarray, counters: np.ndarray, calls: list[Call],
           args: list[dict[str, Any]]) -> list[np.ndarray]:
    """The recorded calls' numbers from :func:`counter_hash`, for the sub-envs of ``keys``.

    ``counters`` (one per sub-env) advance past the bits used. Uniforms only (see the
    module doc). Row ``r`` of each array holds sub-env ``keys[r]``'s numbers.
    """
    drawn = []
    for call, kwargs in zip(calls, args, strict=True):
        size = int(np.prod(call.shape))
        if call.dtype == np.float32:  # two 24-bit floats from each 64 bits
            words = (size + 1) // 2
            bits = counter_hash(keys, counters, words).view(np.uint32)
            out = (bits >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
        else:
            words = size
            bits = counter_hash(keys, counters, words)
            if call.method == "permutation":
                out = np.argsort(bits, axis=1)
            elif call.method == "integers":
                low = kwargs["low"]
                high = kwargs.get("high")
                low, high = (0, low) if high is None else (low, high)
                span = int(high) - int(low)
                out = bits if span >= 2**64 else bits % np.uint64(span) + np.uint64(low)
            else:
                out = (bits >> np.uint64(11)) * 2.0**-53
                if call.method == "uniform":
                    out = kwargs.get("low", 0.0) + (kwargs.get("high", 1.0)
                                                    - kwargs.get("low", 0.0)) * out
        counters += np.uint64(words)
        drawn.append(out)
    return drawn


# --------------------------------------------------- the draw code in the step
class Timer:
    """Seconds spent in wrapped functions since the last :meth:`take`."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return timed

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


@contextlib.contextmanager
def instrumented(batched: Any, timer: Timer, refills: list[list[int]]) -> Iterator[None]:
    """Time ``batched``'s per-sub-env draw code with ``timer``; log its refills' sub-envs."""
    refill = batched._refill

    def logged(ids: list[int]) -> None:
        refills.append(list(ids))
        refill(ids)

    batched._refill = logged
    if isinstance(batched, ToolBenchVectorEnv):  # its _refill: one draw_calls per sub-env
        batched.single_env.draw_calls = timer.wrap(batched.single_env.draw_calls)
    elif isinstance(batched, FlightPlannerVectorEnv):  # a round of draws per generator
        raw = flight_networks._draw_raw
        flight_networks._draw_raw = timer.wrap(raw)
    else:  # the base's: each sub-env's _draw, stacked
        batched._draw_many = timer.wrap(batched._draw_many)
    try:
        yield
    finally:
        for name in ("_refill", "_draw_many"):
            batched.__dict__.pop(name, None)
        if isinstance(batched, ToolBenchVectorEnv):
            del batched.single_env.draw_calls
        elif isinstance(batched, FlightPlannerVectorEnv):
            flight_networks._draw_raw = raw


class Round(NamedTuple):
    """One round's seconds: the steps, the draw code in them, and each replay."""

    step: float
    draw_code: float
    replays: dict[str, float]
    refilled: int  # sub-env refills in the window
    refill_calls: int  # _refill calls that drew


def one_round(env_id: str, num_envs: int, actions: np.ndarray, first: int, chunk: int,
              calls: list[Call], seed: int) -> Round:
    """A fresh env through its first window (untimed), then its steady state in chunks."""
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    batched = env.unwrapped
    env.reset(seed=0)
    _run(env, actions[:first])
    rngs = [np.random.default_rng([seed, i]) for i in range(num_envs)]
    rng = np.random.default_rng([seed, num_envs])
    keys = stream_keys(seed, num_envs)
    counters = np.zeros(num_envs, dtype=np.uint64)
    timer, log = Timer(), []
    step = draw_code = 0.0
    replays = dict.fromkeys(WAYS, 0.0)
    refilled = refill_calls = 0
    with instrumented(batched, timer, log):
        for k, start in enumerate(range(first, len(actions), chunk)):
            log.clear()
            step += _run(env, actions[start:start + chunk])[0]
            draw_code += timer.take()
            groups = [ids for ids in log if ids]
            refilled += sum(map(len, groups))
            refill_calls += len(groups)
            args = {len(ids): [scaled(call, len(ids)) for call in calls] for ids in groups}
            order = WAYS[k % len(WAYS):] + WAYS[:k % len(WAYS)]
            for way in order:
                began = time.perf_counter()
                for ids in groups:
                    if way == "calls":
                        per_sub_env([rngs[i] for i in ids], calls)
                    elif way == "one_call":
                        one_call(rng, calls, args[len(ids)])
                    else:
                        at = np.asarray(ids)
                        mine = counters[at]
                        hashed(keys[at], mine, calls, args[len(ids)])
                        counters[at] = mine
                replays[way] += time.perf_counter() - began
    env.close()
    return Round(step, draw_code, replays, refilled, refill_calls)


def measure(env_id: str, num_envs: int, batches: int, chunk: int,
            rounds: int) -> dict[str, Any]:
    """Every round of ``env_id``, and what sizes the windows."""
    length, per_episode = cycle(env_id, num_envs)
    first = int(np.ceil(FIRST_CYCLES * length))
    steady = steady_batches(batches, length)
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    actions = _actions(env, first + steady)
    calls = recipe(env.unwrapped)
    env.close()
    measured = [one_round(env_id, num_envs, actions, first, chunk, calls, seed)
                for seed in range(rounds)]
    return {"rounds": measured, "steady": steady, "first": first, "calls": calls,
            "steps_per_episode": per_episode}


# -------------------------------------------------------------------- report
def bound(r: Round, replacement: float) -> float:
    """The step's speed-up (a fraction) were its draw code replaced by ``replacement`` seconds."""
    return r.step / (r.step - r.draw_code + replacement) - 1.0


def figures(r: Round) -> dict[str, float]:
    """One round's shares of the step (fractions) and bounds."""
    return {
        "calls": r.replays["calls"] / r.step,
        "draw_code": r.draw_code / r.step,
        "one_call": r.replays["one_call"] / r.step,
        "hash": r.replays["hash"] / r.step,
        "bound_one_call": bound(r, r.replays["one_call"]),
        "bound_hash": bound(r, r.replays["hash"]),
    }


def spread(values: list[float], signed: bool = False) -> str:
    """``median [min, max]`` in percent."""
    form = "{:+.1f}" if signed else "{:.1f}"
    median, low, high = (form.format(100 * v) for v in
                         (np.median(values), min(values), max(values)))
    return f"{median} [{low}, {high}]"


def describe_calls(calls: list[Call]) -> str:
    """``calls`` in a few words: how many, and how many numbers of which dtypes."""
    numbers: dict[str, int] = {}
    for call in calls:
        numbers[str(call.dtype)] = numbers.get(str(call.dtype), 0) + int(np.prod(call.shape))
    return f"{len(calls)} ({', '.join(f'{v:,} {k}' for k, v in sorted(numbers.items()))})"


def report(measured: dict[str, dict[str, Any]], num_envs: int, batches: int, chunk: int,
           rounds: int, load_before: str) -> str:
    """The Markdown table."""
    lines = [
        f"Task draws in the steady state of the native batched envs, N = {num_envs} "
        f"sub-envs (after the first {FIRST_CYCLES} queue cycles, at least {batches:,} "
        f"batches in whole cycles, chunks of {chunk} batches; `vector_throughput.py`'s "
        f"windows and actions), {rounds} rounds. Shares are of the step's time: the "
        "family's per-sub-env draw code timed inside the step; the same refills replayed "
        "right after each chunk (a refill: the sub-envs that ran out of tasks in one "
        "step) as each sub-env's generator calls alone, as one "
        "`Generator` call for all the sub-envs of a refill, and as a vectorised counter "
        "hash (uniforms only). Bound: the step's speed-up were the draw code replaced by "
        "one call (or the hash) at no other cost, an upper bound. Median over rounds "
        "[min, max], in percent.",
        "",
        f"Machine: {machine()}; load average at the start {load_before}",
        "",
        "| env | generator calls per block (numbers) | sub-envs refilled per batch "
        "| sub-envs per refill | µs per batch | generator calls, % of step "
        "| per-sub-env draw code, % | one call, % | counter hash, % | speed-up bound, one call, % "
        "| speed-up bound, counter hash, % |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for env_id, row in sorted(measured.items()):
        per_round = [figures(r) for r in row["rounds"]]
        column = {key: [f[key] for f in per_round] for key in per_round[0]}
        first = row["rounds"][0]
        step_us = 1e6 * float(np.median([r.step for r in row["rounds"]])) / row["steady"]
        lines.append(
            f"| {env_id} | {describe_calls(row['calls'])} | "
            f"{first.refilled / row['steady']:.2f} | "
            f"{first.refilled / max(1, first.refill_calls):.1f} | {step_us:,.0f} | "
            f"{spread(column['calls'])} | {spread(column['draw_code'])} | "
            f"{spread(column['one_call'])} | {spread(column['hash'])} | "
            f"{spread(column['bound_one_call'], True)} | {spread(column['bound_hash'], True)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=1600,
                        help="least steady-state batches (whole cycles)")
    parser.add_argument("--chunk", type=int, default=100, help="batches per timed chunk")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per id")
    parser.add_argument("--ids", nargs="+", choices=sorted(VECTOR_IDS),
                        help="measure these ids only")
    parser.add_argument("--quick", action="store_true", help="checks the script, measures little")
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    if args.quick:
        num_envs, batches, chunk, rounds = (QUICK[k] for k in ("num_envs", "batches",
                                                                "chunk", "rounds"))
    else:
        num_envs, batches, chunk, rounds = args.num_envs, args.batches, args.chunk, args.rounds
    for name, value in (("num-envs", num_envs), ("batches", batches), ("chunk", chunk),
                        ("rounds", rounds)):
        if value < 1:
            parser.error(f"--{name}: expected an int >= 1, got {value}")
    load_before = "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    measured = {env_id: measure(env_id, num_envs, batches, chunk, rounds)
                for env_id in sorted(args.ids or VECTOR_IDS)}
    publish(report(measured, num_envs, batches, chunk, rounds, load_before), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
