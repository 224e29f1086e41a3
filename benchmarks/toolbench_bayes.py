"""The ToolBench Bayes teacher's cost a step, against the code before #37 kept its solves.

Usage: ``python benchmarks/toolbench_bayes.py [--episodes N] [--repeats R] [--before REV]
[--output FILE.md]``

The LoRA rows taught by the Bayes reference (``lora/bayes``, ``lora-ppo/bayes`` of
``experiments/lora_ppo``) ask :class:`~agents.planning.toolbench_bayes.BayesToolBenchPlanner`
for a label at every step of their 1,500 teacher episodes and 1,000 DAgger student
episodes. The teacher keeps, per (stages, stage, skills still to come), what no
observation moves (:meth:`~agents.planning.toolbench_bayes.BayesToolBenchPlanner.hypotheses`:
the hypotheses' values after the current stage, the particles' likelihoods, the answer's
payoffs) and solves only the current stage at a step. Here the default teacher (1,000
particles) plays ``N`` episodes (default 1,500, the supervised stage's) of task seed 0
as it is, and with the ``posterior_values`` of ``REV``'s module (``git show``; default
9992e79, before #37: every hypothesis solved at every step), ``R`` interleaved rounds,
each on a fresh teacher (its build and first solves included, as in a training run).
Both must give the same labels (checked; the floats are the same,
``tests/test_planning_bayes.py`` pins them). The table gives each one's median ms a step
and the ratio (each round's, the median: the absolute times move with the machine's load,
the two teachers of a round alike).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import gymnasium as gym
import numpy as np

import cost_envs  # noqa: F401  (registers the environments)
from agents.evaluation import rollout
from agents.planning.toolbench_bayes import BayesToolBenchPlanner

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO)]  # run from a checkout
from throughput import machine, publish  # noqa: E402  (the one home of the output)

from experiments.shared.common import cpu_model  # noqa: E402  (the CPU's model name)

ENV = "cost_envs/ToolBench-v0"
BEFORE = "9992e79"  # the last commit before #37 kept the teacher's solves
MODULE = "agents/planning/toolbench_bayes.py"


def teacher_at(rev: str) -> type[BayesToolBenchPlanner]:
    """This checkout's teacher with the ``posterior_values`` of ``rev``'s module."""
    source = subprocess.run(["git", "show", f"{rev}:{MODULE}"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"toolbench_bayes_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:{MODULE}", "exec"), module.__dict__)
    return type(f"BayesToolBenchPlanner_{rev}", (BayesToolBenchPlanner,),
                {"posterior_values": module.BayesToolBenchPlanner.posterior_values})


def play(teacher_class: type[BayesToolBenchPlanner], episodes: int
         ) -> tuple[np.ndarray, float]:
    """The labels of ``episodes`` episodes of a fresh teacher, and its ms a step."""
    env = gym.make(ENV)
    start = time.perf_counter()
    teacher = teacher_class(env)
    labels: list[np.ndarray] = []
    for i in range(episodes):
        actions = rollout(teacher, env, seed=0 if i == 0 else None, record_steps=True).actions
        assert actions is not None  # record_steps keeps them
        labels.append(actions)
    elapsed = time.perf_counter() - start
    steps = np.concatenate(labels)
    return steps, 1000.0 * elapsed / len(steps)


def measure(episodes: int, repeats: int, before: str) -> tuple[dict[str, list[float]], int]:
    """Each teacher's ms a step per round (this checkout's, ``before``'s), a round's steps."""
    old = teacher_at(before)
    times: dict[str, list[float]] = {"kept": [], "before": []}
    steps = 0
    for _ in range(repeats):
        kept, times_kept = play(BayesToolBenchPlanner, episodes)
        again, times_again = play(old, episodes)
        if not np.array_equal(kept, again):
            raise AssertionError(f"the teacher's labels are not those of {before}")
        times["kept"].append(times_kept)
        times["before"].append(times_again)
        steps = len(kept)
    return times, steps


def report(times: dict[str, list[float]], episodes: int, steps: int, repeats: int,
           before: str) -> str:
    """The Markdown table."""
    kept, again = (statistics.median(times[key]) for key in ("kept", "before"))
    ratio = statistics.median(b / k for b, k in zip(times["before"], times["kept"], strict=True))
    return "\n".join([
        f"ToolBench-v0's Bayes teacher (1,000 particles), {episodes} episodes of task seed 0 "
        f"({steps} steps, the same labels both ways), a fresh teacher each time (build and "
        f"first solves included), median of {repeats} interleaved rounds; "
        "`python benchmarks/toolbench_bayes.py`.",
        "",
        f"CPU: {cpu_model()}",
        "",
        f"Machine: {machine()}",
        "",
        "| teacher | ms/step | rounds (ms/step) |",
        "| --- | ---: | --- |",
        f"| hypotheses kept (per stages, stage, skills to come) | {kept:.2f} | "
        f"{', '.join(f'{t:.2f}' for t in times['kept'])} |",
        f"| {before}'s (every hypothesis solved at every step, before #37) | {again:.2f} | "
        f"{', '.join(f'{t:.2f}' for t in times['before'])} |",
        "",
        f"Ratio {before}'s / kept, the median over rounds of each round's: **{ratio:.1f}x**",
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1500,
                        help="episodes a round (1500: the supervised stage's teacher episodes)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default=BEFORE,
                        help=f"the revision whose posterior_values to time against ({BEFORE})")
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.repeats < 1:
        parser.error("--episodes and --repeats must be >= 1")
    times, steps = measure(args.episodes, args.repeats, args.before)
    publish(report(times, args.episodes, steps, args.repeats, args.before), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
