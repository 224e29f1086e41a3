"""Native batched envs (``cost_envs.vector``) against ``SyncVectorEnv``, PPO on both, scaling.

Usage: ``python benchmarks/vector_throughput.py [--num-envs N] [--batches B] [--chunk C]
[--ids ID ...] [--repeats R] [--ppo-steps T] [--quick] [--output FILE.md]``

Three measurements, each a ratio within one run:

1. For every id with a batched implementation, sub-env steps per second of
   ``gym.make_vec(id, N, vectorization_mode="vector_entry_point")`` over those of
   ``vectorization_mode="sync"`` (``SyncVectorEnv`` of N single envs), N = 1024. Both
   reset with the same seed and run the same random actions (drawn before the clock
   starts), so they do the same work. A sub-env draws a block of ``task_block`` tasks
   (64; TraceRouting-v0 300 queries) each time its queue runs out, about every
   ``task_block`` x (steps per episode) batches: one *cycle* (its length comes from a
   short untimed pilot). Two windows, reported apart:

   * the **first window**: the reset (every queue's bulk draw) and the first 1.5 cycles,
     which hold the first wave of refills (every sub-env runs out about one cycle in,
     give or take half a cycle), each mode in one timed piece;
   * the **steady state** that follows, the one a long run lives in: at least
     ``--batches`` (1,600) batches per mode, in whole cycles (the refills still come in
     waves a cycle apart long after the reset: a window of whole cycles holds as many as
     the run's average), timed in chunks of ``--chunk`` (100) batches alternating between
     the modes, native then sync, then sync then native, and so on, each mode continuing
     its own run (the task refills fall inside the clock as they come). Each mode's rate
     is its steps over its time in all its chunks; the ratio is theirs (the issue's
     target, >= 30x, is this ratio's), with the same ratio in each half of the window
     beside it. (A median over pairs of chunks would not do: a chunk holding a wave of
     refills is slower than one without, and the median picks the light ones.)
2. SB3 PPO training steps per second on ToolBench-v0: ``PPO("MlpPolicy")`` on the native
   batched env with 16 sub-envs (``agents.vec_env.make_batched_vec_env``) over the same on
   SB3's ``make_vec_env`` (``DummyVecEnv`` of 16 single envs, a ``Monitor`` each), same
   hyperparameters and seed, one torch thread; ``--ppo-steps`` (32,768: about 7 cycles
   of each sub-env's queue) from the reset, ``--repeats`` (2) alternating runs.
3. Scaling: the native env's steady-state sub-env steps per second at N = 1, 16, 256,
   1024, 4096 (after its first window, ``--batches`` batches).

Beside each ratio: the mean episode length under random actions, the windows' lengths in
batches, and what filling a sub-env's queue costs per task, one sub-env alone (the
family's ``_draw`` and ``_derive`` on one generator).

``--quick`` (N = 32, one cycle of chunks, a short PPO run) checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

import cost_envs
from cost_envs.registration import VECTOR_IDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

SCALING = (1, 16, 256, 1024, 4096)
TARGET_RATIO = 30.0
#: The first window's length, in queue cycles: the reset and the first wave of refills.
FIRST_CYCLES = 1.5
PPO_ENV = "cost_envs/ToolBench-v0"
PPO_ENVS = 16
#: PPO's settings, the same for both vector envs (rollouts of 16 x 128 steps).
PPO_KWARGS = {"n_steps": 128, "batch_size": 256, "n_epochs": 4, "seed": 0}
QUICK = {"num_envs": 32, "batches": 32, "chunk": 32, "repeats": 1, "ppo_steps": 2048,
         "scaling": (1, 16)}


def _actions(env: Any, steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, (steps, env.num_envs, env.single_action_space.n)).astype(np.int8)


def _run(env: Any, actions: np.ndarray) -> tuple[float, int]:
    """Seconds taken by ``actions`` (continuing the env's run) and the episodes ended."""
    done = 0
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        done += int((terminated | truncated).sum())
    return time.perf_counter() - start, done


def cycle(env_id: str, num_envs: int, pilot: int = 128) -> tuple[int, float]:
    """Batches per queue cycle (``task_block`` x steps per episode) and steps per episode.

    From an untimed pilot of the native env under the benchmark's random actions.
    """
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    _, ends = _run(env, _actions(env, pilot))
    per_episode = num_envs * pilot / max(1, ends)
    block = env.unwrapped.task_block
    env.close()
    return int(np.ceil(block * per_episode)), per_episode


def draw_cost(env_id: str, blocks: int = 10, repeats: int = 5) -> float:
    """Microseconds per task of filling a sub-env's queue (a block of ``task_block``, as reset).

    What the batched env does per block, for one sub-env: its ``_draw`` (the draws from the
    sub-env's generator) and its ``_derive`` (what the queue holds, computed from them; a
    step derives the blocks of every sub-env drawing in it at once, which costs less per
    block). The best of ``repeats`` timings of ``blocks`` blocks: other jobs only ever add
    time.
    """
    env = gym.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point")
    batched, rng = env.unwrapped, np.random.default_rng(0)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(blocks):
            if hasattr(batched, "_draw_many"):
                batched._derive(batched._draw_many([rng], batched.task_block))
            else:  # the code before issue #26 (to measure it with this script)
                batched._derive(batched._draw(rng, batched.task_block))
        best = min(best, time.perf_counter() - start)
    return 1e6 * best / (blocks * batched.task_block)


class Windows(NamedTuple):
    """Each mode's first-window rate, and its seconds in each steady-state chunk."""

    first: dict[str, float]
    seconds: dict[str, list[float]]
    chunk_steps: list[int]

    def steady_rate(self, mode: str, chunks: slice = slice(None)) -> float:
        """The mode's sub-env steps over its time in the chunks ``chunks`` (all: the rate)."""
        return sum(self.chunk_steps[chunks]) / sum(self.seconds[mode][chunks])

    def halves(self) -> tuple[slice, slice]:
        """The first and the second half of the chunks (the spread of a ratio)."""
        middle = (len(self.chunk_steps) + 1) // 2
        return slice(0, middle), slice(middle, None)


def paired_windows(envs: dict[str, Any], first: int, batches: int,
                   chunk: int) -> Windows:
    """Each env's first window (reset and ``first`` batches), then its steady-state chunks.

    The envs get the same actions; the first windows run one env after the other; the
    steady state's ``batches`` are cut in chunks of ``chunk`` (the last may be shorter)
    that alternate, the order swapped every pair.
    """
    one = next(iter(envs.values()))
    actions = _actions(one, first + batches)
    steps = one.num_envs
    first_rates = {}
    for name, env in envs.items():
        start = time.perf_counter()
        env.reset(seed=0)
        _run(env, actions[:first])
        first_rates[name] = steps * first / (time.perf_counter() - start)
    seconds: dict[str, list[float]] = {name: [] for name in envs}
    starts = range(first, first + batches, chunk)
    for k, start in enumerate(starts):
        window = actions[start:min(start + chunk, first + batches)]
        for name in (list(envs) if k % 2 == 0 else list(envs)[::-1]):
            seconds[name].append(_run(envs[name], window)[0])
    return Windows(first_rates, seconds,
                   [steps * (min(start + chunk, first + batches) - start) for start in starts])


def steady_batches(batches: int, length: int) -> int:
    """At least ``batches``, in whole queue cycles of ``length`` batches.

    The refills still come in waves a cycle apart long after the reset (they spread
    slowly), so a window of whole cycles holds as many as the run's average.
    """
    return length * max(1, int(np.ceil(batches / length)))


def native_vs_sync(env_id: str, num_envs: int, batches: int, chunk: int) -> dict[str, Any]:
    """The first window and the steady state of both modes, and what sizes them."""
    length, per_episode = cycle(env_id, num_envs)
    first = int(np.ceil(FIRST_CYCLES * length))
    envs = {mode: gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
            for mode in ("vector_entry_point", "sync")}
    steady = steady_batches(batches, length)
    measured = paired_windows(envs, first, steady, chunk)
    for env in envs.values():
        env.close()
    return {"windows": measured, "steps_per_episode": per_episode, "cycle": length,
            "first": first, "steady": steady, "draw_us_per_task": draw_cost(env_id)}


def scaling(env_id: str, sizes: tuple[int, ...], batches: int,
            chunk: int) -> dict[int, tuple[float, int]]:
    """The native env's steady-state rate at each size (after its first window), the batches."""
    out = {}
    for n in sizes:
        length, _ = cycle(env_id, n, pilot=max(128, 4096 // n))
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point")
        steady = steady_batches(batches, length)
        measured = paired_windows({"native": env}, int(np.ceil(FIRST_CYCLES * length)),
                                  steady, chunk)
        out[n] = (measured.steady_rate("native"), steady)
        env.close()
    return out


def ppo_rates(total: int, repeats: int) -> dict[str, list[float]]:
    """PPO training steps per second on the native env and on DummyVecEnv, alternating."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from agents.vec_env import make_batched_vec_env

    torch.set_num_threads(1)
    makers: dict[str, Callable[[], Any]] = {
        "native": lambda: make_batched_vec_env(PPO_ENV, PPO_ENVS, seed=0),
        "DummyVecEnv": lambda: make_vec_env(PPO_ENV, n_envs=PPO_ENVS, seed=0),
    }
    rates: dict[str, list[float]] = {name: [] for name in makers}
    for round_ in range(repeats):
        for name in (list(makers) if round_ % 2 == 0 else list(makers)[::-1]):
            venv = makers[name]()
            model = PPO("MlpPolicy", venv, **PPO_KWARGS)
            start = time.perf_counter()
            model.learn(total)
            rates[name].append(model.num_timesteps / (time.perf_counter() - start))
            venv.close()
    return rates


def _median_ratio(ours: list[float], theirs: list[float]) -> float:
    return float(np.median([a / b for a, b in zip(ours, theirs, strict=True)]))


def steady_ratio(windows: Windows) -> tuple[float, float, float]:
    """The native/sync ratio of the steady-state rates, and the same in each half."""
    def ratio(chunks: slice) -> float:
        return (windows.steady_rate("vector_entry_point", chunks)
                / windows.steady_rate("sync", chunks))

    first_half, second_half = windows.halves()
    return ratio(slice(None)), ratio(first_half), ratio(second_half)


def report(pairs: dict[str, dict[str, Any]], ppo: dict[str, list[float]],
           scale: dict[int, tuple[float, int]], num_envs: int, batches: int, chunk: int,
           repeats: int, ppo_steps: int) -> str:
    """The Markdown tables."""
    lines = [
        f"Native batched envs (`gym.make_vec(id, {num_envs}, vectorization_mode="
        f"\"vector_entry_point\")`) against `SyncVectorEnv` of {num_envs} single envs "
        "(`vectorization_mode=\"sync\"`), random actions after a seeded reset. **Steady "
        f"state** (the target's): at least {batches:,} batches per mode after the first "
        "window, in whole queue cycles (a cycle: the batches in which a sub-env uses its "
        "block of tasks, task_block x steps per episode; the refills still come in waves a "
        f"cycle apart), timed in chunks of {chunk} batches alternating between the modes "
        "(the order swapped every pair; the refills inside the clock as they come). Rates "
        "are each mode's sub-env steps over its time in all its chunks, the ratio theirs; "
        "beside it the same ratio in the window's first and second half. **First "
        f"window**: the reset (every queue's bulk draw) and the first {FIRST_CYCLES} cycles "
        "(the first wave of refills), one timed piece per mode. The task draw is one "
        "sub-env's block alone, µs per task.",
        "",
        f"Machine: {machine()}",
        "",
        f"| env | native steps/s | SyncVectorEnv steps/s | ratio | ratio by half "
        f"| >= {TARGET_RATIO:.0f}x | steady batches | first window: native steps/s "
        "| SyncVectorEnv steps/s | ratio | first window, batches | steps per episode "
        "| task draw, µs per task |",
        "| --- | ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for env_id in sorted(cost_envs.ENV_IDS):
        if env_id not in pairs:
            why = "not measured (--ids)" if env_id in VECTOR_IDS else "no batched env yet"
            lines.append(f"| {env_id} | {why} | | | | | | | | | | | |")
            continue
        row = pairs[env_id]
        windows = row["windows"]
        native, sync = (windows.steady_rate(mode) for mode in ("vector_entry_point", "sync"))
        ratio, first_half, second_half = steady_ratio(windows)
        first_native, first_sync = (windows.first[mode]
                                    for mode in ("vector_entry_point", "sync"))
        meets = "yes" if ratio >= TARGET_RATIO else "**no**"
        lines.append(f"| {env_id} | {native:,.0f} | {sync:,.0f} | {ratio:.1f} | "
                     f"{first_half:.1f} / {second_half:.1f} | {meets} | {row['steady']:,} | "
                     f"{first_native:,.0f} | {first_sync:,.0f} | "
                     f"{first_native / first_sync:.1f} | {row['first']:,} | "
                     f"{row['steps_per_episode']:.1f} | {row['draw_us_per_task']:.1f} |")
    if ppo["native"]:  # measured unless --ids
        lines += _ppo_and_scaling(ppo, scale, repeats, ppo_steps)
    return "\n".join(lines) + "\n"


def _ppo_and_scaling(ppo: dict[str, list[float]], scale: dict[int, tuple[float, int]],
                     repeats: int, ppo_steps: int) -> list[str]:
    """The PPO table and the scaling table."""
    ratio = _median_ratio(ppo["native"], ppo["DummyVecEnv"])
    kwargs = ", ".join(f"{k}={v}" for k, v in PPO_KWARGS.items())
    lines = [
        "",
        f"SB3 PPO (`MlpPolicy`, {kwargs}, one torch thread) on {PPO_ENV}, {PPO_ENVS} "
        f"sub-envs, {ppo_steps} steps per run from the reset ({ppo_steps // PPO_ENVS} "
        f"batches), {repeats} alternating runs each:",
        "",
        "| vector env | PPO steps/s |",
        "| --- | ---: |",
        f"| native (`agents.vec_env.make_batched_vec_env`) | {max(ppo['native']):,.0f} |",
        f"| `DummyVecEnv` (`make_vec_env`) | {max(ppo['DummyVecEnv']):,.0f} |",
        f"| ratio (median over runs) | {ratio:.2f} |",
        "",
        f"Scaling of the native {PPO_ENV} (steady state after the first window):",
        "",
        "| num_envs | sub-env steps/s | µs per batch step | steady batches |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for n, (rate, length) in scale.items():
        lines.append(f"| {n} | {rate:,.0f} | {1e6 * n / rate:,.0f} | {length:,} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=1600,
                        help="least steady-state batches per mode (whole cycles)")
    parser.add_argument("--chunk", type=int, default=100, help="batches per timed chunk")
    parser.add_argument("--repeats", type=int, default=2, help="PPO runs per vector env")
    parser.add_argument("--ppo-steps", type=int, default=32_768)
    parser.add_argument("--ids", nargs="+", choices=sorted(VECTOR_IDS),
                        help="measure these ids only (and skip PPO and scaling)")
    parser.add_argument("--quick", action="store_true", help="checks the script, measures little")
    parser.add_argument("--output", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    if args.quick:
        num_envs, batches, chunk, repeats, ppo_steps, sizes = (
            QUICK["num_envs"], QUICK["batches"], QUICK["chunk"], QUICK["repeats"],
            QUICK["ppo_steps"], QUICK["scaling"])
    else:
        num_envs, batches, chunk, repeats, ppo_steps, sizes = (
            args.num_envs, args.batches, args.chunk, args.repeats, args.ppo_steps, SCALING)
    for name, value in (("num-envs", num_envs), ("batches", batches), ("chunk", chunk),
                        ("repeats", repeats), ("ppo-steps", ppo_steps)):
        if value < 1:
            parser.error(f"--{name}: expected an int >= 1, got {value}")
    ids = sorted(args.ids or VECTOR_IDS)
    pairs = {env_id: native_vs_sync(env_id, num_envs, batches, chunk) for env_id in ids}
    if args.ids:
        ppo: dict[str, list[float]] = {"native": [], "DummyVecEnv": []}
        scale: dict[int, tuple[float, int]] = {}
    else:
        ppo = ppo_rates(ppo_steps, repeats)
        scale = scaling(PPO_ENV, sizes, batches, chunk)
    publish(report(pairs, ppo, scale, num_envs, batches, chunk, repeats, ppo_steps),
            args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
