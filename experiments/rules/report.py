"""The rule search's page: ``rule_search.md`` from what :mod:`experiments.rules.runner` found."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.evaluation import format_table
from experiments.shared.task_sets import described_set, tasks_option


def markdown(report: Mapping[str, Any]) -> str:
    """The report's Markdown page: the family, then one table per env."""
    scale = report["scale"]
    lines = [
        "# The best fixed rule per environment (issue #10's rule search)", "",
        "The family (`agents/rules.py`): open-loop call patterns (the same action at turn "
        f"k of every task, beam search of width {scale['beam']} up to {scale['max_turns']} "
        "turns), single thresholds on one observed feature (one action above the "
        f"threshold, another below; up to {scale['cuts']} cut points per feature) and the "
        "project's hand-written rules. Ranked by mean episode return on "
        f"{scale['train_tasks']} training tasks (task seed {report['train_seed']}); the "
        "frozen rule is the simplest one within one standard error of the top one. Scored "
        f"on {scale['episodes']} evaluation tasks of task seed {report['eval_seed']} (the "
        "tasks of `lora_ppo`'s tables for FlightPlanner and ToolBench; TraceRouting: "
        "searched on its train split, scored on every query of its test split); 95% "
        f"intervals over tasks ({scale['resamples']} resamples). "
        f"{described_set(report) + ' ' if described_set(report) else ''}Reproduce with "
        f"`python -m experiments rules"
        f"{'' if scale['name'] == 'default' else ' --scale ' + scale['name']}"
        f"{tasks_option(report)}`.", ""]
    names = {"chosen": "frozen rule", "top": "top-ranked", "open_loop": "best open-loop"}
    for entry in report["envs"]:
        rows, seen = {}, set()
        for key, row in entry["rows"].items():
            if row["label"] not in seen:  # the top rule is often the frozen one
                rows[f"{names[key]}: {row['label']}"] = row
                seen.add(row["label"])
        chosen, top = entry["rows"]["chosen"]["training"], entry["rows"]["top"]["training"]
        lines += [f"## {entry['env_id']}", "",
                  f"{entry['candidates']} rules scored on training tasks; top mean return "
                  f"{top['mean_return']:.4f} (standard error {top['stderr']:.4f}), the frozen "
                  f"rule's {chosen['mean_return']:.4f}.", "", format_table(rows), ""]
    return "\n".join(lines)
