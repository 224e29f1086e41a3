"""The achievable reference on ExpertRouting-v0/-v1: exact, blind to the luck, under the oracle."""

from __future__ import annotations

from dataclasses import fields, replace

import gymnasium as gym
import numpy as np
import pytest
from conftest import diverges_only_on_what_it_sees

import cost_envs
from agents.baselines import (
    ConsultAll,
    CostOptOracle,
    FixedConsultation,
    RandomAllocator,
    RuleBased,
)
from agents.evaluation import rollout
from agents.planning import ExpertPlanner, planner
from agents.planning.expert import answer_space
from agents.rules import BestFixedRule
from cost_envs.envs.expert_routing import CONTROLLER, ExpertTask, with_fresh_luck
from cost_envs.envs.expert_routing_v1 import OTHER_WRONG, OWN_WRONG, ExpertTaskV1, wrong_answer
from cost_envs.prices import PriceTable, default_price_table
from cost_envs.wrappers import TIERS, BudgetTier

V0, V1 = "cost_envs/ExpertRouting-v0", "cost_envs/ExpertRouting-v1"


def _env(env_id: str, tier: str | None = "medium", **kwargs) -> gym.Env:
    env = gym.make(env_id, **kwargs)
    return env if tier is None else BudgetTier(env, tier=tier)


def _tasks(env: gym.Env, n: int, seed: int = 0) -> list:
    env.reset(seed=seed)
    return env.unwrapped.sample_tasks(n)


# ------------------------------------------------------------------ luck and parameters
def test_task_streams_and_dynamics_are_those_before_with_fresh_luck():
    # Figures recorded from the code before luck_fields and with_fresh_luck (issue #11).
    expected = {V0: (28.62166825630471, 294.2301836236366, 135.38362822658473, 139),
                V1: (30.713482937091708, 315.5894093900621, 131.14265159808758, 134)}
    for env_id, (difficulty, luck, total, successes) in expected.items():
        tasks = _tasks(gym.make(env_id), 70)  # across a block boundary
        assert sum(t.difficulty for t in tasks) == pytest.approx(difficulty, abs=1e-9)
        assert sum(float(t.luck.sum()) for t in tasks) == pytest.approx(luck, abs=1e-9)
        env = gym.make(env_id)
        allocator = RandomAllocator(env, seed=3)
        runs = [rollout(allocator, env, seed=0 if i == 0 else None) for i in range(150)]
        assert sum(r.episode_return for r in runs) == pytest.approx(total, abs=1e-9)
        assert sum(r.record.success for r in runs) == successes


@pytest.mark.parametrize("env_id, task_type", [(V0, ExpertTask), (V1, ExpertTaskV1)])
def test_fresh_luck_redraws_exactly_the_luck_fields(env_id, task_type):
    task = _tasks(gym.make(env_id), 1)[0]
    assert type(task) is task_type
    fresh = with_fresh_luck(task, np.random.default_rng(1))
    assert type(fresh) is task_type
    for f in fields(task):
        old, new = getattr(task, f.name), getattr(fresh, f.name)
        if f.name in task.luck_fields:
            assert np.shape(new) == np.shape(old) and not np.array_equal(new, old), f.name
            assert np.min(new) >= 0 and np.max(new) < 1
        else:
            assert new is old, f.name
    env = gym.make(env_id)
    env.reset(options={"task": fresh})
    assert env.unwrapped.task is fresh


# ----------------------------------------------------------------- the model of the vote
def _codes(task, accuracy, called_by_round, m: int) -> tuple[int, ...]:
    """The answer state after the rounds, computed from the task's luck (v0: K = 0)."""
    k = len(getattr(task, "distractor_shares", ()))

    def code(right: bool, slip: float | None, own: int) -> int:
        if right:
            return 0
        if slip is None:
            return k + 1
        answer = wrong_answer(slip, task.attraction, task.distractor_shares, own)
        return k + 1 if answer >= OWN_WRONG else answer

    slip = getattr(task, "controller_slip", None)
    state = [code(task.controller_luck < accuracy[-1], slip, OWN_WRONG)] + [-1] * m
    for t, called in enumerate(called_by_round):
        for i in called:
            slips = getattr(task, "slips", None)
            state[1 + i] = code(task.luck[t, i] < accuracy[i],
                                None if slips is None else slips[t, i], OTHER_WRONG + i)
    return tuple(state)


@pytest.mark.parametrize("env_id", [V0, V1])
def test_the_answer_space_shows_what_the_env_shows_and_votes_as_it_does(env_id):
    env = gym.make(env_id)
    base = env.unwrapped
    layout = base.observation_layout
    slots = np.r_[tuple(layout[k] for k in ("consulted", "agrees_with_leading",
                                            "controller_leading", "support"))]
    trusts = (CONTROLLER.trust, tuple(e.trust for e in base.experts))
    rng = np.random.default_rng(0)
    checked = 0
    for task in _tasks(env, 150):
        space = answer_space(base.n_agents, len(getattr(task, "distractor_shares", ())),
                             *trusts)
        accuracy = [float(e.accuracy(task.difficulty)) for e in base.experts]
        accuracy.append(float(CONTROLLER.accuracy(task.difficulty)))
        obs, _ = env.reset(options={"task": task})
        rounds: list[list[int]] = []
        done = False
        while not done:
            action = rng.integers(0, 2, base.n_agents).astype(np.int8)
            if not rounds:
                action[rng.integers(base.n_agents)] = 1  # at least one round of experts
            rounds.append(action.nonzero()[0].tolist())
            obs, _, done, _, info = env.step(action)
            state = _codes(task, accuracy, rounds, base.n_agents)
            index = np.ravel_multi_index((state[0], *(s + 1 for s in state[1:])), space.shape)
            np.testing.assert_array_equal(space.observed[space.signature[index]], obs[slots])
            checked += 1
        assert space.right[index] == float(info["success"])
    assert checked > 300


# --------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("env_id, tier, profile", [
    (V0, "high", "math500"), (V1, "medium", "math500"), (V1, "high", "aime"),
    (V1, None, "math500")])  # None: no tier, the env's own Eq. 1 reward
def test_expected_score_equals_the_monte_carlo_mean_over_fresh_luck(env_id, tier, profile):
    env = _env(env_id, tier, profile=profile)
    agent = ExpertPlanner(env)
    rng = np.random.default_rng(11)
    # the task whose outcome is least certain under the plan: the hardest case to get right
    tasks = _tasks(env, 12, seed=3)
    scored = []
    for task in tasks:
        env.reset(options={"task": task})
        scored.append((abs(agent.expected()[0] - 0.5), task))
    task = min(scored, key=lambda pair: pair[0])[1]
    env.reset(options={"task": task})
    expected, cost = agent.expected()
    runs = [rollout(agent, env, options={"task": with_fresh_luck(task, rng)})
            for _ in range(600)]
    returns = np.array([r.episode_return for r in runs])
    costs = np.array([r.record.cost for r in runs])
    error = returns.std() / np.sqrt(len(returns))
    assert 0.05 < expected < 1.5 and error > 0
    assert abs(returns.mean() - expected) < 4 * error, (expected, returns.mean(), error)
    assert abs(costs.mean() - cost) < 4 * costs.std() / np.sqrt(len(costs)) + 1e-12


# ------------------------------------------------------------------ blind to the luck
@pytest.mark.parametrize("env_id", [V0, V1])
def test_the_plan_is_computed_without_the_luck(env_id):
    env = _env(env_id, "high")
    agent = ExpertPlanner(env)
    rng = np.random.default_rng(2)
    diverged = 0
    for task in _tasks(env, 25):
        # poisoned luck: a planner that read it would crash or change its plan
        blind = replace(task, **{name: np.full_like(getattr(task, name), np.nan)
                                 if isinstance(getattr(task, name), np.ndarray) else np.nan
                                 for name in task.luck_fields})
        env.reset(options={"task": task})
        expected = agent.expected()
        env.unwrapped._task = blind  # what the planner reads, with no luck in it
        assert agent.expected() == expected
        diverged += diverges_only_on_what_it_sees(agent, env, task,
                                                 with_fresh_luck(task, rng))
    assert diverged > 0  # the luck did change some outcomes


# ------------------------------------------------- between the rules and the oracle
def _rules(env: gym.Env) -> dict:
    m = env.unwrapped.n_agents
    rules = {f"single {i}": (lambda e, i=i: FixedConsultation(e, [i])) for i in range(m)}
    rules.update({"alone": lambda e: FixedConsultation(e, []), "consult-all": ConsultAll,
                  "escalate": RuleBased,
                  "best-rule": lambda e: BestFixedRule(e, n_tasks=40, beam=2, max_turns=2,
                                                       cuts=2)})
    return rules


@pytest.mark.parametrize("env_id", [V0, V1])
def test_planner_beats_or_ties_every_rule_per_tier_and_stays_under_the_oracle(env_id):
    n, draws = 60, 8
    for tier in TIERS:
        env = _env(env_id, tier)
        tasks = _tasks(env, n, seed=5)
        agent = ExpertPlanner(env)
        oracle = CostOptOracle(env)
        expected = []
        for task in tasks:
            env.reset(options={"task": task})
            expected.append(agent.expected()[0])
            # the oracle succeeds within budget wherever the planner does (same luck)
            if rollout(agent, env, options={"task": task}).episode_return > 0:
                assert rollout(oracle, env, options={"task": task}).episode_return == 1.0
        rng = np.random.default_rng(9)
        replays = [with_fresh_luck(task, rng) for task in tasks for _ in range(draws)]
        for name, factory in _rules(env).items():
            rule = factory(env)
            scores = np.array([rollout(rule, env, options={"task": t}).episode_return
                               for t in replays]).reshape(n, draws).mean(axis=1)
            gap = np.array(expected) - scores  # the planner's exact value, the rule's mean
            error = gap.std() / np.sqrt(n)
            assert gap.mean() > -3 * error - 1e-12, (tier, name, gap.mean(), error)


# ----------------------------------------------------------------------- determinism
def test_planner_is_deterministic_and_its_value_does_not_depend_on_its_history():
    runs = []
    for _ in range(2):
        env = _env(V1, "high", profile="math500")
        agent = ExpertPlanner(env)
        runs.append([rollout(agent, env, seed=4 if i == 0 else None, record_steps=True)
                     for i in range(30)])
    for first, second in zip(*runs, strict=True):
        np.testing.assert_array_equal(np.array(first.actions), np.array(second.actions))
    env = _env(V1, "high")
    agent = ExpertPlanner(env)
    env.reset(seed=0)
    before = agent.expected()
    rollout(agent, env, options={"task": env.unwrapped.task})
    assert agent.expected() == before


def test_tiers_order_the_expected_scores():
    env = _env(V0, None)
    agent = ExpertPlanner(BudgetTier(env))
    for task in _tasks(env, 20):
        env.reset(options={"task": task})
        values = [agent.expected(tier)[0] for tier in TIERS]
        assert values == sorted(values)  # a larger budget never hurts


# ----------------------------------------------------------------------- where it applies
@pytest.mark.parametrize("env_id", [i for i in cost_envs.ENV_IDS if "ExpertRouting" not in i])
def test_planner_refuses_other_envs_in_one_line(env_id):
    with pytest.raises(ValueError, match="ExpertRouting-v0 and -v1") as info:
        ExpertPlanner(gym.make(env_id))
    assert "\n" not in str(info.value)


def test_planner_factory_picks_it_for_v0_and_v1():
    for env_id in (V0, V1):
        assert type(planner(_env(env_id))) is ExpertPlanner


def test_planner_follows_one_env_sees_every_step_and_needs_a_question():
    env = _env(V0, "high")
    agent = ExpertPlanner(env)
    with pytest.raises(ValueError, match="reset"):
        agent.expected()
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="single environment"):
        agent.predict(np.stack([obs, obs]))
    obs, *_ = env.step(np.array([1, 0, 0], dtype=np.int8))
    with pytest.raises(ValueError, match="must see every step"):
        agent.predict(obs)  # it never saw round 0 of this question
    with pytest.raises(ValueError, match="expected an observation of 20 entries"):
        agent.predict(obs[:-4])


def test_planner_refuses_a_pool_too_large_to_enumerate():
    table = default_price_table()
    copies = [replace(table["o3"], name=f"o3-{k}") for k in range(2)]
    experts = ["gpt-4.1-nano", "gpt-4.1", "o3", *({"name": c.name, "skill": 1.4,
                                                   "sharpness": 3.0, "trust": 2.4,
                                                   "output_tokens": 250.0} for c in copies)]
    env = gym.make(V1, experts=experts, prices=PriceTable((*table.models, *copies)))
    with pytest.raises(ValueError, match="at most 20000; 5 experts need 38880"):
        ExpertPlanner(env)
