"""The stand-in upstream: OpenAI's client reads it, its token counts are real, faults fire."""

from __future__ import annotations

import threading
import time

import local_http
import openai
import pytest

from agents.serve.processes import launched
from agents.serve.standin import answer_words, count_prompt, free_port


@pytest.fixture(scope="module")
def standin():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with launched(["-m", "agents.serve.standin", "--port", str(port), "--models", "small,large",
                   "--fault", "large=500"], f"{base}/v1/models") as process:
        yield base
        process.kill()  # on SIGTERM it would wait 10 s for its 'timeout' fault's answer


def test_the_openai_client_reads_answers_and_streams(standin: str) -> None:
    client = local_http.openai_client(base_url=f"{standin}/v1", api_key="x", max_retries=0)
    assert [m.id for m in client.models.list()] == ["small", "large"]
    messages = [{"role": "user", "content": "two plus two is what"}]
    answer = client.chat.completions.create(model="small", messages=messages, max_tokens=5)
    assert answer.usage.prompt_tokens == count_prompt(messages) == 3 + 4 + 5
    assert answer.usage.completion_tokens == 5 == len(answer.choices[0].message.content.split())
    assert answer.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(model="small", messages=messages, max_tokens=50,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.split() == answer_words("small", messages, 50)
    assert chunks[-1].usage.completion_tokens == len(text.split()) == 8 + 5


def test_faults_are_injected_and_counted(standin: str) -> None:
    client = local_http.openai_client(base_url=f"{standin}/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="large", messages=messages)
    assert local_http.post(f"{standin}/control", json={"model": "large", "fault": "429",
                                                  "count": 1}).status_code == 200
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="large", messages=messages)
    client.chat.completions.create(model="large", messages=messages)  # the count is spent
    local_http.post(f"{standin}/control", json={"model": "small", "fault": "timeout", "count": 1})
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.5).chat.completions.create(model="small", messages=messages)
    # a held call is answered when released, not before
    local_http.post(f"{standin}/control", json={"model": "small", "fault": "hold", "count": 1})
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.3).chat.completions.create(model="small", messages=messages)
    local_http.post(f"{standin}/control", json={"model": "small", "fault": "hold", "count": 1})
    before = local_http.get(f"{standin}/stats").json()["calls"]["small"]
    held: dict[str, str] = {}
    waiting = threading.Thread(target=lambda: held.setdefault("answer", client.with_options(
        timeout=30).chat.completions.create(model="small", messages=messages).model))
    waiting.start()
    while local_http.get(f"{standin}/stats").json()["calls"]["small"] == before:
        time.sleep(0.01)
    assert waiting.is_alive() and "answer" not in held
    local_http.post(f"{standin}/control", json={"model": "small", "release": True})
    waiting.join(timeout=30)
    assert held == {"answer": "small"}
    stats = local_http.get(f"{standin}/stats").json()
    assert stats["calls"]["large"] == 3 and stats["answered"]["large"] == 1
    bad = local_http.post(f"{standin}/control", json={"model": "large", "fault": "fire"})
    assert bad.status_code == 400 and "fault: expected one of" in bad.json()["error"]["message"]
