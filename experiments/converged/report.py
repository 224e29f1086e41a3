"""The converged-budget table and CSV, from the runs :mod:`experiments.converged.runner` kept."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments.budgets.settings import BUDGET_ROWS
from experiments.converged.settings import ENV_ID, FIXED_FILE, REFERENCE_KEYS, RUNS, Scale
from experiments.shared.common import machine
from experiments.shared.kept import run_file
from experiments.shared.task_sets import (
    DEFAULT_TASKS,
    described_set,
    tagged,
    task_seed,
    where_chosen,
)


@dataclass(frozen=True)
class Fixed:
    """The fixed rows on the tasks: labels, per-task returns, and which one is the rule."""

    labels: dict[str, str]
    returns: dict[str, np.ndarray]
    rule: str


def interval(values: np.ndarray | Sequence[float], resamples: int) -> str:
    """``mean [low, high]`` of a bootstrap over the array's seeds (if 2-D) and tasks."""
    mean, low, high = bootstrap_mean_ci(np.asarray(values), n_resamples=resamples)
    return f"{mean:.4f} [{low:.4f}, {high:.4f}]"


def share(values: np.ndarray | Sequence[float], rule: np.ndarray | Sequence[float],
          planner: np.ndarray | Sequence[float]) -> str:
    """The share of the rule-to-planner gap closed, paired over tasks, with its interval."""
    point, low, high = bootstrap_gap_closed(values, rule, planner)
    return f"{point:.2f} [{low:.2f}, {high:.2f}]"


def render(learned: dict[str, np.ndarray], fixed: Fixed, scale: Scale,
           minutes: dict[str, float], tasks: str = DEFAULT_TASKS,
           runs: str = RUNS, cpu_minutes: dict[str, float] | None = None,
           fused: bool = False, fixed_runs: str | None = None) -> tuple[str, str]:
    """The Markdown report and the CSV from each learned row's seeds x tasks returns.

    ``minutes``: each learned row's mean wall time per seed, ``cpu_minutes`` its process
    CPU time where known; ``tasks``: the set every row was scored on; ``runs``: the folder
    of the learned rows' kept runs the CSV names, ``fixed_runs`` that of the fixed rows'
    file (default ``runs``; a fused report's is the exact one's); ``fused``: the rows were
    trained on FastPPO's fused path.
    """
    scored = tagged({}, tasks)  # what the page says of its set
    first_seed = task_seed(tasks)
    chosen = "" if where_chosen(scored, "") == "" else f" {where_chosen(scored, '')}"
    returns = fixed.returns
    rule, planner, bayes = returns[fixed.rule], returns["planner"], returns["bayes-planner"]
    r = scale.resamples
    n_tasks = len(rule)
    names = ", ".join(BUDGET_ROWS[key].label for key in learned)
    path = (" on FastPPO's fused path (`fused_loss=True`: float-close to SB3's updates, not "
            "bit for bit)") if fused else ""
    cpu = cpu_minutes or {}
    title = f"# {ENV_ID}: learned rows at their converged budget on {n_tasks:,} tasks"
    lines = [title + (", FastPPO's fused path" if fused else ""), "",
             f"{names}: each trained {scale.seeds} seeds x {scale.timesteps:,} env steps on "
             f"16 batched sub-envs{path}, scored after its last update on {n_tasks:,} evaluation "
             f"tasks of task seed {first_seed}, beside every fixed row on the same "
             "tasks. Return: mean "
             "Eq. 1 return [95% interval; over seeds and tasks for the learned rows, over "
             f"tasks for the fixed rows]; share: of the gap from the best fixed row{chosen} "
             f"({fixed.labels[fixed.rule]}, {rule.mean():.4f}) to the planner "
             f"({planner.mean():.4f}), paired over tasks.", "",
             *([described_set(scored), ""] if described_set(scored) else []),
             f"Machine: {machine()}. Wall time per seed: "
             + "; ".join(f"{BUDGET_ROWS[key].label} {minutes[key]:.1f} min"
                         + (f" ({cpu[key]:.1f} min of CPU)" if key in cpu else "")
                         for key in learned) + ".", "",
             "| row | return | share of the gap |", "| --- | --- | --- |"]
    for key, label in fixed.labels.items():
        lines.append(f"| {label} | {interval(returns[key], r)} | "
                     f"{share(returns[key], rule, planner)} |")
    for key, values in learned.items():
        lines.append(f"| **{BUDGET_ROWS[key].label}** ({len(values)} seeds) | "
                     f"{interval(values, r)} | {share(values, rule, planner)} |")
    lines += ["", "Paired differences of mean return [95% interval]:", ""]
    for key, values in learned.items():
        label = BUDGET_ROWS[key].label
        lines += [f"- {label} - best fixed row: {interval(values - rule, r)}",
                  f"- {label} - Bayes reference: {interval(values - bayes, r)}",
                  f"- planner - {label}: {interval(planner - values, r)}"]
    lines += [f"- Bayes reference - best fixed row: {interval(bayes - rule, r)}", ""]
    lines += [f"{BUDGET_ROWS[key].label} per seed: "
              + ", ".join(f"{value:.4f}" for value in values.mean(axis=1))
              for key, values in learned.items()]
    lines.append("")
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    writer.writerow(["row", "seed", "mean_return", "kept_in"])
    for key in (fixed.rule, *REFERENCE_KEYS):
        writer.writerow([key, "", f"{returns[key].mean():.6f}",
                         f"{fixed_runs or runs}/{FIXED_FILE}"])
    for key, values in learned.items():
        for seed, seed_values in enumerate(values):
            writer.writerow([key, seed, f"{seed_values.mean():.6f}",
                             run_file(Path(runs), key, seed).as_posix()])
    return "\n".join(lines), rows.getvalue()
