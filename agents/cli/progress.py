"""The commands' progress lines: on stderr, timed, and never silent for long.

stdout is a command's result, so progress goes to stderr, one line per step
(``cost-envs evaluate: [  12 s] best-rule: fitting on 200 training tasks``). Episode
bars are :func:`agents.progress.progress_bar`'s, drawn only on a terminal. A step that
draws no bar (fitting best-rule takes tens of seconds; episodes when stderr is a log
file) repeats its line every :data:`HEARTBEAT_SECONDS` with the time it has run, so a
log never falls silent while work goes on. ``--no-progress`` turns all of it off.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Seconds of silence after which a running step says that it still runs.
HEARTBEAT_SECONDS = 10.0


class Progress:
    """Progress lines of one command; call it with a message, close it at the end.

    Use it as a context manager: a background thread repeats the current step's line
    every ``every`` seconds of silence, and stops when the block ends.

    Args:
        command: The command's name in each line (``"cost-envs evaluate"``).
        enabled: ``False`` (``--no-progress``) prints nothing.
        every: Seconds between the repeats (default :data:`HEARTBEAT_SECONDS`).
    """

    def __init__(self, command: str, enabled: bool = True, every: float | None = None
                 ) -> None:
        self.command = command
        self.enabled = enabled
        self.every = HEARTBEAT_SECONDS if every is None else every
        self._start = self._said = time.perf_counter()
        self._step: str | None = None  # the line a heartbeat repeats (None: no repeat)
        self._step_start = self._start
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, message: str, bar: bool = False) -> None:
        """Print ``message`` as the current step.

        Args:
            message: What starts now.
            bar: The step draws a progress bar (:mod:`agents.progress`); on a terminal
                the bar shows that it runs, so the line is not repeated over it.
        """
        now = time.perf_counter()
        with self._lock:
            self._step = None if bar and _is_terminal() else message
            self._step_start = now
            self._print(message, now)

    def done(self) -> None:
        """The current step has ended: nothing is repeated until the next one."""
        with self._lock:
            self._step = None

    @contextmanager
    def running(self, message: str) -> Iterator[None]:
        """Say ``message``; the step ends with the block."""
        self(message)
        try:
            yield
        finally:
            self.done()

    def __enter__(self) -> Progress:
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="progress heartbeat",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _print(self, message: str, now: float) -> None:
        self._said = now
        if self.enabled:
            print(f"{self.command}: [{now - self._start:4.0f} s] {message}", file=sys.stderr,
                  flush=True)

    def _beat(self) -> None:
        while not self._stop.wait(min(self.every, 1.0)):
            now = time.perf_counter()
            with self._lock:
                if self._step is not None and now - self._said >= self.every:
                    try:
                        self._print(f"{self._step} (still running, "
                                    f"{now - self._step_start:.0f} s)", now)
                    except (OSError, ValueError):  # stderr closed: the command says so
                        return


def _is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False
