"""Batched envs on pools above ``MAX_ORACLE_AGENTS`` agents, against ``SyncVectorEnv``.

Up to 16 agents the batched step codes each joint action as an int (prices, call counts,
FlightPlanner's roles are looked up by code); above, it prices agent by agent and tests
roles row by row. This runs the second path, bit for bit as ``tests/test_vector.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from test_vector import compare, pair

from cost_envs.core import MAX_ORACLE_AGENTS
from cost_envs.envs.flight_planner import SKILLS, flight_planner_pool
from cost_envs.pool import AgentPool, AgentSpec


def large_pool() -> AgentPool:
    """The preset pool three times over (18 agents), each copy a little dearer."""
    agents = tuple(AgentSpec(f"{a.name}_{k}", a.role, a.cost * (1 + k / 10), a.flops,
                             a.capability)
                   for k in range(3) for a in flight_planner_pool().agents)
    return AgentPool(agents, SKILLS)


@pytest.mark.parametrize("wrapper", ["none", "mask"])
@pytest.mark.parametrize("env_id", ["cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1"])
def test_flight_planner_above_the_code_limit(env_id: str, wrapper: str) -> None:
    pool = large_pool()
    assert len(pool.agents) > MAX_ORACLE_AGENTS
    native, sync = pair(env_id, wrapper, AutoresetMode.NEXT_STEP, pool=pool)
    assert native.unwrapped._bits is None  # the path without action codes
    compare(native, sync, AutoresetMode.NEXT_STEP, wrapper)


def test_action_codes_above_the_code_limit_say_why() -> None:
    # A ValueError naming the limit (it was a TypeError from `@ None`).
    native, _ = pair("cost_envs/FlightPlanner-v0", "none", AutoresetMode.NEXT_STEP,
                     pool=large_pool())
    with pytest.raises(ValueError, match=f"at most {MAX_ORACLE_AGENTS} agents, got 18"):
        native.unwrapped.action_codes(np.zeros((1, 18), dtype=np.int8))
