"""Aggregates across envs and profiles in rliable's style: ``python -m experiments aggregates``.

Reads the ``gap_closed`` block (:mod:`experiments.gaps`) of every JSON file in the
results directory, groups the blocks by experiment, and for each learned method of an
experiment forms the matrix of its per-seed shares of the gap closed, seeds x tasks (a
task is an env, a profile or a (profile, tier)). On that matrix, with rliable (Agarwal
et al., 2021, "Deep RL at the edge of the statistical precipice"):

* the **interquartile mean** (IQM: the mean of the middle 50% of all run-task scores,
  robust to a few outlying runs and tasks) and the mean, each with a 95% stratified
  bootstrap interval (runs resampled within each task);
* the **probability of improvement** of each method over each other one of the same
  experiment, ``P(X > Y)``: the chance that a run of X beats a run of Y on a task drawn
  at random (Mann-Whitney per task, averaged over tasks), with its interval. 0.5 is a tie.

Shares put every task on one scale: 0 is the best fixed rule, 1 the planner that knows the
task but not its luck. A task where the planner does not beat the rule has no gap and is
left out of its experiment's aggregates; the report lists such tasks. Methods are compared
only on the tasks every one of them has; a method trained on some of the tasks only (a
tuned row, where a sweep ran) is named in the report, not pooled. Different experiments'
methods are not pooled: their tasks, rules and planners differ.

The IQM and the mean and their intervals are rliable's (``get_interval_estimates``). The
probability of improvement is rliable's estimator (``metrics.probability_of_improvement``:
``P(X > Y) + P(X = Y) / 2`` per task, averaged over tasks) and its stratified independent
bootstrap (each method's runs resampled within each task), vectorised here
(:func:`probability_of_improvement`): rliable computes it with one SciPy Mann-Whitney test
per task and replicate, about 20 ms per replicate for 24 tasks, which made one pair of
CORL's methods take 20 s. The tests check the two agree.

``rliable`` comes with the ``tune`` extra; without it this says so in one line. The
intervals are seeded, so a rerun on the same inputs writes the same files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.files import write_files_atomic
from experiments.common import quiet

#: Bootstrap replications of the stratified bootstrap (rliable's default is 50000; 2000
#: keeps the report to seconds and the interval ends stable to about 0.01).
REPS = 2000
FILES = ("aggregates.md", "aggregates.json")


def read_blocks(results: Path) -> list[dict[str, Any]]:
    """The ``gap_closed`` blocks of the JSON files in ``results``, in file-name order."""
    blocks = []
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"aggregates: cannot read {path}: {error}") from None
        if isinstance(data, dict) and "gap_closed" in data:
            blocks.append({**data["gap_closed"], "file": path.name})
    return blocks


def score_matrices(blocks: Sequence[Mapping[str, Any]]
                   ) -> dict[str, dict[str, Any]]:
    """Per experiment: its tasks, the tasks left out, and each method's seeds x tasks shares.

    Raises:
        ValueError: If a task name repeats within an experiment or a method's seed count
            differs between tasks.
    """
    grouped: dict[str, dict[str, Any]] = {}
    for entry in blocks:
        group = grouped.setdefault(entry["experiment"], {
            "score": entry["score"], "rule": entry["rule"], "reference": entry["reference"],
            "tasks": {}, "files": []})
        group["files"].append(entry["file"])
        for task, values in entry["tasks"].items():
            if task in group["tasks"]:
                raise ValueError(f"aggregates: task {task!r} of {entry['experiment']} appears "
                                 f"twice (in {entry['file']})")
            group["tasks"][task] = values
    out = {}
    for experiment, group in grouped.items():
        tasks = group["tasks"]
        without_gap = [t for t, v in tasks.items() if v["reference"] <= v["rule"]]
        kept = [t for t in tasks if t not in without_gap]
        every = dict.fromkeys(m for t in kept for m in tasks[t]["methods"])
        methods = [m for m in every if all(m in tasks[t]["methods"] for t in kept)]
        # e.g. tuned rows, trained only where a sweep ran: named, not pooled
        partial = {next(tasks[t]["methods"][m]["label"] for t in kept
                        if m in tasks[t]["methods"]):
                   [t for t in kept if m in tasks[t]["methods"]]
                   for m in every if m not in methods}
        matrices, labels = {}, {}
        for method in methods:
            columns = [tasks[t]["methods"][method]["per_seed"] for t in kept]
            if len({len(c) for c in columns}) > 1:
                raise ValueError(f"aggregates: {experiment} {method}: the seed count differs "
                                 f"between tasks ({sorted({len(c) for c in columns})})")
            matrices[method] = np.array(columns, dtype=np.float64).T  # seeds x tasks
            labels[method] = tasks[kept[0]]["methods"][method]["label"]
        out[experiment] = {**{k: group[k] for k in ("score", "rule", "reference", "files")},
                           "tasks": kept, "without_gap": without_gap, "partial": partial,
                           "labels": labels, "matrices": matrices}
    return out


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``P(X > Y) + P(X = Y) / 2`` averaged over tasks, for ``x[..., runs, tasks]``."""
    wins = (x[..., :, None, :] > y[..., None, :, :]).mean(axis=(-3, -2))
    ties = (x[..., :, None, :] == y[..., None, :, :]).mean(axis=(-3, -2))
    return (wins + 0.5 * ties).mean(axis=-1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = REPS,
                               confidence: float = 0.95, seed: int = 0) -> list[float]:
    """``[point, low, high]`` of the probability that a run of X beats a run of Y.

    ``x`` and ``y`` are runs x tasks on the same tasks. The point is rliable's
    ``probability_of_improvement``; the interval a percentile bootstrap that resamples
    each method's runs within each task, independently (rliable's
    ``StratifiedIndependentBootstrap``), ``reps`` times.
    """
    rng = np.random.default_rng(seed)
    tasks = np.arange(x.shape[1])
    drawn_x = x[rng.integers(0, x.shape[0], size=(reps, *x.shape)), tasks]
    drawn_y = y[rng.integers(0, y.shape[0], size=(reps, *y.shape)), tasks]
    tail = (1 - confidence) / 2
    low, high = np.quantile(_improvement(drawn_x, drawn_y), [tail, 1 - tail])
    return [float(_improvement(x, y)), float(low), float(high)]


def aggregate(matrices: Mapping[str, np.ndarray], reps: int = REPS) -> dict[str, Any]:
    """IQM and mean per method and probability of improvement per ordered pair, with intervals."""
    import warnings

    from rliable import library as rly
    from rliable import metrics

    def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])

    # rliable's StratifiedBootstrap draws its resamples with numpy's *global* generator
    # (np.random.choice in update_indices) whatever random_state says, so the intervals
    # moved with whatever ran before in the process: seed it here, and put it back after.
    global_state = np.random.get_state()
    np.random.seed(0)
    try:
        with warnings.catch_warnings():  # arch warns about rliable's RandomState argument
            warnings.simplefilter("ignore", FutureWarning)
            points, intervals = rly.get_interval_estimates(
                dict(matrices), iqm_and_mean, reps=reps,
                random_state=np.random.RandomState(0))
    finally:
        np.random.set_state(global_state)
    summary = {m: {"runs": int(matrices[m].shape[0]),
                   "iqm": [float(points[m][0]), *map(float, intervals[m][:, 0])],
                   "mean": [float(points[m][1]), *map(float, intervals[m][:, 1])]}
               for m in matrices}
    names = list(matrices)
    improvement = {f"{x} > {y}": probability_of_improvement(matrices[x], matrices[y], reps)
                   for x in names for y in names if x != y}
    return {"methods": summary, "probability_of_improvement": improvement}


def _cell(values: Sequence[float]) -> str:
    return f"{values[0]:.2f} [{values[1]:.2f}, {values[2]:.2f}]"


def render(report: Mapping[str, Any]) -> str:
    """``aggregates.md``."""
    lines = ["# Aggregates across envs and profiles", "",
             "Each learned method's per-seed *share of the gap closed* between the best fixed "
             "rule (0) and the planner that knows the task but not its luck (1), pooled over "
             "an experiment's tasks (envs, profiles, tiers): interquartile mean and mean with "
             "95% stratified-bootstrap intervals, and the probability that a run of one "
             f"method beats a run of another on a random task (rliable {report['rliable']}, "
             f"{report['reps']} bootstrap replications). Written by `python -m experiments "
             "aggregates` from the JSON files beside this one.", ""]
    for experiment, result in report["experiments"].items():
        lines += [f"## {experiment}", "",
                  f"Score: {result['score']}; 0 = {result['rule']}, 1 = {result['reference']}. "
                  f"Tasks ({len(result['tasks'])}): {', '.join(result['tasks'])}."
                  + (f" Left out, the planner not above the rule: "
                     f"{', '.join(result['without_gap'])}." if result["without_gap"] else "")
                  + (" Left out, trained on some of these tasks only (their shares are in "
                     "their experiment's tables): " + "; ".join(
                         f"{label} ({len(have)} of {len(result['tasks'])})"
                         for label, have in result["partial"].items()) + "."
                     if result.get("partial") else ""),
                  "", "| Method | Seeds | IQM | Mean |", "|---|---|---|---|"]
        for method, values in result["methods"].items():
            lines.append(f"| {result['labels'][method]} | {values['runs']} | "
                         f"{_cell(values['iqm'])} | {_cell(values['mean'])} |")
        if result["probability_of_improvement"]:
            lines += ["", "| P(row beats column) | " + " | ".join(
                result["labels"][m] for m in result["methods"]) + " |",
                "|---|" + "---|" * len(result["methods"])]
            for x in result["methods"]:
                cells = [("-" if x == y else
                          _cell(result["probability_of_improvement"][f"{x} > {y}"]))
                         for y in result["methods"]]
                lines.append(f"| {result['labels'][x]} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def build(results: Path, reps: int = REPS) -> dict[str, Any]:
    """The report of every experiment whose JSON in ``results`` has a ``gap_closed`` block."""
    from importlib.metadata import version

    experiments = {}
    for experiment, group in score_matrices(read_blocks(results)).items():
        if not group["matrices"]:
            continue
        aggregated = aggregate(group["matrices"], reps)
        experiments[experiment] = {
            **{k: group[k] for k in ("score", "rule", "reference", "files", "tasks",
                                     "without_gap", "partial", "labels")},
            **aggregated}
    return {"rliable": version("rliable"), "reps": reps, "experiments": experiments}


def report(out: Path, results: Path | None = None, reps: int = REPS,
           log: Callable[[str], None] = quiet) -> list[Path]:
    """Aggregate the JSON files of ``results`` (default ``out``) into ``out``'s two files.

    Raises:
        ValueError: Without rliable, or when no JSON file has a ``gap_closed`` block.
    """
    try:
        import rliable  # noqa: F401
    except ImportError:
        raise ValueError("aggregates: needs rliable (pip install -e '.[tune]')") from None
    built = build(results or out, reps)
    if not built["experiments"]:
        raise ValueError(f"aggregates: no JSON file in {results or out} has a gap_closed "
                         "block; run the experiments first")
    log(f"aggregates: {', '.join(built['experiments'])}")
    return write_files_atomic(out, {"aggregates.md": render(built),
                                    "aggregates.json": json.dumps(built, indent=2) + "\n"})
