"""The learned-prior tables, from the units :mod:`experiments.learned_prior.runner` ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.learners.supervised import SupervisedConfig
from agents.seeds import LOG_TASK_SEED
from cost_envs.envs.toolbench import SKILLS
from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments.budgets.report import share_text
from experiments.learned_prior.settings import (
    ENV_ID,
    LOG_ENVS,
    TABLE_SEEDS,
    Scale,
)
from experiments.shared.common import machine
from experiments.shared.gaps import method_share, share_cell
from experiments.shared.intervals import mean_cell, verdict


def _size(steps: int) -> str:
    return f"{steps // 1_000_000}M" if steps % 1_000_000 == 0 else f"{steps // 1000}k" \
        if steps % 1000 == 0 else f"{steps:,}"


def render(fixed: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], scale: Scale,
           supervised: SupervisedConfig, command: str) -> str:
    """The Markdown file: shares of the gap, the paired differences, the fitted parameters.

    ``fixed``: the fixed unit (the gap's ends, the true-prior teacher, the control teacher
    and the true parameters); ``runs``: the ``true`` and ``learned`` units.
    """
    rule, planner, bayes, control = (np.asarray(fixed[key], dtype=np.float64)
                                     for key in ("rule", "planner", "bayes", "control"))
    resamples = scale.resamples

    def by_seed(kind: str, steps: int, what: str) -> list[Mapping[str, Any]]:
        return [r[what] for r in sorted((r for r in runs if r["kind"] == kind
                                         and r["steps"] == steps), key=lambda r: r["seed"])]

    true_students = by_seed("true", 0, "student")
    true_returns = np.array([r["returns"] for r in true_students])
    n_seeds, n_tasks = true_returns.shape

    def row(label: str, scored: Sequence[Mapping[str, Any]]) -> str:
        returns = np.array([r["returns"] for r in scored])
        entry = method_share(label, returns.tolist(), rule.tolist(), planner.tolist())
        success = np.mean([r["success"] for r in scored])
        per_seed = ", ".join(f"{v:.2f}" for v in entry["per_seed"])
        return (f"| {label} | {mean_cell(returns, resamples)} | {success:.3f} | "
                f"{share_cell(entry)} | {per_seed} |")

    def fixed_row(label: str, returns: np.ndarray) -> str:
        entry = method_share(label, [returns.tolist()], rule.tolist(), planner.tolist())
        return f"| {label} | {mean_cell(returns, resamples)} | - | {share_cell(entry)} | - |"

    lines = [
        f"# The Bayes teacher with a learned prior ({ENV_ID.split('/')[-1]}, issue #38 "
        "point 2)", "",
        "The LoRA allocator taught by the Bayes reference with DAgger (the `lora/bayes` row "
        f"of `experiments.lora_ppo`: teacher `{supervised.teacher}`, {supervised.episodes:,} "
        f"teacher episodes, {supervised.dagger_rounds} DAgger rounds of "
        f"{supervised.dagger_episodes:,} student episodes, {supervised.epochs} epochs a fit, "
        "the shipped pretrained base), taught either by the true-prior teacher (the row as "
        "the tables train it) or by a teacher that knows ToolBench's generative model's form "
        "(its code) but not its parameters, which it fits from logged episodes "
        "(`agents.planning.learned_prior`). Only the teacher differs: the same seeds, "
        "tasks, DAgger rounds and fits. Every row is scored on the same "
        f"{n_tasks} evaluation tasks (task seed {scale.eval_seed}); {n_seeds} training seeds.",
        "",
        "**The logs.** The uniform random allocator (each tool called with probability 1/2, "
        f"`RandomAllocator`'s law) on the batched env ({LOG_ENVS} sub-envs, reset seed "
        f"{LOG_TASK_SEED:,} + 1000 x the training seed: each seed fits its own logs, so the "
        "intervals cover the spread of the fit too; a seed's smaller log is the start of its "
        "larger one). Random calls reach every tool at every skill and difficulty, so every "
        "fitted parameter is identified; the rule (one tool per skill) would show only 6 of "
        "the 48 capabilities.",
        "",
        "**Fitted, from observations, `terminated` and `info`'s `cost`, `flops` and `calls` "
        "only** (maximum likelihood): the stage-count law; the skill laws (intermediate "
        "stages, last stage); the difficulty law `delta ~ Beta(a, b)`, `d = clip(delta + "
        "N(0, sigma), 0, 1)` from the difficulties of the stages each episode reached "
        "(missing at random: reaching a stage depends on what was shown and on luck, never "
        "on the unseen difficulties); every tool's capability at every skill from whether "
        "each step cleared its stage; the prices and FLOPs by least squares.",
        "",
        "**Not fitted, taken as the family's form:** the answer's law (answer length 8-20, "
        "the vocabulary, the recall `0.3 + 0.7 q`, the hallucination rate `U(0, 1)`): an "
        "episode shows it only through its answer's F1 at the end, a mixture over the unseen "
        "answer that is not fitted here. Not fitted because they are the user's: the F1 "
        "threshold and the Eq. 1 weights (the objective), the tools' names and roles.",
        "",
        "**The teacher** is `BayesToolBenchPlanner` on a twin env with the fitted pool, "
        f"{scale.particles:,} particles drawn from the fitted prior and its posterior weighed "
        "with the fitted difficulty law (`DifficultyLaw`). The control row builds the same "
        "pipeline from the true parameters: what drawing the particles anew costs when the "
        "fit is exact.",
        "",
        "Return: mean Eq. 1 episode return [95% interval over seeds and tasks, over tasks "
        f"for the fixed rows; {resamples:,} bootstrap resamples]. Success: the share of "
        "episodes that succeed. Share: of the gap from the best fixed row "
        f"({fixed['rule_label']}, {rule.mean():.3f}) to the planner ({planner.mean():.3f}), "
        "Fieller's interval over seeds and tasks (`cost_envs.metrics.bootstrap_gap_closed`); "
        "for the teachers of a learned prior the seeds are the fits.",
        "", f"Machine: {machine()}.", "", f"Command: `{command}`.", "",
        "| row | return | success | share of the gap | share per seed |",
        "| --- | --- | --- | --- | --- |",
        f"| {fixed['rule_label']} (best fixed row) | {mean_cell(rule, resamples)} | - | 0 | - |",
        row("student, true prior (the `lora/bayes` row)", true_students),
    ]
    for steps in scale.sizes:
        lines.append(row(f"student, prior learned from {_size(steps)} steps",
                         by_seed("learned", steps, "student")))
    lines += [fixed_row("teacher, true prior (the Bayes reference)", bayes),
              fixed_row("teacher, the pipeline at the true parameters (control)", control)]
    for steps in scale.sizes:
        lines.append(row(f"teacher, prior learned from {_size(steps)} steps",
                         by_seed("learned", steps, "teacher")))
    lines += [f"| planner (knows the task, not the luck) | {mean_cell(planner, resamples)} "
              "| - | 1 | - |", ""]
    lines += _summary(true_returns, rule, planner, scale, by_seed)
    lines += _paired(true_returns, bayes, rule, planner, resamples, scale, by_seed)
    if n_seeds > TABLE_SEEDS:

        def first(kind: str, steps: int, what: str) -> list[Any]:
            return by_seed(kind, steps, what)[:TABLE_SEEDS]

        lines += [f"### Seeds 0-{TABLE_SEEDS - 1} alone (the tables' {TABLE_SEEDS})", "",
                  *_summary(true_returns[:TABLE_SEEDS], rule, planner, scale, first)[:2],
                  *_paired(true_returns[:TABLE_SEEDS], bayes, rule, planner, resamples,
                           scale, first)[2:]]
    lines += _parameters(fixed["true"], scale, by_seed)
    return "\n".join(lines)


def _summary(true_returns: np.ndarray, rule: np.ndarray, planner: np.ndarray, scale: Scale,
             by_seed: Any) -> list[str]:
    """What remains of the true-prior student's share at each log size, and the time taken."""
    true_share = share_text(bootstrap_gap_closed(true_returns, rule, planner))
    parts = []
    for steps in scale.sizes:
        returns = np.array([r["returns"] for r in by_seed("learned", steps, "student")])
        difference = bootstrap_gap_closed(returns - true_returns + rule, rule, planner)
        parts.append(f"{_size(steps)} steps {share_text(difference)}")
    learned = [r for steps in scale.sizes for r in by_seed("learned", steps, "seconds")]
    true = by_seed("true", 0, "seconds")
    fits = "; ".join(
        f"{_size(steps)} steps {np.mean(by_seed('learned', steps, 'fit_seconds')):.0f} s"
        for steps in scale.sizes)
    return [f"**What remains.** The true-prior student closes {true_share} of the gap. The "
            "learned-prior student minus it, paired by seed and task, in shares of the gap: "
            + "; ".join(parts) + ". Where an interval holds 0, no loss is resolved at this "
            "precision; its low end bounds the loss the data allow.", "",
            f"Time: a true-prior unit {np.mean(true):.0f} s, a learned-prior unit (log, fit, "
            f"teacher scored, student trained and scored) {np.mean(learned):.0f} s on "
            f"average, of which logging and fitting: {fits} (one worker process each, "
            "on the machine above, shared).", ""]


def _paired(true_returns: np.ndarray, bayes: np.ndarray, rule: np.ndarray,
            planner: np.ndarray, resamples: int, scale: Scale, by_seed: Any) -> list[str]:
    """Learned minus true, students paired by seed and task, teachers by task (per fit)."""
    lines = ["## Paired: learned prior minus true prior", "",
             "Students: seed s of one against seed s of the other (the same traces' tasks, "
             "the same evaluation tasks). Teachers: each fit's teacher against the one "
             "true-prior teacher, over the tasks. The share of a difference is its mean over "
             "the gap, with the interval of a share of (difference + rule) against the rule.",
             "",
             "| log | students: return | students: share of the gap | teachers: return | "
             "teachers: share of the gap |", "| --- | --- | --- | --- | --- |"]
    for steps in scale.sizes:
        cells = []
        for what, reference in (("student", true_returns), ("teacher", bayes[None, :])):
            returns = np.array([r["returns"] for r in by_seed("learned", steps, what)])
            difference = returns - reference
            _, low, high = bootstrap_mean_ci(difference, n_resamples=resamples)
            share = bootstrap_gap_closed(difference + rule, rule, planner)
            cells += [f"{mean_cell(difference, resamples, True)}",
                      f"{share_text(share)} ({verdict(low, high)})"]
        lines.append(f"| {_size(steps)} steps | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _spread(values: np.ndarray) -> str:
    """``mean (min-max)`` over the seeds' fits."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{values.mean():.3f} ({values.min():.3f}-{values.max():.3f})"


def _parameters(true: Mapping[str, Any], scale: Scale, by_seed: Any) -> list[str]:
    """The fitted parameters against the true ones: the mean (range) over the seeds' fits."""
    fits = {steps: by_seed("learned", steps, "fitted") for steps in scale.sizes}
    header = "| parameter | true | " + " | ".join(
        f"{_size(steps)} steps" for steps in scale.sizes) + " |"
    lines = ["## Fitted parameters against the true ones", "",
             "Each cell: the mean over the seeds' fits (their range). Episodes and clears: "
             "how many episodes each log held and how many of its steps showed whether they "
             "cleared their stage (a step at an episode's last turn does not).", "",
             header, "| --- | --- |" + " --- |" * len(scale.sizes)]

    def add(label: str, truth: float | str, value: Any) -> None:
        cells = " | ".join(_spread(np.asarray([value(f) for f in fits[steps]], dtype=float))
                           for steps in scale.sizes)
        shown = truth if isinstance(truth, str) else f"{truth:.3f}"
        lines.append(f"| {label} | {shown} | {cells} |")

    for name, key in (("episodes", "episodes"), ("clears", "clears")):
        cells = " | ".join(f"{np.mean([f[key] for f in fits[steps]]):,.0f}"
                           for steps in scale.sizes)
        lines.append(f"| {name} | - | {cells} |")
    for k in range(3):
        add(f"P(k = {k + 2})", true["stage_counts"][k], lambda f, k=k: f["stage_counts"][k])
    for j, skill in enumerate(("retrieval", "math", "web", "code", "reasoning")):
        add(f"P(stage skill {skill})", true["stage_skills"][j],
            lambda f, j=j: f["stage_skills"][j])
    add("P(last skill writing)", true["answer_skills"][1], lambda f: f["answer_skills"][1])
    for j, name in enumerate(("Beta a", "Beta b", "noise sigma")):
        add(name, true["difficulty"][j], lambda f, j=j: f["difficulty"][j])
    caps = np.asarray(true["capabilities"])
    add("capabilities: mean absolute error", "0",
        lambda f: np.abs(np.asarray(f["capabilities"]) - caps).mean())
    add("capabilities: largest absolute error", "0",
        lambda f: np.abs(np.asarray(f["capabilities"]) - caps).max())
    costs, flops = np.asarray(true["costs"]), np.asarray(true["flops"])
    for label, key, truth in (("prices", "costs", costs), ("FLOPs", "flops", flops)):
        worst = [max(float(np.abs(np.asarray(f[key]) / truth - 1).max()) for f in fits[s])
                 for s in scale.sizes]
        cells = " | ".join(f"{value:.1e}" for value in worst)
        lines.append(f"| {label}: largest relative error (over the fits) | 0 | {cells} |")
    smallest = min(scale.sizes)
    lines += ["", f"The capabilities fitted on {_size(smallest)} steps (the mean over the "
              "seeds' fits), true in brackets; rows: tools, columns: skills.", "",
              "| tool | " + " | ".join(SKILLS) + " |", "| --- |" + " --- |" * len(SKILLS)]
    mean_caps = np.mean([np.asarray(f["capabilities"]) for f in fits[smallest]], axis=0)
    for i, name in enumerate(true["names"]):
        lines.append(f"| {name} | " + " | ".join(
            f"{mean_caps[i, s]:.2f} [{caps[i, s]:.2f}]" for s in range(len(SKILLS))) + " |")
    return [*lines, ""]
