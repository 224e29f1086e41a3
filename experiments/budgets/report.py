"""The learning curves' tables and CSV, from the runs :mod:`experiments.budgets.runner` made.

Also CORL's (:mod:`experiments.corl.budgets`) and BoPO's (:mod:`experiments.bopo.curve`)
curves are rendered here, and read the stop verdict of :func:`stops_improving`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments.budgets.settings import BUDGET_ROWS, Scale
from experiments.shared.common import machine
from experiments.shared.gaps import encode_scores, kept_scores


def share_text(share: Sequence[float | None]) -> str:
    """``point [low, high]`` of a share of the gap; ``[n/a]`` where the gap is unresolved.

    :func:`cost_envs.metrics.bootstrap_gap_closed` gives a NaN interval where the gap
    itself is not resolved above zero: a share of it has no interval.
    """
    point, low, high = share
    # (a JSON entry of :func:`experiments.shared.gaps.method_share` holds None for NaN)
    if low is None or high is None or np.isnan(low) or np.isnan(high):
        interval = "[n/a]"
    else:
        interval = f"[{low:.2f}, {high:.2f}]"
    return f"{point:.2f} {interval}"


def stops_improving(curve: np.ndarray, resamples: int, seed: int = 0) -> int | None:
    """The first checkpoint from which no gain to the last one is resolved.

    As :mod:`experiments.budgets.runner`'s docstring defines it. ``curve[s, c, j]``: seed
    ``s``'s return on task ``j`` at checkpoint ``c``. ``None``: the last checkpoint is
    resolved above the one before, so the row is still improving.
    """
    last = curve[:, -1]
    stop = curve.shape[1] - 1
    for index in range(curve.shape[1] - 2, -1, -1):
        _, low, _ = bootstrap_mean_ci(last - curve[:, index], n_resamples=resamples, seed=seed)
        if low > 0:
            break
        stop = index
    return None if stop == curve.shape[1] - 1 and curve.shape[1] > 1 else stop


def curve_section(heading: str, done: Sequence[Mapping[str, Any]], rule: Sequence[float],
                  planner: Sequence[float], resamples: int, score: str = "return",
                  values: str = "returns") -> tuple[list[str], list[list[Any]]]:
    """One learned row's part of a curve table, and its CSV rows.

    ``done``: the row's runs, one per seed (``seed``, ``seconds``, and a ``curve`` whose
    entries hold ``timesteps``, ``gradient_steps`` and the per-task scores under
    ``values``); ``score`` names them in the table's header. The part is ``heading``, the
    stop verdict (:func:`stops_improving`) with the wall time, and one line per
    checkpoint: the mean score and the share of the gap from ``rule`` to ``planner``, each
    with its interval over seeds and tasks. CSV rows: seed, timesteps, gradient steps,
    the mean and the per-task scores (:func:`experiments.shared.gaps.encode_scores`).
    """
    # the scores the CSV keeps: every cell is rebuilt from the file to the printed digit
    curve = np.array([[kept_scores(entry[values]) for entry in r["curve"]] for r in done])
    steps = [entry["timesteps"] for entry in done[0]["curve"]]
    updates = [entry["gradient_steps"] for entry in done[0]["curve"]]
    stop = stops_improving(curve, resamples)
    minutes = np.mean([r["seconds"] for r in done]) / 60
    verdict = ("Still improving at the last checkpoint: not converged at this budget."
               if stop is None else f"Stops improving at {steps[stop]:,} env steps.")
    lines = [heading, "",
             f"{verdict} Wall time per seed: {minutes:.1f} min (mean of {len(done)}).", "",
             f"| env steps | gradient steps | {score} | share of the gap |",
             "| ---: | ---: | --- | --- |"]
    for index, (step, update) in enumerate(zip(steps, updates, strict=True)):
        mean, low, high = bootstrap_mean_ci(curve[:, index], n_resamples=resamples)
        share = bootstrap_gap_closed(curve[:, index], rule, planner)
        mark = " **stops**" if index == stop else ""
        lines.append(f"| {step:,}{mark} | {update:,} | {mean:.3f} [{low:.3f}, {high:.3f}] "
                     f"| {share_text(share)} |")
    lines.append("")
    rows = [[result["seed"], entry["timesteps"], entry["gradient_steps"],
             f"{np.mean(entry[values]):.6f}", encode_scores(entry[values])]
            for result in done for entry in result["curve"]]
    return lines, rows


def curve_table(env_id: str, results: Sequence[dict[str, Any]], rule: Sequence[float],
                planner: Sequence[float], scale: Scale, labels: Mapping[str, str] | None = None,
                setup: str | None = None) -> tuple[str, str]:
    """The Markdown table and the CSV of one env's curves.

    ``results``: one per (row, seed), each with its ``key``, ``seed``, ``seconds`` and
    ``curve`` (per checkpoint ``timesteps``, ``gradient_steps`` and per-task ``returns``).
    ``labels``: each row's heading (default :data:`BUDGET_ROWS`' labels); ``setup``: how
    the runs were trained, the table's first words (default: seeds x steps on the batched
    env).
    """
    labels = labels or {key: row.label for key, row in BUDGET_ROWS.items()}
    setup = setup or (f"{scale.seeds} seeds x {scale.timesteps} env steps on {scale.n_envs} "
                      "batched sub-envs")
    lines = [f"# Learning curves on {env_id}", "",
             f"{setup}; each point scores the policy on the same {len(rule)} evaluation "
             "tasks (task seed 0). Return: mean Eq. 1 return [95% interval over seeds and "
             "tasks]; share: of the gap from the best fixed row "
             f"({np.mean(rule):.3f}) to the planner ({np.mean(planner):.3f}). "
             "**Stops** marks the first checkpoint from which no gain to the last one is "
             "resolved above zero.", "", f"Machine: {machine()}.", ""]
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    writer.writerow(["row", "seed", "timesteps", "gradient_steps", "mean_return", "returns"])
    for key in dict.fromkeys(result["key"] for result in results):
        done = sorted((r for r in results if r["key"] == key), key=lambda r: r["seed"])
        section, columns = curve_section(f"## {labels[key]}", done, rule, planner,
                                         scale.resamples)
        lines += section
        writer.writerows([key, *row] for row in columns)
    return "\n".join(lines), rows.getvalue()
