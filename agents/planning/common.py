"""What every planner shares: privileged, one environment at a time."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Protocol, TypeVar

import gymnasium as gym
import numpy as np

from agents.baselines import PrivilegedBaseline
from cost_envs.core import OrchestrationEnv


class Planner(PrivilegedBaseline):
    """A planner of :mod:`agents.planning`: privileged, one environment at a time.

    It reads the env's current task, so it is built on the env it acts in and follows
    that one env, one observation at a time (:class:`~agents.baselines.PrivilegedBaseline`).
    Subclasses implement ``act``.
    """

    #: Every planner that knows the task is "planner" in the CLI and in tables.
    name = "planner"

    def note_action(self, observation: np.ndarray, action: np.ndarray) -> None:
        """The action actually played at ``observation``, when another policy chose it.

        DAgger (:class:`agents.learners.dagger.TeacherLabels`) asks the planner for its
        action at the student's state and then plays the student's. A planner that reads
        each observation against the action it played (the FlightPlanner planners) must
        be told the student's instead; the others read all they need from the
        observation, so by default this does nothing.
        """


class _Plan(Protocol):
    @property
    def expected_return(self) -> float: ...


PlanT = TypeVar("PlanT", bound=_Plan)


class TaskPlanner(Planner, Generic[PlanT]):
    """A planner that solves the env's current task once, then plays the plan.

    :meth:`plan` solves the task (:meth:`_solve`) when it first sees it and again only
    when what the plan depends on changes (:meth:`_plan_key`: the task's hidden
    parameters, and the prices or budget where they matter), so every step of an
    episode reads the same plan. Subclasses set :attr:`family` and implement the two
    hooks and ``act``.
    """

    #: The env class whose generative model the planner solves, what that model is and
    #: the ids it applies to: the constructor refuses any other env, naming all three.
    family: ClassVar[tuple[type[OrchestrationEnv[Any]], str, str]]
    _key: Any = None
    _plan: PlanT | None = None

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        env_class, model, ids = self.family
        if not isinstance(self.env, env_class):
            raise ValueError(f"{type(self).__name__}: needs {model}; it applies to {ids}, "
                             f"not {self.env.env_name}")

    def plan(self) -> PlanT:
        """The plan of the env's current task (solved once per task and what it depends on)."""
        task = self.env.task
        if task is None:
            raise ValueError(f"{type(self).__name__}: the env has no task yet; reset it first")
        key = self._plan_key(task)
        if key != self._key or self._plan is None:
            self._plan = self._solve(task)
            self._key = key
        return self._plan

    def expected_return(self) -> float:
        """Expected return of the current task's episode from its start, under this policy."""
        return self.plan().expected_return

    def _plan_key(self, task: Any) -> Any:
        """What the plan of ``task`` depends on: a new key, a new plan."""
        raise NotImplementedError

    def _solve(self, task: Any) -> PlanT:
        """The plan of ``task``."""
        raise NotImplementedError
