"""FlightPlanner's Bayes reference against the one-turn rule and the planner (issue #23).

Usage: ``python benchmarks/flight_bayes.py [--episodes N] [--seed S] [--output FILE.json]``

On FlightPlanner-v0 and -v1, the evaluation tasks of task seed ``--seed`` (``make
reproduce``'s 400 tasks of seed 0 by default): the mean Eq. 1 return of the one-turn rule
(the best fixed row of the FlightPlanner tables), the privileged planner, the Bayes
reference (:mod:`agents.planning.flight_bayes`) and, on v1, the Bayes reference blind
to v1's history slots (``history_slots=False``: it plays v1 as v0), each with its 95%
bootstrap interval over tasks; the share of the rule-to-planner gap each non-privileged
row closes (paired over tasks, :func:`cost_envs.metrics.bootstrap_gap_closed`), the
paired return differences of the Bayes rows with the rule, the planner and each other,
and the milliseconds per episode of each row (wall time on this machine: a shared one
varies).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import cost_envs  # noqa: F401  (registers the environments)
from agents.baselines import FAMILY_BASELINES
from agents.evaluation import rollout
from agents.planning import BayesFlightPlanner, planner
from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci

ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1")


def rows(**bayes: Any) -> dict[str, tuple[Callable[[gym.Env], Any], tuple[str, ...]]]:
    """Row key -> (factory, the envs it runs on); ``bayes``: the Bayes rows' arguments."""
    return {
        "one-turn": (FAMILY_BASELINES["one-turn"], ENVS),
        "planner": (planner, ENVS),
        "bayes-planner": (lambda env: BayesFlightPlanner(env, **bayes), ENVS),
        "bayes-planner (v1 slots ignored)": (
            lambda env: BayesFlightPlanner(env, history_slots=False, **bayes), ENVS[1:]),
    }


def play(factory: Callable[[gym.Env], Any], env_id: str, episodes: int, seed: int
         ) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-task returns and successes of ``factory``'s agent, and its ms per episode."""
    env = gym.make(env_id)
    agent = factory(env)
    start = time.perf_counter()
    runs = [rollout(agent, env, seed=seed if i == 0 else None) for i in range(episodes)]
    elapsed = time.perf_counter() - start
    return (np.array([run.episode_return for run in runs]),
            np.array([bool(run.info.get("success")) for run in runs]),
            1000.0 * elapsed / episodes)


def measure(episodes: int, seed: int, envs: list[str], **bayes: Any) -> dict[str, Any]:
    """Every row on every env it runs on: the report's numbers."""
    report: dict[str, Any] = {"episodes": episodes, "task_seed": seed, "bayes": bayes,
                              "envs": {}}
    for env_id in envs:
        returns: dict[str, np.ndarray] = {}
        table: dict[str, Any] = {}
        for key, (factory, where) in rows(**bayes).items():
            if env_id not in where:
                continue
            returns[key], success, ms = play(factory, env_id, episodes, seed)
            table[key] = {"return": list(bootstrap_mean_ci(returns[key])),
                          "success": float(success.mean()), "ms_per_episode": ms}
            print(f"{env_id} {key}: return {table[key]['return']}, success "
                  f"{table[key]['success']:.3f}, {ms:.1f} ms/episode", flush=True)
        for key in returns:
            if key.startswith("bayes"):
                table[key]["gap_share"] = list(bootstrap_gap_closed(
                    returns[key], returns["one-turn"], returns["planner"]))
                for other in ("one-turn", "planner"):  # paired over tasks
                    table[key][f"minus_{other}"] = list(bootstrap_mean_ci(
                        returns[key] - returns[other]))
        blind = "bayes-planner (v1 slots ignored)"
        if blind in returns:
            table[blind]["minus_bayes"] = list(bootstrap_mean_ci(
                returns[blind] - returns["bayes-planner"]))
        report["envs"][env_id] = table
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=32, help="the Bayes rows' scenarios")
    parser.add_argument("--particles", type=int, default=2000, help="the Bayes rows' prior")
    parser.add_argument("--margin", type=float, default=None,
                        help="the Bayes rows' margin (default: BayesFlightPlanner's)")
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    bayes = {"samples": args.samples, "n_particles": args.particles}
    if args.margin is not None:
        bayes["margin"] = args.margin
    report = measure(args.episodes, args.seed, args.envs, **bayes)
    text = json.dumps(report, indent=1)
    if args.output is not None:
        args.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
