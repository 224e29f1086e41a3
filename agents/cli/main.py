"""The ``cost-envs`` command: its subcommands, parser and exit statuses.

Each subcommand is one :class:`Command` in :data:`COMMANDS`; the package docstring
(:mod:`agents.cli`) lists them and the exit statuses :func:`main` returns.

Importing this module imports no ``cost_envs``, NumPy, Gymnasium or torch: a command's
module is imported only when that command is given (:attr:`Command.add_arguments` and
:attr:`Command.run` name it), so ``cost-envs --help`` and ``--version`` answer in a few
hundredths of a second of CPU (issue #36), and each command loads only what it uses.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from agents.cli.arguments import EXIT_INPUT, close_to, missing_extra, require_extra


def _add_list(parser: argparse.ArgumentParser) -> None:
    del parser  # no arguments


def _run_list(args: argparse.Namespace) -> int:
    del args
    import cost_envs

    for env_id in cost_envs.ENV_IDS:
        print(env_id)
    return 0


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, help, argument builder and runner (returns the exit code).

    ``add_arguments`` and ``run`` are functions, or ``"module:function"`` names imported
    only when the command is given (:func:`build_parser`), so that the top-level help
    loads none of the commands' modules.

    ``needs`` names the extras (:data:`cost_envs.extras.EXTRA_MODULES`) every run of the
    command needs: without one, :func:`main` says which to install, in one line, after the
    arguments are parsed (so ``--help`` works) and before the command runs. A need that
    depends on the arguments (``evaluate --model``) is the command's own check.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None] | str
    run: Callable[[argparse.Namespace], int] | str
    needs: tuple[str, ...] = ()


def _resolve(target: Callable[..., Any] | str) -> Callable[..., Any]:
    """``target`` itself, or the function a ``"module:function"`` name names (imported)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


COMMANDS: tuple[Command, ...] = (
    Command("list", "print the registered environment ids", _add_list, _run_list),
    Command("evaluate", "evaluate baselines on one environment",
            "agents.cli.evaluate:add_evaluate", "agents.cli.evaluate:run_evaluate"),
    Command("train", "train a learned allocator and save it",
            "agents.cli.train:add_train", "agents.cli.train:run_train", needs=("agents",)),
    Command("pretrain", "pretrain a frozen base encoder",
            "agents.cli.train:add_pretrain", "agents.cli.train:run_pretrain",
            needs=("agents",)),
    Command("route", "train, save and score a weak/strong router on logged outcomes",
            "agents.cli.route:add_route", "agents.cli.route:run_route"),
    Command("export-minari", "write episodes as a Minari dataset for offline RL",
            "agents.cli.export_minari:add_export_minari",
            "agents.cli.export_minari:run_export_minari"),
    Command("serve", "serve an OpenAI-compatible router with hard budgets",
            "agents.cli.serve:add_serve", "agents.cli.serve:run_serve"),
)


def version() -> str:
    """The version of cost-envs, read without importing ``cost_envs`` (NumPy, Gymnasium).

    ``__version__`` is read from the text of ``cost_envs/__init__.py``, as setup.cfg's
    ``version = attr: cost_envs.__version__`` reads it; if that fails, from the module.
    """
    spec = importlib.util.find_spec("cost_envs")  # finds the package without running it
    try:
        # spec.origin None (no file) is the TypeError caught below; spec is never None
        # here (agents is installed with cost_envs)
        text = Path(spec.origin).read_text(  # type: ignore[union-attr,arg-type]  # see above
            encoding="utf-8")
        found = re.search(r"^__version__ = [\"']([^\"']+)[\"']", text, re.MULTILINE)
    except (OSError, TypeError, UnicodeDecodeError):
        found = None
    if found:
        return found[1]
    import cost_envs

    return str(cost_envs.__version__)


class _Version(argparse.Action):
    """``--version``: prints :func:`version` and exits 0; alone, or it is a usage error."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = getattr(parser, "given", [])
        if len(given) > 1:
            parser.error(f"argument --version: takes no other arguments, got "
                         f"{' '.join(word for word in given if word != option_string)!r}")
        parser._print_message(f"{version()}\n", sys.stdout)  # as argparse's own action
        parser.exit()


#: argparse's message for a value not among an argument's choices (Python 3.11, 3.12).
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with "did you mean", no abbreviations and unswallowed write errors.

    A mistyped subcommand, choice or option gets the closest valid one
    (:func:`difflib.get_close_matches`; Python 3.14's ``suggest_on_error``, which 3.11
    lacks), and an unknown option the usage of the subcommand it was given to rather than
    the top-level usage. argparse ignores ``OSError`` when printing, so ``--help`` into a
    full disk exited 0 with nothing written; here the error reaches :func:`main`, which
    reports it in one line.
    """

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        # no prefix of an option is taken for it (argparse takes any unique one): a typo such as
        # --n-env is an error with a "did you mean", not silently --n-envs; subcommands'
        # parsers are of this class too, so none of them abbreviates (issue #26)
        kwargs["allow_abbrev"] = allow_abbrev
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)

    #: The arguments this parser was last given (its subcommand's, for a subparser).
    given: list[str] = []

    def parse_known_args(  # type: ignore[override]  # argparse's stubs overload namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        """As argparse's; the arguments are kept for the messages of :meth:`error`."""
        self.given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self.given, namespace)

    def parse_args(  # type: ignore[override]  # argparse's stubs overload namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> argparse.Namespace:
        """As argparse's, but unknown arguments are reported by the subcommand's parser."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            parser = _chosen(self, parsed)
            parser.error(f"unrecognized arguments: {' '.join(unknown)}"
                         f"{_option_suggestion(parser, unknown)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        """Print the usage and ``message`` with the closest valid choice; exit 2.

        A required option missing beside an unknown one (``--evn X`` for ``--env X``)
        names the unknown one and the closest valid option too.
        """
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = re.findall(r"'([^']*)'", match["choices"])
            message += close_to(match["value"], choices)
        elif message.startswith("the following arguments are required"):
            options = {option for action in self._actions for option in action.option_strings}
            unknown = [word for word in self.given
                       if word.startswith("--") and word.split("=", 1)[0] not in options]
            if unknown:
                message += (f"; unrecognized arguments: {' '.join(unknown)}"
                            f"{_option_suggestion(self, unknown)}")
        super().error(message)


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace
            ) -> argparse.ArgumentParser:
    """The innermost subcommand parser ``parsed`` went through (``route train``'s, ...)."""
    while True:
        subparsers = [action for action in parser._actions  # argparse keeps no public list
                      if isinstance(action, argparse._SubParsersAction)]
        if not subparsers:
            return parser
        name = getattr(parsed, subparsers[0].dest, None)
        if name not in subparsers[0].choices:
            return parser
        parser = subparsers[0].choices[name]


def _option_suggestion(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """"; did you mean '--x'?" for the first unknown option close to one of ``parser``'s."""
    options = [option for action in parser._actions for option in action.option_strings]
    for word in unknown:
        if word.startswith("-"):
            hint = close_to(word.split("=", 1)[0], options)
            if hint:
                return hint
    return ""


def build_parser(commands: Sequence[Command] = COMMANDS,
                 chosen: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command.

    Args:
        commands: The subcommands.
        chosen: The commands whose arguments are added (their modules imported); the
            others are a name and a help line, which is all the top-level ``--help`` and
            a mistyped subcommand need. ``None``: every command's.
    """
    parser = _Parser(
        prog="cost-envs", description="Cost-aware orchestration environments and allocators."
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        if chosen is None or command.name in chosen:
            _resolve(command.add_arguments)(child)
        child.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (module docstring's table).

    Usage errors raise ``SystemExit(2)`` with a message on stderr, as argparse does; a
    bad input or output raises ``SystemExit`` with a one-line message. A closed stdout,
    an operating-system error and Ctrl-C are turned into one line on stderr and a status,
    and so is a module of a missing extra (:attr:`Command.needs`, or one a command imports
    without saying so): the line names the ``pip install`` that fixes it.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.
    """
    args: argparse.Namespace | None = None
    words = sys.argv[1:] if argv is None else list(argv)
    names = {command.name for command in COMMANDS}
    try:
        try:
            # only the command given is built (and its module imported): a subcommand is
            # the first word, as the top-level parser has no option taking a value
            parser = build_parser(chosen=[word for word in words[:1] if word in names])
            args = parser.parse_args(words)
            _require(args.command, {command.name: command for command in COMMANDS}
                     .get(args.command))
            status = _resolve(args.run)(args)
        except SystemExit:
            sys.stdout.flush()  # --help prints too: its output must land or fail loudly
            raise
        sys.stdout.flush()  # a closed pipe or full disk shows here, not at interpreter exit
        return status
    except ModuleNotFoundError as error:
        from cost_envs.extras import extra_of, missing_modules

        top = (error.name or "").split(".")[0]
        extra = extra_of(top)
        if extra is None or not missing_modules([top]):  # not an extra's, or broken not absent
            raise
        _drop_stdout()  # an extra's module imported by a command that did not say it needs it
        where = "cost-envs" if args is None else f"cost-envs {args.command}"
        print(f"{where}: {missing_extra(extra, [top])}", file=sys.stderr)
        return EXIT_INPUT
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


def _require(name: str, command: Command | None) -> None:
    """Exit in one line naming the extra to install if ``command`` needs a missing one."""
    for extra in command.needs if command is not None else ():
        require_extra(extra, f"cost-envs {name}")


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

