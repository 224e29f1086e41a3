"""ToolBench-v0's ``cleared_difficulties`` option: the Bayes teacher's memory, observed (#38).

The Bayes reference (:class:`agents.planning.BayesToolBenchPlanner`) keeps in its recurrent
state the difficulty of every stage it has seen, the current one last; the observation
shows the current one only. With the option the observation holds the others too, and
nothing else is changed: off (the default), the space and the trajectories are those of
the memoryless env. Batched against single with the option: tests/test_vector.py.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import cost_envs  # noqa: F401  (registers the ids)
from agents.planning import BayesToolBenchPlanner
from cost_envs.envs.toolbench import CLEARED_DIFFICULTIES, MAX_STAGES

ENV_ID = "cost_envs/ToolBench-v0"
OPTION = {"cleared_difficulties": True}


def random_actions(seed: int, m: int = 8):
    """Random calls, now and then the all-zero answer, now and then the large LLM alone."""
    rng = np.random.default_rng(seed)

    def act(_obs: np.ndarray) -> np.ndarray:
        action = (rng.random(m) < 0.25).astype(np.int8)
        if rng.random() < 0.05:
            action[:] = 0
        elif rng.random() < 0.3:
            action[:] = 0
            action[6] = 1
        return action

    return act


def play(env: gym.Env, act, episodes: int, seed: int) -> list[tuple]:
    """Every step of ``episodes`` episodes: (obs, reward, terminated, truncated, info)."""
    steps: list[tuple] = []
    obs, _ = env.reset(seed=seed)
    steps.append((obs,))
    for _ in range(episodes):
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(act(obs))
            steps.append((obs, reward, terminated, truncated, info))
            done = terminated or truncated
        obs, _ = env.reset()
        steps.append((obs,))
    return steps


def test_the_option_holds_what_the_bayes_teacher_remembers() -> None:
    """At every step the teacher's state is the option's cleared slots, then the current one.

    The teacher follows the episodes of a player that mostly does what it says and now
    and then something random (failed turns, escalations, early answers), as it follows
    the student's under DAgger, and reads only the first 17 slots.
    """
    env = gym.make(ENV_ID, **OPTION)
    teacher = BayesToolBenchPlanner(env, n_particles=40)
    layout = env.unwrapped.observation_layout
    assert layout["cleared_difficulties"] == CLEARED_DIFFICULTIES == slice(17, 21)
    other, rng = random_actions(1), np.random.default_rng(2)
    checked = {stage: 0 for stage in range(MAX_STAGES)}
    obs, _ = env.reset(seed=5)
    for _ in range(60):
        state, start, done = None, np.array([True]), False
        while not done:
            label, state = teacher.predict(obs, state, start)
            stage = len(state) - 1
            cleared = obs[layout["cleared_difficulties"]]
            assert tuple(state) == (*cleared[:stage].tolist(),
                                    float(obs[layout["difficulty"]][0]))
            assert not cleared[stage:].any()
            checked[stage] += 1
            obs, _, terminated, truncated, _ = env.step(
                other(obs) if rng.random() < 0.3 else label)
            start, done = np.array([False]), terminated or truncated
        obs, _ = env.reset()
    assert min(checked.values()) > 5, checked  # every stage of a 4-stage task was reached


def test_the_teacher_without_memory_reading_the_option_acts_as_the_teacher() -> None:
    """The option is all the teacher's memory: read from it, its decisions are the same."""
    env = gym.make(ENV_ID, **OPTION)
    teacher = BayesToolBenchPlanner(env, n_particles=40)
    slots = env.unwrapped.observation_layout["cleared_difficulties"]
    obs, _ = env.reset(seed=9)
    for _ in range(30):
        state, start, done = None, np.array([True]), False
        while not done:
            action, state = teacher.predict(obs, state, start)
            _, stage, _ = teacher.position(obs)
            seen = (*obs[slots][:stage].tolist(), float(obs[4]))
            assert np.array_equal(teacher.decide(obs, seen), action)
            obs, _, terminated, truncated, _ = env.step(action)
            start, done = np.array([False]), terminated or truncated
        obs, _ = env.reset()


def test_off_by_default_the_space_and_the_trajectories_are_unchanged() -> None:
    default, off, on = (gym.make(ENV_ID), gym.make(ENV_ID, cleared_difficulties=False),
                        gym.make(ENV_ID, **OPTION))
    assert default.observation_space == off.observation_space == gym.spaces.Box(
        0.0, 1.0, (17,), np.float32)
    assert on.observation_space == gym.spaces.Box(0.0, 1.0, (21,), np.float32)
    assert "cleared_difficulties" not in default.unwrapped.observation_layout
    assert default.unwrapped.observation_layout == type(default.unwrapped).observation_layout
    runs = [play(env, random_actions(3), episodes=150, seed=21) for env in (default, off, on)]
    assert len(runs[0]) == len(runs[1]) == len(runs[2])
    for first, second, third in zip(*runs, strict=True):
        assert np.array_equal(first[0], second[0]) and first[0].dtype == second[0].dtype
        # with the option: the same 17 slots first, the same rewards, ends and infos
        assert np.array_equal(third[0][:17], first[0]) and third[0].dtype == np.float32
        for a, b, c in zip(first[1:4], second[1:4], third[1:4], strict=True):
            assert a == b == c
        if len(first) == 5:
            for key in first[4]:
                assert np.array_equal(first[4][key], second[4][key])
                assert np.array_equal(first[4][key], third[4][key])


def test_replayed_tasks_show_the_same_history() -> None:
    """``reset(options={"task": ...})`` builds its rows on another path (``_tables``)."""
    drawn, replayed = gym.make(ENV_ID, **OPTION), gym.make(ENV_ID, **OPTION)
    first, _ = drawn.reset(seed=4)
    for episode in range(80):
        second, _ = replayed.reset(options={"task": drawn.unwrapped._task})
        act_a, act_b = random_actions(episode), random_actions(episode)
        done = False
        while not done:
            assert np.array_equal(first, second)
            first, _, terminated, truncated, _ = drawn.step(act_a(first))
            second, *_ = replayed.step(act_b(second))
            done = terminated or truncated
        assert np.array_equal(first, second)
        first, _ = drawn.reset()


def test_checkers_pass_with_the_option() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gym_check_env(gym.make(ENV_ID, **OPTION).unwrapped)
        sb3_check_env(gym.make(ENV_ID, **OPTION), warn=True)
    assert [str(w.message) for w in record if "cost_envs" in w.filename or not issubclass(
        w.category, (DeprecationWarning, PendingDeprecationWarning))] == []


@pytest.mark.parametrize("value", ["yes", 1, 0, None, 1.0])
def test_a_bad_value_is_refused_in_one_line_naming_it(value) -> None:
    for make in (lambda: gym.make(ENV_ID, cleared_difficulties=value),
                 lambda: gym.make_vec(ENV_ID, 2, vectorization_mode="vector_entry_point",
                                      cleared_difficulties=value)):
        with pytest.raises(ValueError, match="cleared_difficulties") as error:
            make()
        assert "\n" not in str(error.value)
        assert "True or False" in str(error.value)


def test_numpy_bools_are_taken() -> None:
    env = gym.make(ENV_ID, cleared_difficulties=np.bool_(True))
    assert env.observation_space.shape == (21,)
