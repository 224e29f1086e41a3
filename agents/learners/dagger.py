"""DAgger for the supervised allocator: the teacher labels the student's own states.

Imitating a teacher on the teacher's own trajectories (behaviour cloning, the paper's
supervised stage) leaves the student untaught where it errs: one wrong call leads to a
state the teacher never visits, and there the student guesses. DAgger (Ross, Gordon and
Bagnell, 2011) plays the *student*, asks the teacher what it would do at every state the
student reaches, adds those labels to the data and fits again:

1. traces of the teacher on its own trajectories (:func:`agents.learners.supervised.traces_for`),
   and a fit;
2. ``dagger_rounds`` times: ``dagger_episodes`` episodes played by the student
   (deterministic), each step labelled with the teacher's action at that state; the
   returns the value head learns are the student's own; a fit on all the data so far.

The teacher must be able to label a state it did not choose: the planner, which reads the
env's task (privileged, only for labels), or the Bayes reference, which follows the
episode's observations (not privileged: a student taught by it is taught from what a
policy can see). Rounds continue the env's task stream, so every round sees new tasks,
and the whole procedure is a function of the seed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from agents.evaluation import rollout
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.supervised import (
    SupervisedConfig,
    Traces,
    discounted_returns,
    relative_costs,
    teacher_for,
    traces_for,
    train_supervised,
)
from agents.progress import progress_bar


class TeacherLabels:
    """An allocator that plays the student and records the teacher's action at each state.

    SB3's ``predict`` signature; the recurrent state is the pair (student's, teacher's), so
    a teacher with memory (the Bayes reference) follows the student's episode.
    """

    def __init__(self, student: AllocatorPolicy, teacher: Any) -> None:
        self.student = student
        self.teacher = teacher
        self.labels: list[np.ndarray] = []

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """The student's action; the teacher's is kept in :attr:`labels`."""
        student_state, teacher_state = (None, None) if state is None else state
        label, teacher_state = self.teacher.predict(observation, teacher_state, episode_start,
                                                    True)
        self.labels.append(np.asarray(label, dtype=np.float32).reshape(-1))
        action, student_state = self.student.predict(observation, student_state, episode_start,
                                                     deterministic=True)
        # A teacher that reads the next observation against the action played (the
        # FlightPlanner planners) must follow the student's action, not its own label.
        note = getattr(self.teacher, "note_action", None)
        if note is not None:
            note(np.asarray(observation).reshape(-1), np.asarray(action).reshape(-1))
        return action, (student_state, teacher_state)


def student_traces(student: AllocatorPolicy, teacher: Any, env: gym.Env, episodes: int,
                   gamma: float, progress: bool = False) -> Traces:
    """``episodes`` episodes of ``student`` on ``env``'s task stream, labelled by ``teacher``."""
    observations: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    returns: list[np.ndarray] = []
    with progress_bar(episodes, "dagger: student episodes", progress, "episode") as bar:
        for _ in range(episodes):
            asker = TeacherLabels(student, teacher)
            played = rollout(asker, env, record_steps=True)
            # record_steps keeps them
            assert played.observations is not None and played.rewards is not None
            observations.append(played.observations)
            labels.append(np.stack(asker.labels))
            returns.append(discounted_returns(played.rewards, gamma))
            bar.update(1)
    return Traces(np.concatenate(observations).astype(np.float32),
                  np.concatenate(labels).astype(np.float32),
                  np.concatenate(returns).astype(np.float32))


def joined(first: Traces, second: Traces) -> Traces:
    """Both sets of steps in one."""
    return Traces(*(np.concatenate([a, b]) for a, b in
                    zip((first.observations, first.labels, first.returns),
                        (second.observations, second.labels, second.returns), strict=True)))


def fit_supervised(policy: AllocatorPolicy, env: gym.Env, config: SupervisedConfig, seed: int,
                   trace_seed: int, progress: bool = False) -> list[dict[str, float]]:
    """The supervised stage: behaviour cloning, then ``config.dagger_rounds`` DAgger rounds.

    Args:
        policy: The student, fitted in place.
        env: The env the teacher and the student play (its task stream starts at
            ``trace_seed``).
        config: The stage's settings (teacher, episodes, epochs, rounds ...).
        seed: Seed of the fits' minibatch order.
        trace_seed: Task seed of the first episode.
        progress: Bars on a terminal.

    Returns:
        One loss dict per epoch of every fit.
    """
    traces = traces_for(env, config, seed=trace_seed, progress=progress)
    costs = relative_costs(env)
    history = train_supervised(policy, traces, costs, config, seed=seed, progress=progress)
    if config.dagger_rounds:
        teacher = teacher_for(env, config)
        for round_ in range(config.dagger_rounds):
            traces = joined(traces, student_traces(policy, teacher, env, config.dagger_episodes,
                                                   config.gamma, progress=progress))
            # Each round's minibatch order from a seed of its own, never another run's.
            round_seed = int(np.random.SeedSequence([seed, round_ + 1]).generate_state(1)[0])
            history += train_supervised(policy, traces, costs, config, seed=round_seed,
                                        progress=progress)
    return history
