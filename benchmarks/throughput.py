"""Steps per second of every registered env through ``gym.make``, next to CartPole-v1.

Usage: ``python benchmarks/throughput.py [--steps N] [--repeats R] [--output FILE.md] [--check]``

Every env, CartPole included, runs the same number of steps with random actions from its
own seeded ``action_space.sample()``, resets included, best of ``--repeats`` runs; the
table gives each env's rate and its ratio to CartPole's (the issue's target is >= 0.4x).
Actions are drawn before the clock starts so the comparison is of the envs, not of the
spaces' samplers (``MultiBinary.sample`` costs more than ``Discrete.sample``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import cost_envs

REFERENCE = "CartPole-v1"
TARGET_RATIO = 0.4


def steps_per_second(env_id: str, steps: int, repeats: int, seed: int = 0) -> float:
    """Best rate over ``repeats`` identical runs of ``steps`` steps (resets included)."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    actions = [env.action_space.sample() for _ in range(steps)]
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        env.reset(seed=seed)  # same seed each repeat: every run does identical work
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        best = max(best, steps / (time.perf_counter() - start))
    env.close()
    return best


def machine() -> str:
    return (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{os.cpu_count()} CPUs, numpy {np.__version__}, gymnasium {gym.__version__}"
    )


def report(rates: dict[str, float], steps: int, repeats: int) -> str:
    reference = rates[REFERENCE]
    lines = [
        f"Throughput through `gym.make`: {steps} random steps, resets included, "
        f"best of {repeats}.",
        "",
        f"Machine: {machine()}",
        "",
        f"| env | steps/s | µs/step | ratio to {REFERENCE} | >= {TARGET_RATIO}x |",
        "| --- | ---: | ---: | ---: | :---: |",
    ]
    for env_id, rate in rates.items():
        ratio = rate / reference
        meets = "ref" if env_id == REFERENCE else ("yes" if ratio >= TARGET_RATIO else "**no**")
        lines.append(f"| {env_id} | {rate:,.0f} | {1e6 / rate:.1f} | {ratio:.2f} | {meets} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 if an env misses the target")
    args = parser.parse_args(argv)
    env_ids = [REFERENCE, *sorted(cost_envs.ENV_IDS)]
    rates = {env_id: steps_per_second(env_id, args.steps, args.repeats) for env_id in env_ids}
    table = report(rates, args.steps, args.repeats)
    print(table)
    if args.output is not None:
        args.output.write_text(table, encoding="utf-8")
    below = [e for e in env_ids[1:] if rates[e] / rates[REFERENCE] < TARGET_RATIO]
    return 1 if args.check and below else 0


if __name__ == "__main__":
    sys.exit(main())
