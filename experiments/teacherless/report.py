"""The screening table of :mod:`experiments.teacherless.runner`'s runs, beside plain PPO."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from agents.seeds import EVAL_TASK_SEED, TEST_TASK_SEED, VALIDATION_TASK_SEED
from cost_envs.metrics import bootstrap_mean_ci
from experiments.budgets.report import curve_table, share_text
from experiments.budgets.runner import reference_returns
from experiments.budgets.settings import Scale
from experiments.shared.common import machine
from experiments.shared.gaps import decode_scores, kept_scores, method_share
from experiments.teacherless.envs import owned
from experiments.teacherless.settings import BASELINE_CSV, BASELINE_LABEL, ENV_ID, ROWS


def gap_ends(env: str, episodes: int, seed: int = EVAL_TASK_SEED
             ) -> tuple[list[float], list[float]]:
    """The rule's and the planner's scores on ``episodes`` tasks of reset seed ``seed``.

    A registered id's from :func:`~experiments.budgets.runner.reference_returns`; a
    setting's (:mod:`experiments.teacherless.envs`) from the experiment that owns its gap,
    on its tasks. Either chooses the rule end on its validation tasks whatever ``seed`` is.
    """
    setting = owned(env)
    if setting is None:
        return reference_returns(env, episodes, seed)
    return setting.gap_ends(episodes, seed)


def setting_lines(env: str) -> list[str]:
    """The report's lines on a setting's env, score and gap (none for a registered id)."""
    setting = owned(env)
    if setting is None:
        return []
    return [f"Env: {setting.env_id} as {setting.owner} sets it up, trains and scores it; "
            f"every return and share below is of its score ({setting.score_name}), the "
            f"gap's ends {setting.owner}'s on the same tasks (the rule chosen on its "
            "validation tasks). Scored at the end of each run only.", ""]


def _committed_by_seed(scale: Scale, path: Path) -> tuple[int, dict[int, np.ndarray]]:
    """The committed curve's step count for ``scale`` and its per-task returns there by seed."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["row"] == "ppo"]
    # SB3 finishes its last rollout: the requested steps rounded up to whole rollouts
    rollout = scale.n_envs * 512
    steps = -(-scale.timesteps // rollout) * rollout
    return steps, {int(r["seed"]): decode_scores(r["returns"]) for r in rows
                   if int(r["timesteps"]) == steps}


def has_baseline(scale: Scale, env_id: str = ENV_ID, path: Path = BASELINE_CSV) -> bool:
    """Whether PPO's committed curve holds ``scale``'s step count for its every seed.

    Only ToolBench-v0's does, to 1,007,616 steps; elsewhere, and past it, the ``ppo`` row
    trained again is the baseline.
    """
    if env_id != ENV_ID:
        return False
    _, by_seed = _committed_by_seed(scale, path)
    return all(seed in by_seed for seed in range(scale.seeds))


def check_baseline(keys: Iterable[str], scale: Scale, env_id: str = ENV_ID) -> None:
    """Refuse rows with nothing to pair them with.

    That is no ``ppo`` row among ``keys`` where PPO's committed curve does not hold
    ``scale`` (:func:`has_baseline`).

    Raises:
        ValueError: One line naming the env and the step count.
    """
    if "ppo" not in set(keys) and not has_baseline(scale, env_id):
        raise ValueError(f"rows: {env_id} has no committed PPO screen at "
                         f"{scale.timesteps:,} steps to pair with; expected the ppo row "
                         "among them")


def baseline(scale: Scale, path: Path = BASELINE_CSV) -> np.ndarray:
    """``(seeds, tasks)``: PPO's committed per-task returns at the screening step count."""
    steps, by_seed = _committed_by_seed(scale, path)
    if not all(seed in by_seed for seed in range(scale.seeds)):
        raise ValueError(f"{path}: expected PPO's returns at {steps} steps for seeds "
                         f"0-{scale.seeds - 1}, got seeds {sorted(by_seed)}")
    return np.array([by_seed[seed] for seed in range(scale.seeds)])


def render(results: list[dict[str, Any]], scale: Scale, env_id: str = ENV_ID
           ) -> tuple[str, dict[str, Any]]:
    """The screening table (Markdown) and its JSON.

    Each row is paired with PPO trained again by the same script on this machine when that
    row (``ppo``) is among ``results``, else with PPO's committed curve, which only
    ToolBench-v0 (:data:`ENV_ID`) has, up to 1,007,616 steps (:func:`has_baseline`):
    elsewhere the ``ppo`` row is the only baseline.

    Raises:
        ValueError: Without the ``ppo`` row where no committed curve is.
    """
    rule, planner = gap_ends(env_id, scale.episodes)
    setting = owned(env_id)
    score_name = "Eq. 1 return" if setting is None else setting.score_name
    entries: dict[str, dict[str, Any]] = {}
    labels: dict[str, str] = {}
    committed_seeds: dict[int, np.ndarray] = {}
    check_baseline((r["key"] for r in results), scale, env_id)
    if has_baseline(scale, env_id):
        committed = baseline(scale)
        committed_seeds = dict(enumerate(committed))
        entries["ppo/committed"] = method_share(BASELINE_LABEL, committed, rule, planner)
        entries["ppo/committed"]["seeds"] = list(range(len(committed)))
        entries["ppo/committed"]["return"] = list(bootstrap_mean_ci(
            committed, n_resamples=scale.resamples))
        labels["ppo/committed"] = f"{BASELINE_LABEL} ({len(committed)} seeds)"
    # each row's final per-task returns by seed; a row may have fewer seeds than another
    runs = {key: sorted((r for r in results if r["key"] == key), key=lambda r: r["seed"])
            for key in dict.fromkeys(r["key"] for r in results)}
    finals = {key: {r["seed"]: kept_scores(r["curve"][-1]["returns"]) for r in done}
              for key, done in runs.items()}
    ppo = finals.get("ppo", committed_seeds)
    ppo_validation = {r["seed"]: kept_scores(r["validation"]) for r in runs.get("ppo", [])
                      if r.get("validation") is not None}
    scored = [r["validation"] for r in results if r.get("validation") is not None]
    rule_v, planner_v = gap_ends(env_id, len(scored[0]) if scored else scale.episodes,
                                 VALIDATION_TASK_SEED)
    for key, done in runs.items():
        last = np.array(list(finals[key].values()))
        entry = method_share(ROWS[key].label, last, rule, planner)
        entry["seeds"] = sorted(finals[key])
        entry["return"] = list(bootstrap_mean_ci(last, n_resamples=scale.resamples))
        # paired over the seeds both have; the rerun itself against the committed curve
        against = committed_seeds if key == "ppo" else ppo
        common = [seed for seed in finals[key] if seed in against]
        if common:  # (the rerun on an env without a committed screen: nothing to pair)
            entry["minus_ppo"] = list(bootstrap_mean_ci(
                np.array([finals[key][seed] - against[seed] for seed in common]),
                n_resamples=scale.resamples))
        if all(r.get("validation") is not None for r in done):
            validation = np.array([kept_scores(r["validation"]) for r in done])
            entry["validation"] = method_share(ROWS[key].label, validation, rule_v, planner_v)
            pairs = [kept_scores(r["validation"]) - ppo_validation[r["seed"]] for r in done
                     if r["seed"] in ppo_validation]
            if pairs and key != "ppo":
                entry["validation_minus_ppo"] = list(bootstrap_mean_ci(
                    np.array(pairs), n_resamples=scale.resamples))
        entry["timesteps"] = done[0]["curve"][-1]["timesteps"]
        entry["minutes"] = float(np.mean([r["seconds"] for r in done]) / 60)
        entries[key] = entry
        labels[key] = f"{ROWS[key].label} ({len(done)} seeds)"
    lines = [f"# Teacherless learners on {env_id}: screening (issue #38)", "",
             f"Training seeds 0, 1, ... (their number in each label) x "
             f"{scale.timesteps:,} requested env steps on "
             f"{scale.n_envs} batched sub-envs; each row scored at its last checkpoint on the "
             f"same {len(rule)} evaluation tasks (task seed 0). Return: mean {score_name}; "
             f"share: of the gap from the best fixed row ({np.mean(rule):.3f}) to the "
             f"planner ({np.mean(planner):.3f}); 95% intervals over seeds and tasks. "
             "- PPO: the difference of return to "
             + ("PPO trained again here" + (" (for that row itself: to the committed curve)"
                                              if committed_seeds else "")
                if "ppo" in finals else "PPO's committed curve")
             + ", paired over the seeds both have and the tasks.", "",
             f"Machine: {machine()}.", "", *setting_lines(env_id),
             f"Validation: the share of the gap on {len(rule_v)} validation tasks (task seed "
             f"{VALIDATION_TASK_SEED}: rule {np.mean(rule_v):.3f}, planner "
             f"{np.mean(planner_v):.3f}), where a choice among rows is made. Gradient steps "
             "in the curves are PPO's: a SIL row adds its SIL steps after each update (its "
             "label's count times the rollouts, 62 at 507,904 steps).", "",
             "| row | return | share of the gap | per seed | - PPO (return) | validation share "
             "| validation - PPO (return) | min/seed |",
             "| --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for key, entry in entries.items():
        mean, low, high = entry["return"]
        seeds = ", ".join(f"{s:.2f}" for s in entry["per_seed"])
        diff = ("-" if "minus_ppo" not in entry else
                "{:+.3f} [{:+.3f}, {:+.3f}]".format(*entry["minus_ppo"]))
        minutes = f"{entry['minutes']:.1f}" if "minutes" in entry else "-"
        valid = share_text(entry["validation"]["share"]) if "validation" in entry else "-"
        valid_diff = ("{:+.3f} [{:+.3f}, {:+.3f}]".format(*entry["validation_minus_ppo"])
                      if "validation_minus_ppo" in entry else "-")
        lines.append(f"| {labels[key]} | {mean:.3f} [{low:.3f}, {high:.3f}] | "
                     f"{share_text(entry['share'])} | {seeds} | {diff} | {valid} | {valid_diff} "
                     f"| {minutes} |")
    lines += held_out_table(runs, labels, entries, scale, env_id)
    curves, _ = curve_table(env_id, results, rule, planner, scale, labels=labels)
    # the curve table without its title, setup and machine (given above)
    lines += ["", "## Curves", "", *curves.split("\n")[6:]]
    payload = {"env": env_id, "scale": repr(scale), "rule": float(np.mean(rule)),
               "planner": float(np.mean(planner)), "rows": entries}
    return "\n".join(lines) + "\n", payload


def held_out_table(runs: dict[str, list[dict[str, Any]]], labels: dict[str, str],
                   entries: dict[str, dict[str, Any]], scale: Scale, env_id: str = ENV_ID
                   ) -> list[str]:
    """The rows whose every run was scored on the test tasks: their lines of the report.

    Each such entry of ``entries`` gains ``test`` (its share of the test tasks' gap, whose
    rule end :func:`gap_ends` chooses on the validation tasks), ``test_return`` and,
    beside the ``ppo`` row trained again, ``test_minus_ppo`` (paired over the seeds both
    have and the tasks). No lines where no row was.
    """
    tested = {key: np.array([kept_scores(r["test"]) for r in done]) for key, done in
              runs.items() if all(r.get("test") is not None for r in done)}
    if not tested:
        return []
    sizes = {returns.shape[1] for returns in tested.values()}
    if len(sizes) != 1:
        raise ValueError(f"test tasks: expected one count for every row, got {sorted(sizes)}")
    rule, planner = gap_ends(env_id, sizes.pop(), TEST_TASK_SEED)
    ppo = ({r["seed"]: kept_scores(r["test"]) for r in runs["ppo"]} if "ppo" in tested
           else {})
    lines = ["", "## Held-out test tasks", "",
             f"Each final policy scored once more on {len(rule)} test tasks (task seed "
             f"{TEST_TASK_SEED}), which no choice has read (rule {np.mean(rule):.3f}, "
             f"planner {np.mean(planner):.3f}; the rule end chosen on the validation tasks). "
             "- PPO: paired with PPO trained again here, over the seeds both have and the "
             "tasks.", "",
             "| row | test return | test share of the gap | per seed | - PPO (return) |",
             "| --- | --- | --- | --- | --- |"]
    for key, returns in tested.items():
        entry = entries[key]
        entry["test"] = method_share(ROWS[key].label, returns, rule, planner)
        entry["test_return"] = list(bootstrap_mean_ci(returns, n_resamples=scale.resamples))
        pairs = [kept_scores(r["test"]) - ppo[r["seed"]] for r in runs[key]
                 if r["seed"] in ppo]
        if pairs and key != "ppo":
            entry["test_minus_ppo"] = list(bootstrap_mean_ci(np.array(pairs),
                                                             n_resamples=scale.resamples))
        diff = ("-" if "test_minus_ppo" not in entry else
                "{:+.3f} [{:+.3f}, {:+.3f}]".format(*entry["test_minus_ppo"]))
        mean, low, high = entry["test_return"]
        per_seed = ", ".join(f"{share:.2f}" for share in entry["test"]["per_seed"])
        lines.append(f"| {labels[key]} | "
                     f"{mean:.3f} [{low:.3f}, {high:.3f}] | {share_text(entry['test']['share'])} "
                     f"| {per_seed} | {diff} |")
    return lines
