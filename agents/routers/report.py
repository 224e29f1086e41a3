"""The table of a router on test queries: beside random routing, each model and the oracle.

What ``cost-envs route`` prints (:mod:`agents.cli.route`), as numbers and as Markdown:

* two-model routers (:func:`route_report`, :func:`format_report`): accuracy, cost per
  query, strong-call share, APGR, CPT(50%), CPT(80%) and AIQ, each with its 95% bootstrap
  interval over queries (or groups, ``split_by="group"``), for the router at its
  threshold, random routing at the router's strong-call share and at its cost per query
  (both matched to the router within each resample,
  :func:`~agents.routers.evaluation.compare_with_random`), each model alone and the
  per-query oracle, plus the router's paired differences from the two random routings
  (the table's first metric column is its accuracy minus random's at the same cost);
* K-model routers (:func:`multi_report`, :func:`format_multi`): accuracy, cost per query
  and AIQ (of the ``lam`` sweep), the model shares, the same two references (random
  routing at the router's model shares, and on the single models' frontier at its cost
  per query, matched within each resample), each model, the oracle, and the router minus
  each reference (paired); beside a learned router, the best training-free rule over the
  same models (:class:`~agents.routers.rule.RuleMultiRouter`) and the router's accuracy
  minus the rule's at the same cost (paired), as the two-model table has it.

:func:`calibration_drift` says how far the held-out share or cost landed from the
calibration's target.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.routers.evaluation import (
    compare_with_random,
    compare_with_rule,
    oracle_routing,
    rule_verdict,
    score_routings,
    score_table,
    single_model,
    threshold_routing,
)
from agents.routers.multi import SINGLE_MODELS, sweep_metrics
from cost_envs.metrics.routing import oracle_scores
from cost_envs.traces import TraceDataset

#: The two-model table's rows (JSON keys) and metrics (JSON keys, column titles).
ROLES = ("router", "random", "random_at_cost", "weak", "strong", "oracle")
#: The row of the best training-free rule (:mod:`~agents.routers.rule`), where it is run.
RULE = "rule"
METRICS = (("accuracy", "Accuracy"), ("cost_per_query", "Cost/query"),
           ("strong_share", "Strong share"), ("apgr", "APGR"), ("cpt_50", "CPT(50%)"),
           ("cpt_80", "CPT(80%)"), ("aiq", "AIQ"))
#: The two-model table's first metric column: the router's accuracy minus random routing's
#: at its cost per query, paired (``"router_minus_random_at_cost"``'s accuracy).
HEADLINE = "Accuracy - random at the same cost (paired)"
#: The K-model table's metrics (JSON keys, column titles).
MULTI_METRICS = (("accuracy", "Accuracy"), ("cost_per_query", "Cost/query"), ("aiq", "AIQ"))
#: Name of the K-model frontier row (random routing on the single models' hull at the
#: router's cost, matched within each resample).
FRONTIER = "frontier"
#: Name of the K-model row of random routing at the router's model shares.
RANDOM = "random"
#: Below this many test groups, the table says its cluster intervals are not reliable.
FEW_GROUPS = 10
_POINT_METRICS = ("accuracy", "cost_per_query", "strong_share")
_CURVE_METRICS = ("apgr", "cpt_50", "cpt_80", "aiq")


def route_report(test: TraceDataset, scores: np.ndarray, threshold: float, weak: str,
                 strong: str, costs: np.ndarray, *, split_by: str, n_resamples: int,
                 seed: int, rule: tuple[np.ndarray, float] | None = None) -> dict[str, Any]:
    """The table's numbers: the router at ``threshold`` beside the baselines, on ``test``.

    The router's point metrics and the two random routings matched to it within each
    resample (at its strong-call share, ``"random"``, and at its cost per query,
    ``"random_at_cost"``) are :func:`~agents.routers.evaluation.score_table`'s, with the
    curve metrics (the router's scores; random routing, whose curve both random rows
    share; the oracle's scores); the models alone and the oracle are scored as
    :func:`score_routings` scores them, on the same draw of resamples.

    ``rule``: ``(scores on test, threshold)`` of the best training-free rule
    (:mod:`~agents.routers.rule`) fitted and calibrated on the router's training split. It
    adds the rule's row, the router's AIQ minus the rule's (a second curve reference) and
    its accuracy minus the rule's at the same cost
    (:func:`~agents.routers.evaluation.compare_with_rule`'s, which ``score_table`` runs on
    the same draw, reading the rule's curve points its curve metrics computed), with
    ``"verdict_vs_rule"``: beats, loses or not resolved.
    """
    decisions = threshold_routing(test, scores, threshold, weak, strong)
    w = test.correct[:, test.model_index(weak)]
    s = test.correct[:, test.model_index(strong)]
    kw: dict[str, Any] = {"split_by": split_by, "n_resamples": n_resamples, "seed": seed}
    curve_scores = {"router": scores, "random": None, "oracle": oracle_scores(w, s)}
    routings = {"weak": single_model(test, weak), "strong": single_model(test, strong),
                "oracle": oracle_routing(test, costs)}
    if rule is not None:
        curve_scores[RULE] = rule[0]
        routings[RULE] = threshold_routing(test, rule[0], rule[1], weak, strong)
    table = score_table(test, {"router": decisions}, curve_scores, weak=weak, strong=strong,
                        costs=costs, curve_reference=["random", *([RULE] if rule else [])],
                        routings=routings, rule=None if rule is None else RULE, **kw)
    mine, curves, points = table["points"]["router"], table["curves"], table["routings"]
    points.update({"router": mine, "random": mine["random_at_share"],
                   "random_at_cost": mine["random_at_cost"]})
    curves = {**curves, "random_at_cost": curves["random"]}
    rows: dict[str, dict[str, Any]] = {}
    for role in (*ROLES, *([RULE] if rule else [])):
        row = {k: points[role][k] for k in _POINT_METRICS}
        row.update({k: curves[role][k] if role in curves else None for k in _CURVE_METRICS})
        rows[role] = row
    minus = {k: mine["minus_random_at_share"][k] for k in _POINT_METRICS}
    paired = curves["router"]["minus_random"]  # APGR and CPT; curve_metrics pairs no AIQ
    minus.update({k: paired.get(k) for k in _CURVE_METRICS})
    at_cost = {k: mine["minus_random_at_cost"][k] for k in _POINT_METRICS}
    if s.mean() <= w.mean():  # gains over the weak model are undefined (random's 0.5 too)
        for row in (*rows.values(), minus):
            row.update(dict.fromkeys(("apgr", "cpt_50", "cpt_80")))
    report = {"queries": test.n_queries, "resampled": points["router"]["resampled"],
              "strong_better": bool(s.mean() > w.mean()),
              "units": points["router"]["units"], "n_resamples": n_resamples, "seed": seed,
              "threshold": threshold, "rows": rows, "router_minus_random": minus,
              "router_minus_random_at_cost": at_cost}
    if rule is not None:
        versus = table["rule"]["router"]
        report.update(rule_threshold=rule[1], router_minus_rule_at_cost=versus,
                      router_minus_rule={"aiq": curves["router"][f"minus_{RULE}"].get("aiq")},
                      verdict_vs_rule=rule_verdict(versus["accuracy"]))
    return report


def row_labels(weak: str, strong: str, router: str, share: float) -> dict[str, str]:
    """The two-model table's row labels."""
    return {"router": router, "random": f"random at {share:.1%} strong (same share)",
            "random_at_cost": "random at the same cost",
            "weak": f"only {weak}", "strong": f"only {strong}", "oracle": "oracle (per query)"}


def _at_precision(value: float, quantum: float) -> float:
    """``value`` rounded to a multiple of ``quantum``, a negative zero made 0.0."""
    return round(value / quantum) * quantum + 0.0  # -0.0 + 0.0 is 0.0


def cell(entry: dict[str, Any] | None, key: str) -> str:
    """A table cell: the value and its interval (``-`` where undefined).

    Cost per query has 4 significant digits of the cell's largest magnitude, the rest 3
    decimals; each number is rounded to that precision first, so a paired difference that
    is zero up to floating-point noise prints as 0, not ``-3.238e-19`` or ``-0.000``.
    """
    if entry is None or entry.get("value") is None or not math.isfinite(entry["value"]):
        return "-"
    ci = entry.get("ci")
    if ci is None or not all(v is not None and math.isfinite(v) for v in ci):
        ci = None
    numbers = [entry["value"], *(ci or ())]
    if key == "cost_per_query":
        fmt, scale = "{:.4g}", max(abs(v) for v in numbers)
        quantum = 10.0 ** (math.floor(math.log10(scale)) - 3) if scale > 0 else 1.0
    else:
        fmt, quantum = "{:.3f}", 1e-3
    value, *bounds = (fmt.format(_at_precision(v, quantum)) for v in numbers)
    return value + (" [" + ", ".join(bounds) + "]" if bounds else "")


def format_report(report: dict[str, Any], labels: dict[str, str]) -> str:
    """The report as a Markdown table (one row per routing, then router - random).

    The first metric column is the router's headline, :data:`HEADLINE`: its accuracy
    minus random routing's at the same cost, paired (filled on the router's row only).
    AIQ - random cannot show a loss on cost (a threshold router's hull never falls below
    the straight line between the two models); this difference can. The paired rows
    follow in the same order: the same cost, then the same share.
    """
    header = ["Routing", HEADLINE, *(title for _, title in METRICS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    headline = cell(report["router_minus_random_at_cost"].get("accuracy"), "accuracy")
    rows = [(labels.get(r, r), headline if r == "router" else "", report["rows"][r])
            for r in ROLES + ((RULE,) if RULE in report["rows"] else ())]
    rows.append((f"{labels['router']} - random at the same cost (paired)", "",
                 report["router_minus_random_at_cost"]))
    rows.append((f"{labels['router']} - random at the same share (paired)", "",
                 report["router_minus_random"]))
    if "router_minus_rule_at_cost" in report:  # accuracy at the same cost, AIQ paired
        rows.append((f"{labels['router']} - best rule at the same cost (paired): "
                     f"{report['verdict_vs_rule']}", "", {
                         **report["router_minus_rule_at_cost"], **report["router_minus_rule"]}))
    for label, first, row in rows:
        lines.append("| " + " | ".join([label, first, *(cell(row.get(k), k)
                                                       for k, _ in METRICS)]) + " |")
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
                 split_by: str, n_resamples: int, seed: int,
                 rule: tuple[Any, float] | None = None) -> dict[str, Any]:
    """The K-model table's numbers on ``test`` (columns in the router's model order).

    ``rule``: ``(router, lam)`` of the best training-free rule over the same models
    (:class:`~agents.routers.rule.RuleMultiRouter`) fitted and calibrated on the router's
    training split. It adds the rule's row (at its ``lam``; AIQ of its own sweep) and the
    router's accuracy minus the rule's at the same cost, paired
    (:func:`~agents.routers.evaluation.compare_with_rule`: the rule's ``lam`` sweep on
    ``test`` read at the router's cost per query on each resample, the resamples of the
    other columns), with ``"verdict_vs_rule"``: beats, loses or not resolved.
    """
    decisions = router.route(test, lam)
    kw: dict[str, Any] = {"split_by": split_by, "n_resamples": n_resamples, "seed": seed}
    mine = compare_with_random(test, {"router": decisions}, costs, **kw)["router"]
    routings = {f"only {m}": single_model(test, m) for m in test.models}
    routings["oracle"] = oracle_routing(test, costs)
    sweeps = {"router": router.sweep(test)}
    if rule is not None:
        routings[RULE], sweeps[RULE] = rule[0].route(test, rule[1]), rule[0].sweep(test)
    points = score_routings(test, routings, costs, **kw)
    curves = sweep_metrics(test, sweeps, costs, **kw)
    metrics = ("accuracy", "cost_per_query")
    rows: dict[str, dict[str, Any]] = {
        "router": {**{k: mine[k] for k in metrics}, "model_share": mine["model_share"],
                   "aiq": {k: curves["router"][k] for k in ("value", "ci")}},
        # the references' model shares: the router's (same share); the frontier's mix
        RANDOM: {**{k: mine["random_at_share"][k] for k in metrics},
                 "model_share": mine["model_share"], "aiq": None},
        FRONTIER: {**{k: mine["random_at_cost"][k] for k in metrics}, "model_share": {},
                   "aiq": {k: curves[SINGLE_MODELS][k] for k in ("value", "ci")}}}
    for name in routings:
        rows[name] = {**{k: points[name][k] for k in metrics},
                      "model_share": points[name]["model_share"],
                      "aiq": {k: curves[RULE][k] for k in ("value", "ci")} if name == RULE
                      else None}
    minus = {k: mine["minus_random_at_cost"][k] for k in metrics}
    minus["aiq"] = curves["router"][f"minus_{SINGLE_MODELS}"]
    report = {"queries": test.n_queries, "resampled": mine["resampled"],
              "units": mine["units"], "n_resamples": n_resamples, "seed": seed,
              "lam": lam, "aiq_cost_range": curves["router"]["cost_range"], "rows": rows,
              "router_minus_random": {k: mine["minus_random_at_share"][k] for k in metrics},
              "router_minus_frontier": minus}
    if rule is not None:
        versus = compare_with_rule(test, {"router": decisions}, sweeps[RULE], costs=costs,
                                   **kw)["router"]
        report.update(rule_lam=rule[1], rule_label=rule[0].label,
                      router_minus_rule_at_cost=versus,
                      verdict_vs_rule=rule_verdict(versus["accuracy"]))
    return report


def format_multi(report: dict[str, Any], router_label: str) -> str:
    """The K-model report as a Markdown table."""
    header = ["Routing", *(title for _, title in MULTI_METRICS), "Model shares"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    labels = {"router": router_label, RANDOM: "random at the same model shares",
              FRONTIER: "random on the single models' frontier at the same cost",
              RULE: report.get("rule_label", RULE)}
    for name, row in report["rows"].items():
        shares = ", ".join(f"{m} {p:.0%}" for m, p in row["model_share"].items() if p > 0)
        lines.append("| " + " | ".join([labels.get(name, name),
                                        *(cell(row.get(k), k) for k, _ in MULTI_METRICS),
                                        shares]) + " |")
    versus = [("router_minus_frontier", "frontier at the same cost"),
              ("router_minus_random", "random at the same model shares")]
    if "router_minus_rule_at_cost" in report:  # accuracy at the same cost, paired
        versus.append(("router_minus_rule_at_cost", "best rule at the same cost: "
                       + report["verdict_vs_rule"]))
    for key, what in versus:
        minus = report[key]
        lines.append("| " + " | ".join([f"{router_label} - {what} (paired)",
                                        *(cell(minus.get(k), k) for k, _ in MULTI_METRICS),
                                        ""]) + " |")
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
