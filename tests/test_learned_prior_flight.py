"""FlightPlanner-v1's learned prior (issue #38 point 2): the fit, its teacher, the runner."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

from agents.planning import learned_prior_flight as lpf
from agents.planning.flight import OPT
from agents.planning.flight_bayes import BayesFlightPlanner, FlightPrior
from cost_envs.envs.flight_networks import draw_block
from cost_envs.envs.flight_planner import MAX_TURNS
from cost_envs.envs.flight_planner_v1 import FlightPlannerV1Env
from cost_envs.pool import AgentPool, AgentSpec
from experiments.learned_prior import runner
from experiments.learned_prior.settings import (
    DEFAULT,
    FLIGHT_NAME,
    FLIGHT_SMOKE,
    FLIGHT_STUDENTS_NAME,
)

#: A known law away from the env's, for the synthetic recovery.
KNOWN = lpf.FlightLaw(0.27, (0.6, 1.6), (0.08, 0.28))


@pytest.fixture(scope="module")
def env() -> gym.Env:
    return gym.make(lpf.ENV_ID)


@pytest.fixture(scope="module")
def log() -> lpf.FlightLog:
    """20k steps of the random allocator on the batched env (a fraction of a second)."""
    return lpf.log_flight(20_000, seed=321)


def test_the_tasks_of_the_true_law_are_the_envs_draw() -> None:
    for seed in (0, 7):
        mine = lpf.draw_tasks(lpf.FlightLaw(), np.random.default_rng(seed), 300, 6)
        theirs = draw_block(np.random.default_rng(seed), 300, MAX_TURNS, 6)
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_law_of_few_legs_still_draws_tasks_with_a_trip() -> None:
    """Rejection: a sparse network often has no trip of 2 or 3 legs; every kept one has."""
    tasks = lpf.draw_tasks(lpf.FlightLaw(0.12, (0.8, 1.3), (0.03, 0.35)),
                           np.random.default_rng(1), 400, 6)
    h_star = tasks[3]
    assert len(h_star) == 400 and set(np.unique(h_star)) <= {2, 3}


def test_the_control_particles_are_the_references(env) -> None:
    truth = lpf.true_parameters(env)
    for seed in (0, 3):
        mine, theirs = truth.prior(800, seed), FlightPrior.draw(env.unwrapped, 800, seed)
        for name in ("shortest_hops", "hops", "prices", "fare_scale"):
            np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name))
        assert mine.slack == theirs.slack


def test_the_control_teacher_acts_as_the_reference(env) -> None:
    """The pipeline at the true parameters is the Bayes reference, action for action."""
    control = lpf.true_parameters(env).teacher(env, 300)
    reference = BayesFlightPlanner(env, n_particles=300)
    play = gym.make(lpf.ENV_ID)
    obs, _ = play.reset(seed=11)
    for _ in range(4):
        done = False
        while not done:
            action = reference.act(obs)
            np.testing.assert_array_equal(control.act(obs), action)
            obs, _, terminated, truncated, _ = play.step(action)
            done = terminated or truncated
        obs, _ = play.reset()


def test_the_strengths_and_prices_are_read_exactly(env, log) -> None:
    truth = lpf.true_parameters(env)
    np.testing.assert_allclose(lpf.fit_strengths(log, truth.roles), truth.strengths, atol=2e-6)
    fitted = lpf.fit(log.head(3000), env, n_sim=1000, max_evaluations=5)
    np.testing.assert_allclose(fitted.costs, truth.costs, rtol=1e-9)
    np.testing.assert_allclose(fitted.flops, truth.flops, rtol=1e-3)


def _tasks_of(flight_tasks: list, level: np.ndarray) -> tuple:
    """``draw_tasks``' arrays of given tasks (a test reads the env's tasks: privileged)."""
    def stack(name: str) -> np.ndarray:
        return np.array([getattr(t, name) for t in flight_tasks])

    return (None, None, None, stack("shortest_hops"), stack("budget"), stack("route_hops"),
            stack("route_price"), stack("luck"), stack("fare_luck"), level)


def test_the_first_turn_simulation_is_the_envs(env) -> None:
    """What :func:`first_turn` says a first turn shows is what the env shows."""
    truth = lpf.true_parameters(env)
    single = FlightPlannerV1Env()
    rng = np.random.default_rng(4)
    tasks, calls, seen = [], [], []
    obs, _ = single.reset(seed=5)
    while len(calls) < 300:
        action = rng.integers(0, 2, 6).astype(bool)
        action[4:] = False  # no validator
        if not action[:2].any():
            action[rng.integers(0, 2)] = True  # a planner
        tasks.append(single._task)
        calls.append(action)
        after, *_ = single.step(action.astype(np.int8))
        seen.append((obs, after))
        obs, _ = single.reset()
    levels = np.array([o[FlightPlannerV1Env.observation_layout["budget_level"].start]
                       for o, _ in seen], dtype=np.float64)
    simulated = lpf.first_turn(_tasks_of(tasks, levels), np.array(calls), truth.strengths,
                               truth.roles)
    log = lpf.FlightLog(np.array([row for pair in seen for row in pair], dtype=np.float32),
                        np.repeat(np.array(calls, dtype=np.int8), 2, axis=0),
                        np.zeros(600), np.zeros(600), np.zeros(600, dtype=bool),
                        np.repeat(np.arange(300), 2))
    shown = lpf.shown(log, truth.roles)
    assert len(shown.calls) == 300 and shown.dropped.any() and (shown.legs > 0).any()
    np.testing.assert_array_equal(simulated.dropped, shown.dropped)
    np.testing.assert_array_equal(simulated.legs, shown.legs)
    np.testing.assert_array_equal(simulated.searched, shown.searched)
    np.testing.assert_allclose(simulated.ratio, shown.ratio, rtol=1e-6)


def _synthetic(law: lpf.FlightLaw, truth: lpf.FittedFlight, n: int, seed: int) -> lpf.Shown:
    """What a log of ``n`` episodes of ``law`` shows the moment fit (first turns, starts)."""
    rng = np.random.default_rng(seed)
    tasks = lpf.draw_tasks(law, rng, n, 6, with_fares=False)
    calls = rng.integers(0, 2, (n, 6)).astype(bool)
    calls[:, 4:] = False
    calls[~calls[:, :2].any(axis=1), 1] = True
    simulated = lpf.first_turn(tasks, calls, truth.strengths, truth.roles)
    return replace(simulated, level=simulated.level.astype(np.float32).astype(np.float64),
                   at=simulated.at.astype(np.float32).astype(np.float64))


def test_the_moment_fit_recovers_a_known_law(env) -> None:
    """Synthetic first turns of a law that is not the env's: the fit finds it again."""
    truth = lpf.true_parameters(env)
    seen = _synthetic(KNOWN, truth, 40_000, seed=17)
    law, distance = lpf.fit_law(seen, truth.strengths, truth.roles, n_sim=20_000,
                                max_evaluations=250)
    assert abs(law.edge_probability - KNOWN.edge_probability) < 0.015, law
    assert abs(law.slack[0] - KNOWN.slack[0]) < 0.02 and abs(law.slack[1] - KNOWN.slack[1]) \
        < 0.02, law
    assert abs(law.fare_factor[1] / law.fare_factor[0] - 1.6 / 0.6) < 0.6, law
    assert distance < 0.5


def test_the_fit_reads_no_numbers_of_the_env_it_is_given(env, log) -> None:
    """``fit(log, like)`` reads the agents' names and roles of ``like``, none of its numbers."""
    pool = env.unwrapped.pool
    other = AgentPool(tuple(AgentSpec(a.name, a.role, 1.0, 1.0, (0.5,) * 3)
                            for a in pool.agents), pool.skills)
    small = log.head(4000)
    mine = lpf.fit(small, env, n_sim=2000, max_evaluations=20)
    theirs = lpf.fit(small, FlightPlannerV1Env(pool=other), n_sim=2000, max_evaluations=20)
    assert mine.law == theirs.law and mine.distance == theirs.distance
    for name in ("strengths", "costs", "flops"):
        np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name))


def test_the_teacher_weighs_the_level_with_the_fitted_slack(env) -> None:
    """Every particle's optimal price over the budget lies in the fitted slack's range."""
    fitted = replace(lpf.true_parameters(env), law=lpf.FlightLaw(slack=(0.10, 0.12)))
    teacher = fitted.teacher(env, 600)
    assert teacher.prior.slack == (0.10, 0.12)
    for level in (0.35, 0.5, 0.7):
        for model, _ in teacher.prior.given(2, level):
            optimal = model.prices[OPT]
            assert optimal.min() >= 1 / 1.12 - 1e-9 and optimal.max() <= 1 / 1.10 + 1e-9


def test_the_teacher_is_built_on_the_fitted_pool_and_law(env) -> None:
    truth = lpf.true_parameters(env)
    strengths = truth.strengths * 0.9
    costs = truth.costs * 2.0
    fitted = replace(truth, law=KNOWN, strengths=strengths, costs=costs)
    teacher = fitted.teacher(env, 500)
    np.testing.assert_allclose(teacher.env._strength, strengths)
    np.testing.assert_allclose(teacher.env.pool.costs, costs)
    assert teacher.env.reward_weights == env.unwrapped.reward_weights
    expected = lpf.prior_of(KNOWN, 500, fitted.pool())
    for name in ("shortest_hops", "hops", "prices", "fare_scale"):
        np.testing.assert_array_equal(getattr(teacher.prior, name), getattr(expected, name))
    assert teacher.prior.slack == KNOWN.slack
    reference = FlightPrior.draw(env.unwrapped, 500)
    assert not np.array_equal(teacher.prior.prices, reference.prices)


def test_a_law_is_checked() -> None:
    with pytest.raises(ValueError, match="edge_probability"):
        lpf.FlightLaw(1.2)
    with pytest.raises(ValueError, match="slack"):
        lpf.FlightLaw(slack=(0.3, 0.1))


def test_the_runner_takes_the_env_and_toolbench_stays_the_default() -> None:
    assert runner.env_of(DEFAULT) == "cost_envs/ToolBench-v0"
    assert any(kind == "true" for kind, *_ in runner.units_of(DEFAULT))
    flight_units = runner.units_of(FLIGHT_SMOKE)
    assert [kind for kind, *_ in flight_units] == ["fixed", "learned", "learned"]
    config = runner.row_config(replace(FLIGHT_SMOKE, students=True))
    assert config.teacher == "bayes" and config.dagger_rounds == 2


def test_flight_smoke_report_writes_the_table(tmp_path) -> None:
    paths = runner.report(tmp_path, jobs=1, scale=FLIGHT_SMOKE, log=lambda *_: None)
    text = (tmp_path / FLIGHT_NAME).read_text()
    assert [p.name for p in paths] == [FLIGHT_NAME]
    assert "teacher, prior learned from 2k steps" in text
    assert "the pipeline at the true parameters (control)" in text
    assert "| edge probability | 0.320 |" in text


def test_flight_smoke_report_with_students(tmp_path) -> None:
    """The students' arm: a true-prior and a learned-prior student per seed, in the file."""
    scale = replace(FLIGHT_SMOKE, name="flight-smoke-students", seeds=1, students=True)
    assert [kind for kind, *_ in runner.units_of(scale)] == ["fixed", "true", "learned"]
    runner.report(tmp_path, jobs=1, scale=scale, log=lambda *_: None)
    text = (tmp_path / FLIGHT_STUDENTS_NAME).read_text()
    assert "| student, true prior |" in text
    assert "student, prior learned from 2k steps" in text
