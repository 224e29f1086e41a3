"""Atomic writes: results and checkpoints are either the old ones or the new ones, never half.

* :func:`write_files_atomic`: a set of files (a report's tables and figures, a base's
  weights and config) replaced all or nothing;
* :func:`write_directory_atomic`: a checkpoint directory swapped in whole, safe when
  several processes save to it at once;
* :func:`check_creatable`: the one check that an output path can be written, run before
  long work.

Everything is written beside its destination (the same file system) and moved into place
with ``os.replace`` / ``rename``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


def write_files_atomic(directory: str | Path, files: Mapping[str, str | bytes]) -> list[Path]:
    """Write already rendered files (name -> text or bytes) into ``directory``, all or nothing.

    Reports render every table and figure first and call this last; a base encoder's
    weights and config are written as one pair the same way.

    Three phases, all in ``directory`` (one file system, so renames are atomic):

    1. every file is written to a hidden temporary (``.<name>.<random>``);
    2. every existing file about to be replaced gets a hidden backup (a hard link, or a
       copy where links are not supported);
    3. the temporaries are moved over the files with ``os.replace``.

    An exception in any phase (a full disk, Ctrl-C, a failing rename) removes the
    temporaries and, if some files were already replaced, moves their backups back and
    deletes files that did not exist before, so the directory holds exactly the old
    files. Writers of the same directory take turns (an exclusive ``flock`` on it, where
    the file system has one: not on Windows or NFS), so concurrent saves of a set never
    leave files of two saves mixed: the last complete set wins. The remaining window: a
    process killed outright (``SIGKILL``, power loss)
    during phase 3, a few renames long, leaves some files new and some old, plus hidden
    temporaries and backups, which the next save of those names removes
    (:func:`remove_stale`: their names carry the dead writer's process id).

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
            raise ValueError(f"write_files_atomic: expected plain file names, got {name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    with _exclusive(directory):  # one writer's set at a time: never two savers' files mixed
        for name in files:
            remove_stale(directory, name)
        return _write_locked(directory, files)


def _write_locked(directory: Path, files: Mapping[str, str | bytes]) -> list[Path]:
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
    fd, path = tempfile.mkstemp(dir=directory, prefix=f".{name}.{_writer()}-", suffix=".tmp")
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
    backup = target.with_name(f".{target.name}.old-{_writer()}-{uuid.uuid4().hex[:12]}")
    try:
        os.link(target, backup)  # same inode: instant, and the old bytes stay reachable
    except OSError:
        shutil.copy2(target, backup)
    return backup


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
    # a save killed mid-swap may have left the last version only as its backup: put it
    # back, then remove what killed savers left (full copies each)
    restore_stale_backup(directory)
    remove_stale(directory.parent, directory.name)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent,
                                prefix=f".{directory.name}.{_writer()}-"))
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
    backup = Path(tempfile.mkdtemp(dir=directory.parent,
                                   prefix=f".{directory.name}.old-{_writer()}-"))
    try:
        os.rename(directory, backup)  # POSIX lets a directory replace an empty one
    except BaseException as error:
        os.rmdir(backup)
        if isinstance(error, FileNotFoundError):
            return None
        raise
    return backup


# ------------------------------------------------------ turns and what dead savers left
@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` itself while writing (no lock file).

    Where there is none to take (Windows; NFS and other file systems that refuse
    ``flock`` on a directory; a directory this process cannot open), the save goes on
    without taking turns: atomic file by file, as before, but not as a set.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # ENOLCK, EOPNOTSUPP, ...: no flock here
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@functools.cache
def _host() -> str:
    """A short hash of this host's name: temporaries of other hosts are not judged here."""
    import hashlib
    import socket

    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _writer() -> str:
    """This process's tag in temporary names (the pid is read each time: forks differ)."""
    return f"{_host()}-{os.getpid()}"


#: Age under which a dead writer's leftover is kept anyway (a save in progress on another
#: host or pid namespace that shares the directory and this host's name).
STALE_AFTER_SECONDS = 60.0


def remove_stale(directory: Path, name: str) -> list[Path]:
    """Remove the hidden temporaries and backups of ``name`` whose writer is dead.

    Every temporary and backup a save makes is named after its writer: a hash of the host
    and the process id (``.<name>.<host>-<pid>-<random>[.tmp]``, backups
    ``.<name>.old-<host>-<pid>-<random>``). One made on this host by a process that no
    longer exists, more than :data:`STALE_AFTER_SECONDS` ago, was left by a save killed
    outright (``SIGKILL``, power loss) and is deleted (a full model copy each,
    otherwise). Other hosts' files (a directory shared over NFS), live processes' and any
    name this module does not make are left alone. Returns what was removed.
    """
    host = _host()
    pattern = re.compile(rf"^\.{re.escape(name)}\.(?:old-)?{host}-(\d+)-"
                         r"(?:[a-z0-9_]{8}(?:\.tmp)?|[0-9a-f]{12})$")
    removed = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            if now - entry.lstat().st_mtime < STALE_AFTER_SECONDS:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
    return removed


def restore_stale_backup(directory: Path) -> Path | None:
    """Put back the newest backup a killed save left when ``directory`` itself is gone.

    A directory save killed between moving the old version aside and moving the new one
    in leaves no ``directory``, only ``.<name>.old-...``: the last complete version.
    """
    if directory.exists():
        return None
    host = _host()
    pattern = re.compile(rf"^\.{re.escape(directory.name)}\.old-{host}-(\d+)-[a-z0-9_]{{8}}$")
    try:
        backups = [entry for entry in directory.parent.iterdir()
                   if (match := pattern.match(entry.name)) and entry.is_dir()
                   and not _alive(int(match.group(1)))]
    except OSError:
        return None
    for backup in sorted(backups, key=lambda entry: entry.stat().st_mtime, reverse=True):
        with contextlib.suppress(OSError):
            os.rename(backup, directory)
            return directory
    return None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's process, or not ours to judge: keep its files
    return True


# ------------------------------------------------------------------------- checks
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

