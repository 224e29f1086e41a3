"""DAgger: the student plays, the teacher labels the student's states."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch

import cost_envs  # noqa: F401  (registers the ids)
from agents.learners.dagger import TeacherLabels, fit_supervised, student_traces
from agents.learners.supervised import SupervisedConfig, policy_for

ENV_ID = "cost_envs/ToolBench-v0"


class SkillTeacher:
    """A memoryless teacher: call the tool whose index is the current skill's, plus llm_large."""

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        action = np.zeros(8, dtype=np.int8)
        action[int(np.argmax(observation[5:11]))] = 1
        action[6] = 1
        return action, state


class StubbornStudent:
    """Always calls the calculator alone (agent 2): far from the teacher."""

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        action = np.zeros(8, dtype=np.float32)
        action[2] = 1
        return action, state


def test_the_student_plays_and_the_teacher_labels_its_states():
    env = gym.make(ENV_ID)
    env.reset(seed=3)
    traces = student_traces(StubbornStudent(), SkillTeacher(), env, episodes=20, gamma=0.99)
    # Labels are the teacher's action at each observation the student reached ...
    for obs, label in zip(traces.observations, traces.labels, strict=True):
        assert np.array_equal(label, SkillTeacher().predict(obs)[0])
    # ... and those are the student's states: a calculator-only student fails its turns and
    # runs every episode to its turn limit, which the teacher's large LLM would not.
    replay = gym.make(ENV_ID)
    replay.reset(seed=3)
    steps = 0
    for _ in range(20):
        replay.reset()
        while True:
            _, _, terminated, truncated, _ = replay.step(StubbornStudent().predict(None)[0])
            steps += 1
            if terminated or truncated:
                break
    assert len(traces.observations) == steps
    assert traces.returns.shape == (steps,)


def test_teacher_labels_thread_both_recurrent_states():
    class CountingTeacher(SkillTeacher):
        def predict(self, observation, state=None, episode_start=None, deterministic=True):
            fresh = state is None or bool(episode_start[0])
            return super().predict(observation)[0], 1 if fresh else state + 1

    asker = TeacherLabels(StubbornStudent(), CountingTeacher())
    obs = np.zeros(17, dtype=np.float32)
    _, state = asker.predict(obs, None, np.array([True]))
    _, state = asker.predict(obs, state, np.array([False]))
    assert state[1] == 2 and len(asker.labels) == 2


def test_dagger_adds_the_students_states_and_is_deterministic():
    env = gym.make(ENV_ID)
    config = SupervisedConfig(teacher="planner", episodes=30, epochs=2, dagger_rounds=2,
                              dagger_episodes=15)
    histories, weights = [], []
    for _ in range(2):
        torch.manual_seed(0)
        policy = policy_for(env)
        histories.append(fit_supervised(policy, env, config, seed=0, trace_seed=7))
        weights.append([p.detach().clone() for p in policy.parameters()])
    assert len(histories[0]) == 3 * config.epochs  # one fit, then one per round
    assert histories[0] == histories[1]
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))


def test_each_round_adds_the_students_own_states_on_new_tasks(monkeypatch):
    """Each round adds what the student played, labelled by the teacher, on the next tasks."""
    from agents.learners import dagger
    from agents.planning import planner

    fits = []
    real_fit = dagger.train_supervised

    def spy(policy, traces, costs, config, seed=0, progress=False):
        fits.append((traces, [p.detach().clone() for p in policy.parameters()]))
        return real_fit(policy, traces, costs, config, seed=seed, progress=progress)

    monkeypatch.setattr(dagger, "train_supervised", spy)
    env = gym.make(ENV_ID)
    torch.manual_seed(0)
    config = SupervisedConfig(teacher="planner", episodes=20, epochs=2, dagger_rounds=2,
                              dagger_episodes=10)
    fit_supervised(policy_for(env), env, config, seed=0, trace_seed=7)
    assert len(fits) == 3
    # Replay the task stream: tasks do not depend on the actions, so after the first fit's
    # 20 episodes and each earlier round's 10, round r's tasks come next.
    replay = gym.make(ENV_ID)
    replay.reset(seed=7)
    for _ in range(config.episodes - 1):
        replay.reset()
    teacher = planner(replay)
    for (before, _), (after, weights) in itertools.pairwise(fits):
        old = len(before.observations)
        assert np.array_equal(after.observations[:old], before.observations)  # data kept
        # The student that played the round is the policy entering the next fit.
        student = policy_for(env)
        with torch.no_grad():
            for target, source in zip(student.parameters(), weights, strict=True):
                target.copy_(source)
        observations, labels, played = [], [], []
        for _ in range(config.dagger_episodes):
            obs, _ = replay.reset()
            while True:
                action = student.predict(obs, deterministic=True)[0]
                observations.append(obs)
                labels.append(teacher.predict(obs)[0])
                played.append(action)
                obs, _, terminated, truncated, _ = replay.step(action)
                if terminated or truncated:
                    break
        assert np.array_equal(after.observations[old:], np.array(observations))
        assert np.array_equal(after.labels[old:], np.array(labels, dtype=np.float32))
        # The labels are the teacher's, not the student's own actions.
        assert not np.array_equal(np.array(played, dtype=np.float32), after.labels[old:])


def test_dagger_with_the_bayes_teacher_runs_on_toolbench():
    env = gym.make(ENV_ID)
    policy = policy_for(env)
    before = [p.detach().clone() for p in policy.action_net.parameters()]
    fit_supervised(policy, env, SupervisedConfig(teacher="bayes", episodes=5, epochs=1,
                                                 dagger_rounds=1, dagger_episodes=5),
                   seed=0, trace_seed=0)
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.action_net.parameters(),
                                                      strict=True))


def test_dagger_settings_are_checked():
    with pytest.raises(ValueError, match="DAgger needs teacher='planner' or 'bayes'"):
        SupervisedConfig(dagger_rounds=1)
    with pytest.raises(ValueError, match="dagger_rounds"):
        SupervisedConfig(teacher="bayes", dagger_rounds=-1)
    with pytest.raises(ValueError, match="dagger_episodes"):
        SupervisedConfig(teacher="bayes", dagger_rounds=1, dagger_episodes=0)


class FixedStudent:
    """Plays one fixed set of agents every turn, whatever the teacher would do."""

    def __init__(self, action: np.ndarray) -> None:
        self.action = action

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        return self.action.copy(), state


@pytest.mark.slow
@pytest.mark.parametrize("teacher_name", ["planner", "bayes"])
def test_a_flightplanner_teacher_follows_the_students_actions(teacher_name):
    """The FlightPlanner planners read each observation against the action played; under
    DAgger that is the student's, not their own label (before, the next turn raised)."""
    from agents.planning import bayes_planner, planner
    from agents.planning.flight import MAX_TURNS

    env = gym.make("cost_envs/FlightPlanner-v1")
    env.reset(seed=5)
    teacher = planner(env) if teacher_name == "planner" else bayes_planner(env, n_particles=200)
    # The student calls only the first planner and the first searcher: a one-turn rule's
    # pair, which the teacher often would not repeat after the first turn.
    base = teacher.bases[0].astype(np.int8)
    traces = student_traces(FixedStudent(base), teacher, env, episodes=4, gamma=0.99)
    turns = [MAX_TURNS - round(float(obs[teacher._turns_left]) * MAX_TURNS)
             for obs in traces.observations]
    assert max(turns) >= 1  # the student's episodes went past their first turn
    assert any(not np.array_equal(label, base) for label in traces.labels)
