"""BudgetTier: CORL's per-query budget tier, observed and gating the reward."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import cost_envs  # noqa: F401 (registers the envs)
from cost_envs.envs.expert_routing import TIER_BUDGETS, ExpertTask
from cost_envs.wrappers import TIERS, BudgetTier, HardBudget

ENV_ID = "cost_envs/ExpertRouting-v0"
NANO, GPT41, O3 = 0, 1, 2
ANSWER = np.zeros(3, dtype=np.int8)


def onehot(*bits: int) -> np.ndarray:
    action = np.zeros(3, dtype=np.int8)
    action[list(bits)] = 1
    return action


def wrapped(**kwargs: Any) -> BudgetTier:
    return BudgetTier(gym.make(ENV_ID), **kwargs)


def a_task(seed: int = 0, controller_right: bool | None = None) -> ExpertTask:
    """A task of the env; optionally with the controller's answer made right or wrong."""
    env = gym.make(ENV_ID)
    env.reset(seed=seed)
    task = env.unwrapped.task
    if controller_right is not None:
        task = dataclasses.replace(task, controller_luck=0.0 if controller_right else 1.0)
    return task


def prices_of(task: ExpertTask) -> tuple[float, np.ndarray]:
    """(step cost, call costs) of ``task``, read off a bare env."""
    env = gym.make(ENV_ID).unwrapped
    env.reset(options={"task": task})
    return env.step_cost, np.array(env.call_costs)


def tiers_drawn(env: BudgetTier, n: int, seed: int) -> list[str]:
    return [env.reset(seed=seed if k == 0 else None)[1]["tier"] for k in range(n)]


def random_action(rng: np.random.Generator) -> np.ndarray:
    return (rng.random(3) < 0.4).astype(np.int8)


# ------------------------------------------------------------------------ observation
def test_observation_space_extends_the_envs_box() -> None:
    env = wrapped()
    base = env.env.observation_space
    space = env.observation_space
    assert space.shape == (base.shape[0] + 4,) and space.dtype == base.dtype == np.float32
    np.testing.assert_array_equal(space.low, np.concatenate([base.low, np.zeros(4)]))
    np.testing.assert_array_equal(space.high, np.concatenate([base.high, np.ones(4)]))


@pytest.mark.parametrize("tier", TIERS)
def test_observation_is_the_envs_plus_tier_and_remaining_fraction(tier: str) -> None:
    env, plain = wrapped(), gym.make(ENV_ID)
    budget = TIER_BUDGETS[tier]
    obs, info = env.reset(seed=4, options={"tier": tier})
    plain_obs, _ = plain.reset(seed=4)
    np.testing.assert_array_equal(obs[:-4], plain_obs)
    assert obs[-4:-1].tolist() == [float(t == tier) for t in TIERS]
    assert obs[-1] == 1.0 and obs.dtype == np.float32 and obs in env.observation_space
    assert info == {"tier": tier, "budget": budget}
    spent = 0.0
    for action in (onehot(NANO), onehot(GPT41), onehot(O3)):
        obs, _, terminated, truncated, info = env.step(action)
        plain_obs, *_ = plain.step(action)
        spent += info["cost"]
        np.testing.assert_array_equal(obs[:-4], plain_obs)
        assert obs[-4:-1].tolist() == [float(t == tier) for t in TIERS]
        assert obs[-1] == np.float32(max(0.0, 1.0 - spent / budget))
        assert obs in env.observation_space
        assert info["budget_remaining"] == budget - spent
    assert terminated and not truncated


def test_observations_stay_in_the_box() -> None:
    env = wrapped()
    rng = np.random.default_rng(0)
    fractions = []
    for episode in range(150):
        obs, _ = env.reset(seed=1 if episode == 0 else None)
        assert obs in env.observation_space
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(random_action(rng))
            assert obs in env.observation_space, obs
            fractions.append(obs[-1])
            done = terminated or truncated
    # both ends of the remaining fraction were visited
    assert min(fractions) == 0.0 and max(fractions) > 0.9


# -------------------------------------------------------------------------------- tiers
def test_reset_option_fixes_the_tier_and_passes_the_task_through() -> None:
    env = wrapped()
    env.reset(seed=0)
    task = a_task(seed=123)
    options = {"tier": "high", "task": task}
    obs, info = env.reset(options=options)
    assert options == {"tier": "high", "task": task}  # the caller's dict is not consumed
    assert env.unwrapped.task is task
    assert (env.tier, env.budget) == ("high", TIER_BUDGETS["high"])
    assert (info["tier"], info["budget"]) == ("high", TIER_BUDGETS["high"])
    plain = gym.make(ENV_ID)
    np.testing.assert_array_equal(obs[:-4], plain.reset(options={"task": task})[0])
    for _ in range(20):  # forced for every episode it is given to
        assert env.reset(options={"tier": "medium"})[1]["tier"] == "medium"


def test_unknown_reset_options_still_reach_the_env() -> None:
    env = wrapped()
    with pytest.raises(ValueError, match="bogus"):
        env.reset(options={"tier": "low", "bogus": 1})
    with pytest.raises(ValueError, match=r"options\['tier'\]"):
        env.reset(options={"tier": "ultra"})


def test_tier_at_construction_holds_for_every_episode() -> None:
    env = wrapped(tier="medium")
    assert tiers_drawn(env, 30, seed=0) == ["medium"] * 30
    assert env.reset(options={"tier": "low"})[1]["tier"] == "low"  # one-episode override
    assert env.reset()[1]["tier"] == "medium"


def test_drawn_tiers_are_deterministic_under_a_seed() -> None:
    a, b = wrapped(), wrapped()
    first = tiers_drawn(a, 40, seed=11)
    assert tiers_drawn(b, 40, seed=11) == first
    assert tiers_drawn(a, 40, seed=11) == first  # re-seeding the same wrapper restarts it
    assert tiers_drawn(b, 40, seed=12) != first
    assert len(set(first)) == 3


def test_drawn_tiers_are_uniform_by_default() -> None:
    env = wrapped()
    n = 3000
    tiers = tiers_drawn(env, n, seed=5)
    for tier in TIERS:
        assert tiers.count(tier) / n == pytest.approx(1 / 3, abs=0.035), tier
    # not a fixed cycle: each tier follows each other tier
    pairs = set(itertools.pairwise(tiers))
    assert len(pairs) == 9


@pytest.mark.parametrize(
    "probabilities",
    [{"low": 0.7, "high": 0.3}, {"medium": 1.0}, {"low": 0.2, "medium": 0.5, "high": 0.3}],
)
def test_drawn_tiers_follow_probabilities(probabilities: dict[str, float]) -> None:
    env = wrapped(probabilities=probabilities)
    n = 2000
    tiers = tiers_drawn(env, n, seed=6)
    for tier in TIERS:
        p = probabilities.get(tier, 0.0)
        if p in (0.0, 1.0):
            assert tiers.count(tier) == p * n, tier
        else:
            assert tiers.count(tier) / n == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n))


def task_fields(task: ExpertTask) -> tuple:
    return tuple(v.tolist() if isinstance(v, np.ndarray) else v
                 for v in dataclasses.astuple(task))


@pytest.mark.parametrize(
    "kwargs", [{}, {"probabilities": {"low": 0.1, "medium": 0.1, "high": 0.8}}, {"tier": "low"}]
)
def test_tiers_do_not_perturb_the_envs_task_stream(kwargs: dict[str, Any]) -> None:
    env, plain = wrapped(**kwargs), gym.make(ENV_ID)
    episodes = env.unwrapped.task_block + 6  # past the first block of tasks
    for k in range(episodes):
        seed = 21 if k == 0 else None
        options = {"tier": "high"} if k % 5 == 0 else None
        obs, _ = env.reset(seed=seed, options=options)
        plain_obs, _ = plain.reset(seed=seed)
        assert task_fields(env.unwrapped.task) == task_fields(plain.unwrapped.task), k
        np.testing.assert_array_equal(obs[:-4], plain_obs)
        # a step (the env's own np_random is left alone by the wrapper's draws)
        env.step(onehot(NANO))
        plain.step(onehot(NANO))
    assert (env.unwrapped.np_random.bit_generator.state
            == plain.unwrapped.np_random.bit_generator.state)


# ------------------------------------------------------------------------------ reward
def test_gated_reward_is_success_within_budget_on_the_last_step_only() -> None:
    env = wrapped()
    plain = gym.make(ENV_ID)
    rng = np.random.default_rng(2)
    outcomes = set()
    for episode in range(300):
        seed = 9 if episode == 0 else None
        _, info = env.reset(seed=seed)
        plain.reset(seed=seed)
        budget, spent, done = info["budget"], 0.0, False
        while not done:
            action = random_action(rng)
            _, reward, terminated, truncated, info = env.step(action)
            _, env_reward, *_ = plain.step(action)
            spent += info["cost"]
            done = terminated or truncated
            assert type(reward) is float
            if not done:
                assert reward == 0.0 and env_reward != 0.0  # the env's own reward discarded
                assert "within_budget" not in info and "success" not in info
        within = info["episode_cost"] <= budget
        assert info["within_budget"] is within
        assert reward == float(info["success"] and within)
        assert info["budget_remaining"] == budget - spent
        outcomes.add((info["success"], within))
    assert outcomes == {(True, True), (True, False), (False, True), (False, False)}


@pytest.mark.parametrize("penalty", [0.0, 0.5, 1.0, 3.0])
def test_soft_reward_subtracts_the_relative_overspend(penalty: float) -> None:
    env = wrapped(reward="soft", penalty=penalty)
    rng = np.random.default_rng(3)
    over = 0
    for episode in range(120):
        _, info = env.reset(seed=10 if episode == 0 else None)
        budget, done = info["budget"], False
        while not done:
            _, reward, terminated, truncated, info = env.step(random_action(rng))
            done = terminated or truncated
            if not done:
                assert reward == 0.0
        cost = info["episode_cost"]
        expected = float(info["success"]) - penalty * max(0.0, cost - budget) / budget
        assert reward == pytest.approx(expected, rel=1e-12, abs=1e-15)
        assert info["within_budget"] is (cost <= budget)
        over += cost > budget
    assert over > 10


def test_spending_exactly_the_budget_counts_as_within() -> None:
    task = a_task(seed=3, controller_right=True)
    step_cost, _ = prices_of(task)
    budgets = {"low": step_cost, "medium": 2 * step_cost, "high": 3 * step_cost}
    env = wrapped(budgets=budgets, tier="low")
    env.reset(options={"task": task})
    obs, reward, terminated, _, info = env.step(ANSWER)
    assert terminated and info["success"] and info["cost"] == step_cost == budgets["low"]
    assert info["within_budget"] is True and reward == 1.0
    assert info["budget_remaining"] == 0.0 and obs[-1] == 0.0
    # one representable step less of budget: over, and the gate closes
    just_under = math.nextafter(step_cost, 0.0)
    for mode, expected in [("gated", 0.0),
                           ("soft", 1.0 - (step_cost - just_under) / just_under)]:
        env = wrapped(budgets={**budgets, "low": just_under}, tier="low", reward=mode)
        env.reset(options={"task": task})
        _, reward, _, _, info = env.step(ANSWER)
        assert info["within_budget"] is False and info["budget_remaining"] < 0
        assert reward == expected and reward < 1.0


def test_going_over_budget_does_not_end_the_episode() -> None:
    task = a_task(seed=5, controller_right=True)
    step_cost, costs = prices_of(task)
    assert step_cost + costs[O3] > TIER_BUDGETS["low"]
    env = wrapped(tier="low")
    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step(onehot(O3))
    assert not (terminated or truncated) and reward == 0.0
    assert info["budget_remaining"] < 0 and obs[-1] == 0.0
    # the tier's budget is already spent: the gated reward is 0 whatever the outcome
    obs, reward, terminated, truncated, info = env.step(ANSWER)
    assert terminated and not truncated
    assert info["within_budget"] is False and reward == 0.0 and obs[-1] == 0.0
    # the same episode under the high tier is within budget and pays its success
    env.reset(options={"task": task, "tier": "high"})
    env.step(onehot(O3))
    _, reward, _, _, info = env.step(ANSWER)
    assert info["within_budget"] is True and reward == float(info["success"])


def test_info_keys() -> None:
    env = wrapped(tier="medium")
    _, info = env.reset(options={"task": a_task(seed=6)})
    assert info == {"tier": "medium", "budget": TIER_BUDGETS["medium"]}
    _, _, terminated, _, info = env.step(onehot(NANO))
    assert not terminated
    assert {"tier", "budget", "budget_remaining", "cost", "flops", "calls"} <= set(info)
    assert "within_budget" not in info
    _, _, terminated, _, info = env.step(ANSWER)
    assert terminated
    assert {"tier", "budget", "budget_remaining", "within_budget", "success", "quality",
            "episode_cost", "episode_flops"} <= set(info)
    assert info["tier"] == "medium" and info["budget"] == TIER_BUDGETS["medium"]
    assert info["budget_remaining"] == TIER_BUDGETS["medium"] - info["episode_cost"]


# ------------------------------------------------------------------------ composition
def test_hard_budget_underneath_keeps_the_spend_within_the_tier_budget() -> None:
    budget = TIER_BUDGETS["low"]
    env = BudgetTier(HardBudget(gym.make(ENV_ID), budget, on_exceed="mask"), tier="low")
    bare = wrapped(tier="low")
    rng = np.random.default_rng(4)
    masked = cut_short = bare_over = 0
    for episode in range(150):
        seed = 13 if episode == 0 else None
        env.reset(seed=seed)
        bare.reset(seed=seed)
        spent, done = 0.0, False
        while not done:
            action = random_action(rng)
            obs, reward, terminated, truncated, info = env.step(action)
            spent += info["cost"]
            assert spent <= budget and info["budget_remaining"] >= 0 and obs[-1] >= 0
            masked += not np.array_equal(info["calls"], action)
            done = terminated or truncated
        assert info["within_budget"] is True
        assert reward == float(info["success"])
        cut_short += truncated
        bare_done = False
        while not bare_done:  # the same actions' worth of episodes without the cap
            _, _, t, u, bare_info = bare.step(random_action(rng))
            bare_done = t or u
        bare_over += not bare_info["within_budget"]
    assert masked > 10 and cut_short > 0 and bare_over > 10  # the cap did work


# -------------------------------------------------------------------------- validation
BAD_KWARGS: dict[str, tuple[dict[str, Any], str]] = {
    "budgets missing tier": ({"budgets": {"low": 0.1, "medium": 0.2}}, "budgets"),
    "budgets extra key": ({"budgets": {"low": 0.1, "medium": 0.2, "high": 0.3, "max": 1}},
                          "budgets"),
    "budgets not a mapping": ({"budgets": [0.1, 0.2, 0.3]}, "budgets"),
    "budgets equal": ({"budgets": {"low": 0.1, "medium": 0.1, "high": 0.3}}, "low < medium"),
    "budgets decreasing": ({"budgets": {"low": 0.3, "medium": 0.2, "high": 0.1}},
                           "low < medium"),
    "budget zero": ({"budgets": {"low": 0.0, "medium": 0.2, "high": 0.3}}, "budgets['low']"),
    "budget negative": ({"budgets": {"low": -0.1, "medium": 0.2, "high": 0.3}},
                        "budgets['low']"),
    "budget nan": ({"budgets": {"low": 0.1, "medium": float("nan"), "high": 0.3}},
                   "budgets['medium']"),
    "budget inf": ({"budgets": {"low": 0.1, "medium": 0.2, "high": math.inf}},
                   "budgets['high']"),
    "budget bool": ({"budgets": {"low": True, "medium": 2, "high": 3}}, "budgets['low']"),
    "budget string": ({"budgets": {"low": "0.1", "medium": 0.2, "high": 0.3}},
                      "budgets['low']"),
    "tier unknown": ({"tier": "ultra"}, "tier"),
    "tier capitalised": ({"tier": "Low"}, "tier"),
    "probabilities sum": ({"probabilities": {"low": 0.5, "medium": 0.4}}, "summing to 1"),
    "probabilities negative": ({"probabilities": {"low": 1.5, "medium": -0.5}},
                               "probabilities['medium']"),
    "probabilities unknown tier": ({"probabilities": {"low": 0.5, "extreme": 0.5}},
                                   "probabilities"),
    "probabilities nan": ({"probabilities": {"low": float("nan"), "high": 1.0}},
                          "probabilities['low']"),
    "probabilities not a mapping": ({"probabilities": [0.2, 0.3, 0.5]}, "probabilities"),
    "reward mode": ({"reward": "linear"}, "reward"),
    "penalty negative": ({"penalty": -1.0}, "penalty"),
    "penalty nan": ({"penalty": float("nan")}, "penalty"),
    "penalty bool": ({"penalty": True}, "penalty"),
    "penalty string": ({"penalty": "1"}, "penalty"),
}


@pytest.mark.parametrize("case", sorted(BAD_KWARGS))
def test_bad_arguments_raise_naming_them(case: str) -> None:
    kwargs, fragment = BAD_KWARGS[case]
    with pytest.raises(ValueError, match="BudgetTier") as excinfo:
        wrapped(**kwargs)
    assert fragment in str(excinfo.value)


def test_valid_custom_arguments() -> None:
    budgets = {"low": 1, "medium": np.float64(2.5), "high": 10}
    env = wrapped(budgets=budgets, penalty=np.float32(0.5), reward="soft")
    assert env.budgets == {"low": 1.0, "medium": 2.5, "high": 10.0}
    assert all(type(v) is float for v in env.budgets.values())
    assert env.penalty == 0.5 and env.reward_mode == "soft"
    budgets["low"] = 5  # the wrapper keeps its own copy
    assert env.budgets["low"] == 1.0


def test_budgets_with_non_string_keys_raise_value_error() -> None:
    with pytest.raises(ValueError, match="budgets"):
        wrapped(budgets={1: 0.1, "low": 0.01, "medium": 0.02})


def test_env_without_tier_budgets_needs_budgets() -> None:
    with pytest.raises(ValueError, match="ToolBenchEnv has no default tier_budgets"):
        BudgetTier(gym.make("cost_envs/ToolBench-v0"))
    env = BudgetTier(gym.make("cost_envs/ToolBench-v0"),
                     budgets={"low": 0.001, "medium": 0.01, "high": 0.1})
    base = env.env.observation_space.shape[0]
    obs, info = env.reset(seed=0, options={"tier": "medium"})
    assert obs.shape == (base + 4,) and info["budget"] == 0.01
    _, _, _, _, info = env.step(np.zeros(env.action_space.n, dtype=np.int8))
    assert info["tier"] == "medium"


def test_non_box_observation_is_refused() -> None:
    budgets = {"low": 1.0, "medium": 2.0, "high": 3.0}
    with pytest.raises(ValueError, match="1-D Box"):
        BudgetTier(gym.make("FrozenLake-v1"), budgets=budgets)


# ---------------------------------------------------------------------- checkers, order
def test_gymnasium_check_env() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gym_check_env(wrapped())
    # the checker only remarks that it was given a wrapper, which is the point here
    others = [str(w.message) for w in record
              if "is different from the unwrapped version" not in str(w.message)
              and not issubclass(w.category, DeprecationWarning)]
    assert others == []


def test_sb3_check_env() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sb3_check_env(wrapped(), warn=True)
    assert [str(w.message) for w in record
            if not issubclass(w.category, DeprecationWarning)] == []


def test_step_before_reset_and_after_the_end_raises() -> None:
    env = wrapped()
    with pytest.raises(ResetNeeded, match="BudgetTier"):
        env.step(ANSWER)
    env.reset(seed=0)
    _, _, terminated, _, _ = env.step(ANSWER)
    assert terminated
    with pytest.raises(ResetNeeded, match="BudgetTier"):
        env.step(ANSWER)
    env.reset()
    env.step(onehot(NANO))  # a new episode steps again


def test_copies_continue_identically() -> None:
    env = wrapped()
    env.reset(seed=8)
    env.step(onehot(NANO))
    twin = copy.deepcopy(env)
    results = []
    for e in (env, twin):
        _, reward, terminated, _, info = e.step(onehot(GPT41))
        results.append([reward, terminated, info["budget_remaining"],
                        *[e.reset()[1]["tier"] for _ in range(12)]])
    assert results[0] == results[1]


# ------------------------------------------------------- a hard cap that follows the tier
def test_hard_budget_beneath_follows_the_drawn_tier() -> None:
    # The constructor's cap is the high tier's; each episode's cap must be its own tier's.
    env = BudgetTier(HardBudget(gym.make(ENV_ID), budget=1.0, on_exceed="mask"))
    seen = set()
    for episode in range(30):
        _, info = env.reset(seed=episode)
        hard = env.env
        assert hard.budget == info["budget"] == env.budgets[info["tier"]]
        seen.add(info["tier"])
        spent, done = 0.0, False
        while not done:
            _, _, terminated, truncated, info = env.step(np.ones(3, dtype=np.int8))
            spent += info["cost"]
            done = terminated or truncated
        assert spent <= env.budgets[info["tier"]]
    assert seen == set(TIERS)
