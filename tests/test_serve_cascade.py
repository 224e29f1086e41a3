"""A cascade router served: the weak call first, the offline cascade's decision, budgets exact.

The stand-in upstream replays the packaged example logs (``--replay``): each model answers
a logged prompt with its logged answer, so the cascade reads what it was scored on
offline and its served decisions can be compared with the offline scorer's, prompt by
prompt. OpenAI's client talks to a real ``cost-envs serve`` process; the ledger is read
from its SQLite file.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import local_http
import numpy as np
import openai
import pytest
import yaml

from agents.routers import calibrate, make_router, save_router
from agents.serve.config import hash_key, load_config
from agents.serve.inputs import prompt_bound
from agents.serve.processes import Launch, launched_together
from agents.serve.standin import free_port
from cost_envs.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "cost_envs" / "data" / "example_traces.jsonl"
WEAK, STRONG = "gpt-4.1-nano", "gpt-4.1"
PRICES = {WEAK: (0.1, 0.4), STRONG: (2.0, 8.0)}
MAX_TOKENS = 256
#: The "tight" key's budget, micro-dollars: about two escalations (a strong worst case ~3,000).
TIGHT = 4000


@dataclass
class Served:
    url: str
    upstream: str
    db: Path
    config: Path
    prompts: list[str]
    offline: list[str]  # the offline cascade's model per prompt
    answers: dict[tuple[str, str], str]  # (model, prompt) -> logged answer

    def client(self, key: str = "sk-test") -> openai.OpenAI:
        return local_http.openai_client(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def rows(self) -> dict[str, dict]:
        with sqlite3.connect(self.db) as conn:
            conn.row_factory = sqlite3.Row
            return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM requests")}

    def usage(self) -> dict[str, tuple[int, int]]:
        with sqlite3.connect(self.db) as conn:
            return {b: (s, r) for b, s, r in conn.execute(
                "SELECT budget, spent_micros, reserved_micros FROM budget_usage")}

    def fault(self, model: str, fault: str) -> None:
        assert local_http.post(f"{self.upstream}/control",
                          json={"model": model, "fault": fault}).status_code == 200

    def worst(self, model: str, prompt: str) -> int:
        """A call's worst case in micro-dollars, as the server reserves it."""
        config = load_config(self.config).models[model]
        bound = prompt_bound([{"role": "user", "content": prompt}])
        return config.cost_micros(bound, MAX_TOKENS)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("cascade")
    data = load_traces(TRACES, token_counter="approx").select_models([WEAK, STRONG])
    train, test = data.split(seed=0, test_fraction=0.5)
    router = make_router("cascade", WEAK, STRONG, n_features=64).fit(train)
    point, _ = calibrate(router, train, share=0.5)
    save_router(tmp / "cascade", router, point,
                {"training": {"token_counter": train.token_counter}})
    once = Counter(data.prompts)  # a prompt logged twice would replay one of two answers
    keep = [i for i, p in enumerate(test.prompts) if once[p] == 1][:40]
    test = test.subset(keep)
    offline = np.array(test.models)[router.route(test, point)].tolist()
    answers = {(m, p): t for p, row in zip(test.prompts, test.response_texts(), strict=True)
               for m, t in zip(test.models, row, strict=True)}
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    config = {
        "storage": "sqlite:///ledger.db",
        "models": [{"name": name, "base_url": f"{upstream}/v1", "input_price": p_in,
                    "output_price": p_out, "context": 8192, "max_output_tokens": MAX_TOKENS,
                    "timeout": 5} for name, (p_in, p_out) in PRICES.items()],
        "routers": [{"name": "casc", "path": str(tmp / "cascade")}],
        "budgets": {"request": {"default": 0.05, "max": 0.5},
                    "keys": [{"name": "tester", "key_sha256": hash_key("sk-test")},
                             {"name": "tight", "key_sha256": hash_key("sk-tight"),
                              "limit": TIGHT / 1e6}]},
        "server": {"retries": 0, "backoff": 0.01},
    }
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    with launched_together(
            Launch(["-m", "agents.serve.standin", "--port", str(up_port), "--models",
                    f"{WEAK},{STRONG}", "--replay", str(TRACES)], f"{upstream}/v1/models"),
            Launch(["-m", "agents.cli", "serve", "--config", str(path), "--port", str(port)],
                   f"http://127.0.0.1:{port}/health", cwd=ROOT)):
        yield Served(f"http://127.0.0.1:{port}", upstream, tmp / "ledger.db", path,
                     list(test.prompts), offline, answers)


def _ask(served: Served, prompt: str, key: str = "sk-test", **more: object):
    return served.client(key).chat.completions.with_raw_response.create(
        model="router-casc", max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": prompt}], **more)


def test_served_decisions_are_the_offline_cascades(served: Served) -> None:
    assert set(served.offline) == {WEAK, STRONG}  # both decisions are tested
    for prompt, expected in zip(served.prompts, served.offline, strict=True):
        raw = _ask(served, prompt)
        answer = raw.parse()
        assert answer.model == expected, prompt
        assert answer.choices[0].message.content == served.answers[(expected, prompt)]
        rows = served.rows()
        weak = rows[answer.id.removesuffix(".escalation")]
        assert weak["model"] == WEAK and weak["outcome"] == "ok"  # the weak call, always
        total = weak["cost_micros"]
        if expected == STRONG:  # escalated: the strong call is a row of its own
            assert raw.headers["x-cost-envs-cascade"] == "escalated"
            assert answer.id.endswith(".escalation")
            strong = rows[answer.id]
            assert strong["model"] == STRONG and strong["outcome"] == "ok"
            total += strong["cost_micros"]
        else:
            assert raw.headers["x-cost-envs-cascade"] == "kept"
            assert f"{answer.id}.escalation" not in rows
        assert raw.headers["x-cost-envs-cost-micros"] == str(total)
    assert served.usage()["key:tester"][1] == 0  # nothing left reserved


def test_a_stream_gets_the_kept_answer(served: Served) -> None:
    client = served.client()
    for expected in (WEAK, STRONG):
        prompt = served.prompts[served.offline.index(expected)]
        chunks = list(client.chat.completions.create(
            model="router-casc", max_tokens=MAX_TOKENS, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": prompt}]))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == served.answers[(expected, prompt)]
        assert {c.model for c in chunks} == {expected} and chunks[-1].usage is not None
        row = served.rows()[chunks[0].id]
        assert row["model"] == expected and row["completion_tokens"] == (
            chunks[-1].usage.completion_tokens)
    plain = list(client.chat.completions.create(
        model="router-casc", max_tokens=MAX_TOKENS, stream=True,
        messages=[{"role": "user", "content": served.prompts[served.offline.index(WEAK)]}]))
    assert all(c.usage is None for c in plain)  # usage only when asked for


def test_an_idempotent_retry_gets_the_cascades_answer_streamed_or_not(
        served: Served) -> None:
    client = served.client()
    for expected in (WEAK, STRONG):
        prompt = served.prompts[served.offline.index(expected)]
        for stream in (False, True):
            key = {"Idempotency-Key": f"cascade-{expected}-{stream}"}
            calls = len(served.rows())

            def ask(key: dict[str, str] = key, stream: bool = stream,
                    prompt: str = prompt) -> str:
                answer = client.chat.completions.create(
                    model="router-casc", max_tokens=MAX_TOKENS, stream=stream,
                    extra_headers=key, messages=[{"role": "user", "content": prompt}])
                if not stream:
                    return answer.choices[0].message.content
                return "".join(c.choices[0].delta.content or "" for c in answer if c.choices)

            first = ask()
            made = len(served.rows()) - calls
            assert ask() == first == served.answers[(expected, prompt)]  # replayed
            assert len(served.rows()) - calls == made  # charged once


def test_an_escalation_that_does_not_fit_keeps_the_weak_answer(served: Served) -> None:
    prompt = served.prompts[served.offline.index(STRONG)]
    weak_worst, strong_worst = served.worst(WEAK, prompt), served.worst(STRONG, prompt)
    assert strong_worst > weak_worst
    # the request's budget: the weak call fits, the weak call and the strong one do not
    raw = _ask(served, prompt, extra_headers={"X-Cost-Envs-Budget": f"{weak_worst / 1e6:.6f}"})
    answer = raw.parse()
    assert answer.model == WEAK and raw.headers["x-cost-envs-cascade"] == "kept:budget"
    assert "X-Cost-Envs-Budget" in raw.headers["x-cost-envs-cascade-reason"]
    rows = served.rows()
    refused = rows[f"{answer.id}.escalation"]
    assert (refused["outcome"], refused["cost_micros"], refused["model"]) == (
        "refused_budget", 0, STRONG)
    assert raw.headers["x-cost-envs-cost-micros"] == str(rows[answer.id]["cost_micros"])
    # the key's budget: escalations fit until they no longer do, then weak calls alone
    seen = Counter()
    for _ in range(20):
        try:
            raw = _ask(served, prompt, key="sk-tight")
        except openai.APIStatusError as err:  # not even the weak call fits any more
            assert err.status_code == 402 and "key:tight" in err.message
            seen["402"] += 1
            continue
        seen[raw.headers["x-cost-envs-cascade"]] += 1
        if raw.headers["x-cost-envs-cascade"] == "kept:budget":
            assert "key:tight" in raw.headers["x-cost-envs-cascade-reason"]
            break
    assert seen["escalated"] >= 1 and seen["kept:budget"] >= 1
    spent, reserved = served.usage()["key:tight"]
    rows = [r for r in served.rows().values() if r["key_name"] == "tight"]
    assert spent == sum(r["cost_micros"] for r in rows) <= TIGHT and reserved == 0


def test_upstream_faults_fall_back_or_keep_the_weak_answer(served: Served) -> None:
    prompt = served.prompts[served.offline.index(STRONG)]
    served.fault(STRONG, "500")  # the escalation fails: the weak answer is kept
    raw = _ask(served, prompt)
    assert raw.parse().model == WEAK
    assert raw.headers["x-cost-envs-cascade"] == "kept:upstream_failed"
    assert served.rows()[f"{raw.parse().id}.escalation"]["outcome"] == "upstream_failed"
    served.fault(STRONG, "none")
    served.fault(WEAK, "500")  # no weak answer: the strong model answers, as a fallback
    raw = _ask(served, served.prompts[served.offline.index(WEAK)])
    assert raw.parse().model == STRONG and "x-cost-envs-cascade" not in raw.headers
    served.fault(WEAK, "none")


def test_scored_cascade_calls_export_as_traces(served: Served, tmp_path) -> None:
    import subprocess
    import sys

    client = httpx.Client(headers={"Authorization": "Bearer sk-test"})
    scored = 0
    for prompt, expected in zip(served.prompts, served.offline, strict=True):
        if expected != STRONG:
            continue
        strong = _ask(served, prompt).parse().id  # both calls of an escalation, scored
        for ident, score in ((strong.removesuffix(".escalation"), 0.0), (strong, 1.0)):
            answer = client.post(f"{served.url}/v1/feedback", json={"id": ident, "score": score})
            assert answer.status_code == 200, answer.text
        scored += 1
    out = tmp_path / "live.jsonl"
    subprocess.run([sys.executable, "-m", "agents.cli", "serve", "export", "--config",
                    str(served.config), "--out", str(out), "--models", WEAK, STRONG],
                   check=True, capture_output=True, cwd=ROOT)
    data = load_traces(out)
    assert data.models == (WEAK, STRONG) and data.n_queries == scored
    weak, strong = data.model_index(WEAK), data.model_index(STRONG)
    assert data.scores[:, weak].tolist() == [0.0] * scored
    assert data.scores[:, strong].tolist() == [1.0] * scored
    assert {r[weak] for r in data.responses} <= {served.answers[(WEAK, p)]
                                                 for p in served.prompts}
