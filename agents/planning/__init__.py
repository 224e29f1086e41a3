"""The achievable reference: planners that know the task but not its luck (issue #11).

The hindsight oracle (:class:`agents.baselines.CostOptOracle`) sees every agent's luck at
every turn, so it bounds what no policy can reach. The reference here is reachable: a
model-based planner that knows the env's generative model and the current task's hidden
parameters, but not the luck that decides each call's outcome, and plays the policy of
the highest *expected* return. Each env family has its own module, because what is exact
and what must be sampled depends on its generative model; :func:`planner` picks the one
that fits an env.

The Bayes reference knows less: the env's generative model and the *prior* over tasks,
not the current task; it keeps a posterior over the task from what the episode showed and
acts on it. It reads no hidden state, so it is not privileged (a policy could reach it);
:func:`bayes_planner` picks the one that fits an env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agents.planning.agentic import AgenticPlanner, plan_agentic
from agents.planning.common import Planner
from agents.planning.expert import ExpertPlanner
from agents.planning.flight import FlightPlanner
from agents.planning.flight_bayes import BayesFlightPlanner
from agents.planning.toolbench import AnswerModel, ExpectimaxPlanner, plan_toolbench
from agents.planning.toolbench_bayes import BayesToolBenchPlanner
from cost_envs.envs.agentic_routing import AgenticRoutingEnv
from cost_envs.envs.expert_routing import ExpertRoutingEnv
from cost_envs.envs.flight_planner import FlightPlannerEnv
from cost_envs.envs.flight_planner_v1 import FlightPlannerV1Env
from cost_envs.envs.toolbench import ToolBenchEnv

__all__ = ["BAYES_PLANNER_FOR_ENV", "PLANNERS", "AgenticPlanner", "AnswerModel",
           "BayesFlightPlanner", "BayesToolBenchPlanner", "ExpectimaxPlanner", "ExpertPlanner",
           "FlightPlanner", "Planner", "bayes_planner", "plan_agentic", "plan_toolbench", "planner",
           "reference_class"]

#: Env class -> its planner; :func:`planner` takes the first entry the env is an instance
#: of, so a subclass (a v1 env) listed before its parent gets its own planner.
PLANNER_FOR_ENV: tuple[tuple[type, type[Planner]], ...] = (
    (ToolBenchEnv, ExpectimaxPlanner),
    (AgenticRoutingEnv, AgenticPlanner),
    (ExpertRoutingEnv, ExpertPlanner),  # v0 and v1 (a subclass): one model covers both
    (FlightPlannerEnv, FlightPlanner),  # v0 and v1: v1 keeps v0's slots in place
)


def planner(env: gym.Env, **kwargs: Any) -> Planner:
    """The planner of ``env``'s family, built on ``env`` (wrapped or not).

    Raises:
        ValueError: If no planner models ``env``'s family.
    """
    planner_class = reference_class(env, "planner")
    if planner_class is not None:
        return planner_class(env, **kwargs)
    modelled = ", ".join(env_class.__name__ for env_class, _ in PLANNER_FOR_ENV)
    raise ValueError(f"planner: no planner models {type(env.unwrapped).__name__}; there is one for "
                     f"{modelled}")


#: Env class -> its Bayes reference (knows the prior, not the task); exact classes, since
#: a subclass may draw its tasks from another prior.
BAYES_PLANNER_FOR_ENV: tuple[tuple[type, type[Any]], ...] = (
    (ToolBenchEnv, BayesToolBenchPlanner),
    (FlightPlannerEnv, BayesFlightPlanner),  # v1 draws v0's tasks: the same prior
    (FlightPlannerV1Env, BayesFlightPlanner),
)


def bayes_planner(env: gym.Env, **kwargs: Any) -> Any:
    """The Bayes reference of ``env``'s family, built on ``env`` (wrapped or not).

    Raises:
        ValueError: If no Bayes reference models ``env``'s family and prior.
    """
    planner_class = reference_class(env, "bayes")
    if planner_class is not None:
        return planner_class(env, **kwargs)
    inner = env.unwrapped
    modelled = ", ".join(env_class.__name__ for env_class, _ in BAYES_PLANNER_FOR_ENV)
    raise ValueError(f"bayes_planner: no Bayes reference models {type(inner).__name__}; "
                     f"there is one for {modelled}")


def reference_class(env: gym.Env, kind: str = "planner") -> type[Any] | None:
    """The class that :func:`planner` or :func:`bayes_planner` would build on ``env``.

    ``kind``: ``"planner"`` or ``"bayes"``. ``None`` where none models ``env``. Nothing is
    built (a Bayes reference's tables take about 0.7 s).
    """
    inner = env.unwrapped
    if kind == "planner":
        return next((planner_class for env_class, planner_class in PLANNER_FOR_ENV
                     if isinstance(inner, env_class)), None)
    if kind == "bayes":
        return next((planner_class for env_class, planner_class in BAYES_PLANNER_FOR_ENV
                     if type(inner) is env_class), None)
    raise ValueError(f"reference_class: kind must be 'planner' or 'bayes', got {kind!r}")


#: CLI names -> planner factories, each called as ``factory(env)`` (refusing envs they do
#: not fit).
PLANNERS: dict[str, Any] = {"planner": planner, "bayes-planner": bayes_planner}
