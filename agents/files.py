"""Atomic writes: a result file or checkpoint is either the old one or the new one, never half.

Everything is written to a temporary sibling (same directory, so the same file system)
and moved into place with ``os.replace``; on any error the temporary is removed and the
old file is untouched. Also here: the check that an output path can be written, run
before long work.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path


def write_file_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` to fill a temporary file, then move it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_file_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_files_atomic(directory: str | Path, files: Mapping[str, str | bytes]) -> list[Path]:
    """Write already rendered files (name -> text or bytes) into ``directory``, each atomically.

    Reports render every table and figure first and call this last, so a rendering error
    leaves the previous files untouched. Returns the paths written.
    """
    directory = Path(directory)
    written = []
    for name, content in files.items():
        if isinstance(content, str):
            written.append(write_text_atomic(directory / name, content))
        else:
            written.append(write_file_atomic(directory / name,
                                             lambda tmp, data=content: tmp.write_bytes(data)))
    return written


def write_directory_atomic(directory: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_dir)`` to fill a temporary directory, then swap it in for ``directory``.

    ``directory`` is at every moment either absent, the previous complete version or a
    new complete version, also when several processes save to it at once (the last swap
    wins). On Linux the swap is ``renameat2(RENAME_EXCHANGE)``, one atomic step, so a
    reader never sees ``directory`` missing; elsewhere (or on a file system without it)
    the current version is first renamed aside to a unique backup name, so a reader may
    briefly find no directory. Either way every rename moves a whole, complete directory:
    no two savers' files are ever mixed, and no fixed backup name exists that a crashed
    save could leave behind to block the next one. No lock file is needed.

    Args:
        directory: The directory to create or replace.
        write: Fills the temporary directory (same parent, so the same file system).

    Returns:
        ``directory``.

    Raises:
        ValueError: ``directory`` exists and is not a directory.
        OSError: Writing or renaming failed; the previous version is then in place.
    """
    directory = Path(directory)
    if not is_directory_or_absent(directory):
        raise ValueError(f"{directory} exists and is not a directory")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        write(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        for child in tmp.iterdir():
            os.chmod(child, 0o644)
        _swap_in(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def is_directory_or_absent(path: Path) -> bool:
    """Whether ``path`` is a directory or nothing, from one ``stat``.

    ``path.exists() and not path.is_dir()`` would be two looks, and a concurrent save
    may move the directory away between them.
    """
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True


#: How often a save retries when other savers keep replacing the directory under it.
_SWAP_ATTEMPTS = 1000
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _swap_in(new: Path, directory: Path) -> None:
    """Move the complete directory ``new`` to ``directory``; ``new`` is gone afterwards."""
    backup: Path | None = None  # the version this save moved aside (fallback path only)
    try:
        for _ in range(_SWAP_ATTEMPTS):
            try:
                # Succeeds when nothing, or an empty directory, is at ``directory``.
                os.rename(new, directory)
                break
            except OSError as error:
                # Linux refuses to rename over a non-empty directory; others are real errors.
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            if _exchange(new, directory):
                shutil.rmtree(new, ignore_errors=True)  # ``new`` now holds the old version
                break
            if backup is not None:  # an older version: another saver's replaced it since
                shutil.rmtree(backup, ignore_errors=True)
            # Rename the current version aside, then retry; if another saver puts its
            # version in between, the next round moves that one aside too.
            backup = _move_aside(directory)
        else:
            raise OSError(errno.EBUSY, f"other processes kept replacing {directory}; gave "
                          f"up after {_SWAP_ATTEMPTS} attempts")
    except BaseException:
        if backup is not None and not directory.exists():
            with contextlib.suppress(OSError):  # another saver may have won the race
                os.rename(backup, directory)  # put the previous version back
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)  # best effort: the new version is in


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the paths ``a`` and ``b``; ``False`` where the system cannot."""
    rename = _renameat2()
    if rename is None:
        return False
    if rename(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.ENOENT and a.exists():
        return False  # ``b`` vanished (another saver moved it aside): rename again
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # this file system has no exchange: fall back to moving aside
    raise OSError(code, os.strerror(code), str(a), None, str(b))


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """The C library's ``renameat2``, or ``None`` off Linux (or with an older C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _move_aside(directory: Path) -> Path | None:
    """Rename ``directory`` to a fresh, unique backup name; ``None`` if it was already gone."""
    backup = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.old-"))
    try:
        os.rename(directory, backup)  # POSIX lets a directory replace an empty one
    except BaseException as error:
        os.rmdir(backup)
        if isinstance(error, FileNotFoundError):
            return None
        raise
    return backup


# ----------------------------------------------------------------- checks and reads
def check_creatable(path: str | Path) -> Path:
    """Raise ``ValueError`` unless ``path`` can be written: its parent is or can be made.

    Called before long work (training, pretraining) so that a bad output path fails in a
    second, not after the work is done. The nearest existing ancestor of ``path`` must be a
    directory this process can create files in (probed by creating and removing one).

    Returns:
        ``path``.
    """
    path = Path(path)
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{path}: cannot be created, {ancestor} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=ancestor, prefix=".cost-envs-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{path}: cannot write in {ancestor} "
                         f"({error.strerror or error})") from None
    return path
