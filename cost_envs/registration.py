"""Registration: every id's entry point, with budgets as a ``gym.make`` argument.

Every id is registered with an :class:`EnvFactory` as its entry point (a string such as
``"cost_envs.registration:make_ToolBench_v0"``, so the spec stays serialisable). Without a
budget the factory builds exactly the env class, so ``gym.make(id)`` is the env it always
was. With one, the budget wrapper is built *inside* the env ``gym.make`` returns:

    >>> import gymnasium as gym
    >>> import cost_envs
    >>> gym.make("cost_envs/ToolBench-v0", budget=0.2, on_exceed="truncate")
    <OrderEnforcing<PassiveEnvChecker<HardBudget<ToolBenchEnv<cost_envs/ToolBench-v0>>>>>
    >>> gym.make("cost_envs/ToolBench-v0")
    <OrderEnforcing<PassiveEnvChecker<ToolBenchEnv<cost_envs/ToolBench-v0>>>>

Why inside: anything a user or library stacks on the made env then sees every episode
end, including those the budget cuts short. SB3's ``make_vec_env(id, env_kwargs=...)``
and rl-zoo3 put their ``Monitor`` directly on the made env, above the budget, so
``ep_rew_mean``, the monitor CSVs and the success rate count budget-truncated episodes.
``make_vec_env(..., wrapper_class=HardBudget)`` instead puts the budget above the
``Monitor``, which then never sees the episodes the budget ends.

The budget is part of the spec's ``kwargs`` and the wrapper part of its
``additional_wrappers`` (Gymnasium's "entry points can add their own wrappers"), so
``gym.make(env.spec)`` rebuilds the same stack once, and ``env_arguments`` style
introspection (``inspect.signature`` of the entry point) lists ``budget`` and
``on_exceed`` beside the env class's own arguments.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator, register, registry
from gymnasium.wrappers import RenderCollection

from cost_envs.wrappers.budget import HardBudget, check_budget_args

#: Registered ids and their env classes; tests are generated from this registry.
ENV_IDS = {
    "cost_envs/FlightPlanner-v0": "cost_envs.envs.flight_planner:FlightPlannerEnv",
    "cost_envs/FlightPlanner-v1": "cost_envs.envs.flight_planner_v1:FlightPlannerV1Env",
    "cost_envs/ToolBench-v0": "cost_envs.envs.toolbench:ToolBenchEnv",
    "cost_envs/ExpertRouting-v0": "cost_envs.envs.expert_routing:ExpertRoutingEnv",
    "cost_envs/ExpertRouting-v1": "cost_envs.envs.expert_routing_v1:ExpertRoutingV1Env",
    "cost_envs/AgenticRouting-v0": "cost_envs.envs.agentic_routing:AgenticRoutingEnv",
    "cost_envs/TraceRouting-v0": "cost_envs.envs.trace_routing:TraceRoutingEnv",
}

#: Ids with a native batched env (:mod:`cost_envs.vector`), registered as their
#: ``vector_entry_point``; ``gym.make_vec`` uses ``SyncVectorEnv`` for the others.
VECTOR_IDS = {
    "cost_envs/AgenticRouting-v0": "cost_envs.vector.agentic_routing:AgenticRoutingVectorEnv",
    "cost_envs/ExpertRouting-v0": "cost_envs.vector.expert_routing:ExpertRoutingVectorEnv",
    "cost_envs/ExpertRouting-v1": "cost_envs.vector.expert_routing:ExpertRoutingV1VectorEnv",
    "cost_envs/FlightPlanner-v0": "cost_envs.vector.flight_planner:FlightPlannerVectorEnv",
    "cost_envs/FlightPlanner-v1": "cost_envs.vector.flight_planner:FlightPlannerV1VectorEnv",
    "cost_envs/ToolBench-v0": "cost_envs.vector.toolbench:ToolBenchVectorEnv",
    "cost_envs/TraceRouting-v0": "cost_envs.vector.trace_routing:TraceRoutingVectorEnv",
}

#: The ``gym.make`` arguments the factory takes itself; everything else goes to the env.
BUDGET_ARGUMENTS = ("budget", "on_exceed")


class EnvFactory:
    """The entry point of one id: the env class, under ``HardBudget`` when a budget is given.

    It has no ``metadata``, on purpose: ``gym.make`` checks a ``render_mode`` against the
    entry point's ``render_modes`` and warns, before it builds the env, when the mode is
    not among them; SB3's ``make_vec_env`` asks every env for ``"rgb_array"`` and falls
    back to none on ``TypeError``, so that warning was printed once per env for nothing.
    The env refuses a mode it does not have itself
    (:class:`~cost_envs.core.UnsupportedRenderModeError`, a ``ValueError`` and a
    ``TypeError``), and :meth:`__call__` keeps Gymnasium's ``"<mode>_list"`` form.

    Args:
        target: The env class as ``"module:Class"`` (imported on first use).
    """

    def __init__(self, target: str) -> None:
        self.target = target

    @functools.cached_property
    def env_class(self) -> type[gym.Env[Any, Any]]:
        """The env class this factory builds."""
        return load_env_creator(self.target)  # type: ignore[return-value]  # target: a class

    @property
    def __signature__(self) -> inspect.Signature:
        """The env class's arguments plus the keyword-only ``budget`` and ``on_exceed``."""
        parameters = list(inspect.signature(self.env_class).parameters.values())
        extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
                 for name in BUDGET_ARGUMENTS]
        at = next((i for i, p in enumerate(parameters)
                   if p.kind is inspect.Parameter.VAR_KEYWORD), len(parameters))
        return inspect.Signature(parameters[:at] + extra + parameters[at:])

    def __call__(self, *, budget: float | None = None, on_exceed: str | None = None,
                 **kwargs: Any) -> gym.Env[Any, Any]:
        """Build the env; wrap it in ``HardBudget(budget, on_exceed)`` when ``budget`` is set.

        Args:
            budget: Money an episode may spend (finite, ``>= 0``); ``None``: no budget.
            on_exceed: ``"mask"`` (the default under a budget) or ``"truncate"``, see
                :class:`~cost_envs.wrappers.HardBudget`; only with ``budget``.
            **kwargs: The env class's own arguments.

        Returns:
            The env, or ``HardBudget`` around it.

        Raises:
            ValueError: A bad ``budget`` or ``on_exceed`` (checked before the env is
                built), or ``on_exceed`` without ``budget``.
        """
        mode = kwargs.get("render_mode")
        modes = self.env_class.metadata.get("render_modes", [])
        if isinstance(mode, str) and mode.endswith("_list") and mode[:-5] in modes:
            # what gym.make does for an entry point that lists its render modes
            return RenderCollection(self(budget=budget, on_exceed=on_exceed,
                                         **{**kwargs, "render_mode": mode[:-5]}))
        if budget is None:
            if on_exceed is not None:
                raise ValueError(f"{self.target}: on_exceed={on_exceed!r} needs a budget; "
                                 "expected budget=<money per episode> beside it")
            return self.env_class(**kwargs)
        return self._budgeted(budget, "mask" if on_exceed is None else on_exceed, kwargs)

    def _budgeted(self, budget: Any, mode: str, kwargs: dict[str, Any]) -> Any:
        """The env under its budget wrapper (``budget`` and ``mode`` checked first)."""
        check_budget_args(budget, mode)
        return HardBudget(self.env_class(**kwargs), budget=budget, on_exceed=mode)

    def __repr__(self) -> str:
        return f"EnvFactory({self.target!r})"


class VectorEnvFactory(EnvFactory):
    """The ``vector_entry_point`` of one id: the batched env, under ``VectorHardBudget``.

    ``gym.make_vec(id, num_envs, vectorization_mode="vector_entry_point", budget=...,
    on_exceed=..., autoreset_mode=..., **env_kwargs)`` calls it with ``num_envs`` and
    every other argument.

    Args:
        target: The batched env class as ``"module:Class"`` (imported on first use).
    """

    def _budgeted(self, budget: Any, mode: str, kwargs: dict[str, Any]) -> Any:
        """The batched env under ``VectorHardBudget``, which checks ``budget``.

        ``budget`` is one number or one per sub-env; ``kwargs`` hold ``num_envs`` and
        ``autoreset_mode`` beside the env class's own arguments.
        """
        from cost_envs.vector.base import BatchedOrchestrationEnv
        from cost_envs.vector.budget import VectorHardBudget

        env = self.env_class(**kwargs)
        if not isinstance(env, BatchedOrchestrationEnv):
            raise TypeError(f"{self.target}: a budget needs a BatchedOrchestrationEnv, "
                            f"got {type(env).__name__}")
        return VectorHardBudget(env, budget, mode)


def factory_name(env_id: str) -> str:
    """The module attribute holding ``env_id``'s factory: ``make_ToolBench_v0``."""
    return "make_" + env_id.split("/")[-1].replace("-", "_")


def vector_factory_name(env_id: str) -> str:
    """The module attribute holding ``env_id``'s batched factory: ``make_vec_ToolBench_v0``."""
    return factory_name(env_id).replace("make_", "make_vec_", 1)


#: One factory per id, also module attributes so that entry points are plain strings.
FACTORIES = {env_id: EnvFactory(target) for env_id, target in ENV_IDS.items()}
globals().update({factory_name(env_id): factory for env_id, factory in FACTORIES.items()})
#: One batched factory per id of :data:`VECTOR_IDS`: ``make_vec_ToolBench_v0`` ...
VECTOR_FACTORIES = {env_id: VectorEnvFactory(target) for env_id, target in VECTOR_IDS.items()}
globals().update({vector_factory_name(env_id): factory
                  for env_id, factory in VECTOR_FACTORIES.items()})


def register_envs() -> None:
    """Register every id (idempotent: re-imports and reloads are harmless)."""
    for env_id in ENV_IDS:
        if env_id not in registry:
            vector = (f"{__name__}:{vector_factory_name(env_id)}"
                      if env_id in VECTOR_IDS else None)
            register(id=env_id, entry_point=f"{__name__}:{factory_name(env_id)}",
                     vector_entry_point=vector)
