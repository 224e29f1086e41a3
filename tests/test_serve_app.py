"""``cost-envs serve`` as a client sees it: OpenAI's client, a real server, a real upstream.

The stand-in upstream (``python -m agents.serve.standin``) and the server (``python -m
agents.cli serve``) run as processes on 127.0.0.1; the ledger is read from its SQLite file.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import httpx
import local_http
import openai
import pytest
import yaml
from serve_load_client import run_load

from agents import cli
from agents.serve import LiveRouter
from agents.serve.config import hash_key
from agents.serve.processes import Launch, launched_together
from agents.serve.standin import free_port

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "cost_envs" / "data" / "example_traces.jsonl"
PRICES = {"small": (0.1, 0.4), "medium": (0.4, 1.6), "large": (2.0, 8.0)}
#: The load test's key budget, micro-dollars: about half of its 200 calls (~8 each).
LOAD_LIMIT = 800


@dataclass
class Served:
    url: str
    upstream: str
    db: Path
    router: Path

    def client(self, key: str = "sk-test", **options: object) -> openai.OpenAI:
        return local_http.openai_client(base_url=f"{self.url}/v1", api_key=key, max_retries=0,
                                        **options)

    def rows(self) -> list[dict]:
        with sqlite3.connect(self.db) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute("SELECT * FROM requests")]

    def usage(self) -> dict[str, tuple[int, int]]:
        with sqlite3.connect(self.db) as conn:
            return {b: (s, r) for b, s, r in conn.execute(
                "SELECT budget, spent_micros, reserved_micros FROM budget_usage")}

    def fault(self, model: str, fault: str, **more: object) -> None:
        answer = local_http.post(f"{self.upstream}/control", json={"model": model, "fault": fault,
                                                              **more})
        assert answer.status_code == 200


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("serve")
    router = tmp / "demo"
    # the router file the command writes (in this process: the server is what runs apart)
    assert cli.main(["route", "train", "--data", str(TRACES), "--weak", "gpt-4.1-nano",
                     "--strong", "gpt-4.1", "--save", str(router), "--resamples", "10"]) == 0
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    models = [{"name": name, "base_url": f"{upstream}/v1", "input_price": p_in,
               "output_price": p_out, "context": 4096, "max_output_tokens": 256, "timeout": 2}
              for name, (p_in, p_out) in PRICES.items()]
    models.append({"name": "dead", "base_url": f"http://127.0.0.1:{free_port()}/v1",
                   "input_price": 0.01, "output_price": 0.01, "timeout": 2})
    # the stand-in's large model with a short timeout, for the test that waits one out
    models.append({"name": "brief", "upstream_name": "large", "base_url": f"{upstream}/v1",
                   "input_price": PRICES["large"][0], "output_price": PRICES["large"][1],
                   "context": 4096, "max_output_tokens": 256, "timeout": 0.5})
    config = {
        "storage": "sqlite:///ledger.db",
        "models": models,
        "routers": [{"name": "cheap", "model": "small", "fallbacks": ["medium"]},
                    {"name": "best", "model": "large", "fallbacks": ["medium", "small"]},
                    {"name": "hasty", "model": "brief", "fallbacks": ["medium", "small"]},
                    {"name": "deadfirst", "model": "dead", "fallbacks": ["small"]},
                    {"name": "demo", "path": str(router),
                     "models": {"gpt-4.1-nano": "small", "gpt-4.1": "large"}}],
        "budgets": {"request": {"default": 0.05, "max": 0.5},
                    "organisations": [{"name": "lab", "limit": 100}],
                    "keys": [{"name": "tester", "key_sha256": hash_key("sk-test"),
                              "organisation": "lab"},
                             {"name": "loader", "key_sha256": hash_key("sk-load"),
                              "limit": LOAD_LIMIT / 1e6},
                             {"name": "other", "key_sha256": hash_key("sk-other")},
                             {"name": "poor", "key_sha256": hash_key("sk-poor"),
                              "limit": 0.000005}]},
        "server": {"retries": 1, "backoff": 0.01},
    }
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    with launched_together(
            Launch(["-m", "agents.serve.standin", "--port", str(up_port), "--latency", "0.005"],
                   f"{upstream}/v1/models"),
            Launch(["-m", "agents.cli", "serve", "--config", str(path), "--port", str(port)],
                   f"http://127.0.0.1:{port}/health", cwd=ROOT)) as (standin, _):
        try:
            yield Served(f"http://127.0.0.1:{port}", upstream, tmp / "ledger.db", router)
        finally:  # killed: on SIGTERM it would wait for its 'timeout' fault's answer
            standin.kill()


def _cost(model: str, prompt_tokens: int, completion_tokens: int) -> int:
    import math

    p_in, p_out = PRICES[model]
    return math.ceil(round(p_in * prompt_tokens + p_out * completion_tokens, 9))


def test_a_round_trip_is_answered_and_charged_its_usage(served: Served) -> None:
    client = served.client()
    assert {"cheap", "best", "router-demo", "small"} <= {m.id for m in client.models.list()}
    raw = client.chat.completions.with_raw_response.create(
        model="cheap", messages=[{"role": "user", "content": "what is two plus two"}],
        max_tokens=12, extra_headers={"Idempotency-Key": "round-trip-1"})
    answer = raw.parse()
    assert answer.model == "small" and answer.choices[0].message.content.startswith("[small]")
    cost = _cost("small", answer.usage.prompt_tokens, answer.usage.completion_tokens)
    assert raw.headers["x-cost-envs-cost-micros"] == str(cost)
    row = next(r for r in served.rows() if r["idempotency_key"] == "tester|round-trip-1")
    assert (row["model"], row["outcome"], row["cost_micros"]) == ("small", "ok", cost)
    assert row["prompt_tokens"] == answer.usage.prompt_tokens and row["key_name"] == "tester"
    assert row["reserved_micros"] >= cost  # the worst case was reserved
    # a client's retry with the key is answered from the first attempt, charged once
    again = client.chat.completions.with_raw_response.create(
        model="cheap", messages=[{"role": "user", "content": "what is two plus two"}],
        max_tokens=12, extra_headers={"Idempotency-Key": "round-trip-1"})
    assert again.headers["x-cost-envs-replayed"] == "true"
    assert again.parse().model_dump() == answer.model_dump()
    assert [r["id"] for r in served.rows() if r["key_name"] == "tester"
            and r["idempotency_key"] == "tester|round-trip-1"] == [row["id"]]
    # the same Idempotency-Key of another API key is another request
    other = served.client("sk-other").chat.completions.create(
        model="cheap", messages=[{"role": "user", "content": "x"}], max_tokens=1,
        extra_headers={"Idempotency-Key": "round-trip-1"})
    assert other.id != answer.id


def test_a_stream_is_relayed_and_charged_its_usage(served: Served) -> None:
    client = served.client()
    messages = [{"role": "user", "content": "count the words of this stream please"}]
    chunks = list(client.chat.completions.create(
        model="best", messages=messages, max_tokens=30, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[large]") and chunks[-1].usage is not None
    usage = chunks[-1].usage
    assert usage.completion_tokens == len(text.split())
    row = next(r for r in served.rows() if r["response"] == text)
    assert row["cost_micros"] == _cost("large", usage.prompt_tokens, usage.completion_tokens)
    plain = list(client.chat.completions.create(model="best", messages=messages, stream=True))
    assert all(c.usage is None for c in plain)  # usage only when asked for


def test_a_stream_is_charged_before_its_end_reaches_the_client(served: Served) -> None:
    """At ``[DONE]`` (the connection still open) the stream's row is already settled."""
    for i in range(20):
        key = f"stream-end-{i}"
        with local_http.stream("POST", f"{served.url}/v1/chat/completions", json={
                "model": "cheap", "stream": True, "max_tokens": 8,
                "messages": [{"role": "user", "content": f"stream number {i}"}]},
                headers={"Authorization": "Bearer sk-test", "Idempotency-Key": key}) as reply:
            for line in reply.iter_lines():
                if line == "data: [DONE]":
                    rows = [r for r in served.rows() if r["idempotency_key"] == f"tester|{key}"]
                    assert [r["outcome"] for r in rows] == ["ok"], (i, rows)
                    break
            else:
                raise AssertionError(f"stream {i} ended without [DONE]")


def test_the_router_decides_as_offline(served: Served) -> None:
    live = LiveRouter.load(served.router)
    mapped = {"gpt-4.1-nano": "small", "gpt-4.1": "large"}
    client = served.client()
    prompts = ["What is 7 times 8?", "Prove that there are infinitely many primes, carefully.",
               "Elif has 20 stamps and buys 24 more. How many stamps does Elif have now?"]
    seen = set()
    for threshold in (0.0, 0.5, 1.0):
        for prompt in prompts:
            answer = client.chat.completions.create(
                model=f"router-demo-{threshold}", max_tokens=5,
                messages=[{"role": "user", "content": prompt}])
            expected = mapped[live.route(prompt, point=threshold).model]
            assert answer.model == expected
            seen.add(answer.model)
    assert seen == {"small", "large"}  # the thresholds span both models


def _refused(served: Served, call) -> openai.APIStatusError:
    before = (len(served.rows()), served.usage())
    with pytest.raises(openai.APIStatusError) as err:
        call()
    assert 400 <= err.value.status_code < 500
    body = err.value.body
    assert set(body) >= {"message", "type", "param", "code"}  # OpenAI's error shape
    after_rows = [r for r in served.rows()[before[0]:] if r["cost_micros"]]
    assert not after_rows and served.usage() == before[1]  # nothing charged
    return err.value


@pytest.mark.parametrize(("name", "status", "field"), [
    ("malformed JSON", 400, "body: expected a JSON object, got malformed JSON"),
    ("missing messages", 400, "messages: expected a non-empty list"),
    ("unknown model", 404, "model: expected one of"),
    ("negative budget", 400, "X-Cost-Envs-Budget: expected a number of dollars in "
                             "[0, 1000000], got '-1'"),
    ("non-numeric budget", 400, "X-Cost-Envs-Budget: expected a number of dollars in "
                                "[0, 1000000], got 'ten'"),
    ("bad body budget", 400, "cost_envs_budget: expected a number of dollars in [0, 1000000]"),
    ("oversized body", 413, "body: expected at most 1000000 bytes"),
    ("wrong key", 401, "authorization: incorrect API key"),
    ("no key", 401, "authorization: expected the header"),
    ("bad max_tokens", 400, "max_tokens: expected an integer"),
])
def test_bad_input_is_an_openai_shaped_4xx_naming_the_field(
        served: Served, name: str, status: int, field: str) -> None:
    client = served.client()
    ok = [{"role": "user", "content": "hi"}]
    calls = {
        "missing messages": lambda: client.chat.completions.create(model="cheap", messages=[]),
        "unknown model": lambda: client.chat.completions.create(model="gpt-5", messages=ok),
        "negative budget": lambda: client.chat.completions.create(
            model="cheap", messages=ok, extra_headers={"X-Cost-Envs-Budget": "-1"}),
        "non-numeric budget": lambda: client.chat.completions.create(
            model="cheap", messages=ok, extra_headers={"X-Cost-Envs-Budget": "ten"}),
        "bad body budget": lambda: client.chat.completions.create(
            model="cheap", messages=ok, extra_body={"cost_envs_budget": "much"}),
        "oversized body": lambda: client.chat.completions.create(
            model="cheap", messages=[{"role": "user", "content": "x" * 1_000_001}]),
        "wrong key": lambda: served.client("sk-wrong").chat.completions.create(
            model="cheap", messages=ok),
        "bad max_tokens": lambda: client.chat.completions.create(model="cheap", messages=ok,
                                                                 max_tokens=0),
    }
    if name in ("no key", "malformed JSON"):  # what OpenAI's client cannot send
        before = (len(served.rows()), served.usage())
        headers = {} if name == "no key" else {"Authorization": "Bearer sk-test"}
        content = b'{"model": "cheap", "messages": [{"role": "user", "content": "hi"}]'
        answer = local_http.post(f"{served.url}/v1/chat/completions", headers=headers,
                            content=content + (b"}" if name == "no key" else b""))
        assert answer.status_code == status and field in answer.json()["error"]["message"]
        assert (len(served.rows()), served.usage()) == before
        return
    err = _refused(served, calls[name])
    assert err.status_code == status and field in err.body["message"]


def test_a_call_that_cannot_fit_is_downgraded_or_refused_naming_the_budget(
        served: Served) -> None:
    client = served.client()
    ok = [{"role": "user", "content": "a question"}]
    raw = client.chat.completions.with_raw_response.create(
        model="best", messages=ok, max_tokens=100, extra_headers={"X-Cost-Envs-Budget": "0.0001"})
    assert raw.headers["x-cost-envs-model"] == "small"  # large and medium do not fit $0.0001
    err = _refused(served, lambda: client.chat.completions.create(
        model="best", messages=ok, max_tokens=100, extra_headers={"X-Cost-Envs-Budget": "0"}))
    assert err.status_code == 402 and "X-Cost-Envs-Budget" in err.body["message"]
    err = _refused(served, lambda: served.client("sk-poor").chat.completions.create(
        model="cheap", messages=ok, max_tokens=100))
    assert err.status_code == 402 and "budget 'key:poor' exceeded" in err.body["message"]


def test_upstream_faults_retry_then_fall_back(served: Served) -> None:
    client = served.client()
    ok = [{"role": "user", "content": "are you there"}]
    served.fault("large", "500", count=1)  # one retry absorbs it
    assert client.chat.completions.create(model="best", messages=ok).model == "large"
    served.fault("large", "429")  # every try: falls back to medium
    assert client.chat.completions.create(model="best", messages=ok).model == "medium"
    served.fault("large", "timeout")  # through brief, whose timeout is 0.5 s
    served.fault("medium", "500")
    assert client.chat.completions.create(model="hasty", messages=ok).model == "small"
    # a refused connection: nothing listens behind "dead"
    assert client.chat.completions.create(model="deadfirst", messages=ok).model == "small"
    served.fault("small", "500")
    served.fault("large", "500")
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="best", messages=ok)
    assert err.value.status_code == 502 and "no upstream could serve" in err.value.message
    for model in ("small", "medium", "large"):
        served.fault(model, "none")
    failed = [r for r in served.rows() if r["outcome"] == "upstream_failed"]
    assert failed and all(r["cost_micros"] == 0 for r in failed)


def test_budgets_hold_under_concurrent_clients(served: Served) -> None:
    outcomes = run_load(lambda worker: served.url, requests=200, clients=16, model="cheap")
    assert sum(outcomes.values()) == 200 and set(outcomes) <= {"ok", "402"}
    assert 50 <= outcomes["ok"] <= 150 and outcomes["402"] > 0  # about half fit
    rows = [r for r in served.rows() if r["key_name"] == "loader"]
    spent = sum(r["cost_micros"] for r in rows)
    assert spent <= LOAD_LIMIT and served.usage()["key:loader"] == (spent, 0)
    assert sum(r["outcome"] == "ok" for r in rows) == outcomes["ok"]
    assert LOAD_LIMIT - spent < 16  # refused only when the last worst case did not fit


def test_a_stream_the_client_leaves_is_settled(served: Served) -> None:
    import time

    served.fault("large", "none", latency=0.5)  # the answer comes after the client left
    body = {"model": "best", "stream": True, "max_tokens": 30,
            "messages": [{"role": "user", "content": "a stream nobody reads"}]}
    with pytest.raises(httpx.ReadTimeout), local_http.stream(
            "POST", f"{served.url}/v1/chat/completions", json=body,
            headers={"Authorization": "Bearer sk-test"}, timeout=0.2) as answer:
        next(answer.iter_lines())
    served.fault("large", "none", latency=0.0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with sqlite3.connect(served.db) as conn:
            held = conn.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]
        if held == 0:
            break
        time.sleep(0.1)
    assert held == 0  # settled (its worst case, or its usage), never left reserved
    row = [r for r in served.rows() if r["prompt"] == "a stream nobody reads"][-1]
    assert row["outcome"] in ("ok", "stream_incomplete") and row["cost_micros"] > 0
