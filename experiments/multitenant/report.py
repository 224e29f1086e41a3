"""The sweep's table and figure, from the cells :mod:`experiments.multitenant.runner` ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments.multitenant.settings import TRAIN_TENANTS


def _cell(value: Sequence[float] | None, digits: int) -> str:
    if value is None:
        return "n/a"
    mean, low, high = value
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def markdown(result: dict[str, Any]) -> str:
    """The table: one row per (capacity, tenants, method), mean [95% interval] over seeds."""
    config = result["config"]
    lines = [
        f"# Many tenants on one pool ({config['env']})",
        "",
        f"independent and scheduler: every tenant runs the base env's best fixed rule "
        f"({config['rule']}); shared-ppo (full scale only): one PPO policy for all "
        f"tenants, trained with {TRAIN_TENANTS} tenants. Organisation "
        f"budget {config['org_budget']} per {config['budget_window']} steps, surge price "
        f"slope {config['price_slope']}, {config['steps']} steps per episode, "
        f"{config['seeds']} seeds per cell; mean [95% bootstrap interval over seeds]. "
        "Throughput: successful tasks per step (all tenants); latency: steps per finished "
        "task, waits included; wait share: tenant-steps spent waiting; fairness: Jain's "
        "index over the tenants' successes; org CPS: the organisation's spend per success.",
        "",
        f"Written by `python -m experiments multitenant` on {result['machine']}.",
        "",
        "| capacity | tenants | method | throughput | success rate | latency | wait share "
        "| fairness | org CPS |",
        "| ---: | ---: | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['capacity']} | {row['tenants']} | {row['method']} | "
            f"{_cell(row['throughput'], 3)} | {_cell(row['success_rate'], 2)} | "
            f"{_cell(row['latency'], 1)} | {_cell(row['wait_share'], 2)} | "
            f"{_cell(row['fairness'], 2)} | {_cell(row['org_cps'], 3)} |")
    return "\n".join(lines) + "\n"


def figure(result: dict[str, Any]) -> Any:
    """Throughput and latency against the number of tenants, a line per method x capacity."""
    from experiments.shared.figures import marker, pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    rows = result["rows"]
    keys = sorted({(r["method"], r["capacity"]) for r in rows})
    for k, (method, capacity) in enumerate(keys):
        for axis, metric in zip(axes, ("throughput", "latency"), strict=True):
            cells = sorted((r for r in rows if (r["method"], r["capacity"]) == (
                method, capacity) and r[metric] is not None), key=lambda r: r["tenants"])
            x = np.array([r["tenants"] for r in cells], dtype=float)
            mean, low, high = (np.array([r[metric][i] for r in cells]) for i in range(3))
            axis.errorbar(x * (1 + 0.03 * (k - len(keys) / 2)), mean,
                          yerr=[mean - low, high - mean], marker=marker(k), capsize=3,
                          linestyle={"independent": "--", "scheduler": "-"}.get(method, ":"),
                          label=f"{method}, capacity {capacity}")
    for axis, label in zip(axes, ("successful tasks per step", "steps per finished task"),
                           strict=True):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("tenants")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    seeds = result["config"]["seeds"]
    fig.suptitle(f"{result['config']['env']}: mean and 95% interval over {seeds} seeds")
    fig.tight_layout()
    return fig
