"""The learned-prior tables, from the units :mod:`experiments.learned_prior.runner` ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from agents.learners.supervised import SupervisedConfig
from agents.seeds import LOG_TASK_SEED
from cost_envs.envs.toolbench import SKILLS
from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments.budgets.report import share_text
from experiments.learned_prior.settings import (
    ENV_ID,
    FLIGHT_ENV_ID,
    LOG_ENVS,
    TABLE_SEEDS,
    FlightScale,
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

    row = partial(_learned_row, rule=rule, planner=planner, resamples=resamples)
    fixed_row = partial(_fixed_row, rule=rule, planner=planner, resamples=resamples)

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


def render_flight(fixed: Mapping[str, Any], runs: Sequence[Mapping[str, Any]],
                  scale: FlightScale, supervised: SupervisedConfig, command: str) -> str:
    """FlightPlanner-v1's file: the teachers (and students, if run) against the true prior.

    ``fixed``: the fixed unit (the gap's ends, the true-prior teacher, the control teacher
    and the true parameters); ``runs``: the ``learned`` units (and ``true`` ones with
    students).
    """
    rule, planner, bayes, control = (np.asarray(fixed[key], dtype=np.float64)
                                     for key in ("rule", "planner", "bayes", "control"))
    resamples = scale.resamples

    def by_seed(kind: str, steps: int, what: str) -> list[Any]:
        return [r[what] for r in sorted((r for r in runs if r["kind"] == kind
                                         and r["steps"] == steps), key=lambda r: r["seed"])]

    row = partial(_learned_row, rule=rule, planner=planner, resamples=resamples)
    fixed_row = partial(_fixed_row, rule=rule, planner=planner, resamples=resamples)

    n_tasks = len(rule)
    env_name = FLIGHT_ENV_ID.split("/")[-1]
    lines = [
        f"# The Bayes teacher with a learned prior ({env_name}, issue #38 point 2)", "",
        "FlightPlanner-v1's Bayes reference (`BayesFlightPlanner`: 2,000 particles of the "
        "task prior, 32 scenarios a decision, margin 2) taught by either the true prior (the "
        "env's network generator and pool) or a prior whose form is the family's code and "
        "whose parameters are fitted from logged episodes "
        "(`agents.planning.learned_prior_flight`). Every teacher is scored on the same "
        f"{n_tasks} validation tasks (task seed {scale.eval_seed}, the tables'); each log "
        f"size has {scale.seeds} fits (seeds), each of its own log."
        + (" Students: the LoRA allocator taught by each teacher with DAgger (the "
           "`lora/bayes` row's settings), seed s of one against seed s of the other."
           if scale.students else " Teachers only (the students' arm: `--students`)."),
        "",
        "**The logs.** The uniform random allocator (each agent called with probability "
        f"1/2) on FlightPlanner-v1's batched env ({LOG_ENVS} sub-envs, reset seed "
        f"{LOG_TASK_SEED:,} + 1000 x the seed; a seed's smaller log is the start of its "
        "larger one).",
        "",
        "**Fitted, from observations, `terminated` and `info`'s `cost`, `flops` and `calls` "
        "only:** the agents' strengths, read exactly from the observation (a lone planner's "
        "`planner_strength`; the factors `1 - 0.5 s` and `1 - s` by which a search and a "
        "validator multiply v1's `broken_survival`, by least squares on the calls); prices "
        "and FLOPs by least squares; and the network generator's edge probability, fare "
        "factor range `(lo, hi)` (a fare is `60 + 300 x distance x U(lo, hi)`) and budget "
        "slack range `(lo, hi)` by a simulated moment fit (no closed-form likelihood): the "
        "share of `h* = 2`, quantiles of the budget level per `h*`, and, at each "
        "episode's first turn that calls a planner and no validator (the random action is "
        "independent of the task there), the plan's legs over `h*`, the search drops and "
        "quantiles of the quote over the budget, matched by tasks of the family's form "
        f"drawn at the candidate parameters ({scale.n_sim:,} on common random numbers, the "
        "log's own first-turn actions played on them by the env's rules), Nelder-Mead from "
        "a generic start (fare factor (0.5, 1.5), slack (0.1, 0.3); the edge probability "
        "first alone, the best of 12 values in [0.05, 0.6]: the share of `h* = 2` is not "
        "monotone in it), at most "
        f"{scale.fit_evaluations} evaluations.",
        "",
        "**Not fitted, taken as the family's form:** 9 airports placed uniformly; the fare "
        "law's intercept and slope 60 and 300 (the observation shows only ratios to the "
        "budget, so fares are known up to scale, and the factor's range then spans every "
        "fare law of the form); the trip's law; the broken route's price multiplier "
        "`U(0.9, 1.1)` (shown only by quotes of plans later found broken; the belief's "
        "grid); the dynamics' constants (detour share 0.6, notice rate 0.5, markup 0.5, fare "
        "inflation 0.02, 7 turns). The user's: the Eq. 1 weights, the agents' names and "
        "roles.",
        "",
        "**The teacher** is `BayesFlightPlanner` on a twin FlightPlanner-v1 with the fitted "
        f"pool, {scale.particles:,} particles drawn at the fitted parameters on the "
        "reference's own particle seed, its posterior weighing the budget level with the "
        "fitted slack range. The control builds the same pipeline at the true parameters: "
        "its particles are the reference's bit for bit, so it must equal the reference.",
        "",
        "Return: mean Eq. 1 episode return [95% interval over fits and tasks, over tasks "
        f"for the fixed rows; {resamples:,} bootstrap resamples]. Share: of the gap from "
        f"the best fixed row ({fixed['rule_label']}, {rule.mean():.3f}) to the planner "
        f"({planner.mean():.3f}), Fieller's interval (`cost_envs.metrics."
        "bootstrap_gap_closed`).",
        "", f"Machine: {machine()}.", "", f"Command: `{command}`.", "",
        "| row | return | success | share of the gap | share per fit |",
        "| --- | --- | --- | --- | --- |",
        f"| {fixed['rule_label']} (best fixed row) | {mean_cell(rule, resamples)} | - | 0 | - |",
        fixed_row("teacher, true prior (the Bayes reference)", bayes),
        fixed_row("teacher, the pipeline at the true parameters (control)", control)]
    for steps in scale.sizes:
        lines.append(row(f"teacher, prior learned from {_size(steps)} steps",
                         by_seed("learned", steps, "teacher")))
    if scale.students:
        lines.append(row("student, true prior", by_seed("true", 0, "student")))
        for steps in scale.sizes:
            lines.append(row(f"student, prior learned from {_size(steps)} steps",
                             by_seed("learned", steps, "student")))
    lines += [f"| planner (knows the task, not the luck) | {mean_cell(planner, resamples)} "
              "| - | 1 | - |", ""]
    lines += ["## Paired: learned-prior teacher minus true-prior teacher", "",
              "Each fit's teacher against the one true-prior teacher, over the tasks (fits "
              "and tasks resampled). The share of a difference is its mean over the gap, "
              "with the interval of a share of (difference + rule) against the rule. The "
              "last column: the learned teacher against the best fixed row, paired by task.",
              "",
              "| teacher | return minus true prior's | share of the gap | return minus the "
              "rule's |", "| --- | --- | --- | --- |"]
    compared = [("control (true parameters)", control[None, :])] + [
        (f"learned from {_size(steps)} steps",
         np.array([r["returns"] for r in by_seed("learned", steps, "teacher")]))
        for steps in scale.sizes]
    for label, returns in compared:
        difference = returns - bayes
        _, low, high = bootstrap_mean_ci(difference, n_resamples=resamples)
        share = bootstrap_gap_closed(difference + rule, rule, planner)
        _, r_low, r_high = bootstrap_mean_ci(returns - rule, n_resamples=resamples)
        lines.append(f"| {label} | {mean_cell(difference, resamples, True)} | "
                     f"{share_text(share)} ({verdict(low, high)}) | "
                     f"{mean_cell(returns - rule, resamples, True)} "
                     f"({verdict(r_low, r_high)}) |")
    lines.append("")
    if scale.students:
        true_returns = np.array([r["returns"] for r in by_seed("true", 0, "student")])
        lines += ["## Paired: learned-prior student minus true-prior student", "",
                  "Seed s of one against seed s of the other (the same traces' tasks, the "
                  "same evaluation tasks), in return and in shares of the gap.", "",
                  "| log | return | share of the gap |", "| --- | --- | --- |"]
        for steps in scale.sizes:
            returns = np.array([r["returns"] for r in by_seed("learned", steps, "student")])
            difference = returns - true_returns
            _, low, high = bootstrap_mean_ci(difference, n_resamples=resamples)
            share = bootstrap_gap_closed(difference + rule, rule, planner)
            lines.append(f"| {_size(steps)} steps | {mean_cell(difference, resamples, True)} "
                         f"| {share_text(share)} ({verdict(low, high)}) |")
        true_time = np.mean(by_seed("true", 0, "seconds"))
        lines += ["", f"A true-prior student's unit took {true_time:.0f} s on average "
                  f"(the row's settings: teacher `{supervised.teacher}`, "
                  f"{supervised.episodes:,} teacher episodes, {supervised.dagger_rounds} "
                  f"DAgger rounds of {supervised.dagger_episodes:,}, {supervised.epochs} "
                  "epochs a fit, the shipped pretrained base).", ""]
    fit_times = "; ".join(
        f"{_size(steps)} steps {np.mean(by_seed('learned', steps, 'fit_seconds')):.0f} s"
        for steps in scale.sizes)
    teacher_times = np.mean([t for steps in scale.sizes
                             for t in by_seed("learned", steps, "teacher_seconds")])
    lines += [f"Time: logging and fitting {fit_times}; a teacher's {n_tasks} episodes "
              f"{teacher_times:.0f} s; the fixed rows (rule search, planner, reference, "
              f"control) {fixed['seconds']:.0f} s (one process, on the machine above, "
              "shared).", ""]
    lines += _flight_parameters(fixed["true"], scale, by_seed)
    return "\n".join(lines)


def _flight_parameters(true: Mapping[str, Any], scale: Scale, by_seed: Any) -> list[str]:
    """FlightPlanner's fitted parameters against the true ones (mean, range over fits)."""
    fits = {steps: by_seed("learned", steps, "fitted") for steps in scale.sizes}
    lines = ["## Fitted parameters against the true ones", "",
             "Each cell: the mean over the fits (their range). First turns: the first-turn "
             "steps the moment fit matched; distance: its final objective.", "",
             "| parameter | true | " + " | ".join(f"{_size(steps)} steps"
                                                  for steps in scale.sizes) + " |",
             "| --- | --- |" + " --- |" * len(scale.sizes)]

    def add(label: str, truth: float | str, value: Any) -> None:
        cells = " | ".join(_spread(np.asarray([value(f) for f in fits[steps]], dtype=float))
                           for steps in scale.sizes)
        shown = truth if isinstance(truth, str) else f"{truth:.3f}"
        lines.append(f"| {label} | {shown} | {cells} |")

    for name in ("episodes", "first_turns"):
        cells = " | ".join(f"{np.mean([f[name] for f in fits[steps]]):,.0f}"
                           for steps in scale.sizes)
        lines.append(f"| {name.replace('_', ' ')} | - | {cells} |")
    add("edge probability", true["edge_probability"], lambda f: f["edge_probability"])
    for j, end in enumerate(("lo", "hi")):
        add(f"fare factor {end}", true["fare_factor"][j], lambda f, j=j: f["fare_factor"][j])
    for j, end in enumerate(("lo", "hi")):
        add(f"slack {end}", true["slack"][j], lambda f, j=j: f["slack"][j])
    strengths = np.asarray(true["strengths"])
    add("strengths: largest absolute error", "0",
        lambda f: np.abs(np.asarray(f["strengths"]) - strengths).max())
    for label, key in (("prices", "costs"), ("FLOPs", "flops")):
        truth = np.asarray(true[key])
        add(f"{label}: largest relative error", "0",
            lambda f, key=key, truth=truth: np.abs(np.asarray(f[key]) / truth - 1).max())
    add("moment distance", "-", lambda f: f["distance"])
    return [*lines, ""]


def _learned_row(label: str, scored: Sequence[Mapping[str, Any]], rule: np.ndarray,
                 planner: np.ndarray, resamples: int) -> str:
    """A learned row of either env's table: return, success, share of the gap, per seed."""
    returns = np.array([r["returns"] for r in scored])
    entry = method_share(label, returns.tolist(), rule.tolist(), planner.tolist())
    success = np.mean([r["success"] for r in scored])
    per_seed = ", ".join(f"{v:.2f}" for v in entry["per_seed"])
    return (f"| {label} | {mean_cell(returns, resamples)} | {success:.3f} | "
            f"{share_cell(entry)} | {per_seed} |")


def _fixed_row(label: str, returns: np.ndarray, rule: np.ndarray, planner: np.ndarray,
               resamples: int) -> str:
    """A row of one deterministic allocator: its return and share, over the tasks."""
    entry = method_share(label, [returns.tolist()], rule.tolist(), planner.tolist())
    return f"| {label} | {mean_cell(returns, resamples)} | - | {share_cell(entry)} | - |"
