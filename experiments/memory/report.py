"""The memory study's table and CSV, from the runs :mod:`experiments.memory.runner` made.

The table is rendered from what the CSV holds (``render(read_csv(csv), ...)``), so every
figure in it can be recomputed; the difference learner - PPO is :func:`paired_difference`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.learners import PPO_SETTINGS
from cost_envs.config import integer
from cost_envs.metrics import bootstrap_mean_ci, interval_around
from cost_envs.metrics.bootstrap import percentile_interval
from experiments.memory.settings import (
    BATCH,
    COMMAND,
    CONVERGED_STEPS,
    CSV_FIELDS,
    EPOCHS,
    LEARNERS,
    LEARNING_RATE,
    MAX_DECISIONS,
    RULE_LABEL,
    SCALES,
    Scale,
)
from experiments.shared.gaps import decode_scores, encode_scores
from experiments.shared.intervals import interval_text


def paired_difference(treated: np.ndarray, control: np.ndarray, resamples: int,
                      seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``treated`` - mean of ``control`` with a 95% two-level bootstrap interval.

    ``treated[s, j]``, ``control[s, j]``: seed ``s`` of each learner on task ``j`` (the same
    tasks). Each resample draws each learner's seeds independently (their networks share
    nothing) and one draw of tasks for both, so task difficulty cancels in the difference.

    Raises:
        ValueError: If the arrays are not 2-D, finite, on the same number of tasks.
    """
    a, b = np.asarray(treated, dtype=np.float64), np.asarray(control, dtype=np.float64)
    if (a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or a.size == 0 or b.size == 0
            or not (np.isfinite(a).all() and np.isfinite(b).all())):
        raise ValueError(f"paired_difference: expected finite seeds x tasks arrays on the same "
                         f"tasks, got shapes {a.shape} and {b.shape}")
    integer(resamples, "resamples", minimum=1)
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, a.shape[1], size=(resamples, a.shape[1]))
    runs_a = rng.integers(0, a.shape[0], size=(resamples, a.shape[0]))
    runs_b = rng.integers(0, b.shape[0], size=(resamples, b.shape[0]))
    diffs = np.array([a[np.ix_(ra, t)].mean() - b[np.ix_(rb, t)].mean()
                      for t, ra, rb in zip(tasks, runs_a, runs_b, strict=True)])
    point = float(a.mean() - b.mean())
    low, high = interval_around(point, percentile_interval([diffs], 0.95))
    return point, low, high


def write_csv(results: Sequence[Mapping[str, Any]]) -> str:
    """The runs as CSV (:data:`CSV_FIELDS`), per-task returns encoded in one column."""
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in results:
        writer.writerow([r["env"], r["learner"], r["seed"], r["timesteps"],
                         f"{r['train_seconds']:.1f}", f"{r['eval_seconds']:.1f}",
                         f"{np.mean(r['returns']):.6f}", encode_scores(r["returns"])])
    return rows.getvalue()


def read_csv(text: str) -> list[dict[str, Any]]:
    """The runs of :func:`write_csv` (returns as they were rounded there)."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != CSV_FIELDS:
        raise ValueError(f"read_csv: expected the columns {list(CSV_FIELDS)}, got "
                         f"{reader.fieldnames}")
    return [{"env": row["env"], "learner": row["learner"], "seed": int(row["seed"]),
             "timesteps": int(row["timesteps"]), "train_seconds": float(row["train_seconds"]),
             "eval_seconds": float(row["eval_seconds"]),
             "returns": list(decode_scores(row["returns"]))} for row in reader]


def summarize(results: Sequence[Mapping[str, Any]], resamples: int
              ) -> dict[str, dict[str, Any]]:
    """Per env: each learner's (mean, low, high) and wall times, and the difference.

    Returns:
        env -> {"learners": {key: {"return": (mean, low, high), "train_minutes": mean,
        "eval_seconds": mean, "seeds": n, "timesteps": steps}},
        "differences": {key: (mean, low, high) of that learner - ppo, for each other
        learner run with ppo}}.
    """
    summary: dict[str, dict[str, Any]] = {}
    for env_id in dict.fromkeys(r["env"] for r in results):
        arrays, learners = {}, {}
        for key in LEARNERS:
            runs = sorted((r for r in results if r["env"] == env_id and r["learner"] == key),
                          key=lambda r: r["seed"])
            if not runs:
                continue
            arrays[key] = np.array([r["returns"] for r in runs])
            learners[key] = {
                "return": bootstrap_mean_ci(arrays[key], n_resamples=resamples),
                "train_minutes": float(np.mean([r["train_seconds"] for r in runs])) / 60,
                "eval_seconds": float(np.mean([r["eval_seconds"] for r in runs])),
                "seeds": len(runs), "timesteps": sorted({r["timesteps"] for r in runs})}
        differences = {key: paired_difference(values, arrays["ppo"], resamples)
                       for key, values in arrays.items() if key != "ppo" and "ppo" in arrays}
        summary[env_id] = {"learners": learners, "differences": differences}
    return summary


def render(results: Sequence[Mapping[str, Any]], scale: Scale, where: str) -> str:
    """``memory.md``: per env the learners' returns, the difference, steps and wall times.

    ``results``: the runs (:func:`read_csv`), the rule's as learner ``rule``; ``where``: the
    machine.
    """
    summary = summarize(results, scale.resamples)
    rules = {r["env"]: r["returns"] for r in results if r["learner"] == "rule"}
    # what was trained: SB3 completes its last rollout, past the scale's steps
    taken = max((r["timesteps"] for r in results if r["learner"] != "rule"), default=0)
    own = SCALES.get(scale.name)
    envs = "" if own is not None and own.envs == scale.envs else f" --envs {','.join(scale.envs)}"
    lines = ["# Does memory pay? "
             + " and ".join(LEARNERS[key][0].split(" (")[0] for key in scale.learners
                            if key != "ppo") + " against PPO (issue #23)", "",
             f"`{COMMAND} --scale {scale.name}{envs}` on {where}, one torch thread per run.",
             "",
             f"{scale.seeds} training seeds per learner, {scale.timesteps:,} env steps each on "
             f"{scale.n_envs} batched sub-envs, at the project's PPO settings "
             f"({PPO_SETTINGS['n_steps']} steps per sub-env and rollout, minibatch {BATCH}, "
             f"{EPOCHS} epochs, lr {LEARNING_RATE:g}, entropy {PPO_SETTINGS['ent_coef']}). The "
             "learners have the same 64-64 heads"
             + ("; RecurrentPPO adds sb3-contrib's LSTM (256 units)"
                if "recurrent" in scale.learners else "")
             + ("; the history PPO sees the episode's last "
                + ", ".join(f"{MAX_DECISIONS[e]} ({e.split('/')[-1]})" for e in scale.envs)
                + " observations, zeros before its first: every observation of its episode"
                if "history" in scale.learners else "")
             + f". Scored on the tables' first {scale.episodes} evaluation tasks (task seed "
             "0), memory reset at each episode start. Return: mean Eq. 1 "
             "return [95% interval over seeds and tasks]; difference: learner - PPO, seeds "
             "resampled independently, tasks paired.", "",
             "| Env | Row | Return | Train min/run | Eval s/run |",
             "|---|---|---|---:|---:|"]
    for env_id, entry in summary.items():
        name = env_id.split("/")[-1]
        if env_id in rules:
            rule = bootstrap_mean_ci(rules[env_id], n_resamples=scale.resamples)
            lines.append(f"| {name} | {RULE_LABEL} | {interval_text(rule)} | | |")
        for key, row in entry["learners"].items():
            lines.append(f"| {name} | {LEARNERS[key][0]} | {interval_text(row['return'])} | "
                         f"{row['train_minutes']:.2f} | {row['eval_seconds']:.1f} |")
        for key, difference in entry["differences"].items():
            lines.append(f"| {name} | **{LEARNERS[key][0].split(' (')[0]} - PPO** | "
                         f"**{interval_text(difference, signed=True)}** | | |")
    lines += ["", "Steps taken per run (SB3 completes its last rollout): " + "; ".join(
        f"{env_id.split('/')[-1]} {key} {', '.join(f'{s:,}' for s in row['timesteps'])}"
        for env_id, entry in summary.items() for key, row in entry["learners"].items()) + ".",
        "", f"Gradient steps per run: {taken // BATCH * EPOCHS:,} (minibatch {BATCH}, "
        f"{EPOCHS} epochs), the same for every learner.", ""]
    if scale.timesteps < CONVERGED_STEPS:
        lines += ["**Not converged.** At this budget neither learner is near convergence: the "
                  "project's PPO stops improving at about 500k env steps on ToolBench-v0 and "
                  "2M on FlightPlanner-v1, where it is a little above the one-turn rule "
                  "(`benchmarks/results/budgets_*.md`, `converged_FlightPlanner-v1.md`). "
                  "The difference compares what each learner reaches at this small equal "
                  "budget, not what memory buys at convergence.", ""]
    return "\n".join(lines)
