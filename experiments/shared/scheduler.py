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
:class:`UnitsFailedError` reports each failure with its traceback and the command that runs
what is missing, which is the failed units alone.
"""

from __future__ import annotations

import multiprocessing
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

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
    """Some units failed; the others finished (and were kept, where a keeper was given)."""

    def __init__(self, label: str, failures: Sequence[Failure], total: int,
                 kept: bool = True) -> None:
        self.failures = list(failures)
        blocks = [f"--- {label}: unit {failure.name} failed:\n{failure.trace.rstrip()}"
                  for failure in failures]
        names = ", ".join(failure.name for failure in failures)
        again = ("To run the failed ones alone (the others are kept)" if kept else
                 "Nothing was kept; to run them all again")
        super().__init__("\n".join(blocks) + f"\n{label}: {len(failures)} of {total} units "
                         f"failed ({names}); the others finished. {again}: {rerun_command()}")


def rerun_command() -> str:
    """The command that started this process.

    With the finished units kept, it runs only what is missing.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    module = spec.name.removesuffix(".__main__") if spec is not None else None
    start = f"python -m {module}" if module else f"python {shlex.quote(sys.argv[0])}"
    return " ".join([start, *map(shlex.quote, sys.argv[1:])])


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
    """
    say = log or (lambda _message: None)
    names = [describe(unit) for unit in units]
    if keeper is not None and len(set(names)) < len(names):
        raise ValueError(f"{label}: two units share a name, so they cannot be kept apart: "
                         f"{sorted(n for n in names if names.count(n) > 1)[0]!r}")
    results: list[Any] = [None] * len(units)
    todo = []
    for index, name in enumerate(names):
        found, result = keeper.read(name) if keeper is not None else (False, None)
        if found:
            results[index] = result
            if done is not None:
                done(index, result)
        else:
            todo.append(index)
    where = (f"on the Ray cluster at {address}" if address is not None else
             f"in {min(jobs, len(todo))} process(es)" if jobs > 1 and len(todo) > 1 else
             "in this process")
    say(f"{label}: {len(units) - len(todo)} of {len(units)} units kept, {len(todo)} to run "
        f"{where}")
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
        if done is not None:
            done(index, value)
        elapsed = time.perf_counter() - start
        left = elapsed / finished * (len(todo) - finished)
        say(f"{label}: {names[index]} done ({finished}/{len(todo)}, {elapsed:.0f} s, "
            f"about {left:.0f} s left)")
    if failures:
        raise UnitsFailedError(label, failures, len(units), kept=keeper is not None)
    return results
