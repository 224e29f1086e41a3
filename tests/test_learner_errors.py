"""Learner helpers given what they cannot work on refuse in one line naming it (issue #36).

Where a wrong input used to end in an ``AttributeError`` deep inside (found while making
the packages type-check), each now raises a ``ValueError`` saying what it expected.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import cost_envs  # noqa: F401  (registers the ids)


def test_tier_layout_refuses_an_env_that_is_not_a_tiered_cost_env() -> None:
    from agents.learners.corl import tier_layout

    with pytest.raises(ValueError, match=r"^tier_layout: expected a BudgetTier over a "
                                         r"cost-envs environment, got .* over CartPoleEnv$"):
        tier_layout(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match=r"^tier_layout: expected a BudgetTier observation"):
        tier_layout(gym.make("cost_envs/ExpertRouting-v1"))  # the env, no tier wrapper


def test_relative_costs_refuses_an_env_without_an_agent_pool() -> None:
    from agents.learners.supervised import relative_costs

    with pytest.raises(ValueError, match=r"^relative_costs: expected a cost-envs environment"
                                         r".*got CartPoleEnv$"):
        relative_costs(gym.make("CartPole-v1"))
    env = gym.make("cost_envs/ToolBench-v0")
    assert relative_costs(env).shape == (len(env.unwrapped.pool.names),)


def test_env_arguments_refuses_an_id_without_an_entry_point() -> None:
    from agents.learners.checkpoints import env_arguments

    # a vector-only id: Gymnasium registers it with no (single-env) entry point
    gym.register("cost_envs_test/NoEntry-v0", vector_entry_point="gymnasium.vector:SyncVectorEnv")
    try:
        with pytest.raises(ValueError, match=r"^cost_envs_test/NoEntry-v0: registered without "
                                             r"an entry point$"):
            env_arguments("cost_envs_test/NoEntry-v0")
    finally:
        gym.registry.pop("cost_envs_test/NoEntry-v0")
    assert "pool" in (env_arguments("cost_envs/ToolBench-v0") or ())


def test_synthesize_sft_data_refuses_mismatched_inputs_and_other_action_spaces() -> None:
    from agents.learners import bopo_sft

    with pytest.raises(ValueError, match=r"^synthesize_sft_data: expected one boundary per "
                                         r"task$"):
        bopo_sft.synthesize_sft_data(gym.make("CartPole-v1"), [object()], [])
    with pytest.raises(ValueError, match=r"^synthesize_sft_data: expected a flat MultiBinary "
                                         r"action space .*got Discrete\(2\)$"):
        bopo_sft.synthesize_sft_data(gym.make("CartPole-v1"), [], [])
