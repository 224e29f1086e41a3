"""CORL's experiment: one controller for three budget tiers, on ExpertRouting-v0 and -v1.

:func:`run_corl` trains both variants of :mod:`agents.routing.corl` (the shared PPO
policy and one LoRA adapter per tier on its frozen encoder) on one env and scores them
with the reference rows (the controller alone, each single expert, consulting every
expert, the escalation rule, the best fixed rule searched per tier on training tasks and
the privileged oracle) per profile and tier, on the same
queries for every method (:func:`agents.routing.corl.tier_table`). :func:`report` does
that for each env of :data:`CORL_ENVS` (in worker processes when the scale says so) and
writes, per env, the tables, the JSON and the figure: ``corl_tiers.md``,
``corl_tiers.json`` and ``pareto_corl.png`` for ExpertRouting-v0,
``corl_tiers_ExpertRouting-v1.md``, ``.json`` and ``pareto_corl_ExpertRouting-v1.png`` for
v1 (:func:`file_names`), all rendered before any is written and written all together
(:func:`agents.files.write_files_atomic`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.evaluation import value_interval
from agents.files import write_files_atomic
from agents.routing.corl import (
    EXPERT_ROUTING,
    tier_records,
    tier_scores,
    tier_table,
    train_shared_ppo,
    train_tier_adapters,
)
from cost_envs.wrappers import TIERS
from experiments.common import described, figure_png, quiet, recording, spawn_pool


@dataclass(frozen=True)
class CorlScale:
    """How much to train and evaluate.

    ``seeds``: training seeds of the learned controllers (each trains both on its own);
    ``rule_tasks``: training tasks on which the best fixed rule is searched, per profile and
    tier; ``jobs``: worker processes (one training seed, or one env's fixed rows, each).
    """

    ppo_timesteps: int
    adapter_timesteps: int
    episodes: int
    n_resamples: int
    seeds: int = 5
    rule_tasks: int = 200
    jobs: int = 1


#: No ``full`` scale: ``python -m experiments corl --scale full`` runs ``default``.
CORL_SCALES = {
    "smoke": CorlScale(ppo_timesteps=1024, adapter_timesteps=512, episodes=30, n_resamples=50,
                       seeds=2, rule_tasks=5),
    "default": CorlScale(ppo_timesteps=60_000, adapter_timesteps=15_000, episodes=400,
                         n_resamples=1000, jobs=2),
}
PROFILES_EVALUATED = ("mixed", "gsm8k", "math500", "aime")
#: The envs the experiment runs on, each with its own report: v0, and v1 where wrong
#: answers can coincide (issue #10).
CORL_ENVS = (EXPERT_ROUTING, "cost_envs/ExpertRouting-v1")


def _policy_allocator(policy: Any) -> Callable[[gym.Env], Any]:
    return lambda env: policy


CONSULT_ALL = "Consult all experts"
BEST_RULE = "Best fixed rule (searched on training tasks)"
#: Fixed rows shown in every profile's table, not only the mixed profile's.
EVERY_PROFILE = ("Controller alone", CONSULT_ALL, BEST_RULE)


def fixed_methods(expert_names: list[str], rule_tasks: int = 200
                  ) -> dict[str, Callable[[gym.Env], Any]]:
    """The fixed reference rows, each a factory called with the tier's env.

    The controller alone, each single expert, all experts, the escalation rule, the best
    fixed rule and the oracle. ``tier_table`` calls each with the tier's env, so the best
    fixed rule is searched per tier, on ``rule_tasks`` training tasks of the profile
    (their own seed range), for the most gated reward.
    """
    from agents.baselines import ConsultAll, CostOptOracle, FixedConsultation, RuleBased
    from agents.rules import BestFixedRule

    methods: dict[str, Callable[[gym.Env], Any]] = {
        "Controller alone": lambda env: FixedConsultation(env, [])}
    for i, name in enumerate(expert_names):
        methods[f"Single expert: {name}"] = lambda env, i=i: FixedConsultation(env, [i])
    methods[CONSULT_ALL] = ConsultAll
    methods["Escalate until agreement (rule)"] = RuleBased
    methods[BEST_RULE] = partial(BestFixedRule, n_tasks=rule_tasks)
    methods["Oracle (privileged, ignores the tier)"] = CostOptOracle
    return methods


LEARNED = ("PPO, one policy for all tiers", "LoRA-PPO, one adapter per tier")
#: The evaluation queries: task seed 0 of each profile and tier, for every method.
EVAL_SEED = 0


def _check_scale(scale: str) -> CorlScale:
    if scale not in CORL_SCALES:
        raise ValueError(f"scale: expected one of {list(CORL_SCALES)}, got {scale!r}")
    return CORL_SCALES[scale]


def learned_runs(scale: str, seed: int, env_id: str = EXPERT_ROUTING) -> dict[str, Any]:
    """Train one seed's two controllers; their episodes on every profile and tier.

    Returns ``{"seed", "curve", "runs"}``, ``runs[(profile, tier, method)]`` an
    :class:`~agents.evaluation.EvaluationResult` on the evaluation queries.
    """
    settings = _check_scale(scale)
    shared, curve = train_shared_ppo(settings.ppo_timesteps, seed, env_id=env_id)
    adapters = train_tier_adapters(shared, settings.adapter_timesteps, seed, env_id=env_id)
    rows = dict(zip(LEARNED, (_policy_allocator(shared), _policy_allocator(adapters)),
                    strict=True))
    runs = {(profile, tier, method): tier_records(factory, tier, settings.episodes, EVAL_SEED,
                                                  {"profile": profile}, env_id)
            for profile in PROFILES_EVALUATED for tier in TIERS
            for method, factory in rows.items()}
    return {"seed": seed, "curve": [dict(point) for point in curve], "runs": runs}


def fixed_rows(scale: str, env_id: str = EXPERT_ROUTING) -> dict[str, Any]:
    """Every fixed row's scores per profile and tier (JSON-ready), on the evaluation queries.

    A method built with a ``description`` (a rule searched when it is built, per tier) has
    it as ``rule`` in its tier's entry.
    """
    settings = _check_scale(scale)
    probe = gym.make(env_id)
    names = list(probe.unwrapped.pool.names)
    probe.close()
    methods = fixed_methods(names, settings.rule_tasks)
    results = {}
    for profile in PROFILES_EVALUATED:
        built: dict[Any, Any] = {}
        recorded = {m: recording(factory, built, lambda env, m=m: (m, env.tier))
                    for m, factory in methods.items()}
        table = tier_table(recorded, settings.episodes, seed=EVAL_SEED,
                           env_kwargs={"profile": profile},
                           n_resamples=settings.n_resamples, env_id=env_id)
        results[profile] = {tier: {m: {**s.as_dict(), **described(built[m, tier])}
                                   for m, s in rows.items()}
                            for tier, rows in table.items()}
    return results


def assemble(env_id: str, scale: str, fixed: Mapping[str, Any],
             learned: list[dict[str, Any]]) -> dict[str, Any]:
    """The report of one env: fixed rows, then the learned rows pooled over their seeds."""
    settings = _check_scale(scale)
    probe = gym.make(env_id)
    names = list(probe.unwrapped.pool.names)
    budgets = dict(probe.unwrapped.tier_budgets)
    probe.close()
    learned = sorted(learned, key=lambda run: run["seed"])
    results = {}
    for profile, table in fixed.items():
        results[profile] = {}
        for tier, rows in table.items():
            results[profile][tier] = dict(rows)
            for method in LEARNED:
                runs = [run["runs"][profile, tier, method] for run in learned]
                scores = tier_scores(runs, budgets[tier], settings.n_resamples, EVAL_SEED)
                results[profile][tier][method] = {**scores.as_dict(), "seeds": len(runs)}
    settings_used = {k: v for k, v in settings.__dict__.items() if k != "jobs"}  # any jobs
    return {"env_id": env_id, "scale": scale, "seeds": [run["seed"] for run in learned],
            "settings": settings_used, "budgets": budgets, "experts": names,
            "results": results, "training_curves": [run["curve"] for run in learned]}


def run_corl(scale: str = "default", seed: int = 0,
             log: Callable[[str], None] = quiet, env_id: str = EXPERT_ROUTING
             ) -> dict[str, Any]:
    """Train the scale's seeds (``seed``, ``seed + 1``, ...) on ``env_id`` and score all.

    Every method meets the same queries per profile and tier; the learned rows pool their
    seeds (intervals: two-level bootstrap over seeds and queries), the fixed rows are
    scored once (intervals over queries).

    Raises:
        ValueError: For an unknown scale.
    """
    settings = _check_scale(scale)
    name = env_id.split("/")[-1]
    fixed = fixed_rows(scale, env_id)
    log(f"corl: {name}: fixed rows scored")
    learned = []
    for offset in range(settings.seeds):
        learned.append(learned_runs(scale, seed + offset, env_id))
        log(f"corl: {name}: seed {seed + offset} trained and scored")
    return assemble(env_id, scale, fixed, learned)


def _job(kind: str, scale: str, env_id: str, seed: int) -> dict[str, Any]:
    """One unit of work in a worker process (one torch thread): fixed rows or one seed."""
    from agents.lora.training import configure_torch_threads

    configure_torch_threads()
    if kind == "fixed":
        return fixed_rows(scale, env_id)
    return learned_runs(scale, seed, env_id)


def run_envs(scale: str = "default", seed: int = 0, envs: tuple[str, ...] = CORL_ENVS,
             log: Callable[[str], None] = quiet, jobs: int | None = None
             ) -> dict[str, dict[str, Any]]:
    """:func:`run_corl` on each env, its seeds and fixed rows spread over ``jobs`` workers.

    The result does not depend on ``jobs``: every unit is seeded on its own.

    Returns:
        Env id -> report, in the order of ``envs`` whatever order the workers finish in.
    """
    settings = _check_scale(scale)
    workers = jobs or settings.jobs
    if workers <= 1:
        return {env_id: run_corl(scale, seed, log, env_id) for env_id in envs}
    units = [(env_id, "fixed", seed) for env_id in envs]
    units += [(env_id, "learned", seed + k) for env_id in envs for k in range(settings.seeds)]
    with spawn_pool(workers) as pool:
        futures = [(unit, pool.submit(_job, unit[1], scale, unit[0], unit[2]))
                   for unit in units]
        done: dict[tuple[str, str, int], Any] = {}
        for unit, future in futures:
            done[unit] = future.result()
            log(f"corl: {unit[0].split('/')[-1]}: "
                + ("fixed rows scored" if unit[1] == "fixed" else f"seed {unit[2]} trained "
                   "and scored") + " in a worker")
    return {env_id: assemble(env_id, scale, done[env_id, "fixed", seed],
                             [v for (e, kind, _), v in done.items()
                              if e == env_id and kind == "learned"])
            for env_id in envs}


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
        "*Accuracy within budget* is CORL's gated metric (a right answer that cost more "
        "than the tier's budget counts as wrong); the *expert-call ratio* is the share of "
        "queries on which at least one expert was consulted; calls/query counts each "
        f"expert's calls ({' / '.join(names)}). Consult all experts: every expert in the "
        "first round, then answer. Profiles other than `mixed` show the learned rows, the "
        "best single expert and the rows that need no expert choice.",
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
                                               or method in EVERY_PROFILE):
                    continue
                label = f"{method} (best single expert)" if method == best else method
                if "rule" in s:
                    label += f": {s['rule']}"
                calls = " / ".join(f"{s['calls_per_query'][n]:.2f}" for n in names)
                lines.append(
                    f"| {tier} | {label} | {_cell(s['accuracy'], '.3f')} | "
                    f"{_cell(s['accuracy_within_budget'], '.3f')} | "
                    f"{_cell(s['avg_cost'], '.4f')} | {_cell(s['expert_call_ratio'], '.2f')} | "
                    f"{calls} | {s['budget_exceeded']:.2f} |")
        lines.append("")
    mixed = report["results"]["mixed"]
    fixed = [m for m in EVERY_PROFILE[1:] if m in mixed[TIERS[0]]]
    lines += ["## Learned controllers against the fixed references",
              "", "Accuracy within budget, mixed profile; the best single expert is the one "
              "with the highest accuracy within that tier's budget.", "",
              "| Tier | Controller alone | Best single expert | " + " | ".join(fixed)
              + " | PPO | LoRA-PPO |", "|---|---|---|" + "---|" * len(fixed) + "---|---|"]
    for tier, rows in mixed.items():
        best = best_single_expert(rows)
        cells = [_cell(rows[m]["accuracy_within_budget"], ".3f")
                 for m in ("Controller alone", best, *fixed, *LEARNED)]
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
    markers = "osD^vP*Xh<>p"
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
    figure.suptitle(f"{report['env_id']}: colour = tier (green low, orange medium, red "
                    "high); dotted = tier budget; filled = learned", fontsize=10)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    png = figure_png(figure)
    plt.close(figure)
    return png


def file_names(env_id: str) -> tuple[str, str, str]:
    """The Markdown, JSON and figure of ``env_id``'s report.

    ExpertRouting-v0 keeps the names it always had (``corl_tiers.md``, ``corl_tiers.json``,
    ``pareto_corl.png``); another env's carry its name (``corl_tiers_ExpertRouting-v1.md``).
    """
    suffix = "" if env_id == EXPERT_ROUTING else f"_{env_id.split('/')[-1]}"
    return f"corl_tiers{suffix}.md", f"corl_tiers{suffix}.json", f"pareto_corl{suffix}.png"


def report(out_dir: Path, scale: str = "default", seed: int = 0,
           log: Callable[[str], None] = quiet, envs: tuple[str, ...] = CORL_ENVS,
           jobs: int | None = None) -> dict[str, str]:
    """Run :func:`run_corl` on each env and write its tables, JSON and figure.

    Everything is rendered before anything is written, and the files of every env are
    written all or nothing (:func:`agents.files.write_files_atomic`); names from
    :func:`file_names`.

    Args:
        out_dir: Output directory (created if needed).
        scale: A key of :data:`CORL_SCALES`.
        seed: Training seed.
        log: Progress printer.
        envs: Env ids, each with its own report.
        jobs: Worker processes (one env each), instead of the scale's own ``jobs``.

    Returns:
        Env id -> its Markdown.
    """
    results = run_envs(scale, seed, envs, log, jobs)
    files: dict[str, str | bytes] = {}
    pages = {}
    for env_id, result in results.items():
        markdown_name, json_name, figure_name = file_names(env_id)
        pages[env_id] = files[markdown_name] = corl_markdown(result)
        files[json_name] = json.dumps(result, indent=2) + "\n"
        files[figure_name] = corl_figure(result)
    write_files_atomic(out_dir, files)
    return pages
