"""The share of the gap closed: where each learned method sits between a rule and the planner.

Every experiment's JSON carries one ``gap_closed`` block, built here, which
:mod:`experiments.aggregates.runner` reads across experiments:

.. code-block:: text

    {"experiment": its name, "score": what the per-task score is,
     "rule": its row label, "reference": its row label,
     "tasks": {task: {"rule": mean score, "reference": mean score,
                      "rule_scores": "per-episode scores", "reference_scores": "...",
                      "methods": {key: {"label": row label,
                                        "share": [point, low, high],
                                        "per_seed": [share of each training seed],
                                        "seed_scores": ["per-episode scores", ...]}}}}}

A *task* is one table: an env, a profile or a (profile, tier). The score is higher-is-
better and the same for every row of a task (the mean Eq. 1 episode return where the
experiment's methods maximise it; CORL's accuracy within budget). For a method trained
with seeds ``s`` scored on the task's episodes, ``share`` is
:func:`cost_envs.metrics.bootstrap_gap_closed` (0 = the best fixed rule, 1 = the planner
that knows the task but not its luck; paired over the task's episodes, resampling seeds)
and ``per_seed`` the share of each seed's mean. A task where the planner does not beat the
rule has no gap: its shares are ``null`` and the aggregates leave it out, saying so.

``rule_scores``, ``reference_scores`` and each method's ``seed_scores`` (one string per
seed) are the per-episode scores behind the shares, in episode order, so that the
aggregates can resample episodes too, paired across rows, as the per-table intervals do.
Each is one string of space-separated numbers rounded to :data:`SCORE_DECIMALS` decimals
(:func:`encode_scores`, read back by :func:`decode_scores`): the JSON files are written
with one list element per line, which would make a list of a few thousand numbers per
table ten times the size. Blocks written before these keys existed lack them; the
aggregates then say that the experiment must be rerun.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cost_envs.metrics import bootstrap_gap_closed, gap_closed

#: Decimals kept of each per-episode score: rounding moves a table's mean by less than
#: 5e-5, under 0.3% of the smallest gap of a committed table (0.018, BoPO's alfworld; the
#: 0/1 accuracies of CORL are exact).
SCORE_DECIMALS = 4

#: Per-episode scores: a list or a 1-D array.
Scores = Sequence[float] | np.ndarray
#: Per-seed per-episode scores: nested lists, a list of 1-D arrays, or a seeds x episodes
#: array (whatever :func:`numpy.asarray` makes a 2-D array of).
SeedScores = Sequence[Sequence[float]] | Sequence[np.ndarray] | np.ndarray


def _plain(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def encode_scores(values: Sequence[float] | np.ndarray) -> str:
    """Per-episode scores as one compact string: ``"0.8649 1 0 -0.1234"``.

    Raises:
        ValueError: If a value is not finite.
    """
    array = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(array).all():
        bad = array[~np.isfinite(array)][:3].tolist()
        raise ValueError(f"encode_scores: expected finite scores, got {bad}")
    # + 0.0 turns a rounded -0.0 into 0; trim="-" drops trailing zeros and the point
    return " ".join(np.format_float_positional(v + 0.0, trim="-")
                    for v in np.round(array, SCORE_DECIMALS))


def decode_scores(text: str) -> np.ndarray:
    """The scores of :func:`encode_scores`, as a float64 array.

    Raises:
        ValueError: If ``text`` is not a string of space-separated numbers.
    """
    try:
        return np.array(text.split(), dtype=np.float64)
    except (AttributeError, ValueError):
        raise ValueError(f"decode_scores: expected a string of space-separated numbers, got "
                         f"{str(text)[:40]!r}") from None


def kept_scores(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` as a results file keeps them (:func:`encode_scores`' rounding).

    A table computed from these is rebuilt from its file to the printed digit.
    """
    return decode_scores(encode_scores(values))


def method_share(label: str, per_seed_scores: SeedScores, rule_scores: Scores,
                 reference_scores: Scores) -> dict[str, Any]:
    """One method's entry: ``per_seed_scores[s][j]`` is seed ``s``'s score on episode ``j``."""
    runs = np.asarray(per_seed_scores, dtype=np.float64)
    share = bootstrap_gap_closed(runs, rule_scores, reference_scores)
    rule_mean, reference_mean = float(np.mean(rule_scores)), float(np.mean(reference_scores))
    return {"label": label, "share": [_plain(v) for v in share],
            "per_seed": [_plain(gap_closed(float(run.mean()), rule_mean, reference_mean))
                         for run in runs],
            "seed_scores": [encode_scores(run) for run in runs]}


def task_entry(rule_scores: Scores, reference_scores: Scores,
               methods: Mapping[str, tuple[str, SeedScores]]) -> dict[str, Any]:
    """One task's entry: ``methods`` maps key -> (label, per-seed per-episode scores)."""
    return {"rule": float(np.mean(rule_scores)), "reference": float(np.mean(reference_scores)),
            "rule_scores": encode_scores(rule_scores),
            "reference_scores": encode_scores(reference_scores),
            "methods": {key: method_share(label, runs, rule_scores, reference_scores)
                        for key, (label, runs) in methods.items()}}


def block(experiment: str, score: str, rule: str, reference: str,
          tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``gap_closed`` block of an experiment's JSON (tasks from :func:`task_entry`).

    ``experiment`` groups the blocks of several files (one per env) for the aggregates;
    task names must be unique within it.
    """
    return {"experiment": experiment, "score": score, "rule": rule, "reference": reference,
            "tasks": dict(tasks)}


def share_cell(entry: Mapping[str, Any] | None) -> str:
    """A table cell: ``0.42 [0.30, 0.55]``, or ``n/a`` without a gap to close."""
    if entry is None or entry["share"][0] is None:
        return "n/a"
    point, low, high = entry["share"]
    if low is None:
        return f"{point:.2f} [n/a]"
    return f"{point:.2f} [{low:.2f}, {high:.2f}]"
