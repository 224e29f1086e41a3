"""The multi-tenant ids and PettingZoo-style constructors: ``parallel_env`` and ``env``.

Each id fixes the base env of :class:`~cost_envs.multiagent.tenants.MultiTenantEnv`;
every other argument is the constructor's. ``parallel_env(id, ...)`` is the
``ParallelEnv``; ``env(id, ...)`` its AEC form through PettingZoo's ``parallel_to_aec``
(tenants act one after another, the step runs when the last has acted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cost_envs.config import one_of
from cost_envs.extras import import_extra
from cost_envs.multiagent.tenants import MultiTenantEnv

#: Registered multi-tenant ids and the base env each runs per tenant.
MULTIAGENT_ENV_IDS: dict[str, str] = {
    "cost_envs/MultiTenantToolBench-v0": "cost_envs/ToolBench-v0",
    "cost_envs/MultiTenantExpertRouting-v0": "cost_envs/ExpertRouting-v0",
    "cost_envs/MultiTenantAgenticRouting-v0": "cost_envs/AgenticRouting-v0",
    "cost_envs/MultiTenantFlightPlanner-v0": "cost_envs/FlightPlanner-v0",
}


def parallel_env(env_id: str = "cost_envs/MultiTenantToolBench-v0",
                 **kwargs: Any) -> MultiTenantEnv:
    """The ``ParallelEnv`` of ``env_id`` (a key of :data:`MULTIAGENT_ENV_IDS`).

    Args:
        env_id: The multi-tenant id.
        **kwargs: :class:`MultiTenantEnv`'s arguments other than ``base``.

    Raises:
        ValueError: An unknown id (the closest one suggested) or bad arguments.
    """
    one_of(env_id, "env_id", MULTIAGENT_ENV_IDS, where="cost_envs.multiagent")
    if "base" in kwargs:
        raise ValueError(f"cost_envs.multiagent: base={kwargs['base']!r}: the id fixes the "
                         f"base env ({MULTIAGENT_ENV_IDS[env_id]}); expected no base argument")
    env_kwargs = kwargs.get("env_kwargs")
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise ValueError(f"cost_envs.multiagent: env_kwargs: expected a mapping of "
                         f"{MULTIAGENT_ENV_IDS[env_id]}'s arguments, got {env_kwargs!r:.80}")
    return MultiTenantEnv(MULTIAGENT_ENV_IDS[env_id], **kwargs)


def env(env_id: str = "cost_envs/MultiTenantToolBench-v0", **kwargs: Any) -> Any:
    """The AEC form of :func:`parallel_env` (PettingZoo's ``parallel_to_aec``).

    Raises:
        ImportError: Without PettingZoo, naming ``pip install 'cost-envs[multiagent]'``.
    """
    conversions = import_extra("pettingzoo.utils.conversions", "multiagent",
                               "the AEC form of a multi-tenant env")
    return conversions.parallel_to_aec(parallel_env(env_id, **kwargs))
