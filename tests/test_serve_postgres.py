"""The ledger on a real PostgreSQL server: ledgers and server processes sharing one budget.

The server is Debian's ``postgresql`` package, started in a temporary directory (as the
``postgres`` user when the tests run as root, since initdb refuses root). Without
``initdb`` or psycopg the tests are skipped, saying why.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import local_http
import pytest
import yaml
from postgres_server import PostgresUnavailableError, fresh_database, temporary_postgres
from serve_load_client import run_load

from agents.serve.config import BudgetConfig, KeyConfig, hash_key
from agents.serve.ledger import BudgetExceededError, Ledger
from agents.serve.processes import Launch, launched, launched_together, wait_until_up
from agents.serve.standin import free_port
from agents.serve.storage import Storage, open_storage

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    stack = contextlib.ExitStack()
    try:
        url = stack.enter_context(temporary_postgres())
    except PostgresUnavailableError as err:
        pytest.skip(str(err))
    with stack:
        yield url


_fresh = fresh_database  # the name tests/test_serve_spend.py imports


def _open_ledgers_at_once(storages: list[Storage]) -> list[str]:
    """Open a ledger on each storage, one thread each, all at once; the errors raised."""
    go, errors = threading.Barrier(len(storages)), []

    def create(storage: Storage) -> None:
        go.wait()  # every connection is open: all go at once
        try:
            Ledger(storage)
        except Exception as err:
            errors.append(repr(err))

    threads = [threading.Thread(target=create, args=(s,)) for s in storages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def test_connections_creating_the_schema_at_once_do_not_race(postgres_url: str) -> None:
    # Without the advisory lock, CREATE TABLE IF NOT EXISTS from ledgers opened together
    # fails in one of them on PostgreSQL's catalogue (pg_type_typname_nsp_index). Each
    # connection is a PostgreSQL backend process of its own, so four connections opened
    # here race in the server as four server processes' do (without the lock 2 or 3 of
    # the 4 fail in every round; each a process of its own took seconds of imports).
    for round_ in range(3):
        url = _fresh(postgres_url, f"race_{round_}")
        storages = [open_storage(url) for _ in range(4)]
        errors = _open_ledgers_at_once(storages)
        for storage in storages:
            storage.close()
        assert errors == []
        assert Ledger(open_storage(url), []).requests() == []  # the schema is whole


def test_two_servers_starting_at_once_on_a_fresh_database_both_serve(
        postgres_url: str, tmp_path: Path) -> None:
    url = _fresh(postgres_url, "two_at_once")
    up_port, ports = free_port(), [free_port(), free_port()]
    upstream = f"http://127.0.0.1:{up_port}"
    config = {"storage": url,
              "models": [{"name": "small", "base_url": f"{upstream}/v1", "input_price": 0.1,
                          "output_price": 0.4}]}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    with launched(["-m", "agents.serve.standin", "--port", str(up_port)],
                  f"{upstream}/v1/models"):
        servers = [subprocess.Popen([sys.executable, "-m", "agents.cli", "serve", "--config",
                                     str(path), "--port", str(port)], cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                   for port in ports]  # both at once, on the empty database
        try:
            for server, port in zip(servers, ports, strict=True):
                wait_until_up(f"http://127.0.0.1:{port}/health", server)
            for port in ports:
                answer = local_http.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60,
                                    json={"model": "small", "max_tokens": 4,
                                          "messages": [{"role": "user", "content": "hi"}]})
                assert answer.status_code == 200, answer.text
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)
                server.stderr.close()
    rows = Ledger(open_storage(url), []).requests()
    assert [r["outcome"] for r in rows] == ["ok", "ok"]


def _reset(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("api_keys", "budgets", "budget_usage", "reservations", "requests",
                      "servers"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")


def test_the_ledger_reserves_and_settles_on_postgres(postgres_url: str) -> None:
    _reset(postgres_url)
    key = KeyConfig("alice", hash_key("a"), BudgetConfig("key:alice", 600, "day"))
    ledger = Ledger(open_storage(postgres_url), [key])
    ledger.reserve("r1", key, 500, idempotency_key="k1")
    with pytest.raises(BudgetExceededError, match="'key:alice'"):
        ledger.reserve("r2", key, 101)
    ledger.settle("r1", 120, "ok")
    ledger.reserve("r2", key, 480)
    ledger.settle("r2", 480, "ok")
    assert [(u.spent, u.reserved) for u in ledger.usage()] == [(600, 0)]
    assert [r["cost_micros"] for r in ledger.requests()] == [120, 480]
    # a dead server's reservation is released once its heartbeat is ttl old
    dead = Ledger(open_storage(postgres_url), [key], ttl=5, now=1000.0)
    dead.reserve("lost", key, 0, now=1000.0)
    assert Ledger(open_storage(postgres_url), [key], ttl=5).release_expired() == 1


def _hammer(url: str, worker: int, calls: int, key: KeyConfig) -> None:
    """Reserve and settle as a server process would, each call charged its whole reservation.

    Charged in full, a reservation the budget could not hold is money spent past the
    limit: a race between two reserves is seen in the spend, not only in the reservations.
    """
    ledger = Ledger(open_storage(url), [key])
    rng = random.Random(worker)
    for i in range(calls):
        amount = rng.randrange(1, 60)
        try:
            ledger.reserve(f"w{worker}-{i}", key, amount)
        except BudgetExceededError:
            ledger.record(f"w{worker}-{i}", "refused_budget", key_name=key.name)
            continue
        ledger.settle(f"w{worker}-{i}", amount, "ok")
    ledger.storage.close()


def test_ledgers_on_their_own_connections_keep_the_budget_exact(postgres_url: str) -> None:
    # What two servers sharing the database do (the slow test below runs them under a
    # load), without the servers: ledgers on connections of their own, one a thread,
    # reserve and settle on one budget at once; the budget row each reads stays as read
    # until its commit (without FOR UPDATE the spend passed the limit in every run)
    url = _fresh(postgres_url, "hammer")
    key = KeyConfig("alice", hash_key("a"), BudgetConfig("key:alice", 3_000, "total"))
    Ledger(open_storage(url), [key]).storage.close()  # the schema, before the race
    threads = [threading.Thread(target=_hammer, args=(url, w, 100, key)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    ledger = Ledger(open_storage(url), [key])
    rows = ledger.requests()
    assert len(rows) == 6 * 100 and ledger.open_reservations() == 0  # none lost or doubled
    spent = sum(r["cost_micros"] for r in rows)
    assert [(u.spent, u.reserved) for u in ledger.usage()] == [(spent, 0)]
    assert spent <= 3_000
    assert 0 < sum(r["outcome"] == "refused_budget" for r in rows) < len(rows)


@pytest.mark.slow  # two servers under load; the test above is the fast tier's check
def test_two_servers_sharing_one_database_keep_the_budget_exact(
        postgres_url: str, tmp_path: Path) -> None:
    _reset(postgres_url)
    limit = 800  # micro-dollars: about half of 200 calls of ~8
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    config = {
        "storage": postgres_url,
        "models": [{"name": "small", "base_url": f"{upstream}/v1", "input_price": 0.1,
                    "output_price": 0.4, "context": 4096, "max_output_tokens": 64}],
        "budgets": {"keys": [{"name": "loader", "key_sha256": hash_key("sk-load"),
                              "limit": limit / 1e6}]},
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    ports = [free_port(), free_port()]
    servers = [Launch(["-m", "agents.cli", "serve", "--config", str(path), "--port", str(port)],
                      f"http://127.0.0.1:{port}/health") for port in ports]
    with launched(["-m", "agents.serve.standin", "--port", str(up_port), "--latency", "0.005"],
                  f"{upstream}/v1/models"):
        with launched_together(*servers):
            outcomes = run_load(lambda worker: f"http://127.0.0.1:{ports[worker % 2]}",
                                requests=200, clients=16)
        answered = local_http.get(f"{upstream}/stats").json()["answered"]["small"]
    assert sum(outcomes.values()) == 200 and set(outcomes) == {"ok", "402"}
    ledger = Ledger(open_storage(postgres_url), [])
    rows = ledger.requests()
    spent = sum(r["cost_micros"] for r in rows)
    usage = {u.budget: (u.spent, u.reserved) for u in ledger.usage()}
    assert usage["key:loader"] == (spent, 0) and spent <= limit
    assert limit - spent < 16  # filled to the last call's worst case
    assert answered == outcomes["ok"] == sum(r["outcome"] == "ok" for r in rows)
    assert len(rows) == 200 and ledger.open_reservations() == 0
