"""Where the ledger lives: a small interface and its SQLite implementation (WAL).

The ledger (:mod:`agents.serve.ledger`) speaks portable SQL through a :class:`Storage`:
``?`` placeholders (rewritten to ``%s`` by a driver that wants them), ``BIGINT`` money
and ``ON CONFLICT`` upserts, which SQLite (3.24+) and PostgreSQL both read. What differs
is how a transaction takes its locks, which each storage says:

* SQLite: ``BEGIN IMMEDIATE`` takes the database's one write lock at the start, so two
  transactions (threads or processes) that check a budget run one after the other, and
  :attr:`Storage.row_lock` is empty;
* PostgreSQL (to add: same schema, a ``postgresql://`` URL): ``BEGIN`` and
  ``SELECT ... FOR UPDATE`` on each budget row, taken in name order (no deadlock).

SQLite runs in WAL mode with ``synchronous=NORMAL``: a commit survives the process being
killed (SIGKILL); only a power cut can lose the last commits.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol


class Storage(Protocol):
    """A database the ledger can run its transactions in."""

    #: Appended to a ``SELECT`` that reads a row the transaction will update.
    row_lock: str

    def transaction(self) -> Any:
        """A context manager: a DB-API cursor in one transaction, committed at exit."""

    def close(self) -> None:
        """Close the connection(s)."""


class SQLiteStorage:
    """One SQLite file in WAL mode; one connection shared by the process's threads.

    Args:
        path: The database file (created if missing; its folder must exist).
        busy_timeout: Seconds a transaction waits for another process's write lock.
    """

    row_lock = ""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        self.path = str(path)
        # isolation_level=None: no implicit transactions; BEGIN IMMEDIATE is ours
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        self._lock = threading.Lock()  # one transaction at a time on the shared connection

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``: the write lock is held from the first statement."""
        with self._lock:
            cursor = self._conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield cursor
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


def open_storage(url: str) -> Storage:
    """The storage a URL names: ``sqlite:///PATH`` (``sqlite:///:memory:`` for a test).

    Raises:
        ValueError: On another scheme (``postgresql://`` is not implemented yet).
    """
    if url.startswith("sqlite:///"):
        return SQLiteStorage(url[len("sqlite:///"):])
    if url.startswith("postgresql://"):
        raise ValueError(f"storage: PostgreSQL is not implemented yet (issue #27), got {url!r}; "
                         "expected sqlite:///PATH")
    raise ValueError(f"storage: expected sqlite:///PATH or postgresql://..., got {url!r}")
