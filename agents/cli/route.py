"""``cost-envs route``: train a router on your own logs, save it, score it (any router).

::

    cost-envs route train --data FILE_OR_DIR [FILE ...] --save PATH
                          [--weak MODEL --strong MODEL | --models MODEL ...]
                          [--format routellm|generic|routerarena] [--router NAME]
                          [--cv K] [--split-by query|group] [--test-fraction 0.5] [--seed 0]
                          [--target-share 0.5 | --target-cost X] [--prices FILE]
                          [--resamples 1000] [--json]
    cost-envs route score --router PATH --data FILE_OR_DIR [FILE ...]
                          [--held-out | --groups GROUP ...] [--format ...]
                          [--split-by query|group] [--prices FILE] [--seed 0]
                          [--resamples 1000] [--json]

``train`` loads the logs (several files are combined, each keeping its group; a folder
stands for its ``.csv``/``.jsonl`` files, or for RouterArena its ``.jsonl`` files), keeps
the router's models, splits the queries (by prompt, or by group so that no test group is
seen in training; ``--test-fraction 0`` trains on all of them), fits the router of
:data:`agents.routers.ROUTERS` on the training part (``--cv K``: its setting by K
folds of it, :func:`~agents.routers.cv.cross_validate`), sets its operating point
on the training part only (:mod:`agents.routers.calibration`: a two-model
router's threshold for ``--target-share``, default 0.5, or ``--target-cost``; a K-model
router's ``lam`` for ``--target-cost``, default halfway between the cheapest and the
dearest model's mean training cost), scores the test part
(:mod:`agents.routers.report`'s table, and how far the share or cost landed from
its target there) and saves the router (:func:`~agents.routers.state.save_router`).
Two models with ``--weak``/``--strong`` get ``logistic`` by default; ``--models``, or logs
of more than two models without ``--weak``/``--strong``, get ``multi-logistic``.

The saved JSON records the held-out groups (printed too) and a digest of each training
prompt. ``score`` scores a saved router at its saved operating point on every query of
the logs, or only on the groups it held out (``--held-out``: also the held-out queries of
a split by query, when the logs are the ones it was trained on) or on ``--groups``; it
says how many of the scored queries (and which groups) the router was trained on, and
how far the share or cost landed from the calibration's target.

An error ends the command with one line on stderr and one status per kind, the same in
``train`` and ``score`` and as for the other subcommands:

* :data:`EXIT_INPUT` (1): a file that cannot be read, parsed or written: a missing file or
  folder, a malformed row (the loaders' message names the file, the line and the column),
  a malformed ``--prices`` table, a saved router that is corrupted or not one, an
  unwritable ``--save``;
* :data:`EXIT_USAGE` (2): a request these (valid) files cannot meet: a model or group
  that the logs do not have, whether an option or the saved router names it (the message
  names what they have), a model the price table does not price, options that do not fit
  the router or the logs (``--split-by group`` on logs without groups, ``--held-out``
  when nothing was held out, a ``--target-cost`` no operating point keeps, ``--cv`` with
  too few groups, the cascade on logs without answers), as argparse's own usage errors.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from agents.cli.arguments import int_at_least, resamples_int, seed_int
from agents.routers import ROUTERS
from agents.routers.rule import RULES

#: Exit status of a file that cannot be read, parsed or written (logs, prices, router).
EXIT_INPUT = 1
#: Exit status of a request the files cannot meet (a model or group the logs do not have,
#: options that do not fit them), as of argparse's usage errors and an unknown env id.
EXIT_USAGE = 2
#: ``--format`` choices; ``generic`` is the generic CSV/JSONL schema.
DATA_FORMATS = ("routellm", "generic", "routerarena")


def fail(args: argparse.Namespace, message: Any, status: int = EXIT_INPUT) -> NoReturn:
    """One line on stderr and ``status`` (:data:`EXIT_INPUT` unless said otherwise)."""
    text = " ".join(str(message).split("\n"))
    print(f"cost-envs route {args.route_command}: {text}", file=sys.stderr)
    raise SystemExit(status)


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


# ---------------------------------------------------------------------- arguments
def _add_data(parser: argparse.ArgumentParser, seed_help: str, split_help: str) -> None:
    parser.add_argument("--data", type=Path, nargs="+", required=True, metavar="FILE_OR_DIR",
                        help="log files (combined, each keeping its group), or a folder of them")
    parser.add_argument("--format", choices=DATA_FORMATS, default=None,
                        help="routellm (RouteLLM CSVs), generic (the generic CSV/JSONL schema) "
                             "or routerarena (cached_results JSONL, one file per model); "
                             "default: detected per file (not routerarena)")
    parser.add_argument("--split-by", choices=("query", "group"), default="query",
                        help=split_help + " (default query)")
    parser.add_argument("--prices", type=Path, default=None, metavar="FILE",
                        help="price table (YAML/JSON) for calls without a logged cost "
                             "(default: the packaged table)")
    parser.add_argument("--seed", type=seed_int, default=0, help=seed_help)
    parser.add_argument("--resamples", type=resamples_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (default 1000)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")


def _router_help() -> str:
    """``--router``'s help: every kind of the registry, by how many models it takes."""
    two = sorted(k for k, cls in ROUTERS.items() if cls.n_models == 2)
    many = sorted(k for k, cls in ROUTERS.items() if cls.n_models != 2)
    return (f"the router of agents.routers.ROUTERS (docs/routing.md): between two models "
            f"(--weak, --strong) {', '.join(two)}; between any number (--models) "
            f"{', '.join(many)} (default logistic with --weak/--strong, multi-logistic "
            "otherwise)")


def _cv_help() -> str:
    """``--cv``'s help: each router's setting of :data:`agents.routers.CV_GRIDS`."""
    from agents.routers import CV_GRIDS

    by_setting: dict[str, list[str]] = {}
    for kind, (setting, _) in CV_GRIDS.items():
        by_setting.setdefault(setting, []).append(kind)
    none = sorted(k for k in ROUTERS if k not in CV_GRIDS)
    return ("choose the router's setting by K folds of the training split, kept whole as "
            "--split-by says, by mean validation AIQ (default: no CV, the router's "
            "defaults): " + "; ".join(f"{s} of {', '.join(kinds)}"
                                      for s, kinds in by_setting.items())
            + (f"; none for {', '.join(none)}" if none else ""))


def add_route(parser: argparse.ArgumentParser) -> None:
    """``route``'s two actions, ``train`` and ``score``."""
    sub = parser.add_subparsers(dest="route_command", required=True, metavar="ACTION")
    train = sub.add_parser("train", help="train, calibrate, test and save a router",
                           description="Train a router on logs, set its operating point on "
                                       "the training split, score it on the test split, "
                                       "save it.")
    _add_data(train, "seed of the split and of the bootstrap (default 0)",
              "what the split keeps whole and the bootstrap resamples: query (a prompt's "
              "repeats together) or group (no test group seen in training)")
    train.add_argument("--weak", default=None, help="the weak (cheap) model's name")
    train.add_argument("--strong", default=None, help="the strong model's name")
    train.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                       help="a K-model router's models (default: all the logs have)")
    train.add_argument("--router", choices=tuple(ROUTERS), default=None,
                       help=_router_help())
    train.add_argument("--cv", type=int_at_least(2, "a number of folds >= 2"), default=None,
                       metavar="K", help=_cv_help())
    train.add_argument("--test-fraction", type=_float_type(lambda v: 0 <= v < 1,
                                                           "a number in [0, 1)"),
                       default=0.5, help="share of the queries held out for the test "
                                         "(default 0.5; 0: train on all, no test)")
    target = train.add_mutually_exclusive_group()
    target.add_argument("--target-share", type=_float_type(lambda v: 0 <= v <= 1,
                                                           "a share in [0, 1]"),
                        default=None, help="calibrate for this share of strong calls on "
                                           "training (default 0.5; two-model routers)")
    target.add_argument("--target-cost", type=_float_type(lambda v: v >= 0,
                                                          "a cost per query >= 0"),
                        default=None, help="calibrate for at most this mean cost per query "
                                           "on training (K-model default: halfway between "
                                           "the cheapest and the dearest model's)")
    train.add_argument("--features", default=None, metavar="MODULE:FUNCTION",
                       help="your own text features beside the hashed n-grams: FUNCTION of "
                            "the importable MODULE (or FILE.py) maps a list of texts to a "
                            "(len, dim) matrix; the saved router records it (and its "
                            "source's sha256)")
    train.add_argument("--features-only", action="store_true",
                       help="with --features: your features instead of the n-grams")
    train.add_argument("--save", type=Path, required=True, metavar="PATH",
                       help="writes PATH.json and PATH.safetensors")
    train.set_defaults(route_run=run_train)
    score = sub.add_parser("score", help="score a saved router on logs",
                           description="Score a saved router, at its saved operating point, "
                                       "on every query of the logs (or the groups asked for).")
    score.add_argument("--router", type=Path, required=True, metavar="PATH",
                       help="a router saved by `cost-envs route train` (PATH.json + "
                            "PATH.safetensors)")
    which = score.add_mutually_exclusive_group()
    which.add_argument("--held-out", action="store_true",
                       help="score only what `route train` held out: its test groups, or "
                            "its test queries when these are the logs it was trained on")
    which.add_argument("--groups", nargs="+", default=None, metavar="GROUP",
                       help="score only the queries of these groups")
    score.add_argument("--features", default=None, metavar="MODULE:FUNCTION",
                       help="the text features a router saved with your own was fitted on "
                            "(checked against the sha256 it recorded); default: an entry "
                            "point of that name in the group cost_envs.text_features")
    _add_data(score, "seed of the bootstrap (default 0)",
              "what the bootstrap resamples: query or group (for logs of groups the "
              "router never saw)")
    score.set_defaults(route_run=run_score)


def run_route(args: argparse.Namespace) -> int:
    """Run ``route train`` or ``route score``."""
    return args.route_run(args)


# --------------------------------------------------------------------------- data
def load_data(args: argparse.Namespace) -> Any:
    """The logs of ``--data`` (exits :data:`EXIT_INPUT` naming the bad file or folder)."""
    from cost_envs.traces import load_routerarena, load_traces
    from cost_envs.traces.readers import TRACE_SUFFIXES, folder_files

    suffixes = (".jsonl",) if args.format == "routerarena" else TRACE_SUFFIXES
    paths: list[Path] = []
    for path in args.data:
        if path.is_dir():
            try:
                paths.extend(folder_files(path, suffixes))
            except ValueError as error:
                fail(args, error)
        elif not path.is_file():
            fail(args, f"{path}: no such file or folder")
        else:
            paths.append(path)
    fmt = args.format
    if fmt == "generic":  # csv or jsonl by suffix
        found = {p.suffix.lower() for p in paths}
        fmt = "jsonl" if found <= {".jsonl", ".ndjson"} else "csv" if found == {".csv"} else None
    try:
        if args.format == "routerarena":
            return load_routerarena(paths[0] if len(paths) == 1 else paths)
        return load_traces(paths[0] if len(paths) == 1 else paths, format=fmt)
    except (ValueError, OSError) as error:
        hint = ""
        if args.format is None and "'global_index'" in str(error):
            hint = " (RouterArena's cached_results? pass --format routerarena)"
        fail(args, f"{error}{hint}")


def _models(args: argparse.Namespace, data: Any, names: Sequence[str], two: bool) -> Any:
    """``data`` with only ``names`` (exits naming a model not in the logs)."""
    flags = ("weak", "strong") if two else ("",) * len(names)
    for flag, name in zip(flags, names, strict=True):
        if name not in data.models:
            fail(args, f"{flag + ' ' if flag else ''}model {name!r} is not in the logs "
                       f"{data.source}; they have {list(data.models)}", EXIT_USAGE)
    if len(set(names)) != len(names) or len(names) < 2:
        if two:
            fail(args, f"--weak and --strong are both {names[0]!r}; expected two models",
                 EXIT_USAGE)
        fail(args, f"expected at least two distinct models to route between, got "
                   f"{list(names)}", EXIT_USAGE)
    return data.select_models(list(names))


def _costs(args: argparse.Namespace, data: Any) -> np.ndarray:
    """Each call's cost: logged, else tokens x ``--prices`` (default the packaged table)."""
    from cost_envs.prices import coerce_prices

    try:
        prices = coerce_prices(args.prices)
    except (ValueError, OSError) as error:
        fail(args, error)
    try:
        return np.asarray(data.call_costs(prices))
    except ValueError as error:  # a model the table does not price
        fail(args, f"{error} (--prices FILE prices the models)", EXIT_USAGE)


def _data_facts(args: argparse.Namespace, data: Any) -> dict[str, Any]:
    """What identifies the logs: source, fingerprint, size, groups, pricing."""
    return {"source": data.source, "fingerprint": data.fingerprint, "queries": data.n_queries,
            "groups": None if data.groups is None else len(set(data.groups)),
            "models": list(data.models), "token_counter": data.token_counter,
            "prices": "packaged" if args.prices is None else str(args.prices)}


def _groups(data: Any) -> list[str] | None:
    return None if data.groups is None else sorted(set(data.groups))


def _split(args: argparse.Namespace, data: Any) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices of ``--split-by``/``--test-fraction`` (test empty at 0)."""
    if args.test_fraction == 0:
        return np.arange(data.n_queries), np.zeros(0, dtype=np.int64)
    try:
        return data.split_indices(args.seed, args.test_fraction, args.split_by)
    except ValueError as error:
        fail(args, error, EXIT_USAGE)


# ------------------------------------------------------------------------- train
def _router_kind(args: argparse.Namespace, data: Any) -> str:
    """The router ``train`` fits, and checks of the options that go with it."""
    kind = args.router or ("logistic" if args.weak is not None or args.strong is not None
                           or (data.n_models <= 2 and args.models is None)
                           else "multi-logistic")
    if ROUTERS[kind].n_models == 2:
        if args.weak is None or args.strong is None or args.models is not None:
            fail(args, f"a two-model router takes --weak and --strong (not --models); the "
                       f"logs have {list(data.models)} (for more than two: --router "
                       "multi-logistic)", EXIT_USAGE)
    elif args.weak is not None or args.strong is not None:
        fail(args, f"--router {kind} routes between --models (default all), not "
                   "--weak/--strong", EXIT_USAGE)
    elif args.target_share is not None:
        fail(args, "--target-share is a two-model calibration; a K-model router is "
                   "calibrated with --target-cost", EXIT_USAGE)
    if kind in RULES and args.cv is not None:  # its fit is the search: nothing to tune
        fail(args, f"--cv: --router {kind} chooses its rule on the training split itself "
                   "(no setting to cross-validate); drop --cv", EXIT_USAGE)
    return kind


def _calibrate(args: argparse.Namespace, router: Any, train: Any, costs: np.ndarray
               ) -> tuple[float, dict[str, Any]]:
    """The operating point on the training split, and what it was set for."""
    from agents.routers.calibration import calibrate

    try:
        return calibrate(router, train, costs, share=args.target_share, cost=args.target_cost)
    except ValueError as error:
        fail(args, f"--target-cost: {error}", EXIT_USAGE)


def _report(args: argparse.Namespace, data: Any, router: Any, point: float,
            costs: np.ndarray, rule: Any = None) -> dict[str, Any]:
    """The table's numbers on ``data`` (exits on a ``ValueError``).

    ``rule``: ``(router, point)`` of the best training-free rule over the same models
    (:data:`agents.routers.rule.RULES`), fitted and calibrated on the same training split:
    its row and the router's verdict against it.
    """
    from agents.routers.report import multi_report, route_report

    kw = {"split_by": args.split_by, "n_resamples": args.resamples, "seed": args.seed}
    try:
        if router.n_models == 2:
            weak, strong = router.models
            versus = None if rule is None else (
                np.asarray(rule[0].scores(data), dtype=np.float64), rule[1])
            report = route_report(data, np.asarray(router.scores(data), dtype=np.float64),
                                  point, weak, strong, costs, rule=versus, **kw)
            if rule is not None:
                report["rule_label"] = rule[0].label
            return report
        return multi_report(data, router, point, costs, rule=rule, **kw)
    except ValueError as error:  # --split-by group on logs without groups, say
        fail(args, error, EXIT_USAGE)


def _point_text(router: Any, point: float) -> str:
    if router.n_models != 2:
        return f"lam {point:.4g}"
    return f"threshold {'none (all weak)' if math.isinf(point) else f'{point:.4g}'}"


def _emit(args: argparse.Namespace, out: dict[str, Any], heading: list[str],
          router: Any, name: str) -> None:
    """The JSON object, or the heading and the table."""
    from agents.routers.report import clean, format_multi, format_report, row_labels

    if hasattr(router, "member"):  # a training-free rule: the member its training chose
        out["rule_member"], name = router.member, router.label
    report = out["test"]
    labels = None
    if report is not None and router.n_models == 2:
        share = report["rows"]["router"]["strong_share"]["value"]
        weak, strong = router.models
        labels = row_labels(weak, strong, name, share)
        if "rule_label" in report:
            labels["rule"] = report["rule_label"]
    if args.json:
        if labels is not None:
            for role, label in labels.items():
                report["rows"][role]["label"] = label
        print(json.dumps(clean(out), indent=2, allow_nan=False))
        return
    print("\n".join(heading))
    if report is not None:
        print("\n" + (format_report(report, labels) if labels is not None
                      else format_multi(report, name)))


def run_train(args: argparse.Namespace) -> int:
    """``route train``: load, split, fit, calibrate on training, score the test, save."""
    from agents.routers import cross_validate, make_router
    from agents.routers.report import calibration_drift, clean, drift_line
    from agents.routers.rule import rule_record
    from agents.routers.state import (
        check_router_writable,
        prompt_digests,
        save_router,
    )

    try:  # before any work, so a bad --save fails at once
        check_router_writable(args.save)
    except ValueError as error:
        fail(args, f"--save: {error}")
    data = load_data(args)
    kind = args.router = _router_kind(args, data)
    two = ROUTERS[kind].n_models == 2
    names = (args.weak, args.strong) if two else (args.models or data.models)
    data = _models(args, data, names, two)
    costs = _costs(args, data)
    train_idx, test_idx = _split(args, data)
    train = data.subset(train_idx)
    test = data.subset(test_idx) if len(test_idx) else None
    settings: dict[str, Any] = {}
    cv, features = None, None
    if args.features is not None:
        from agents.routers.user_features import register_spec

        try:
            features = register_spec(args.features, train.prompts[0])
        except ValueError as error:
            fail(args, error, EXIT_USAGE)
        settings["text_features"] = features["name"]
        settings["with_ngrams"] = not args.features_only
    elif args.features_only:
        fail(args, "--features-only: expected --features MODULE:FUNCTION too", EXIT_USAGE)
    if args.cv is not None:
        try:
            choice = cross_validate(kind, train, weak=args.weak, strong=args.strong,
                                    models=() if two else data.models, costs=costs[train_idx],
                                    settings=settings, folds=args.cv, split_by=args.split_by,
                                    seed=args.seed)
        except ValueError as error:
            fail(args, f"--cv {args.cv}: {error}", EXIT_USAGE)
        settings, cv = {**settings, **choice.settings()}, choice.as_json()
    try:  # the cascade needs the weak model's logged answers
        router = make_router(kind, *data.models, **settings).fit(train, costs[train_idx])
    except ValueError as error:
        fail(args, f"--router {kind}: {error}", EXIT_USAGE)
    point, cal = _calibrate(args, router, train, costs[train_idx])
    rule = None  # beside a learned router: the best rule that needs no training, over
    if kind not in RULES:  # the same models, fitted and calibrated as it, saved with it
        rule_router = make_router("rule" if two else "multi-rule", *data.models).fit(
            train, costs[train_idx])
        rule = (rule_router, _calibrate(args, rule_router, train, costs[train_idx])[0])
    report = None if test is None else _report(args, test, router, point, costs[test_idx],
                                               rule)
    drift = None if report is None else calibration_drift(cal, report)
    split = {"split_by": args.split_by, "seed": args.seed, "test_fraction": args.test_fraction,
             "train_queries": train.n_queries, "test_queries": len(test_idx),
             "train_fingerprint": train.fingerprint,
             "test_fingerprint": None if test is None else test.fingerprint,
             "train_groups": _groups(train), "test_groups": None if test is None
             else _groups(test)}
    meta = {"calibration": cal, "cv": cv, "held_out_drift": drift, "text_features": features,
            "rule": None if rule is None else rule_record(*rule),
            "training": {**_data_facts(args, data), **split,
                         "train_prompt_sha256": prompt_digests(train.prompts)}}
    try:
        files = save_router(args.save, router, point, clean(meta))
    except (OSError, ValueError) as error:
        fail(args, f"could not save to {args.save}: {error}")
    head = ({"weak": args.weak, "strong": args.strong, "threshold": point} if two
            else {"models": list(data.models), "lam": point})
    out = {"command": "train", "router": kind, **head, "calibration": cal, "cv": cv,
           "data": _data_facts(args, data), "split": split, "held_out_drift": drift,
           "test": report, "saved": [str(f) for f in files]}
    if two:
        target = (f"{cal['value']:.1%} strong calls" if cal["target"] == "strong_share"
                  else f"cost per query <= {cal['value']:.4g}")
        trained = (f"training: {cal['train_strong_share']:.1%} strong, cost per query "
                   f"{cal['train_cost_per_query']:.4g}")
    else:
        target = (f"cost per query <= {cal['value']:.4g}"
                  f"{' (default: halfway)' if cal['default'] else ''}")
        trained = f"training: {cal['train_cost_per_query']:.4g}"
    models = f"weak {args.weak}, strong {args.strong}" if two else (
        f"models {', '.join(data.models)}")
    heading = [f"data: {data.source}: {data.n_queries} queries, {models}",
               f"split by {args.split_by} (seed {args.seed}): {train.n_queries} train, "
               f"{len(test_idx)} test" + ("" if test is not None else
                                          " (--test-fraction 0: trained on all)"),
               f"{kind} router; {_point_text(router, point)}, calibrated on training for "
               f"{target} ({trained})"]
    if cv is not None:
        heading.append(f"{cv['setting']} = {cv['value']:g}, chosen by {cv['folds']} folds "
                       f"by {cv['split_by']} of the training split (mean validation AIQ)")
    if drift is not None:
        heading.append(drift_line(drift, "held-out"))
    if split["test_groups"] and args.split_by == "group":
        heading.append(f"held-out groups ({len(split['test_groups'])}; `route score "
                       f"--held-out` scores them): {', '.join(split['test_groups'])}")
    heading.append(f"saved to {files[0]} and {files[1]}")
    _emit(args, out, heading, router, kind)
    return 0


# ------------------------------------------------------------------------- score
def _selected(args: argparse.Namespace, data: Any, training: dict[str, Any]) -> Any:
    """The queries ``--held-out`` or ``--groups`` asks for (all without either)."""
    if args.held_out:
        if training.get("test_queries", 1) == 0:
            fail(args, "--held-out: the router was trained on all its logs "
                       "(--test-fraction 0); nothing was held out", EXIT_USAGE)
        if training.get("split_by") == "group" and training.get("test_groups"):
            wanted = training["test_groups"]
        elif data.fingerprint == training.get("fingerprint"):  # the very logs: re-split
            _, test = data.split_indices(training["seed"], training["test_fraction"],
                                         training["split_by"])
            return data.subset(test)
        else:
            fail(args, "--held-out: the router held out queries of its own logs (split by "
                       "query); these logs are not those (their fingerprint differs)",
                 EXIT_USAGE)
    elif args.groups is not None:
        wanted = args.groups
    else:
        return data
    have = set(data.groups or ())
    missing = [g for g in wanted if g not in have]
    if args.groups is not None and missing:
        fail(args, f"--groups: {missing} not in the logs {data.source}; they have "
                   f"{sorted(have)[:20]}", EXIT_USAGE)
    rows = np.flatnonzero(np.isin(np.array(data.groups or [""] * data.n_queries), wanted))
    if not len(rows):
        fail(args, f"--held-out: none of the router's held-out groups {wanted[:10]} is in "
                   f"the logs {data.source}", EXIT_USAGE)
    return data.subset(rows)


def run_score(args: argparse.Namespace) -> int:
    """``route score``: a saved router at its saved operating point, on the logs."""
    from agents.routers.report import calibration_drift, drift_line
    from agents.routers.rule import rule_from_record
    from agents.routers.state import load_router, training_overlap
    from agents.routers.user_features import FeaturesError

    try:
        saved = load_router(args.router, features=args.features)
    except FeaturesError as error:  # a valid file whose features the command lacks
        fail(args, error, EXIT_USAGE)
    except (ValueError, OSError) as error:
        fail(args, f"cannot load the router: {error}")
    router = saved.router
    data = _models(args, load_data(args), saved.models, saved.two_model)
    training = saved.meta.get("training", {})
    data = _selected(args, data, training)
    costs = _costs(args, data)
    rule = None  # the rule of the router's training split, saved with it (older: none)
    if saved.meta.get("rule") is not None:
        try:
            rule = rule_from_record(saved.meta["rule"])
        except ValueError as error:
            fail(args, f"cannot load the router's rule: {error}")
    report = _report(args, data, router, saved.point, costs, rule)
    overlap = training_overlap(data, training)
    calibration = saved.meta.get("calibration")
    drift = None if calibration is None else calibration_drift(calibration, report)
    head = ({"weak": saved.weak, "strong": saved.strong, "threshold": saved.point}
            if saved.two_model else {"models": list(saved.models), "lam": saved.point})
    out = {"command": "score", "router": saved.name, "router_path": str(args.router), **head,
           "calibration": calibration, "data": _data_facts(args, data),
           "trained_on_these_queries": overlap["queries"] > 0, "training_overlap": overlap,
           "drift": drift, "test": report}
    models = (f"weak {saved.weak}, strong {saved.strong}" if saved.two_model
              else f"models {', '.join(saved.models)}")
    heading = [f"router: {args.router} ({saved.name}, {_point_text(router, saved.point)}, "
               f"{models})",
               f"data: {data.source}: {data.n_queries} queries, every one scored once"]
    if overlap["queries"]:
        heading.append(f"note: the router was trained on {overlap['queries']} of these "
                       f"{data.n_queries} queries ({overlap['queries'] / data.n_queries:.0%}); "
                       "these are not held-out figures")
    if overlap["groups"]:
        count = len(overlap["groups"])
        heading.append(f"note: {count} of the scored groups {'was a' if count == 1 else 'were'} "
                       f"training group{'' if count == 1 else 's'}: "
                       f"{', '.join(overlap['groups'][:20])}"
                       f"{' ...' if len(overlap['groups']) > 20 else ''}")
    if drift is not None:
        heading.append(drift_line(drift, "here"))
    _emit(args, out, heading, router, saved.name)
    return 0
