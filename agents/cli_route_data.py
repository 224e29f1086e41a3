"""``cost-envs route``'s logs: loading, model choice, costs, the split and ``--cv``.

Shared by the two-model commands (:mod:`agents.cli_route`) and the K-model ones
(:mod:`agents.cli_route_multi`). Every failure ends the command through :func:`fail`:
one line on stderr and an exit status (:data:`EXIT_INPUT`, or :data:`EXIT_USAGE` for a
model name the user typed that the logs do not have).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from agents.routing.routers.cv import cross_validate
from cost_envs.prices import coerce_prices
from cost_envs.traces import TraceDataset, load_routerarena, load_traces
from cost_envs.traces.readers import TRACE_SUFFIXES, folder_files

#: Exit status of a bad input (file, model name, saved router), as for a usage error.
EXIT_INPUT = 1
#: A model name the logs do not have is a usage error, as an unknown env id is.
EXIT_USAGE = 2
#: ``--format`` choices; ``generic`` is the generic CSV/JSONL schema.
DATA_FORMATS = ("routellm", "generic", "routerarena")


def fail(args: argparse.Namespace, message: Any, status: int = EXIT_INPUT) -> NoReturn:
    """One line on stderr and ``status`` (:data:`EXIT_INPUT` unless said otherwise)."""
    text = " ".join(str(message).split("\n"))
    print(f"cost-envs route {args.route_command}: {text}", file=sys.stderr)
    raise SystemExit(status)


# --------------------------------------------------------------------------- data
def _expand(args: argparse.Namespace) -> list[Path]:
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
    return paths


def _format(paths: list[Path], choice: str | None) -> str | None:
    """``load_traces``' format for ``--format`` (generic: csv or jsonl by suffix)."""
    if choice != "generic":
        return choice
    suffixes = {p.suffix.lower() for p in paths}
    if suffixes <= {".jsonl", ".ndjson"}:
        return "jsonl"
    return "csv" if suffixes == {".csv"} else None


def load_data(args: argparse.Namespace) -> TraceDataset:
    """The logs of ``--data`` (exits :data:`EXIT_INPUT` naming the bad file)."""
    paths = _expand(args)
    try:
        if args.format == "routerarena":
            return load_routerarena(paths[0] if len(paths) == 1 else paths)
        return load_traces(paths[0] if len(paths) == 1 else paths,
                           format=_format(paths, args.format))
    except (ValueError, OSError) as error:
        hint = ""
        if args.format is None and "'global_index'" in str(error):
            hint = " (RouterArena's cached_results? pass --format routerarena)"
        fail(args, f"{error}{hint}")


def two_models(args: argparse.Namespace, data: TraceDataset, weak: str, strong: str,
               status: int = EXIT_USAGE) -> TraceDataset:
    """``data`` with only ``weak`` and ``strong`` (exits naming a model not in the logs).

    ``status``: :data:`EXIT_USAGE` for names the user typed (``train``),
    :data:`EXIT_INPUT` for a saved router's (``score``: the logs do not fit it).
    """
    for flag, name in (("weak", weak), ("strong", strong)):
        if name not in data.models:
            fail(args, f"{flag} model {name!r} is not in the logs {data.source}; they have "
                        f"{list(data.models)}", status)
    if weak == strong:
        fail(args, f"--weak and --strong are both {weak!r}; expected two models", status)
    return data.select_models([weak, strong])


def call_costs(args: argparse.Namespace, data: TraceDataset) -> np.ndarray:
    """Each call's cost: logged, else tokens x ``--prices`` (default the packaged table)."""
    try:
        return np.asarray(data.call_costs(coerce_prices(args.prices)))
    except (ValueError, OSError) as error:
        fail(args, f"{error} (--prices FILE prices the models)")


def data_facts(data: TraceDataset, args: argparse.Namespace) -> dict[str, Any]:
    """What identifies the logs: source, fingerprint, size, groups, pricing."""
    return {"source": data.source, "fingerprint": data.fingerprint, "queries": data.n_queries,
            "groups": None if data.groups is None else len(set(data.groups)),
            "models": list(data.models), "token_counter": data.token_counter,
            "prices": "packaged" if args.prices is None else str(args.prices)}


def split_data(args: argparse.Namespace, data: TraceDataset
          ) -> tuple[TraceDataset, TraceDataset, np.ndarray, np.ndarray]:
    """(train, test, train indices, test indices) of ``--split-by``/``--test-fraction``."""
    try:
        train_idx, test_idx = data.split_indices(args.seed, args.test_fraction, args.split_by)
    except ValueError as error:
        fail(args, error)
    return data.subset(train_idx), data.subset(test_idx), train_idx, test_idx


def split_facts(args: argparse.Namespace, train: TraceDataset, test: TraceDataset
                ) -> dict[str, Any]:
    """What the split was, for the output and the saved file."""
    return {"split_by": args.split_by, "seed": args.seed, "test_fraction": args.test_fraction,
            "train_queries": train.n_queries, "test_queries": test.n_queries,
            "train_fingerprint": train.fingerprint, "test_fingerprint": test.fingerprint}


def cv_settings(args: argparse.Namespace, train: TraceDataset, costs: np.ndarray,
                **models: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``--cv``: the router's setting chosen on training folds (``({}, None)`` without)."""
    if args.cv is None:
        return {}, None
    try:
        choice = cross_validate(args.router, train, costs=costs, folds=args.cv,
                                split_by=args.split_by, seed=args.seed, **models)
    except ValueError as error:
        fail(args, f"--cv {args.cv}: {error}")
    return choice.settings(), choice.as_json()


def cv_lines(cv: dict[str, Any] | None) -> list[str]:
    """The heading line saying what ``--cv`` chose."""
    if cv is None:
        return []
    return [f"{cv['setting']} = {cv['value']:g}, chosen by {cv['folds']} folds by "
            f"{cv['split_by']} of the training split (mean validation AIQ)"]
