"""One home for a real PostgreSQL server in the tests: started in a temporary directory.

The server is Debian's ``postgresql`` package (``.ci/run`` installs it), started as the
``postgres`` user when the tests run as root, since initdb refuses root. Where it cannot
run, :class:`PostgresUnavailableError` says why, and the tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agents.serve.standin import free_port


class PostgresUnavailableError(Exception):
    """PostgreSQL cannot be started here (the reason)."""


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextlib.contextmanager
def temporary_postgres(max_connections: int = 100) -> Iterator[str]:
    """Debian's PostgreSQL started in a temporary directory: its URL (stopped at the end).

    Raises:
        PostgresUnavailableError: No ``initdb``, no psycopg, or root without ``runuser``.
    """
    # Debian keeps the server binaries off PATH, in /usr/lib/postgresql/<version>/bin.
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    initdb = shutil.which("initdb") or (str(found[-1]) if found else None)
    if initdb is None:
        raise PostgresUnavailableError("initdb not found: install Debian's postgresql package "
                                       "(.ci/run does)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PostgresUnavailableError("psycopg not installed: pip install "
                                       "'cost-envs[postgres]'") from None
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        raise PostgresUnavailableError("running as root without runuser: initdb refuses root")
    root = Path(tempfile.mkdtemp(prefix="cost-envs-pg-"))
    data, port = root / "data", free_port()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    pg_ctl = str(Path(initdb).with_name("pg_ctl"))
    try:
        # --no-sync: a throwaway server (run with fsync=off) needs no flush of its files;
        # initdb's took 4 of its 5 s here, and deleting the flushed files 3 s more at the end
        subprocess.run(_as_postgres([initdb, "-D", str(data), "-U", "postgres",
                                     "--auth=trust", "-E", "UTF8", "--no-sync"]),
                       check=True, capture_output=True, timeout=120)
        options = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c max_connections={max_connections}")
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-o", options, "-l",
                                     str(root / "log"), "-w", "start"]),
                       check=True, capture_output=True, timeout=120)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(url: str, name: str) -> str:
    """A new, empty database on the server of ``url``: its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + f"/{name}"
