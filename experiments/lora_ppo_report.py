"""The LoRA-Guided PPO tables' files: Markdown, JSON, the Pareto and learning-curve figures.

Rendered from the reports :func:`experiments.lora_ppo.reproduce` returns; every file is
rendered before any is written (:func:`write_reports`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluation import format_table
from agents.files import write_files_atomic
from cost_envs.metrics import pareto_front
from experiments import gaps
from experiments.common import figure_png
from experiments.lora_ppo import PAPER_ENVS, PRIVILEGED_ROWS


def markdown_table(report: Mapping[str, Any]) -> str:
    """The report's Markdown page: what was run, then the table."""
    scale = report["scale"]
    rows = {entry["label"]: entry for entry in report["methods"].values()}
    rules = "".join(f"\n{entry['label']}: {entry['rule']}.\n"
                    for entry in report["methods"].values() if "rule" in entry)
    other = ("" if report["env_id"] in PAPER_ENVS else
             f"{report['env_id']} is not one of the paper's envs: the same methods, run on it "
             "as on them. ")
    return (
        f"# LoRA-Guided PPO paper, Tables 1-2: {report['env_id']}\n\n"
        f"{other}Scale `{scale['name']}`: learned methods trained with {scale['seeds']} seeds x "
        f"{scale['timesteps']} environment steps, with the paper's A.4 configuration "
        "except the rows marked tuned (the configuration the equal-budget sweep chose on "
        "validation tasks, `experiments/tuned/`); every method scored on the same "
        f"{scale['episodes']} tasks (task seed {report['eval_seed']}). 95% intervals: "
        "two-level bootstrap over training seeds and tasks for learned methods, over tasks "
        f"for the fixed baselines ({scale['resamples']} resamples). Reproduce with "
        f"`python -m experiments lora_ppo"
        f"{'' if scale['name'] == 'default' else ' --scale ' + scale['name']}`.\n\n"
        f"{format_table(rows)}\n{rules}{returns_table(report)}"
    )


def returns_table(report: Mapping[str, Any]) -> str:
    """Each row's mean Eq. 1 return and each learned row's share of the gap closed."""
    block = report.get("gap_closed")
    task = next(iter(block["tasks"].values())) if block else None
    lines = ["", "## Return and the share of the gap closed", ""]
    if task is None:
        lines.append("This env has no planner, so no gap to close is measured.")
    else:
        lines.append(
            f"The score is each episode's Eq. 1 return. Gap closed: 0 = {task['rule_row']} "
            f"(the best fixed row here, mean return {task['rule']:.3f}), 1 = "
            f"{block['reference']} (mean return {task['reference']:.3f}); 95% interval "
            "paired over tasks, resampling training seeds "
            "(`cost_envs.metrics.bootstrap_gap_closed`); each seed's share in the last column.")
    lines += ["", "| Method | Mean return | Gap closed | Per seed |", "|---|---|---|---|"]
    for key, entry in report["methods"].items():
        if "episode_return" not in entry:
            continue
        low, high = entry["episode_return_ci"]
        share = task["methods"].get(key) if task else None
        seeds = (", ".join("n/a" if v is None else f"{v:.2f}" for v in share["per_seed"])
                 if share else "")
        cell = gaps.share_cell(share) if share else ""
        lines.append(f"| {entry['label']} | {entry['episode_return']:.3f} "
                     f"[{low:.3f}, {high:.3f}] | {cell} | {seeds} |")
    return "\n".join(lines) + "\n"


def json_report(report: Mapping[str, Any]) -> str:
    """The report as JSON text (learning curves included)."""
    return json.dumps(report, indent=2) + "\n"


def pareto_figure(report: Mapping[str, Any]) -> bytes:
    """Success vs average cost, one point per method with its 95% interval bars (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 5))
    colours = plt.get_cmap("tab20").colors
    markers = "osD^vP*Xh<>p"
    for index, entry in enumerate(report["methods"].values()):
        x, y = entry["avg_cost"], entry["success_rate"]
        xerr = [[max(0.0, x - entry["avg_cost_ci"][0])], [max(0.0, entry["avg_cost_ci"][1] - x)]]
        yerr = [[max(0.0, y - entry["success_rate_ci"][0])],
                [max(0.0, entry["success_rate_ci"][1] - y)]]
        # Hollow markers, later rows larger: methods with identical results (the LoRA
        # rows often land on the greedy teacher) show as concentric shapes, not one.
        axis.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=markers[index % len(markers)],
                      color=colours[index % len(colours)], markerfacecolor="none",
                      markersize=5 + 1.2 * index, capsize=3, label=entry["label"])
    # The front of what a policy can reach from the observation: the privileged rows (the
    # hindsight oracle, the planner that knows the task's parameters) are left out of it.
    front = pareto_front({key: (entry["success_rate"], entry["avg_cost"])
                          for key, entry in report["methods"].items()
                          if key not in PRIVILEGED_ROWS})
    axis.plot([cost for _, cost in front.values()], [success for success, _ in front.values()],
              "k--", linewidth=0.8, label="Pareto front (non-privileged)")
    axis.set_xscale("log")
    axis.set_xlabel("average cost per task ($, log scale)")
    axis.set_ylabel("success rate")
    axis.set_title(f"{report['env_id']}: success vs cost (95% intervals)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    png = figure_png(figure)
    plt.close(figure)
    return png


#: The RL rows whose training curves are drawn, where the table has them.
CURVE_ROWS = ("ppo", "lora-ppo", "ppo/tuned", "lora-ppo/tuned", "lora-ppo/planner")
#: Fixed rows drawn as dashed reference lines (their evaluation figures), where present.
REFERENCE_ROWS = ("best-rule", "planner")


def learning_curves_figure(report: Mapping[str, Any],
                           keys: Sequence[str] = CURVE_ROWS) -> bytes:
    """CPS and success vs environment steps: mean over seeds, shaded over the seeds' range.

    The best fixed rule and the planner are dashed horizontal lines at their evaluation
    values, so a curve's distance from them shows what is left at the default budget (the
    curves are training episodes, the lines evaluation tasks: a guide, not a paired test).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    metrics = (("cost/cps", "cps"), ("rollout/success_rate", "success_rate"))
    seeds = set()
    for key in keys:
        histories = [h for h in report["learning_curves"].get(key, []) if h]
        if not histories:
            continue
        seeds.add(len(histories))
        length = min(len(h) for h in histories)
        steps = np.array([point["timesteps"] for point in histories[0][:length]])
        for axis, (metric, _) in zip(axes, metrics, strict=True):
            values = np.array([[point[metric] for point in h[:length]] for h in histories])
            axis.plot(steps, values.mean(axis=0), label=report["methods"][key]["label"])
            axis.fill_between(steps, values.min(axis=0), values.max(axis=0), alpha=0.2)
    for key, style in zip(REFERENCE_ROWS, ("k--", "k:"), strict=True):
        entry = report["methods"].get(key)
        if entry is None:
            continue
        for axis, (_, summary_key) in zip(axes, metrics, strict=True):
            axis.axhline(entry[summary_key], color="k",
                         linestyle=style[1:], linewidth=1,
                         label=f"{entry['label']} (evaluation)")
    for axis, title in zip(axes, ("CPS (last 100 training episodes)",
                                  "success rate (last 100 training episodes)"), strict=True):
        axis.set_xlabel("environment steps")
        axis.set_title(title, fontsize=10)
        axis.grid(True, alpha=0.3)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axes[0].set_yscale("log")
    count = "/".join(str(n) for n in sorted(seeds)) or "no"
    figure.suptitle(f"{report['env_id']}: training curves, mean and range over {count} seeds")
    figure.tight_layout()
    png = figure_png(figure)
    plt.close(figure)
    return png


def render_reports(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, str | bytes]:
    """File name -> content of every table, JSON file and figure."""
    files: dict[str, str | bytes] = {}
    for env_id, report in reports.items():
        name = env_id.split("/")[-1]
        files[f"table_{name}.md"] = markdown_table(report)
        files[f"table_{name}.json"] = json_report(report)
        files[f"pareto_{name}.png"] = pareto_figure(report)
        files[f"learning_curves_{name}.png"] = learning_curves_figure(report)
    return files


def write_reports(reports: Mapping[str, Mapping[str, Any]], out: Path) -> list[Path]:
    """Render everything, then write all files or none; returns the paths.

    Rendering first means a failing figure leaves every old file in place.
    """
    return write_files_atomic(out, render_reports(reports))
