"""The achievable reference on ToolBench-v0: exact, blind to the luck, between rules and oracle."""

from __future__ import annotations

import itertools
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from conftest import diverges_only_on_what_it_sees

import cost_envs
from agents import cli
from agents.baselines import BASELINES, CostOptOracle, RuleBased
from agents.evaluation import rollout
from agents.planning import AnswerModel, ExpectimaxPlanner, plan_toolbench, planner
from agents.rules import BestFixedRule
from cost_envs.envs.toolbench import with_fresh_luck
from cost_envs.scoring import token_f1

TOOLBENCH = "cost_envs/ToolBench-v0"
LUCK = ("luck", "recall_luck", "hallucination_rate", "hallucination_tokens")


def _tasks(n: int, seed: int = 0) -> tuple[gym.Env, list]:
    env = gym.make(TOOLBENCH)
    env.reset(seed=seed)
    return env, env.unwrapped.sample_tasks(n)


# ------------------------------------------------------------------ the answer's F1 law
def _brute_force(reference: list[int], topic: list[int], q: float, threshold: float
                 ) -> tuple[float, float]:
    """Every recall pattern and every sequence of spurious picks, with token_f1 itself."""
    size = len(reference)
    p = 0.3 + 0.7 * q
    h = (np.arange(1_000_000) + 0.5) / 1_000_000  # the hallucination rate, finely
    counts = np.bincount(np.rint(size * (1.0 - q) * h).astype(int), minlength=size + 1)
    success = mean_f1 = 0.0
    for n_s, weight in enumerate(counts / len(h)):
        if weight == 0:
            continue
        for pattern in itertools.product((0, 1), repeat=size):
            p_pattern = np.prod([p if bit else 1 - p for bit in pattern])
            recalled = [tok for tok, bit in zip(reference, pattern, strict=True) if bit]
            for picks in itertools.product(topic, repeat=n_s):
                f1 = token_f1(recalled + list(picks), reference)
                mass = weight * p_pattern / len(topic) ** n_s
                success += mass * (f1 >= threshold)
                mean_f1 += mass * f1
    return success, mean_f1


@pytest.mark.parametrize("reference, topic", [
    ([7, 8, 9], [7, 8, 9, 1, 2, 3, 4, 5, 6]),  # distinct, no collision
    ([7, 7, 9], [7, 7, 9, 7, 9, 3, 3, 5, 6]),  # a repeated token, distractors that hit
])
@pytest.mark.parametrize("q", [0.2, 0.55])
@pytest.mark.parametrize("threshold", [0.8, 0.75])
def test_answer_model_equals_exhaustive_enumeration(reference, topic, q, threshold):
    # Ties at the threshold must fall as token_f1's arithmetic makes them fall: with L = 3,
    # overlap 2 of 2 predicted gives exactly 0.8, and overlap 3 of 5 predicted gives
    # 0.7499999999999999 (a failure at 0.75, though 2 * 3 / (5 + 3) is 0.75).
    model = AnswerModel(np.array(reference), np.array(topic), threshold=threshold)
    assert model.distribution(q).sum() == pytest.approx(1.0, abs=1e-12)
    success, mean_f1 = model.outcome(q)
    expected = _brute_force(reference, topic, q, threshold)
    assert success == pytest.approx(expected[0], abs=2e-5)
    assert mean_f1 == pytest.approx(expected[1], abs=2e-5)


def test_answer_model_matches_the_env_composer_on_a_task_whose_distractors_hit():
    env, tasks = _tasks(100)
    base = env.unwrapped
    # among tasks whose distractors repeat reference tokens, the (task, composer) whose
    # success is least certain: the hardest case to get right
    cases = []
    for task in tasks:
        if not np.isin(task.topic[len(task.reference):], task.reference).any():
            continue
        base.reset(options={"task": task})
        model = AnswerModel(task.reference, task.topic, base.f1_threshold)
        for agent in range(base.n_agents):
            if base.composer_strength(agent) > 0:
                success = model.outcome(base.composer_strength(agent))[0]
                cases.append((abs(success - 0.5), agent, task, model))
    _, agent, task, model = min(cases, key=lambda case: case[0])
    base.reset(options={"task": task})
    success, mean_f1 = model.outcome(base.composer_strength(agent))
    rng = np.random.default_rng(3)
    f1s = []
    for _ in range(4000):
        base.reset(options={"task": with_fresh_luck(task, rng)})
        f1s.append(token_f1(base.answer_tokens(0, agent).tolist(), task.reference.tolist()))
    f1s = np.array(f1s)
    assert 0.05 < success < 0.95
    assert np.mean(f1s >= base.f1_threshold) == pytest.approx(success, abs=4 * 0.5 / 63)
    assert f1s.mean() == pytest.approx(mean_f1, abs=4 * f1s.std() / 63)


# -------------------------------------------------------------------------- exactness
def test_expected_return_equals_the_monte_carlo_mean_of_its_own_policy():
    env, tasks = _tasks(30, seed=4)
    planner = ExpectimaxPlanner(env)
    rng = np.random.default_rng(11)
    gaps = []
    for task in [next(t for t in tasks if t.n_stages == k) for k in (2, 3, 4)]:
        env.reset(options={"task": task})
        expected = planner.expected_return()
        returns = np.array([
            rollout(planner, env, options={"task": with_fresh_luck(task, rng)}).episode_return
            for _ in range(2500)])
        error = returns.std() / np.sqrt(len(returns))
        assert abs(returns.mean() - expected) < 4 * error, (expected, returns.mean(), error)
        gaps.append((returns.mean() - expected) / error)
    assert abs(np.sum(gaps)) / np.sqrt(len(gaps)) < 3  # pooled over the tasks


# ------------------------------------------------------------------ blind to the luck
def test_the_plan_is_computed_without_the_luck():
    env, tasks = _tasks(20)
    for task in tasks:
        plan = plan_toolbench(env.unwrapped, task)
        blind = plan_toolbench(env.unwrapped, replace(task, **dict.fromkeys(LUCK)))
        np.testing.assert_array_equal(blind.actions, plan.actions)
        np.testing.assert_array_equal(blind.values, plan.values)


def test_other_luck_changes_its_actions_only_through_observed_outcomes():
    env, tasks = _tasks(40)
    planner = ExpectimaxPlanner(env)
    rng = np.random.default_rng(5)
    diverged = 0
    for task in tasks:
        diverged += diverges_only_on_what_it_sees(planner, env, task,
                                                 with_fresh_luck(task, rng))
    assert diverged > 0  # the luck did change some outcomes


# ------------------------------------------------- between the rules and the oracle
def _returns(factory, episodes: int = 300) -> tuple[np.ndarray, np.ndarray]:
    env = gym.make(TOOLBENCH)
    allocator = factory(env)
    runs = [rollout(allocator, env, seed=0 if i == 0 else None) for i in range(episodes)]
    return (np.array([r.episode_return for r in runs]),
            np.array([r.record.success for r in runs]))


def test_planner_beats_every_baseline_and_the_best_rule_and_not_the_oracle():
    planner_return, planner_success = _returns(ExpectimaxPlanner)
    rivals = {name: cls for name, cls in BASELINES.items() if name != "oracle"}
    rivals["best-rule"] = lambda e: BestFixedRule(e, n_tasks=60, beam=2, max_turns=2, cuts=2)
    for name, factory in rivals.items():
        assert planner_return.mean() >= _returns(factory)[0].mean(), name
    # the oracle succeeds whenever any sequence of calls can: on every task it succeeds
    # where the planner does
    _, oracle_success = _returns(CostOptOracle)
    assert not (planner_success & ~oracle_success).any()
    assert planner_success.mean() < oracle_success.mean()


def test_planner_beats_the_rule_on_other_pools():
    for size in (4, 12):
        env = gym.make(TOOLBENCH, pool_size=size)
        planner, rule = ExpectimaxPlanner(env), RuleBased(env)
        totals = [sum(rollout(a, env, seed=0 if i == 0 else None).episode_return
                      for i in range(60)) for a in (planner, rule)]
        assert totals[0] >= totals[1], size


# ----------------------------------------------------------------------- where it applies
@pytest.mark.parametrize("env_id", [i for i in cost_envs.ENV_IDS if "ToolBench" not in i])
def test_planner_refuses_other_envs_in_one_line(env_id):
    with pytest.raises(ValueError, match="ToolBench") as info:
        ExpectimaxPlanner(gym.make(env_id))
    assert "\n" not in str(info.value)


def test_cli_evaluates_the_planner_and_refuses_it_elsewhere(capsys):
    cli.main(["evaluate", "--env", TOOLBENCH, "--methods", "planner,rule", "--episodes", "20",
              "--json", "--resamples", "50"])
    assert "planner" in capsys.readouterr().out
    unmodelled = next(env_id for env_id in cost_envs.ENV_IDS if not _modelled(env_id))
    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "--env", unmodelled, "--methods", "planner"])
    message = str(info.value.code)
    assert "planner does not apply" in message and "ToolBench" in message
    assert "\n" not in message


def test_planner_follows_one_env_and_needs_a_task():
    env = gym.make(TOOLBENCH)
    planner = ExpectimaxPlanner(env)
    with pytest.raises(ValueError, match="reset"):
        planner.expected_return()
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="single environment"):
        planner.predict(np.stack([obs, obs]))


def _modelled(env_id: str) -> bool:
    """Whether a planner of ``agents.planning`` models ``env_id``'s family."""
    try:
        planner(gym.make(env_id))
    except ValueError:
        return False
    return True


def test_lora_ppo_tables_have_the_planner_row_where_a_planner_models_the_env():
    from experiments.lora_ppo import runner as lora_ppo

    for env_id in lora_ppo.ENVS:
        rows = lora_ppo.baseline_rows(env_id)
        if _modelled(env_id):
            assert rows["planner"] == ("Planner (knows the task, not the luck)", planner)
        else:
            assert "planner" not in rows


def test_planner_refuses_a_pool_too_large_to_enumerate():
    from dataclasses import replace as renamed

    from cost_envs.envs.toolbench import TOOLBENCH_CATALOGUE
    from cost_envs.pool import AgentPool

    tools = TOOLBENCH_CATALOGUE.agents[:9]
    pool = AgentPool(tuple(renamed(a, name=f"{a.name}_{k}") for k in range(2) for a in tools),
                     TOOLBENCH_CATALOGUE.skills)
    with pytest.raises(ValueError, match="at most 16 tools; got m=18"):
        ExpectimaxPlanner(gym.make(TOOLBENCH, pool=pool))


@pytest.mark.parametrize("pool_size", [3, 8, 12])
def test_misses_are_the_product_over_the_called_tools_and_later_stages_solve_alone(pool_size):
    """The code-by-code product is the direct one bit for bit; ``first_stage`` changes
    nothing from that stage on (the Bayes reference's values come from it)."""
    from agents.planning.toolbench import JointActions, solve_batch

    env = gym.make("cost_envs/ToolBench-v0", pool_size=pool_size).unwrapped
    joint, caps = JointActions.of(env), env.pool.capabilities
    rng = np.random.default_rng(pool_size)
    p_clear = rng.random((40, 3, pool_size)) ** 2
    direct = np.prod(np.where(joint.calls, 1.0 - p_clear[..., None, :], 1.0), axis=-1)
    assert np.array_equal(joint.misses(p_clear), direct)
    skills = rng.integers(0, caps.shape[1], (30, 4))
    difficulty = rng.random((30, 4))
    payoff = rng.random((30, pool_size)) * 5
    values, best = solve_batch(joint, caps, skills, difficulty, payoff)
    for first in (1, 3):
        later, later_best = solve_batch(joint, caps, skills, difficulty, payoff, first)
        assert np.array_equal(later[:, :, first:], values[:, :, first:])
        assert np.array_equal(later_best[:, :, first:], best[:, :, first:])
        assert not later[:, :, :first].any()
    # one task alone is the batch's row: the expected return plan_toolbench reports
    alone, _ = solve_batch(joint, caps, skills[3:4], difficulty[3:4], payoff[3:4])
    assert np.array_equal(alone[0], values[3])
