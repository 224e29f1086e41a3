"""The metrics of the papers, with intervals.

* :mod:`cost_envs.metrics.episodes`: :class:`EpisodeRecord` and the headline metrics
  (success rate, CPS, FLOPs per success, quality, cost, call ratio), the Pareto front and
  the gap to the oracle and
  the share of the rule-to-planner gap a method closes;
* :mod:`cost_envs.metrics.bootstrap`: the one bootstrap engine (intervals over episodes,
  over training runs and tasks, of a mean);
* :mod:`cost_envs.metrics.routing`: routing on logged outcomes (PGR, APGR, CPT);
* :mod:`cost_envs.metrics.frontier`: routing over K models (the cost-quality frontier,
  RouterBench's AIQ).
"""

from cost_envs.metrics.bootstrap import (
    bootstrap_ci,
    bootstrap_cis,
    bootstrap_cis_over_runs,
    bootstrap_gap_closed,
    bootstrap_mean_ci,
    interval_around,
)
from cost_envs.metrics.episodes import (
    HEADLINE_METRICS,
    EpisodeRecord,
    avg_cost,
    avg_quality,
    budget_exceeded,
    call_ratio,
    cps,
    flops_per_success,
    gap_closed,
    oracle_gap,
    pareto_front,
    success_rate,
    summarize,
)

__all__ = [
    "HEADLINE_METRICS",
    "EpisodeRecord",
    "avg_cost",
    "avg_quality",
    "bootstrap_ci",
    "bootstrap_cis",
    "bootstrap_cis_over_runs",
    "bootstrap_gap_closed",
    "bootstrap_mean_ci",
    "budget_exceeded",
    "call_ratio",
    "cps",
    "flops_per_success",
    "gap_closed",
    "interval_around",
    "oracle_gap",
    "pareto_front",
    "success_rate",
    "summarize",
]
