"""Progress bars for runs longer than a few seconds: one home, one behaviour.

Bars are tqdm's, written to stderr (stdout stays the command's result), and drawn only
when asked for *and* stderr is a terminal: tqdm's ``disable=None`` turns a bar off when
its stream is not a TTY, so logs, CI and pytest (which captures stderr) get no bar and
no carriage-return noise. Library functions take ``progress=False`` by default, as SB3's
``learn(progress_bar=False)`` does, so worker processes of an experiment draw nothing;
the command line and the examples turn it on (``--no-progress``/``--quiet`` off).
Without tqdm (an install without the ``agents`` extra, which evaluates the baselines)
the bar is a silent no-op.

SB3's own ``learn(progress_bar=True)`` is not used: its bar is rich's, drawn on stdout
whatever stdout is, so ``cost-envs train ... > log`` wrote bar frames into the log.
:func:`learn_progress` is its replacement, an SB3 callback: this module's bar on a
terminal, and otherwise a plain line on stderr at every tenth of the run.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any, TextIO

#: Plain lines off a terminal: one each time this share of the run is done.
LINE_EVERY = 0.1


class _NoBar:
    """What :func:`progress_bar` returns without tqdm: the same calls, nothing drawn."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to close."""


def progress_bar(total: int, desc: str, progress: bool = True, unit: str = "it") -> Any:
    """A tqdm bar of ``total`` steps on stderr; a silent no-op bar unless it can be seen.

    Args:
        total: Steps the bar counts to.
        desc: What is running, shown before the bar.
        progress: ``False`` disables it outright; ``True`` shows it when stderr is a
            terminal.
        unit: What one step is (``"episode"``, ``"epoch"``, ...).

    Returns:
        A ``tqdm`` object: use it as a context manager and call ``update(n)``.
    """
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True, disable=None if progress else True)


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr) is a terminal; ``False`` if closed or replaced."""
    try:
        return bool((sys.stderr if stream is None else stream).isatty())
    except (AttributeError, ValueError):
        return False


def learn_progress(desc: str, progress: bool = True, stream: TextIO | None = None) -> Any:
    """An SB3 callback that shows how far ``learn`` is, or ``None`` when ``progress`` is off.

    On a terminal (``stream``, default stderr) it draws :func:`progress_bar`'s bar of the
    run's steps; elsewhere it writes a plain line to ``stream`` each time a tenth of the
    run is done (``desc: 2,048/20,480 steps (10%), 5 s``), so a log gets a few lines and
    no bar frames. Pass it in ``learn(callback=...)`` instead of ``progress_bar=True``.

    Args:
        desc: What is training, at the start of the bar or of each line.
        progress: ``False`` returns ``None`` (nothing to add to the callbacks).
        stream: Where to draw or write (default ``sys.stderr`` at training start).
    """
    if not progress:
        return None
    return _callback_class()(desc, stream)


@functools.cache
def _callback_class() -> type:
    """The callback's class, built on first use: SB3 (and torch) load only then."""
    from stable_baselines3.common.callbacks import BaseCallback

    class LearnProgress(BaseCallback):
        """See :func:`learn_progress`."""

        def __init__(self, desc: str, stream: TextIO | None) -> None:
            super().__init__()
            self.desc = desc
            self.stream = stream
            self.total = 0
            self.done = 0
            self.bar: Any = None
            self.next_line = 0.0
            self.start = 0.0

        def _on_training_start(self) -> None:
            stream = sys.stderr if self.stream is None else self.stream
            self.stream = stream
            self.total = max(1, int(self.locals["total_timesteps"]) - self.model.num_timesteps)
            self.done = 0
            self.start = time.perf_counter()
            self.next_line = LINE_EVERY
            self.bar = (progress_bar(self.total, self.desc, True, "step")
                        if is_terminal(stream) else None)

        def _on_step(self) -> bool:
            n = self.training_env.num_envs
            self.done += n
            if self.bar is not None:
                self.bar.update(n)
            elif self.done / self.total >= self.next_line - 1e-9:
                share = min(1.0, self.done / self.total)
                print(f"{self.desc}: {min(self.done, self.total):,}/{self.total:,} steps "
                      f"({share:.0%}), {time.perf_counter() - self.start:.0f} s",
                      file=self.stream, flush=True)
                while self.next_line <= share + 1e-9:
                    self.next_line += LINE_EVERY
            return True

        def _on_training_end(self) -> None:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return LearnProgress
