"""BoPO's report: method summaries, frontier comparisons, the Markdown page and the figures.

Pure functions of evaluation records and of the experiment's JSON summary
(:func:`experiments.bopo.runner.summarise`): :func:`method_summary` scores one method on the
evaluation tasks (95% percentile-bootstrap intervals over tasks, success per stratum,
boundary-normalised cost); :func:`compare_frontiers` compares BoPO's frontier with PPO's
and Cascade's, with paired intervals from :func:`paired_success_difference`;
:func:`markdown` and :func:`pareto_figure` render the page and the per-profile figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.evaluation import EvaluationResult, value_interval
from agents.learners.bopo import BUDGET_QUANTILE, NET_ARCH, STRATA, Boundary
from agents.seeds import EVAL_TASK_SEED
from cost_envs.metrics import (
    HEADLINE_METRICS,
    EpisodeRecord,
    bootstrap_cis_over_runs,
    bootstrap_mean_ci,
    interval_around,
    pareto_front,
    summarize,
)
from experiments.bopo.scan import scan_markdown
from experiments.shared import gaps
from experiments.shared.figures import (
    Rendered,
    group_note,
    group_tags,
    overlap_groups,
    pyplot,
    reference_lines,
    render,
    seed_label,
    series_style,
    spread,
    tag_points,
)
from experiments.shared.task_sets import described_set, where_chosen

# ---------------------------------------------------------------------- scoring
LABELS = {"always-small": "AlwaysSmall", "always-large": "AlwaysLarge",
          "oracle": "Oracle (privileged)", "planner": "Planner (knows the task, not the luck)",
          "sft": "SFT warm start only", "bopo": "BoPO, as in the paper",
          "bopo-linear": "BoPO, linear cost term (not in the paper)",
          "ppo": "PPO (vanilla)", "random-mix": "RandomMix", "cascade": "Cascade",
          "difficulty-threshold": "Difficulty threshold",
          "best-rule": "Best fixed rule (searched on training tasks)"}
#: The families whose frontiers are compared with BoPO's.
RIVALS = ("ppo", "cascade")


def label(key: str) -> str:
    """The table label of a method key such as ``bopo/0.4`` (``BoPO (λ=0.4)``)."""
    family, _, value = key.partition("/")
    name = LABELS.get(family, family)
    if not value:
        return name
    if value == "tuned":
        return f"{name.removesuffix(', as in the paper')}, tuned"
    knob = {"bopo": "λ", "bopo-linear": "λ", "ppo": "λ", "random-mix": "p",
            "cascade": "patience"}[family]
    return f"{name} ({knob}={value})"


def _pooled(runs: Sequence[Sequence[EpisodeRecord]], returns: Sequence[Sequence[float]],
            resamples: int, seed: int) -> dict[str, Any]:
    """Point metrics of all runs' episodes, two-level intervals over runs and tasks."""
    out = summarize([r for run in runs for r in run])
    out["call_ratio"] = dict(zip(("large",), out["call_ratio"], strict=True))
    # per seed, as for a fixed row: the evaluation tasks, the budget cuts (mean over seeds)
    out["episodes"] = len(runs[0])
    out["budget_exceeded"] = out["budget_exceeded"] / len(runs)
    intervals = bootstrap_cis_over_runs(runs, HEADLINE_METRICS, n_resamples=resamples,
                                        seed=seed)
    for key, interval in zip(HEADLINE_METRICS, intervals, strict=True):
        out[f"{key}_ci"] = interval_around(out[key], interval)
    per_seed = {"success_rate": [float(np.mean([r.success for r in run])) for run in runs],
                "avg_cost": [float(np.mean([r.cost for r in run])) for run in runs]}
    if returns:
        mean, low, high = bootstrap_mean_ci(np.asarray(returns, dtype=np.float64),
                                            n_resamples=resamples, seed=seed)
        out["episode_return"], out["episode_return_ci"] = mean, [low, high]
        per_seed["episode_return"] = [float(np.mean(g)) for g in returns]
    out["per_seed"] = per_seed
    return out


def method_summary(runs: Sequence[Sequence[EpisodeRecord]], boundaries: Sequence[Boundary],
                   resamples: int, seed: int, returns: Sequence[Sequence[float]] = ()
                   ) -> dict[str, Any]:
    """One method's metrics with intervals, success per stratum and normalised cost.

    ``runs[s]`` are training seed ``s``'s evaluation episodes (one run for a fixed row),
    ``returns[s]`` their returns (then also the mean ``episode_return`` and its interval).
    One run: 95% percentile-bootstrap intervals over tasks. Several: the metrics of the
    pooled episodes (the mean over seeds: every run has the same tasks), with two-level
    intervals over seeds and tasks (:func:`cost_envs.metrics.bootstrap_cis_over_runs`),
    and each seed's ``per_seed`` values.
    """
    if len(runs) == 1:
        summary = EvaluationResult(tuple(runs[0]), ("large",), EVAL_TASK_SEED,
                                   tuple(returns[0]) if returns else ()
                                   ).summary(n_resamples=resamples, seed=seed)
    else:
        summary = _pooled(runs, returns, resamples, seed)
    pairs = [(r, b) for run in runs for r, b in zip(run, boundaries, strict=True)]
    by = {s: [r.success for r, b in pairs if b.stratum == s] for s in STRATA}
    summary["success_by_stratum"] = {s: (float(np.mean(v)) if v else None)
                                     for s, v in by.items()}
    plain = [b.normalised(r.cost) for r, b in pairs
             if not b.inverted and b.large_cost != b.small_cost]
    summary["normalised_cost"] = float(np.mean(plain)) if plain else None
    # BoPO's cost term lam * position(C) is clipped to 0 at or below the cheaper boundary's
    # cost: on those tasks the cost weight cannot move the reward at all.
    summary["cost_term_zero"] = float(np.mean([b.position(r.cost) == 0.0 for r, b in pairs]))
    return summary


def frontier_coverage(ours: Mapping[str, tuple[float, float]],
                      theirs: Mapping[str, tuple[float, float]]) -> int:
    """How many of ``theirs`` (success, cost) points some point of ``ours`` weakly dominates."""
    return sum(any(s >= ts and c <= tc for s, c in ours.values()) for ts, tc in theirs.values())


def paired_success_difference(a: Sequence[Sequence[EpisodeRecord]],
                              b: Sequence[Sequence[EpisodeRecord]], resamples: int = 1000,
                              seed: int = 0, confidence: float = 0.95
                              ) -> tuple[float, float, float]:
    """Success rate of ``a`` minus ``b`` on the same tasks, with a paired bootstrap interval.

    ``a[s]`` and ``b[s]`` are runs (training seeds) on the same tasks in the same order; a
    single run of ``b`` (a fixed row) is compared with every run of ``a``, otherwise run
    ``s`` with run ``s`` (the same seed, so the same training draw). The interval is
    :func:`cost_envs.metrics.bootstrap_mean_ci` of the per-task differences: over tasks
    for one run, two-level over seeds and tasks for several.

    Returns:
        ``(difference, low, high)``.

    Raises:
        ValueError: On runs of different lengths or empty ones, other run counts, or
            invalid bootstrap arguments.
    """
    left = [[float(x.success) for x in run] for run in a]
    right = [[float(y.success) for y in run] for run in b]
    lengths = {len(run) for run in left + right}
    if len(lengths) != 1 or 0 in lengths or len(right) not in (1, len(left)):
        raise ValueError("paired_success_difference: expected equally long, non-empty "
                         "evaluations of the same tasks, and one run of b or one per run of a")
    diff = np.array(left) - np.array(right)
    return bootstrap_mean_ci(diff if len(diff) > 1 else diff[0], n_resamples=resamples,
                             confidence=confidence, seed=seed)


def compare_frontiers(points: Mapping[str, tuple[float, float]], rival: str,
                      records: Mapping[str, Sequence[Sequence[EpisodeRecord]]] | None = None,
                      resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """BoPO's frontier against ``rival``'s (keys ``bopo/...`` and ``<rival>/...``).

    ``outcome`` is ``dominates`` (every rival frontier point is weakly dominated by a BoPO
    point, and not the other way round), ``is dominated by``, ``ties with`` or
    ``crosses``, on point estimates. ``matched`` pairs each BoPO frontier point with the
    rival's most successful point that costs no more (or, when none is as cheap, the
    rival's cheapest point) and, given ``records`` (key -> its runs), the paired bootstrap
    interval of BoPO's success minus that point's (:func:`paired_success_difference`),
    which says whether the ordering is resolved.
    """
    rival_points = {k: v for k, v in points.items() if k.startswith(f"{rival}/")}
    bopo = pareto_front({k: v for k, v in points.items() if k.startswith("bopo/")})
    other = pareto_front(rival_points)
    ours, theirs = frontier_coverage(bopo, other), frontier_coverage(other, bopo)
    if ours == len(other) and theirs < len(bopo):
        outcome = "dominates"
    elif theirs == len(bopo) and ours < len(other):
        outcome = "is dominated by"
    elif ours == len(other) and theirs == len(bopo):
        outcome = "ties with"
    else:
        outcome = "crosses"
    matched = []
    for key, (success, cost) in bopo.items():
        cheaper = {k: v for k, v in rival_points.items() if v[1] <= cost}
        if cheaper:  # the rival's most successful point that costs no more
            best = max(cheaper, key=lambda k: (cheaper[k][0], -cheaper[k][1]))
        else:  # none is as cheap: its cheapest point (which costs more)
            best = min(rival_points, key=lambda k: (rival_points[k][1], -rival_points[k][0]))
        entry: dict[str, Any] = {"bopo": key, "success": success, "cost": cost,
                                 "rival": best, "rival_costs_more": not cheaper,
                                 "margin": success - rival_points[best][0], "margin_ci": None}
        if records is not None:
            _, low, high = paired_success_difference(records[key], records[best], resamples,
                                                     seed)
            entry["margin_ci"] = [low, high]
        matched.append(entry)
    return {"rival": rival, "outcome": outcome, "bopo_front": list(bopo),
            "rival_front": list(other), "rival_points_dominated": ours,
            "bopo_points_dominated": theirs, "matched": matched}


# ------------------------------------------------------------------------ output
def _ci(m: Mapping[str, Any], key: str, fmt: str) -> str:
    low, high = m[f"{key}_ci"]
    return value_interval(m[key], low, high, fmt=fmt)


def _gap_cell(gap: Mapping[str, Any] | None, key: str) -> str:
    """A learned router's share of the rule-to-planner gap; "-" for a fixed row."""
    entry = None if gap is None else gap["methods"].get(key)
    return "-" if entry is None else gaps.share_cell(entry)


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else f"{value:{fmt}}"


def _frontier_sentence(profile: str, comp: Mapping[str, Any]) -> str:
    """One profile's BoPO-vs-rival outcome, with how much of it the intervals resolve."""
    name = LABELS[comp["rival"]]
    better = worse = unresolved = 0
    pairs = []
    for m in comp["matched"]:
        interval = "" if m["margin_ci"] is None else " [{:+.3f}, {:+.3f}]".format(
            *m["margin_ci"])
        if m["rival_costs_more"]:  # a trade-off, not a like-for-like comparison
            pairs.append(f"{label(m['bopo'])} is cheaper than every {name} point; vs its "
                         f"cheapest, {label(m['rival'])}: {m['margin']:+.3f}{interval}")
            continue
        low, high = m["margin_ci"] if m["margin_ci"] is not None else (-math.inf, math.inf)
        better += low > 0
        worse += high < 0
        unresolved += low <= 0 <= high
        pairs.append(f"{label(m['bopo'])} vs {label(m['rival'])}: "
                     f"{m['margin']:+.3f}{interval}")
    compared = better + worse + unresolved
    return (
        f"**{profile}: BoPO's frontier {comp['outcome']} {name}'s** on point estimates "
        f"(BoPO weakly dominates {comp['rival_points_dominated']} of "
        f"{len(comp['rival_front'])} {name} frontier points, {name} "
        f"{comp['bopo_points_dominated']} of {len(comp['bopo_front'])} BoPO points). "
        f"Success of each BoPO frontier point minus that of the best {name} point costing "
        f"no more, with 95% paired bootstrap intervals over seeds and tasks (BoPO resolved "
        f"better at {better} of {compared} such comparisons, worse at {worse}, unresolved at "
        f"{unresolved}): " + "; ".join(pairs) + "."
    )


def _config(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in config.items())


def _tuned_lines(tuned: Mapping[str, Any]) -> list[str]:
    """What each equal-budget sweep on this profile chose, and the row it gave (if any)."""
    if not tuned:
        return []
    parts = []
    for family, choice in tuned.items():
        name = label(family).removesuffix(", as in the paper")
        if choice["same_as_paper"]:
            parts.append(f"{name}'s sweep chose the paper's configuration itself "
                         f"({_config(choice['paper'])}), so its tuned row would be the "
                         "paper's row and is not trained twice")
        else:
            parts.append(f"{name}, tuned: the sweep's choice ({_config(choice['config'])}; "
                         f"untuned: {_config(choice['paper'])}), on the table's steps and "
                         "seeds")
    return ["", "Tuned rows (equal-budget sweeps on this profile, 12 trials of 20,480 steps, "
            "validation tasks disjoint from these; `experiments/tuned/`): "
            + "; ".join(parts) + "."]


def markdown(summary: Mapping[str, Any], seconds: float | None = None) -> str:
    """The report page: setup, then per profile the taxonomy, the table and the outcome."""
    sc = summary["scale"]
    lines = [
        "# BoPO on AgenticRouting-v0: boundary-guided routing vs PPO and Cascade",
        "",
        f"Scale `{sc['name']}`: {sc['n_train']} training tasks and {sc['n_eval']} evaluation "
        f"tasks per profile (task seeds {summary['train_task_seed']} and "
        f"{summary['eval_task_seed']}); every learned router is MaskablePPO with "
        f"{list(NET_ARCH)} policy and value MLPs trained for {sc['timesteps']} steps, "
        f"with training seeds {', '.join(map(str, summary['seeds']))}, each on its own "
        "training-task draw, boundaries and SFT warm start (the fixed rules are fitted on "
        "the first seed's draw, which also sets the budget). Every method is scored on the "
        "same evaluation tasks under "
        "`HardBudget(on_exceed=\"mask\")` with the profile's per-task budget (the "
        f"{BUDGET_QUANTILE:.0%} quantile of always-large's training cost). Fixed rows: "
        f"point estimates with 95% bootstrap intervals over tasks ({sc['resamples']} "
        "resamples). Learned rows (SFT, PPO, BoPO): the mean over seeds and tasks with a "
        "95% two-level bootstrap interval over seeds and tasks; each seed's values are in "
        "bopo.json. BoPO's rows use the paper's reward (\"as in the paper\"); the λ scan "
        "below adds a variant. Norm. cost: mean of (C - C_small) / (C_large - C_small) over "
        "tasks without cost inversion. Large steps: share of steps run by the large model. "
        "Exhausted: episodes the budget cut short (learned rows: mean over seeds). Cost "
        "term 0: share of tasks on which BoPO's cost term λ·clip((C - C_lo) / (C_hi - "
        "C_lo), 0, 1) is 0 for this method's cost (at or below the cheaper boundary), so "
        "no λ changes its reward there. "
        "Return: mean episode return under the env's own reward (Eq. 1, its default "
        "weights, budget cuts included). Gap closed: the share of the gap in mean return "
        "between the profile's best fixed rule (0; named under its table) and the planner "
        "that knows the task's hidden parameters but not its luck (1) that a learned router "
        "closes, with Fieller's 95% interval on the exact moments of the bootstrap over "
        "seeds and tasks (`experiments/shared/gaps.py`); `[n/a]` where the planner's gap "
        "over the rule is not resolved (its interval holds 0), so the share has no "
        "interval. The planner and the oracle read hidden state and are on no frontier.",
    ]
    if described_set(summary):
        lines += ["", described_set(summary)]
    if seconds is not None:
        lines += ["", f"Wall time: {seconds:.0f} s with {sc['jobs']} worker process(es)."]
    outcomes = []
    for profile, rep in summary["profiles"].items():
        strata = rep["strata_eval"]
        before, after = rep["sft"]["demo_log_likelihood_before_after"]
        lines += [
            "", f"## {profile}", "",
            f"Per-task budget ${rep['budget']:.4f}. Strata of the evaluation tasks: "
            + ", ".join(f"{s} {strata[s]:.0%}" for s in STRATA)
            + " (training: " + ", ".join(f"{s} {rep['strata_train'][s]:.0%}" for s in STRATA)
            + "). Cost inversions (always-small dearer than always-large): "
            f"{rep['inversion_share_eval']:.1%} of evaluation tasks, "
            f"{rep['inversion_share_train']:.1%} of training tasks. SFT data: "
            + ", ".join(f"{n} {s}" for s, n in rep["sft"]["trajectories"].items())
            + f" trajectories ({rep['sft']['steps']} steps, first seed); demonstrated-action "
            f"log-likelihood {before:.3f} -> {after:.3f}.",
            "",
            "| Method | Success | Avg cost ($) | CPS ($) | Norm. cost | Large steps | Success "
            "easy / hard / intractable | Exhausted | Cost term 0 | Return | Gap closed |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        gap = summary.get("gap_closed", {}).get("tasks", {}).get(profile)
        for key, m in rep["methods"].items():
            by = m["success_by_stratum"]
            lines.append(
                f"| {m['label']} | {_ci(m, 'success_rate', '.3f')} | "
                f"{_ci(m, 'avg_cost', '.4f')} | {_ci(m, 'cps', '.4f')} | "
                f"{_opt(m['normalised_cost'], '.2f')} | {m['call_ratio']['large']:.2f} | "
                + " / ".join(_opt(by[s], ".2f") for s in STRATA)
                + f" | {m['budget_exceeded']:g} | {m['cost_term_zero']:.2f} | "
                + (_ci(m, "episode_return", ".3f") if "episode_return" in m else "-")
                + f" | {_gap_cell(gap, key)} |")
        lines += _tuned_lines(rep.get("tuned", {}))
        if gap is not None:
            rule = rep["methods"][gap["rule_method"]]["label"]
            lines += ["", f"Gap closed: from {rule} (mean return "
                      f"{gap['rule']:.3f}, the better fixed rule "
                      f"{where_chosen(summary, 'here')}) to the planner "
                      f"({gap['reference']:.3f})."]
        curves = rep["learning_curves"]
        if curves:
            steps = [point["timesteps"] for point in next(iter(curves.values()))["mean"]]
            lines += ["", "Learning curves (evaluation tasks, same budget, mean over seeds): "
                      "success / average cost after each number of RL steps.", "",
                      "| Router | " + " | ".join(f"{n} steps" for n in steps) + " |",
                      "|---|" + "---|" * len(steps)]
            for key, curve in curves.items():
                lines.append(f"| {label(key)} | " + " | ".join(
                    f"{p['success_rate']:.3f} / {p['avg_cost']:.4f}" for p in curve["mean"])
                    + " |")
        for comp in rep["frontiers"].values():
            outcomes.append(_frontier_sentence(profile, comp))
            lines += ["", outcomes[-1]]
    if "lambda_scan" in summary:
        scan = summary["lambda_scan"]
        methods = summary["profiles"][scan["profile"]]["methods"]
        lines += scan_markdown(scan, {k: m["label"] for k, m in methods.items()})
    lines += ["", "## Outcome", "", *(f"* {s}" for s in outcomes), "",
              "Dominance is judged on point estimates; a paired interval that contains 0 means "
              "the ordering of those two points is not resolved by these seeds and "
              "evaluation tasks.", ""]
    return "\n".join(lines)


#: The families whose sweeps are joined by a line in the Pareto figures.
SWEEPS = ("bopo", "bopo-linear", "ppo", "cascade", "random-mix")
#: The rows drawn as reference lines and their short names on the lines.
REFERENCES = {"best-rule": "best fixed rule", "planner": "planner", "oracle": "oracle"}


def pareto_figure(profile: str, rep: Mapping[str, Any]) -> Rendered:
    """:func:`draw_pareto`'s figure as PNG and SVG bytes."""
    return render(draw_pareto(profile, rep), dpi=110)


def draw_pareto(profile: str, rep: Mapping[str, Any]) -> Any:
    """Success vs average cost per method for one profile, with 95% intervals (a Figure).

    Every method has its own marker and colour (:func:`experiments.shared.figures.series_style`;
    hollow: fixed rows, filled: learned rows, with their seed count), a sweep's points
    joined by a thin grey line (a colour per family left 18 series in 10 colours); the per-task
    budget is a vertical line and the rule, the planner and the oracle horizontal ones.
    Methods whose markers would overlap are drawn side by side and listed under the plot.
    """
    plt = pyplot()
    methods = rep["methods"]
    points = {key: (m["avg_cost"], m["success_rate"]) for key, m in methods.items()}
    costs = [x for x, _ in points.values()]
    x_range = (min(costs), max(*costs, rep["budget"]))  # the budget line widens the axis
    groups = overlap_groups(points, x_range=x_range)
    drawn, tags = spread(points, groups, x_range=x_range), group_tags(groups)
    labels = {key: seed_label(m["label"], m.get("seeds")) for key, m in methods.items()}
    note = group_note(groups, labels, width=150)
    lines = note.count("\n") + 1 if note else 0
    height = 5.0 + 0.13 * lines
    figure, axis = plt.subplots(figsize=(10, height))
    families: dict[str, list[tuple[float, float]]] = {}
    for index, (key, m) in enumerate(methods.items()):
        family = key.split("/")[0]
        mark, colour = series_style(index)
        (x, y), shift = drawn[key], drawn[key][0] - m["avg_cost"]
        xerr = [[max(0.0, x - m["avg_cost_ci"][0] - shift)],
                [max(0.0, m["avg_cost_ci"][1] + shift - x)]]
        yerr = [[max(0.0, y - m["success_rate_ci"][0])], [max(0.0, m["success_rate_ci"][1] - y)]]
        axis.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=mark, color=colour, capsize=2,
                      markerfacecolor=colour if m.get("seeds") is not None else "none",
                      markersize=7, elinewidth=0.8,
                      label=labels[key] + (f" [{tags[key]}]" if key in tags else ""))
        families.setdefault(family, []).append(points[key])
    for family in SWEEPS:
        pts = sorted(families.get(family, []))
        if len(pts) > 1:
            axis.plot([p[0] for p in pts], [p[1] for p in pts], "-", color="0.6",
                      linewidth=0.8, zorder=0)
    tag_points(axis, groups, drawn)
    reference_lines(axis, [(name, methods[key]["success_rate"])
                           for key, name in REFERENCES.items() if key in methods])
    axis.axvline(rep["budget"], color="tab:red", linestyle=":", linewidth=1.2)
    axis.annotate(f"per-task budget ${rep['budget']:.3f}", (rep["budget"], 0.5),
                  xycoords=("data", "axes fraction"), xytext=(-4, 0),
                  textcoords="offset points", rotation=90, ha="right", va="center",
                  fontsize=8, color="tab:red")
    axis.set_xlabel("average cost per task ($)")
    axis.set_ylabel("success rate")
    # over the whole figure: over the axis alone, wider than it, it was cut at the left edge
    figure.suptitle(f"AgenticRouting-v0 / {profile}: success vs cost (95% intervals; hollow "
                    "= fixed, filled = learned)", fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    if note:
        figure.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom")
    figure.tight_layout(rect=(0, (0.2 + 0.13 * lines) / height if note else 0, 1, 1))
    return figure
