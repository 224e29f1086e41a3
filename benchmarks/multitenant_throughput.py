"""Steps per second of the multi-tenant ParallelEnv next to 8 steps of its single-agent env.

Usage: ``python benchmarks/multitenant_throughput.py [--steps N] [--repeats R] [--tenants K]
[--quick] [--output FILE.md]``

For each multi-tenant id, one multi-tenant step (K = 8 tenants by default) does up to K
tenants' steps; the reference is K steps of the base env through ``gym.make``, as a user
steps it. Two settings: ``open`` (no capacity, no budget: every tenant steps every step,
so the ratio is the env's whole overhead) and ``limited`` (capacity 2 per model, an
organisation budget and surge prices: the full admission path runs, but waiting tenants
do no work, so this ratio flatters the env and is shown for the admission's cost only).
The ratio is (multi-tenant steps/s) / (single-agent steps/s / K): 1.0
means the shared limits, the admission and the observations cost nothing over stepping
the K envs by hand; the issue's target is >= 0.4. Random actions are drawn before the
clock starts; rounds interleave the two (each once per round, order alternating), and the
ratio is the median over rounds of the ratio within a round, so load from other
processes slows both alike. ``--quick`` checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import cost_envs  # noqa: F401 - registers the single-agent ids
from cost_envs.multiagent import MULTIAGENT_ENV_IDS, parallel_env

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, pass_rate, publish

TARGET_RATIO = 0.4
QUICK = {"steps": 200, "repeats": 1}
#: The shared limits of each setting.
SETTINGS: dict[str, dict[str, Any]] = {
    "open": {"capacity": None},
    "limited": {"capacity": 2, "org_budget": 1.0, "budget_window": 10, "price_slope": 0.5},
}


def _run_multi(env: Any, actions: list[dict[str, np.ndarray]], seed: int) -> float:
    start = time.perf_counter()
    env.reset(seed=seed)
    for joint in actions:
        env.step(joint)
        if not env.agents:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def measure(env_id: str, setting: str, steps: int, repeats: int, tenants: int,
            seed: int = 0) -> tuple[list[float], list[float]]:
    """Multi-tenant steps/s and single-agent steps/s of ``env_id``, one pair per round.

    Raises:
        ValueError: ``steps``, ``repeats`` or ``tenants`` below 1.
    """
    if min(steps, repeats, tenants) < 1:
        raise ValueError(f"multitenant_throughput: expected steps, repeats and tenants >= 1, "
                         f"got {steps}, {repeats}, {tenants}")
    multi = parallel_env(env_id, n_tenants=tenants, max_steps=100, **SETTINGS[setting])
    single = gym.make(MULTIAGENT_ENV_IDS[env_id])
    rng = np.random.default_rng(seed)
    m = multi.n_models
    joint = [{a: rng.integers(0, 2, m, dtype=np.int8) for a in multi.possible_agents}
             for _ in range(steps)]
    alone = [rng.integers(0, 2, m, dtype=np.int8) for _ in range(steps * tenants)]
    multi_rates, single_rates = [], []
    for round_ in range(repeats):
        runs = [lambda: multi_rates.append(_run_multi(multi, joint, seed)),
                lambda: single_rates.append(pass_rate(single, alone, seed))]
        for run in runs if round_ % 2 == 0 else runs[::-1]:
            run()
    return multi_rates, single_rates


def ratio(multi: list[float], single: list[float], tenants: int) -> float:
    """Median over rounds of multi-tenant steps/s over (single-agent steps/s / tenants)."""
    return float(np.median([m / (s / tenants) for m, s in zip(multi, single, strict=True)]))


def report(results: dict[tuple[str, str], tuple[list[float], list[float]]], steps: int,
           repeats: int, tenants: int) -> str:
    """The Markdown table: each id's rates and ratio."""
    lines = [
        f"Multi-tenant throughput: {steps} steps of {tenants} tenants against "
        f"{steps * tenants} steps of the single-agent env "
        f"through `gym.make`, random actions, resets included, {repeats} interleaved "
        "rounds; rates are each side's best round, the ratio the median over rounds of "
        f"(multi-tenant steps/s) / (single-agent steps/s / {tenants}). Settings: "
        + "; ".join(f"{name} {limits}" for name, limits in SETTINGS.items())
        + ". Only `open` measures overhead: under `limited` waiting tenants do no work.",
        "",
        f"Machine: {machine()}",
        "",
        "| id | setting | multi-tenant steps/s | single-agent steps/s | ratio | "
        f">= {TARGET_RATIO} |",
        "| --- | --- | ---: | ---: | ---: | :---: |",
    ]
    for (env_id, setting), (multi, single) in results.items():
        r = ratio(multi, single, tenants)
        lines.append(f"| {env_id} | {setting} | {max(multi):,.0f} | {max(single):,.0f} | "
                     f"{r:.2f} | {'yes' if r >= TARGET_RATIO else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="checks the script only")
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    steps, repeats = ((QUICK["steps"], QUICK["repeats"]) if args.quick
                      else (args.steps, args.repeats))
    try:
        results = {(env_id, setting): measure(env_id, setting, steps, repeats, args.tenants)
                   for env_id in MULTIAGENT_ENV_IDS for setting in SETTINGS}
    except ValueError as error:
        parser.error(str(error))
    publish(report(results, steps, repeats, args.tenants), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
