"""A trained TraceRouting-v0 allocator served: the env's observation of a live prompt, its decision.

A tiny PPO run on RouteLLM's GSM8K logs (read in place from ../shared/data/routellm) is
enough: the tests are about the live decisions equalling the env's, not about quality.
Such a run calls both models on every prompt, a decision that cannot tell a wrong
observation from a right one, so its action head is then redrawn (seeded): the saved
allocator's decisions vary with the prompt, the all-zero action among them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import gymnasium as gym
import local_http
import numpy as np
import openai
import pytest
import yaml

from agents.serve.allocators import NOT_LIVE, SERVABLE, LiveAllocator, check_servable
from agents.serve.config import parse_config
from agents.serve.processes import Launch, launched_together
from agents.serve.routes import Routes
from agents.serve.standin import free_port
from cost_envs.envs.trace_routing import TraceTask

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "routellm" / "gsm8k_responses.csv"
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} not found (RouteLLM's GSM8K logs, read in place)")
    import torch

    from agents.learners.checkpoints import save_allocator
    from agents.learners.training import train

    trained = train(SERVABLE, "ppo", 256, seed=0, ppo={"n_steps": 128},
                    env_kwargs={"data": str(GSM8K), "split": "train"})
    torch.manual_seed(0)
    with torch.no_grad():  # decisions that depend on the observation (module docstring)
        for weights in trained.policy.action_net.parameters():
            weights.normal_(0.0, 2.0)
    return save_allocator(trained, tmp_path_factory.mktemp("allocator") / "ppo")


@pytest.fixture(scope="module")
def env_test(saved: Path):
    del saved
    env = gym.make(SERVABLE, data=str(GSM8K), split="test").unwrapped
    yield env
    env.close()


def test_live_observations_and_decisions_are_the_envs(saved: Path, env_test) -> None:
    live = LiveAllocator.load(saved)
    assert live.models == (WEAK, STRONG) and live.token_counter == "approx"
    prompts = list(env_test.dataset.prompts)
    observed = env_test.initial_observations()
    np.testing.assert_array_equal(live.observations(prompts), observed)  # bit for bit
    for q in (0, 5, 77):  # what the env shows the policy at reset is that row
        task = TraceTask(q, env_test.dataset.query_ids[q], 2, env_test.dataset.fingerprint)
        obs, _ = env_test.reset(options={"task": task})
        np.testing.assert_array_equal(obs, observed[q])
    actions, _ = live.allocator.predict(observed, deterministic=True)
    assert len({tuple(a) for a in actions.tolist()}) == 4  # every action occurs
    decisions = live.route_many(prompts)
    assert [d.action for d in decisions] == [tuple(a) for a in actions.tolist()]
    for decision, action in zip(decisions, actions, strict=True):
        called = np.flatnonzero(action).tolist()
        expected = live.models[env_test.answerer(called)] if called else None
        assert decision.model == expected
        assert decision.calls == tuple(live.models[j] for j in called)
    assert live.route(prompts[3]) == decisions[3]  # one at a time: the same
    assert not live.cascade and not any(d.needs_answer for d in decisions)
    with pytest.raises(ValueError, match=r"escalate: the allocator's env has cascade=False"):
        live.escalate(prompts[0], (1, 0), "an answer")


def test_served_allocator_decides_as_in_the_env(saved: Path, env_test, tmp_path) -> None:
    live = LiveAllocator.load(saved)
    prompts = list(env_test.dataset.prompts[:20])
    expected = [d.model for d in live.route_many(prompts)]
    assert set(expected) == {WEAK, STRONG, None}  # each outcome is served
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    config = {
        "storage": "sqlite:///ledger.db",
        "models": [{"name": n, "base_url": f"{upstream}/v1", "input_price": p,
                    "output_price": 4 * p, "max_output_tokens": 64}
                   for n, p in (("small", 0.1), ("large", 2.0))],
        "routers": [{"name": "alloc", "allocator": str(saved),
                     "env_kwargs": {"data": str(GSM8K), "split": "train"},
                     "models": {WEAK: "small", STRONG: "large"}}],
    }
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(config))
    mapped = {WEAK: "small", STRONG: "large", None: None}
    with launched_together(
            Launch(["-m", "agents.serve.standin", "--port", str(up_port), "--models",
                    "small,large"], f"{upstream}/v1/models"),
            Launch(["-m", "agents.cli", "serve", "--config", str(tmp_path / "serve.yaml"),
                    "--port", str(port)], f"http://127.0.0.1:{port}/health", cwd=ROOT,
                   timeout=600)):  # torch is imported first: slow on a loaded machine
        client = local_http.openai_client(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                               max_retries=0)
        assert "router-alloc" in {m.id for m in client.models.list()}
        for prompt, model in zip(prompts, expected, strict=True):
            messages = [{"role": "user", "content": prompt}]
            if model is None:  # the all-zero action: refused, nothing charged
                with pytest.raises(openai.UnprocessableEntityError, match="answers nothing"):
                    client.chat.completions.create(model="router-alloc", messages=messages)
                continue
            answer = client.chat.completions.create(model="router-alloc", messages=messages)
            assert answer.model == mapped[model]
        with pytest.raises(openai.BadRequestError, match="an allocator has no threshold"):
            client.chat.completions.create(model="router-alloc-0.5",
                                           messages=[{"role": "user", "content": "hi"}])
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        rows = conn.execute("SELECT model, outcome FROM requests").fetchall()
    served = [mapped[m] for m in expected if m is not None]
    assert [m for m, _ in rows] == served and {o for _, o in rows} <= {"ok"}


@pytest.mark.parametrize("env_id", sorted(NOT_LIVE))
def test_envs_without_a_live_counterpart_are_refused_by_name(env_id: str, tmp_path) -> None:
    with pytest.raises(ValueError, match=rf"allocator: an allocator of {env_id} has no live "
                                         r"counterpart \(.+\); expected one trained on "
                                         r"cost_envs/TraceRouting-v0"):
        check_servable(env_id, {})
    # at the server's start, from the model's config.json, before torch or its tensors
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"env_id": env_id,
                                                            "env_kwargs": {}}))
    config = parse_config({"models": [{"name": "small", "base_url": "http://127.0.0.1:1/v1",
                                       "input_price": 1, "output_price": 1}],
                           "routers": [{"name": "a", "allocator": "m"}]}, base=tmp_path)
    with pytest.raises(ValueError, match=rf"routers: a: allocator: an allocator of {env_id}"):
        Routes(config)


def test_bad_allocator_routes_are_refused(tmp_path) -> None:
    check_servable(SERVABLE, {"cascade": True})  # served: tests/test_serve_allocator_cascade.py
    model = {"name": "small", "base_url": "http://127.0.0.1:1/v1", "input_price": 1,
             "output_price": 1}

    def route(**entry: object):
        return parse_config({"models": [model], "routers": [{"name": "a", **entry}]},
                            base=tmp_path).routes["a"]

    found = route(allocator="models/ppo", env_kwargs={"data": "logs.csv", "split": "train"})
    assert found.allocator == tmp_path / "models" / "ppo"
    assert found.env_kwargs == {"data": str(tmp_path / "logs.csv"), "split": "train"}
    with pytest.raises(ValueError, match="threshold: an allocator has no threshold"):
        route(allocator="m", threshold=0.5)
    with pytest.raises(ValueError, match="env_kwargs: expected only with 'allocator'"):
        route(model="small", env_kwargs={})
    with pytest.raises(ValueError, match=r"expected one of 'path' .* got \['allocator', 'path'\]"):
        route(allocator="m", path="r")
