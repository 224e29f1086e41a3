"""ExpertRouting-v0's decisions: the weighted vote, what is observed, the oracle, the rule.

Split from ``test_expert_routing.py`` (the accuracies, prices and arguments), whose
helpers these tests share. Expected values are recomputed from the class docstring's
numbers, not read back from the env's internals.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

import numpy as np
import pytest
from test_expert_routing import (  # the generative model's helpers live there
    ANSWER,
    CONTROLLER,
    DOC_TRUST,
    EXPERTS,
    GPT41,
    NANO,
    O3,
    accuracy,
    base_task,
    crafted,
    onehot,
    parts,
    play,
    random_episode_actions,
    success,
)

from cost_envs.envs.expert_routing import ExpertRoutingEnv, ExpertTask, ModelProfile


@pytest.fixture(scope="module")
def env() -> ExpertRoutingEnv:
    return ExpertRoutingEnv()

# ======================================================================= (c) vote
@pytest.mark.parametrize(
    ("controller_right", "right", "actions", "won"),
    [
        # controller + right nano (1.0 + 1.2) outvote a wrong GPT-4.1 (1.6)
        (True, {(0, NANO)}, [onehot(3, NANO, GPT41), ANSWER], True),
        # ... but not a wrong o3 (2.5)
        (True, {(0, NANO)}, [onehot(3, NANO, O3), ANSWER], False),
        # one consulted expert overrides the controller, either way
        (True, set(), [onehot(3, GPT41), ANSWER], False),
        (True, set(), [onehot(3, NANO), ANSWER], False),
        (False, {(0, NANO)}, [onehot(3, NANO), ANSWER], True),
        # right nano + right GPT-4.1 (2.8) beat a wrong o3 (2.5) and a wrong controller
        (False, {(0, NANO), (0, GPT41)}, [onehot(3, 0, 1, 2), ANSWER], True),
        # right o3 (2.5) beats a wrong controller and wrong nano, GPT-4.1 (each alone)
        (False, {(0, O3)}, [onehot(3, 0, 1, 2), ANSWER], True),
        # right GPT-4.1 alone (1.6) loses to a wrong o3 (2.5)
        (False, {(0, GPT41)}, [onehot(3, GPT41, O3), ANSWER], False),
        # controller + right GPT-4.1 (2.6) beat a wrong o3 (2.5)
        (True, {(0, GPT41)}, [onehot(3, GPT41, O3), ANSWER], True),
    ],
)
def test_weighted_vote(env: ExpertRoutingEnv, controller_right: bool,
                       right: set[tuple[int, int]], actions: list[np.ndarray], won: bool) -> None:
    task = crafted(base_task(env), controller_right, right)
    assert success(env, task, actions) is won
    assert success(env, task, [ANSWER]) is controller_right


def tie_env() -> ExpertRoutingEnv:
    """Expert 0 weighs as much as the controller; expert 1 as much as both together."""
    return ExpertRoutingEnv(experts=[
        ModelProfile("gpt-4.1-nano", 0.59, 5.6, trust=1.0, output_tokens=400),
        {"name": "gpt-4.1", "skill": 0.75, "sharpness": 5.2, "trust": 2.0,
         "output_tokens": 450},
    ])


@pytest.mark.parametrize(
    ("controller_right", "right", "action", "won"),
    [
        (True, set(), (0,), True),  # right controller 1.0 vs wrong expert 1.0: controller
        (False, {(0, 0)}, (0,), False),  # wrong controller 1.0 vs right expert 1.0: controller
        (False, set(), (0,), False),  # two lone wrong answers of 1.0: the controller's leads
        (True, {(0, 0)}, (0, 1), True),  # right pair 2.0 vs wrong expert 2.0: controller's
        (False, {(0, 1)}, (0, 1), True),  # right expert 2.0 vs two lone wrong answers
    ],
)
def test_a_tie_goes_to_the_controller(controller_right: bool, right: set[tuple[int, int]],
                                      action: tuple[int, ...], won: bool) -> None:
    env = tie_env()
    task = crafted(base_task(env), controller_right, right)
    results = play(env, task, [onehot(2, *action), np.zeros(2, dtype=np.int8)])
    assert results[-1][4]["success"] is won
    # the observation agrees: the controller's own answer leads after a tie
    p = parts(env, results[1][0])
    if len(action) == 1:
        assert p["controller_leading"][0] == 1.0
        assert p["agrees_with_leading"].tolist() == [0.0, 0.0]
        assert p["support"][0] == pytest.approx(0.5)


def test_equal_wrong_experts_tie_to_the_lower_index() -> None:
    twins = [ModelProfile(name, 0.6, 5.0, trust=1.5, output_tokens=300)
             for name in ("gpt-4.1", "gpt-4.1-nano")]
    env = ExpertRoutingEnv(experts=twins)
    task = crafted(base_task(env), True)  # controller right (1.0), both experts wrong (1.5)
    results = play(env, task, [np.ones(2, np.int8), np.zeros(2, np.int8)])
    p = parts(env, results[1][0])
    assert p["agrees_with_leading"].tolist() == [1.0, 0.0]
    assert p["controller_leading"][0] == 0.0 and p["support"][0] == pytest.approx(1.5 / 4)
    assert results[-1][4]["success"] is False


def test_reconsulting_resamples_with_the_next_rounds_luck(env: ExpertRoutingEnv) -> None:
    task = base_task(env)
    nano = onehot(3, NANO)
    # controller wrong; nano right in round 0, wrong in round 1, right in round 2
    flip = crafted(task, False, {(0, NANO), (2, NANO)})
    results = play(env, flip, [nano, nano, nano])
    assert results[-1][4]["success"] is True
    results = play(env, flip, [nano, nano, ANSWER])
    assert results[-1][4]["success"] is False  # the latest answer counts, not the first
    agree = [parts(env, r[0])["controller_leading"][0] for r in results]
    assert agree == [1.0, 0.0, 0.0, 0.0]  # nano leads alone after each consultation
    # the round index picks the luck, not how often the expert was asked: nano asked first
    # in round 1 draws luck[1, nano] (wrong here), in round 2 luck[2, nano] (right)
    first_in_round_1 = crafted(task, False, {(0, NANO), (2, NANO), (0, GPT41)})
    obs = play(env, first_in_round_1, [onehot(3, GPT41), nano, ANSWER])[2][0]
    assert parts(env, obs)["agrees_with_leading"].tolist() == [0.0, 1.0, 0.0]
    first_in_round_2 = crafted(task, False, {(0, NANO), (2, NANO), (0, O3), (1, O3)})
    obs = play(env, first_in_round_2, [onehot(3, O3), onehot(3, O3), nano])[3][0]
    assert parts(env, obs)["agrees_with_leading"].tolist() == [1.0, 0.0, 1.0]


def test_only_each_experts_latest_answer_votes(env: ExpertRoutingEnv) -> None:
    # nano right twice (1.2 each) must not add up to outvote a wrong GPT-4.1 (1.6)
    task = crafted(base_task(env), False, {(0, NANO), (1, NANO)})
    assert success(env, task, [onehot(3, NANO, GPT41), onehot(3, NANO), ANSWER]) is False
    assert success(env, task, [onehot(3, NANO), ANSWER]) is True


# ================================================================ (d) observation
@pytest.mark.parametrize(
    ("controller_right", "right", "action", "expected"),
    [
        # controller + nano right (2.2) lead a wrong GPT-4.1 (1.6)
        (True, {(0, NANO)}, (NANO, GPT41),
         {"consulted": [1, 1, 0], "agrees_with_leading": [1, 0, 0],
          "controller_leading": [1], "support": [2.2 / 3.8]}),
        # a wrong o3 (2.5) leads the right controller + nano (2.2)
        (True, {(0, NANO)}, (NANO, O3),
         {"consulted": [1, 0, 1], "agrees_with_leading": [0, 0, 1],
          "controller_leading": [0], "support": [2.5 / 4.7]}),
        # all wrong: the heaviest lone answer (GPT-4.1) leads
        (False, set(), (NANO, GPT41),
         {"consulted": [1, 1, 0], "agrees_with_leading": [0, 1, 0],
          "controller_leading": [0], "support": [1.6 / 3.8]}),
        # right nano + GPT-4.1 (2.8) lead a wrong o3 and a wrong controller
        (False, {(0, NANO), (0, GPT41)}, (NANO, GPT41, O3),
         {"consulted": [1, 1, 1], "agrees_with_leading": [1, 1, 0],
          "controller_leading": [0], "support": [2.8 / 6.3]}),
        # everyone right: unanimous
        (True, {(0, NANO), (0, GPT41), (0, O3)}, (NANO, GPT41, O3),
         {"consulted": [1, 1, 1], "agrees_with_leading": [1, 1, 1],
          "controller_leading": [1], "support": [1.0]}),
    ],
)
def test_observation_reports_the_vote(env: ExpertRoutingEnv, controller_right: bool,
                                      right: set[tuple[int, int]], action: tuple[int, ...],
                                      expected: dict[str, list[float]]) -> None:
    task = crafted(base_task(env), controller_right, right)
    obs, *_ = play(env, task, [onehot(3, *action), ANSWER])[1]
    p = parts(env, obs)
    for key, value in expected.items():
        np.testing.assert_allclose(p[key], value, rtol=1e-6, err_msg=key)
    assert p["rounds_left"][0] == pytest.approx(2 / 3)


def independent_vote(controller_right: bool, status: list[int]) -> tuple[bool, int, float]:
    """The documented vote: right answers pool their trust, each wrong one stands alone.

    Returns (right leads, leading wrong source (-1 controller), leading weight). With the
    default trusts no two groups can weigh the same, so ties never arise here.
    """
    right = (1.0 if controller_right else 0.0) + sum(
        DOC_TRUST[EXPERTS[i]] for i, s in enumerate(status) if s == 1)
    wrongs = ([] if controller_right else [(1.0, -1)]) + [
        (DOC_TRUST[EXPERTS[i]], i) for i, s in enumerate(status) if s == 0]
    weight, source = max(wrongs, default=(0.0, -2))
    return right > weight, source, max(right, weight)


def test_observation_matches_the_vote_on_random_episodes(env: ExpertRoutingEnv) -> None:
    env.reset(seed=31)
    rng = np.random.default_rng(31)
    for task in env.sample_tasks(150):
        actions = random_episode_actions(rng)
        results = play(env, task, actions)
        d = task.difficulty
        controller_right = task.controller_luck < accuracy(CONTROLLER, d)
        status = [-1, -1, -1]
        for t, (action, (obs, _, terminated, _, info)) in enumerate(
                zip(actions, results[1:], strict=True)):
            for i in np.flatnonzero(action):
                status[i] = int(task.luck[t, i] < accuracy(EXPERTS[i], d))
            right_leads, source, weight = independent_vote(controller_right, status)
            p = parts(env, obs)
            consulted = [s >= 0 for s in status]
            assert p["consulted"].tolist() == [float(c) for c in consulted]
            agrees = [c and ((s == 1) if right_leads else (source == i))
                      for i, (c, s) in enumerate(zip(consulted, status, strict=True))]
            assert p["agrees_with_leading"].tolist() == [float(a) for a in agrees]
            ctrl = controller_right if right_leads else source == -1
            assert p["controller_leading"][0] == float(ctrl)
            total = 1.0 + sum(DOC_TRUST[EXPERTS[i]] for i in range(3) if consulted[i])
            assert p["support"][0] == pytest.approx(weight / total, rel=1e-6)
            assert p["rounds_left"][0] == pytest.approx((3 - t - 1) / 3)
            if terminated:
                assert info["success"] is right_leads
                assert info["quality"] == (10.0 if right_leads else 0.0)


def test_initial_observation_reveals_no_correctness(env: ExpertRoutingEnv) -> None:
    task = base_task(env, seed=12)
    layout = env.observation_layout
    observations = []
    for controller_luck, difficulty in [(0.0, task.difficulty), (1.0, task.difficulty),
                                        (0.0, 0.05), (1.0, 0.95)]:
        luck = np.random.default_rng(int(controller_luck)).random(task.luck.shape)
        variant = dataclasses.replace(task, controller_luck=controller_luck,
                                      difficulty=difficulty, luck=luck)
        obs, info = env.reset(options={"task": variant})
        observations.append(obs)
        assert info == {}
    for obs in observations[1:]:
        np.testing.assert_array_equal(obs, observations[0])
    p = parts(env, observations[0])
    assert p["consulted"].tolist() == [0, 0, 0]
    assert p["agrees_with_leading"].tolist() == [0, 0, 0]
    assert p["controller_leading"][0] == 1.0 and p["support"][0] == 1.0
    assert p["rounds_left"][0] == 1.0
    assert p["difficulty"][0] == np.float32(task.difficulty_estimate)
    assert p["profile"].tolist() == [float(k == task.profile) for k in range(3)]
    band = min(int(task.difficulty_estimate * 3), 2)
    assert p["task_embedding"].tolist() == [float(k == band) for k in range(3)]
    assert observations[0].shape == (16,) and observations[0] in env.observation_space
    assert layout["task_embedding"].stop == 16


def test_one_disagreeing_expert_reveals_only_the_disagreement(env: ExpertRoutingEnv) -> None:
    task = base_task(env, seed=3)
    nano = onehot(3, NANO)
    seen = {}
    for controller_right, nano_right in itertools.product((True, False), repeat=2):
        right = {(0, NANO)} if nano_right else set()
        seen[controller_right, nano_right] = play(
            env, crafted(task, controller_right, right), [nano, ANSWER])[1][0]
    disagreements = [seen[True, False], seen[False, True], seen[False, False]]
    for obs in disagreements[1:]:
        np.testing.assert_array_equal(obs, disagreements[0])
    agree, apart = parts(env, seen[True, True]), parts(env, disagreements[0])
    assert agree["controller_leading"][0] == 1.0 and agree["support"][0] == 1.0
    assert apart["controller_leading"][0] == 0.0
    assert apart["support"][0] == pytest.approx(1.2 / 2.2)
    assert agree["agrees_with_leading"][NANO] == apart["agrees_with_leading"][NANO] == 1.0


def test_difficulty_bands_of_the_task_embedding(env: ExpertRoutingEnv) -> None:
    task = base_task(env)
    for estimate, band in [(0.0, 0), (0.33, 0), (0.34, 1), (0.66, 1), (0.67, 2), (1.0, 2)]:
        obs, _ = env.reset(options={"task": dataclasses.replace(
            task, difficulty_estimate=estimate)})
        assert parts(env, obs)["task_embedding"].tolist() == [float(k == band)
                                                              for k in range(3)]


# ===================================================================== (f) oracle
def brute_force(env: ExpertRoutingEnv) -> float | None:
    """Cheapest money from here to a successful answer, over every action sequence."""
    # the env's constant configuration is shared by the copies (only to save time)
    shared = [env.price_table, env.pool, env.experts, env.controller, env.observation_space,
              env.action_space, env.observation_layout, env.reward_weights]
    best = None
    for bits in itertools.product((0, 1), repeat=env.n_agents):
        child = copy.deepcopy(env, {id(x): x for x in shared})
        _, _, terminated, _, info = child.step(np.array(bits, dtype=np.int8))
        rest = brute_force(child) if not terminated else 0.0 if info["success"] else None
        if rest is not None:
            total = info["cost"] + rest
            best = total if best is None else min(best, total)
    return best


def oracle_tasks(env: ExpertRoutingEnv) -> list[ExpertTask]:
    env.reset(seed=77)
    tasks = env.sample_tasks(3)
    task = tasks[0]
    return [
        *tasks,
        crafted(task, True),  # answer now
        crafted(task, False),  # nothing ever right: no plan
        crafted(task, False, {(0, NANO), (0, O3)}),  # nano is the cheap way
        crafted(task, False, {(1, NANO)}),  # right only when asked in round 1
        crafted(task, False, {(2, GPT41), (1, O3)}),  # round 2's GPT-4.1 vs round 1's o3
        crafted(task, True, {(0, GPT41)}, difficulty=0.9),
    ]


def test_oracle_plan_equals_brute_force() -> None:
    env = ExpertRoutingEnv()  # never seeded: no task queue to copy in the brute force
    lengths = set()
    for task in oracle_tasks(ExpertRoutingEnv()):
        env.reset(options={"task": task})
        expected = brute_force(env)
        plan = env.oracle_plan()
        if expected is None:
            assert plan is None
            lengths.add(0)
            continue
        assert plan is not None
        assert plan.cost == pytest.approx(expected, rel=1e-12)
        assert plan.quality == 10.0
        lengths.add(len(plan.actions))
        # the plan, replayed, succeeds at exactly its cost
        results = play(env, task, list(plan.actions))
        assert results[-1][4]["success"] is True
        assert results[-1][4]["episode_cost"] == plan.cost
    assert {0, 1, 2, 3} <= lengths  # no plan, answer now, and multi-round plans were checked


def test_oracle_mid_episode_equals_brute_force() -> None:
    env = ExpertRoutingEnv()
    for task in oracle_tasks(ExpertRoutingEnv())[1:6]:
        env.reset(options={"task": task})
        env.step(onehot(3, NANO))
        expected = brute_force(env)
        plan = env.oracle_plan()
        assert (plan is None) == (expected is None)
        if plan is not None:
            assert plan.cost == pytest.approx(expected, rel=1e-12)


# ================================================================= (g) rule-based
def craft_obs(env: ExpertRoutingEnv, band: int, consulted: tuple[int, ...] = (),
              agrees: tuple[int, ...] = (), controller_leading: bool = True) -> np.ndarray:
    obs = np.zeros(env.observation_space.shape, dtype=np.float32)
    layout = env.observation_layout
    obs[layout["task_embedding"]][band] = 1.0
    obs[layout["difficulty"]] = (band + 0.5) / 3
    obs[layout["profile"]][1] = 1.0
    obs[layout["rounds_left"]] = 1.0
    for i in consulted:
        obs[layout["consulted"]][i] = 1.0
    for i in agrees:
        obs[layout["agrees_with_leading"]][i] = 1.0
    obs[layout["controller_leading"]] = float(controller_leading)
    obs[layout["support"]] = 0.5
    return obs


EASY, MEDIUM, HARD = 0, 1, 2


@pytest.mark.parametrize(
    ("band", "consulted", "agrees", "controller_leading", "expected"),
    [
        # first call: the cheapest expert >= 0.8 accurate on the band (GPT-4.1 is 0.79 on
        # medium questions, so medium and hard ones go straight to o3)
        (EASY, (), (), True, NANO),
        (MEDIUM, (), (), True, O3),
        (HARD, (), (), True, O3),
        # the controller leads with an expert's support: answer
        (EASY, (NANO,), (NANO,), True, None),
        (HARD, (O3,), (O3,), True, None),
        (EASY, (NANO, GPT41), (GPT41,), True, None),
        # disagreement: escalate to the next more expensive expert not consulted
        (EASY, (NANO,), (NANO,), False, GPT41),
        (EASY, (NANO, GPT41), (GPT41,), False, O3),
        # the controller leads but no consulted expert sides with it: escalate
        (EASY, (NANO,), (), True, GPT41),
        # nothing left to ask: answer
        (EASY, (NANO, GPT41, O3), (O3,), False, None),
        (HARD, (O3,), (O3,), False, None),
    ],
)
def test_rule_based_action(band: int, consulted: tuple[int, ...], agrees: tuple[int, ...],
                           controller_leading: bool, expected: int | None) -> None:
    env = ExpertRoutingEnv()  # never reset: the rule uses only the observation
    action = env.rule_based_action(craft_obs(env, band, consulted, agrees, controller_leading))
    assert action.dtype == np.int8 and action in env.action_space
    assert action.tolist() == (onehot(3) if expected is None else onehot(3, expected)).tolist()


def test_rule_based_start_is_the_cheapest_capable_expert() -> None:
    # accuracies at the band centres decide; GPT-4.1 is 0.786 on medium questions
    assert accuracy("gpt-4.1", 0.5) < 0.8 < accuracy("o3", 0.5)
    assert accuracy("gpt-4.1-nano", 1 / 6) >= 0.8
    # without o3 nobody is capable on hard questions: the most accurate one is asked
    env = ExpertRoutingEnv(experts=["gpt-4.1-nano", "gpt-4.1"])
    assert env.rule_based_action(craft_obs(env, HARD)).tolist() == [0, 1]
    # listing the experts in another order changes indices, not the choice
    env = ExpertRoutingEnv(experts=["o3", "gpt-4.1", "gpt-4.1-nano"])
    assert env.rule_based_action(craft_obs(env, EASY)).tolist() == [0, 0, 1]
    assert env.rule_based_action(craft_obs(env, EASY, (2,), (2,), False)).tolist() == [0, 1, 0]
    assert env.rule_based_action(craft_obs(env, MEDIUM)).tolist() == [1, 0, 0]


def test_rule_based_episodes_follow_the_rule(env: ExpertRoutingEnv) -> None:
    # on real episodes the rule never asks an expert twice and stops on agreement
    env.reset(seed=41)
    for task in env.sample_tasks(60):
        obs, _ = env.reset(options={"task": task})
        asked: list[int] = []
        done = False
        while not done:
            action = env.rule_based_action(obs)
            asked += np.flatnonzero(action).tolist()
            obs, _, done, _, _ = env.step(action)
        assert len(asked) == len(set(asked)) and action.sum() <= 1
        costs = env.pool.costs  # the rule escalates in order of nominal price
        assert all(costs[a] < costs[b] for a, b in itertools.pairwise(asked))
        dearer_left = asked and any(costs[i] > costs[asked[-1]] for i in range(3)
                                    if i not in asked)
        if not action.any() and dearer_left:
            # it answered with a dearer expert left: the controller led with support
            p = parts(env, obs)
            assert p["controller_leading"][0] == 1.0
            assert (p["agrees_with_leading"] * p["consulted"]).any()
