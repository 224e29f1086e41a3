"""Start the stand-in upstream and the server as real processes (tests, benchmarks, demos)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path


def wait_until_up(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Return once ``GET url`` answers 200; raise if the process died or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = ""
            if process.stderr is not None:
                process.stderr.seek(0)
                err = process.stderr.read().decode(errors="replace")
            raise RuntimeError(f"{url}: the process exited with {process.returncode}: "
                               f"{err.strip()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url}: not up after {timeout:g} s")


@dataclass(frozen=True)
class Launch:
    """A ``python -m ...args`` process to start, and the URL that answers 200 once it is up.

    ``timeout``: seconds it may take to answer ``health_url`` (an allocator's server
    imports torch first).
    """

    args: Sequence[str]
    health_url: str
    env: dict[str, str] | None = None
    cwd: str | Path | None = None
    timeout: float = 60.0


@contextmanager
def launched(args: Sequence[str], health_url: str, env: dict[str, str] | None = None,
             cwd: str | Path | None = None,
             timeout: float = 60.0) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m ...args`` running until the block ends (then terminated, else killed)."""
    with launched_together(Launch(args, health_url, env, cwd, timeout)) as (process,):
        yield process


@contextmanager
def launched_together(*launches: Launch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """All ``launches`` running until the block ends, stopped in reverse order.

    All are started before any is waited for, so their start-ups (an interpreter and its
    imports, about a second each) overlap: a server can start before the upstream it calls
    answers, since it calls it only per request.
    """
    with ExitStack() as stack:
        processes = [stack.enter_context(_running(launch)) for launch in launches]
        for launch, process in zip(launches, processes, strict=True):
            wait_until_up(launch.health_url, process, launch.timeout)
        yield processes


@contextmanager
def _running(launch: Launch) -> Iterator[subprocess.Popen[bytes]]:
    """The process of ``launch``, started (not yet waited for); terminated, else killed, after."""
    environment = {**os.environ, **(launch.env or {})}
    # stderr to a file, not a pipe: a pipe nobody reads fills up (64 KiB of logged faults)
    # and then blocks the process
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([sys.executable, *launch.args], env=environment,
                                   cwd=launch.cwd, stdout=subprocess.DEVNULL, stderr=log)
        process.stderr = log  # read back by wait_until_up
        try:
            yield process
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
