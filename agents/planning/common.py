"""What every planner shares: privileged, one environment at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.baselines import Baseline


class Planner(Baseline):
    """A planner of :mod:`agents.planning`: privileged, one environment at a time.

    It reads the env's current task, so it is built on the env it acts in and follows
    that one env, one observation at a time. Subclasses implement ``act``.
    """

    privileged = True

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """Single observations only: the planner follows one environment."""
        if np.ndim(observation) != 1:
            raise ValueError(f"{type(self).__name__} follows a single environment; pass one "
                             "observation")
        return self.act(observation), state

    def note_action(self, observation: np.ndarray, action: np.ndarray) -> None:
        """The action actually played at ``observation``, when another policy chose it.

        DAgger (:class:`agents.learners.dagger.TeacherLabels`) asks the planner for its
        action at the student's state and then plays the student's. A planner that reads
        each observation against the action it played (the FlightPlanner planners) must
        be told the student's instead; the others read all they need from the
        observation, so by default this does nothing.
        """
