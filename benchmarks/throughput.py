"""Steps per second of every registered env through ``gym.make``, next to CartPole-v1.

Usage: ``python benchmarks/throughput.py [--steps N] [--repeats R] [--quick] [--output FILE.md]
[--check]``

Every env of :data:`cost_envs.ENV_IDS`, CartPole included, runs the same number of steps
with random actions from its own seeded ``action_space.sample()``, resets included, in
``--repeats`` rounds; the table gives each env's best rate and its ratio to CartPole's
(the median over rounds of the ratio within a round; the issue's target is >= 0.4x).
Actions are drawn before the clock starts so the comparison is of the envs, not of the
spaces' samplers (``MultiBinary.sample`` costs more than ``Discrete.sample``). The rounds
are interleaved (every env once per round, the order rotating each round), so a burst of
load from other processes slows every env of a round alike instead of one env's whole
measurement: the ratios hold better than the rates on a shared machine. ``--quick``
(2,000 steps, one round) checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import cost_envs

REFERENCE = "CartPole-v1"
TARGET_RATIO = 0.4
#: ``--quick``: enough steps to cross several episodes of every env, in about a second.
QUICK = {"steps": 2_000, "repeats": 1}


def pass_rate(env: Any, actions: Sequence[Any], seed: int) -> float:
    """Steps per second of one pass over ``actions`` (resets included); also
    ``multitenant_throughput.py``'s single-agent side."""
    start = time.perf_counter()
    env.reset(seed=seed)  # same seed each repeat: every run does identical work
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def measure(env_ids: Sequence[str], steps: int, repeats: int,
            seed: int = 0) -> dict[str, list[float]]:
    """Each env's steps per second in each of ``repeats`` interleaved rounds.

    Raises:
        ValueError: ``steps`` or ``repeats`` below 1.
    """
    if steps < 1 or repeats < 1:
        raise ValueError(f"throughput: expected steps >= 1 and repeats >= 1, got steps={steps}, "
                         f"repeats={repeats}")
    envs = {env_id: gym.make(env_id) for env_id in env_ids}
    actions = {}
    for env_id, env in envs.items():
        env.action_space.seed(seed)
        actions[env_id] = [env.action_space.sample() for _ in range(steps)]
    rates: dict[str, list[float]] = {env_id: [] for env_id in env_ids}
    order = list(env_ids)
    for round_ in range(repeats):
        for env_id in order[round_ % len(order):] + order[:round_ % len(order)]:
            rates[env_id].append(pass_rate(envs[env_id], actions[env_id], seed))
    for env in envs.values():
        env.close()
    return rates


def steps_per_second(env_id: str, steps: int, repeats: int, seed: int = 0) -> float:
    """Best rate of one env over ``repeats`` identical runs of ``steps`` steps."""
    return max(measure([env_id], steps, repeats, seed)[env_id])


def ratios(rates: dict[str, list[float]]) -> dict[str, float]:
    """Each env's median over rounds of its rate over CartPole's rate in the same round."""
    reference = rates[REFERENCE]
    return {env_id: float(np.median([r / c for r, c in zip(rs, reference, strict=True)]))
            for env_id, rs in rates.items()}


def machine() -> str:
    """The machine, the versions that set the speed, and the load when the run ended."""
    load = ", load average {:.1f} / {:.1f} / {:.1f} (1 / 5 / 15 min)".format(
        *os.getloadavg()) if hasattr(os, "getloadavg") else ""
    return (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{os.cpu_count()} CPUs, numpy {np.__version__}, gymnasium {gym.__version__}{load}"
    )


def report(rates: dict[str, list[float]], steps: int, repeats: int) -> str:
    """The Markdown table: each env's best rate and its ratio to CartPole's, round by round."""
    relative = ratios(rates)
    lines = [
        f"Throughput through `gym.make`: {steps} random steps, resets included, "
        f"{repeats} interleaved rounds (every env once per round); steps/s is each env's "
        "best round, the ratio the median over rounds of the env's rate over CartPole's "
        "in the same round. The absolute rates move with the machine's load; the ratios "
        "less so.",
        "",
        f"Machine: {machine()}",
        "",
        f"| env | steps/s | µs/step | ratio to {REFERENCE} | >= {TARGET_RATIO}x |",
        "| --- | ---: | ---: | ---: | :---: |",
    ]
    for env_id, rounds in rates.items():
        rate, ratio = max(rounds), relative[env_id]
        meets = "ref" if env_id == REFERENCE else ("yes" if ratio >= TARGET_RATIO else "**no**")
        lines.append(f"| {env_id} | {rate:,.0f} | {1e6 / rate:.1f} | {ratio:.2f} | {meets} |")
    return "\n".join(lines) + "\n"


def publish(table: str, output: Path | None) -> None:
    """Print a benchmark's tables and, given ``--output``, write them there all at once.

    The one home of the throughput scripts' output (this one's, ``vector_throughput.py``'s
    and ``multitenant_throughput.py``'s).
    """
    print(table)
    if output is not None:
        from agents.files import write_files_atomic

        write_files_atomic(output.parent, {output.name: table})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['steps']} steps, {QUICK['repeats']} round: checks the "
                             "script, measures little")
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 if an env misses the target")
    args = parser.parse_args(argv)
    steps, repeats = ((QUICK["steps"], QUICK["repeats"]) if args.quick
                      else (args.steps, args.repeats))
    env_ids = [REFERENCE, *sorted(cost_envs.ENV_IDS)]
    try:
        rates = measure(env_ids, steps, repeats)
    except ValueError as error:
        parser.error(str(error))
    publish(report(rates, steps, repeats), args.output)
    relative = ratios(rates)
    below = [e for e in env_ids[1:] if relative[e] < TARGET_RATIO]
    return 1 if args.check and below else 0


if __name__ == "__main__":
    sys.exit(main())
