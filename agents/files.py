"""Atomic writes: results, routers and checkpoints are either the old ones or the new ones.

* :func:`write_files_atomic`: a set of files that must agree (a router's JSON and its
  weights, a report's tables and figures, a base's weights and config) replaced all or
  nothing, also when the saving process is killed outright (``kill -9``, power loss) at
  any instruction;
* :func:`reading_files` and :func:`read_files`: how such a set is read, never mixed;
* :func:`write_directory_atomic`: a checkpoint directory swapped in whole, safe when
  several processes save to it at once;
* :func:`check_creatable`: the one check that an output path can be written, run before
  long work.

Everything is written beside its destination (the same file system) and moved into place
with ``os.replace`` / ``rename``.

**Why a set is saved with a commit record.** A set's files keep their plain names
(``r.json`` and ``r.safetensors``, ``report.md`` beside ``report.json``): users, the
README's links and every earlier save rely on them. Several files with fixed names cannot
change in one step, since one rename moves one name, so a save killed between its renames
used to leave a mix (issue #36: 1 router of 100 unloadable, 1 report set of 100 mixed).
Two designs make a set change in one step:

* a generation directory behind one pointer (the directory renamed, or a symlink): it
  moves the files away from their names (reports share ``benchmarks/results/`` with other
  reports; a router is two files beside others), and symlinks need administrator rights
  on Windows and would be committed to git as links;
* a record of the change, written last, that readers require. This module does that, as
  a redo record, with nothing but file writes and renames of unique names, which every
  operating system Python supports has:

1. each file is written to a hidden temporary beside its target and flushed to disk;
2. each file about to be replaced gets a hidden backup (a hard link, or a copy);
3. the commit record (``.cost-envs-set.<writer>.commit``: each target's name, its
   temporary, its backup and the new content's SHA-256) is written to a temporary,
   flushed and renamed to its unique name: **this one rename is the commit point**;
4. the temporaries are renamed over the targets; the backups, then the record, are
   deleted.

Killed before the commit point, the targets are untouched: the old set (the next save of
those names deletes the dead writer's temporaries, :func:`remove_stale`). Killed after
it, the record says what the new set is: every reader and every writer of the directory
first finishes it (:func:`finish_interrupted`: renames the temporaries still waiting and
checks the targets already renamed against their digests; a target that is neither is
refused in one line naming it). Finishing is idempotent, so a kill during it is finished
by the next one. A reader that may not write the directory reads through the record (the
waiting temporaries) instead. An exception inside the save (a full disk, Ctrl-C, a rename
refused) undoes it: before the commit point the temporaries are deleted; after it a
``.rollback`` record is committed the same way and the backups are put back, so the
caller gets the exception and the old set.

Readers and writers of a directory take turns (``flock`` on the directory itself:
shared for readers, exclusive for writers), so a reader never meets a live writer's half
and two savers' files are never mixed: the last complete set wins. Where there is no
``flock`` (Windows, NFS) a kill still leaves one whole version, but live savers and readers
are not ordered; a router's JSON records its weights' digest, so its loader refuses a mix.

What a program outside this module sees: between a kill after the commit point and the
next read or save of that directory through this module, the files at their plain names
may be part old and part new, with the record beside them naming the complete version.
Read sets with :func:`read_files` / :func:`reading_files` (``load_router`` does).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any


def write_files_atomic(directory: str | Path, files: Mapping[str, str | bytes]) -> list[Path]:
    """Write already rendered files (name -> text or bytes) into ``directory``, all or nothing.

    Reports render every table and figure first and call this last; a router's JSON and
    weights, and a base encoder's weights and config, are written as one set the same way.
    The set is committed by one rename of a record (see the module's docstring): a process
    killed at any moment leaves the old set or the new one, as :func:`read_files` and
    every later save see it; an exception leaves the old set and is raised.

    Text is written as UTF-8; files get mode 0644 (results are meant to be shared).

    Args:
        directory: The output directory (created if needed).
        files: File name (no directory part) -> content.

    Returns:
        The paths written, in the order of ``files``.

    Raises:
        ValueError: If a name is not a plain file name, or an earlier save's record left
            in ``directory`` does not match the files (see :func:`finish_interrupted`).
    """
    directory = Path(directory)
    for name in files:
        if not _plain(name):
            raise ValueError(f"write_files_atomic: expected plain file names, got {name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    with _turn(directory):  # one writer's set at a time: never two savers' files mixed
        finish_interrupted(directory)  # a killed save's set first, before its files go
        for name in [*files, _RECORD]:
            remove_stale(directory, name)
        return _write_locked(directory, files)


def _plain(name: str) -> bool:
    return name not in ("", ".", "..") and Path(name).name == name


def _write_locked(directory: Path, files: Mapping[str, str | bytes]) -> list[Path]:
    contents = {name: c.encode("utf-8") if isinstance(c, str) else c for name, c in files.items()}
    staged: dict[str, Path] = {}
    backups: dict[str, Path | None] = {}
    record: Path | None = None
    replaced: list[str] = []
    try:
        for name, content in contents.items():
            staged[name] = _stage(directory, name, content)
        for name in contents:
            backups[name] = _backup(directory / name)
        entries = [{"name": name, "staged": staged[name].name,
                    "backup": None if (backup := backups[name]) is None else backup.name,
                    "sha256": hashlib.sha256(content).hexdigest()}
                   for name, content in contents.items()]
        record = directory / f".{_RECORD}.{_writer()}-{uuid.uuid4().hex[:8]}.commit"
        _write_record(record, entries)  # the commit point: the new set from here on
        for name, temporary in staged.items():
            os.replace(temporary, directory / name)
            replaced.append(name)
        _sync_directory(directory)  # the renames are on disk before the record goes
    except BaseException:
        _undo(directory, record, [*staged.values(), *backups.values()], bool(replaced))
        raise
    for backup in backups.values():
        if backup is not None:
            with contextlib.suppress(OSError):  # the set is in place; cleanup is best effort
                backup.unlink()
    with contextlib.suppress(OSError):
        record.unlink()
    return [directory / name for name in files]


def _undo(directory: Path, record: Path | None, leftovers: list[Path | None],
          replaced: bool) -> None:
    """Leave the old set after an exception inside a save (the process lives on)."""
    if record is not None and record.exists():
        if replaced:  # some targets are new: back through a committed rollback record
            with contextlib.suppress(Exception):  # if it cannot be marked undone, the
                _write_record(record.with_suffix(".rollback"), _read_record(record))
            with contextlib.suppress(Exception):  # ... set is finished forward instead
                _finish(directory, record)
            return
        try:
            record.unlink()  # nothing renamed yet: uncommitted again
        except OSError:
            with contextlib.suppress(Exception):
                _finish(directory, record)
            return
    for leftover in leftovers:
        if leftover is not None:
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)


def _stage(directory: Path, name: str, content: str | bytes) -> Path:
    """Write ``content`` to a new hidden temporary beside ``directory / name``, on disk."""
    fd, path = tempfile.mkstemp(dir=directory, prefix=f".{name}.{_writer()}-", suffix=".tmp")
    temporary = Path(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8") if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before a record can name it
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


def _sync_directory(directory: Path) -> None:
    """Flush ``directory``'s entries (renames) to disk, where the system allows it."""
    with contextlib.suppress(OSError, AttributeError):  # Windows cannot open a directory
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ------------------------------------------------------------------ commit records
#: Name stem of the commit records (and their temporaries) in a set's directory.
_RECORD = "cost-envs-set"
_RECORD_FORMAT = "cost-envs-file-set"
_RECORD_BYTES = 1_000_000  # a record names a few files: a larger one is not ours
_RECORD_NAME = re.compile(rf"^\.{_RECORD}\.[0-9a-f]{{8}}-\d+-[0-9a-f]{{8}}\.(commit|rollback)$")


def _write_record(path: Path, entries: list[dict[str, Any]]) -> None:
    """Write a record whole to a temporary, flush it, then rename it to ``path`` (new)."""
    text = json.dumps({"format": _RECORD_FORMAT, "version": 1, "time_ns": time.time_ns(),
                       "files": entries}, indent=1) + "\n"
    temporary = _stage(path.parent, _RECORD, text)
    try:
        os.rename(temporary, path)  # a unique new name: a plain rename on every system
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _read_record(path: Path) -> list[dict[str, Any]]:
    """A record's entries, checked: plain names, and hidden names of this module's making."""
    def refuse(problem: str) -> ValueError:
        return ValueError(f"{path}: not a commit record of a cost-envs save ({problem}); the "
                          "files it names may be mixed: check them, then delete it")

    if path.stat().st_size > _RECORD_BYTES:
        raise refuse(f"over {_RECORD_BYTES} bytes")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, IsADirectoryError) as error:
        raise refuse(" ".join(str(error).split())) from None
    if not isinstance(doc, dict) or doc.get("format") != _RECORD_FORMAT or doc.get(
            "version") != 1 or not isinstance(doc.get("files"), list):
        raise refuse(f"expected format {_RECORD_FORMAT!r}, version 1 and a list of files")
    for entry in doc["files"]:
        if not isinstance(entry, dict) or set(entry) != {"name", "staged", "backup", "sha256"}:
            raise refuse(f"expected name, staged, backup and sha256 per file, got {entry!r}")
        name, staged, backup = entry["name"], entry["staged"], entry["backup"]
        if not (isinstance(name, str) and _plain(name) and isinstance(staged, str)
                and _plain(staged) and staged.startswith(f".{name}.")
                and (backup is None or (isinstance(backup, str) and _plain(backup)
                                        and backup.startswith(f".{name}.old-")))
                and isinstance(entry["sha256"], str)):
            raise refuse(f"file entry {entry!r}")
    return doc["files"]


def _records(directory: Path) -> list[Path]:
    """The sets left unfinished in ``directory`` (their ``.commit`` paths), oldest first."""
    try:
        names = [entry.name for entry in os.scandir(directory)
                 if entry.name.startswith(f".{_RECORD}.")]
    except OSError:
        return []
    stems = sorted({name.rsplit(".", 1)[0] for name in names if _RECORD_NAME.match(name)})
    records = [directory / f"{stem}.commit" for stem in stems]

    def age(record: Path) -> int:
        for path in (record, record.with_suffix(".rollback")):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                return int(json.loads(path.read_text(encoding="utf-8")).get("time_ns", 0))
        return 0

    return sorted(records, key=age) if len(records) > 1 else records


def _rolling_back(record: Path) -> tuple[list[dict[str, Any]], bool]:
    """A record's entries and whether it is being undone (its ``.rollback`` exists)."""
    rollback = record.with_suffix(".rollback")
    if rollback.exists():
        return _read_record(rollback), True
    return _read_record(record), False


def _finish(directory: Path, record: Path) -> None:
    """Complete the set of ``record``: forward to the new files, or back to the old ones."""
    try:
        entries, back = _rolling_back(record)
    except FileNotFoundError:
        return  # finished meanwhile (only where savers cannot take turns)
    for entry in entries:
        target = directory / entry["name"]
        staged = directory / entry["staged"]
        backup = None if entry["backup"] is None else directory / entry["backup"]
        if back:
            if backup is None:
                target.unlink(missing_ok=True)  # it did not exist before the save
            else:
                with contextlib.suppress(FileNotFoundError):  # gone: put back already
                    os.replace(backup, target)
                backup.unlink(missing_ok=True)  # a link to the target's own inode stays
            staged.unlink(missing_ok=True)
            continue
        try:
            os.replace(staged, target)
        except FileNotFoundError:  # renamed already: then the target is the new file
            if _digest(target) != entry["sha256"]:
                raise ValueError(f"{target}: neither the new version that {record.name} "
                                 "records nor its temporary: the set may be mixed; check "
                                 "it, then delete the record") from None
    _sync_directory(directory)
    if not back:
        for entry in entries:
            if entry["backup"] is not None:
                (directory / entry["backup"]).unlink(missing_ok=True)
    record.unlink(missing_ok=True)
    record.with_suffix(".rollback").unlink(missing_ok=True)


def _digest(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except (FileNotFoundError, IsADirectoryError):
        return None
    return digest.hexdigest()


def finish_interrupted(directory: str | Path) -> list[Path]:
    """Finish every save of a set that was killed after its commit point in ``directory``.

    Called by every save and read of a set (take the directory's turn first, as they do).

    Returns:
        The records finished.

    Raises:
        ValueError: One line naming a record that is not one, or a target that is neither
            the version its record names nor waiting as its temporary.
        OSError: A rename was refused (``PermissionError``: a directory this process may
            only read).
    """
    directory = Path(directory)
    records = _records(directory)
    for record in records:
        _finish(directory, record)
    return records


@contextlib.contextmanager
def reading_files(directory: str | Path, names: Collection[str]) -> Iterator[dict[str, Path]]:
    """Hold the set ``names`` of ``directory`` still while it is read.

    Yields the file that holds each name's current content: ``directory / name``, after
    finishing a save that was killed after its commit point; in a directory this process
    may not write, the killed save's waiting temporary instead. While the block runs no
    save of the directory through this module can start (where ``flock`` exists).

    Raises:
        ValueError: As :func:`finish_interrupted`.
    """
    directory = Path(directory)
    with _turn(directory, shared=True):
        if not _records(directory):  # the common case: no killed save to finish
            yield {name: directory / name for name in names}
            return
    with _turn(directory):
        try:
            finish_interrupted(directory)
            where = {name: directory / name for name in names}
        except OSError as error:
            if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            where = _read_through(directory, names)
        yield where


def _read_through(directory: Path, names: Collection[str]) -> dict[str, Path]:
    """Where each of ``names`` is, reading the unfinished records without changing a file."""
    where = {name: directory / name for name in names}
    for record in _records(directory):
        entries, back = _rolling_back(record)
        for entry in entries:
            name = entry["name"]
            if name not in where:
                continue
            if back and entry["backup"] is None:
                raise ValueError(f"{record}: an undone save of {directory / name} is "
                                 "unfinished and the directory is read-only; ask its owner "
                                 "to read or save it once")
            waiting = directory / (entry["backup"] if back else entry["staged"])
            if waiting.exists():
                where[name] = waiting
    return where


def read_files(directory: str | Path, names: Collection[str]) -> dict[str, bytes]:
    """The bytes of the set ``names`` in ``directory``: the old set or the new, never mixed.

    Raises:
        FileNotFoundError: One of the files does not exist.
        ValueError: As :func:`finish_interrupted`.
    """
    with reading_files(directory, names) as where:
        return {name: path.read_bytes() for name, path in where.items()}


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
def _turn(directory: Path, shared: bool = False) -> Iterator[None]:
    """Hold a ``flock`` on ``directory`` itself (no lock file): shared to read, else exclusive.

    Where there is none to take (Windows; NFS and other file systems that refuse
    ``flock`` on a directory; a directory this process cannot open), the caller goes on
    without taking turns: a kill still leaves one whole set, but live savers and readers
    are not ordered.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # ENOLCK, EOPNOTSUPP, ...: no flock here
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
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
    removed: list[Path] = []
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

