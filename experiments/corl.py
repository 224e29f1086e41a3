"""CORL's experiment: one controller for three budget tiers on ExpertRouting-v0.

:func:`run_corl` trains both variants of :mod:`agents.routing.corl` (the shared PPO
policy and one LoRA adapter per tier on its frozen encoder) and scores them with the
reference rows (the controller alone, each single expert, the escalation rule and the
privileged oracle) per profile and tier, on the same queries for every method
(:func:`agents.routing.corl.tier_table`). :func:`report` writes ``corl_tiers.md``,
``corl_tiers.json`` and ``pareto_corl.png``, all rendered before any is written and
written all together (:func:`agents.files.write_files_atomic`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.evaluation import value_interval
from agents.files import write_files_atomic
from agents.lora.policies import AllocatorPolicy
from agents.routing.corl import (
    EXPERT_ROUTING,
    TierAdapters,
    tier_table,
    train_shared_ppo,
    train_tier_adapters,
)
from cost_envs.wrappers import TIERS
from experiments.common import figure_png


def _quiet(_message: str) -> None:
    """The default progress printer: says nothing."""


@dataclass(frozen=True)
class CorlScale:
    """How much to train and evaluate."""

    ppo_timesteps: int
    adapter_timesteps: int
    episodes: int
    n_resamples: int


#: No ``full`` scale: ``python -m experiments corl --scale full`` runs ``default``.
CORL_SCALES = {
    "smoke": CorlScale(ppo_timesteps=1024, adapter_timesteps=512, episodes=30, n_resamples=50),
    "default": CorlScale(ppo_timesteps=60_000, adapter_timesteps=15_000, episodes=400,
                         n_resamples=1000),
}
PROFILES_EVALUATED = ("mixed", "gsm8k", "math500", "aime")


def _policy_allocator(policy: Any) -> Callable[[gym.Env], Any]:
    return lambda env: policy


def corl_methods(shared: AllocatorPolicy, adapters: TierAdapters, n_experts: int,
                 expert_names: list[str]) -> dict[str, Callable[[gym.Env], Any]]:
    """Table rows: the references (alone, each single expert, rule, oracle) and the learned."""
    from agents.baselines import CostOptOracle, FixedConsultation, RuleBased

    methods: dict[str, Callable[[gym.Env], Any]] = {
        "Controller alone": lambda env: FixedConsultation(env, [])}
    for i, name in enumerate(expert_names):
        methods[f"Single expert: {name}"] = lambda env, i=i: FixedConsultation(env, [i])
    methods["Escalate until agreement (rule)"] = RuleBased
    methods["Oracle (privileged, ignores the tier)"] = CostOptOracle
    methods["PPO, one policy for all tiers"] = _policy_allocator(shared)
    methods["LoRA-PPO, one adapter per tier"] = _policy_allocator(adapters)
    return methods


LEARNED = ("PPO, one policy for all tiers", "LoRA-PPO, one adapter per tier")


def run_corl(scale: str = "default", seed: int = 0,
             log: Callable[[str], None] = _quiet) -> dict[str, Any]:
    """Train both variants and score every method per profile and tier (JSON-ready).

    Args:
        scale: A key of :data:`CORL_SCALES`.
        seed: Training seed.
        log: Progress printer (one line per stage).

    Raises:
        ValueError: For an unknown scale.
    """
    if scale not in CORL_SCALES:
        raise ValueError(f"scale: expected one of {list(CORL_SCALES)}, got {scale!r}")
    settings = CORL_SCALES[scale]
    shared, shared_history = train_shared_ppo(settings.ppo_timesteps, seed)
    log(f"corl: shared PPO trained ({settings.ppo_timesteps} steps)")
    adapters = train_tier_adapters(shared, settings.adapter_timesteps, seed)
    log(f"corl: tier adapters trained ({settings.adapter_timesteps} steps each)")
    probe = gym.make(EXPERT_ROUTING)
    names = list(probe.unwrapped.pool.names)
    budgets = dict(probe.unwrapped.tier_budgets)
    probe.close()
    methods = corl_methods(shared, adapters, len(names), names)
    results = {}
    for profile in PROFILES_EVALUATED:
        table = tier_table(methods, settings.episodes, seed=0,
                           env_kwargs={"profile": profile}, n_resamples=settings.n_resamples)
        results[profile] = {tier: {m: s.as_dict() for m, s in rows.items()}
                            for tier, rows in table.items()}
        log(f"corl: profile {profile} scored ({len(methods)} methods x {len(TIERS)} tiers)")
    return {"scale": scale, "seed": seed, "settings": settings.__dict__, "budgets": budgets,
            "experts": names, "results": results,
            "training_curve": [{k: v for k, v in point.items()} for point in shared_history]}


def best_single_expert(rows: Mapping[str, Any]) -> str:
    """The single-expert row with the highest accuracy within budget (ties: the cheaper)."""
    singles = [m for m in rows if m.startswith("Single expert: ")]
    return max(singles, key=lambda m: (rows[m]["accuracy_within_budget"][0],
                                       -rows[m]["avg_cost"][0]))


def _cell(value: list[float], fmt: str) -> str:
    return value_interval(*value, fmt=fmt)


def corl_markdown(report: Mapping[str, Any]) -> str:
    """The per-tier tables (mixed profile in full, then the learned rows per profile)."""
    names = report["experts"]
    budgets = report["budgets"]
    lines = [
        "# CORL on ExpertRouting-v0: one controller for three budget tiers",
        "",
        f"Scale `{report['scale']}`, training seed {report['seed']}: "
        f"PPO {report['settings']['ppo_timesteps']} steps over all tiers, then "
        f"{report['settings']['adapter_timesteps']} steps per tier adapter; "
        f"{report['settings']['episodes']} evaluation queries per profile and tier, the same "
        "for every method; 95% bootstrap intervals over queries. Budgets per query: "
        + ", ".join(f"{t} ${b:g}" for t, b in budgets.items()) + ".",
        "",
        "*Accuracy within budget* is CORL's gated metric (a right answer that cost more "
        "than the tier's budget counts as wrong); the *expert-call ratio* is the share of "
        "queries on which at least one expert was consulted; calls/query counts each "
        f"expert's calls ({' / '.join(names)}).",
        "",
    ]
    for profile, table in report["results"].items():
        lines += [f"## Profile `{profile}`", "",
                  "| Tier | Method | Accuracy | Accuracy within budget | Avg cost ($) "
                  "| Expert-call ratio | Calls/query | Over budget |",
                  "|---|---|---|---|---|---|---|---|"]
        for tier, rows in table.items():
            best = best_single_expert(rows)
            for method, s in rows.items():
                if profile != "mixed" and not (method in LEARNED or method == best
                                               or method.startswith("Controller")):
                    continue
                label = f"{method} (best single expert)" if method == best else method
                calls = " / ".join(f"{s['calls_per_query'][n]:.2f}" for n in names)
                lines.append(
                    f"| {tier} | {label} | {_cell(s['accuracy'], '.3f')} | "
                    f"{_cell(s['accuracy_within_budget'], '.3f')} | "
                    f"{_cell(s['avg_cost'], '.4f')} | {_cell(s['expert_call_ratio'], '.2f')} | "
                    f"{calls} | {s['budget_exceeded']:.2f} |")
        lines.append("")
    lines += ["## Learned controllers against the controller alone and the best single expert",
              "", "Accuracy within budget, mixed profile; the best single expert is the one "
              "with the highest accuracy within that tier's budget.", "",
              "| Tier | Controller alone | Best single expert | PPO | LoRA-PPO |",
              "|---|---|---|---|---|"]
    mixed = report["results"]["mixed"]
    for tier, rows in mixed.items():
        best = best_single_expert(rows)
        cells = [_cell(rows[m]["accuracy_within_budget"], ".3f")
                 for m in ("Controller alone", best, *LEARNED)]
        cells[1] += f" ({best.removeprefix('Single expert: ')})"
        lines.append(f"| {tier} | " + " | ".join(cells) + " |")
    lines += ["", "## Does the expert-call ratio rise with the tier?", ""]
    for profile, table in report["results"].items():
        for method in LEARNED:
            ratios = [table[t][method]["expert_call_ratio"][0] for t in TIERS]
            calls = [sum(table[t][method]["calls_per_query"].values()) for t in TIERS]
            costs = [table[t][method]["avg_cost"][0] for t in TIERS]
            rising = all(a <= b for a, b in itertools.pairwise(ratios))
            lines.append(
                f"- `{profile}`, {method}: ratio {' -> '.join(f'{r:.2f}' for r in ratios)}, "
                f"calls/query {' -> '.join(f'{c:.2f}' for c in calls)}, cost "
                f"{' -> '.join(f'${c:.4f}' for c in costs)}: "
                f"{'rises (never falls)' if rising else 'does NOT rise monotonically'}.")
    return "\n".join(lines) + "\n"


def corl_figure(report: Mapping[str, Any]) -> bytes:
    """Accuracy within budget vs average cost per profile; colour = tier (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(report["results"])
    figure, axes = plt.subplots(1, len(profiles), figsize=(4.2 * len(profiles), 4.2))
    colours = {"low": "tab:green", "medium": "tab:orange", "high": "tab:red"}
    markers = "osD^vP*X"
    for axis, profile in zip(np.atleast_1d(axes), profiles, strict=True):
        for tier, rows in report["results"][profile].items():
            for index, (method, s) in enumerate(rows.items()):
                axis.errorbar(
                    s["avg_cost"][0], s["accuracy_within_budget"][0],
                    yerr=[[s["accuracy_within_budget"][0] - s["accuracy_within_budget"][1]],
                          [s["accuracy_within_budget"][2] - s["accuracy_within_budget"][0]]],
                    fmt=markers[index % len(markers)], color=colours[tier],
                    markerfacecolor=colours[tier] if method in LEARNED else "none",
                    markersize=7 if method in LEARNED else 5, capsize=2,
                    label=method if tier == "high" else None)
            axis.axvline(report["budgets"][tier], color=colours[tier], linestyle=":",
                         linewidth=0.8)
        axis.set_xscale("log")
        axis.set_title(f"profile {profile}", fontsize=10)
        axis.set_xlabel("average cost per query ($, log)")
        axis.grid(True, alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("accuracy within budget")
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=7, loc="lower center", ncol=4)
    figure.suptitle("ExpertRouting-v0: colour = tier (green low, orange medium, red high); "
                    "dotted = tier budget; filled = learned", fontsize=10)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    png = figure_png(figure)
    plt.close(figure)
    return png


def report(out_dir: Path, scale: str = "default", seed: int = 0,
           log: Callable[[str], None] = _quiet) -> str:
    """Run :func:`run_corl`, write ``corl_tiers.md/.json`` and ``pareto_corl.png``.

    Everything is rendered before anything is written, and the three files are written
    all or nothing (:func:`agents.files.write_files_atomic`).

    Args:
        out_dir: Output directory (created if needed).
        scale: A key of :data:`CORL_SCALES`.
        seed: Training seed.
        log: Progress printer.

    Returns:
        The Markdown.
    """
    result = run_corl(scale, seed, log)
    markdown = corl_markdown(result)
    text = json.dumps(result, indent=2) + "\n"
    png = corl_figure(result)
    write_files_atomic(out_dir, {"corl_tiers.md": markdown, "corl_tiers.json": text,
                           "pareto_corl.png": png})
    return markdown
