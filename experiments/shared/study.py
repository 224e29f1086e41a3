"""A study: units run once, kept until its files are written, and the command line that runs it.

:func:`write_study` runs a study's units (:func:`experiments.shared.scheduler.run_units`),
keeping each until the files made from them are written, all or nothing;
:func:`study_main` is its ``python -m`` command line (``--jobs``, ``--out`` and the
scheduling options of :func:`~experiments.shared.scheduler.add_scheduling_arguments`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.files import write_files_atomic
from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import add_scheduling_arguments, run_units, scheduling


def write_study(out: Path, experiment: str, scale: Any, function: Callable[[Any], Any],
                units: Sequence[Any], files: Callable[[list[Any]], Mapping[str, str]], *,
                jobs: int, address: str | None, describe: Callable[[Any], str] = str,
                log: Any = print) -> list[Path]:
    """Run ``function`` of every unit and write ``files(results)`` into ``out``; the paths.

    The units run in ``jobs`` processes (or on the Ray cluster at ``address``) and are kept
    in ``experiment``'s folder of ``scale`` (its ``name``; its repr must match a kept
    unit's) until the files are written (:mod:`experiments.shared.kept`).
    """
    keeper = Kept(units_folder(out, experiment, scale.name), repr(scale))
    results = run_units(function, units, jobs=jobs, address=address, describe=describe,
                        keeper=keeper, label=experiment, log=log)
    written = write_files_atomic(out, dict(files(results)))
    keeper.clear()
    return written


def study_main(prog: str, description: str, out: Path, argv: list[str] | None,
               report: Callable[..., list[Path]],
               parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Parse a study's command line, run ``report`` on it, print the paths it wrote.

    ``description``: the first line of the ``--help``; ``out``: the default ``--out``.
    ``report(out, jobs, address=address, command=command)`` runs the study; ``command`` is
    the command line as given, which the study's file may say made it. ``parents``: the
    study's own options (parsers made with ``add_help=False``, read by the study before),
    so that ``--help`` and the usage line list them too.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False,
                                     parents=list(parents))
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--out", type=Path, default=out, help="results folder")
    add_scheduling_arguments(parser)
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    with scheduling(args, parser.prog):
        for path in report(args.out, args.jobs, address=args.address,
                           command=" ".join([prog, *given])):
            print(path)
