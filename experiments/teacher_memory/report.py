"""The teacher-memory table, from the units :mod:`experiments.teacher_memory.runner` ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.learners.supervised import SupervisedConfig
from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments.budgets.report import share_text
from experiments.shared.common import machine
from experiments.shared.gaps import method_share, share_cell
from experiments.shared.intervals import mean_cell, verdict
from experiments.teacher_memory.settings import ARMS, ENV_ID, TABLE_SEEDS, Scale


def render(fixed: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], scale: Scale,
           supervised: SupervisedConfig, command: str) -> str:
    """The Markdown file: each arm's return and share of the gap, and the paired differences.

    ``fixed``: the fixed rows' per-task returns (``rule``, ``planner``, ``bayes``) and the
    rule's label; ``runs``: one per (arm, seed) with its per-task ``returns``.
    """
    rule, planner, bayes = (np.asarray(fixed[key], dtype=np.float64)
                            for key in ("rule", "planner", "bayes"))
    arms = {arm: np.array([r["returns"] for r in sorted(
        (r for r in runs if r["arm"] == arm), key=lambda r: r["seed"])]) for arm in ARMS}
    n_seeds, n_tasks = arms["memoryless"].shape
    resamples = scale.resamples
    lines = [
        f"# The Bayes teacher's memory, given to its student ({ENV_ID.split('/')[-1]}, "
        "issue #38 point 4)", "",
        "The LoRA allocator taught by the Bayes reference with DAgger (the `lora/bayes` row "
        f"of `experiments.lora_ppo`: teacher `{supervised.teacher}`, {supervised.episodes:,} "
        f"teacher episodes, {supervised.dagger_rounds} DAgger rounds of "
        f"{supervised.dagger_episodes:,} student episodes, {supervised.epochs} epochs a fit, "
        "the shipped pretrained base), trained with "
        f"{n_seeds} seeds in each arm and scored on the same {n_tasks} evaluation tasks "
        f"(task seed {scale.eval_seed}). What each sees:", "",
        "* the teacher: the observation and, in its recurrent state, the difficulty of every "
        "stage already cleared (the current stage's is in the observation);",
        "* the memoryless student: the 17-slot observation, which shows a stage's difficulty "
        "only while it is the current one;",
        "* the student with the teacher's history: `gym.make(\"cost_envs/ToolBench-v0\", "
        "cleared_difficulties=True)`, the same 17 slots and the difficulty of each stage "
        "cleared (21 slots); its frozen base is the shipped one with zero weights on the 4 "
        "new slots, so the history reaches the policy through the LoRA adapter and the heads "
        "that training fits.", "",
        "Return: mean Eq. 1 episode return [95% interval over seeds and tasks, over tasks "
        f"for the fixed rows; {resamples:,} bootstrap resamples]. Success: the share of "
        "episodes that succeed. Share: of the gap from the best fixed row "
        f"({fixed['rule_label']}, {rule.mean():.3f}) to the planner ({planner.mean():.3f}), "
        "Fieller's interval over seeds and tasks (`cost_envs.metrics.bootstrap_gap_closed`).",
        "", f"Machine: {machine()}.", "", f"Command: `{command}`.", "",
        "| row | return | success | share of the gap | share per seed |",
        "| --- | --- | --- | --- | --- |",
        f"| {fixed['rule_label']} (best fixed row) | {mean_cell(rule, resamples)} | - | 0 | - |",
    ]
    for arm, (_, label) in ARMS.items():
        entry = method_share(label, arms[arm].tolist(), rule.tolist(), planner.tolist())
        success = np.mean([r["success"] for r in runs if r["arm"] == arm])
        per_seed = ", ".join(f"{v:.2f}" for v in entry["per_seed"])
        lines.append(f"| student, {label} | {mean_cell(arms[arm], resamples)} | "
                     f"{success:.3f} | {share_cell(entry)} | {per_seed} |")
    teacher = method_share("Bayes reference", [bayes.tolist()], rule.tolist(),
                           planner.tolist())
    lines += [f"| Bayes reference (the teacher) | {mean_cell(bayes, resamples)} | - | "
              f"{share_cell(teacher)} | - |",
              f"| planner (knows the task, not the luck) | {mean_cell(planner, resamples)} "
              "| - | 1 | - |", ""]
    lines += ["## Paired: with the history minus memoryless", "",
              *_paired(arms, bayes, rule, planner, resamples, n_seeds)]
    if n_seeds > TABLE_SEEDS:
        first = {arm: runs[:TABLE_SEEDS] for arm, runs in arms.items()}
        entries = {arm: method_share(arm, first[arm].tolist(), rule.tolist(),
                                     planner.tolist()) for arm in ARMS}
        shares = "; ".join(f"{arm} {share_cell(entry)}" for arm, entry in entries.items())
        lines += [f"### Seeds 0-{TABLE_SEEDS - 1} alone (the tables' {TABLE_SEEDS})", "",
                  f"Shares of the gap: {shares}.", "",
                  *_paired(first, bayes, rule, planner, resamples, TABLE_SEEDS)]
    return "\n".join(lines)


def _paired(arms: Mapping[str, np.ndarray], bayes: np.ndarray, rule: np.ndarray,
            planner: np.ndarray, resamples: int, n_seeds: int) -> list[str]:
    """The paired differences' lines: with the history minus memoryless, the teacher minus each.

    Seed s of one arm against seed s of the other (the same seeds, traces and tasks); the
    share of a difference is its mean over the gap, with the interval of a share of
    (difference + rule) against the rule (:func:`cost_envs.metrics.bootstrap_gap_closed`).
    """
    difference = arms["history"] - arms["memoryless"]
    share = bootstrap_gap_closed(difference + rule, rule, planner)
    _, low, high = bootstrap_mean_ci(difference, n_resamples=resamples)
    lines = [f"Over the same {n_seeds} seeds and tasks: "
             f"{mean_cell(difference, resamples, True)} of mean return, {share_text(share)} "
             f"of the gap ({verdict(low, high)}); per seed "
             + ", ".join(f"{v:+.3f}" for v in difference.mean(axis=1)) + ".", "",
             "The teacher minus each student, paired over the tasks (the teacher's one run "
             "against each seed):", ""]
    for arm, (_, label) in ARMS.items():
        behind = bayes[None, :] - arms[arm]
        _, low, high = bootstrap_mean_ci(behind, n_resamples=resamples)
        gap = bootstrap_gap_closed(behind + rule, rule, planner)
        lines.append(f"* {label}: {mean_cell(behind, resamples, True)} of mean return, "
                     f"{share_text(gap)} of the gap ({verdict(low, high)})")
    return [*lines, ""]
