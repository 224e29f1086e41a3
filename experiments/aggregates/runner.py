"""Aggregates across envs and profiles in rliable's style: ``python -m experiments aggregates``.

Reads the ``gap_closed`` block (:mod:`experiments.shared.gaps`) of every JSON file in the
results directory, groups the blocks by experiment, and for each learned method of an
experiment forms the matrix of its per-seed shares of the gap closed, seeds x tasks (a
task is an env, a profile or a (profile, tier)). On that matrix, with rliable's estimators
(Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice"):

* the **interquartile mean** (IQM: the mean of the middle 50% of all run-task scores,
  robust to a few outlying runs and tasks) and the mean;
* the **probability of improvement** of each method over each other one of the same
  experiment, ``P(X > Y)``: the chance that a run of X beats a run of Y on a task drawn
  at random (``P(X > Y) + P(X = Y) / 2`` per task, averaged over tasks). 0.5 is a tie.

**Intervals: seeds and tasks.** Each share was measured on one table's evaluation episodes,
so it carries their luck as well as the seed's. The 95% intervals are a two-level
bootstrap: each replicate draws each table's episodes with replacement (one draw for the
rule and every run of every method: the rows stay paired on the same episodes) and,
within each table, each method's seeds (rliable's stratified bootstrap); every share is
then the drawn run minus the drawn rule over the table's gap. The gap is each table's
point gap, as rliable normalises by fixed reference scores: redrawing it too put the
draws where it nears 0 into the tails, and the ends moved by up to 0.38 with the
bootstrap's seed (on the committed tables, 2,000 replicates). The gap's own uncertainty
is in each table's interval (Fieller's, :func:`cost_envs.metrics.bootstrap_gap_closed`).
Resampling seeds only, on a fixed evaluation set, gave a method whose seeds agree (LoRA
supervised: every seed the greedy teacher's copy) a zero-width interval.

**What is pooled.** Shares put every task on one scale: 0 is the best fixed rule, 1 the
planner that knows the task but not its luck. Left out of an experiment's aggregates, and
listed in its report: a task where the planner does not beat the rule (no gap); a task
where it does on the mean but its advantage is not resolved (the 95% normal interval of
planner minus rule over the episodes, with the bootstrap's variance in closed form,
includes 0: the shares would divide by a gap that might be nothing, and the table's own
interval of a share is unbounded); and a task that asks the same questions with the same
luck as another task of the experiment (:data:`SAME_TASKS`: an older version of an env whose newer
version is there), which would count those episodes twice. Methods are compared only on
the tasks every one of them has; a method trained on some of the tasks only (a tuned row,
where a sweep ran) is named in the report, not pooled. Different experiments' methods are
not pooled: their tasks, rules and planners differ. An experiment whose blocks predate the
per-episode scores is not aggregated; the report says to rerun it.

The points are rliable's ``aggregate_iqm``, ``aggregate_mean`` and
``probability_of_improvement``; the bootstrap is ours, vectorised (the tests check that
without task noise its intervals are rliable's stratified bootstrap's). ``rliable`` comes
with the ``tune`` extra; without it this says so in one line. The intervals are seeded, so
a rerun on the same inputs writes the same files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from agents.files import reading_files, write_files_atomic
from cost_envs.metrics.bootstrap import (
    gap_closed_moments,
    mid_quantile_interval,
    resample_blocks,
    resample_counts,
)
from experiments.aggregates.report import left_out, render
from experiments.shared.common import quiet
from experiments.shared.gaps import SCORE_DECIMALS, decode_scores

#: Bootstrap replications (rliable's default is 50,000). With mid-quantile ends, the
#: committed intervals' ends moved by at most 0.011 over bootstrap seeds 0-4 at 100,000 (by
#: up to 0.07 at 2,000, percentile ends): 200,000 halves the variance for a margin, and
#: tests/test_aggregates.py checks 0.01 between two seeds on the committed results.
REPS = 200_000
#: The smoke scale's replications: its tables check that the pipeline runs, not a result.
SMOKE_REPS = 2_000
CONFIDENCE = 0.95
FILES = ("aggregates.md", "aggregates.json")
#: Envs whose tasks are another env's: ``{older: newer}``. FlightPlanner-v1 is v0's tasks,
#: outcomes and costs with a richer observation; ExpertRouting-v1 draws v0's questions
#: and luck first and its distractors after. An experiment holding both keeps the newer
#: version's task (the harder env, the one the project's goals name) and leaves the older
#: one out, whatever either's gap: choosing the version by its result would bias the pool.
SAME_TASKS = {"FlightPlanner-v0": "FlightPlanner-v1", "ExpertRouting-v0": "ExpertRouting-v1"}
#: Why an experiment written before the blocks carried per-episode scores is not pooled.
NO_EPISODES = ("its gap_closed blocks have no per-episode scores (written before issue #23): "
               "rerun the experiment ({files}).")


def read_blocks(results: Path) -> list[dict[str, Any]]:
    """The ``gap_closed`` blocks of the JSON files in ``results``, in file-name order."""
    blocks: list[dict[str, Any]] = []
    if not results.is_dir():
        return blocks
    # through the saves' reader: a report whose save was killed after its commit point is
    # read as saved, never half old and half new (agents.files)
    with reading_files(results, sorted(p.name for p in results.glob("*.json"))) as where:
        texts = {}
        for name, path in where.items():
            try:
                texts[name] = path.read_text()
            except OSError as error:
                raise ValueError(f"aggregates: cannot read {results / name}: {error}") from None
    for name, text in texts.items():
        path = results / name
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"aggregates: cannot read {path}: {error}") from None
        if isinstance(data, dict) and "gap_closed" in data:
            blocks.append({**data["gap_closed"], "file": path.name})
    return blocks


def newer_twin(task: str) -> str | None:
    """The task of :data:`SAME_TASKS`'s newer env with the same questions, if ``task`` has one."""
    env, slash, rest = task.partition("/")
    newer = SAME_TASKS.get(env)
    return None if newer is None else newer + slash + rest


def gap_resolved(rule: np.ndarray, reference: np.ndarray) -> bool:
    """Whether the planner's advantage over the rule is resolved on these episodes.

    True when the mean of ``reference - rule`` is above 0 by more than the normal
    :data:`CONFIDENCE` bound of the episodes' bootstrap (its exact variance,
    :func:`~cost_envs.metrics.bootstrap.gap_closed_moments`): exactly where each table's
    Fieller interval of a share is bounded. No draws: no seed can move a task in or out.
    """
    _, gap, _, var_gap, _ = gap_closed_moments(rule, rule, reference)
    return gap > 0 and gap**2 > NormalDist().inv_cdf((1 + CONFIDENCE) / 2) ** 2 * var_gap


def _episodes(experiment: str, task: str, entry: Mapping[str, Any],
              methods: Sequence[str]) -> dict[str, Any]:
    """A task's per-episode scores: rule, reference and each method's seeds x episodes.

    Raises:
        ValueError: If a row's episodes or a method's seeds do not match the rule's
            episodes and the method's ``per_seed``.
    """
    rule = decode_scores(entry["rule_scores"])
    reference = decode_scores(entry["reference_scores"])
    if reference.size != rule.size:
        raise ValueError(f"aggregates: {experiment} {task}: {reference.size} reference scores "
                         f"for {rule.size} rule scores, expected one per episode")
    runs = {}
    for method in methods:
        seeds = [decode_scores(text) for text in entry["methods"][method]["seed_scores"]]
        expected = len(entry["methods"][method]["per_seed"])
        if len(seeds) != expected or {s.size for s in seeds} != {rule.size}:
            raise ValueError(f"aggregates: {experiment} {task}: {method} has seed_scores of "
                             f"{sorted({s.size for s in seeds})} episodes for {len(seeds)} "
                             f"seeds, expected {rule.size} episodes for {expected} seeds")
        runs[method] = np.array(seeds)
    return {"rule": rule, "reference": reference, "methods": runs}


def score_matrices(blocks: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per experiment: the tasks pooled and left out, and each method's seeds x tasks shares.

    An experiment whose blocks lack per-episode scores gets only ``missing_scores`` (its
    files) beside its score, rule and reference.

    Raises:
        ValueError: If a task name repeats within an experiment, a method's seed count
            differs between tasks or a task's per-episode scores do not line up.
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
        head = {k: group[k] for k in ("score", "rule", "reference", "files")}
        if not all("rule_scores" in v and "reference_scores" in v for v in tasks.values()):
            out[experiment] = {**head, "missing_scores": group["files"]}
            continue
        same = {t: newer_twin(t) for t in tasks if newer_twin(t) in tasks}
        without_gap = [t for t, v in tasks.items()
                       if t not in same and v["reference"] <= v["rule"]]
        unresolved = [t for t, v in tasks.items() if t not in same and t not in without_gap
                      and not gap_resolved(decode_scores(v["rule_scores"]),
                                           decode_scores(v["reference_scores"]))]
        kept = [t for t in tasks if t not in same and t not in without_gap + unresolved]
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
        out[experiment] = {**head, "tasks": kept, "without_gap": without_gap,
                           "unresolved_gap": unresolved, "same_tasks": same,
                           "partial": partial, "labels": labels, "matrices": matrices,
                           "episodes": {t: _episodes(experiment, t, tasks[t], methods)
                                        for t in kept}}
    return out


def resample(episodes: Mapping[str, Mapping[str, Any]], methods: Sequence[str],
             reps: int = REPS, seed: int = 0) -> dict[str, np.ndarray]:
    """Bootstrap replicates of every method's per-seed share of the gap on every task.

    ``episodes[task]`` is :func:`score_matrices`' entry (rule, reference, and each method's
    seeds x episodes). Each replicate draws each task's episodes with replacement, once
    for all rows, and each method's seeds within each task (independently per method);
    a share is the drawn run's mean minus the drawn rule's, over the task's gap on all its
    episodes (rliable's normalisation by fixed references: the gap's own uncertainty is in
    each table's Fieller interval, :func:`cost_envs.metrics.bootstrap_gap_closed`).

    Returns:
        ``shares[method]``: replicates x seeds x tasks.

    Raises:
        ValueError: If a task's planner is not above its rule (no gap to divide by).
    """
    rng = np.random.default_rng(seed)
    n_tasks = len(episodes)
    first: Mapping[str, Any] = next(iter(episodes.values()), {"methods": {}})
    shares = {m: np.empty((reps, first["methods"][m].shape[0], n_tasks)) for m in methods}
    for t, (task, data) in enumerate(episodes.items()):
        n = data["rule"].size
        rule_units, reference_units = _units(task, data["rule"]), _units(task, data["reference"])
        gap = reference_units.sum() - rule_units.sum()  # n x the gap, in score units
        if not gap > 0:
            raise ValueError(f"aggregates: {task}: the reference is not above the rule "
                             f"({gap / n / 10**SCORE_DECIMALS:+.4g}): no gap to scale the "
                             "shares by")
        runs = {method: _units(task, data["methods"][method]) for method in methods}
        start = 0
        for size in resample_blocks(reps, n):  # bounded memory at any reps
            counts = resample_counts(rng, size, n)  # each row: one draw of the episodes
            # Whole numbers below 2**53 (counts <= n, scores in units of the last kept
            # decimal): every sum is exact in float64 whatever order a CPU's BLAS adds in,
            # so runs whose episodes are equal tie exactly on every machine (a Haswell
            # kernel's last bit once broke the ties of an AVX-512 one: P(X > Y) 0.03 apart)
            rule = counts @ rule_units
            for method in methods:
                sums = counts @ runs[method].T  # replicates x seeds, every seed on the same draw
                chosen = rng.integers(0, sums.shape[1], size=sums.shape)
                shares[method][start:start + size, :, t] = (
                    np.take_along_axis(sums, chosen, axis=1) - rule[:, None]) / gap
            start += size
    return shares


def _units(task: str, scores: np.ndarray) -> np.ndarray:
    """Kept scores (:data:`SCORE_DECIMALS` decimals) as whole numbers of their last decimal.

    Raises:
        ValueError: If a score has more decimals than a results file keeps.
    """
    units = scores * 10**SCORE_DECIMALS
    whole = np.rint(units)
    if not np.allclose(units, whole, rtol=0, atol=1e-6):
        bad = scores[~np.isclose(units, whole, rtol=0, atol=1e-6)][:3].tolist()
        raise ValueError(f"aggregates: {task}: scores {bad} have more than {SCORE_DECIMALS} "
                         "decimals, expected the kept scores of experiments.shared.gaps")
    if np.abs(whole).max(initial=0) * scores.shape[-1] >= 2**53:  # a drawn sum's bound
        raise ValueError(f"aggregates: {task}: scores too large to sum exactly")
    return whole


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``P(X > Y) + P(X = Y) / 2`` averaged over tasks, for ``x[..., runs, tasks]``."""
    wins = (x[..., :, None, :] > y[..., None, :, :]).mean(axis=(-3, -2))
    ties = (x[..., :, None, :] == y[..., None, :, :]).mean(axis=(-3, -2))
    return (wins + 0.5 * ties).mean(axis=-1)


def _estimate(point: float, drawn: np.ndarray) -> list[float]:
    """``[point, low, high]``: the mid-quantile interval of the replicates ``drawn``."""
    return [point, *mid_quantile_interval(drawn, CONFIDENCE)]


def aggregate(matrices: Mapping[str, np.ndarray], episodes: Mapping[str, Mapping[str, Any]],
              reps: int = REPS, seed: int = 0) -> dict[str, Any]:
    """IQM and mean per method and probability of improvement per ordered pair, with intervals.

    ``matrices[method]`` is seeds x tasks of per-seed shares (the points), ``episodes``
    the tasks' per-episode scores in the same task order (:func:`score_matrices`).
    """
    from rliable import metrics  # type: ignore[import-untyped]  # no stubs, no py.typed
    from scipy.stats import trim_mean  # type: ignore[import-untyped]  # no stubs

    methods = list(matrices)
    shares = resample(episodes, methods, reps, seed)
    summary = {}
    for method in methods:
        flat = shares[method].reshape(reps, -1)
        summary[method] = {
            "runs": int(matrices[method].shape[0]),
            "iqm": _estimate(float(metrics.aggregate_iqm(matrices[method])),
                             trim_mean(flat, 0.25, axis=1)),
            "mean": _estimate(float(metrics.aggregate_mean(matrices[method])),
                              flat.mean(axis=1))}
    improvement = {f"{x} > {y}": _estimate(
        float(metrics.probability_of_improvement(matrices[x], matrices[y])),
        _improvement(shares[x], shares[y])) for x in methods for y in methods if x != y}
    return {"methods": summary, "probability_of_improvement": improvement}


def build(results: Path, reps: int = REPS) -> dict[str, Any]:
    """The report of every experiment whose JSON in ``results`` has a ``gap_closed`` block.

    Experiments with nothing to pool are under ``not_aggregated``, with the reason.
    """
    from importlib.metadata import version

    experiments, skipped = {}, {}
    for experiment, group in score_matrices(read_blocks(results)).items():
        if "missing_scores" in group:
            skipped[experiment] = NO_EPISODES.format(files=", ".join(group["missing_scores"]))
            continue
        if not group["matrices"]:
            skipped[experiment] = ("no learned method on a task whose gap is resolved."
                                   + left_out(group))
            continue
        experiments[experiment] = {
            **{k: group[k] for k in ("score", "rule", "reference", "files", "tasks",
                                     "same_tasks", "without_gap", "unresolved_gap", "partial",
                                     "labels")},
            **aggregate(group["matrices"], group["episodes"], reps)}
    return {"rliable": version("rliable"), "reps": reps, "experiments": experiments,
            "not_aggregated": skipped}


def report(out: Path, results: Path | None = None, reps: int = REPS,
           log: Callable[[str], None] = quiet) -> list[Path]:
    """Aggregate the JSON files of ``results`` (default ``out``) into ``out``'s two files.

    Raises:
        ValueError: Without rliable, or when no experiment has anything to pool (no JSON
            file with a ``gap_closed`` block, or none with a resolved gap and per-episode
            scores).
    """
    try:
        import rliable  # noqa: F401
    except ImportError:
        raise ValueError("aggregates: needs rliable (pip install -e '.[tune]')") from None
    built = build(results or out, reps)
    if not built["experiments"]:
        if not built["not_aggregated"]:
            raise ValueError(f"aggregates: no JSON file in {results or out} has a gap_closed "
                             "block; run the experiments first")
        raise ValueError("aggregates: nothing to pool. " + " ".join(
            f"{name}: {why}" for name, why in built["not_aggregated"].items()))
    log(f"aggregates: {', '.join(built['experiments'])}")
    return write_files_atomic(out, {"aggregates.md": render(built),
                                    "aggregates.json": json.dumps(built, indent=2) + "\n"})
