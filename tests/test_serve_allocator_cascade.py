"""A TraceRouting-v0 allocator trained with ``cascade=True`` served: both steps are the env's.

A tiny PPO run on RouteLLM's GSM8K logs (read in place from ../shared/data/routellm),
its action head then redrawn (seeded) so that both steps' decisions vary with the
observation, as tests/test_serve_allocator.py does. The env's second observation shows
features of the first answer; the stand-in upstream replays the logged answers
(``--replay``), so the server observes the answer the env observes, and the live
observations, actions and answering model are compared with the env's, query by query.

The served tests start a server that imports torch (slow); the fast tier checks the same
decisions in process: the allocator's (:class:`LiveAllocator`), and the route's plan that
the server follows (:class:`Routes`); the served cascade flow itself is the router
cascades' (tests/test_serve_cascade.py, fast).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import gymnasium as gym
import local_http
import numpy as np
import openai
import pytest
import yaml

from agents.serve.allocators import SERVABLE, LiveAllocator
from agents.serve.config import hash_key, load_config, parse_config
from agents.serve.inputs import ApiError, prompt_bound
from agents.serve.processes import Launch, launched_together
from agents.serve.routes import ACTIONS_HEADER, Routes
from agents.serve.standin import free_port, replayed_words
from cost_envs.envs.trace_routing import TraceTask

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "routellm" / "gsm8k_responses.csv"
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
SERVED = {WEAK: "small", STRONG: "large"}
#: Above the longest logged answer (418 words): the replayed answers come whole.
MAX_TOKENS = 512


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} not found (RouteLLM's GSM8K logs, read in place)")
    import torch

    from agents.learners.checkpoints import save_allocator
    from agents.learners.training import train

    trained = train(SERVABLE, "ppo", 256, seed=0, ppo={"n_steps": 128},
                    env_kwargs={"data": str(GSM8K), "split": "train", "cascade": True})
    torch.manual_seed(0)
    with torch.no_grad():  # decisions that depend on the observation (module docstring)
        for weights in trained.policy.action_net.parameters():
            weights.normal_(0.0, 2.0)
    return save_allocator(trained, tmp_path_factory.mktemp("allocator") / "ppo")


def _bits(action: np.ndarray | tuple[int, ...]) -> str:
    return "".join(str(int(b)) for b in action)


#: Test-split queries played (of 660): each path occurs three times in them, as _pick
#: needs (declined, kept, escalated after both first calls by query 43; escalated after
#: the weak answer alone, 6 of the 660, by query 257), and a live input that differs
#: shows on any query.
QUERIES = 300


@pytest.fixture(scope="module")
def episodes(saved: Path) -> list[dict]:
    """The env's two steps on the first :data:`QUERIES` test-split queries, with the saved
    allocator's actions."""
    live = LiveAllocator.load(saved)
    env = gym.make(SERVABLE, data=str(GSM8K), split="test", cascade=True).unwrapped
    data, out = env.dataset, []
    texts = data.response_texts()
    for q in range(min(QUERIES, data.n_queries)):
        task = TraceTask(q, data.query_ids[q], 2, data.fingerprint)
        obs1, _ = env.reset(options={"task": task})
        first = live.allocator.predict(obs1[None], deterministic=True)[0][0].astype(np.int8)
        episode = {"q": q, "prompt": data.prompts[q], "obs1": obs1, "first": first,
                   "texts": dict(zip(data.models, texts[q], strict=True))}
        obs2, _, terminated, _, _ = env.step(first)
        if not terminated:  # the all-zero first action ends the episode, answering nothing
            called = np.flatnonzero(first).tolist()
            second = live.allocator.predict(obs2[None], deterministic=True)[0][0]
            episode.update(obs2=obs2, second=second.astype(np.int8),
                           observed=data.models[env.observed_model(called, env.call_costs)])
            env.step(episode["second"])
            episode["answerer"] = data.models[env._state[0]]  # (best,) once answered
        out.append(episode)
    env.close()
    return out


def test_live_steps_are_the_envs_bit_for_bit(saved: Path, episodes: list[dict]) -> None:
    live = LiveAllocator.load(saved)
    assert live.cascade
    prompts = [e["prompt"] for e in episodes]
    np.testing.assert_array_equal(live.observations(prompts),
                                  np.stack([e["obs1"] for e in episodes]))
    firsts = live.route_many(prompts)
    kinds = Counter()
    for episode, first in zip(episodes, firsts, strict=True):
        assert first.action == tuple(episode["first"].tolist())
        if "obs2" not in episode:
            assert first.model is None and not first.needs_answer
            kinds["declined"] += 1
            continue
        # the live answer is the observed model's (the stand-in replays the logged one)
        assert first.needs_answer and first.model == episode["observed"]
        answer = episode["texts"][first.model]
        # what the server passes: the upstream's completion tokens (the stand-in's: words),
        # which logs counted with a counter leave unread (the text is counted as they were)
        usage = len(replayed_words(answer, MAX_TOKENS))
        observed = live.second_observations([episode["prompt"]], [first.action], [answer],
                                            [usage])
        assert observed[0].tobytes() == episode["obs2"].tobytes()  # bit for bit
        second = live.escalate(episode["prompt"], first.action, answer, usage)
        assert second.action == tuple(episode["second"].tolist())
        assert second.model == episode["answerer"] and second.first_action == first.action
        kinds["kept" if second.model == first.model else f"escalated {_bits(first.action)}"] += 1
    # every path occurs: declined, kept, escalated after the weak answer alone, after both
    assert set(kinds) == {"declined", "kept", "escalated 10", "escalated 11"}, kinds
    assert live.route(prompts[7]) == firsts[7]  # one at a time: the same
    with pytest.raises(ValueError, match=r"first_actions: expected 1 non-zero 0/1 actions"):
        live.second_observations(prompts[:1], [(0, 0)], ["an answer"])


def _config(saved: Path, upstream: str) -> dict:
    """The server's configuration: the allocator's route, its models on ``upstream``."""
    return {
        "storage": "sqlite:///ledger.db",
        "models": [{"name": name, "upstream_name": logged, "base_url": f"{upstream}/v1",
                    "input_price": p_in, "output_price": p_out, "context": 8192,
                    "max_output_tokens": MAX_TOKENS}
                   for (logged, name), (p_in, p_out) in zip(SERVED.items(),
                                                            ((0.6, 0.6), (10.0, 30.0)),
                                                            strict=True)],
        "routers": [{"name": "alloc", "allocator": str(saved), "models": SERVED}],
        "budgets": {"request": {"default": 0.1, "max": 1.0},
                    "keys": [{"name": "tester", "key_sha256": hash_key("sk-test")}]},
        "server": {"retries": 0, "backoff": 0.01},
    }


@pytest.fixture(scope="module")
def served(saved: Path, episodes: list[dict], tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("served")
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(_config(saved, upstream)))
    with launched_together(
            Launch(["-m", "agents.serve.standin", "--port", str(up_port), "--models",
                    f"{WEAK},{STRONG}", "--replay", str(GSM8K)], f"{upstream}/v1/models"),
            Launch(["-m", "agents.cli", "serve", "--config", str(path), "--port", str(port)],
                   f"http://127.0.0.1:{port}/health", cwd=ROOT, timeout=600)):
        yield {"url": f"http://127.0.0.1:{port}/v1", "db": tmp / "ledger.db", "config": path}


def _pick(episodes: list[dict], per_kind: int = 3) -> list[dict]:
    """A few queries of each path: declined, kept, escalated after one or two first calls."""
    taken: Counter[str] = Counter()
    out = []
    for e in episodes:
        kind = ("declined" if "obs2" not in e else "kept" if e["answerer"] == e["observed"]
                else f"escalated {_bits(e['first'])}")
        if taken[kind] < per_kind:
            taken[kind] += 1
            out.append({**e, "kind": kind})
    return out


def _rows(db: Path) -> dict[str, dict]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM requests")}


def test_the_routes_plan_the_envs_two_steps(saved: Path, episodes: list[dict]) -> None:
    # what the server does with each request below, in process: the route's plan calls
    # the observed model first, then the allocator's second step reads its answer
    routes = Routes(parse_config(_config(saved, "http://127.0.0.1:1"), base=saved.parent))
    picked = _pick(episodes)
    assert len(picked) == 12
    for e in picked:
        if e["kind"] == "declined":  # the all-zero first action: refused, nothing called
            with pytest.raises(ApiError, match="answers nothing") as err:
                routes.plan("router-alloc", e["prompt"])
            assert err.value.status == 422
            continue
        plan = routes.plan("router-alloc", e["prompt"])
        assert plan.route == "router-alloc" and plan.models[0] == SERVED[e["observed"]]
        answer = e["texts"][e["observed"]]
        model, headers = plan.second(e["prompt"], answer,
                                     len(replayed_words(answer, MAX_TOKENS)))
        assert headers == {ACTIONS_HEADER: f"{_bits(e['first'])},{_bits(e['second'])}"}
        assert model == (None if e["kind"] == "kept" else SERVED[e["answerer"]])


# A server importing torch, started end to end: slow. The fast tier checks its decisions
# in process (test_live_steps_are_the_envs_bit_for_bit, test_the_routes_plan_the_envs_two_
# steps) and the served cascade flow it shares with the router cascades
# (tests/test_serve_cascade.py::test_served_decisions_are_the_offline_cascades).
@pytest.mark.slow
def test_served_steps_and_answers_are_the_envs(served: dict, episodes: list[dict]) -> None:
    client = local_http.openai_client(base_url=served["url"], api_key="sk-test", max_retries=0)
    picked = _pick(episodes)
    assert len(picked) == 12
    for e in picked:
        messages = [{"role": "user", "content": e["prompt"]}]
        if e["kind"] == "declined":  # the all-zero first action: refused, nothing charged
            with pytest.raises(openai.UnprocessableEntityError, match="answers nothing"):
                client.chat.completions.create(model="router-alloc", messages=messages,
                                               max_tokens=MAX_TOKENS)
            continue
        raw = client.chat.completions.with_raw_response.create(
            model="router-alloc", messages=messages, max_tokens=MAX_TOKENS)
        answer = raw.parse()
        assert raw.headers[ACTIONS_HEADER] == f"{_bits(e['first'])},{_bits(e['second'])}"
        assert answer.model == SERVED[e["answerer"]]
        assert answer.choices[0].message.content == e["texts"][e["answerer"]]
        rows = _rows(served["db"])
        first = rows[answer.id.removesuffix(".escalation")]
        assert first["model"] == SERVED[e["observed"]] and first["outcome"] == "ok"
        if e["kind"] == "kept":
            assert raw.headers["x-cost-envs-cascade"] == "kept"
            assert f"{answer.id}.escalation" not in rows
            assert raw.headers["x-cost-envs-cost-micros"] == str(first["cost_micros"])
        else:  # the answering model called second, a ledger row of its own
            assert raw.headers["x-cost-envs-cascade"] == "escalated"
            escalation = rows[answer.id]
            assert escalation["model"] == SERVED[e["answerer"]] and escalation["outcome"] == "ok"
            assert raw.headers["x-cost-envs-cost-micros"] == str(
                first["cost_micros"] + escalation["cost_micros"])
    # a stream: the escalated answer relayed as it comes, the usage chunk when asked for
    e = next(p for p in picked if p["kind"] == "escalated 10")
    chunks = list(client.chat.completions.create(
        model="router-alloc", max_tokens=MAX_TOKENS, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": e["prompt"]}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        e["texts"][e["answerer"]])
    assert {c.model for c in chunks} == {SERVED[e["answerer"]]} and chunks[-1].usage is not None


# Slow (its server imports torch); the flow is the router cascades', caught fast by
# tests/test_serve_cascade.py::test_an_escalation_that_does_not_fit_keeps_the_weak_answer.
@pytest.mark.slow
def test_an_escalation_that_does_not_fit_keeps_the_first_answer(served: dict,
                                                                episodes: list[dict]) -> None:
    client = local_http.openai_client(base_url=served["url"], api_key="sk-test", max_retries=0)
    e = next(p for p in _pick(episodes) if p["kind"] == "escalated 10")
    config = load_config(served["config"]).models
    bound = prompt_bound([{"role": "user", "content": e["prompt"]}])
    first_worst = config[SERVED[e["observed"]]].cost_micros(bound, MAX_TOKENS)
    assert config[SERVED[e["answerer"]]].cost_micros(bound, MAX_TOKENS) > first_worst
    before = _rows(served["db"])
    # the request's budget: the first call fits, the first and the second do not
    raw = client.chat.completions.with_raw_response.create(
        model="router-alloc", max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": e["prompt"]}],
        extra_headers={"X-Cost-Envs-Budget": f"{first_worst / 1e6:.6f}"})
    answer = raw.parse()
    assert answer.model == SERVED[e["observed"]]
    assert answer.choices[0].message.content == e["texts"][e["observed"]]
    assert raw.headers["x-cost-envs-cascade"] == "kept:budget"
    assert "X-Cost-Envs-Budget" in raw.headers["x-cost-envs-cascade-reason"]
    assert raw.headers[ACTIONS_HEADER] == f"{_bits(e['first'])},{_bits(e['second'])}"
    rows = _rows(served["db"])
    new = {k: v for k, v in rows.items() if k not in before}
    assert set(new) == {answer.id, f"{answer.id}.escalation"}  # nothing else called
    refused = new[f"{answer.id}.escalation"]
    assert (refused["outcome"], refused["cost_micros"], refused["model"]) == (
        "refused_budget", 0, SERVED[e["answerer"]])
    assert raw.headers["x-cost-envs-cost-micros"] == str(new[answer.id]["cost_micros"])
    with sqlite3.connect(served["db"]) as conn:  # the key's spend: its rows, nothing reserved
        spent, reserved = conn.execute("SELECT spent_micros, reserved_micros FROM "
                                       "budget_usage WHERE budget = 'key:tester'").fetchone()
    assert spent == sum(r["cost_micros"] for r in rows.values()) and reserved == 0


class _RulePolicy:
    """The env's fixed rule as an allocator: it reads the observation (marker, length)."""

    def __init__(self, env) -> None:
        self.env = env

    def predict(self, observation: np.ndarray, state=None, episode_start=None,
                deterministic: bool = True) -> tuple[np.ndarray, None]:
        del state, episode_start, deterministic
        return np.stack([self.env.rule_based_action(o) for o in observation]), None


def test_logged_token_counts_are_observed_from_the_upstreams_usage() -> None:
    # the packaged logs (three models) logged their token counts: a live answer's length
    # is the upstream's usage.completion_tokens, not a count of its text (the prompt's
    # length is counted live, approximately: the logs' counts differ by model)
    env = gym.make(SERVABLE, cascade=True, split="test").unwrapped
    live = LiveAllocator(_RulePolicy(env), SERVABLE, {"cascade": True, "split": "test"})
    assert live.cascade and not live.counts_answers
    data, texts, seen = env.dataset, env.dataset.response_texts(), Counter()
    exact = np.ones(live.size, dtype=bool)
    exact[env.observation_layout["prompt_length"]] = False
    for q in range(data.n_queries):
        task = TraceTask(q, data.query_ids[q], 3, data.fingerprint)
        env.reset(options={"task": task})
        first = live.route(data.prompts[q])
        obs2, *_ = env.step(np.array(first.action, dtype=np.int8))
        j = data.model_index(first.model)
        tokens = int(data.output_tokens[q, j])
        observed = live.second_observations([data.prompts[q]], [first.action], [texts[q][j]],
                                            [tokens])
        assert observed[0][exact].tobytes() == obs2[exact].tobytes()
        second = live.escalate(data.prompts[q], first.action, texts[q][j], tokens)
        env.step(np.array(second.action, dtype=np.int8))
        assert second.model == data.models[env._state[0]]
        seen[second.model] += 1
    assert len(seen) == 2  # kept and escalated both occur
    # without the upstream's count, the text is counted; with it, the count is taken
    assert live.answer_tokens(["four words of text"], [99]).tolist() == [99]
    assert live.answer_tokens(["four words of text"], [None]).tolist() == (
        live.answer_tokens(["four words of text"]).tolist())
