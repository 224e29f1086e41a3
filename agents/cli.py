"""The ``cost-envs`` command.

Subcommands::

    cost-envs list                       registered environment ids, one per line
    cost-envs evaluate --env ID [--methods random,rule,...] [--episodes N] [--seed S] [--json]
    cost-envs reproduce [--episodes N] [--seed S] [--out DIR]

Each subcommand is one :class:`Command` (a name, a function adding its arguments and a
function running it) in :data:`COMMANDS`; adding a subcommand is adding an entry. Usage
errors (unknown env id or method, a non-positive episode count) exit with status 2 and a
message on stderr naming the valid choices, as argparse does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cost_envs
from agents.baselines import BASELINES
from agents.evaluation import compare, format_table

#: Methods of ``evaluate`` by default: the paper's baselines plus the greedy heuristic.
DEFAULT_METHODS = ("random", "capability", "rule", "oracle", "greedy")
#: Methods of ``reproduce``: the defaults plus call-all, the brute-force reference.
REPRODUCE_METHODS = (*DEFAULT_METHODS, "all")
#: Summary keys written by ``evaluate --json`` and the reproduced JSON files.
JSON_KEYS = (
    "success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost",
    "success_rate_ci", "cps_ci", "flops_per_success_ci", "avg_quality_ci", "avg_cost_ci",
    "call_ratio", "budget_violations", "episodes",
)


# ------------------------------------------------------------------ argument types
def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type for integers >= ``minimum``; ``what`` names them in errors."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_seed = _int_at_least(0, "an integer >= 0")


def _env_id(text: str) -> str:
    """A registered id, also accepted without its namespace (``FlightPlanner-v0``)."""
    by_name = {env_id.split("/")[-1]: env_id for env_id in cost_envs.ENV_IDS}
    if text in cost_envs.ENV_IDS:
        return text
    if text in by_name:
        return by_name[text]
    raise argparse.ArgumentTypeError(
        f"unknown environment {text!r}; valid ids: {', '.join(cost_envs.ENV_IDS)}"
    )


def _methods(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in BASELINES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(map(repr, unknown)) or 'none given'}; "
            f"valid methods: {', '.join(BASELINES)}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"duplicate method names in {text!r}")
    return names


# ---------------------------------------------------------------------- helpers
def _run_compare(env_id: str, methods: Sequence[str], args: argparse.Namespace) -> dict:
    return compare(
        {name: BASELINES[name] for name in methods},
        env_id,
        episodes=args.episodes,
        seed=args.seed,
        n_resamples=args.resamples,
    )


def _json_results(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {key: summary[key] for key in JSON_KEYS} for name, summary in results.items()}


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and ``os.replace``: never half-written."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _add_common(parser: argparse.ArgumentParser, episodes: int = 400) -> None:
    parser.add_argument("--episodes", type=_positive_int, default=episodes,
                        help=f"episodes per method (default {episodes})")
    parser.add_argument("--seed", type=_seed, default=0,
                        help="seed of the fixed task set (default 0)")
    parser.add_argument("--resamples", type=_positive_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (default 1000)")


# --------------------------------------------------------------------- commands
def _add_list(parser: argparse.ArgumentParser) -> None:
    del parser  # no arguments


def _run_list(args: argparse.Namespace) -> int:
    del args
    for env_id in cost_envs.ENV_IDS:
        print(env_id)
    return 0


def _add_evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", type=_env_id, required=True,
                        help=f"environment id, one of: {', '.join(cost_envs.ENV_IDS)}")
    parser.add_argument("--methods", type=_methods, default=DEFAULT_METHODS,
                        help=f"comma-separated baselines from: {', '.join(BASELINES)} "
                             f"(default {','.join(DEFAULT_METHODS)})")
    _add_common(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object keyed by method instead of a table")


def _run_evaluate(args: argparse.Namespace) -> int:
    results = _run_compare(args.env, args.methods, args)
    if args.json:
        print(json.dumps(_json_results(results), indent=2))
    else:
        print(format_table(results))
    return 0


def _add_reproduce(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                        help="output directory (default benchmarks/results)")


def _markdown_report(env_id: str, table: str, args: argparse.Namespace) -> str:
    # No timestamps or host details: reruns with the same arguments give identical files.
    return (
        f"# Baselines on {env_id}\n\n"
        f"{args.episodes} episodes, task seed {args.seed}, 95% percentile-bootstrap "
        f"intervals over episodes ({args.resamples} resamples).\n"
        f"Reproduce with `cost-envs reproduce --episodes {args.episodes} --seed {args.seed}`.\n\n"
        f"{table}\n"
    )


def _run_reproduce(args: argparse.Namespace) -> int:
    # Evaluate everything before writing anything, so a failure leaves old files intact.
    all_results = {env_id: _run_compare(env_id, REPRODUCE_METHODS, args)
                   for env_id in cost_envs.ENV_IDS}
    args.out.mkdir(parents=True, exist_ok=True)
    for env_id, results in all_results.items():
        name = env_id.split("/")[-1]
        table = format_table(results)
        payload = {"env_id": env_id, "episodes": args.episodes, "seed": args.seed,
                   "resamples": args.resamples, "methods": _json_results(results)}
        _write_atomic(args.out / f"baselines_{name}.md", _markdown_report(env_id, table, args))
        _write_atomic(args.out / f"baselines_{name}.json", json.dumps(payload, indent=2) + "\n")
        print(f"## {env_id}\n\n{table}\n")
    return 0


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, help, argument builder and runner (returns the exit code)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: tuple[Command, ...] = (
    Command("list", "print the registered environment ids", _add_list, _run_list),
    Command("evaluate", "evaluate baselines on one environment", _add_evaluate, _run_evaluate),
    Command("reproduce", "write the baseline tables of every environment",
            _add_reproduce, _run_reproduce),
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="cost-envs", description="Cost-aware orchestration environments and allocators."
    )
    parser.add_argument("--version", action="version", version=cost_envs.__version__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Usage errors raise ``SystemExit(2)`` with a message on stderr, as argparse does.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.
    """
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
