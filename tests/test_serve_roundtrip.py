"""Live traffic replays: serve, score, export, load_traces, TraceRouting, retrain, reload.

The server's calls that the client scored are exported as a trace file; it loads as a
``TraceRouting-v0`` dataset; a router retrained on it replaces the served one on SIGHUP,
and the server's decisions then equal the retrained router's offline decisions.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import local_http
import numpy as np
import pytest
import yaml

from agents.serve import LiveRouter
from agents.serve.processes import Launch, launched_together
from agents.serve.standin import free_port
from cost_envs.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "cost_envs" / "data" / "example_traces.jsonl"


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "agents.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _prompts() -> list[str]:
    seen = dict.fromkeys(json.loads(line)["prompt"] for line in TRACES.open())
    return list(seen)[:40]


@pytest.mark.slow  # trains two routers in subprocesses (~100 s on a loaded 2-core machine)
def test_served_calls_export_replay_retrain_and_reload(tmp_path: Path) -> None:
    router = tmp_path / "live"
    _cli("route", "train", "--data", str(TRACES), "--weak", "gpt-4.1-nano", "--strong",
         "gpt-4.1", "--save", str(router), "--resamples", "10")
    up_port, port = free_port(), free_port()
    upstream, url = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{port}"
    config = {
        "storage": "sqlite:///ledger.db",
        "models": [{"name": "small", "base_url": f"{upstream}/v1", "input_price": 0.1,
                    "output_price": 0.4},
                   {"name": "large", "base_url": f"{upstream}/v1", "input_price": 2.0,
                    "output_price": 8.0}],
        "routers": [{"name": "live", "path": str(router),
                     "models": {"gpt-4.1-nano": "small", "gpt-4.1": "large"}}],
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    prompts = _prompts()
    short = float(np.median([len(p) for p in prompts]))
    with launched_together(
            Launch(["-m", "agents.serve.standin", "--port", str(up_port),
                    "--models", "small,large"], f"{upstream}/v1/models"),
            Launch(["-m", "agents.cli", "serve", "--config", str(path), "--port", str(port)],
                   f"{url}/health", cwd=ROOT)) as (_, server):
        client = local_http.openai_client(base_url=f"{url}/v1", api_key="none", max_retries=0)
        for prompt in prompts:  # each prompt on both models, scored by the client
            for model in ("small", "large"):
                answer = client.chat.completions.create(
                    model=model, max_tokens=16, messages=[{"role": "user", "content": prompt}])
                # the small model is right on the short prompts only: a signal to learn
                score = 1.0 if model == "large" or len(prompt) < short else 0.0
                posted = local_http.post(f"{url}/v1/feedback", json={"id": answer.id,
                                                                "score": score})
                assert posted.status_code == 200, posted.text
        bad = local_http.post(f"{url}/v1/feedback", json={"id": "chatcmpl-nope", "score": 1})
        assert bad.status_code == 404 and bad.json()["error"]["param"] == "id"
        bad = local_http.post(f"{url}/v1/feedback", json={"id": answer.id, "score": 2})
        assert bad.status_code == 400 and "score: expected a number in [0, 1]" in bad.text

        out = tmp_path / "live.jsonl"
        said = _cli("serve", "export", "--config", str(path), "--out", str(out))
        assert f"{len(prompts)} prompts x 2 models" in said
        data = load_traces(out)
        assert set(data.models) == {"small", "large"} and data.n_queries == len(prompts)
        env = gym.make("cost_envs/TraceRouting-v0", data=data)
        env.reset(seed=0)
        env.step(env.action_space.sample())
        env.close()

        old = LiveRouter.load(router)
        _cli("route", "train", "--data", str(out), "--weak", "small", "--strong", "large",
             "--save", str(router), "--test-fraction", "0", "--resamples", "10")
        new = LiveRouter.load(router)
        assert new.models == ("small", "large")
        server.send_signal(signal.SIGHUP)  # reload without a restart
        mapping = {"gpt-4.1-nano": "small", "gpt-4.1": "large"}
        old_said = [mapping[old.route(p).model] for p in prompts]
        new_said = [new.route(p).model for p in prompts]
        assert old_said != new_said  # else the test could not tell a reload happened
        deadline = time.monotonic() + 30
        while True:
            served = [client.chat.completions.create(
                model="router-live", max_tokens=1,
                messages=[{"role": "user", "content": p}]).model for p in prompts]
            if served == new_said or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert served == new_said
