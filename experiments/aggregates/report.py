"""The aggregates' page: ``aggregates.md`` from what :mod:`experiments.aggregates.runner` pooled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _cell(values: Sequence[float]) -> str:
    return f"{values[0]:.2f} [{values[1]:.2f}, {values[2]:.2f}]"


def left_out(result: Mapping[str, Any]) -> str:
    """The sentences naming the tasks and methods an experiment's aggregates leave out."""
    text = ""
    if result["same_tasks"]:
        text += (" Left out, the same questions and luck as a newer version's task of this "
                 "experiment (pooling both would count them twice): " + ", ".join(
                     f"{old} (as {new})" for old, new in result["same_tasks"].items()) + ".")
    if result["without_gap"]:
        text += f" Left out, the planner not above the rule: {', '.join(result['without_gap'])}."
    if result["unresolved_gap"]:
        text += (" Left out, the planner above the rule but not resolved (the 95% paired "
                 "interval of planner minus rule over the episodes includes 0; the table's "
                 "shares have no bounded interval): "
                 f"{', '.join(result['unresolved_gap'])}.")
    if result["partial"]:
        text += (" Left out, trained on some of these tasks only (their shares are in their "
                 "experiment's tables): " + "; ".join(
                     f"{label} ({len(have)} of {len(result['tasks'])})"
                     for label, have in result["partial"].items()) + ".")
    return text


def render(report: Mapping[str, Any]) -> str:
    """``aggregates.md``."""
    lines = ["# Aggregates across envs and profiles", "",
             "Each learned method's per-seed *share of the gap closed* between the best fixed "
             "rule (0) and the planner that knows the task but not its luck (1), pooled over "
             "an experiment's tasks (envs, profiles, tiers): interquartile mean and mean, and "
             "the probability that a run of one method beats a run of another on a random "
             f"task (rliable {report['rliable']}'s estimators). 95% intervals over seeds and "
             f"tasks: {report['reps']:,} bootstrap replicates, each drawing every table's "
             "evaluation episodes (the same draw for the rule and every run) and each "
             "method's seeds within each table, over each table's gap (fixed, as rliable "
             "normalises: the gap's own uncertainty is in each table's interval). Tasks "
             "whose gap is not resolved, and "
             "older versions of an env whose newer version asks the same questions, are left "
             "out. Written by `python -m experiments aggregates` from the JSON files beside "
             "this one.", ""]
    for experiment, reason in report.get("not_aggregated", {}).items():
        lines += [f"## {experiment}", "", f"Not aggregated: {reason}", ""]
    for experiment, result in report["experiments"].items():
        lines += [f"## {experiment}", "",
                  f"Score: {result['score']}; 0 = {result['rule']}, 1 = {result['reference']}. "
                  f"Tasks ({len(result['tasks'])}): {', '.join(result['tasks'])}."
                  + left_out(result),
                  "", "| Method | Seeds | IQM | Mean |", "|---|---|---|---|"]
        for method, values in result["methods"].items():
            lines.append(f"| {result['labels'][method]} | {values['runs']} | "
                         f"{_cell(values['iqm'])} | {_cell(values['mean'])} |")
        if result["probability_of_improvement"]:
            lines += ["", "| P(row beats column) | " + " | ".join(
                result["labels"][m] for m in result["methods"]) + " |",
                "|---|" + "---|" * len(result["methods"])]
            for x in result["methods"]:
                cells = [("-" if x == y else
                          _cell(result["probability_of_improvement"][f"{x} > {y}"]))
                         for y in result["methods"]]
                lines.append(f"| {result['labels'][x]} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
