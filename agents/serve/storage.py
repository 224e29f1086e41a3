"""Where the ledger lives: a small interface and its SQLite implementation (WAL).

The ledger (:mod:`agents.serve.ledger`) speaks portable SQL through a :class:`Storage`:
``?`` placeholders (rewritten to ``%s`` by a driver that wants them), ``BIGINT`` money
and ``ON CONFLICT`` upserts, which SQLite (3.24+) and PostgreSQL both read. What differs
is how a transaction takes its locks, which each storage says:

* SQLite: ``BEGIN IMMEDIATE`` takes the database's one write lock at the start, so two
  transactions (threads or processes) that check a budget run one after the other, and
  :meth:`Storage.lock` adds nothing;
* PostgreSQL (:class:`PostgresStorage`, a ``postgresql://`` URL, for several server
  processes sharing budgets): ``BEGIN`` at READ COMMITTED and ``SELECT ... FOR UPDATE
  OF`` the rows read to be updated. The ledger's locks always come in one order: a
  settlement locks its reservation, then rate windows, then budget rows in name order;
  a reservation takes rate windows, then budget rows in name order, then writes its
  reservation; each expired reservation is settled in a transaction of its own. So two
  transactions never wait on each other in a circle.

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

    @property
    def integrity_error(self) -> type[Exception]:
        """The driver's exception for a broken UNIQUE constraint."""
    #: A statement that makes the transaction the only one changing the schema (run first
    #: in the ledger's opening transaction), or "" when the transaction already is.
    schema_lock: str

    def lock(self, alias: str) -> str:
        """Appended to a ``SELECT`` that reads rows of ``alias`` the transaction will update."""

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

    integrity_error = sqlite3.IntegrityError
    schema_lock = ""  # BEGIN IMMEDIATE: one writer at a time already

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

    def lock(self, alias: str) -> str:
        """Nothing: ``BEGIN IMMEDIATE`` already holds the database's write lock."""
        del alias
        return ""

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


class _QmarkCursor:
    """A psycopg cursor that reads the ledger's ``?`` placeholders as ``%s``."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._cursor.execute(sql.replace("?", "%s"), params)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    @property
    def description(self) -> Any:
        return self._cursor.description


class PostgresStorage:
    """A PostgreSQL database (psycopg 3), one connection shared by the process's threads.

    ``CREATE TABLE IF NOT EXISTS`` is not safe against itself: two server processes
    creating the ledger's tables at the same moment on an empty database can both find a
    table missing, and the second then fails on PostgreSQL's catalogue (``duplicate key
    value violates unique constraint "pg_type_typname_nsp_index"``). The ledger's opening
    transaction therefore starts with a transaction-level advisory lock
    (:attr:`schema_lock`): the second process waits until the first has committed, then
    finds every table there.

    Args:
        url: ``postgresql://user@host:port/dbname`` (libpq's connection URI).
    """

    #: ``pg_advisory_xact_lock`` on the ledger's own number (the ASCII of "costenvs"),
    #: released at the transaction's end, whether it commits or fails.
    schema_lock = "SELECT pg_advisory_xact_lock(7165072475924887155)"

    def __init__(self, url: str) -> None:
        import psycopg  # the postgres extra, imported only when a URL asks for it

        self.url = url
        self.integrity_error = psycopg.IntegrityError
        self._conn = psycopg.connect(url, autocommit=True)
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """``BEGIN`` ... ``COMMIT`` at READ COMMITTED; rows are locked by ``FOR UPDATE``."""
        with self._lock, self._conn.transaction(), self._conn.cursor() as cursor:
            yield _QmarkCursor(cursor)

    def lock(self, alias: str) -> str:
        """`` FOR UPDATE OF alias``: the rows read stay as read until the commit."""
        return f" FOR UPDATE OF {alias}"

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


def open_storage(url: str) -> Storage:
    """The storage a URL names: ``sqlite:///PATH`` (``sqlite:///:memory:`` for a test).

    ``postgresql://...`` needs psycopg (``pip install 'cost-envs[postgres]'``).

    Raises:
        ValueError: On another scheme.
        ImportError: A PostgreSQL URL without psycopg, naming the extra.
    """
    if url.startswith("sqlite:///"):
        return SQLiteStorage(url[len("sqlite:///"):])
    if url.startswith("postgresql://"):
        from importlib.util import find_spec

        if find_spec("psycopg") is None:
            raise ImportError("storage: a postgresql:// URL needs psycopg (missing): "
                              "pip install 'cost-envs[postgres]'", name="psycopg")
        return PostgresStorage(url)
    raise ValueError(f"storage: expected sqlite:///PATH or postgresql://..., got {url!r}")
