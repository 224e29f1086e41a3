"""The table of a router on test queries: beside random routing, each model and the oracle.

What ``cost-envs route`` prints (:mod:`agents.cli.route`), as numbers and as Markdown:

* two-model routers (:func:`route_report`, :func:`format_report`): accuracy, cost per
  query, strong-call share, APGR, CPT(50%), CPT(80%) and AIQ, each with its 95% bootstrap
  interval over queries (or groups, ``split_by="group"``), for the router at its
  threshold, random routing at the router's strong-call share (exact), each model alone
  and the per-query oracle, plus the router's paired difference from random routing;
* K-model routers (:func:`multi_report`, :func:`format_multi`): accuracy, cost per query
  and AIQ (of the ``lam`` sweep), the model shares, random routing on the single models'
  frontier at the router's own test cost, each model, the oracle, and the router minus
  that frontier (paired).

:func:`calibration_drift` says how far the held-out share or cost landed from the
calibration's target.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.routing.routers.multi import SINGLE_MODELS, sweep_metrics
from agents.routing.routing_eval import (
    curve_metrics,
    hull_routing,
    oracle_routing,
    random_routing,
    score_routings,
    single_model,
    threshold_routing,
)
from cost_envs.metrics.routing import oracle_scores
from cost_envs.traces import TraceDataset

#: The two-model table's rows (JSON keys) and metrics (JSON keys, column titles).
ROLES = ("router", "random", "weak", "strong", "oracle")
METRICS = (("accuracy", "Accuracy"), ("cost_per_query", "Cost/query"),
           ("strong_share", "Strong share"), ("apgr", "APGR"), ("cpt_50", "CPT(50%)"),
           ("cpt_80", "CPT(80%)"), ("aiq", "AIQ"))
#: The K-model table's metrics (JSON keys, column titles).
MULTI_METRICS = (("accuracy", "Accuracy"), ("cost_per_query", "Cost/query"), ("aiq", "AIQ"))
#: Name of the K-model frontier row (random routing on the single models' hull).
FRONTIER = "frontier"
#: Below this many test groups, the table says its cluster intervals are not reliable.
FEW_GROUPS = 10
_POINT_METRICS = ("accuracy", "cost_per_query", "strong_share")
_CURVE_METRICS = ("apgr", "cpt_50", "cpt_80", "aiq")


def route_report(test: TraceDataset, scores: np.ndarray, threshold: float, weak: str,
                 strong: str, costs: np.ndarray, *, split_by: str, n_resamples: int,
                 seed: int) -> dict[str, Any]:
    """The table's numbers: the router at ``threshold`` beside the baselines, on ``test``.

    Point metrics are :func:`score_routings`' (every query once, paired resamples), the
    curve metrics :func:`curve_metrics`' (the router's scores; random routing; the oracle's
    scores); random routing is at the router's strong-call share on ``test``.
    """
    decisions = threshold_routing(test, scores, threshold, weak, strong)
    share = float((decisions == test.model_index(strong)).mean())
    routings = {"router": decisions, "random": random_routing(test, weak, strong, share),
                "weak": single_model(test, weak), "strong": single_model(test, strong),
                "oracle": oracle_routing(test, costs)}
    points = score_routings(test, routings, costs, strong=strong, split_by=split_by,
                            reference="random", n_resamples=n_resamples, seed=seed)
    w = test.correct[:, test.model_index(weak)]
    s = test.correct[:, test.model_index(strong)]
    curves = curve_metrics(test, {"router": scores, "random": None,
                                  "oracle": oracle_scores(w, s)}, weak, strong, costs,
                           split_by=split_by, n_resamples=n_resamples, seed=seed,
                           reference="random")
    rows: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        row = {k: points[role][k] for k in _POINT_METRICS}
        row.update({k: curves[role][k] if role in curves else None for k in _CURVE_METRICS})
        rows[role] = row
    minus = {k: points["router"]["minus_random"][k] for k in _POINT_METRICS}
    paired = curves["router"]["minus_random"]  # APGR and CPT; curve_metrics pairs no AIQ
    minus.update({k: paired.get(k) for k in _CURVE_METRICS})
    if s.mean() <= w.mean():  # gains over the weak model are undefined (random's 0.5 too)
        for row in (*rows.values(), minus):
            row.update(dict.fromkeys(("apgr", "cpt_50", "cpt_80")))
    return {"queries": test.n_queries, "resampled": points["router"]["resampled"],
            "strong_better": bool(s.mean() > w.mean()),
            "units": points["router"]["units"], "n_resamples": n_resamples, "seed": seed,
            "threshold": threshold, "rows": rows, "router_minus_random": minus}


def row_labels(weak: str, strong: str, router: str, share: float) -> dict[str, str]:
    """The two-model table's row labels."""
    return {"router": router, "random": f"random at {share:.1%} strong",
            "weak": f"only {weak}", "strong": f"only {strong}", "oracle": "oracle (per query)"}


def cell(entry: dict[str, Any] | None, key: str) -> str:
    """A table cell: the value and its interval (``-`` where undefined)."""
    if entry is None or entry.get("value") is None or not math.isfinite(entry["value"]):
        return "-"
    fmt = "{:.4g}" if key == "cost_per_query" else "{:.3f}"
    text = fmt.format(entry["value"])
    ci = entry.get("ci")
    if ci is not None and all(v is not None and math.isfinite(v) for v in ci):
        text += " [" + ", ".join(fmt.format(v) for v in ci) + "]"
    return text


def format_report(report: dict[str, Any], labels: dict[str, str]) -> str:
    """The report as a Markdown table (one row per routing, then router - random)."""
    header = ["Routing", *(title for _, title in METRICS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    rows = [(labels[r], report["rows"][r]) for r in ROLES]
    rows.append((f"{labels['router']} - random (paired)", report["router_minus_random"]))
    for label, row in rows:
        lines.append("| " + " | ".join([label, *(cell(row.get(k), k) for k, _ in METRICS)])
                     + " |")
    unit = "queries" if report["resampled"] == "queries" else "groups"
    lines.append(f"\n{report['queries']} queries scored; 95% intervals: {report['n_resamples']} "
                 f"bootstrap resamples of the {report['units']} {unit} (seed {report['seed']})")
    if not report["strong_better"]:
        lines.append("note: the strong model is not more accurate on these queries, so APGR "
                     "and CPT (gains over the weak model) are undefined")
    if unit == "groups" and report["units"] < FEW_GROUPS:
        lines.append(f"note: only {report['units']} groups; intervals that resample so few "
                     "are not reliable")
    return "\n".join(lines)


def clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become ``null``, numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


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
                                        *(cell(row.get(k), k) for k, _ in MULTI_METRICS),
                                        shares]) + " |")
    minus = report["router_minus_frontier"]
    lines.append("| " + " | ".join([f"{router_label} - frontier (paired)",
                                    *(cell(minus.get(k), k) for k, _ in MULTI_METRICS), ""])
                 + " |")
    unit = "queries" if report["resampled"] == "queries" else "groups"
    lo, hi = report["aiq_cost_range"]
    lines.append(f"\n{report['queries']} queries scored; AIQ over cost per query {lo:.4g} to "
                 f"{hi:.4g} (the router's lam sweep; the frontier row's is the single "
                 f"models'); 95% intervals: {report['n_resamples']} bootstrap resamples of "
                 f"the {report['units']} {unit} (seed {report['seed']})")
    return "\n".join(lines)




def calibration_drift(calibration: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """Where the operating point landed on ``report``'s queries against its target.

    ``calibration`` is what training recorded (``"target"``: ``"strong_share"`` or
    ``"cost_per_query"``, ``"value"``, and the training figure); the held-out figure is the
    router row's of ``report``. On queries unlike the training ones the share or the cost
    can land far from the target: this is how far.
    """
    key = calibration["target"]
    held = report["rows"]["router"][key]["value"]
    train = calibration.get(f"train_{key}")
    return {"target": key, "value": calibration["value"], "train": train, "held_out": held,
            "difference": held - calibration["value"]}


def drift_line(drift: dict[str, Any], where: str) -> str:
    """One line saying how far the target landed (a share in points, a cost relative)."""
    if drift["target"] == "strong_share":
        train = "" if drift["train"] is None else f"training {drift['train']:.1%}, "
        return (f"calibration drift: target {drift['value']:.1%} strong calls, {train}"
                f"{where} {drift['held_out']:.1%} ({drift['difference'] * 100:+.1f} points)")
    value = drift["value"]
    relative = f" ({drift['difference'] / value:+.1%})" if value > 0 else ""
    train = "" if drift["train"] is None else f"training {drift['train']:.4g}, "
    return (f"calibration drift: target cost per query {value:.4g}, {train}{where} "
            f"{drift['held_out']:.4g}{relative}")
