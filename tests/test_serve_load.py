"""Budgets under load and a server killed mid-load: exact spend, no ledger row lost or doubled.

Both are ``slow`` (servers under load): the full-size run of issue #27 (2,000 requests
from 64 clients), and a server killed (SIGKILL) in the middle of a smaller load and
restarted (seconds of waiting for its calls and for its reservations to expire). The fast
tier checks what a dead server leaves on the ledger itself (tests/test_serve_ledger.py: its
call charged its worst case until the real cost is known, its request abandoned after the
TTL, budgets exact under threads and processes).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import local_http
import openai
import pytest
import yaml
from serve_load_client import run_load

from agents.serve.config import hash_key
from agents.serve.processes import launched
from agents.serve.standin import free_port

#: small's prices; a call below costs ~8 micro-dollars and reserves at most 16.
PRICE_IN, PRICE_OUT = 0.1, 0.4
TTL = 3.0


def _config(tmp: Path, upstream: str, limit_micros: int) -> Path:
    config = {
        "storage": "sqlite:///ledger.db",
        "models": [{"name": "small", "base_url": f"{upstream}/v1", "input_price": PRICE_IN,
                    "output_price": PRICE_OUT, "context": 4096, "max_output_tokens": 64,
                    "timeout": 60}],  # a loaded 2-core machine can take seconds per call
        "budgets": {"organisations": [{"name": "lab", "limit": 2 * limit_micros / 1e6}],
                    "keys": [{"name": "loader", "key_sha256": hash_key("sk-load"),
                              "organisation": "lab", "limit": limit_micros / 1e6}]},
        "server": {"retries": 0, "reservation_ttl": TTL},
    }
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _ledger(db: Path) -> tuple[list[dict], dict[str, tuple[int, int]], int]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM requests")]
        usage = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT budget, spent_micros, reserved_micros FROM budget_usage")}
        open_reservations = conn.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]
    return rows, usage, open_reservations


def _fresh_reservations(db: Path, seconds: float) -> int:
    """Reservations made in the last ``seconds`` (the ledger's clock is wall time)."""
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM reservations WHERE created_at > ?",
                            (time.time() - seconds,)).fetchone()[0]


@pytest.fixture
def upstream() -> Iterator[str]:
    port = free_port()
    with launched(["-m", "agents.serve.standin", "--port", str(port), "--latency", "0.01"],
                  f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}"


def _billed(upstream: str) -> int:
    """What the stand-in billed, micro-dollars (every call here is the loader key's)."""
    prompt, completion, _ = local_http.get(f"{upstream}/stats").json()["billed"]["small"][""]
    return math.ceil(round(PRICE_IN * prompt + PRICE_OUT * completion, 6))


def _check_exact(db: Path, limit: int, answered: int) -> list[dict]:
    rows, usage, open_reservations = _ledger(db)
    assert open_reservations == 0
    spent = sum(r["cost_micros"] for r in rows)
    assert usage["key:loader"] == (spent, 0) and usage["org:lab"] == (spent, 0)
    assert spent <= limit  # not by one micro-dollar
    ok = sum(r["outcome"] == "ok" for r in rows)
    unsettled = sum(r["outcome"] in ("unknown", "recovered") for r in rows)
    # every call the upstream answered is one row: settled, or charged after the server died
    assert ok <= answered <= ok + unsettled
    return rows


#: Seconds a (re)started server may take to answer, and the load to wait for it: a server
#: restarted while 16 clients retry took more than 60 s on this 2-core machine at load 30.
PATIENCE = 240.0


def _serve(config: Path, port: int):
    return launched(["-m", "agents.cli", "serve", "--config", str(config), "--port",
                     str(port)], f"http://127.0.0.1:{port}/health", timeout=PATIENCE)


@pytest.mark.slow
def test_the_full_load_never_passes_a_budget(tmp_path: Path, upstream: str) -> None:
    limit, port = 8_000, free_port()  # ~1,000 of the 2,000 calls
    with _serve(_config(tmp_path, upstream, limit), port):
        outcomes = run_load(lambda worker: f"http://127.0.0.1:{port}", requests=2000,
                            clients=64, timeout=300, idempotency="load", reconnect=60)
    assert sum(outcomes.values()) == 2000 and set(outcomes) == {"ok", "402"}
    assert 700 <= outcomes["ok"] <= 1300
    answered = local_http.get(f"{upstream}/stats").json()["answered"]["small"]
    rows = _check_exact(tmp_path / "ledger.db", limit, answered)
    assert answered == outcomes["ok"] == sum(r["outcome"] == "ok" for r in rows)
    assert limit - sum(r["cost_micros"] for r in rows) < 16


@pytest.mark.slow
def test_a_server_killed_mid_load_loses_no_row_and_keeps_budgets_exact(
        tmp_path: Path, upstream: str) -> None:
    limit, port = 800, free_port()
    config = _config(tmp_path, upstream, limit)
    url = f"http://127.0.0.1:{port}"
    done: dict[str, Counter] = {}
    # each call takes 0.3 s upstream: the 16 clients' calls are in flight at the kill
    local_http.post(f"{upstream}/control", json={"model": "small", "fault": "none", "latency": 0.3})
    with _serve(config, port) as first:
        loader = threading.Thread(target=lambda: done.setdefault("load", run_load(
            lambda worker: url, requests=200, clients=16, timeout=300, idempotency="load",
            reconnect=PATIENCE)))  # a killed server: the same request again until it is back
        loader.start()
        while len(_ledger(tmp_path / "ledger.db")[0]) < 40:  # well into the load
            time.sleep(0.02)
        # the precondition, arranged rather than hoped for: a call reserved under 0.1 s ago
        # is still waiting on its 0.3 s upstream when the kill lands (at most 0.2 s later)
        while not _fresh_reservations(tmp_path / "ledger.db", 0.1):
            time.sleep(0.005)
        first.kill()  # SIGKILL: no settle, no cleanup
        first.wait()
        killed_at = time.monotonic()
        with _serve(config, port):  # the same ledger, restarted
            loader.join(timeout=600)
            # a reservation expires TTL after its server's last heartbeat (at the kill at
            # the latest), and reserve() looks for expired ones once a second at most: a call
            # the loader made just before the expiry can hold that look off for up to 1 s, so
            # the request below comes TTL + 1 s (and a margin) after the kill
            time.sleep(max(0.0, TTL + 1.5 - (time.monotonic() - killed_at)))
            # a request after the expiry releases what the killed server had reserved
            local_http.openai_client(base_url=f"{url}/v1", api_key="sk-load", max_retries=0
                          ).models.list()
            try:
                local_http.openai_client(base_url=f"{url}/v1", api_key="sk-load", max_retries=0
                              ).chat.completions.create(
                    model="small", max_tokens=1, messages=[{"role": "user", "content": "x"}])
            except openai.APIStatusError as err:
                assert err.status_code == 402
    outcomes = done["load"]
    # 409: a call in flight when the server died, tried again with its idempotency key
    # before its reservation expired; 502: after (the kept answer: outcome unknown)
    assert sum(outcomes.values()) == 200 and set(outcomes) <= {"ok", "402", "409", "502"}
    assert outcomes["ok"] > 0 and outcomes["402"] > 0  # the budget was reached after restart
    answered = local_http.get(f"{upstream}/stats").json()["answered"]["small"]
    rows = _check_exact(tmp_path / "ledger.db", limit, answered)
    assert len({r["id"] for r in rows}) == len(rows)
    unknown = [r for r in rows if r["outcome"] == "unknown"]
    assert unknown  # calls in flight at the kill (arranged above)
    assert all(r["cost_micros"] == r["reserved_micros"] > 0 for r in unknown)  # never 0
    assert sum(r["cost_micros"] for r in rows) >= _billed(upstream)  # nothing spent is lost
    assert sum(r["outcome"] == "ok" for r in rows) >= outcomes["ok"]
