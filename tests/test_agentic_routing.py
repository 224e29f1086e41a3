"""AgenticRouting-v0: pricing, the generative model, the profiles' strata and inversions."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_same_trajectory, play_episode

import cost_envs  # noqa: F401
from agents.learners.bopo import boundary_rollouts, inversion_share, strata_distribution
from cost_envs.envs.agentic_routing import (
    PROFILES,
    AgenticRoutingEnv,
    RoutingProfile,
    success_probability,
)
from cost_envs.prices import default_price_table
from cost_envs.wrappers import HardBudget

ENV_ID = "cost_envs/AgenticRouting-v0"
PROFILE_NAMES = sorted(PROFILES)


@pytest.fixture(scope="module")
def boundaries() -> dict[str, list]:
    """Boundary rollouts on 400 tasks of each profile (about a second in all)."""
    out = {}
    for profile in PROFILE_NAMES:
        env = gym.make(ENV_ID, profile=profile)
        env.reset(seed=3)
        out[profile] = boundary_rollouts(env, env.unwrapped.sample_tasks(400))
    return out


def _episode(env: gym.Env, task, actions) -> tuple[bool, float, int]:
    env.reset(options={"task": task})
    cost = 0.0
    for steps, action in enumerate(actions, start=1):
        _, _, terminated, truncated, info = env.step(action)
        cost += info["cost"]
        if terminated or truncated:
            return info["success"], cost, steps
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_replay_with_the_same_actions_is_the_same_episode(profile: str) -> None:
    env = gym.make(ENV_ID, profile=profile)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, 1).astype(np.int8) for _ in range(60)]
    first, taken = play_episode(env, iter(actions), seed=4)
    task = env.unwrapped.task
    other = gym.make(ENV_ID, profile=profile)
    other.reset(seed=99)
    replay, _ = play_episode(other, iter(taken), options={"task": task})
    assert_same_trajectory(first, replay)


def test_replaying_a_task_of_another_profile_is_refused() -> None:
    env = gym.make(ENV_ID, profile="appworld")
    env.reset(seed=0)
    other = gym.make(ENV_ID, profile="alfworld")
    with pytest.raises(ValueError, match="profile 'appworld'"):
        other.reset(options={"task": env.unwrapped.task})


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_prices_bill_tokens_and_agree_with_the_ledger(profile: str) -> None:
    env = gym.make(ENV_ID, profile=profile)
    base = env.unwrapped
    table = default_price_table()
    small, large = table["Qwen/Qwen2.5-7B-Instruct"], table["gpt-4.1"]
    for seed in range(5):
        env.reset(seed=seed)
        task = base.task
        demo = PROFILES[profile].demo_tokens
        small_step = small.cost(task.input_tokens + demo, task.output_tokens)
        large_step = large.cost(task.input_tokens, task.output_tokens)
        assert base.step_cost == pytest.approx(small_step, rel=1e-12)
        assert base.call_costs[0] == pytest.approx(large_step - small_step, rel=1e-12)
        assert base.call_costs[0] > 0
        s, big = base.step_prices()
        _, _, _, _, info = env.step(np.array([0], dtype=np.int8))
        assert info["cost"] == s == base.step_cost
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(np.array([1], dtype=np.int8))
            assert info["cost"] == big == base.price([0])[0]
            done = terminated or truncated


def test_large_model_cheaper_per_token_than_small_is_refused() -> None:
    table = default_price_table()
    with pytest.raises(ValueError, match="lower input"):
        AgenticRoutingEnv(prices=table, small="gpt-4.1", large="Qwen/Qwen2.5-7B-Instruct")
    with pytest.raises(ValueError, match="no price for model"):
        AgenticRoutingEnv(large="no-such-model")
    heavy = dataclasses.replace(PROFILES["alfworld"], demo_tokens=50_000.0)
    with pytest.raises(ValueError, match="demo_tokens"):
        AgenticRoutingEnv(profile=heavy)


def test_own_price_table_and_models_are_used(tmp_path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(
        "models:\n"
        "  - {name: tiny, input: 0.1, output: 0.1, source: test, date: 2025-01-01}\n"
        "  - {name: huge, input: 10.0, output: 30.0, source: test, date: 2025-01-01}\n",
        encoding="utf-8")
    env = gym.make(ENV_ID, prices=path, small="tiny", large="huge")
    env.reset(seed=0)
    task = env.unwrapped.task
    demo = PROFILES["alfworld"].demo_tokens
    small = (task.input_tokens + demo + task.output_tokens) * 0.1 / 1e6
    large = (task.input_tokens * 10.0 + task.output_tokens * 30.0) / 1e6
    assert env.unwrapped.step_prices() == pytest.approx((small, large), rel=1e-12)


def test_large_model_clears_every_step_the_small_one_clears() -> None:
    d = np.linspace(0, 1, 101)
    p_small = success_probability(d, (4.0, 10.0))
    p_large = success_probability(d, (6.0, 9.0))
    assert (p_large >= p_small).all()
    for profile in PROFILES.values():
        assert profile.harm_large <= profile.harm_small
    # and through the env's own (pure) transition, from every reachable kind of state
    env = gym.make(ENV_ID, profile="sciworld").unwrapped
    env.reset(seed=1)
    for turn in range(env.task.horizon):
        for state in [(k, r, f) for k in range(env.task.n_subgoals) for r in (0, 2)
                      for f in (0, 1)]:
            small_state, _ = env._transition(turn, state, [])
            large_state, _ = env._transition(turn, state, [0])
            assert large_state[0] >= small_state[0]  # subgoals done
            assert large_state[1] <= small_state[1]  # recovery pending


def test_small_failures_add_recovery_steps_and_success_comes_only_at_the_end() -> None:
    env = gym.make(ENV_ID, profile="appworld")
    base = env.unwrapped
    saw_recovery = False
    for seed in range(10):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(np.array([0], dtype=np.int8))
            done = terminated or truncated
            saw_recovery |= base._state[1] > 0
            if not done:
                assert "success" not in info
        assert info["quality"] == pytest.approx(10.0 * base._state[0] / base.task.n_subgoals)
    assert saw_recovery


def test_luck_is_not_observed() -> None:
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    task = env.unwrapped.task
    lucky = dataclasses.replace(task, luck=np.zeros_like(task.luck),
                                harm_luck=np.ones_like(task.harm_luck))
    unlucky = dataclasses.replace(task, luck=np.ones_like(task.luck))
    a, _ = env.reset(options={"task": lucky})
    b, _ = env.reset(options={"task": unlucky})
    np.testing.assert_array_equal(a, b)
    # ... but it decides the outcome
    assert _episode(env, lucky, [np.array([0], np.int8)] * 60)[0]
    assert not _episode(env, unlucky, [np.array([1], np.int8)] * 60)[0]


def test_observation_layout_and_helpers() -> None:
    env = gym.make(ENV_ID, profile="sciworld")
    base = env.unwrapped
    layout = base.observation_layout
    obs, _ = env.reset(seed=2)
    assert obs[layout["profile"]].tolist() == [0.0, 1.0, 0.0]
    assert obs[layout["progress"]][0] == 0.0
    assert obs[layout["turns_left"]][0] == pytest.approx(50 / 50)
    small, large = base.step_prices()
    assert obs[layout["price_ratio"]][0] == pytest.approx(small / large, rel=1e-6)
    assert base.consecutive_failures(obs) == 0
    failures = 0
    for _ in range(40):
        obs, _, terminated, truncated, _ = env.step(np.array([0], dtype=np.int8))
        failures = 0 if obs[layout["failed_last_step"]][0] == 0 else min(failures + 1, 3)
        assert base.consecutive_failures(obs) == failures == min(base._state[2], 3)
        if terminated or truncated:
            break
    hard = obs.copy()
    hard[layout["difficulty"]] = 0.7
    hard[layout["failed_last_step"]] = 0.0
    assert base.rule_based_action(hard).tolist() == [1]
    hard[layout["difficulty"]] = 0.2
    assert base.rule_based_action(hard).tolist() == [0]


def test_budget_masks_an_unaffordable_large_step_down_to_the_small_model() -> None:
    probe = gym.make(ENV_ID)
    probe.reset(seed=0)
    small, large = probe.unwrapped.step_prices()
    env = HardBudget(gym.make(ENV_ID), budget=(small + large) / 2)  # one small step fits
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, False]
    _, _, _, truncated, info = env.step(np.array([1], dtype=np.int8))
    assert not truncated and info["calls"].tolist() == [0] and info["cost"] == small


@pytest.mark.parametrize("bad", [
    {"horizon": 5}, {"mix": (0.5, 0.5)}, {"mix": (0.5, 0.2, 0.2)}, {"concentration": 0.0},
    {"harm_large": 0.9}, {"recovery_steps": 20}, {"demo_tokens": -1.0},
])
def test_bad_profiles_are_named(bad: dict) -> None:
    fields = {**dataclasses.asdict(PROFILES["alfworld"]), **bad}
    with pytest.raises(ValueError, match="profile 'alfworld'"):
        RoutingProfile(**fields)
    with pytest.raises(ValueError, match="profile"):
        AgenticRoutingEnv(profile="webshop")
    with pytest.raises(ValueError, match="unknown key"):
        AgenticRoutingEnv(profile={"name": "x", "bogus": 1})


def test_every_profile_has_all_three_strata_in_different_proportions(boundaries) -> None:
    shares = {p: strata_distribution(b) for p, b in boundaries.items()}
    for profile, share in shares.items():
        assert min(share.values()) > 0, (profile, share)
    assert shares["alfworld"]["easy"] > 0.6  # ALFWorld: mostly easy
    assert shares["appworld"]["hard"] + shares["appworld"]["intractable"] > 0.6
    intractable = [shares[p]["intractable"] for p in ("alfworld", "sciworld", "appworld")]
    assert intractable == sorted(intractable) and intractable[0] < intractable[2] - 0.05


def test_cost_inversions_happen_on_a_measurable_share_of_tasks(boundaries) -> None:
    for profile, bounds in boundaries.items():
        share = inversion_share(bounds)
        assert 0.05 < share < 0.5, (profile, share)
        # an inversion is a real one: always-small's episode costs more than always-large's
        assert any(b.inverted and b.small_success for b in bounds) or profile == "appworld"


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_hindsight_routing_beats_both_boundaries_on_cost_per_success(profile: str,
                                                                     boundaries) -> None:
    env = gym.make(ENV_ID, profile=profile)
    env.reset(seed=3)
    tasks = env.unwrapped.sample_tasks(120)
    base = env.unwrapped
    spent = successes = 0.0
    for task in tasks:
        env.reset(options={"task": task})
        plan = base.oracle_plan()
        if plan is None:
            spent += _episode(env, task, [np.array([0], np.int8)] * 60)[1]
        else:
            spent += plan.cost
            successes += 1
    oracle_cps = spent / successes
    bounds = boundaries[profile][:120]
    for key in ("small", "large"):
        cost = sum(getattr(b, f"{key}_cost") for b in bounds)
        wins = sum(getattr(b, f"{key}_success") for b in bounds)
        assert oracle_cps < 0.8 * cost / max(1, wins), key


def test_profile_dict_missing_keys_is_a_value_error_naming_them() -> None:
    with pytest.raises(ValueError, match=r"profile: 'mine' is missing key\(s\) \['horizon'"):
        gym.make("cost_envs/AgenticRouting-v0", profile={"name": "mine"})
    with pytest.raises(ValueError, match=r"profile: unknown name 'webshop'"):
        gym.make("cost_envs/AgenticRouting-v0", profile="webshop")
