"""``cost-envs route`` for K-model routers: train, calibrate ``lam``, score, save.

``route train`` comes here with ``--router multi-logistic``, or without ``--weak`` and
``--strong`` with ``--models`` or on logs of more than two models; ``route score`` with
a saved K-model router. The router is :class:`agents.routing.multi_router.MultiRouter`
over ``--models`` (default all the logs have); ``--cv K`` chooses its ``l2`` on folds of
the training split (:func:`agents.routing.router_cv.cross_validate`); its ``lam`` is
calibrated on the training split only for ``--target-cost`` (default halfway between the
cheapest and the dearest model's mean training cost;
:func:`agents.routing.calibration.calibrate_lam`) and it is saved by
:func:`agents.routing.router_state.save_multi_router`.

The table (every test query once, 95% bootstrap intervals over queries or groups):
the router at its ``lam``; random routing on the single models' frontier at the
router's own test cost per query (the best non-learned routing at that cost,
:func:`~agents.routing.routing_eval.hull_routing`, exact); each model; the per-query
oracle; and the router minus that frontier routing, paired. AIQ is the router's ``lam``
sweep's (:func:`agents.routing.multi_router.sweep_metrics`), against the single models'
frontier's, paired. Strong share, APGR and CPT are two-model metrics: not shown here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from agents.cli_route import _cell, _clean
from agents.cli_route_data import (
    EXIT_INPUT,
    EXIT_USAGE,
    call_costs,
    cv_lines,
    cv_settings,
    data_facts,
    fail,
    split_data,
    split_facts,
)
from agents.routing.routers import ROUTERS, SINGLE_MODELS, calibrate_lam, sweep_metrics
from agents.routing.routers.state import SavedRouter, save_router
from agents.routing.routing_eval import (
    hull_routing,
    oracle_routing,
    score_routings,
    single_model,
)
from cost_envs.traces import TraceDataset

#: The K-model table's metrics (JSON keys, column titles).
MULTI_METRICS = (("accuracy", "Accuracy"), ("cost_per_query", "Cost/query"), ("aiq", "AIQ"))
#: Name of the frontier row (random routing on the single models' hull at the same cost).
FRONTIER = "frontier"


def choose_models(args: argparse.Namespace, data: TraceDataset, names: Any,
                  status: int = EXIT_USAGE) -> TraceDataset:
    """``data`` with only ``names`` (default all), exiting on a name not in the logs."""
    names = list(data.models) if names is None else list(names)
    for name in names:
        if name not in data.models:
            fail(args, f"model {name!r} is not in the logs {data.source}; they have "
                       f"{list(data.models)}", status)
    if len(set(names)) != len(names) or len(names) < 2:
        fail(args, f"expected at least two distinct models to route between, got {names}",
             status)
    return data.select_models(names)


def multi_report(test: TraceDataset, router: Any, lam: float, costs: np.ndarray, *,
                 split_by: str, n_resamples: int, seed: int) -> dict[str, Any]:
    """The K-model table's numbers on ``test`` (columns in the router's model order)."""
    decisions = router.route(test, lam)
    budget = float(costs[np.arange(test.n_queries), decisions].mean())
    routings = {"router": decisions, FRONTIER: hull_routing(test, budget, costs)}
    routings.update({f"only {m}": single_model(test, m) for m in test.models})
    routings["oracle"] = oracle_routing(test, costs)
    kw = {"split_by": split_by, "n_resamples": n_resamples, "seed": seed}
    points = score_routings(test, routings, costs, reference=FRONTIER, **kw)
    curves = sweep_metrics(test, {"router": router.sweep(test)}, costs, **kw)
    rows: dict[str, dict[str, Any]] = {}
    for name in routings:
        rows[name] = {k: points[name][k] for k in ("accuracy", "cost_per_query")}
        rows[name]["model_share"] = points[name]["model_share"]
        rows[name]["aiq"] = ({k: curves["router"][k] for k in ("value", "ci")}
                             if name == "router" else None)
    rows[FRONTIER]["aiq"] = {k: curves[SINGLE_MODELS][k] for k in ("value", "ci")}
    minus = {k: points["router"][f"minus_{FRONTIER}"][k] for k in ("accuracy",
                                                                    "cost_per_query")}
    minus["aiq"] = curves["router"][f"minus_{SINGLE_MODELS}"]
    return {"queries": test.n_queries, "resampled": points["router"]["resampled"],
            "units": points["router"]["units"], "n_resamples": n_resamples, "seed": seed,
            "lam": lam, "aiq_cost_range": curves["router"]["cost_range"], "rows": rows,
            "router_minus_frontier": minus}


def format_multi(report: dict[str, Any], router_label: str) -> str:
    """The K-model report as a Markdown table."""
    header = ["Routing", *(title for _, title in MULTI_METRICS), "Model shares"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    labels = {"router": router_label,
              FRONTIER: "random on the single models' frontier at the same cost"}
    for name, row in report["rows"].items():
        shares = ", ".join(f"{m} {p:.0%}" for m, p in row["model_share"].items() if p > 0)
        lines.append("| " + " | ".join([labels.get(name, name),
                                        *(_cell(row.get(k), k) for k, _ in MULTI_METRICS),
                                        shares]) + " |")
    minus = report["router_minus_frontier"]
    lines.append("| " + " | ".join([f"{router_label} - frontier (paired)",
                                    *(_cell(minus.get(k), k) for k, _ in MULTI_METRICS), ""])
                 + " |")
    unit = "queries" if report["resampled"] == "queries" else "groups"
    lo, hi = report["aiq_cost_range"]
    lines.append(f"\n{report['queries']} queries scored; AIQ over cost per query {lo:.4g} to "
                 f"{hi:.4g} (the router's lam sweep; the frontier row's is the single "
                 f"models'); 95% intervals: {report['n_resamples']} bootstrap resamples of "
                 f"the {report['units']} {unit} (seed {report['seed']})")
    return "\n".join(lines)


def _emit(args: argparse.Namespace, out: dict[str, Any], heading: list[str],
          label: str) -> None:
    if args.json:
        print(json.dumps(_clean(out), indent=2, allow_nan=False))
        return
    print("\n".join(heading) + "\n")
    print(format_multi(out["test"], label))


def _report(args: argparse.Namespace, test: TraceDataset, router: Any, lam: float,
            costs: np.ndarray) -> dict[str, Any]:
    try:
        return multi_report(test, router, lam, costs, split_by=args.split_by,
                            n_resamples=args.resamples, seed=args.seed)
    except ValueError as error:  # --split-by group on logs without groups, say
        fail(args, error)


def run_train_multi(args: argparse.Namespace, data: TraceDataset) -> int:
    """``route train`` of a K-model router (``data`` loaded; ``--save`` checked writable)."""
    args.router = args.router or "multi-logistic"
    if args.weak is not None or args.strong is not None:
        fail(args, f"--router {args.router} routes between --models (default all), not "
                   "--weak/--strong", EXIT_USAGE)
    if args.target_share is not None:
        fail(args, "--target-share is a two-model calibration; a K-model router is "
                   "calibrated with --target-cost", EXIT_USAGE)
    data = choose_models(args, data, args.models)
    costs = call_costs(args, data)
    train, test, train_idx, test_idx = split_data(args, data)
    settings, cv = cv_settings(args, train, costs[train_idx], models=data.models)
    router = ROUTERS[args.router](data.models, **settings).fit(train, costs[train_idx])
    lams = router.lams(train)
    mean = costs[train_idx].mean(axis=0)
    target = (float(mean.min() + mean.max()) / 2 if args.target_cost is None
              else args.target_cost)
    try:
        cal = calibrate_lam(lams, router.sweep(train, lams), costs[train_idx], target)
    except ValueError as error:
        fail(args, f"--target-cost: {error}")
    facts = {"target": "cost_per_query", "value": target,
             "default": args.target_cost is None, "train_cost_per_query": cal.cost_per_query,
             "train_model_share": dict(zip(data.models, cal.model_share, strict=True))}
    report = _report(args, test, router, cal.lam, costs[test_idx])
    splits = split_facts(args, train, test)
    meta = {"calibration": facts, "cv": cv, "training": {**data_facts(data, args), **splits}}
    try:
        files = save_router(args.save, router, cal.lam, _clean(meta))
    except (OSError, ValueError) as error:
        fail(args, f"could not save to {args.save}: {error}")
    out = {"command": "train", "router": args.router, "models": list(data.models),
           "lam": cal.lam, "calibration": facts, "cv": cv, "data": data_facts(data, args),
           "split": splits, "test": report, "saved": [str(f) for f in files]}
    heading = [
        f"data: {data.source}: {data.n_queries} queries, models {', '.join(data.models)}",
        f"split by {args.split_by} (seed {args.seed}): {train.n_queries} train, "
        f"{test.n_queries} test",
        f"{args.router} router; lam {cal.lam:.4g}, calibrated on training for cost per query "
        f"<= {target:.4g}{' (default: halfway)' if args.target_cost is None else ''} "
        f"(training: {cal.cost_per_query:.4g})", *cv_lines(cv),
        f"saved to {files[0]} and {files[1]}"]
    _emit(args, out, heading, args.router)
    return 0


def run_score_multi(args: argparse.Namespace, saved: SavedRouter,
                    data: TraceDataset) -> int:
    """``route score`` of a saved K-model router at its saved ``lam``."""
    data = choose_models(args, data, saved.models, EXIT_INPUT)
    costs = call_costs(args, data)
    report = _report(args, data, saved.router, saved.lam, costs)
    training = saved.meta.get("training", {})
    seen = data.fingerprint in (training.get("fingerprint"), training.get("train_fingerprint"))
    out = {"command": "score", "router": saved.name, "router_path": str(args.router),
           "models": list(saved.models), "lam": saved.lam,
           "calibration": saved.meta.get("calibration"), "data": data_facts(data, args),
           "trained_on_these_queries": seen, "test": report}
    heading = [f"router: {args.router} ({saved.name}, lam {saved.lam:.4g}, models "
               f"{', '.join(saved.models)})",
               f"data: {data.source}: {data.n_queries} queries, every one scored once"]
    if seen:
        heading.append("note: the router was trained on these queries; these are not "
                       "held-out figures")
    _emit(args, out, heading, saved.name)
    return 0
