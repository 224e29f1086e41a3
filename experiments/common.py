"""Plumbing shared by the experiments: worker pools, figures, the machine and output files.

* :func:`spawn_pool`: worker processes for independent training runs;
* :func:`figure_png`: a matplotlib figure as PNG bytes (render first, write later);
* :func:`machine`: a one-line description of the machine, for wall-time records;
* :func:`check_writable`: an output directory checked before any work starts;
* :func:`write_report`: the files of one report written all or nothing.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import platform
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes for independent training runs, each with single-threaded BLAS.

    ``spawn``, not ``fork``: forking a process that has already used torch can deadlock.
    """
    # The workers read these when they import numpy/torch.
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def figure_png(figure: object, dpi: int = 120) -> bytes:
    """A matplotlib figure rendered to PNG bytes (render first, write with the rest)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=dpi, format="png")  # type: ignore[attr-defined]
    return buffer.getvalue()


def machine() -> str:
    """The machine in one line: system, architecture, logical CPUs, Python version."""
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs, "
            f"Python {platform.python_version()}")


def check_writable(directory: str | Path) -> Path:
    """Create ``directory`` if needed and prove it writable by writing a probe file.

    Called before any work starts, so a run of minutes never ends on an unwritable
    output directory.

    Returns:
        The directory as a ``Path``.

    Raises:
        ValueError: One line naming the directory and why it cannot be written.
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        raise ValueError(f"output directory {directory} is not writable: {reason}") from None
    return directory


def write_report(directory: str | Path, files: Mapping[str, str | bytes]) -> list[Path]:
    """Write a report's already rendered files (name -> text or bytes) all or nothing.

    Three phases, all in ``directory`` (one file system, so renames are atomic):

    1. every file is written to a hidden temporary (``.<name>.<random>``);
    2. every existing file about to be replaced gets a hidden backup (a hard link, or a
       copy where links are not supported);
    3. the temporaries are moved over the files with ``os.replace``.

    An exception in any phase (a full disk, Ctrl-C, a failing rename) removes the
    temporaries and, if some files were already replaced, moves their backups back and
    deletes files that did not exist before, so the directory holds exactly the old
    files. The remaining window: a process killed outright (``SIGKILL``, power loss)
    during phase 3, a few renames long, leaves some files new and some old, plus the
    hidden temporaries and backups, which a later run does not read.

    Text is written as UTF-8; files get mode 0644 (results are meant to be shared).

    Args:
        directory: The output directory (created if needed).
        files: File name (no directory part) -> content.

    Returns:
        The paths written, in the order of ``files``.

    Raises:
        ValueError: If a name is not a plain file name.
    """
    directory = Path(directory)
    for name in files:
        if name in ("", ".", "..") or Path(name).name != name:
            raise ValueError(f"write_report: expected plain file names, got {name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    staged: dict[Path, Path] = {}
    backups: dict[Path, Path | None] = {}
    replaced: list[Path] = []
    try:
        for name, content in files.items():
            staged[directory / name] = _stage(directory, name, content)
        for target in staged:
            backups[target] = _backup(target)
        for target, temporary in staged.items():
            os.replace(temporary, target)
            replaced.append(target)
    except BaseException:
        for target in reversed(replaced):  # put the previous version back
            with contextlib.suppress(OSError):
                backup = backups.get(target)
                if backup is None:
                    target.unlink()
                else:
                    os.replace(backup, target)
        for leftover in [*staged.values(), *(b for b in backups.values() if b is not None)]:
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
        raise
    for backup in backups.values():
        if backup is not None:
            with contextlib.suppress(OSError):  # the report is in place; cleanup is best effort
                backup.unlink()
    return list(staged)


def _stage(directory: Path, name: str, content: str | bytes) -> Path:
    """Write ``content`` to a new hidden temporary beside ``directory / name``."""
    fd, path = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    temporary = Path(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(temporary, 0o644)  # mkstemp makes it 0600
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def _backup(target: Path) -> Path | None:
    """A hidden copy of ``target``'s current content, or ``None`` if it has none yet."""
    if not target.is_file():
        return None
    backup = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
    try:
        os.link(target, backup)  # same inode: instant, and the old bytes stay reachable
    except OSError:
        shutil.copy2(target, backup)
    return backup
