"""Many tenants, one pool (issue #14): where do independently thrifty tenants collapse?

Sweeps the number of tenants (1, 2, 4, 8, 16) and the capacity per model per step (1, 2,
4) on ``cost_envs/MultiTenantToolBench-v0`` under one organisation budget per window
(:data:`ORG_BUDGET` per :data:`BUDGET_WINDOW` steps: about four tenants' spend when
nothing queues), with surge prices (:data:`PRICE_SLOPE`). Two joint policies, both
running the base env's best fixed rule (:func:`agents.multiagent.best_rule`, fitted once
on training tasks) for every tenant:

* ``independent``: every tenant submits its rule's action; the env's admission decides.
* ``scheduler``: the central scheduler admits whole proposals by expected value per
  dollar, the rest hold a step (:class:`agents.multiagent.CentralScheduler`).

At the ``full`` scale a third, learned one:

* ``shared-ppo``: one PPO policy shared by every tenant, reading the shared state too
  (:func:`agents.learners.multitenant.train_shared`), trained per capacity and seed with
  :data:`TRAIN_TENANTS` tenants on training tasks (``TRAIN_TASK_SEED + seed``), then
  evaluated at every number of tenants.

Each cell is 5 seeds, each one episode of :data:`STEPS` steps on the tasks of episode
seed ``s`` (for ``shared-ppo``, the policy of training seed ``s`` on them); every metric
is the mean over seeds with a 95% percentile-bootstrap interval over the seeds
(:func:`cost_envs.metrics.bootstrap.bootstrap_mean_ci`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agents.files import write_files_atomic
from agents.multiagent import CentralScheduler, IndependentTenants, best_rule
from cost_envs.metrics.bootstrap import bootstrap_mean_ci
from cost_envs.multiagent import MULTIAGENT_ENV_IDS, parallel_env, run_episode
from experiments.shared.common import machine

ENV_ID = "cost_envs/MultiTenantToolBench-v0"
ORG_BUDGET = 0.6
BUDGET_WINDOW = 10
PRICE_SLOPE = 0.5
STEPS = 60
METHODS = {"independent": IndependentTenants, "scheduler": CentralScheduler}
METRICS = ("throughput", "success_rate", "latency", "wait_share", "fairness", "org_cps",
           "spend_per_tenant")
SCALES: dict[str, dict[str, Any]] = {
    "smoke": {"tenants": (1, 2), "capacities": (1,), "seeds": 2, "steps": 15,
              "rule_tasks": 10},
    "default": {"tenants": (1, 2, 4, 8, 16), "capacities": (1, 2, 4), "seeds": 5,
                "steps": STEPS, "rule_tasks": 100},
}
#: ``full``: the default sweep plus shared-parameter PPO (tenant-steps of training each).
SCALES["full"] = {**SCALES["default"], "ppo_timesteps": 40_000}
#: Tenants the shared policy trains with, and its PPO overrides (more updates per step
#: than the single-agent n_steps=512 with 8 tenants per rollout).
TRAIN_TENANTS = 8
PPO_OVERRIDES = {"n_steps": 128}
STEM = "multitenant"


def _env_kwargs(capacity: int, steps: int) -> dict[str, Any]:
    return {"capacity": capacity, "org_budget": ORG_BUDGET, "budget_window": BUDGET_WINDOW,
            "price_slope": PRICE_SLOPE, "max_steps": steps}


def _train_and_score(job: tuple[int, int, int, int, tuple[int, ...]]
                     ) -> dict[int, dict[str, float]]:
    """Train one shared policy, score it at every number of tenants (a worker's job).

    The policy stays in the worker (torch tensors do not cross processes); the metrics
    of its episode on seed ``seed`` at each number of tenants come back.
    """
    from agents.learners.multitenant import train_shared

    capacity, seed, steps, timesteps, tenant_counts = job
    policy = train_shared(ENV_ID, timesteps, seed=seed, ppo=PPO_OVERRIDES,
                          env_kwargs={"n_tenants": TRAIN_TENANTS,
                                      **_env_kwargs(capacity, steps)})
    return {n: run_episode(parallel_env(ENV_ID, n_tenants=n, **_env_kwargs(capacity, steps)),
                           policy, seed=seed).metrics() for n in tenant_counts}


def _shared_scores(config: dict[str, Any], jobs: int, log: Callable[[str], None]
                   ) -> dict[tuple[int, int], dict[int, dict[str, float]]]:
    """(capacity, seed) -> {tenants: metrics} of the shared policy, in ``jobs`` processes."""
    from experiments.shared.common import spawn_pool

    work = [(c, s, config["steps"], config["ppo_timesteps"], tuple(config["tenants"]))
            for c in config["capacities"] for s in range(config["seeds"])]
    with spawn_pool(jobs) as pool:
        scores = dict(zip([(c, s) for c, s, *_ in work], pool.map(_train_and_score, work),
                          strict=True))
    log(f"multitenant: trained and scored {len(scores)} shared policies")
    return scores


def _row(name: str, capacity: int, tenants: int, runs: list[dict[str, float]]
         ) -> dict[str, Any]:
    row: dict[str, Any] = {"method": name, "capacity": capacity, "tenants": tenants,
                           "seeds": len(runs)}
    for metric in METRICS:
        values = [r[metric] for r in runs if np.isfinite(r[metric])]
        # None (JSON null) when no task finished in any seed (latency)
        row[metric] = list(bootstrap_mean_ci(values)) if values else None
    return row


def run(scale: str = "default", log: Callable[[str], None] = print,
        jobs: int = 2) -> dict[str, Any]:
    """Every (method, capacity, tenants) cell over the scale's seeds.

    Returns:
        ``{"config": ..., "machine": ..., "rows": [...]}``; a row has ``method``,
        ``capacity``, ``tenants``, ``seeds`` and for each metric ``[mean, low, high]``.

    Raises:
        ValueError: For an unknown scale.
    """
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    config = SCALES[scale]
    rule = best_rule(gym.make(MULTIAGENT_ENV_IDS[ENV_ID]), config["rule_tasks"])
    log(f"multitenant: every tenant's rule: {rule.description}")
    shared = _shared_scores(config, jobs, log) if "ppo_timesteps" in config else {}
    rows = []
    for capacity in config["capacities"]:
        for tenants in config["tenants"]:
            env = parallel_env(ENV_ID, n_tenants=tenants,
                               **_env_kwargs(capacity, config["steps"]))
            for name, cls in METHODS.items():
                policy = cls(env, lambda _env: rule)
                rows.append(_row(name, capacity, tenants,
                                 [run_episode(env, policy, seed=seed).metrics()
                                  for seed in range(config["seeds"])]))
            if shared:
                rows.append(_row("shared-ppo", capacity, tenants,
                                 [shared[capacity, seed][tenants]
                                  for seed in range(config["seeds"])]))
            log(f"multitenant: capacity {capacity}, {tenants} tenants done")
    return {"config": {"env": ENV_ID, "org_budget": ORG_BUDGET,
                       "budget_window": BUDGET_WINDOW, "price_slope": PRICE_SLOPE,
                       "rule": rule.description, **config},
            "machine": machine(), "rows": rows}


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


def report(out: Any, scale: str = "default", log: Callable[[str], None] = print,
           jobs: int = 2) -> list[Any]:
    """Run the sweep; write ``multitenant.md``, ``.json``, ``.png``, ``.svg`` into ``out``.

    At the ``full`` scale the files are ``multitenant_full.*``.
    """
    from experiments.shared.figures import figure_files, render

    result = run(scale, log=log, jobs=jobs)
    # the full scale's files sit beside the default's (benchmarks/results/multitenant_full.*)
    stem = f"{STEM}_full" if scale == "full" else STEM
    files: dict[str, Any] = {
        f"{stem}.md": markdown(result),
        f"{stem}.json": json.dumps(result, indent=2, sort_keys=True) + "\n",
        **figure_files(stem, render(figure(result))),
    }
    return write_files_atomic(out, files)
