"""A learned row at its converged budget, scored on enough tasks to resolve it (issue #23).

FlightPlanner-v1's PPO learning curve (:mod:`experiments.budgets`,
``benchmarks/results/budgets_FlightPlanner-v1.md``) stops improving at about 2M env steps,
where its five seeds agree within 0.002 of return (0.960 to 0.962 at 4M) and sit a few
thousandths above the one-turn rule. On the curve's 1000 evaluation tasks that gain is
inside the task noise (share of the gap 0.27 [-0.24, 0.61]): the interval is wide because
of the tasks, not the seeds. This experiment trains the row at that converged budget and
scores it on ten times as many tasks, so the tasks' share of the interval shrinks by about
sqrt(10):

- PPO with the curve's settings (:data:`experiments.budgets.BUDGET_ROWS` ``"ppo"``: the
  paper's A.4 configuration on 16 batched sub-envs), 5 training seeds x :data:`STEPS` env
  steps, each scored once, after its last update, on the first :data:`EPISODES` evaluation
  tasks of task seed 0 (the tables' set: the curve's 1000 tasks are its first 1000);
- every fixed row of the env's table (:func:`experiments.lora_ppo.score_baselines`) on the
  same tasks: the best fixed row (the gap's rule end), the planner (which knows the task,
  not the luck; the other end) and the Bayes reference (which knows the prior, not the
  task: the non-privileged reference the issue asks PPO to be measured against).

Every learned figure is a two-level bootstrap over seeds and tasks, paired over the tasks
(:func:`cost_envs.metrics.bootstrap_mean_ci` on seeds x tasks arrays); fixed rows are
deterministic given the tasks, so their intervals are over tasks. The table gives each
row's return and share of the rule-to-planner gap, and the paired differences that answer
the issue: PPO - best fixed row, PPO - Bayes reference, Bayes reference - best fixed row.

``python -m experiments.converged [--scale default|smoke] [--jobs N] [--out DIR]`` writes
``converged_FlightPlanner-v1.md`` and ``.csv`` (the per-task returns of PPO's seeds and of
the three reference rows, :func:`experiments.gaps.encode_scores`, from which every figure
can be recomputed) into ``DIR`` (default ``benchmarks/results``), all or nothing. The
default scale takes about 2 CPU-hours (five 2M-step runs and 10,000 Bayes-reference
episodes); ``smoke`` seconds.
"""

from __future__ import annotations

import argparse
import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.files import write_files_atomic
from cost_envs.config import integer
from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments import budgets
from experiments.common import machine, spawn_pool
from experiments.gaps import encode_scores

ENV_ID = "cost_envs/FlightPlanner-v1"
#: Where FlightPlanner-v1's PPO curve stops improving (budgets_FlightPlanner-v1.md).
STEPS = 2_000_000
#: Evaluation tasks: ten times the curve's 1000.
EPISODES = 10_000
#: The rows whose per-task returns the CSV keeps (the gap's ends and the reference).
REFERENCE_KEYS = ("bayes-planner",)
OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


@dataclass(frozen=True)
class Scale:
    """Steps, seeds and evaluation tasks of one run of the experiment."""

    name: str
    timesteps: int
    seeds: int
    episodes: int
    resamples: int = 2000

    def __post_init__(self) -> None:
        for name in ("timesteps", "seeds", "episodes", "resamples"):
            integer(getattr(self, name), f"Scale.{name}", minimum=1)

    def budget_scale(self) -> budgets.Scale:
        """The curve's :class:`experiments.budgets.Scale` with one point, at the end."""
        return budgets.Scale(self.name, self.timesteps, self.seeds, (self.timesteps,),
                             episodes=self.episodes)


SCALES = {"default": Scale("default", STEPS, 5, EPISODES),
          "smoke": Scale("smoke", 1024, 2, 30, resamples=200)}


def interval(values: np.ndarray | Sequence[float], resamples: int) -> str:
    """``mean [low, high]`` of a bootstrap over the array's seeds (if 2-D) and tasks."""
    mean, low, high = bootstrap_mean_ci(np.asarray(values), n_resamples=resamples)
    return f"{mean:.4f} [{low:.4f}, {high:.4f}]"


def share(values: np.ndarray | Sequence[float], rule: Sequence[float],
          planner: Sequence[float], resamples: int) -> str:
    """The share of the rule-to-planner gap closed, paired over tasks, with its interval."""
    point, low, high = bootstrap_gap_closed(values, rule, planner, n_resamples=resamples)
    return f"{point:.2f} [{low:.2f}, {high:.2f}]"


def render(ppo: np.ndarray, fixed: Any, rule_key: str, scale: Scale, minutes: float
           ) -> tuple[str, str]:
    """The Markdown report and the CSV from PPO's seeds x tasks returns and the fixed rows."""
    returns = {key: np.asarray(values) for key, values in fixed.returns.items()}
    rule, planner, bayes = returns[rule_key], returns["planner"], returns["bayes-planner"]
    r = scale.resamples
    lines = [f"# {ENV_ID}: PPO at its converged budget on {ppo.shape[1]:,} tasks", "",
             f"PPO (the learning curve's settings) trained {ppo.shape[0]} seeds x "
             f"{scale.timesteps:,} env steps on 16 batched sub-envs, scored after its last "
             f"update on {ppo.shape[1]:,} evaluation tasks of task seed 0, beside every "
             "fixed row on the same tasks. Return: mean Eq. 1 return [95% interval; over "
             "seeds and tasks for PPO, over tasks for the fixed rows]; share: of the gap "
             f"from the best fixed row ({fixed.entries[rule_key]['label']}, "
             f"{rule.mean():.4f}) to the planner ({planner.mean():.4f}), paired over tasks.",
             "", f"Machine: {machine()}. Wall time per PPO seed: {minutes:.1f} min.", "",
             "| row | return | share of the gap |", "| --- | --- | --- |"]
    for key, entry in fixed.entries.items():
        lines.append(f"| {entry['label']} | {interval(returns[key], r)} | "
                     f"{share(returns[key], rule, planner, r)} |")
    lines += [f"| **PPO** ({ppo.shape[0]} seeds) | {interval(ppo, r)} | "
              f"{share(ppo, rule, planner, r)} |", "",
              "Paired differences of mean return [95% interval]:", "",
              f"- PPO - best fixed row: {interval(ppo - rule, r)}",
              f"- PPO - Bayes reference: {interval(ppo - bayes, r)}",
              f"- Bayes reference - best fixed row: {interval(bayes - rule, r)}",
              f"- planner - PPO: {interval(planner - ppo, r)}", "",
              "PPO per seed: " + ", ".join(f"{value:.4f}" for value in ppo.mean(axis=1)), ""]
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    writer.writerow(["row", "seed", "mean_return", "returns"])
    for key in (rule_key, "planner", *REFERENCE_KEYS):
        writer.writerow([key, "", f"{returns[key].mean():.6f}", encode_scores(returns[key])])
    for seed, values in enumerate(ppo):
        writer.writerow(["ppo", seed, f"{values.mean():.6f}", encode_scores(values)])
    return "\n".join(lines), rows.getvalue()


def report(out: Path, scale: str | Scale = "default", jobs: int = 2, log: Any = print
           ) -> list[Path]:
    """Train, score and write ``converged_FlightPlanner-v1.md``/``.csv``; returns the paths."""
    from experiments.lora_ppo import SCALES as TABLE_SCALES
    from experiments.lora_ppo import Scale as TableScale
    from experiments.lora_ppo import gap_ends, score_baselines

    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    chosen = SCALES[scale] if isinstance(scale, str) else scale
    grid = [budgets.Job(ENV_ID, "ppo", seed, chosen.budget_scale())
            for seed in range(chosen.seeds)]
    log(f"converged: {len(grid)} PPO runs of {chosen.timesteps:,} steps in {jobs} process(es)")
    if jobs <= 1:
        results = [budgets.run_job(job) for job in grid]
    else:
        with spawn_pool(jobs) as pool:
            results = list(pool.map(budgets.run_job, grid))
    log(f"converged: scoring the fixed rows on {chosen.episodes:,} tasks")
    fixed = score_baselines(ENV_ID, TableScale(
        "converged", 1, 1, chosen.episodes, chosen.resamples,
        rule_tasks=TABLE_SCALES["default"].rule_tasks), eval_seed=0)
    rule_key, _ = gap_ends(fixed)
    ppo = np.array([result["curve"][-1]["returns"] for result in results])
    minutes = float(np.mean([result["seconds"] for result in results])) / 60
    markdown, columns = render(ppo, fixed, rule_key, chosen, minutes)
    name = ENV_ID.split("/")[-1]
    return write_files_atomic(out, {f"converged_{name}.md": markdown,
                                    f"converged_{name}.csv": columns})


def main(argv: list[str] | None = None) -> None:
    """Run the experiment at ``--scale`` and write its report."""
    parser = argparse.ArgumentParser(prog="python -m experiments.converged",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: expected an integer >= 1, got {args.jobs}")
    report(args.out, args.scale, jobs=args.jobs)


if __name__ == "__main__":
    main()
