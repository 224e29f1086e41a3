"""Atomic writes: a result file or checkpoint is either the old one or the new one, never half.

Everything is written to a temporary sibling (same directory, so the same file system)
and moved into place with ``os.replace``; on any error the temporary is removed and the
old file is untouched.
"""

from __future__ import annotations

import os
import shutil
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

    An existing ``directory`` is replaced only after the new one is complete.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} exists and is not a directory")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
    moved_old = False
    try:
        write(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        for child in tmp.iterdir():
            os.chmod(child, 0o644)
        if directory.exists():
            os.replace(directory, old)
            moved_old = True
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if moved_old and not directory.exists():
            os.replace(old, directory)  # put the previous version back
        raise
    if moved_old:
        shutil.rmtree(old, ignore_errors=True)  # the save succeeded; cleanup is best effort
    return directory

