"""Progress bars for runs longer than a few seconds: one home, one behaviour.

Bars are tqdm's, written to stderr (stdout stays the command's result), and drawn only
when asked for *and* stderr is a terminal: tqdm's ``disable=None`` turns a bar off when
its stream is not a TTY, so logs, CI and pytest (which captures stderr) get no bar and
no carriage-return noise. Library functions take ``progress=False`` by default, as SB3's
``learn(progress_bar=False)`` does, so worker processes of an experiment draw nothing;
the command line and the examples turn it on (``--no-progress``/``--quiet`` off).
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm


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
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True, disable=None if progress else True)
