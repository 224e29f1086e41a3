"""Native batched envs against SyncVectorEnv over single envs: bit for bit, for every id.

Generated from the registry: every id and wrapper combination (no budget, a budget per
sub-env that masks, one that truncates) under each autoreset mode. Ids without a batched
implementation are skipped, saying so, and still vectorise through ``SyncVectorEnv``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import ENV_IDS
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import cost_envs
from cost_envs.envs.flight_planner import SKILLS, flight_planner_pool
from cost_envs.pool import AgentPool, AgentSpec
from cost_envs.registration import VECTOR_IDS
from cost_envs.vector import BatchedOrchestrationEnv, VectorHardBudget

N = 6
#: Most steps a comparison runs; it stops once every sub-env has drawn a second task block.
MAX_STEPS = 4000
#: Budgets per sub-env: some cut almost every episode, some never bind.
BUDGETS = [0.0, 0.004, 0.015, 0.04, 0.1, 10.0]
WRAPPERS = {"none": None, "mask": "mask", "truncate": "truncate"}
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]


def needs_vector(env_id: str) -> None:
    if env_id not in VECTOR_IDS:
        pytest.skip(f"{env_id}: no native batched implementation yet (gym.make_vec uses "
                    "SyncVectorEnv for it); see cost_envs.registration.VECTOR_IDS")


def assert_identical(ours: Any, theirs: Any, where: str) -> None:
    """Equal values, types and dtypes, recursively (NaN-free data)."""
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_identical(a, b, f"{where}[{i}]")
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert sorted(ours) == sorted(theirs), f"{where}: keys {sorted(ours)} != {sorted(theirs)}"
        for key in theirs:
            assert_identical(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), where
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (
            f"{where}: {ours.dtype}{ours.shape} != {theirs.dtype}{theirs.shape}")
        if theirs.dtype == object:
            for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
                assert_identical(a, b, f"{where}[{i}]")
        else:
            assert np.array_equal(ours, theirs), f"{where}: {ours} != {theirs}"
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{where}: {ours!r} != {theirs!r}"


def actions(rng: np.random.Generator, m: int) -> np.ndarray:
    """Random actions, with some all-zero rows (answer now / commit / default model)."""
    a = rng.integers(0, 2, (N, m)).astype(np.int8)
    a[rng.random(N) < 0.1] = 0
    return a


def pair(env_id: str, wrapper: str, mode: AutoresetMode,
         **kwargs: Any) -> tuple[Any, Any]:
    """The batched env and SyncVectorEnv over N single envs, the same budgets each."""
    on_exceed = WRAPPERS[wrapper]
    budget = {} if on_exceed is None else {"on_exceed": on_exceed}

    def single(i: int) -> Any:
        return lambda: gym.make(env_id, **kwargs, **({} if not budget else {
            **budget, "budget": BUDGETS[i]}))

    sync = SyncVectorEnv([single(i) for i in range(N)], autoreset_mode=mode)
    native = gym.make_vec(env_id, num_envs=N, vectorization_mode="vector_entry_point",
                          autoreset_mode=mode, **kwargs, **({} if not budget else {
                              **budget, "budget": np.array(BUDGETS)}))
    return native, sync


#: Four experts trusted as much as the controller: votes tie (every tie-breaking rule runs).
TIED_EXPERTS = [{"name": name, "skill": skill, "sharpness": 6.0, "trust": 1.0,
                 "output_tokens": 400.0}
                for name, skill in (("gpt-4.1-nano", 0.4), ("gpt-4.1", 0.5), ("o3", 0.6),
                                    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 0.45))]

def flight_pool(roles: str) -> AgentPool:
    """A FlightPlanner pool of the preset's agents by role letter (p, s, v), cycling each
    role's agents, each copy a little dearer and weaker."""
    preset = {"p": [], "s": [], "v": []}
    for agent in flight_planner_pool().agents:
        preset[agent.role[0]].append(agent)
    agents = []
    for k, letter in enumerate(roles):
        a = preset[letter][k % len(preset[letter])]
        agents.append(AgentSpec(f"{a.name}_{k}", a.role, a.cost * (1 + k / 10), a.flops,
                                tuple(c * (1 - k / 40) for c in a.capability)))
    return AgentPool(tuple(agents), SKILLS)


#: FlightPlanner's batched step reads its outcomes by call set from per-task tables when
#: no role has more than 6 agents, else from the luck: pools of both kinds, without
#: validators, one agent a role.
FLIGHT_POOLS = [{"pool": flight_pool("psss")}, {"pool": flight_pool("psv")},
                {"pool": flight_pool("ppsssssssv")}]

#: Arguments other than the defaults, compared too (other pools, profiles, thresholds).
VARIANTS = {
    "cost_envs/FlightPlanner-v0": FLIGHT_POOLS,
    "cost_envs/FlightPlanner-v1": FLIGHT_POOLS,
    "cost_envs/ToolBench-v0": [{"pool_size": 12}, {"pool_size": 3, "f1_threshold": 0.3}],
    "cost_envs/AgenticRouting-v0": [{"profile": "sciworld"}, {"profile": "appworld"}],
    "cost_envs/ExpertRouting-v0": [{"profile": "aime", "max_rounds": 5},
                                   {"profile": "gsm8k", "max_rounds": 1},
                                   {"experts": ["o3", "gpt-4.1-nano"]},
                                   {"experts": TIED_EXPERTS}],
    "cost_envs/ExpertRouting-v1": [{"profile": "math500", "max_rounds": 4},
                                   {"experts": TIED_EXPERTS}],
    "cost_envs/TraceRouting-v0": [{"cascade": True}, {"split": "test", "cascade": True},
                                  {"models": ["o3", "gpt-4.1-nano"], "split": "train"}],
}


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_trajectories_as_sync_vector_env(env_id: str, wrapper: str,
                                              mode: AutoresetMode) -> None:
    needs_vector(env_id)
    compare(*pair(env_id, wrapper, mode), mode, wrapper)


def test_flight_pools_take_both_outcome_paths() -> None:
    tabled = [gym.make_vec("cost_envs/FlightPlanner-v0", num_envs=2, **kwargs,
                           vectorization_mode="vector_entry_point").unwrapped._tabled
              for kwargs in FLIGHT_POOLS]
    assert tabled == [True, True, False]


@pytest.mark.parametrize("env_id", sorted(VARIANTS))
def test_same_trajectories_with_other_arguments(env_id: str) -> None:
    assert env_id in VECTOR_IDS
    for kwargs in VARIANTS[env_id]:
        compare(*pair(env_id, "mask", AutoresetMode.NEXT_STEP, **kwargs),
                AutoresetMode.NEXT_STEP, "mask")


def compare(native: Any, sync: Any, mode: AutoresetMode, wrapper: str) -> None:
    """Step both with the same random actions until every sub-env drew a second block."""
    assert native.metadata["autoreset_mode"] == mode
    m = native.single_action_space.n
    rng = np.random.default_rng(7)
    assert_identical(native.reset(seed=11), sync.reset(seed=11), "reset")
    # every sub-env must finish a block of tasks and start on the next (a second draw
    # from its generator), counting from the re-seed at step 100
    block = native.unwrapped.task_block
    ends = np.zeros(N, dtype=int)
    for t in range(MAX_STEPS):
        a = actions(rng, m)
        ours, theirs = native.step(a), sync.step(a)
        assert_identical(ours, theirs, f"step {t}")
        ends += theirs[2] | theirs[3]
        if t == 100:  # re-seed some sub-envs mid-run, leave the others running
            seeds = [None, 5, None, 99, None, 3]
            assert_identical(native.reset(seed=seeds), sync.reset(seed=seeds), "re-seed")
            ends[:] = 0
        if t > 100 and ends.min() > block + 1:
            break
    assert ends.min() > block + 1, f"only {ends.min()} episodes in some sub-env"
    if wrapper != "none":
        assert_identical(native.action_masks(),
                         np.stack(sync.call("action_masks")), "action_masks")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_disabled_autoreset_resets_by_mask(env_id: str) -> None:
    needs_vector(env_id)
    native, sync = pair(env_id, "mask", AutoresetMode.DISABLED)
    rng = np.random.default_rng(3)
    assert_identical(native.reset(seed=0), sync.reset(seed=0), "reset")
    for t in range(60):
        a = actions(rng, native.single_action_space.n)
        ours = native.step(a)
        assert_identical(ours, sync.step(a), f"step {t}")
        done = ours[2] | ours[3]
        if done.any():
            with pytest.raises(ResetNeeded, match="reset_mask"):
                native.step(a)
            options = {"reset_mask": done}
            assert_identical(native.reset(options=dict(options)),
                             sync.reset(options=dict(options)), f"reset {t}")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_vec_default_mode(env_id: str) -> None:
    """The default mode is the batched env where there is one, SyncVectorEnv elsewhere."""
    env = gym.make_vec(env_id, num_envs=2)
    expected = BatchedOrchestrationEnv if env_id in VECTOR_IDS else SyncVectorEnv
    assert isinstance(env.unwrapped, expected)
    env.reset(seed=0)
    obs, *_ = env.step(np.zeros((2, env.single_action_space.n), dtype=np.int8))
    assert obs.shape == (2, *env.single_observation_space.shape)
    env.close()


def test_vector_ids_are_registered_ids() -> None:
    assert set(VECTOR_IDS) <= set(cost_envs.ENV_IDS)
    for env_id in VECTOR_IDS:
        assert gym.spec(env_id).vector_entry_point is not None


@pytest.fixture
def toolbench() -> BatchedOrchestrationEnv:
    return gym.make_vec("cost_envs/ToolBench-v0", num_envs=3,
                        vectorization_mode="vector_entry_point")


def test_bad_actions_name_the_space(toolbench) -> None:
    toolbench.reset(seed=0)
    for bad in (np.ones((3, 7)), np.full((3, 8), 2), np.ones(8), [[0.5] * 8] * 3):
        with pytest.raises(ValueError, match=r"MultiBinary\(\(3, 8\)\)"):
            toolbench.step(bad)
    toolbench.step(np.ones((3, 8), dtype=np.float32))  # SB3's 0.0/1.0 floats are fine


def test_bad_arguments_are_one_line_errors() -> None:
    make = gym.make_vec
    with pytest.raises(ValueError, match="num_envs"):
        make("cost_envs/ToolBench-v0", num_envs=0, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="autoreset_mode"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="f1_threshold"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", f1_threshold=2.0)
    with pytest.raises(ValueError, match="on_exceed"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", on_exceed="mask")
    with pytest.raises(ValueError, match="on_exceed"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", budget=1.0, on_exceed="x")
    with pytest.raises(ValueError, match="one per sub-env"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", budget=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="budget"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", budget=[1.0, -1.0])
    with pytest.raises(ValueError, match="render_mode='ansi' is not supported"):
        make("cost_envs/ToolBench-v0", 2, "vector_entry_point", render_mode="ansi")
    env = make("cost_envs/ToolBench-v0", 2, "vector_entry_point")
    with pytest.raises(ResetNeeded):
        env.step(np.zeros((2, 8)))
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"task": None})
    with pytest.raises(TypeError, match="BatchedOrchestrationEnv"):
        VectorHardBudget(gym.make_vec("cost_envs/ToolBench-v0", 2, "sync"), 1.0)


def test_budget_follows_set_budget_per_sub_env() -> None:
    env = gym.make_vec("cost_envs/ToolBench-v0", num_envs=2,
                       vectorization_mode="vector_entry_point", budget=0.0,
                       on_exceed="truncate", autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    env.set_budget([0.0, 5.0])
    assert env.budget.tolist() == [0.0, 0.0]  # from each sub-env's next reset on
    _, _, _, truncated, info = env.step(np.ones((2, 8)))
    assert truncated.all() and info["final_info"]["budget_exceeded"].all()
    assert env.budget.tolist() == [0.0, 5.0]
    assert env.action_masks()[0, 1::2].sum() == 0 and env.action_masks()[1].all()
    _, _, _, truncated, info = env.step(np.ones((2, 8)))
    assert truncated.tolist() == [True, False] and info["cost"][1] > 0
    assert env.remaining_budget[1] == 5.0 - info["cost"][1]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_trace_routing_cascade_in_every_mode(wrapper: str, mode: AutoresetMode) -> None:
    """The cascade's two-step episodes (escalate or accept) under every wrapper and mode."""
    compare(*pair("cost_envs/TraceRouting-v0", wrapper, mode, cascade=True), mode, wrapper)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_toolbench_cleared_difficulties_in_every_mode(wrapper: str, mode: AutoresetMode) -> None:
    """The option's extra slots (the difficulties of cleared stages, issue #38) bit for bit."""
    native, sync = pair("cost_envs/ToolBench-v0", wrapper, mode, cleared_difficulties=True)
    assert native.single_observation_space.shape == (21,)
    compare(native, sync, mode, wrapper)
