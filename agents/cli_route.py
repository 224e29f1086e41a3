"""``cost-envs route``: train a weak/strong router on your own logs, save it, score it.

::

    cost-envs route train --data FILE_OR_DIR [FILE ...] --weak MODEL --strong MODEL --save PATH
                          [--format routellm|generic|routerarena] [--router logistic]
                          [--cv K] [--split-by query|group] [--test-fraction 0.5] [--seed 0]
                          [--target-share 0.5 | --target-cost X] [--prices FILE]
                          [--resamples 1000] [--json]
    cost-envs route score --router PATH --data FILE_OR_DIR [FILE ...]
                          [--format ...] [--split-by query|group] [--prices FILE]
                          [--seed 0] [--resamples 1000] [--json]

``train`` loads the logs (several files are combined, each keeping its group; a folder
stands for its ``.csv``/``.jsonl`` files, or for RouterArena its ``.jsonl`` files), keeps
the two models, splits the queries (by prompt, or by group so that no test group is seen
in training), fits the router on the training part, sets its threshold on the training
part only (:mod:`agents.routing.calibration`: a target strong-call share, default 0.5, or
a target cost per query), scores the test part and saves the router
(:func:`agents.routing.router_state.save_router`: ``PATH.json`` + ``PATH.safetensors``).
``score`` scores a saved router, at its saved threshold, on every query of other logs.
``--cv K`` chooses the router's ``l2`` (kNN: ``k``) by K folds of the training part
(:func:`agents.routing.router_cv.cross_validate`). Logs of more than two models without
``--weak``/``--strong``, ``--models``, or ``--router multi-logistic`` train a K-model
router instead
(:mod:`agents.cli_route_multi`), and ``score`` reads either kind of saved router.

Both print a Markdown table (accuracy, cost per query, strong-call share, APGR, CPT(50%),
CPT(80%), AIQ, each with its 95% bootstrap interval over queries, or over groups with
``--split-by group``) of the router, random routing at the router's strong-call share
(exact), each model alone and the per-query oracle, plus the router's paired difference
from random routing; ``--json`` prints the same as one JSON object.

Costs are the logged ones where logged, else tokens x the packaged price table (or
``--prices FILE``). A bad input ends the command with one line on stderr and status
:data:`EXIT_INPUT` (1, as for the other subcommands' input files): a missing file, a
malformed row (the loaders' message names the file, the line and the column), a saved
router that is corrupted or not one, an unwritable ``--save``; a model not in the logs is
a usage error (:data:`EXIT_USAGE`, 2, naming the models the logs have).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agents.cli_route_data import (
    DATA_FORMATS,
    EXIT_INPUT,
    EXIT_USAGE,
    call_costs,
    cv_lines,
    cv_settings,
    data_facts,
    fail,
    load_data,
    split_data,
    split_facts,
    two_models,
)
from agents.routing.routers import ROUTERS
from agents.routing.routers.calibration import Calibration, calibrate_cost, calibrate_share
from agents.routing.routers.state import check_router_writable, load_router, save_router
from agents.routing.routing_eval import (
    curve_metrics,
    oracle_routing,
    random_routing,
    score_routings,
    single_model,
    threshold_routing,
)
from cost_envs.metrics.routing import oracle_scores
from cost_envs.traces import SPLIT_BY, TraceDataset

#: The table's rows (JSON keys) and metrics (JSON keys, column titles).
ROLES = ("router", "random", "weak", "strong", "oracle")
METRICS = (("accuracy", "Accuracy"), ("cost_per_query", "Cost/query"),
           ("strong_share", "Strong share"), ("apgr", "APGR"), ("cpt_50", "CPT(50%)"),
           ("cpt_80", "CPT(80%)"), ("aiq", "AIQ"))
#: Below this many test groups, the table says its cluster intervals are not reliable.
FEW_GROUPS = 10
_POINT_METRICS = ("accuracy", "cost_per_query", "strong_share")
_CURVE_METRICS = ("apgr", "cpt_50", "cpt_80", "aiq")


def _float_type(accept: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type for floats ``accept`` takes; ``expected`` names them in errors."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and accept(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_fraction = _float_type(lambda v: 0 < v < 1, "a number in (0, 1)")
_share = _float_type(lambda v: 0 <= v <= 1, "a share in [0, 1]")
_cost = _float_type(lambda v: v >= 0, "a cost per query >= 0")


# ---------------------------------------------------------------------- arguments
def _add_data(parser: argparse.ArgumentParser, seed_help: str, split_help: str) -> None:
    from agents.cli import _positive_int, _seed

    parser.add_argument("--data", type=Path, nargs="+", required=True, metavar="FILE_OR_DIR",
                        help="log files (combined, each keeping its group), or a folder of them")
    parser.add_argument("--format", choices=DATA_FORMATS, default=None,
                        help="routellm (RouteLLM CSVs), generic (the generic CSV/JSONL schema) "
                             "or routerarena (cached_results JSONL, one file per model); "
                             "default: detected per file (not routerarena)")
    parser.add_argument("--split-by", choices=SPLIT_BY, default="query",
                        help=split_help + " (default query)")
    parser.add_argument("--prices", type=Path, default=None, metavar="FILE",
                        help="price table (YAML/JSON) for calls without a logged cost "
                             "(default: the packaged table)")
    parser.add_argument("--seed", type=_seed, default=0, help=seed_help)
    parser.add_argument("--resamples", type=_positive_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (default 1000)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")


def add_route(parser: argparse.ArgumentParser) -> None:
    """``route``'s two actions, ``train`` and ``score``."""
    from agents.cli import _int_at_least

    sub = parser.add_subparsers(dest="route_command", required=True, metavar="ACTION")
    train = sub.add_parser("train", help="train, calibrate, test and save a router",
                           description="Train a router on logs, set its threshold on the "
                                       "training split, score it on the test split, save it.")
    _add_data(train, "seed of the split and of the bootstrap (default 0)",
              "what the split keeps whole and the bootstrap resamples: query (a prompt's "
              "repeats together) or group (no test group seen in training)")
    train.add_argument("--weak", default=None, help="the weak (cheap) model's name")
    train.add_argument("--strong", default=None, help="the strong model's name")
    train.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                       help="a K-model router's models (default: all the logs have)")
    train.add_argument("--router", choices=tuple(ROUTERS), default=None,
                       help="the router (default logistic with --weak/--strong, "
                            "multi-logistic for logs of more than two models; knn: nearest "
                            "neighbours on the same features; cascade: also reads the weak "
                            "model's logged answer, so the logs need its responses; "
                            "multi-logistic: any number of models, one correctness model "
                            "each, traded against cost by lam)")
    train.add_argument("--cv", type=_int_at_least(2, "a number of folds >= 2"), default=None,
                       metavar="K",
                       help="choose the router's l2 (kNN: k) by K folds of the training "
                            "split, kept whole as --split-by says (default: no CV, the "
                            "router's defaults)")
    train.add_argument("--test-fraction", type=_fraction, default=0.5,
                       help="share of the queries held out for the test (default 0.5)")
    target = train.add_mutually_exclusive_group()
    target.add_argument("--target-share", type=_share, default=None,
                        help="calibrate for this share of strong calls on training (default "
                             "0.5; two-model routers)")
    target.add_argument("--target-cost", type=_cost, default=None,
                        help="calibrate for at most this mean cost per query on training "
                             "(K-model default: halfway between the cheapest and the dearest "
                             "model's)")
    train.add_argument("--save", type=Path, required=True, metavar="PATH",
                       help="writes PATH.json and PATH.safetensors")
    train.set_defaults(route_run=run_train)
    score = sub.add_parser("score", help="score a saved router on logs",
                           description="Score a saved router, at its saved threshold, on "
                                       "every query of the logs.")
    score.add_argument("--router", type=Path, required=True, metavar="PATH",
                       help="a router saved by `cost-envs route train` (PATH.json + "
                            "PATH.safetensors)")
    _add_data(score, "seed of the bootstrap (default 0)",
              "what the bootstrap resamples: query or group (for logs of groups the "
              "router never saw)")
    score.set_defaults(route_run=run_score)


def run_route(args: argparse.Namespace) -> int:
    """Run ``route train`` or ``route score``."""
    return args.route_run(args)


# ------------------------------------------------------------------------- report
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


def _report(args: argparse.Namespace, test: TraceDataset, scores: np.ndarray,
            threshold: float, weak: str, strong: str, costs: np.ndarray) -> dict[str, Any]:
    """:func:`route_report` with the command's options; exits on a ``ValueError``."""
    try:
        return route_report(test, scores, threshold, weak, strong, costs,
                            split_by=args.split_by, n_resamples=args.resamples, seed=args.seed)
    except ValueError as error:  # --split-by group on logs without groups, say
        fail(args, error)


def _labels(weak: str, strong: str, router: str, share: float) -> dict[str, str]:
    return {"router": router, "random": f"random at {share:.1%} strong",
            "weak": f"only {weak}", "strong": f"only {strong}", "oracle": "oracle (per query)"}


def _cell(entry: dict[str, Any] | None, key: str) -> str:
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
        lines.append("| " + " | ".join([label, *(_cell(row.get(k), k) for k, _ in METRICS)])
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


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become ``null``, numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def _print(args: argparse.Namespace, out: dict[str, Any], heading: list[str],
           labels: dict[str, str]) -> None:
    if args.json:
        for role, label in labels.items():
            out["test"]["rows"][role]["label"] = label
        print(json.dumps(_clean(out), indent=2, allow_nan=False))
        return
    print("\n".join(heading) + "\n")
    print(format_report(out["test"], labels))


def _threshold_text(threshold: float) -> str:
    return "none (all weak)" if math.isinf(threshold) else f"{threshold:.4g}"


# ------------------------------------------------------------------------- train
def _calibrate(args: argparse.Namespace, scores: np.ndarray, costs: np.ndarray
               ) -> tuple[Calibration, dict[str, Any]]:
    if args.target_cost is not None:
        try:
            cal = calibrate_cost(scores, costs[:, 0], costs[:, 1], args.target_cost)
        except ValueError as error:
            fail(args, f"--target-cost: {error}")
        target = {"target": "cost_per_query", "value": args.target_cost}
    else:
        share = 0.5 if args.target_share is None else args.target_share
        cal = calibrate_share(scores, share, costs[:, 0], costs[:, 1])
        target = {"target": "strong_share", "value": share}
    return cal, {**target, "train_strong_share": cal.strong_share,
                 "train_cost_per_query": cal.cost_per_query}


def run_train(args: argparse.Namespace) -> int:
    """``route train``: load, split, fit, calibrate on training, score the test, save."""
    try:  # before any work, so a bad --save fails at once
        check_router_writable(args.save)
    except ValueError as error:
        fail(args, f"--save: {error}")
    data = load_data(args)
    multi = args.router is not None and ROUTERS[args.router].n_models != 2
    if multi or (args.router is None and args.weak is None and args.strong is None
                                        and (data.n_models > 2 or args.models is not None)):
        from agents.cli_route_multi import run_train_multi

        return run_train_multi(args, data)
    args.router = args.router or "logistic"
    if args.weak is None or args.strong is None or args.models is not None:
        fail(args, f"a two-model router takes --weak and --strong (not --models); the logs "
                    f"have {list(data.models)} (for more than two: --router multi-logistic)",
              EXIT_USAGE)
    data = two_models(args, data, args.weak, args.strong)
    costs = call_costs(args, data)
    train, test, train_idx, test_idx = split_data(args, data)
    settings, cv = cv_settings(args, train, costs[train_idx], weak=args.weak,
                               strong=args.strong)
    try:  # the cascade needs the weak model's logged answers
        router = ROUTERS[args.router](args.weak, args.strong, **settings).fit(train)
    except ValueError as error:
        fail(args, f"--router {args.router}: {error}")
    calibration, cal_facts = _calibrate(args, router.scores(train), costs[train_idx])
    report = _report(args, test, router.scores(test), calibration.threshold, args.weak,
                     args.strong, costs[test_idx])
    split = split_facts(args, train, test)
    meta = {"calibration": cal_facts, "cv": cv,
            "training": {**data_facts(data, args), **split}}
    try:
        files = save_router(args.save, router, calibration.threshold, _clean(meta))
    except (OSError, ValueError) as error:
        fail(args, f"could not save to {args.save}: {error}")
    out = {"command": "train", "router": args.router, "weak": args.weak, "strong": args.strong,
           "threshold": calibration.threshold, "calibration": cal_facts,
           "cv": cv, "data": data_facts(data, args), "split": split, "test": report,
           "saved": [str(f) for f in files]}
    target = (f"{cal_facts['value']:.1%} strong calls" if cal_facts["target"] == "strong_share"
              else f"cost per query <= {cal_facts['value']:.4g}")
    heading = [
        f"data: {data.source}: {data.n_queries} queries, weak {args.weak}, strong {args.strong}",
        f"split by {args.split_by} (seed {args.seed}): {train.n_queries} train, "
        f"{test.n_queries} test",
        f"{args.router} router; threshold {_threshold_text(calibration.threshold)}, calibrated "
        f"on training for {target} (training: {calibration.strong_share:.1%} strong, cost per "
        f"query {calibration.cost_per_query:.4g})",
        *cv_lines(cv), f"saved to {files[0]} and {files[1]}"]
    share = report["rows"]["router"]["strong_share"]["value"]
    _print(args, out, heading, _labels(args.weak, args.strong, args.router, share))
    return 0


# ------------------------------------------------------------------------- score
def run_score(args: argparse.Namespace) -> int:
    """``route score``: a saved router at its saved threshold, on every query of the logs."""
    try:
        saved = load_router(args.router)
    except (ValueError, OSError) as error:
        fail(args, f"cannot load the router: {error}")
    if not saved.two_model:
        from agents.cli_route_multi import run_score_multi

        return run_score_multi(args, saved, load_data(args))
    data = two_models(args, load_data(args), saved.weak, saved.strong, EXIT_INPUT)
    costs = call_costs(args, data)
    try:
        scores = np.asarray(saved.router.scores(data), dtype=np.float64)
    except ValueError as error:
        fail(args, error)
    report = _report(args, data, scores, saved.threshold, saved.weak, saved.strong, costs)
    training = saved.meta.get("training", {})
    seen = data.fingerprint in (training.get("fingerprint"), training.get("train_fingerprint"))
    out = {"command": "score", "router": saved.name, "router_path": str(args.router),
           "weak": saved.weak, "strong": saved.strong, "threshold": saved.threshold,
           "calibration": saved.meta.get("calibration"), "data": data_facts(data, args),
           "trained_on_these_queries": seen, "test": report}
    heading = [f"router: {args.router} ({saved.name}, threshold "
               f"{_threshold_text(saved.threshold)}, weak {saved.weak}, strong {saved.strong})",
               f"data: {data.source}: {data.n_queries} queries, every one scored once"]
    if seen:
        heading.append("note: the router was trained on these queries; these are not "
                       "held-out figures")
    share = report["rows"]["router"]["strong_share"]["value"]
    _print(args, out, heading, _labels(saved.weak, saved.strong, saved.name, share))
    return 0
