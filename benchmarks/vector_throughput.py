"""Native batched envs (``cost_envs.vector``) against ``SyncVectorEnv``, PPO on both, scaling.

Usage: ``python benchmarks/vector_throughput.py [--num-envs N] [--steps S] [--repeats R]
[--ppo-steps T] [--quick] [--output FILE.md]``

Three measurements, each a ratio within one run:

1. For every id with a batched implementation, sub-env steps per second of
   ``gym.make_vec(id, N, vectorization_mode="vector_entry_point")`` over those of
   ``vectorization_mode="sync"`` (``SyncVectorEnv`` of N single envs), N = 1024: both
   reset with the same seed (not timed), then run the same ``S`` batches of random
   actions, drawn before the clock starts. Both draw each sub-env's first block of tasks
   in that reset (64; TraceRouting-v0 a permutation of its queries). ``S`` = 256 batches
   use fewer than 64 tasks per sub-env at 4.6 to 11.7 steps per episode, so there the
   timed window draws no tasks and the ratio is that of stepping; ExpertRouting's
   episodes (3.6 steps) use about 71, so each of its sub-envs draws one more block inside
   the window, in both modes. Rounds alternate the two (best round each; the ratio is the
   median over rounds of the ratio within a round). The issue's target is >= 30x.
2. SB3 PPO training steps per second on ToolBench-v0: ``PPO("MlpPolicy")`` on the native
   batched env with 16 sub-envs (``agents.vec_env.make_batched_vec_env``) over the same on
   SB3's ``make_vec_env`` (``DummyVecEnv`` of 16 single envs, a ``Monitor`` each), same
   hyperparameters and seed, one torch thread.
3. Scaling: sub-env steps per second of the native env at N = 1, 16, 256, 1024, 4096.

Beside each ratio: the mean episode length under random actions and what filling a
sub-env's queue costs per task, one sub-env alone (the single env's ``draw_block``, and for
ExpertRouting the questions' tables by the single env's ``block_arrays``). In a long run
every sub-env also draws on its own generator (one block of ``task_block`` tasks at a
time), in both modes: per sub-env step, about the draw's cost over the episode length,
which the table's two last columns give (the batched env computes the tables of all the
blocks drawn in a step at once, for less).

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
QUICK = {"num_envs": 32, "steps": 64, "repeats": 1, "ppo_steps": 2048, "scaling": (1, 16)}


def _actions(env: Any, steps: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (env.num_envs, env.single_action_space.n)
    return [rng.integers(0, 2, shape).astype(np.int8) for _ in range(steps)]


def _rate(env: Any, actions: list[np.ndarray], ends: list[int] | None = None) -> float:
    """Sub-env steps per second over ``actions`` (the reset before the clock).

    Appends the number of episode ends to ``ends`` when given.
    """
    env.reset(seed=0)
    done = 0
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        done += int((terminated | truncated).sum())
    rate = env.num_envs * len(actions) / (time.perf_counter() - start)
    if ends is not None:
        ends.append(done)
    return rate


def draw_cost(env_id: str, blocks: int = 10, repeats: int = 5) -> float:
    """Microseconds per task of filling a sub-env's queue (a block of ``task_block``, as reset).

    What the batched env does per block, one sub-env at a time: its ``_draw`` (the single
    env's ``draw_block``) and, where the queue holds the tasks' tables, its ``_derive``
    (ExpertRouting: who is right, prices and observation slots, by the single env's
    ``block_arrays``; a step derives the blocks of every sub-env drawing in it at once,
    which costs less per block). The best of ``repeats`` timings of ``blocks`` blocks:
    other jobs only ever add time.
    """
    env = gym.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point")
    batched, rng = env.unwrapped, np.random.default_rng(0)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(blocks):
            batched._derive(batched._draw(rng, batched.task_block))
        best = min(best, time.perf_counter() - start)
    return 1e6 * best / (blocks * batched.task_block)


def native_vs_sync(env_id: str, num_envs: int, steps: int,
                   repeats: int) -> dict[str, list[float]]:
    """Each mode's rate in each of ``repeats`` alternating rounds."""
    envs = {mode: gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
            for mode in ("vector_entry_point", "sync")}
    actions = _actions(envs["sync"], steps)
    rates: dict[str, list[float]] = {mode: [] for mode in envs}
    ends: list[int] = []
    for round_ in range(repeats):
        for mode in (list(envs) if round_ % 2 == 0 else list(envs)[::-1]):
            rates[mode].append(_rate(envs[mode], actions,
                                     ends if mode == "vector_entry_point" else None))
    for env in envs.values():
        env.close()
    rates["steps_per_episode"] = [num_envs * steps / max(1, ends[0])]
    rates["draw_us_per_task"] = [draw_cost(env_id)]
    return rates


def scaling(env_id: str, sizes: tuple[int, ...], repeats: int) -> dict[int, float]:
    """The native env's best rate at each size (enough batches to cross a task block)."""
    out = {}
    for n in sizes:
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point")
        actions = _actions(env, min(5000, max(256, 100_000 // n)))
        out[n] = max(_rate(env, actions) for _ in range(repeats))
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
           scale: dict[int, float], num_envs: int, steps: int, repeats: int,
           ppo_steps: int) -> str:
    """The Markdown tables."""
    lines = [
        f"Native batched envs (`gym.make_vec(id, {num_envs}, vectorization_mode="
        f"\"vector_entry_point\")`) against `SyncVectorEnv` of {num_envs} single envs "
        f"(`vectorization_mode=\"sync\"`): {steps} batches of random actions after a "
        f"seeded reset, {repeats} alternating rounds; rates are sub-env steps/s (best "
        "round), the ratio the median over rounds of the ratio within a round. The reset "
        "(not timed) draws each sub-env's first block of tasks (64; TraceRouting-v0 a "
        "permutation of its queries); the timed batches draw another only where they use "
        "more tasks than a block (steps over steps per episode), in both modes: here "
        "ExpertRouting only. A long run adds the draw, µs per task over steps per "
        "episode, to each sub-env step in both modes.",
        "",
        f"Machine: {machine()}",
        "",
        f"| env | native steps/s | SyncVectorEnv steps/s | ratio | >= {TARGET_RATIO:.0f}x "
        "| steps per episode | task draw, µs per task |",
        "| --- | ---: | ---: | ---: | :---: | ---: | ---: |",
    ]
    for env_id in sorted(cost_envs.ENV_IDS):
        if env_id not in pairs:
            lines.append(f"| {env_id} | no batched env yet | | | | | |")
            continue
        rates = pairs[env_id]
        ratio = _median_ratio(rates["vector_entry_point"], rates["sync"])
        meets = "yes" if ratio >= TARGET_RATIO else "**no**"
        lines.append(f"| {env_id} | {max(rates['vector_entry_point']):,.0f} | "
                     f"{max(rates['sync']):,.0f} | {ratio:.1f} | {meets} | "
                     f"{rates['steps_per_episode'][0]:.1f} | "
                     f"{rates['draw_us_per_task'][0]:.1f} |")
    ratio = _median_ratio(ppo["native"], ppo["DummyVecEnv"])
    kwargs = ", ".join(f"{k}={v}" for k, v in PPO_KWARGS.items())
    lines += [
        "",
        f"SB3 PPO (`MlpPolicy`, {kwargs}, one torch thread) on {PPO_ENV}, {PPO_ENVS} "
        f"sub-envs, {ppo_steps} steps per run, {repeats} alternating runs each:",
        "",
        "| vector env | PPO steps/s |",
        "| --- | ---: |",
        f"| native (`agents.vec_env.make_batched_vec_env`) | {max(ppo['native']):,.0f} |",
        f"| `DummyVecEnv` (`make_vec_env`) | {max(ppo['DummyVecEnv']):,.0f} |",
        f"| ratio (median over runs) | {ratio:.2f} |",
        "",
        f"Scaling of the native {PPO_ENV} (best of {repeats}):",
        "",
        "| num_envs | sub-env steps/s | µs per batch step |",
        "| ---: | ---: | ---: |",
    ]
    for n, rate in scale.items():
        lines.append(f"| {n} | {rate:,.0f} | {1e6 * n / rate:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ppo-steps", type=int, default=16_384)
    parser.add_argument("--quick", action="store_true", help="checks the script, measures little")
    parser.add_argument("--output", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    if args.quick:
        num_envs, steps, repeats, ppo_steps, sizes = (QUICK["num_envs"], QUICK["steps"],
                                                      QUICK["repeats"], QUICK["ppo_steps"],
                                                      QUICK["scaling"])
    else:
        num_envs, steps, repeats, ppo_steps, sizes = (args.num_envs, args.steps, args.repeats,
                                                      args.ppo_steps, SCALING)
    for name, value in (("num-envs", num_envs), ("steps", steps), ("repeats", repeats),
                        ("ppo-steps", ppo_steps)):
        if value < 1:
            parser.error(f"--{name}: expected an int >= 1, got {value}")
    pairs = {env_id: native_vs_sync(env_id, num_envs, steps, repeats)
             for env_id in sorted(VECTOR_IDS)}
    ppo = ppo_rates(ppo_steps, repeats)
    scale = scaling(PPO_ENV, sizes, repeats)
    publish(report(pairs, ppo, scale, num_envs, steps, repeats, ppo_steps), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
