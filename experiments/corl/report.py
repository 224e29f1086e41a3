"""CORL's report pages: the per-tier tables (with the share of the gap closed) and the figure.

:mod:`experiments.corl.runner` runs the experiment and writes these; the row labels live here so
that both modules name rows the same way. The ``gap closed`` column reads the report's
``gap_closed`` block (:mod:`experiments.shared.gaps`): 0 is the best fixed row of the (profile,
tier) table, 1 the planner that knows the question but not its luck.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any

from agents.evaluation import value_interval
from cost_envs.wrappers import TIERS
from experiments.shared.figures import (
    Rendered,
    group_note,
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
from experiments.shared.gaps import share_cell
from experiments.shared.task_sets import described_set, where_chosen

CONSULT_ALL = "Consult all experts"
BEST_RULE = "Best fixed rule (searched on training tasks)"
ORACLE = "Oracle (privileged, ignores the tier)"
PLANNER = "Planner (knows the task, not the luck)"
#: Rows that read the hidden question: never the rule of the gap, off the learned rows' axis.
PRIVILEGED = (ORACLE, PLANNER)
#: Fixed rows shown in every profile's table, not only the mixed profile's.
EVERY_PROFILE = ("Controller alone", CONSULT_ALL, BEST_RULE, PLANNER)
#: The learned rows in the paper's configuration (the adapters at our documented rate).
PAPER_LEARNED = ("PPO, one policy for all tiers", "LoRA-PPO, one adapter per tier")
#: The same two trained with the configuration their equal-budget sweep chose
#: (``experiments/tuned/``), where the env has one (ExpertRouting-v0).
TUNED_LEARNED = ("PPO, one policy for all tiers, tuned", "LoRA-PPO, one adapter per tier, tuned")
LEARNED = PAPER_LEARNED + TUNED_LEARNED
#: Keys of the learned rows in the ``gap_closed`` block.
LEARNED_KEYS = dict(zip(LEARNED, ("ppo", "lora-ppo", "ppo/tuned", "lora-ppo/tuned"),
                        strict=True))
#: Short names of the learned rows in the summary table's columns.
SHORT = dict(zip(LEARNED, ("PPO", "LoRA-PPO", "PPO tuned", "LoRA-PPO tuned"), strict=True))


def learned_in(rows: Collection[str]) -> list[str]:
    """The learned rows that ``rows`` has, in :data:`LEARNED` order (v1 has no tuned ones)."""
    return [method for method in LEARNED if method in rows]


def task_name(env_id: str, profile: str, tier: str) -> str:
    """A (profile, tier) table's task name in the ``gap_closed`` block: env/profile/tier."""
    return f"{env_id.split('/')[-1]}/{profile}/{tier}"


def _gap_cell(report: Mapping[str, Any], profile: str, tier: str, method: str) -> str:
    """The row's share of the gap closed: 0 for the rule, 1 for the planner, a learned share."""
    task = report["gap_closed"]["tasks"][task_name(report["env_id"], profile, tier)]
    if method == task["rule_label"]:
        return "0 (rule)"
    if method == PLANNER:
        return "1 (reference)"
    if method in LEARNED_KEYS:
        return share_cell(task["methods"][LEARNED_KEYS[method]])
    return ""


def _tuned_note(report: Mapping[str, Any]) -> list[str]:
    """The paragraph on the tuned rows, when the report has them."""
    tuned = report.get("tuned") or {}
    if not tuned:
        return []
    env = report["env_id"].split("/")[-1]
    settings = report["settings"]
    total = settings["ppo_timesteps"] + len(TIERS) * settings["adapter_timesteps"]
    configs = "; ".join(f"{label}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float)
                                                  else f"{k} {v}" for k, v in config.items())
                        for label, config in tuned.items())
    return [f"Rows marked *tuned* train with the configuration CORL's equal-budget sweep "
            f"chose (`experiments/tuned/corl-ppo_{env}.yaml`, `corl-adapters_{env}.yaml`: "
            "12 trials of 20,480 steps each, scored on validation queries disjoint from "
            f"these) on the same steps as the untuned row: PPO {settings['ppo_timesteps']}, "
            f"the adapters' two stages {total} in all, split as the sweep chose "
            f"({configs}). The untuned rows are the paper's PPO settings and our "
            "documented adapter rate.", ""]


def best_single_expert(rows: Mapping[str, Any]) -> str:
    """The single-expert row with the highest accuracy within budget (ties: the cheaper)."""
    singles = [m for m in rows if m.startswith("Single expert: ")]
    return max(singles, key=lambda m: (rows[m]["accuracy_within_budget"][0],
                                       -rows[m]["avg_cost"][0]))


def _cell(value: list[float], fmt: str) -> str:
    mean, low, high = value
    return value_interval(mean, low, high, fmt=fmt)


def corl_markdown(report: Mapping[str, Any]) -> str:
    """The per-tier tables (mixed profile in full, then the learned rows per profile)."""
    names = report["experts"]
    budgets = report["budgets"]
    lines = [
        f"# CORL on {report['env_id']}: one controller for three budget tiers",
        "",
        f"Scale `{report['scale']}`, training seeds "
        f"{', '.join(map(str, report['seeds']))}: each trains PPO "
        f"{report['settings']['ppo_timesteps']} steps over all tiers, then "
        f"{report['settings']['adapter_timesteps']} steps per tier adapter; "
        f"{report['settings']['episodes']} evaluation queries per profile and tier, the same "
        "for every method. 95% intervals: for the learned rows the value pools the seeds "
        "and the interval is a two-level bootstrap over seeds and queries; for the fixed "
        "rows, over queries. Budgets per query: "
        + ", ".join(f"{t} ${b:g}" for t, b in budgets.items()) + ".",
        "",
        *([described_set(report), ""] if described_set(report) else []),
        "*Accuracy within budget* is CORL's gated metric (a right answer that cost more "
        "than the tier's budget counts as wrong); the *expert-call ratio* is the share of "
        "queries on which at least one expert was consulted; calls/query counts each "
        f"expert's calls ({' / '.join(names)}). Consult all experts: every expert in the "
        "first round, then answer. Profiles other than `mixed` show the learned rows, the "
        "best single expert, the rows that need no expert choice and the rule of the gap.",
        "",
        *_tuned_note(report),
        f"*{PLANNER}* is the achievable reference (`agents/planning/expert.py`): it knows "
        "each question's difficulty, prices and (v1) distractors, not the luck that decides "
        "each answer, and plays the exact expectimax policy for accuracy within the tier's "
        "budget. *Gap closed* places a learned row between the best fixed row of its table "
        "(0: the non-privileged fixed row of the highest accuracy within budget "
        f"{where_chosen(report, 'on these queries')}, marked *rule*) and the planner (1), "
        "paired over the queries and "
        "resampling seeds (`experiments/shared/gaps.py`); `n/a` where the planner is not above "
        "the rule.",
        "",
    ]
    for profile, table in report["results"].items():
        lines += [f"## Profile `{profile}`", "",
                  "| Tier | Method | Accuracy | Accuracy within budget | Avg cost ($) "
                  "| Expert-call ratio | Calls/query | Over budget | Gap closed |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for tier, rows in table.items():
            best = best_single_expert(rows)
            for method, s in rows.items():
                gap = _gap_cell(report, profile, tier, method)
                if profile != "mixed" and not (method in LEARNED or method == best
                                               or method in EVERY_PROFILE or gap):
                    continue
                label = f"{method} (best single expert)" if method == best else method
                if "rule" in s:
                    label += f": {s['rule']}"
                calls = " / ".join(f"{s['calls_per_query'][n]:.2f}" for n in names)
                lines.append(
                    f"| {tier} | {label} | {_cell(s['accuracy'], '.3f')} | "
                    f"{_cell(s['accuracy_within_budget'], '.3f')} | "
                    f"{_cell(s['avg_cost'], '.4f')} | {_cell(s['expert_call_ratio'], '.2f')} | "
                    f"{calls} | {s['budget_exceeded']:.2f} | {gap} |")
        lines.append("")
    mixed = report["results"]["mixed"]
    fixed = [m for m in EVERY_PROFILE[1:] if m in mixed[TIERS[0]]]
    learned = learned_in(mixed[TIERS[0]])
    lines += ["## Learned controllers against the fixed references",
              "", "Accuracy within budget, mixed profile; the best single expert is the one "
              "with the highest accuracy within that tier's budget; the rule is the best "
              "fixed row, the zero of the gap closed.", "",
              "| Tier | Controller alone | Best single expert | " + " | ".join(fixed)
              + "".join(f" | {SHORT[m]}" for m in learned) + " | Rule"
              + "".join(f" | Gap closed: {SHORT[m]}" for m in learned) + " |",
              "|---|---|---|" + "---|" * (len(fixed) + 2 * len(learned) + 1)]
    for tier, rows in mixed.items():
        best = best_single_expert(rows)
        cells = [_cell(rows[m]["accuracy_within_budget"], ".3f")
                 for m in ("Controller alone", best, *fixed, *learned)]
        cells[1] += f" ({best.removeprefix('Single expert: ')})"
        task = report["gap_closed"]["tasks"][task_name(report["env_id"], "mixed", tier)]
        cells.append(task["rule_label"])
        cells += [_gap_cell(report, "mixed", tier, m) for m in learned]
        lines.append(f"| {tier} | " + " | ".join(cells) + " |")
    lines += ["", "## Does the expert-call ratio rise with the tier?", ""]
    for profile, table in report["results"].items():
        for method in learned_in(table[TIERS[0]]):
            ratios = [table[t][method]["expert_call_ratio"][0] for t in TIERS]
            tier_calls = [sum(table[t][method]["calls_per_query"].values()) for t in TIERS]
            costs = [table[t][method]["avg_cost"][0] for t in TIERS]
            rising = all(a <= b for a, b in itertools.pairwise(ratios))
            lines.append(
                f"- `{profile}`, {method}: ratio {' -> '.join(f'{r:.2f}' for r in ratios)}, "
                f"calls/query {' -> '.join(f'{c:.2f}' for c in tier_calls)}, cost "
                f"{' -> '.join(f'${c:.4f}' for c in costs)}: "
                f"{'rises (never falls)' if rising else 'does NOT rise monotonically'}.")
    return "\n".join(lines) + "\n"


def panel_rows(report: Mapping[str, Any], profile: str, tier: str) -> list[str]:
    """The rows one panel of :func:`corl_figure` draws, in the table's order.

    The learned rows, the best single expert, the rule of the gap (the best fixed row of
    that table) and the planner: the comparison the gap closed measures, without the
    fixed rows that neither set the rule nor come close.
    """
    rows = report["results"][profile][tier]
    rule = report["gap_closed"]["tasks"][task_name(report["env_id"], profile, tier)]["rule_label"]
    keep = {*learned_in(rows), best_single_expert(rows), rule, PLANNER}
    return [method for method in rows if method in keep]


def _figure_methods(report: Mapping[str, Any]) -> list[str]:
    """Every method some panel draws, in the first table's order (one marker each)."""
    drawn = {m for profile, table in report["results"].items() for tier in table
             for m in panel_rows(report, profile, tier)}
    order = list(dict.fromkeys(m for table in report["results"].values()
                               for rows in table.values() for m in rows))
    return [method for method in order if method in drawn]


def _panel(axis: Any, report: Mapping[str, Any], profile: str, tier: str,
           styles: Mapping[str, tuple[str, Any, str]]) -> list[list[str]]:
    """Draw one (profile, tier) panel; returns its groups of overlapping methods."""
    rows = report["results"][profile][tier]
    methods = panel_rows(report, profile, tier)
    points = {m: (rows[m]["avg_cost"][0], rows[m]["accuracy_within_budget"][0])
              for m in methods}
    budget = report["budgets"][tier]
    costs = [x for x, _ in points.values()]
    right = max(*costs, budget * 1.5)
    x_range = (min(*costs, right / 2.5), right)  # as the axis will show it (below)
    groups = overlap_groups(points, log_x=True, tolerance=(0.03, 0.04), x_range=x_range)
    drawn = spread(points, groups, log_x=True, step=0.05, x_range=x_range)
    for method in methods:
        mark, colour, label = styles[method]
        value, low, high = rows[method]["accuracy_within_budget"]
        axis.errorbar(*drawn[method], yerr=[[value - low], [high - value]], fmt=mark,
                      color=colour, markerfacecolor=colour if method in LEARNED else "none",
                      markersize=6, capsize=2, elinewidth=0.8, label=label)
    tag_points(axis, groups, drawn)
    oracle = rows.get(ORACLE)
    rule = report["gap_closed"]["tasks"][task_name(report["env_id"], profile, tier)]["rule_label"]
    reference_lines(axis, [("rule", rows[rule]["accuracy_within_budget"][0]),
                           ("planner", rows[PLANNER]["accuracy_within_budget"][0])]
                    + ([("oracle", oracle["accuracy_within_budget"][0])] if oracle else []))
    axis.axvline(budget, color="tab:red", linestyle=":", linewidth=1)
    axis.set_xscale("log")
    left, right = axis.get_xlim()
    right = max(right, budget * 1.5)
    axis.set_xlim(min(left, right / 2.5), right)  # at least two of the 1-2-5 ticks
    log_ticks(axis)
    axis.margins(y=0.15)
    axis.set_title(f"{profile}, {tier} tier (budget ${budget:g}, dotted red)", fontsize=9)
    axis.grid(True, alpha=0.3)
    return groups


def corl_figure(report: Mapping[str, Any]) -> Rendered:
    """:func:`draw_corl`'s figure as PNG and SVG bytes."""
    return render(draw_corl(report), dpi=100)


def draw_corl(report: Mapping[str, Any]) -> Any:
    """Accuracy within budget vs average cost: one panel per (profile, tier) (a Figure).

    Each panel draws the learned rows (filled, with their seed count), the best single
    expert, the rule and the planner, each method with its own marker and colour across
    the figure; the tier's budget is a vertical line and the rule, the planner and the
    oracle horizontal ones. Methods whose markers would overlap are drawn side by side,
    tagged, and listed under the plot.
    """
    plt = pyplot()
    profiles = list(report["results"])
    methods = _figure_methods(report)
    seeds = len(report["seeds"])
    styles = {m: (*series_style(i), seed_label(m, seeds) if m in LEARNED else m)
              for i, m in enumerate(methods)}
    notes = []
    figure, axes = plt.subplots(len(profiles), len(TIERS), squeeze=False,
                                figsize=(4.0 * len(TIERS), 2.8 * len(profiles)))
    for row, profile in zip(axes, profiles, strict=True):
        for axis, tier in zip(row, TIERS, strict=True):
            groups = _panel(axis, report, profile, tier, styles)
            if groups:
                notes.append(group_note(groups, {m: styles[m][2] for m in methods},
                                        width=190, where=f"{profile}, {tier} ", explain=False))
        row[0].set_ylabel("accuracy within budget")
    for axis in axes[-1]:
        axis.set_xlabel("average cost per query ($, log)")
    handles = {label: handle for axis in axes.flat
               for handle, label in zip(*axis.get_legend_handles_labels(), strict=True)}
    ordered = [styles[m][2] for m in methods]
    notes.append("Markers that would overlap are drawn side by side around their mean cost.")
    text = "\n".join(notes)
    bottom = 0.25 + 0.12 * (text.count("\n") + 1)  # inches for the notes
    legend_height = 0.2 + 0.17 * -(-len(methods) // 3)
    figure.set_figheight(figure.get_figheight() + bottom + legend_height)
    figure.text(0.01, 0.005, text, fontsize=7, ha="left", va="bottom")
    figure.legend([handles[label] for label in ordered], ordered, fontsize=8,
                  loc="lower center", ncol=3,
                  bbox_to_anchor=(0.5, bottom / figure.get_figheight()))
    figure.suptitle(f"{report['env_id']}: accuracy within budget vs cost (95% intervals; "
                    "filled = learned, hollow = fixed)", fontsize=11)
    figure.tight_layout(rect=(0, (bottom + legend_height) / figure.get_figheight(), 1, 1))
    return figure
