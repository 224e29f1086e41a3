"""Money that holds whatever a request carries and whatever the upstream does (issue #35).

A real server (``python -m agents.cli serve``) in front of the stand-in upstream, whose
faults (``agents.serve.standin``) are injected per call; OpenAI's client where it can send
the request, raw HTTP where it cannot. Every test checks the ledger's rows and budgets, and
where money moved, against what the upstream billed (its ``/stats``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import local_http
import openai
import pytest
import yaml

from agents.serve.config import hash_key
from agents.serve.processes import Launch, launched_together
from agents.serve.standin import free_port

ROOT = Path(__file__).resolve().parents[1]
#: Dollars per 1M tokens (input, output): a token is a micro-dollar, two for output.
PRICES = {"small": (1.0, 2.0), "medium": (1.0, 2.0), "large": (1.0, 2.0)}
#: The capped key's limit, micro-dollars: a few tool calls' worth.
CAP = 20_000
ADMIN = "sk-admin"
TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": "looks things up " * 40,
    "parameters": {"type": "object", "properties": {
        f"arg_{j}": {"type": "string", "description": "an argument " * 10} for j in range(8)}}}}
    for i in range(6)]


@dataclass
class Money:
    url: str
    upstream: str
    db: Path
    silent_port: int

    def client(self, key: str = "sk-test", **options: object) -> openai.OpenAI:
        return local_http.openai_client(base_url=f"{self.url}/v1", api_key=key, max_retries=0,
                                        **options)

    def rows(self, **where: object) -> list[dict]:
        with sqlite3.connect(self.db) as conn:
            conn.row_factory = sqlite3.Row
            rows = [dict(r) for r in conn.execute("SELECT * FROM requests ORDER BY created_at")]
        return [r for r in rows if all(r[k] == v for k, v in where.items())]

    def spent(self, budget: str) -> tuple[int, int]:
        with sqlite3.connect(self.db) as conn:
            found = conn.execute("SELECT SUM(spent_micros), SUM(reserved_micros) FROM "
                                 "budget_usage WHERE budget = ?", (budget,)).fetchone()
        return int(found[0] or 0), int(found[1] or 0)

    def fault(self, model: str, fault: str, **more: object) -> None:
        answer = local_http.post(f"{self.upstream}/control", json={"model": model, "fault": fault,
                                                              **more})
        assert answer.status_code == 200, answer.text

    def billed(self, user: str) -> int:
        """What the upstream billed calls carrying ``user``, micro-dollars."""
        stats = local_http.get(f"{self.upstream}/stats").json()["billed"]
        return sum(math.ceil(PRICES[m][0] * b[0] + PRICES[m][1] * b[1])
                   for m, users in stats.items() for u, b in users.items() if u == user)


def _silent_listener(port: int, stop: threading.Event) -> None:
    """An upstream that reads a request and drops the connection, answering nothing."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(16)
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.recv(1 << 16)


@pytest.fixture(scope="module")
def money(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Money]:
    tmp = tmp_path_factory.mktemp("money")
    up_port, port, silent = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    models = [{"name": name, "base_url": f"{upstream}/v1", "input_price": p_in,
               "output_price": p_out, "context": 32_000, "max_output_tokens": 200,
               "timeout": 3} for name, (p_in, p_out) in PRICES.items()]
    models.append({"name": "silent", "base_url": f"http://127.0.0.1:{silent}/v1",
                   "input_price": 1.0, "output_price": 2.0, "timeout": 3})
    # the stand-in's small model with a short timeout, for the test that waits one out
    models.append({"name": "brief", "upstream_name": "small", "base_url": f"{upstream}/v1",
                   "input_price": 1.0, "output_price": 2.0, "context": 32_000,
                   "max_output_tokens": 200, "timeout": 0.5})
    config = {
        "storage": "sqlite:///ledger.db",
        "models": models,
        "routers": [{"name": "cheap", "model": "small", "fallbacks": ["medium"]},
                    {"name": "hasty", "model": "brief", "fallbacks": ["medium"]},
                    {"name": "alone", "model": "large"},
                    {"name": "silentfirst", "model": "silent", "fallbacks": ["medium"]}],
        "budgets": {"request": {"default": 1.0, "max": 1.0},
                    "organisations": [{"name": "lab", "limit": 10.0}],
                    "keys": [{"name": "tester", "key_sha256": hash_key("sk-test"),
                              "organisation": "lab"},
                             {"name": "capped", "key_sha256": hash_key("sk-capped"),
                              "limit": CAP / 1e6},
                             {"name": "liar", "key_sha256": hash_key("sk-liar"),
                              "limit": 0.05}]},
        "server": {"retries": 1, "backoff": 0.01, "admin_key_sha256": hash_key(ADMIN)},
    }
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    stop = threading.Event()
    listener = threading.Thread(target=_silent_listener, args=(silent, stop), daemon=True)
    listener.start()
    try:
        with launched_together(
                Launch(["-m", "agents.serve.standin", "--port", str(up_port)],
                       f"{upstream}/v1/models"),
                Launch(["-m", "agents.cli", "serve", "--config", str(path), "--port", str(port)],
                       f"http://127.0.0.1:{port}/health", cwd=ROOT)) as (standin, _):
            try:
                yield Money(f"http://127.0.0.1:{port}", upstream, tmp / "ledger.db", silent)
            finally:  # killed: on SIGTERM it would wait for its 'timeout' fault's answer
                standin.kill()
    finally:
        stop.set()
        listener.join()


def _chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_tool_definitions_are_reserved_and_no_limit_is_passed(money: Money) -> None:
    client = money.client("sk-capped")
    outcomes = []
    for i in range(12):  # each call bills ~2,400 tokens of tool definitions
        try:
            client.chat.completions.create(model="cheap", messages=_chat(f"use a tool {i}"),
                                           tools=TOOLS, tool_choice="auto", max_tokens=20,
                                           user="capped")
            outcomes.append("ok")
        except openai.APIStatusError as err:
            assert err.status_code == 402 and "key:capped" in err.message
            outcomes.append("402")
    assert "ok" in outcomes and outcomes[-1] == "402"  # the limit was reached
    rows = [r for r in money.rows(key_name="capped") if r["cost_micros"]]
    spent = sum(r["cost_micros"] for r in rows)
    assert money.spent("key:capped") == (spent, 0) and spent <= CAP
    assert spent == money.billed("capped") > 2_000 * len(rows)  # tools billed, tools charged
    assert all(r["reserved_micros"] >= r["cost_micros"] for r in rows)


def test_every_choice_is_reserved_and_unpriceable_parts_are_refused(money: Money) -> None:
    client = money.client()
    one = client.chat.completions.with_raw_response.create(
        model="alone", messages=_chat("one choice"), max_tokens=50)
    three = client.chat.completions.with_raw_response.create(
        model="alone", messages=_chat("one choice"), max_tokens=50, n=3)
    reserved = {r["id"]: r["reserved_micros"] for r in money.rows()}
    assert reserved[three.parse().id] == 3 * reserved[one.parse().id]
    before = len(money.rows())
    for part in ({"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}},
                 {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}):
        with pytest.raises(openai.BadRequestError, match=part["type"]):
            client.chat.completions.create(model="alone", messages=[{"role": "user", "content": [
                {"type": "text", "text": "what is this"}, part]}])
    assert len(money.rows()) == before  # refused before anything was reserved


def test_usage_above_the_reservation_is_charged_flagged_and_blocks_until_lifted(
        money: Money) -> None:
    client = money.client("sk-liar")
    money.fault("large", "lie", count=1, factor=50)
    raw = client.chat.completions.with_raw_response.create(
        model="alone", messages=_chat("how much was that"), max_tokens=10, user="liar")
    row = money.rows(id=raw.parse().id)[0]
    assert row["cost_micros"] == int(raw.headers["x-cost-envs-cost-micros"])
    assert row["cost_micros"] > row["reserved_micros"]  # charged as billed, never hidden
    assert row["over_reservation_micros"] == row["cost_micros"] - row["reserved_micros"]
    assert raw.headers["x-cost-envs-over-reservation-micros"] == str(
        row["over_reservation_micros"])
    with pytest.raises(openai.APIStatusError, match="'key:liar' is blocked") as err:
        client.chat.completions.create(model="alone", messages=_chat("again"), max_tokens=10)
    assert err.value.status_code == 402
    admin = {"Authorization": f"Bearer {ADMIN}"}
    listed = local_http.get(f"{money.url}/admin/budgets", headers=admin).json()["data"]
    assert next(b for b in listed if b["budget"] == "key:liar")["blocked_by"] == row["id"]
    assert local_http.post(f"{money.url}/admin/budgets/unblock", json={"budget": "key:liar"},
                      headers={"Authorization": "Bearer sk-liar"}).status_code == 401
    lifted = local_http.post(f"{money.url}/admin/budgets/unblock", json={"budget": "key:liar"},
                        headers=admin)
    assert lifted.json()["was_blocked"] is True
    money.fault("large", "overrun", count=1, factor=5)  # ignores the completion bound
    answer = client.chat.completions.create(model="alone", messages=_chat("and now"),
                                            max_tokens=10, user="liar")
    row = money.rows(id=answer.id)[0]
    assert row["cost_micros"] > row["reserved_micros"] and row["over_reservation_micros"] > 0
    assert money.spent("key:liar")[0] == money.billed("liar")  # every micro-dollar billed
    with pytest.raises(openai.APIStatusError, match="blocked"):
        client.chat.completions.create(model="alone", messages=_chat("x"), max_tokens=10)
    local_http.post(f"{money.url}/admin/budgets/unblock", json={"budget": "key:liar"},
                    headers=admin)


@pytest.mark.parametrize("fault", ["bad_json", "bad_shape", "cut", "reset"])
def test_an_answer_that_never_came_whole_is_charged_its_worst_case_and_falls_back(
        money: Money, fault: str) -> None:
    client = money.client()
    money.fault("small", fault, count=1)
    raw = client.chat.completions.with_raw_response.create(
        model="cheap", messages=_chat(f"a {fault} answer"), max_tokens=30)
    money.fault("small", "none")
    assert raw.headers["x-cost-envs-model"] == "medium"  # the fallback answered
    broken = money.rows(prompt=f"a {fault} answer", model="small")[0]
    assert broken["outcome"] == "upstream_unknown"  # the upstream may have billed it
    assert broken["cost_micros"] == broken["reserved_micros"] > 0


def test_a_fault_with_no_fallback_is_an_openai_error_and_an_idempotent_retry_is_replayed(
        money: Money) -> None:
    money.fault("large", "bad_json", count=1)
    headers = {"Authorization": "Bearer sk-test", "Idempotency-Key": "bad-json-1"}
    body = {"model": "alone", "messages": _chat("no fallback"), "max_tokens": 10}
    first = local_http.post(f"{money.url}/v1/chat/completions", json=body, headers=headers)
    assert first.status_code == 502 and first.headers["x-should-retry"] == "false"
    assert first.json()["error"]["code"] == "upstream_failed"
    again = local_http.post(f"{money.url}/v1/chat/completions", json=body, headers=headers)
    assert (again.status_code, again.json()) == (502, first.json())
    assert again.headers["x-cost-envs-replayed"] == "true"
    rows = money.rows(idempotency_key="tester|bad-json-1")
    assert len(rows) == 1 and rows[0]["outcome"] == "upstream_unknown"  # charged once


def test_a_stream_cut_mid_way_ends_with_an_error_event(money: Money) -> None:
    client = money.client()
    money.fault("large", "cut", count=1)
    seen = []
    with pytest.raises(openai.APIError, match="cut"):
        for chunk in client.chat.completions.create(
                model="alone", messages=_chat("a stream to cut"), max_tokens=30, stream=True):
            seen.append(chunk)
    assert len(seen) == 3  # what came before the cut was passed on
    row = money.rows(prompt="a stream to cut")[0]
    assert row["outcome"] == "upstream_stream_failed"
    assert row["cost_micros"] == row["reserved_micros"]
    # with an Idempotency-Key, a retry is told what happened: charged once, never a 409
    money.fault("large", "cut", count=1)
    body = {"model": "alone", "messages": _chat("an idempotent stream to cut"),
            "max_tokens": 30, "stream": True}
    headers = {"Authorization": "Bearer sk-test", "Idempotency-Key": "cut-1"}
    with local_http.stream("POST", f"{money.url}/v1/chat/completions", json=body,
                      headers=headers) as first:
        events = [line for line in first.iter_lines() if line.startswith("data:")]
    assert '"error"' in events[-1] and "[DONE]" not in events[-1]
    again = local_http.post(f"{money.url}/v1/chat/completions", json=body, headers=headers)
    assert again.status_code == 502
    assert again.json()["error"]["code"] == "upstream_stream_failed"
    assert len(money.rows(idempotency_key="tester|cut-1")) == 1


def test_a_stream_broken_before_its_first_event_falls_back(money: Money) -> None:
    client = money.client()
    money.fault("small", "bad_json", count=1)
    chunks = list(client.chat.completions.create(
        model="cheap", messages=_chat("a broken stream"), max_tokens=10, stream=True))
    assert chunks and chunks[0].model == "medium"
    outcomes = {r["model"]: r["outcome"] for r in money.rows(prompt="a broken stream")}
    assert outcomes == {"small": "upstream_unknown", "medium": "ok"}


def test_an_answer_without_usage_is_charged_its_worst_case(money: Money) -> None:
    money.fault("large", "no_usage", count=2)
    answer = money.client().chat.completions.create(model="alone", max_tokens=10,
                                                    messages=_chat("no usage"))
    row = money.rows(id=answer.id)[0]
    assert row["outcome"] == "ok_no_usage" and row["cost_micros"] == row["reserved_micros"]
    list(money.client().chat.completions.create(
        model="alone", max_tokens=10, messages=_chat("no usage streamed"), stream=True))
    row = money.rows(prompt="no usage streamed")[0]
    assert row["outcome"] == "ok_no_usage" and row["cost_micros"] == row["reserved_micros"]


def test_a_429_is_retried_after_its_retry_after_or_given_up_when_too_long(
        money: Money) -> None:
    client = money.client()
    money.fault("small", "429", count=1, retry_after=0.5)
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(
        model="cheap", messages=_chat("wait a little"), max_tokens=5)
    assert raw.headers["x-cost-envs-model"] == "small" and time.monotonic() - started >= 0.5
    money.fault("small", "429", count=1, retry_after=3600)  # beyond its timeout of 3 s
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(
        model="cheap", messages=_chat("do not wait an hour"), max_tokens=5)
    assert raw.headers["x-cost-envs-model"] == "medium" and time.monotonic() - started < 3
    assert money.rows(prompt="do not wait an hour", model="small")[0]["cost_micros"] == 0


def test_a_gateway_fault_of_the_upstream_falls_back_and_is_not_charged(money: Money) -> None:
    money.fault("small", "401", count=2)  # the gateway's key for it is wrong: every try
    answer = money.client().chat.completions.create(model="cheap", max_tokens=5,
                                                    messages=_chat("a wrong upstream key"))
    assert answer.model == "medium"
    row = money.rows(prompt="a wrong upstream key", model="small")[0]
    assert (row["outcome"], row["cost_micros"]) == ("upstream_failed", 0)


def test_the_request_budget_holds_across_fallbacks(money: Money) -> None:
    client = money.client()
    ask = {"model": "silentfirst", "max_tokens": 50, "messages": _chat("a budget for both")}
    raw = client.chat.completions.with_raw_response.create(**ask)
    worst = money.rows(id=raw.parse().id)[0]["reserved_micros"]  # medium's; silent's alike
    budget = 1.5 * worst / 1e6  # one worst case fits, two do not
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**{**ask, "messages": _chat("a budget for one")},
                                       extra_headers={"X-Cost-Envs-Budget": f"{budget:.6f}"})
    assert err.value.status_code == 502 and "left of the request budget" in err.value.message
    rows = money.rows(prompt="a budget for one")
    assert [r["model"] for r in rows] == ["silent"]  # medium did not fit what was left
    assert sum(r["cost_micros"] for r in rows) <= budget * 1e6


def test_a_timed_out_call_is_charged_its_worst_case_and_not_sent_again(money: Money) -> None:
    calls = local_http.get(f"{money.upstream}/stats").json()["calls"].get("small", 0)
    money.fault("small", "timeout", count=1)  # brief, the stand-in's small, waits 0.5 s
    answer = money.client().chat.completions.create(model="hasty", max_tokens=5,
                                                    messages=_chat("too slow"))
    assert answer.model == "medium"  # the fallback, not a second try of the same call
    assert local_http.get(f"{money.upstream}/stats").json()["calls"]["small"] == calls + 1
    row = money.rows(prompt="too slow", model="brief")[0]
    assert row["outcome"] == "upstream_unknown"
    assert row["cost_micros"] == row["reserved_micros"] > 0


def test_a_silent_upstream_is_charged_its_worst_case(money: Money) -> None:
    answer = money.client().chat.completions.create(model="silentfirst", max_tokens=5,
                                                    messages=_chat("anyone there"))
    assert answer.model == "medium"
    row = money.rows(prompt="anyone there", model="silent")[0]
    assert row["outcome"] == "upstream_unknown" and row["cost_micros"] > 0


@pytest.mark.parametrize(("name", "body"), [
    ("deep nesting", b'{"model": "cheap", "messages": ' + b"[" * 100_000 + b"]" * 100_000
     + b"}"),
    ("lone surrogate", b'{"model": "cheap", "messages": [{"role": "user", "content": '
     b'"\\ud800"}]}'),
    ("non-finite number", b'{"model": "cheap", "temperature": NaN, "messages": [{"role": '
     b'"user", "content": "hi"}]}'),
    ("huge number", b'{"model": "cheap", "temperature": 1e309, "messages": [{"role": '
     b'"user", "content": "hi"}]}'),
    ("bad stream_options", b'{"model": "cheap", "stream": true, "stream_options": "yes", '
     b'"messages": [{"role": "user", "content": "hi"}]}'),
])
def test_a_malformed_request_is_an_openai_shaped_400_charged_nothing(
        money: Money, name: str, body: bytes) -> None:
    before = len(money.rows())
    answer = local_http.post(f"{money.url}/v1/chat/completions", content=body,
                        headers={"Authorization": "Bearer sk-test"})
    assert answer.status_code == 400, (name, answer.text)
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
    assert len(money.rows()) == before


def test_every_route_needs_a_key_and_unknown_ones_answer_in_openai_shape(
        money: Money) -> None:
    for path in ("/v1/models",):
        assert local_http.get(f"{money.url}{path}").status_code == 401
        assert local_http.get(f"{money.url}{path}",
                         headers={"Authorization": "Bearer sk-test"}).status_code == 200
    for path in ("/docs", "/openapi.json", "/v1/nothing", "/redoc"):
        answer = local_http.get(f"{money.url}{path}", headers={"Authorization": "Bearer sk-test"})
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found" and path in answer.text
    wrong = local_http.get(f"{money.url}/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert local_http.get(f"{money.url}/health").status_code == 200  # opened by default


def test_an_oversized_body_is_refused_before_it_is_all_sent(money: Money) -> None:
    with socket.create_connection(("127.0.0.1", int(money.url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer sk-test\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        sent, answer = 0, b""
        sock.settimeout(0.05)
        while sent < 20_000_000 and b"\r\n\r\n" not in answer:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                answer += sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:  # the server closed the connection after its answer
                break
        sock.settimeout(5)
        try:
            while b"\r\n\r\n" not in answer:
                more = sock.recv(4096)
                if not more:
                    break
                answer += more
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 4_000_000  # refused near the limit (1 MB), not after 20 MB


def test_export_writes_the_documented_query_ids(money: Money, tmp_path: Path) -> None:
    answer = money.client().chat.completions.create(model="alone", max_tokens=5,
                                                    messages=_chat("score me"))
    assert local_http.post(f"{money.url}/v1/feedback", json={"id": answer.id, "score": 1.0},
                      headers={"Authorization": "Bearer sk-test"}).status_code == 200
    from agents.serve.export import export_traces
    from agents.serve.ledger import Ledger
    from agents.serve.storage import open_storage

    out = export_traces(Ledger(open_storage(f"sqlite:///{money.db}")), tmp_path / "t.jsonl")
    ids = {json.loads(line)["query_id"] for line in out.path.read_text().splitlines()}
    assert hashlib.sha256(b"score me").hexdigest() in ids
