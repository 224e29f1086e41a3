"""BoPO's λ scan: does the cost weight change the trained policy, under which reward?

On one profile and a few training seeds, BoPO is trained at several cost weights with the
paper's reward (the cost term ``λ·clip(position, 0, 1)``, ``0 <= λ < 1``) and with the
linear variant (``λ·offset``, unclipped, any ``λ >= 0``; see
:data:`agents.learners.bopo.COST_TERMS`). Each row pools its seeds (value: the mean over
seeds and tasks; interval: the two-level bootstrap over seeds and tasks,
:func:`cost_envs.metrics.bootstrap_mean_ci` on runs x tasks). Two comparisons answer the
question, both paired over the same seeds and tasks:

* ``spread``: per cost term, the highest λ minus the lowest, in success, mean cost and
  return: an interval that excludes 0 says λ moved the policy.
* ``vs_rule``: each row minus the fitted difficulty-threshold rule (one frozen rule, the
  same episodes for every seed) in success and mean cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cost_envs.metrics import EpisodeRecord, bootstrap_mean_ci, call_ratio

#: The rule every scan row is compared with.
RULE = "difficulty-threshold"
#: The per-episode quantities of the scan: name -> value of one episode.
QUANTITIES = {"success_rate": lambda r, _: float(r.success), "avg_cost": lambda r, _: r.cost,
              "episode_return": lambda _, g: g}

Run = tuple[Sequence[EpisodeRecord], Sequence[float]]


def _matrix(runs: Sequence[Run], quantity: str) -> np.ndarray:
    """``runs x tasks`` values of one quantity."""
    value = QUANTITIES[quantity]
    return np.array([[value(r, g) for r, g in zip(records, returns, strict=True)]
                     for records, returns in runs], dtype=np.float64)


def _interval(values: np.ndarray, resamples: int, seed: int) -> list[float]:
    """``[mean, low, high]``: two-level over runs and tasks (tasks only for one run)."""
    return list(bootstrap_mean_ci(values if len(values) > 1 else values[0],
                                  n_resamples=resamples, seed=seed))


def _row(runs: Sequence[Run], resamples: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for quantity in QUANTITIES:
        values = _matrix(runs, quantity)
        out[quantity] = _interval(values, resamples, seed)
        out[f"{quantity}_per_seed"] = [float(v) for v in values.mean(axis=1)]
    # what the policy does, not only how it ends: the share of steps on the large model
    out["large_steps_per_seed"] = [float(call_ratio(records)[0]) for records, _ in runs]
    out["large_steps"] = float(call_ratio([r for records, _ in runs for r in records])[0])
    return out


def _difference(a: Sequence[Run], b: Sequence[Run], quantity: str, resamples: int,
                seed: int) -> list[float]:
    """``a`` minus ``b``, paired over seeds (by position, or ``b`` one run) and tasks."""
    left, right = _matrix(a, quantity), _matrix(b, quantity)
    if len(right) not in (1, len(left)):
        raise ValueError(f"lambda scan: expected the same seeds or one run to compare, got "
                         f"{len(left)} and {len(right)} runs")
    return _interval(left - right, resamples, seed)


def scan_block(profile: str, runs: Mapping[str, Sequence[Run]], seeds: Sequence[int],
               rules: Mapping[str, Run], resamples: int = 1000, seed: int = 0
               ) -> dict[str, Any]:
    """The ``lambda_scan`` block of ``bopo.json``.

    Args:
        profile: The scan's profile.
        runs: ``bopo/<λ>`` and ``bopo-linear/<λ>`` -> each scan seed's ``(records,
            returns)`` on the evaluation tasks (the same seeds for every key).
        seeds: The scan's training seeds.
        rules: The fixed rules' ``(records, returns)`` (:data:`RULE` among them).
        resamples: Bootstrap resamples.
        seed: Seed of the bootstrap generator.

    Raises:
        ValueError: If ``rules`` lacks :data:`RULE`, or a key has another number of runs.
    """
    if RULE not in rules:
        raise ValueError(f"lambda scan: expected the {RULE!r} rule's episodes, got "
                         f"{sorted(rules)}")
    if any(len(v) != len(seeds) for v in runs.values()):
        raise ValueError(f"lambda scan: expected {len(seeds)} runs per key, got "
                         f"{ {k: len(v) for k, v in runs.items()} }")
    rows = {}
    for key, key_runs in runs.items():
        method, _, lam = key.partition("/")
        rows[key] = {"cost_term": "linear" if method == "bopo-linear" else "clipped",
                     "lam": float(lam), **_row(key_runs, resamples, seed),
                     "vs_rule": {q: _difference(key_runs, [rules[RULE]], q, resamples, seed)
                                 for q in ("success_rate", "avg_cost")}}
    spread = {}
    for term in ("clipped", "linear"):
        keys = sorted((k for k in rows if rows[k]["cost_term"] == term),
                      key=lambda k: rows[k]["lam"])
        if len(keys) > 1:
            low, high = keys[0], keys[-1]
            spread[term] = {"from": low, "to": high,
                            **{q: _difference(runs[high], runs[low], q, resamples, seed)
                               for q in QUANTITIES}}
    return {"profile": profile, "seeds": list(seeds), "rows": rows, "spread": spread,
            "rule": {"key": RULE, **_row([rules[RULE]], resamples, seed)}}


def _cell(values: Sequence[float], fmt: str) -> str:
    point, low, high = values
    return f"{point:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def _verdict(name: str, difference: Sequence[float], fmt: str) -> str:
    point, low, high = difference
    moved = "resolved" if low > 0 or high < 0 else "not resolved (the interval holds 0)"
    return f"{name} {point:+{fmt}} [{low:+{fmt}}, {high:+{fmt}}], {moved}"


def scan_markdown(block: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """The report's "λ scan" section: the table, the spreads and the rule comparison."""
    seeds = ", ".join(map(str, block["seeds"]))
    lines = [
        "", f"## λ scan ({block['profile']})", "",
        f"BoPO trained at several cost weights on {block['profile']}, seeds {seeds}, the "
        "table's steps and budget. *clipped*: the paper's cost term λ·clip((C - C_lo) / "
        "(C_hi - C_lo), 0, 1) with λ < 1; *linear* (not in the paper): λ·(C - C_lo) / "
        "(C_hi - C_lo), unclipped, any λ >= 0. Values pool the seeds: the mean over seeds "
        "and tasks, with a 95% two-level bootstrap interval over seeds and tasks. vs rule: "
        "the row minus the fitted difficulty threshold, paired over tasks. Large steps: "
        "share of steps on the large model (pooled).",
        "",
        "| Cost term | λ | Success | Avg cost ($) | Return | Large steps | Success vs rule | "
        "Cost vs rule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in block["rows"].values():
        lines.append(
            f"| {row['cost_term']} | {row['lam']:g} | {_cell(row['success_rate'], '.3f')} | "
            f"{_cell(row['avg_cost'], '.4f')} | {_cell(row['episode_return'], '.3f')} | "
            f"{row['large_steps']:.3f} | {_cell(row['vs_rule']['success_rate'], '+.3f')} | "
            f"{_cell(row['vs_rule']['avg_cost'], '+.4f')} |")
    rule = block["rule"]
    lines.append(f"| {labels.get(rule['key'], rule['key'])} | - | "
                 f"{_cell(rule['success_rate'], '.3f')} | {_cell(rule['avg_cost'], '.4f')} | "
                 f"{_cell(rule['episode_return'], '.3f')} | {rule['large_steps']:.3f} | - | - |")
    for term, spread in block["spread"].items():
        low, high = (block["rows"][k]["lam"] for k in (spread["from"], spread["to"]))
        lines += ["", f"**{term}**: λ = {high:g} minus λ = {low:g}, paired over seeds and "
                  "tasks: " + "; ".join([
                      _verdict("success", spread["success_rate"], ".3f"),
                      _verdict("mean cost", spread["avg_cost"], ".4f"),
                      _verdict("return", spread["episode_return"], ".3f")]) + "."]
    return lines
