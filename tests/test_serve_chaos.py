"""The chaos run (tests/serve_chaos.py) in CI: every fault, lying upstreams and SIGKILLs.

64 clients of OpenAI's client send 800 seeded requests (streamed or not, some with large
tool definitions, some idempotent) through the server to a stand-in upstream that fails in
every way it can and lies about usage, while the server is SIGKILLed five times and
restarted on the same ledger: on SQLite (one server process) and on PostgreSQL (two server
processes sharing the ledger, clients spread over both, each killed and restarted). The
ledger must charge every key at least what the upstream billed it, keep every budget
within its documented bound, charge no request twice and leave nothing reserved
(:func:`serve_chaos_check.check`). About a minute each on a 2-core machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_server import PostgresUnavailableError, temporary_postgres
from serve_chaos import Report, run_chaos

REQUESTS, CLIENTS, KILLS = 800, 64, 5


def _passed(report: Report) -> None:
    print(report.table())  # shown with -s, and with the failure otherwise
    print(report.summary())
    assert report.kills >= KILLS
    assert not report.failures, report.summary()


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    stack = contextlib.ExitStack()
    try:
        url = stack.enter_context(temporary_postgres())
    except PostgresUnavailableError as err:  # the reasons tests/test_serve_postgres.py gives
        pytest.skip(str(err))
    with stack:
        yield url


@pytest.mark.slow
def test_chaos_on_sqlite_loses_no_money(tmp_path: Path) -> None:
    _passed(run_chaos("sqlite", REQUESTS, CLIENTS, KILLS, seed=1, workdir=tmp_path, log=print,
                      strict=True))


@pytest.mark.slow
def test_chaos_on_postgres_with_two_servers_loses_no_money(
        tmp_path: Path, postgres_url: str) -> None:
    _passed(run_chaos("postgresql", REQUESTS, CLIENTS, KILLS, seed=2,
                      postgres_url=postgres_url, workdir=tmp_path, log=print, strict=True))
