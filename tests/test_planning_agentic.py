"""AgenticRouting-v0's achievable reference: exact, blind to the luck, between rules and oracle."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from conftest import diverges_only_on_what_it_sees

import cost_envs
from agents.baselines import (
    AlwaysLarge,
    AlwaysSmall,
    CostOptOracle,
    DifficultyThreshold,
    RandomAllocator,
)
from agents.evaluation import evaluate, rollout
from agents.learners.bopo import BUDGET_QUANTILE, draw_tasks, make_env
from agents.planning import AgenticPlanner, plan_agentic, planner
from cost_envs.envs.agentic_routing import with_fresh_luck
from cost_envs.wrappers import HardBudget, TaskReplay

AGENTIC = "cost_envs/AgenticRouting-v0"
PROFILES = ("alfworld", "sciworld", "appworld")


def _fingerprint(tasks: list) -> str:
    digest = hashlib.sha256()
    for task in tasks:
        for array in (task.difficulty, task.signal, task.reasoning, task.luck, task.harm_luck):
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(np.array([task.input_tokens, task.output_tokens]).tobytes())
    return digest.hexdigest()[:16]


# ------------------------------------------------------------- the env's stream and luck
@pytest.mark.parametrize("profile, fingerprint, total", [
    ("alfworld", "6d71d8175195fc85", 122.69061483333333),
    ("sciworld", "89b4d6e684e89358", 62.29413603968253),
    ("appworld", "a08a814b2d281531", -2.0741726904761775),
])
def test_task_stream_and_dynamics_are_those_of_v0_before_with_fresh_luck(profile, fingerprint,
                                                                          total):
    # Figures recorded from the code before with_fresh_luck existed (issue #11): every
    # array of 70 tasks drawn with seed 0, and 100 episodes of a seeded random router.
    assert _fingerprint(draw_tasks(profile, 70, 0)) == fingerprint
    env = gym.make(AGENTIC, profile=profile)
    allocator = RandomAllocator(env, seed=3)
    assert sum(rollout(allocator, env, seed=0 if i == 0 else None).episode_return
               for i in range(100)) == pytest.approx(total, abs=1e-9)


def test_fresh_luck_keeps_the_parameters_and_redraws_the_luck():
    task = draw_tasks("sciworld", 1, 0)[0]
    fresh = with_fresh_luck(task, np.random.default_rng(1))
    for name in ("difficulty", "signal", "reasoning", "input_tokens", "output_tokens"):
        assert getattr(fresh, name) is getattr(task, name)
    for name in ("luck", "harm_luck"):
        old, new = getattr(task, name), getattr(fresh, name)
        assert new.shape == old.shape and new.dtype == old.dtype and not new.flags.writeable
        assert not np.array_equal(new, old)
    env = gym.make(AGENTIC, profile="sciworld")
    env.reset(options={"task": fresh})
    assert env.unwrapped.task is fresh


# -------------------------------------------------------------------------- exactness
def _budget(profile: str, n: int = 100) -> float:
    env = make_env(profile)
    costs = [rollout(AlwaysLarge(env), env, options={"task": t}).record.cost
             for t in draw_tasks(profile, n, 77)]
    return float(np.quantile(costs, BUDGET_QUANTILE))


@pytest.mark.parametrize("on_exceed", [None, "mask", "truncate"])
def test_expected_return_equals_the_monte_carlo_mean_of_its_own_policy(on_exceed):
    gaps, cut = [], 0
    for profile in PROFILES:
        env = gym.make(AGENTIC, profile=profile)
        if on_exceed is not None:  # tighter than BoPO's, so that it binds
            env = HardBudget(env, 0.6 * _budget(profile), on_exceed=on_exceed)
        agent = AgenticPlanner(env)
        rng = np.random.default_rng(11)
        # the task whose return varies most with the luck: the hardest to get right
        tasks = draw_tasks(profile, 12, 4)
        spread = []
        for task in tasks:
            returns = [rollout(agent, env, options={"task": with_fresh_luck(task, rng)}
                               ).episode_return for _ in range(40)]
            spread.append(np.std(returns))
        task = tasks[int(np.argmax(spread))]
        env.reset(options={"task": task})
        expected = agent.expected_return()
        runs = [rollout(agent, env, options={"task": with_fresh_luck(task, rng)})
                for _ in range(2500)]
        returns = np.array([run.episode_return for run in runs])
        cut += sum(run.record.budget_exceeded for run in runs)
        error = returns.std() / np.sqrt(len(returns))
        assert returns.std() > 0.1  # a task where the luck matters
        assert abs(returns.mean() - expected) < 4 * error, (profile, expected, returns.mean())
        gaps.append((returns.mean() - expected) / error)
    assert abs(np.sum(gaps)) / np.sqrt(len(gaps)) < 3  # pooled over the profiles
    assert (cut > 0) == (on_exceed is not None)  # the budget's cuts are in the expectation


def test_a_budget_that_never_binds_changes_nothing_and_a_tight_one_lowers_the_value():
    task = draw_tasks("appworld", 1, 4)[0]
    free, loose, tight = (AgenticPlanner(make_env("appworld", b)) for b in (None, 1e6, 0.04))
    values = []
    for agent in (free, loose, tight):
        agent.env.reset(options={"task": task})
        values.append(agent.plan())
    np.testing.assert_array_equal(values[0].large, values[1].large)
    assert values[2].expected_return < values[0].expected_return


# ------------------------------------------------------------------ blind to the luck
def test_the_plan_is_computed_without_the_luck():
    env = gym.make(AGENTIC, profile="sciworld")
    for task in draw_tasks("sciworld", 10, 2):
        env.reset(options={"task": task})
        prices = env.unwrapped.step_prices()
        plan = plan_agentic(env.unwrapped, task, *prices, budget=0.05)
        # the luck is never read: a task whose luck is NaN plans the same
        poisoned = replace(task, luck=np.full(task.horizon, np.nan),
                           harm_luck=np.full(task.horizon, np.nan))
        again = plan_agentic(env.unwrapped, poisoned, *prices, budget=0.05)
        np.testing.assert_array_equal(again.large, plan.large)
        np.testing.assert_array_equal(again.values, plan.values)


def test_other_luck_changes_its_actions_only_through_observed_outcomes():
    env = make_env("appworld", 0.06)
    agent = AgenticPlanner(env)
    rng = np.random.default_rng(5)
    diverged = 0
    for task in draw_tasks("appworld", 30, 3):
        diverged += diverges_only_on_what_it_sees(agent, env, task,
                                                 with_fresh_luck(task, rng))
    assert diverged > 0


# ------------------------------------------------- between the rules and the oracle
def _scores(factory, profile: str, tasks: list, budget: float) -> tuple[np.ndarray, np.ndarray]:
    env = make_env(profile, budget)
    allocator = factory(env)
    replay = TaskReplay(env, tasks)
    result = evaluate(allocator, replay, episodes=len(tasks), seed=0)
    return np.array(result.returns), np.array([r.success for r in result.records])


@pytest.mark.parametrize("profile", PROFILES)
def test_planner_beats_the_boundaries_and_the_threshold_rule_and_not_the_oracle(profile):
    budget = _budget(profile)
    train, tasks = draw_tasks(profile, 60, 8), draw_tasks(profile, 150, 9)
    ours, our_success = _scores(AgenticPlanner, profile, tasks, budget)
    rivals = {"always-small": AlwaysSmall, "always-large": AlwaysLarge,
              "threshold": lambda e: DifficultyThreshold.fit(e, train)}
    for name, factory in rivals.items():
        assert ours.mean() >= _scores(factory, profile, tasks, budget)[0].mean(), name
    oracle, oracle_success = _scores(CostOptOracle, profile, tasks, budget)
    # the oracle succeeds whenever any sequence of steps can, so wherever the planner does
    assert not (our_success & ~oracle_success).any()
    assert ours.mean() < oracle.mean()


# ----------------------------------------------------------------------- where it applies
def test_the_same_tasks_give_the_same_episodes():
    tasks = draw_tasks("alfworld", 40, 6)
    first, _ = _scores(AgenticPlanner, "alfworld", tasks, 0.05)
    second, _ = _scores(AgenticPlanner, "alfworld", tasks, 0.05)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("env_id", [i for i in cost_envs.ENV_IDS if "AgenticRouting" not in i])
def test_planner_refuses_other_envs_in_one_line(env_id):
    with pytest.raises(ValueError, match="AgenticRouting") as info:
        AgenticPlanner(gym.make(env_id))
    assert "\n" not in str(info.value)


def test_planner_picks_the_agentic_planner_and_sees_the_budget():
    env = HardBudget(gym.make(AGENTIC, profile="appworld"), budget=0.05)
    agent = planner(env)
    assert isinstance(agent, AgenticPlanner)
    env.reset(seed=0)
    env.set_budget(0.03)  # followed from the next episode on
    before = agent.plan()
    env.reset(options={"task": env.unwrapped.task})
    assert agent.plan() is not before


def test_planner_follows_one_env_and_needs_a_task():
    env = gym.make(AGENTIC)
    agent = AgenticPlanner(env)
    with pytest.raises(ValueError, match="reset"):
        agent.expected_return()
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="single environment"):
        agent.predict(np.stack([obs, obs]))
