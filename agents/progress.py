"""Progress bars for runs longer than a few seconds: one home, one behaviour.

Bars are tqdm's, written to stderr (stdout stays the command's result), and drawn only
when asked for *and* stderr is a terminal: tqdm's ``disable=None`` turns a bar off when
its stream is not a TTY, so logs, CI and pytest (which captures stderr) get no bar and
no carriage-return noise. Library functions take ``progress=False`` by default, as SB3's
``learn(progress_bar=False)`` does, so worker processes of an experiment draw nothing;
the command line and the examples turn it on (``--no-progress``/``--quiet`` off).
Without tqdm (an install without the ``agents`` extra, which evaluates the baselines)
the bar is a silent no-op.
"""

from __future__ import annotations

import sys
from typing import Any


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
