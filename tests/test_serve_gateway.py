"""What an operator expects of an LLM gateway (issue #35): keys over an API, rate limits,
budget periods and end users' budgets, each tested against a real server.

The server runs in this process (uvicorn in a thread) with a clock the tests move, so a
budget period or a rate window can be crossed without waiting; the stand-in upstream runs
beside it. OpenAI's official client is the caller.
"""

from __future__ import annotations

import calendar
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import local_http
import openai
import pytest
import uvicorn

from agents.serve import keys
from agents.serve.app import create_app
from agents.serve.config import hash_key, parse_config
from agents.serve.keys import CACHE_SECONDS
from agents.serve.standin import create_app as standin_app
from agents.serve.standin import free_port

ADMIN = "sk-admin"
#: 2026-03-31 23:59:00 UTC: a minute before a day's and a month's end.
EVE = float(calendar.timegm((2026, 3, 31, 23, 59, 0)))


class Clock:
    """A clock the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Gateway:
    url: str
    upstream: str
    db: Path
    clock: Clock

    def client(self, key: str, **options: object) -> openai.OpenAI:
        return local_http.openai_client(base_url=f"{self.url}/v1", api_key=key, max_retries=0,
                                        **options)

    def admin(self, path: str, body: dict | None = None, key: str = ADMIN) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        if body is None:
            return local_http.get(f"{self.url}{path}", headers=headers)
        return local_http.post(f"{self.url}{path}", json=body, headers=headers)


def _serve(app: object, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    # asyncio's loop and h11 whatever else is installed (uvloop will not run in a thread)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio",
                                           http="h11", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    return server, thread


def _config(upstream: str, db: Path) -> dict:
    return {
        "storage": f"sqlite:///{db}",
        "models": [{"name": "small", "base_url": f"{upstream}/v1", "input_price": 1.0,
                    "output_price": 2.0, "context": 4096, "max_output_tokens": 50,
                    "timeout": 5}],
        "budgets": {"request": {"default": 1.0, "max": 1.0},
                    "keys": [{"name": "tester", "key_sha256": hash_key("sk-test")},
                             {"name": "daily", "key_sha256": hash_key("sk-daily"),
                              "limit": 0.0002, "period": "day"},
                             {"name": "monthly", "key_sha256": hash_key("sk-monthly"),
                              "limit": 0.0002, "period": "month"},
                             {"name": "paced", "key_sha256": hash_key("sk-paced"),
                              "rpm_limit": 3, "tpm_limit": 1000},
                             {"name": "narrow", "key_sha256": hash_key("sk-narrow"),
                              "max_parallel_requests": 2}],
                    "users": {"limit": 0.001, "period": "day", "rpm_limit": 5}},
        "server": {"admin_key_sha256": hash_key(ADMIN)},
    }


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    standin, standin_thread = _serve(standin_app(), up_port)
    clock = Clock(EVE)
    config = parse_config(_config(upstream, tmp_path / "ledger.db"), base=tmp_path)
    server, thread = _serve(create_app(config, clock=clock), port)
    try:
        yield Gateway(f"http://127.0.0.1:{port}", upstream, tmp_path / "ledger.db", clock)
    finally:
        for each, its_thread in ((server, thread), (standin, standin_thread)):
            each.should_exit = True
            its_thread.join(timeout=10)


def _ask(client: openai.OpenAI, text: str = "hello there", **more: object) -> str:
    try:
        client.chat.completions.create(model="small", max_tokens=10,
                                       messages=[{"role": "user", "content": text}], **more)
        return "ok"
    except openai.APIStatusError as err:
        return str(err.status_code)


def test_keys_are_made_rotated_limited_and_revoked_without_a_restart(gateway: Gateway) -> None:
    made = gateway.admin("/key/generate", {"name": "carol", "limit": 0.0001, "rpm_limit": 100})
    assert made.status_code == 200 and made.json()["key"].startswith("sk-ce-")
    secret = made.json()["key"]
    with sqlite3.connect(gateway.db) as conn:  # hashed at rest: the key itself is nowhere
        assert conn.execute("SELECT key_sha256 FROM api_keys WHERE name = 'carol'"
                            ).fetchone() == (hash_key(secret),)
        assert secret not in str(conn.execute("SELECT * FROM api_keys").fetchall())
    assert _ask(gateway.client(secret)) == "ok"
    listed = {k["name"]: k for k in gateway.admin("/key/list").json()["data"]}
    assert listed["carol"]["limit"] == 0.0001 and "key" not in listed["carol"]
    assert listed["tester"]["source"] == "config"
    # the limit lowered to nothing: refused at once (this process forgets its cache)
    assert gateway.admin("/key/update", {"name": "carol", "limit": 0}).status_code == 200
    assert _ask(gateway.client(secret)) == "402"
    gateway.admin("/key/update", {"name": "carol", "limit": None})
    assert _ask(gateway.client(secret)) == "ok"
    rotated = gateway.admin("/key/regenerate", {"name": "carol"}).json()["key"]
    assert _ask(gateway.client(secret)) == "401" and _ask(gateway.client(rotated)) == "ok"
    assert gateway.admin("/key/delete", {"name": "carol"}).json()["revoked"] is True
    assert _ask(gateway.client(rotated)) == "401"
    # the admin routes take the admin key only, and name a bad field
    assert gateway.admin("/key/list", key="sk-test").status_code == 401
    bad = gateway.admin("/key/generate", {"name": "dave", "rpm_limit": 0})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "rpm_limit"
    assert gateway.admin("/key/generate", {"name": "tester"}).status_code == 409
    assert gateway.admin("/key/info?name=nobody", None).status_code == 404


def test_a_key_made_in_one_process_holds_in_another_within_the_cache_time(
        gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the cache's time shortened (read at each lookup): the same lapse, in a fifth of the wait
    monkeypatch.setattr(keys, "CACHE_SECONDS", CACHE_SECONDS / 5)
    port = free_port()
    config = parse_config(_config(gateway.upstream, gateway.db), base=tmp_path)
    other, thread = _serve(create_app(config, clock=gateway.clock), port)
    try:
        elsewhere = local_http.openai_client(base_url=f"http://127.0.0.1:{port}/v1",
                                             api_key="sk-test", max_retries=0)
        assert _ask(elsewhere) == "ok"
        secret = gateway.admin("/key/generate", {"name": "erin"}).json()["key"]
        elsewhere = local_http.openai_client(base_url=f"http://127.0.0.1:{port}/v1",
                                             api_key=secret, max_retries=0)
        deadline = time.monotonic() + keys.CACHE_SECONDS + 2
        while _ask(elsewhere) != "ok":  # unknown there until its cache of the key lapses
            assert time.monotonic() < deadline
            time.sleep(0.1)
        gateway.admin("/key/delete", {"name": "erin"})
        deadline = time.monotonic() + keys.CACHE_SECONDS + 2
        while _ask(elsewhere) != "401":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        other.should_exit = True
        thread.join(timeout=10)


def test_rate_limits_answer_429_with_retry_after_until_the_minute_ends(
        gateway: Gateway) -> None:
    client = gateway.client("sk-paced")
    gateway.clock.now = EVE + 15  # 45 s before the minute ends
    assert [_ask(client) for _ in range(3)] == ["ok"] * 3
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="small", max_tokens=5,
                                       messages=[{"role": "user", "content": "once more"}])
    assert err.value.response.headers["retry-after"] == "45"
    assert "3 requests per minute" in err.value.message and err.value.code == (
        "rate_limit_exceeded")
    gateway.clock.now = EVE + 60  # the next minute
    assert _ask(client) == "ok"
    # tokens per minute: two long prompts' ~1,230 tokens fill its 1,000, the third waits
    gateway.clock.now = EVE + 120
    assert [_ask(client, "word " * 600) for _ in range(2)] == ["ok", "ok"]
    with pytest.raises(openai.RateLimitError, match="1000 tokens per minute"):
        client.chat.completions.create(model="small", max_tokens=5,
                                       messages=[{"role": "user", "content": "once more"}])
    with sqlite3.connect(gateway.db) as conn:  # a refusal is charged nothing, no row
        assert conn.execute("SELECT COUNT(*) FROM requests WHERE key_name = 'paced'"
                            ).fetchone() == (6,)


def test_parallel_requests_past_the_limit_are_refused(gateway: Gateway) -> None:
    local_http.post(f"{gateway.upstream}/control", json={"model": "small", "fault": "none",
                                                    "latency": 1.0})
    client = gateway.client("sk-narrow")
    with ThreadPoolExecutor(4) as pool:
        outcomes = sorted(pool.map(lambda i: _ask(client, f"at once {i}"), range(4)))
    assert outcomes == ["429", "429", "ok", "ok"]
    local_http.post(f"{gateway.upstream}/control", json={"model": "small", "fault": "none",
                                                    "latency": 0.0})
    assert _ask(client) == "ok"  # the two answered: room again


@pytest.mark.parametrize(("key", "next_period"), [
    ("sk-daily", EVE + 60),  # 2026-04-01 00:00:00 UTC: a new day
    ("sk-monthly", EVE + 60),  # and a new month
])
def test_a_budget_resets_when_its_utc_period_ends(gateway: Gateway, key: str,
                                                  next_period: float) -> None:
    client = gateway.client(key)
    outcomes = [_ask(client) for _ in range(6)]  # ~40 micro-dollars each, 200 a period
    assert outcomes[0] == "ok" and outcomes[-1] == "402"
    gateway.clock.now = next_period - 1  # 23:59:59: still the same period
    assert _ask(client) == "402"
    gateway.clock.now = next_period
    assert _ask(client) == "ok"


def test_each_end_user_has_a_budget_and_a_rate_limit(gateway: Gateway) -> None:
    client = gateway.client("sk-test")
    gateway.clock.now = EVE + 3600  # 2026-04-01 00:59:00 UTC
    for i in range(5):  # 5 requests a minute for each user of the key
        assert _ask(client, "hi", user="user-a") == "ok", i
    assert _ask(client, "hi", user="user-a") == "429"
    assert _ask(client, "hi", user="user-b") == "ok"  # another user of the same key
    outcomes = []
    while "402" not in outcomes and len(outcomes) < 60:  # a minute apart: no rate limit
        gateway.clock.now += 60
        outcomes.append(_ask(client, user="user-a"))
    assert outcomes[0] == "ok" and outcomes[-1] == "402"  # user-a's $0.001 a day
    with pytest.raises(openai.APIStatusError, match="user:tester/user-a") as err:
        client.chat.completions.create(model="small", max_tokens=10, user="user-a",
                                       messages=[{"role": "user", "content": "hello there"}])
    assert err.value.status_code == 402
    assert _ask(client, user="user-b") == "ok" and _ask(client) == "ok"  # others go on
    gateway.clock.now += 86400  # the next day: user-a's budget resets
    assert _ask(client, user="user-a") == "ok"
    with sqlite3.connect(gateway.db) as conn:
        users = dict(conn.execute("SELECT user_name, SUM(cost_micros) FROM requests WHERE "
                                  "key_name = 'tester' GROUP BY user_name").fetchall())
        spent = dict(conn.execute("SELECT budget, SUM(spent_micros) FROM budget_usage "
                                  "GROUP BY budget").fetchall())
    assert spent["user:tester/user-a"] == users["user-a"]
    assert spent["user:tester/user-b"] == users["user-b"]


def test_spend_is_reported_by_key_user_model_and_day_as_json_and_csv(
        gateway: Gateway) -> None:
    import csv
    import io

    assert _ask(gateway.client("sk-test"), user="user-a") == "ok"
    assert _ask(gateway.client("sk-paced")) == "ok"
    gateway.clock.now = EVE + 60  # the next UTC day
    assert _ask(gateway.client("sk-test"), user="user-b") == "ok"
    report = gateway.admin("/spend/report?group_by=key,day&format=json").json()["data"]
    by = {(r["key"], r["day"]): r for r in report}
    assert set(by) == {("tester", "2026-03-31"), ("paced", "2026-03-31"),
                       ("tester", "2026-04-01")}
    with sqlite3.connect(gateway.db) as conn:
        spent = dict(conn.execute("SELECT key_name, SUM(cost_micros) FROM requests "
                                  "GROUP BY key_name").fetchall())
    assert sum(r["cost_micros"] for k, r in by.items() if k[0] == "tester") == spent["tester"]
    text = gateway.admin("/spend/report?group_by=user,model&format=csv").text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {(r["user"], r["model"]) for r in rows} == {("user-a", "small"),
                                                       ("user-b", "small"), ("", "small")}
    # an API key reads its own spend only; the admin routes stay closed to it
    own = local_http.get(f"{gateway.url}/spend/report?group_by=key",
                    headers={"Authorization": "Bearer sk-paced"}).json()["data"]
    assert [r["key"] for r in own] == ["paced"]
    bad = gateway.admin("/spend/report?group_by=team")
    assert bad.status_code == 400 and "team" in bad.json()["error"]["message"]
    assert local_http.get(f"{gateway.url}/spend/report").status_code == 401


def test_metrics_count_requests_spend_refusals_and_faults(gateway: Gateway) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    assert _ask(gateway.client("sk-test")) == "ok"
    assert _ask(gateway.client("sk-wrong")) == "401"
    gateway.clock.now = EVE + 15
    assert [_ask(gateway.client("sk-paced")) for _ in range(4)][-1] == "429"
    local_http.post(f"{gateway.upstream}/control", json={"model": "small", "fault": "bad_json",
                                                    "count": 1})
    assert _ask(gateway.client("sk-test")) == "502"
    assert local_http.get(f"{gateway.url}/metrics").status_code == 401  # not opened: admin key
    text = gateway.admin("/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def value(name: str, **labels: str) -> float:
        return sum(v for (n, found), v in samples.items() if n == name
                   and set(labels.items()) <= set(found))

    assert value("cost_envs_requests_total", status_code="200") == 4
    assert value("cost_envs_requests_total", status_code="429") == 1
    assert value("cost_envs_refusals_total", reason="auth") == 1
    assert value("cost_envs_refusals_total", reason="rate_limit") == 1
    assert value("cost_envs_upstream_faults_total", model="small", kind="unknown") == 1
    with sqlite3.connect(gateway.db) as conn:
        spent = conn.execute("SELECT SUM(cost_micros) FROM requests").fetchone()[0]
    assert value("cost_envs_spend_dollars_total") == pytest.approx(spent / 1e6)
    assert value("cost_envs_request_duration_seconds_count") == 7  # every request
    assert value("cost_envs_open_reservations") == 0
