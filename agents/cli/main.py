"""The ``cost-envs`` command: its subcommands, parser and exit statuses.

Each subcommand is one :class:`Command` in :data:`COMMANDS`; the package docstring
(:mod:`agents.cli`) lists them and the exit statuses :func:`main` returns.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cost_envs
from agents.cli.evaluate import add_evaluate, run_evaluate
from agents.cli.export_minari import add_export_minari, run_export_minari
from agents.cli.route import add_route, run_route
from agents.cli.train import add_pretrain, add_train, run_pretrain, run_train


def _add_list(parser: argparse.ArgumentParser) -> None:
    del parser  # no arguments


def _run_list(args: argparse.Namespace) -> int:
    del args
    for env_id in cost_envs.ENV_IDS:
        print(env_id)
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
    Command("evaluate", "evaluate baselines on one environment", add_evaluate, run_evaluate),
    Command("train", "train a learned allocator and save it", add_train, run_train),
    Command("pretrain", "pretrain a frozen base encoder", add_pretrain, run_pretrain),
    Command("route", "train, save and score a weak/strong router on logged outcomes",
            add_route, run_route),
    Command("export-minari", "write episodes as a Minari dataset for offline RL",
            add_export_minari, run_export_minari),
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a failed write of help or usage is not swallowed.

    argparse ignores ``OSError`` when printing, so ``--help`` into a full disk exited 0 with
    nothing written; here the error reaches :func:`main`, which reports it in one line.
    """

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
    parser = _Parser(
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
    """Run the command line; returns the exit status (module docstring's table).

    Usage errors raise ``SystemExit(2)`` with a message on stderr, as argparse does; a
    bad input or output raises ``SystemExit`` with a one-line message. A closed stdout,
    an operating-system error and Ctrl-C are turned into one line on stderr and a status.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.
    """
    try:
        try:
            args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
            status = args.run(args)
        except SystemExit:
            sys.stdout.flush()  # --help prints too: its output must land or fail loudly
            raise
        sys.stdout.flush()  # a closed pipe or full disk shows here, not at interpreter exit
        return status
    except KeyboardInterrupt:
        _drop_stdout()
        print("cost-envs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more can be shown; 141 is what a
        # shell reports for a command ended by SIGPIPE, which Python ignores.
        _drop_stdout()
        print("cost-envs: output closed before all of it was written (broken pipe)",
              file=sys.stderr)
        return 141
    except OSError as error:
        _drop_stdout()
        where = f" ({error.filename})" if error.filename else ""
        reason = error.strerror or errno.errorcode.get(error.errno or 0) or str(error)
        print(f"cost-envs: {' '.join(reason.split())}{where}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Flush what stdout holds, or drop it if stdout itself failed.

    A failed flush keeps its buffer, which Python would try (and fail) to write again at
    exit, printing a second error; pointing the descriptor at ``os.devnull`` prevents that.
    """
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # no real descriptor (captured output): nothing to do
            pass

