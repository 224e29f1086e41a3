"""Native batched envs (``cost_envs.vector``) against ``SyncVectorEnv``, PPO on both, scaling.

Usage: ``python benchmarks/vector_throughput.py [--num-envs N] [--repeats R] [--ppo-steps T]
[--quick] [--output FILE.md]``

Three measurements, each a ratio within one run, each over a window long enough to hold
the task draws of a long run at their steady-state rate:

1. For every id with a batched implementation, sub-env steps per second of
   ``gym.make_vec(id, N, vectorization_mode="vector_entry_point")`` over those of
   ``vectorization_mode="sync"`` (``SyncVectorEnv`` of N single envs), N = 1024. Both
   reset with the same seed and run the same random actions (drawn before the clock
   starts), so they do the same work. A sub-env draws a block of ``task_block`` tasks
   (64; TraceRouting-v0 300 queries) each time its queue runs out, about every
   ``task_block`` x (steps per episode) batches: one *cycle*. Each mode first runs half a
   cycle untimed (past the reset's bulk draw, up to the first wave of refills), then
   ``--repeats`` timed windows of one cycle each, alternating the modes and continuing
   their trajectories; every sub-env refills about once in each window, as in a long run.
   The episode length comes from a short untimed pilot. Rates: best window; ratio: the
   median over windows of the ratio within a window. The issue's target is >= 30x.
2. SB3 PPO training steps per second on ToolBench-v0: ``PPO("MlpPolicy")`` on the native
   batched env with 16 sub-envs (``agents.vec_env.make_batched_vec_env``) over the same on
   SB3's ``make_vec_env`` (``DummyVecEnv`` of 16 single envs, a ``Monitor`` each), same
   hyperparameters and seed, one torch thread; ``--ppo-steps`` (32,768: about 7 cycles
   of each sub-env's queue) from the reset.
3. Scaling: sub-env steps per second of the native env at N = 1, 16, 256, 1024, 4096,
   windows as in 1.

Beside each ratio: the mean episode length under random actions, the window's length in
batches, and what filling a sub-env's queue costs per task, one sub-env alone (the
family's ``_draw`` and ``_derive`` on one generator).

``--quick`` (N = 32, a few batches, a short PPO run) checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import cost_envs
from cost_envs.registration import VECTOR_IDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

SCALING = (1, 16, 256, 1024, 4096)
TARGET_RATIO = 30.0
PPO_ENV = "cost_envs/ToolBench-v0"
PPO_ENVS = 16
#: PPO's settings, the same for both vector envs (rollouts of 16 x 128 steps).
PPO_KWARGS = {"n_steps": 128, "batch_size": 256, "n_epochs": 4, "seed": 0}
QUICK = {"num_envs": 32, "repeats": 1, "ppo_steps": 2048, "scaling": (1, 16)}


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


def windows(envs: dict[str, Any], length: int, repeats: int) -> dict[str, list[float]]:
    """Each env's rate in ``repeats`` timed windows of ``length`` batches, alternating.

    Every env resets with seed 0 and runs half a window untimed first; the windows continue
    its run, with the same actions for every env.
    """
    first = next(iter(envs.values()))
    actions = _actions(first, length // 2 + length * repeats)
    warm = length // 2
    for env in envs.values():
        env.reset(seed=0)
        _run(env, actions[:warm])
    rates: dict[str, list[float]] = {name: [] for name in envs}
    for round_ in range(repeats):
        window = actions[warm + round_ * length: warm + (round_ + 1) * length]
        for name in (list(envs) if round_ % 2 == 0 else list(envs)[::-1]):
            seconds, _ = _run(envs[name], window)
            rates[name].append(envs[name].num_envs * length / seconds)
    return rates


def native_vs_sync(env_id: str, num_envs: int, repeats: int) -> dict[str, list[float]]:
    """Each mode's rate in each of ``repeats`` alternating one-cycle windows."""
    length, per_episode = cycle(env_id, num_envs)
    envs = {mode: gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
            for mode in ("vector_entry_point", "sync")}
    rates = windows(envs, length, repeats)
    for env in envs.values():
        env.close()
    rates["steps_per_episode"] = [per_episode]
    rates["window"] = [float(length)]
    rates["draw_us_per_task"] = [draw_cost(env_id)]
    return rates


def scaling(env_id: str, sizes: tuple[int, ...], repeats: int) -> dict[int, tuple[float, int]]:
    """The native env's best rate at each size over one-cycle windows, and the window."""
    out = {}
    for n in sizes:
        length, _ = cycle(env_id, n, pilot=max(128, 4096 // n))
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point")
        out[n] = (max(windows({"native": env}, length, repeats)["native"]), length)
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


def report(pairs: dict[str, dict[str, list[float]]], ppo: dict[str, list[float]],
           scale: dict[int, tuple[float, int]], num_envs: int, repeats: int,
           ppo_steps: int) -> str:
    """The Markdown tables."""
    lines = [
        f"Native batched envs (`gym.make_vec(id, {num_envs}, vectorization_mode="
        f"\"vector_entry_point\")`) against `SyncVectorEnv` of {num_envs} single envs "
        "(`vectorization_mode=\"sync\"`), random actions after a seeded reset, in the "
        "steady state of a long run: half a queue cycle untimed, then "
        f"{repeats} alternating timed windows of one cycle each (a cycle: the batches in "
        "which a sub-env uses its block of tasks, task_block x steps per episode; every "
        "sub-env draws a new block about once per window, in both modes). Rates are "
        "sub-env steps/s (best window), the ratio the median over windows of the ratio "
        "within a window; the task draw is one sub-env's block alone, µs per task.",
        "",
        f"Machine: {machine()}",
        "",
        f"| env | native steps/s | SyncVectorEnv steps/s | ratio | >= {TARGET_RATIO:.0f}x "
        "| steps per episode | window, batches | task draw, µs per task |",
        "| --- | ---: | ---: | ---: | :---: | ---: | ---: | ---: |",
    ]
    for env_id in sorted(cost_envs.ENV_IDS):
        if env_id not in pairs:
            lines.append(f"| {env_id} | no batched env yet | | | | | | |")
            continue
        rates = pairs[env_id]
        ratio = _median_ratio(rates["vector_entry_point"], rates["sync"])
        meets = "yes" if ratio >= TARGET_RATIO else "**no**"
        lines.append(f"| {env_id} | {max(rates['vector_entry_point']):,.0f} | "
                     f"{max(rates['sync']):,.0f} | {ratio:.1f} | {meets} | "
                     f"{rates['steps_per_episode'][0]:.1f} | {rates['window'][0]:,.0f} | "
                     f"{rates['draw_us_per_task'][0]:.1f} |")
    ratio = _median_ratio(ppo["native"], ppo["DummyVecEnv"])
    kwargs = ", ".join(f"{k}={v}" for k, v in PPO_KWARGS.items())
    lines += [
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
        f"Scaling of the native {PPO_ENV} (best of {repeats} one-cycle windows):",
        "",
        "| num_envs | sub-env steps/s | µs per batch step | window, batches |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for n, (rate, length) in scale.items():
        lines.append(f"| {n} | {rate:,.0f} | {1e6 * n / rate:,.0f} | {length:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ppo-steps", type=int, default=32_768)
    parser.add_argument("--quick", action="store_true", help="checks the script, measures little")
    parser.add_argument("--output", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    if args.quick:
        num_envs, repeats, ppo_steps, sizes = (QUICK["num_envs"], QUICK["repeats"],
                                               QUICK["ppo_steps"], QUICK["scaling"])
    else:
        num_envs, repeats, ppo_steps, sizes = (args.num_envs, args.repeats, args.ppo_steps,
                                               SCALING)
    for name, value in (("num-envs", num_envs), ("repeats", repeats),
                        ("ppo-steps", ppo_steps)):
        if value < 1:
            parser.error(f"--{name}: expected an int >= 1, got {value}")
    pairs = {env_id: native_vs_sync(env_id, num_envs, repeats)
             for env_id in sorted(VECTOR_IDS)}
    ppo = ppo_rates(ppo_steps, repeats)
    scale = scaling(PPO_ENV, sizes, repeats)
    publish(report(pairs, ppo, scale, num_envs, repeats, ppo_steps), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
