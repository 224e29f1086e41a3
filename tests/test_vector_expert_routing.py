"""The batched ExpertRouting vote against the single envs' ``_count_votes``, state by state.

``tests/test_vector.py`` compares whole trajectories; ties between pools of equal weight
(the controller's answer, then a wrong answer over the right one, then the lower index)
are rare there, so here every state of a four-expert pool with equal trusts is voted by
both, for every answer of the controller.
"""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from test_vector import TIED_EXPERTS

import cost_envs  # noqa: F401  (registers the ids)
from cost_envs.envs.expert_routing_v1 import NOT_CONSULTED, OTHER_WRONG, OWN_WRONG, RIGHT

EXPERTS = {"tied": TIED_EXPERTS, "default": None}


def batched(env_id: str, experts: list | None):
    kwargs = {} if experts is None else {"experts": experts}
    return gym.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point",
                        **kwargs).unwrapped


@pytest.mark.parametrize("experts", list(EXPERTS))
def test_v1_vote_is_the_single_envs_in_every_state(experts: str) -> None:
    env = batched("cost_envs/ExpertRouting-v1", EXPERTS[experts])
    single, m = env.single_env, env.n_agents
    # each expert: not consulted, right, a distractor or a wrong answer of its own
    choices = (NOT_CONSULTED, RIGHT, 1, 2, 3, OTHER_WRONG)
    states = np.array(list(itertools.product(choices, repeat=m)))
    states = np.where(states == OTHER_WRONG, OTHER_WRONG + np.arange(m), states)
    for own in (RIGHT, 1, 2, 3, OWN_WRONG):
        lead, weight, total = env._vote(states, np.full(len(states), own))
        single._controller_answer = own
        single._controller_right = own == RIGHT
        expected = [single._count_votes(tuple(s)) for s in states.tolist()]
        assert lead.tolist() == [e[1] for e in expected]
        assert weight.tolist() == [e[2] for e in expected]
        assert total.tolist() == [e[3] for e in expected]


@pytest.mark.parametrize("experts", list(EXPERTS))
def test_v0_vote_is_the_single_envs_in_every_state(experts: str) -> None:
    env = batched("cost_envs/ExpertRouting-v0", EXPERTS[experts])
    single, m = env.single_env, env.n_agents
    states = np.array(list(itertools.product((-1, 0, 1), repeat=m)))
    codes = np.where(states == 1, RIGHT, np.where(states == 0, OTHER_WRONG + np.arange(m),
                                                  NOT_CONSULTED))
    for right in (True, False):
        own = np.full(len(states), RIGHT if right else OWN_WRONG)
        lead, weight, total = env._vote(codes, own)
        single._controller_right = right
        expected = [single._count_votes(tuple(s)) for s in states.tolist()]
        assert (lead == RIGHT).tolist() == [e[0] for e in expected]
        # v0's leading wrong source: -1 the controller, i expert i
        wrong = [e[1] for e in expected if not e[0]]
        got = lead[lead != RIGHT]
        assert np.where(got == OWN_WRONG, -1, got - OTHER_WRONG).tolist() == wrong
        assert weight.tolist() == [e[2] for e in expected]
        assert total.tolist() == [e[3] for e in expected]


FIVE_EXPERTS = [*TIED_EXPERTS, {"name": "gpt-4-1106-preview", "skill": 0.7, "sharpness": 5.0,
                                "trust": 2.0, "output_tokens": 300.0}]


@pytest.mark.parametrize("env_id", ["cost_envs/ExpertRouting-v0", "cost_envs/ExpertRouting-v1"])
@pytest.mark.parametrize("experts", list(EXPERTS))
def test_tables_are_the_single_envs_slots_in_every_state(env_id: str, experts: str) -> None:
    """Each state number's vote outcome and slots are the single env's for that state."""
    env = batched(env_id, EXPERTS[experts])
    single, m, size = env.single_env, env.n_agents, env._alphabet
    assert env._slot_table is not None
    v1 = env_id.endswith("v1")
    for state in range(len(env._slot_table)):
        own_symbol, symbols = divmod(state, size**m)
        digits = [symbols // size**i % size for i in range(m)]
        codes = env._codes(np.array([digits]))[0].tolist()
        own = int(env._own_code_of[own_symbol])
        if v1:
            single._controller_answer = single._voter = own
            single_state = tuple(codes)
        else:  # v0's state: -1 not consulted, 0 wrong, 1 right
            single._controller_right = single._voter = own == RIGHT
            single_state = tuple(-1 if c == NOT_CONSULTED else int(c == RIGHT) for c in codes)
        single._votes.clear()
        slots = single._dynamic_slots(0, single_state)
        assert env._right_table[state] == single._count_votes(single_state)[0], state
        np.testing.assert_array_equal(env._slot_table[state], slots[1:], err_msg=str(state))


@pytest.mark.parametrize("env_id", ["cost_envs/ExpertRouting-v0", "cost_envs/ExpertRouting-v1"])
def test_pools_too_large_to_tabulate_vote_each_step(env_id: str, monkeypatch) -> None:
    """Without the tables (here forced) the step votes row by row, to the same bits."""
    from test_vector import compare, pair

    from cost_envs.vector import expert_routing

    monkeypatch.setattr(expert_routing, "MAX_VOTE_STATES", 0)
    for kwargs in ({}, {"experts": TIED_EXPERTS}):
        native, sync = pair(env_id, "mask", AutoresetMode.NEXT_STEP, **kwargs)
        assert native.unwrapped._slot_table is None
        compare(native, sync, AutoresetMode.NEXT_STEP, "mask")


def test_five_experts_v1_is_past_the_table_limit_and_still_exact() -> None:
    from test_vector import compare, pair

    native, sync = pair("cost_envs/ExpertRouting-v1", "none", AutoresetMode.SAME_STEP,
                        experts=FIVE_EXPERTS)
    assert native.unwrapped._slot_table is None  # 5 * 6**5 states
    compare(native, sync, AutoresetMode.SAME_STEP, "none")
