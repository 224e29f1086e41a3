"""ExpertRouting-v1: wrong answers can coincide, so agreement raises but never proves correctness.

The registry-generated tests cover v1's Gymnasium contracts; this file checks what changed
from v0 (and that v0 did not change): the documented rate at which wrong answers coincide,
what agreement is worth, that the oracle is still the hindsight optimum, and determinism.
Expected numbers are recomputed from the class docstring, not read from the module.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

from agents.baselines import BASELINES
from agents.evaluation import compare
from cost_envs.envs.expert_routing import ExpertRoutingEnv, ExpertTask
from cost_envs.envs.expert_routing_v1 import ExpertRoutingV1Env, ExpertTaskV1, pairwise_coincidence

V0, V1 = "cost_envs/ExpertRouting-v0", "cost_envs/ExpertRouting-v1"
NANO, GPT41, O3 = 0, 1, 2
# ---- the docstring's numbers: K uniform on 1..3 with these shares, q ~ Beta(2, 2)
DOC_SHARES = {1: (1.0,), 2: (2 / 3, 1 / 3), 3: (1 / 2, 1 / 3, 1 / 6)}
DOC_COINCIDENCE = 0.194  # E[q^2] E[sum p^2] = 0.3 x 0.648


def onehot(*bits: int, m: int = 3) -> np.ndarray:
    action = np.zeros(m, dtype=np.int8)
    action[list(bits)] = 1
    return action


ANSWER = onehot()


def play(env: gym.Env, task: ExpertTask, actions: list[np.ndarray]) -> list[tuple]:
    """Replay ``task`` with ``actions`` until the episode ends (later actions unused)."""
    results = [env.reset(options={"task": task})]
    for action in actions:
        results.append(env.step(action))
        if results[-1][2] or results[-1][3]:
            return results
    raise AssertionError("the episode did not end")


def final_info(env: gym.Env, task: ExpertTask, actions: list[np.ndarray]) -> dict:
    return play(env, task, actions)[-1][4]


def sample(env: ExpertRoutingEnv, n: int, seed: int) -> list[ExpertTask]:
    env.reset(seed=seed)
    return env.sample_tasks(n)


def random_actions(m: int, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, 2, m).astype(np.int8)


def as_v0(task: ExpertTaskV1) -> ExpertTask:
    """The v0 question ``task`` extends: the same difficulty, luck and tokens."""
    return ExpertTask(**{f.name: getattr(task, f.name) for f in dataclasses.fields(ExpertTask)})


def trajectory(env: gym.Env, episodes: int, seed: int, oracle: bool = False) -> list:
    """Observations, rewards, infos (and oracle actions) of ``episodes`` episodes."""
    actions = random_actions(env.action_space.n, seed=1)
    out: list = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed if ep == 0 else None)
        out.append(obs.tolist())
        done = False
        while not done:
            if oracle:
                out.append(env.unwrapped.oracle_action().tolist())
            obs, reward, done, truncated, info = env.step(next(actions))
            out.append((obs.tolist(), reward, done, truncated,
                        {k: v.tolist() if isinstance(v, np.ndarray) else v
                         for k, v in info.items()}))
    return out


# ============================================================ the documented model
def test_documented_coincidence_follows_from_the_documented_numbers() -> None:
    e_q2 = 2 * 2 / (4**2 * 5) + 0.5**2  # Beta(2, 2): variance + mean^2
    concentration = np.mean([sum(p * p for p in s) for s in DOC_SHARES.values()])
    assert e_q2 * concentration == pytest.approx(DOC_COINCIDENCE, abs=5e-4)
    assert pairwise_coincidence() == pytest.approx(e_q2 * concentration, rel=1e-12)


def test_tasks_draw_the_documented_distractors() -> None:
    env = ExpertRoutingV1Env()
    tasks = sample(env, 6000, seed=4)
    shares = [t.distractor_shares for t in tasks]
    for k, documented in DOC_SHARES.items():
        assert shares.count(documented) / len(tasks) == pytest.approx(1 / 3, abs=0.03), k
    assert all(s in DOC_SHARES.values() for s in shares)
    q = np.array([t.attraction for t in tasks])
    assert q.mean() == pytest.approx(0.5, abs=0.015) and q.var() == pytest.approx(0.05, abs=0.005)


def test_wrong_answers_coincide_at_the_documented_rate() -> None:
    env = ExpertRoutingV1Env()
    pairs = coincide = 0
    for task in sample(env, 5000, seed=5):
        env.reset(options={"task": task})
        own, answers = env.answers
        for rnd in answers:
            sources = [own, *rnd]
            for a, b in itertools.combinations(sources, 2):
                if a != 0 and b != 0:  # both wrong
                    pairs += 1
                    coincide += a == b
    assert pairs > 8000
    assert coincide / pairs == pytest.approx(DOC_COINCIDENCE, abs=0.02)


def agreeing_failures(env_id: str, episodes: int = 3000) -> tuple[int, int]:
    """Consult every expert once, then answer: (episodes where the final answer had the
    support of at least two sources yet was wrong, episodes where it had that support)."""
    env = gym.make(env_id)
    layout = env.unwrapped.observation_layout
    wrong = supported = 0
    env.reset(seed=21)
    for _ in range(episodes):
        env.reset()
        obs, _, terminated, _, _ = env.step(onehot(NANO, GPT41, O3))
        assert not terminated
        backers = obs[layout["agrees_with_leading"]].sum() + obs[layout["controller_leading"]][0]
        obs, _, terminated, _, info = env.step(ANSWER)
        assert terminated
        if backers >= 2:
            supported += 1
            wrong += not info["success"]
    return wrong, supported


def test_two_agreeing_wrong_models_occur_in_v1_never_in_v0() -> None:
    wrong0, supported0 = agreeing_failures(V0)
    wrong1, supported1 = agreeing_failures(V1)
    assert supported0 > 2000 and supported1 > 2000
    assert wrong0 == 0
    # questions where at least two of four models are wrong and share an answer that
    # outvotes the rest; a few percent of the supported answers at the documented rate
    assert 0.02 < wrong1 / supported1 < 0.2


@pytest.mark.parametrize("experts", [(NANO,), (GPT41,), (NANO, GPT41)], ids=str)
def test_agreement_raises_the_chance_of_being_right_but_is_no_proof(experts: tuple) -> None:
    """Observed agreement (the controller's answer leads, backed by each consulted expert)
    makes answering right more likely than answering alone, and is certain only in v0."""
    rates = {}
    questions = sample(ExpertRoutingV1Env(), 4000, seed=8)
    for env_id in (V0, V1):
        env = gym.make(env_id)
        layout = env.unwrapped.observation_layout
        tasks = questions if env_id == V1 else [as_v0(t) for t in questions]
        alone = np.mean([final_info(env, t, [ANSWER])["success"] for t in tasks])
        agreed = []
        for task in tasks:
            env.reset(options={"task": task})
            obs, *_ = env.step(onehot(*experts))
            agree = obs[layout["controller_leading"]][0] > 0.5 and all(
                obs[layout["agrees_with_leading"]][i] > 0.5 for i in experts)
            if agree:
                agreed.append(env.step(ANSWER)[4]["success"])
        assert len(agreed) > 1000
        rates[env_id] = (alone, float(np.mean(agreed)))
    assert rates[V0][1] == 1.0
    alone, given_agreement = rates[V1]
    assert alone == pytest.approx(rates[V0][0])  # the same questions and luck
    assert alone + 0.15 < given_agreement < 0.995


def test_agreement_is_weaker_evidence_on_hard_questions() -> None:
    """On AIME-like questions both models are usually wrong, so agreeing proves little."""
    rates = {}
    for profile in ("gsm8k", "aime"):
        env = ExpertRoutingV1Env(profile=profile)
        layout = env.observation_layout
        agreed = []
        for task in sample(env, 4000, seed=9):
            env.reset(options={"task": task})
            obs, *_ = env.step(onehot(NANO))
            if obs[layout["controller_leading"]][0] > 0.5 and obs[layout["agrees_with_leading"]][
                    NANO] > 0.5:
                agreed.append(env.step(ANSWER)[4]["success"])
        rates[profile] = float(np.mean(agreed))
    assert rates["aime"] < rates["gsm8k"] - 0.2 and rates["gsm8k"] < 1.0


# ============================================================ the oracle
def all_sequences(m: int, rounds: int) -> list[list[np.ndarray]]:
    """Every action sequence of an episode of at most ``rounds`` consultations."""
    actions = [np.array(bits, dtype=np.int8) for bits in itertools.product((0, 1), repeat=m)]
    consult = [a for a in actions if a.any()]
    out: list[list[np.ndarray]] = [[ANSWER]]
    if rounds == 1:
        return out + [[a] for a in consult]
    for a in consult:
        out += [[a, *rest] for rest in all_sequences(m, rounds - 1)]
    return out


def test_oracle_is_the_cheapest_successful_sequence_of_all() -> None:
    env = ExpertRoutingV1Env(max_rounds=2)
    sequences = all_sequences(3, 2)
    assert len(sequences) == 1 + 7 * 8
    unsolvable = 0
    for task in sample(env, 80, seed=13):
        successes = [info["episode_cost"] for info in
                     (final_info(env, task, s) for s in sequences) if info["success"]]
        env.reset(options={"task": task})
        plan = env.oracle_plan()
        if not successes:
            unsolvable += 1
            assert plan is None and not env.oracle_action().any()
            continue
        assert plan is not None and plan.cost == pytest.approx(min(successes), rel=1e-12)
        info = final_info(env, task, list(plan.actions))
        assert info["success"] and info["episode_cost"] == pytest.approx(plan.cost, rel=1e-12)
    assert unsolvable < 10


def crafted(env: ExpertRoutingV1Env, controller: str, experts: list[str]) -> ExpertTaskV1:
    """A task with one distractor at attraction 1 where the controller and each expert
    (in every round) are "right", "distractor" (the shared wrong answer) or "own" (a wrong
    answer of its own)."""
    task = sample(env, 1, seed=0)[0]
    luck = np.ones_like(task.luck)
    slips = np.ones_like(task.slips)
    for i, kind in enumerate(experts):
        luck[:, i] = 0.0 if kind == "right" else 1.0
        slips[:, i] = 0.0 if kind == "distractor" else 1.0
    return dataclasses.replace(
        task, controller_luck=0.0 if controller == "right" else 1.0,
        controller_slip=0.0 if controller == "distractor" else 1.0,
        attraction=1.0, distractor_shares=(1.0,), luck=luck, slips=slips)


def test_oracle_avoids_an_expert_that_shares_the_controllers_wrong_answer() -> None:
    env = ExpertRoutingV1Env()
    task = crafted(env, "distractor", ["distractor", "right", "own"])
    # GPT-4.1 alone (1.6) outvotes the controller (1.0) ...
    assert final_info(env, task, [onehot(GPT41), ANSWER])["success"]
    # ... but not the controller and GPT-4.1-nano agreeing on the distractor (2.2): in v0,
    # where their wrong answers would differ, it would
    assert not final_info(env, task, [onehot(NANO, GPT41), ANSWER])["success"]
    assert final_info(ExpertRoutingEnv(), as_v0(task), [onehot(NANO, GPT41), ANSWER])["success"]
    env.reset(options={"task": task})
    plan = env.oracle_plan()
    assert plan is not None
    assert [a.tolist() for a in plan.actions] == [onehot(GPT41).tolist(), ANSWER.tolist()]


def test_observed_agreement_on_a_shared_wrong_answer_fools_the_rule_not_the_oracle() -> None:
    env = ExpertRoutingV1Env()
    layout = env.observation_layout
    task = crafted(env, "distractor", ["distractor", "right", "right"])
    env.reset(options={"task": task})
    obs, *_ = env.step(onehot(NANO))
    # what the controller sees: its own answer leads, GPT-4.1-nano agrees, full support
    assert obs[layout["controller_leading"]][0] == 1.0
    assert obs[layout["agrees_with_leading"]][NANO] == 1.0
    assert obs[layout["support"]][0] == pytest.approx(1.0)
    assert not env.rule_based_action(obs).any()  # CORL's rule stops on agreement ...
    assert not env.step(ANSWER)[4]["success"]  # ... and is wrong
    env.reset(options={"task": task})
    plan = env.oracle_plan()
    assert plan is not None and not plan.actions[0][NANO]
    assert final_info(env, task, list(plan.actions))["success"]


def test_no_baseline_matches_the_oracle() -> None:
    scores = compare(dict(BASELINES), V1, episodes=300, seed=3, n_resamples=10)
    oracle = scores.pop("oracle")
    for name, summary in scores.items():
        assert summary["success_rate"] <= oracle["success_rate"], name
        assert summary["cps"] > 2 * oracle["cps"], name


# ============================================================ determinism and v0
def test_same_seed_same_trajectories_and_oracle() -> None:
    first = trajectory(gym.make(V1), 80, seed=17, oracle=True)
    second = trajectory(gym.make(V1), 80, seed=17, oracle=True)
    assert first == second
    assert trajectory(gym.make(V1), 80, seed=18) != trajectory(gym.make(V1), 80, seed=17)


def test_v1_asks_v0s_questions_with_v0s_luck() -> None:
    """The first block of questions of a seed (v1 draws its distractors after v0's draws)."""
    v0, v1 = ExpertRoutingEnv(), ExpertRoutingV1Env()
    for episode in range(v0.task_block):
        v0.reset(seed=2 if episode == 0 else None)
        v1.reset(seed=2 if episode == 0 else None)
        a, b = v0.task, v1.task
        assert isinstance(b, ExpertTaskV1)
        for f in dataclasses.fields(ExpertTask):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name))


def test_without_distractors_v1_plays_exactly_like_v0() -> None:
    v0, v1 = gym.make(V0), gym.make(V1)
    assert v1.unwrapped.observation_layout == v0.unwrapped.observation_layout
    assert v1.observation_space == v0.observation_space
    actions = random_actions(3, seed=6)
    for task in sample(v1.unwrapped, 300, seed=6):
        plain = dataclasses.replace(task, attraction=0.0)
        episode = [next(actions) for _ in range(3)]
        a, b = play(v0, as_v0(task), episode), play(v1, plain, episode)
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):  # the reset, then each step
            np.testing.assert_array_equal(x[0], y[0])
            assert x[1:-1] == y[1:-1]
            assert {k: np.asarray(v).tolist() for k, v in x[-1].items()} == {
                k: np.asarray(v).tolist() for k, v in y[-1].items()}


def test_v0_is_unchanged() -> None:
    """v0 is still the v0 class, with the trajectories it had before v1 existed (numbers
    recorded on the commit before v1, rule-based policy, seed 11)."""
    env = gym.make(V0)
    assert type(env.unwrapped) is ExpertRoutingEnv
    env.reset(seed=11)
    task = env.unwrapped.task
    assert task.difficulty == pytest.approx(0.0515023473629968, rel=1e-12)
    assert task.controller_luck == pytest.approx(0.4052864896569335, rel=1e-12)
    np.testing.assert_allclose(task.luck[0], [0.9617164147247778, 0.18631128384118323,
                                              0.5249701025167042], rtol=1e-12)
    successes, cost, obs_sum = [], 0.0, 0.0
    env.reset(seed=11)
    direct = ExpertRoutingEnv()
    direct.reset(seed=11)
    for _ in range(100):
        obs, _ = env.reset()
        obs_direct, _ = direct.reset()
        done = False
        while not done:
            action = env.unwrapped.rule_based_action(obs)
            obs, _, done, _, info = env.step(action)
            obs_direct, _, _, _, info_direct = direct.step(action)
            np.testing.assert_array_equal(obs, obs_direct)
            obs_sum += float(obs.sum())
        assert info["episode_cost"] == info_direct["episode_cost"]
        successes.append(int(info["success"]))
        cost += info["episode_cost"]
    assert "".join(map(str, successes)) == (
        "1111111111111111111111111110111111111111111110101011111111111111111111111110111111"
        "101111111111111111")
    assert cost == pytest.approx(5.071657265, rel=1e-9)
    assert obs_sum == pytest.approx(1322.016666, abs=1e-4)


def test_replay_needs_a_v1_task_with_slips_for_every_round() -> None:
    v0, v1 = ExpertRoutingEnv(), ExpertRoutingV1Env()
    with pytest.raises(ValueError, match="ExpertTaskV1"):
        v1.reset(options={"task": sample(v0, 1, seed=0)[0]})
    task = sample(v1, 1, seed=0)[0]
    with pytest.raises(ValueError, match="slips"):
        v1.reset(options={"task": dataclasses.replace(task, slips=task.slips[:, :2])})
    with pytest.raises(ValueError, match="ExpertRouting-v1: experts"):
        ExpertRoutingV1Env(experts=[])
