"""The LoRA-Guided PPO tables' files: Markdown, JSON, the Pareto and learning-curve figures.

Rendered from the reports :func:`experiments.lora_ppo.runner.reproduce` returns (or a committed
``table_<Env>.json`` read with :func:`read_report`, which gives back the same dict); every
file is rendered before any is written (:func:`write_reports`), each figure as PNG and SVG
(:mod:`experiments.shared.figures`). The learning curves, the per-step training histories, are
``learning_curves_<Env>.csv`` beside the JSON (:mod:`experiments.shared.histories`), which names
that file instead of holding them.
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
from experiments.lora_ppo.settings import PAPER_ENVS, PRIVILEGED_ROWS
from experiments.shared import gaps
from experiments.shared.figures import (
    Rendered,
    figure_files,
    group_note,
    group_tags,
    log_ticks,
    overlap_groups,
    pyplot,
    reference_lines,
    render,
    seed_label,
    series_style,
    spread,
    tag_points,
)
from experiments.shared.histories import detach, read_with_histories
from experiments.shared.task_sets import described_set, tasks_option, where_chosen


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
        f"{report.get('timesteps', scale['timesteps'])} environment steps"
        f"{_batched(scale.get('n_envs', 1))}, with the paper's A.4 configuration "
        "except the rows marked tuned (the configuration the equal-budget sweep chose on "
        "validation tasks, `experiments/tuned/`); every method scored on the same "
        f"{scale['episodes']} tasks (task seed {report['eval_seed']}).{_scored_on(report)} "
        "95% intervals: "
        "two-level bootstrap over training seeds and tasks for learned methods, over tasks "
        f"for the fixed baselines ({scale['resamples']} resamples). Reproduce with "
        f"`python -m experiments lora_ppo"
        f"{'' if scale['name'] == 'default' else ' --scale ' + scale['name']}"
        f"{tasks_option(report)}`.\n\n"
        f"{format_table(rows)}\n{rules}{returns_table(report)}"
    )


def _scored_on(report: Mapping[str, Any]) -> str:
    """`` `` and the sentence naming the task set, for a report scored on the test set."""
    sentence = described_set(report)
    return f" {sentence}" if sentence else ""


def _batched(n_envs: int) -> str:
    """How the RL rows stepped the env, where not the paper's one env."""
    return "" if n_envs == 1 else f" on {n_envs} batched sub-envs"


def returns_table(report: Mapping[str, Any]) -> str:
    """Each row's mean Eq. 1 return and each learned row's share of the gap closed."""
    block: Any = report.get("gap_closed")  # None without a planner (the else branch has it)
    task = next(iter(block["tasks"].values())) if block else None
    lines = ["", "## Return and the share of the gap closed", ""]
    if task is None:
        lines.append("This env has no planner, so no gap to close is measured.")
    else:
        lines.append(
            f"The score is each episode's Eq. 1 return. Gap closed: 0 = {task['rule_row']} "
            f"(the best fixed row {where_chosen(report, 'here')}, mean return "
            f"{task['rule']:.3f}), 1 = "
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


def _name(report: Mapping[str, Any]) -> str:
    """The env's id without its namespace, as the file names have it."""
    return str(report["env_id"]).split("/")[-1]


def curves_file(report: Mapping[str, Any]) -> str:
    """The name of the report's learning-curve CSV (beside its figure and its JSON)."""
    return f"learning_curves_{_name(report)}.csv"


def json_report(report: Mapping[str, Any]) -> str:
    """The report as JSON text, its learning curves replaced by their CSV's name and seeds."""
    return json.dumps(detach(report, "learning_curves", curves_file(report))[0],
                      indent=2) + "\n"


def curves_csv(report: Mapping[str, Any]) -> str:
    """The report's learning curves as CSV text (:func:`experiments.shared.histories.to_csv`)."""
    return detach(report, "learning_curves", curves_file(report))[1]


def read_report(path: Path) -> dict[str, Any]:
    """A ``table_<Env>.json`` file with its learning curves read back from their CSV.

    The same dict :func:`experiments.lora_ppo.runner.reproduce` returned for the env.

    Raises:
        ValueError: If the file or its CSV cannot be read.
    """
    return read_with_histories(path, "learning_curves", "lora_ppo_report")


def _legend_label(entry: Mapping[str, Any]) -> str:
    """A row's label, with its seed count when it is learned (it has per-seed results)."""
    return seed_label(entry["label"], entry["seeds"] if "per_seed" in entry else None)


def _references(methods: Mapping[str, Any], metric: str) -> list[tuple[str, float]]:
    """(name, value) of the rule, the planner and the oracle rows the table has."""
    return [(name, methods[key][metric]) for key, name in REFERENCE_NAMES.items()
            if key in methods]


#: The rows drawn as reference lines and their short names on the lines.
REFERENCE_NAMES = {"best-rule": "best fixed rule", "planner": "planner",
                   "oracle": "oracle (hindsight)"}


def pareto_figure(report: Mapping[str, Any]) -> Rendered:
    """:func:`draw_pareto`'s figure as PNG and SVG bytes."""
    return render(draw_pareto(report))


def zoom_keys(methods: Mapping[str, Any], margin: float = 0.05) -> list[str]:
    """The rows a zoom panel shows: success within ``margin`` below the best fixed rule.

    Empty (no zoom) without a best-rule row, when fewer than four rows are that close, or
    when they already fill more than 40% of the success axis.
    """
    if "best-rule" not in methods:
        return []
    floor = methods["best-rule"]["success_rate"] - margin
    keys = [key for key, entry in methods.items() if entry["success_rate"] >= floor]
    successes = [entry["success_rate"] for entry in methods.values()]
    window = max(successes) - floor
    return keys if len(keys) >= 4 and window < 0.4 * (max(successes) - min(successes)) else []


def _draw_methods(axis: Any, methods: Mapping[str, Any], keys: Sequence[str],
                  drawn: Mapping[str, tuple[float, float]], labels: Mapping[str, str]) -> None:
    """One errorbar per method of ``keys``, its marker and colour fixed by its row index."""
    for index, (key, entry) in enumerate(methods.items()):
        if key not in keys:
            continue
        (x, y), shift = drawn[key], drawn[key][0] / entry["avg_cost"]
        low, high = (bound * shift for bound in entry["avg_cost_ci"])
        xerr = [[max(0.0, x - low)], [max(0.0, high - x)]]
        yerr = [[max(0.0, y - entry["success_rate_ci"][0])],
                [max(0.0, entry["success_rate_ci"][1] - y)]]
        mark, colour = series_style(index)
        axis.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=mark, color=colour,
                      markerfacecolor=colour if "per_seed" in entry else "none",
                      markersize=7, capsize=3, elinewidth=0.8, label=labels[key])


def _zoom_limits(axis: Any, methods: Mapping[str, Any], keys: Sequence[str],
                 drawn: Mapping[str, tuple[float, float]]) -> None:
    """Fit the zoom panel to its rows (points and intervals), then freeze the limits."""
    xs = [drawn[k][0] * methods[k]["avg_cost_ci"][i] / methods[k]["avg_cost"]
          for k in keys for i in (0, 1)]
    ys = [methods[k]["success_rate_ci"][i] for k in keys for i in (0, 1)]
    axis.set_xlim(min(xs) / 1.15, max(xs) * 1.15)
    axis.set_ylim(min(ys) - 0.01, min(1.02, max(ys) + 0.015))
    axis.set_autoscale_on(False)


def draw_pareto(report: Mapping[str, Any]) -> Any:
    """Success vs average cost, one marker per method with its 95% interval bars (a Figure).

    Every method has its own marker (hollow: fixed rows, filled: learned rows, with their
    seed count); methods on one point are drawn side by side and listed together under
    the plot; the rule, the planner and the oracle are labelled horizontal lines. Where
    the rows that compete with the best fixed rule crowd into a thin band
    (:func:`zoom_keys`), a second panel shows that band magnified.
    """
    plt = pyplot()
    methods = report["methods"]
    points = {key: (entry["avg_cost"], entry["success_rate"]) for key, entry in methods.items()}
    groups = overlap_groups(points, log_x=True)
    drawn, tags = spread(points, groups, log_x=True), group_tags(groups)
    labels = {key: _legend_label(entry) + (f" [{tags[key]}]" if key in tags else "")
              for key, entry in methods.items()}
    note = group_note(groups, {key: _legend_label(e) for key, e in methods.items()}, width=200)
    lines = note.count("\n") + 1 if note else 0
    height = 5.0 + 0.13 * lines
    zoom = zoom_keys(methods)
    figure, axes = plt.subplots(1, 2 if zoom else 1, figsize=(15 if zoom else 10, height),
                                squeeze=False)
    panels = [(axes[0][0], list(methods))] + ([(axes[0][1], zoom)] if zoom else [])
    # The front of what a policy can reach from the observation: the privileged rows (the
    # hindsight oracle, the planner that knows the task's parameters) are left out of it.
    front = pareto_front({key: points[key][::-1] for key in methods
                          if key not in PRIVILEGED_ROWS})
    for axis, keys in panels:
        _draw_methods(axis, methods, keys, drawn, labels)
        axis.set_xscale("log")
        if axis is not axes[0][0]:
            _zoom_limits(axis, methods, keys, drawn)
        tag_points(axis, [g for g in groups if set(g) <= set(keys)], drawn, tags)
        log_ticks(axis)
        reference_lines(axis, _references(methods, "success_rate"))
        axis.plot([cost for _, cost in front.values()],
                  [success for success, _ in front.values()], "k--", linewidth=0.8,
                  label="Pareto front (non-privileged)")
        axis.set_xlabel("average cost per task ($, log scale)")
        axis.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("success rate")
    figure.suptitle(f"{report['env_id']}: success vs cost (95% intervals; hollow = fixed, "
                    "filled = learned)", fontsize=11)
    if zoom:
        axes[0][0].set_title("every method", fontsize=10)
        axes[0][1].set_title("zoom: success at least the best fixed rule's - 0.05",
                             fontsize=10)
    # every method is in the full panel: its handles make the legend, right of the last panel
    axes[0][-1].legend(*axes[0][0].get_legend_handles_labels(), fontsize=7, loc="center left",
                       bbox_to_anchor=(1.01, 0.5))
    if note:
        figure.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom")
    figure.tight_layout(rect=(0, (0.2 + 0.13 * lines) / height if note else 0, 1, 1))
    return figure


#: The RL rows whose training curves are drawn, where the table has them.
CURVE_ROWS = ("ppo", "lora-ppo", "ppo/tuned", "lora-ppo/tuned", "lora-ppo/planner",
              "lora-ppo/bayes")
#: Fixed rows drawn as horizontal reference lines (their evaluation figures), where present.
REFERENCE_ROWS = tuple(REFERENCE_NAMES)


def learning_curves_figure(report: Mapping[str, Any],
                           keys: Sequence[str] = CURVE_ROWS) -> Rendered:
    """:func:`draw_learning_curves`'s figure as PNG and SVG bytes."""
    return render(draw_learning_curves(report, keys))


def draw_learning_curves(report: Mapping[str, Any], keys: Sequence[str] = CURVE_ROWS) -> Any:
    """CPS and success vs environment steps: mean over seeds, shaded over the seeds' range.

    Each curve's label carries its seed count. The best fixed rule, the planner and the
    hindsight oracle are horizontal lines at their evaluation values, so a curve's
    distance from them shows what is left at the default budget (the curves are training
    episodes, the lines evaluation tasks: a guide, not a paired test).
    """
    plt = pyplot()
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
        label = seed_label(report["methods"][key]["label"], len(histories))
        for axis, (metric, _) in zip(axes, metrics, strict=True):
            values = np.array([[point[metric] for point in h[:length]] for h in histories])
            axis.plot(steps, values.mean(axis=0), label=label)
            axis.fill_between(steps, values.min(axis=0), values.max(axis=0), alpha=0.2)
    for key, style in zip(REFERENCE_ROWS, ("--", ":", "-."), strict=True):
        entry = report["methods"].get(key)
        if entry is None:
            continue
        for axis, (_, summary_key) in zip(axes, metrics, strict=True):
            axis.axhline(entry[summary_key], color="k", linestyle=style, linewidth=1,
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
    return figure


def render_reports(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, str | bytes]:
    """File name -> content of every table, JSON file, learning-curve CSV and figure."""
    files: dict[str, str | bytes] = {}
    for env_id, report in reports.items():
        name = env_id.split("/")[-1]
        files[f"table_{name}.md"] = markdown_table(report)
        files[f"table_{name}.json"] = json_report(report)
        files[curves_file(report)] = curves_csv(report)
        files |= figure_files(f"pareto_{name}", pareto_figure(report))
        files |= figure_files(f"learning_curves_{name}", learning_curves_figure(report))
    return files


def write_reports(reports: Mapping[str, Mapping[str, Any]], out: Path) -> list[Path]:
    """Render everything, then write all files or none; returns the paths.

    Rendering first means a failing figure leaves every old file in place.
    """
    return write_files_atomic(out, render_reports(reports))
