"""The learned prior (issue #38 point 2): the fit, its teacher, and the study's runner."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.learners.supervised import SupervisedConfig
from agents.learners.training import train
from agents.planning import learned_prior as lp
from agents.planning.toolbench_bayes import (
    _AT_ONE,
    _AT_ZERO,
    _PRIOR,
    BayesToolBenchPlanner,
    DifficultyLaw,
    difficulty_likelihood,
)
from cost_envs.envs.toolbench import MAX_TURNS, VOCAB, ToolBenchEnv, toolbench_pool
from cost_envs.pool import AgentPool, AgentSpec
from experiments.learned_prior import runner
from experiments.learned_prior.settings import ENV_ID, SMOKE

#: A few seconds of the row's procedure: the Bayes teacher, one DAgger round.
TINY = SupervisedConfig(episodes=12, epochs=1, teacher="bayes", dagger_rounds=1,
                        dagger_episodes=4)


@pytest.fixture(scope="module")
def env() -> gym.Env:
    return gym.make(ENV_ID)


@pytest.fixture(scope="module")
def big_fit(env: gym.Env) -> lp.FittedToolBench:
    """The fit of 150k logged steps (a few seconds)."""
    return lp.fit(lp.log_random(None, 150_000, seed=123), env)


def test_the_fit_recovers_the_parameters_from_a_large_log(env, big_fit) -> None:
    truth = lp.true_parameters(env)
    np.testing.assert_allclose(big_fit.stage_counts, truth.stage_counts, atol=0.01)
    np.testing.assert_allclose(big_fit.stage_skills, truth.stage_skills, atol=0.01)
    np.testing.assert_allclose(big_fit.answer_skills, truth.answer_skills, atol=0.01)
    a, b, sigma = big_fit.difficulty
    assert abs(a - 2.0) < 0.15 and abs(b - 2.0) < 0.15 and abs(sigma - 0.15) < 0.004
    errors = np.abs(big_fit.capabilities - truth.capabilities)
    assert errors.mean() < 0.012 and errors.max() < 0.07, (errors.mean(), errors.max())
    np.testing.assert_allclose(big_fit.costs, truth.costs, rtol=1e-9)
    np.testing.assert_allclose(big_fit.flops, truth.flops, rtol=1e-3)
    assert big_fit.steps == 150_000 and 0 < big_fit.clears < big_fit.steps


def test_the_difficulty_fit_is_the_likelihood_of_what_episodes_reached() -> None:
    """Hard stages stop episodes: the seen difficulties are biased, their likelihood is not.

    Episodes of 4 stages under ``Beta(3, 2)``, ``sigma = 0.1``, where an episode reaches
    the next stage only when the last one was easy (below 0.6): the reached stages' mean
    is far below the law's, the fit still finds the law.
    """
    rng = np.random.default_rng(0)
    n = 40_000
    delta = rng.beta(3.0, 2.0, n)
    d = np.clip(delta[:, None] + 0.1 * rng.standard_normal((n, 4)), 0.0, 1.0)
    reached = np.concatenate([np.ones((n, 1), bool), np.cumprod(d[:, :-1] < 0.6, axis=1)
                              .astype(bool)], axis=1)
    values = d[reached]
    episode = np.repeat(np.arange(n), reached.sum(axis=1))
    assert values.mean() < 0.55  # what a mean would see; the law's mean is 0.6
    a, b, sigma = lp.fit_difficulty(values, episode)
    assert abs(a - 3.0) < 0.25 and abs(b - 2.0) < 0.2 and abs(sigma - 0.1) < 0.005


def test_the_capability_fit_recovers_a_noisy_or_of_known_strengths() -> None:
    rng = np.random.default_rng(1)
    caps = np.array([0.9, 0.3, 0.0, 0.6])
    n = 60_000
    calls = rng.integers(0, 2, (n, 4))
    difficulty = rng.random(n)
    hit = 1 - np.prod(1 - calls * caps ** (1 + 3 * difficulty[:, None]), axis=1)
    cleared = rng.random(n) < hit
    fitted = lp.fit_capabilities(calls, np.zeros(n, int), difficulty, cleared, n_skills=1)
    np.testing.assert_allclose(fitted[:, 0], caps, atol=0.02)


def test_the_fit_reads_no_pool_of_the_env_it_is_given(env) -> None:
    """``fit(log, like)`` reads the tools' names and roles of ``like``, none of its numbers."""
    log = lp.log_random(None, 3000, seed=5)
    pool = toolbench_pool()
    other = AgentPool(tuple(AgentSpec(a.name, a.role, 1.0, 1.0, (0.5,) * 6) for a in pool.agents),
                      pool.skills)
    mine, theirs = lp.fit(log, env), lp.fit(log, ToolBenchEnv(pool=other))
    assert mine.difficulty == theirs.difficulty and mine.stage_counts == theirs.stage_counts
    np.testing.assert_array_equal(mine.capabilities, theirs.capabilities)
    np.testing.assert_array_equal(mine.costs, theirs.costs)


def _scrambled(task, env: ToolBenchEnv, rng: np.random.Generator):
    """``task`` with every token renamed and every luck value drawn again where no
    observation can tell: each tool's luck at each turn within the same interval between
    its clear thresholds over all stages, so that every clear is the same."""
    names = rng.permutation(VOCAB).astype(task.reference.dtype)
    caps = env.pool.capabilities[:, task.stage_skill]  # (m, k)
    thresholds = np.sort(caps ** (1 + 3 * task.stage_difficulty), axis=1)  # (m, k)
    luck = np.array(task.luck, dtype=np.float64)
    for i in range(luck.shape[1]):
        edges = np.concatenate([[0.0], thresholds[i], [1.0]])
        for t in range(luck.shape[0]):
            j = np.searchsorted(edges, luck[t, i], side="right") - 1
            lo, hi = edges[j], edges[j + 1]
            value = np.float32(lo + (hi - lo) * rng.uniform(0.25, 0.75))
            if not (lo <= value < hi):  # float32 rounding at a tight interval: keep it
                value = np.float32(luck[t, i])
            luck[t, i] = value
    return replace(task, reference=names[task.reference], topic=names[task.topic],
                   hallucination_tokens=names[task.hallucination_tokens],
                   luck=luck.astype(np.float32))


def test_the_fit_reads_no_hidden_state() -> None:
    """Tasks with every token and every luck value changed, nothing observable: one fit."""
    env = ToolBenchEnv()
    env.reset(seed=3)
    tasks = env.sample_tasks(300)
    rng = np.random.default_rng(0)
    scrambled = [_scrambled(task, env, rng) for task in tasks]
    assert not np.array_equal(scrambled[0].luck, tasks[0].luck)
    first = lp.log_single(env, 300, seed=9, tasks=tasks)
    second = lp.log_single(env, 300, seed=9, tasks=scrambled)
    for name in ("obs", "calls", "cost", "flops", "terminated", "episode"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    one, two = lp.fit(first, env), lp.fit(second, env)
    for name in ("stage_counts", "stage_skills", "answer_skills", "difficulty", "episodes",
                 "clears"):
        assert getattr(one, name) == getattr(two, name), name
    for name in ("capabilities", "costs", "flops"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))


def test_the_batched_log_is_what_the_single_env_shows() -> None:
    """Replaying the log's calls on the single env seeded alike gives the logged steps."""
    log = lp.log_random(None, 400, seed=77, n_envs=1)
    single = ToolBenchEnv()
    obs, _ = single.reset(seed=77)
    for j in range(log.steps):
        if j and log.episode[j] != log.episode[j - 1]:
            obs, _ = single.reset()
        np.testing.assert_array_equal(obs, log.obs[j])
        obs, _, terminated, _, info = single.step(log.calls[j])
        assert info["cost"] == log.cost[j] and info["flops"] == log.flops[j]
        assert terminated == log.terminated[j]
        assert terminated == (j + 1 < log.steps and log.episode[j + 1] != log.episode[j]) \
            or j + 1 == log.steps


def test_a_step_at_the_last_turn_shows_no_outcome() -> None:
    """At an episode's last turn the episode ends cleared or not: left out of the clears."""
    log = lp.log_random(None, 5000, seed=4)
    at = lp.positions(log.obs)
    known, cleared = lp.clear_outcomes(log, at)
    last_turn = at.turn == at.n_stages
    assert last_turn.any() and not known[last_turn].any()
    assert not known[~log.calls.any(axis=1)].any()
    assert cleared[known].mean() > 0.5 and not cleared[~known].any()
    assert (at.turn >= 0).all() and (at.turn < MAX_TURNS).all()


def test_a_law_is_its_beta_and_its_clipped_normal() -> None:
    """Its tables are the Beta density on the grid and the clipped normal's atoms."""
    from statistics import NormalDist

    from agents.planning.toolbench_bayes import DELTA_GRID

    law = DifficultyLaw(3.0, 1.5, 0.05)
    density = DELTA_GRID ** 2 * (1 - DELTA_GRID) ** 0.5
    np.testing.assert_allclose(law.prior, density / density.sum(), rtol=1e-12)
    normal = NormalDist(0.0, 0.05)
    np.testing.assert_allclose(law.at_zero, [normal.cdf(-x) for x in DELTA_GRID], rtol=1e-7,
                               atol=1e-15)
    np.testing.assert_allclose(law.at_one, [normal.cdf(x - 1) for x in DELTA_GRID],
                               rtol=1e-7, atol=1e-15)
    likelihood = difficulty_likelihood(np.array([0.0, 0.5, 1.0]), law)
    np.testing.assert_allclose(likelihood[1], np.exp(-0.5 * ((0.5 - DELTA_GRID) / 0.05) ** 2))
    np.testing.assert_array_equal(likelihood[0], law.at_zero)
    np.testing.assert_array_equal(likelihood[2], law.at_one)


def test_the_default_law_is_the_envs() -> None:
    law = DifficultyLaw(2.0, 2.0, 0.15)
    np.testing.assert_array_equal(law.prior, _PRIOR)
    np.testing.assert_array_equal(law.at_zero, _AT_ZERO)
    np.testing.assert_array_equal(law.at_one, _AT_ONE)
    values = np.array([[0.0, 0.3], [0.71, 1.0]])
    np.testing.assert_array_equal(difficulty_likelihood(values, law),
                                  difficulty_likelihood(values))


def _actions(planner: BayesToolBenchPlanner, episodes: int) -> list[np.ndarray]:
    env = ToolBenchEnv()
    actions = []
    for index in range(episodes):
        obs, _ = env.reset(seed=11 if index == 0 else None)
        state, done = None, False
        while not done:
            action, state = planner.predict(obs, state)
            actions.append(action)
            obs, _, done, _, _ = env.step(action)
    return actions


def test_the_teacher_with_the_true_law_acts_as_todays() -> None:
    """The true law given explicitly, today's particles: every action the same."""
    env = ToolBenchEnv()
    today = _actions(BayesToolBenchPlanner(env, n_particles=200), 40)
    given = _actions(BayesToolBenchPlanner(env, n_particles=200,
                                           difficulty=DifficultyLaw(2.0, 2.0, 0.15)), 40)
    assert len(today) == len(given)
    assert all(np.array_equal(a, b) for a, b in zip(today, given, strict=True))


def test_the_teacher_weighs_with_the_law_it_is_given() -> None:
    env = ToolBenchEnv()
    prior = [task for task in lp.true_parameters(env).draw(env, 300) if task.n_stages == 4]
    wide, narrow = (BayesToolBenchPlanner(env, prior=prior, difficulty=DifficultyLaw(2, 2, s))
                    for s in (0.15, 0.02))
    # stage 1 of 4 after an easy and a hard stage: how far the seen ones tell the rest
    args = (4, 1, 0, (0, 4), (0.1, 0.9))
    assert not np.allclose(wide.posterior_values(*args)[0], narrow.posterior_values(*args)[0])


def test_a_given_law_is_the_env_law_it_stands_for(monkeypatch) -> None:
    """A planner given a law acts as if the module's constants were that law, everywhere."""
    from agents.planning import toolbench_bayes as tb

    env = ToolBenchEnv()
    prior = lp.true_parameters(env).draw(env, 200)
    law = DifficultyLaw(3.0, 1.5, 0.05)
    args = [(4, 1, 0, (0, 4), (0.3, 0.6)), (3, 0, 1, (2, 5), (0.4,)),
            (4, 2, 3, (4,), (0.2, 0.3, 0.5))]
    given = BayesToolBenchPlanner(env, prior=prior, difficulty=law)
    ours = [given.posterior_values(*a)[0] for a in args]
    for name, value in (("_PRIOR", law.prior), ("_AT_ZERO", law.at_zero),
                        ("_AT_ONE", law.at_one), ("STAGE_DIFFICULTY_NOISE", law.noise)):
        monkeypatch.setattr(tb, name, value)
    patched = BayesToolBenchPlanner(env, prior=prior)
    for a, value in zip(args, ours, strict=True):
        np.testing.assert_array_equal(patched.posterior_values(*a)[0], value)


def test_the_fitted_prior_draws_its_own_laws() -> None:
    env = ToolBenchEnv()
    truth = lp.true_parameters(env)
    other = replace(truth, stage_counts=(0.0, 0.0, 1.0), difficulty=(6.0, 1.5, 0.05),
                    answer_skills=(0.0, 1.0))
    tasks = other.draw(env, 2000)
    assert all(task.n_stages == 4 and task.stage_skill[-1] == 5 for task in tasks)
    difficulty = np.array([task.stage_difficulty for task in tasks])
    assert abs(difficulty.mean() - 0.8) < 0.01  # Beta(6, 1.5)'s mean, little clipping
    assert abs(np.mean(difficulty.std(axis=1, ddof=1)) - 0.05) < 0.01
    base = truth.draw(env, 2000)
    counts = np.bincount([task.n_stages for task in base], minlength=5)[2:] / 2000
    np.testing.assert_allclose(counts, truth.stage_counts, atol=0.03)


def test_the_teacher_is_built_on_the_fitted_pool_and_law(env, big_fit) -> None:
    teacher = big_fit.teacher(env, n_particles=50)
    np.testing.assert_array_equal(teacher.env.pool.capabilities, big_fit.capabilities)
    np.testing.assert_array_equal(teacher.env.pool.costs, big_fit.costs)
    assert teacher.difficulty is not None
    assert (teacher.difficulty.a, teacher.difficulty.b, teacher.difficulty.noise) \
        == big_fit.difficulty
    assert teacher.env.f1_threshold == env.unwrapped.f1_threshold


class _Spy:
    """A teacher that calls tool 6 and counts its labels."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        self.calls += 1
        action = np.zeros(8, dtype=np.int8)
        action[6] = 1
        return action, None


def test_the_runner_teaches_with_the_teacher_it_is_given() -> None:
    """Its teacher labels its own episode, then every step of the DAgger rounds' episodes."""
    spy = _Spy()
    config = SupervisedConfig(episodes=1, epochs=1, teacher="bayes", dagger_rounds=2,
                              dagger_episodes=10)
    trained = runner.train_taught(0, config, lambda _: spy)
    # one teacher episode (at most 5 steps), then 2 x 10 student episodes of >= 1 step each
    assert spy.calls >= 1 + 2 * 10
    assert trained.method == "lora" and trained.env_id == ENV_ID


@pytest.mark.slow
def test_the_true_prior_arm_is_the_row_bit_for_bit() -> None:
    """``train_taught`` with the env's Bayes reference is ``train(..., "lora")``: the row."""
    from agents.planning import bayes_planner

    ours = runner.train_taught(1, TINY, bayes_planner).policy.state_dict()
    theirs = train(ENV_ID, "lora", 1, seed=1, supervised=TINY).policy.state_dict()
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key


def test_the_row_config_is_the_tables_and_every_unit_is_there() -> None:
    config = runner.row_config(replace(SMOKE, supervised=SupervisedConfig()))
    assert (config.teacher, config.dagger_rounds, config.dagger_episodes) == ("bayes", 2, 500)
    units = runner.units_of(replace(SMOKE, seeds=3, sizes=(10, 20)))
    assert units[0][0] == "fixed" and len(units) == 1 + 3 * 3
    assert {(kind, steps, seed) for kind, steps, seed, _ in units[1:]} == {
        (kind, steps, seed) for seed in range(3)
        for kind, steps in (("true", 0), ("learned", 10), ("learned", 20))}
    assert runner.log_seed(2) - runner.log_seed(1) >= 64  # the sub-envs' seeds never meet


def test_the_report_pairs_learned_against_true_by_seed() -> None:
    from experiments.learned_prior.report import render

    rng = np.random.default_rng(0)
    rule, planner = rng.random(50), rng.random(50) + 0.5
    env = gym.make(ENV_ID)
    fixed = {"rule": rule.tolist(), "planner": planner.tolist(),
             "bayes": (planner + 0.01).tolist(), "control": planner.tolist(),
             "rule_label": "RuleBased", "true": runner.parameters(lp.true_parameters(env))}
    base = rng.random((6, 50)) + 0.3
    fitted = runner.parameters(lp.true_parameters(env))
    runs = [{"kind": "true", "steps": 0, "seed": s, "seconds": 1.0,
             "student": {"returns": base[s].tolist(), "success": 0.5}} for s in range(6)]
    runs += [{"kind": "learned", "steps": 10, "seed": s, "fitted": fitted, "seconds": 2.0,
              "fit_seconds": 1.0,
              "teacher": {"returns": (planner + 0.01 - 0.03).tolist(), "success": 0.5},
              "student": {"returns": (base[s] - 0.02).tolist(), "success": 0.5}}
             for s in range(6)]
    scale = replace(SMOKE, seeds=6, sizes=(10,), episodes=50)
    text = render(fixed, runs, scale, runner.row_config(scale), "cmd")
    row = next(line for line in text.splitlines() if line.startswith("| 10 steps"))
    assert "-0.020 [-0.020, -0.020]" in row and "-0.030 [-0.030, -0.030]" in row
    assert "| Beta a | 2.000 | 2.000 (2.000-2.000) |" in text and "Command: `cmd`." in text
    # a constant -0.02 per task, against the gap's mean: the share lost
    lost = -0.02 / float((planner - rule).mean())
    assert f"student minus it, paired by seed and task, in shares of the gap: 10 steps " \
        f"{lost:.2f} [" in text
    assert "### Seeds 0-4 alone (the tables' 5)" in text  # past the tables' 5, paired apart
    assert text.count("| 10 steps | -0.020 [-0.020, -0.020]") == 2


@pytest.mark.slow
def test_smoke_report_writes_the_table(tmp_path) -> None:
    written = runner.report(tmp_path, jobs=1, scale=SMOKE, log=lambda _: None,
                            command="smoke")
    text = written[0].read_text()
    assert written[0].name == "learned_prior.md"
    assert "## Paired: learned prior minus true prior" in text
    assert text.count("| student, ") == 2 and "Machine:" in text


def test_the_help_lists_the_studys_own_options(capsys) -> None:
    from experiments.learned_prior.runner import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    usage = capsys.readouterr().out
    for option in ("--env {FlightPlanner-v1,ToolBench-v0}", "--smoke", "--students", "--jobs"):
        assert option in usage
