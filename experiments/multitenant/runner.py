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

Each cell is 5 seeds, each one episode of :data:`~experiments.multitenant.settings.STEPS`
steps on the tasks of episode seed ``s`` (for ``shared-ppo``, the policy of training seed
``s`` on them); every metric
is the mean over seeds with a 95% percentile-bootstrap interval over the seeds
(:func:`cost_envs.metrics.bootstrap.bootstrap_mean_ci`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from agents.files import write_files_atomic
from agents.multiagent import CentralScheduler, IndependentTenants, best_rule
from cost_envs.metrics.bootstrap import bootstrap_mean_ci
from cost_envs.multiagent import MULTIAGENT_ENV_IDS, parallel_env, run_episode
from experiments.multitenant.report import figure, markdown
from experiments.multitenant.settings import (
    BUDGET_WINDOW,
    ENV_ID,
    METRICS,
    ORG_BUDGET,
    PPO_OVERRIDES,
    PRICE_SLOPE,
    SCALES,
    STEM,
    TRAIN_TENANTS,
)
from experiments.shared.common import machine
from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import run_units

METHODS = {"independent": IndependentTenants, "scheduler": CentralScheduler}


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


def _shared_scores(config: dict[str, Any], jobs: int, log: Callable[[str], None],
                   address: str | None = None, keeper: Kept | None = None
                   ) -> dict[tuple[int, int], dict[int, dict[str, float]]]:
    """(capacity, seed) -> {tenants: metrics} of the shared policy.

    Each (capacity, seed) is a unit of :func:`experiments.shared.scheduler.run_units`
    (``jobs`` processes, or the Ray cluster at ``address``; kept in ``keeper``).
    """
    work = [(c, s, config["steps"], config["ppo_timesteps"], tuple(config["tenants"]))
            for c in config["capacities"] for s in range(config["seeds"])]
    results = run_units(_train_and_score, work, jobs=jobs, address=address, keeper=keeper,
                        describe=lambda unit: f"capacity {unit[0]} seed {unit[1]}",
                        label="multitenant", log=log)
    scores = dict(zip([(c, s) for c, s, *_ in work], results, strict=True))
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
        jobs: int = 2, address: str | None = None,
        keeper: Kept | None = None) -> dict[str, Any]:
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
    shared = (_shared_scores(config, jobs, log, address, keeper) if "ppo_timesteps" in config
              else {})
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


def report(out: Any, scale: str = "default", log: Callable[[str], None] = print,
           jobs: int = 2, address: str | None = None) -> list[Any]:
    """Run the sweep; write ``multitenant.md``, ``.json``, ``.png``, ``.svg`` into ``out``.

    At the ``full`` scale the files are ``multitenant_full.*``.
    """
    from experiments.shared.figures import figure_files, render

    keeper = Kept(units_folder(out, "multitenant", scale), repr(SCALES.get(scale)))
    result = run(scale, log=log, jobs=jobs, address=address, keeper=keeper)
    # the full scale's files sit beside the default's (benchmarks/results/multitenant_full.*)
    stem = f"{STEM}_full" if scale == "full" else STEM
    files: dict[str, Any] = {
        f"{stem}.md": markdown(result),
        f"{stem}.json": json.dumps(result, indent=2, sort_keys=True) + "\n",
        **figure_files(stem, render(figure(result))),
    }
    written = write_files_atomic(out, files)
    keeper.clear()
    return written
