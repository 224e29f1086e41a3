"""One scheduler for the experiments' independent units: local processes or a Ray cluster.

Every experiment splits its work into *units* (an env x row x seed training run, an
env's fixed rows, an env's rule search), each seeded on its own, so the result of a unit
does not depend on where or when it runs. :func:`run_units` runs them and returns their
results in the units' order, whatever order they finish in, so a report comes out the
same byte for byte from one process, from ``jobs`` local processes or from a cluster:

* ``address=None``: in this process when ``jobs`` is 1 (or there is one unit to run),
  else in ``jobs`` spawned worker processes (:func:`spawn_pool`);
* ``address`` (``auto``, ``local``, ``HOST:PORT``, ``ray://HOST:10001``): as Ray tasks
  of ``num_cpus`` CPUs each on the cluster there (:func:`experiments.shared.cluster.connect`),
  as many at once as its CPUs hold.

Both backends run the same worker function (:func:`run_unit`) on the same units; the
workers run single-threaded BLAS (:data:`experiments.shared.cluster.WORKER_ENV`) and
import the experiments' own code (``spawn`` imports it from the checkout, a cluster from
the package shipped with the job). A worker that dies (killed, out of memory, a lost
node) loses the units it ran: they are run again, up to :data:`RETRIES` times, on both
backends alike.

What the driver does as each unit finishes is here too, for every experiment: it keeps
the result (``keeper``, :mod:`experiments.shared.kept`: a later run of the same command
reads it back and runs only what is missing), calls ``done``, and prints the progress
(units done / to run, the time since the start and the time left at the mean pace so
far). A unit that fails does not stop the others: they finish and are kept, and then
:class:`UnitsFailedError` reports each failure with its traceback, the command that reruns
it alone (the same command with ``--unit NAME``) and the command that runs what is missing,
which is the failed units alone.

``--unit NAME`` (:func:`add_scheduling_arguments`, repeatable; in effect within
:func:`selected_units`) runs only the named units among those not kept, ``NAME`` being what
the progress lines and the failures call a unit. When they are done the experiment goes on
as usual if no other unit is missing; else :class:`UnitsLeftError` stops it in one line. A
name found kept counts as done (so the same command resumes); one that is neither kept nor
still to run is refused before anything runs (:class:`UnknownUnitsError`).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Protocol

from cost_envs.config import suggestion
from experiments.shared.cluster import connect, single_threaded_workers

#: How many times a unit whose worker died is run again before it counts as failed
#: (Ray's ``max_retries``; a unit that raises is never run again).
RETRIES = 2


class Keeper(Protocol):
    """Where finished units are kept (:class:`experiments.shared.kept.Kept`)."""

    def read(self, name: str) -> tuple[bool, Any]:
        """``(True, result)`` if the unit ``name`` is kept, else ``(False, None)``."""

    def write(self, name: str, result: Any) -> None:
        """Keep the result of unit ``name``."""


@dataclass(frozen=True)
class Failure:
    """A unit that failed: its name and its traceback (or why its worker was lost)."""

    name: str
    trace: str


class UnitsFailedError(Exception):
    """Some units failed; the others finished (and were kept, where a keeper was given).

    The message gives each failure's traceback and the command that reruns that unit alone
    (``--unit``), then the command that runs every failed unit again. ``alone`` is the
    command line (without the program) the first is made of, by default this process's
    own (:func:`rerun_command`).
    """

    def __init__(self, label: str, failures: Sequence[Failure], total: int,
                 kept: bool = True, alone: Sequence[str] | None = None) -> None:
        self.label, self.failures, self.total, self.kept = label, list(failures), total, kept
        self.alone = None if alone is None else list(alone)
        blocks = [f"--- {label}: unit {failure.name} failed:\n{failure.trace.rstrip()}\n"
                  f"To rerun it alone: {rerun_command(failure.name, self.alone)}"
                  for failure in failures]
        names = ", ".join(failure.name for failure in failures)
        again = ("To run the failed ones alone (the others are kept)" if kept else
                 "Nothing was kept; to run them all again")
        super().__init__("\n".join(blocks) + f"\n{label}: {len(failures)} of {total} units "
                         f"failed ({names}); the others finished. {again}: {rerun_command()}")

    def rerun_alone_with(self, arguments: Sequence[str]) -> UnitsFailedError:
        """The same failures, each unit rerun alone by the command of ``arguments``."""
        return UnitsFailedError(self.label, self.failures, self.total, self.kept, arguments)


class UnknownUnitsError(ValueError):
    """A ``--unit`` name that is none of the units still to run (one line)."""


class UnitsLeftError(Exception):
    """The units named by ``--unit`` are done, others are still to run (one line)."""


UNIT = "--unit"


def add_scheduling_arguments(parser: argparse.ArgumentParser,
                             address_help: str | None = None) -> None:
    """Add ``--address`` and ``--unit`` (:func:`selected_units`) to an experiment's parser."""
    parser.add_argument("--address", default=None,
                        help=address_help or "the Ray cluster to run on, e.g. auto or "
                                             "ray://HOST:10001 (default: local processes)")
    parser.add_argument(UNIT, action="append", default=None, metavar="NAME",
                        help="run only this unit (repeatable) among those not kept yet, as "
                             "the progress lines and a failure name it; the others are "
                             "skipped, and the experiment goes on if none is missing")


@dataclass
class _Selection:
    """The units ``--unit`` named, and those of them done so far (run, or found kept)."""

    names: tuple[str, ...]
    ran: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def pending(self) -> list[str]:
        """The names neither run nor found kept yet."""
        return [name for name in self.names if name not in (*self.ran, *self.kept)]


_selection: _Selection | None = None


@contextlib.contextmanager
def selected_units(names: Sequence[str] | None) -> Iterator[None]:
    """Within it, :func:`run_units` runs only the units ``names`` (``--unit``).

    ``None`` or no name: every unit, as outside it. A name found kept counts as done.
    """
    global _selection
    before = _selection
    _selection = _Selection(tuple(dict.fromkeys(names))) if names else None
    try:
        yield
    finally:
        _selection = before


@contextlib.contextmanager
def scheduling(args: argparse.Namespace, prog: str) -> Iterator[None]:
    """Run an experiment's command line with its ``--unit`` selection.

    A failure, units left by ``--unit``, an unknown ``--unit`` name: ``prog: error: ...``
    on stderr and exit 1 (2 for the unknown name), no traceback of the driver.
    """
    with selected_units(args.unit):
        try:
            yield
        except (UnitsFailedError, UnitsLeftError, UnknownUnitsError) as error:
            print(f"{prog}: error: {error}", file=sys.stderr, flush=True)
            raise SystemExit(2 if isinstance(error, UnknownUnitsError) else 1) from None


def _without_units(arguments: Sequence[str]) -> list[str]:
    """``arguments`` without their ``--unit NAME`` and ``--unit=NAME``."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == UNIT:
            skip = True
        elif not argument.startswith(f"{UNIT}="):
            kept.append(argument)
    return kept


def rerun_command(unit: str | None = None, arguments: Sequence[str] | None = None) -> str:
    """The command that started this process, shell-quoted.

    With the finished units kept, it runs only what is missing. With ``unit``: the command
    that runs that unit alone, its own ``--unit`` options replaced by ``--unit unit``.
    ``arguments``: these instead of this process's (``sys.argv[1:]``).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    module = spec.name.removesuffix(".__main__") if spec is not None else None
    start = f"python -m {module}" if module else f"python {shlex.quote(sys.argv[0])}"
    words = list(sys.argv[1:] if arguments is None else arguments)
    if unit is not None:
        words = [*_without_units(words), UNIT, unit]
    return " ".join([start, *map(shlex.quote, words)])


def _select(label: str, names: Sequence[str], todo: list[int], kept: Sequence[int]
            ) -> list[int]:
    """Of the units ``todo`` (positions in ``names``), those ``--unit`` named.

    Raises:
        UnknownUnitsError: A name still to run is none of ``todo`` (nor kept here).
        UnitsLeftError: Every name is done (in an earlier call) and ``todo`` is not empty.
    """
    assert _selection is not None
    here = {names[index] for index in kept}
    _selection.kept += [name for name in _selection.pending() if name in here]
    if not todo:
        return []
    missing = {names[index]: index for index in todo}
    pending = _selection.pending()
    unknown = [name for name in pending if name not in missing]
    if unknown:
        few = ", ".join(repr(name) for name in list(missing)[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise UnknownUnitsError(
            f"{UNIT} {unknown[0]!r}: not among the {len(missing)} units {label} has still "
            f"to run ({few}{more}){suggestion(unknown[0], missing)}")
    if not pending:
        _units_left(label, len(todo), len(names))
    return [index for index in todo if names[index] in pending]


def _units_left(label: str, left: int, total: int) -> None:
    """Stop: the ``--unit`` units are done, ``left`` of the ``total`` units are not."""
    assert _selection is not None
    done = [f"ran {', '.join(_selection.ran)}"] if _selection.ran else []
    done += [f"{', '.join(_selection.kept)} already kept"] if _selection.kept else []
    without = rerun_command(arguments=_without_units(sys.argv[1:]))
    raise UnitsLeftError(f"{label}: {UNIT} {'; '.join(done)}; {left} of {total} units are "
                         f"still to run, which the command without {UNIT} runs: {without}")


def run_unit(function: Callable[[Any], Any], unit: Any) -> tuple[bool, Any]:
    """In a worker: ``(True, function(unit))``, or ``(False, its traceback)`` if it raised.

    The traceback travels as text: an exception need not pickle, and the driver prints
    it as the worker saw it.
    """
    try:  # one thread per worker (WORKER_ENV): the units that train set torch's too
        return True, function(unit)
    except Exception:  # reported by the driver, the other units go on
        return False, traceback.format_exc()


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes for independent training runs, each with single-threaded BLAS.

    ``spawn``, not ``fork``: forking a process that has already used torch can deadlock.
    """
    single_threaded_workers()  # the workers read these when they import numpy/torch
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


#: What a backend yields as each unit ends: its position in the list it was given, and
#: :func:`run_unit`'s answer.
Outcome = tuple[int, tuple[bool, Any]]


def _in_process(function: Callable[[Any], Any], units: Sequence[Any]) -> Iterator[Outcome]:
    for position, unit in enumerate(units):
        yield position, run_unit(function, unit)


def _local(function: Callable[[Any], Any], units: Sequence[Any], jobs: int,
           say: Callable[[str], None]) -> Iterator[Outcome]:
    """Units in ``jobs`` spawned processes.

    A pool broken by a dead worker is started again for the units it lost, up to
    :data:`RETRIES` times.
    """
    todo, lost = list(range(len(units))), 0
    while todo:
        broken: list[int] = []
        with spawn_pool(min(jobs, len(todo))) as pool:
            futures = {pool.submit(run_unit, function, units[position]): position
                       for position in todo}
            for future in as_completed(futures):
                try:
                    answer = future.result()
                except BrokenProcessPool:  # a worker died: every unit not finished is lost
                    broken.append(futures[future])
                    continue
                yield futures[future], answer
        lost += bool(broken)
        if broken and lost > RETRIES:
            for position in broken:
                yield position, (False, f"its worker process died {lost} times (killed, or "
                                        "out of memory)")
            return
        if broken:
            say(f"a worker process died: {len(broken)} unit(s) not finished run again")
        todo = sorted(broken)


def _ray(function: Callable[[Any], Any], units: Sequence[Any], address: str, jobs: int,
         num_cpus: float) -> Iterator[Outcome]:
    """Units as Ray tasks of ``num_cpus`` CPUs on the cluster at ``address``."""
    import ray

    if not ray.is_initialized():  # one connection for every experiment of the command
        connect(address, jobs)
    task = ray.remote(run_unit).options(num_cpus=num_cpus, max_retries=RETRIES)
    pending = {task.remote(function, unit): position for position, unit in enumerate(units)}
    try:
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            position = pending.pop(ready)
            try:
                answer = ray.get(ready)
            except ray.exceptions.RayError as error:  # a worker or node lost RETRIES times
                answer = (False, f"{type(error).__name__}: {error}")
            yield position, answer
    finally:
        for ref in pending:  # interrupted: nothing keeps running on the cluster
            ray.cancel(ref, force=True)


def run_units(function: Callable[[Any], Any], units: Sequence[Any], *, jobs: int = 1,
              address: str | None = None, num_cpus: float = 1,
              done: Callable[[int, Any], None] | None = None,
              describe: Callable[[Any], str] = str, keeper: Keeper | None = None,
              label: str = "units", log: Callable[[str], None] | None = None) -> list[Any]:
    """``function`` of every unit, in the units' order (the module docstring).

    Args:
        function: A module-level function of one unit (it is pickled by name).
        units: The units, each picklable.
        jobs: Local worker processes (``address=None``); a one-machine Ray cluster's
            CPUs (``address="local"``).
        address: The Ray cluster to run on, or ``None`` for this machine.
        num_cpus: The CPUs each Ray task declares.
        done: ``done(index, result)`` as each unit's result arrives (kept ones too).
        describe: A unit's name in the progress lines, the failures and the keeper
            (unique among the units).
        keeper: Where finished units are kept and read back from.
        label: What the progress lines begin with (the experiment's name).
        log: The progress printer (default: none).

    Raises:
        UnitsFailedError: After every other unit finished, if any unit failed.
        UnknownUnitsError: Before anything runs, a ``--unit`` name that is none of the
            units still to run (:func:`selected_units`).
        UnitsLeftError: After the units ``--unit`` named finished, if others are missing.
    """
    say = log or (lambda _message: None)
    names = [describe(unit) for unit in units]
    if keeper is not None and len(set(names)) < len(names):
        raise ValueError(f"{label}: two units share a name, so they cannot be kept apart: "
                         f"{sorted(n for n in names if names.count(n) > 1)[0]!r}")
    results: list[Any] = [None] * len(units)
    todo, kept = [], []
    for index, name in enumerate(names):
        found, result = keeper.read(name) if keeper is not None else (False, None)
        if found:
            results[index] = result
            kept.append(index)
        else:
            todo.append(index)
    missing = len(todo)
    if _selection is not None:  # --unit: before done() is called, a refusal runs nothing
        todo = _select(label, names, todo, kept)
    if done is not None:
        for index in kept:
            done(index, results[index])
    where = (f"on the Ray cluster at {address}" if address is not None else
             f"in {min(jobs, len(todo))} process(es)" if jobs > 1 and len(todo) > 1 else
             "in this process")
    named = f" ({UNIT}; {missing - len(todo)} other(s) not run)" if _selection else ""
    say(f"{label}: {len(kept)} of {len(units)} units kept, {len(todo)} to run {where}{named}")
    batch = [units[index] for index in todo]
    outcomes = (_ray(function, batch, address, jobs, num_cpus) if address is not None else
                _local(function, batch, jobs, lambda text: say(f"{label}: {text}"))
                if jobs > 1 and len(batch) > 1 else
                _in_process(function, batch))
    failures, start, finished = [], time.perf_counter(), 0
    for position, (ok, value) in outcomes:
        index, finished = todo[position], finished + 1
        if not ok:
            failures.append(Failure(names[index], value))
            say(f"{label}: unit {names[index]} failed ({finished}/{len(todo)})")
            continue
        results[index] = value
        if keeper is not None:
            keeper.write(names[index], value)
        if _selection is not None:
            _selection.ran.append(names[index])
        if done is not None:
            done(index, value)
        elapsed = time.perf_counter() - start
        left = elapsed / finished * (len(todo) - finished)
        say(f"{label}: {names[index]} done ({finished}/{len(todo)}, {elapsed:.0f} s, "
            f"about {left:.0f} s left)")
    if failures:
        raise UnitsFailedError(label, failures, len(units), kept=keeper is not None)
    if len(todo) < missing:  # --unit left some
        _units_left(label, missing - len(todo), len(units))
    return results
