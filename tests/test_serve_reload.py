"""``POST /admin/reload``: the routers reloaded without a signal, by a real server over HTTP.

One router file is saved at two operating points: at ``inf`` it sends every prompt to
the weak model, at 0 every prompt to the strong one, so a reload that took shows at once.
The module's tests share one server (one stand-in, one ``cost-envs serve``); each starts
from the router saved at ``inf`` and reloaded by the admin key.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import httpx
import local_http
import pytest
import yaml

from agents.routers import make_router, save_router
from agents.serve import LiveRouter
from agents.serve.config import hash_key
from agents.serve.processes import Launch, launched_together
from agents.serve.standin import free_port
from cost_envs.traces import example_traces

pytest.importorskip("fastapi", reason="the serve extra is not installed")

ADMIN = "sk-admin"
MAPPING = {"gpt-4.1-nano": "small", "gpt-4.1": "large"}
PROMPTS = ["What is 7 times 8?", "Prove that there are infinitely many primes, carefully.",
           "Name a colour."]


@pytest.fixture(scope="module")
def router():
    return make_router("logistic", "gpt-4.1-nano", "gpt-4.1").fit(example_traces())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, router):
    tmp_path = tmp_path_factory.mktemp("reload")
    save_router(tmp_path / "demo", router, math.inf)  # every prompt: the weak model
    up_port, port = free_port(), free_port()
    upstream, url = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{port}"
    config = {
        "storage": "sqlite:///ledger.db",
        "models": [{"name": name, "base_url": f"{upstream}/v1", "input_price": p,
                    "output_price": 4 * p} for name, p in (("small", 0.1), ("large", 2.0))],
        "routers": [{"name": "demo", "path": "demo", "models": MAPPING}],
        "budgets": {"keys": [{"name": "user", "key_sha256": hash_key("sk-user")}]},
        "server": {"admin_key_sha256": hash_key(ADMIN)},
    }
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(config))
    with launched_together(
            Launch(["-m", "agents.serve.standin", "--port", str(up_port), "--models",
                    "small,large"], f"{upstream}/v1/models"),
            Launch(["-m", "agents.cli", "serve", "--config", str(tmp_path / "serve.yaml"),
                    "--port", str(port)], f"{url}/health")):
        yield url, upstream, tmp_path / "demo"


@pytest.fixture
def served(server, router) -> tuple[str, str, Path]:
    """The module's server, serving the router saved at ``inf``: every prompt to the weak model."""
    url, _, path = server
    save_router(path, router, math.inf)
    answer = _reload(url)
    assert answer.status_code == 200, answer.text
    assert _decisions(url) == ["small"] * 3
    return server


def _decisions(url: str) -> list[str]:
    client = local_http.openai_client(base_url=f"{url}/v1", api_key="sk-user", max_retries=0)
    return [client.chat.completions.create(model="router-demo", max_tokens=2, messages=[
        {"role": "user", "content": p}]).model for p in PROMPTS]


def _reload(url: str, key: str | None = ADMIN) -> httpx.Response:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return local_http.post(f"{url}/admin/reload", headers=headers, timeout=60)


def test_the_admin_key_reloads_and_in_flight_requests_finish_on_the_old_router(
        served, router) -> None:
    url, upstream, path = served
    assert _decisions(url) == ["small"] * 3
    save_router(path, router, 0.0)  # retrained in place: every prompt to the strong model
    assert _decisions(url) == ["small"] * 3  # nothing reloads by itself
    # the next call to the weak model waits upstream until released: in flight for sure
    local_http.post(f"{upstream}/control", json={"model": "small", "fault": "hold", "count": 1})
    before = local_http.get(f"{upstream}/stats").json()["calls"].get("small", 0)
    slow: dict[str, str] = {}
    in_flight = threading.Thread(target=lambda: slow.setdefault("model", local_http.openai_client(
        base_url=f"{url}/v1", api_key="sk-user", max_retries=0).chat.completions.create(
        model="router-demo", max_tokens=2,
        messages=[{"role": "user", "content": PROMPTS[0]}]).model))
    in_flight.start()
    try:
        deadline = time.monotonic() + 60
        while (local_http.get(f"{upstream}/stats").json()["calls"].get("small", 0) == before
               and time.monotonic() < deadline):  # until it was routed and is upstream
            time.sleep(0.02)
        answer = _reload(url)  # while that request waits on the old router's choice
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"object": "reload", "routers": ["demo"]}
        offline = [MAPPING[LiveRouter.load(path).route(p).model] for p in PROMPTS]
        assert offline == ["large"] * 3 and _decisions(url) == offline
        assert in_flight.is_alive() and not slow  # it was in flight through the reload
    finally:
        local_http.post(f"{upstream}/control", json={"model": "small", "release": True})
        in_flight.join(timeout=60)
    assert slow["model"] == "small"  # routed before the swap, answered after it


@pytest.mark.parametrize("key", [None, "sk-user", "sk-wrong"])
def test_a_request_without_the_admin_key_is_refused_and_reloads_nothing(
        served, router, key: str | None) -> None:
    url, _, path = served
    save_router(path, router, 0.0)
    answer = _reload(url, key)
    assert answer.status_code == 401
    error = answer.json()["error"]
    assert error["param"] == "authorization" and "admin key" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert _decisions(url) == ["small"] * 3  # still the old router


def test_a_broken_router_file_leaves_the_old_router_serving(served) -> None:
    url, _, path = served
    broken = path.with_suffix(".json")
    broken.write_text("{ not json")
    answer = _reload(url)
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "reload_failed" and str(broken) in error["message"]
    assert "the old routers still serve" in error["message"]
    assert _decisions(url) == ["small"] * 3
