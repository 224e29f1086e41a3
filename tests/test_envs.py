"""Contract tests generated from the registry: every registered env keeps DESIGN.md's contracts."""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import pickle
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    ENV_IDS,
    Trajectory,
    assert_same_trajectory,
    finish_episode,
    make,
    play_episode,
    random_actions,
    run_episodes,
)
from gymnasium.envs.registration import load_env_creator
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import cost_envs

FINAL_KEYS = {"success", "is_success", "quality", "episode_cost", "episode_flops"}


def n_agents(env: gym.Env) -> int:
    return int(env.action_space.n)


def past_task_block(env: gym.Env) -> int:
    """Episodes enough to make the env draw a second block of tasks from ``np_random``.

    Tasks are drawn in blocks at reset, so a bug in how ``np_random`` is seeded, copied or
    disturbed only shows in the episodes after the first block.
    """
    return getattr(env.unwrapped, "task_block", 64) + 2


def rng_state(env: gym.Env) -> dict[str, Any]:
    return env.unwrapped.np_random.bit_generator.state


def relevant(record: list[warnings.WarningMessage]) -> list[str]:
    """Warnings that concern our envs.

    Deprecations raised inside third-party libraries (numpy, torch, SB3 internals) are not
    about the env under test and would make this test fail on unrelated upgrades; every
    other warning the checkers emit is a finding about the env.
    """
    return [
        f"{w.category.__name__} ({w.filename}:{w.lineno}): {w.message}"
        for w in record
        if "cost_envs" in w.filename
        or not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))
    ]


# ----------------------------------------------------------------------------- checkers
def test_ids_are_namespaced_and_versioned(env_id: str) -> None:
    assert re.fullmatch(r"cost_envs/[A-Z][A-Za-z0-9]*-v\d+", env_id)
    # the entry point is the id's factory (budgets as a gym.make argument), building the
    # env class ENV_IDS names
    factory = load_env_creator(gym.spec(env_id).entry_point)
    assert factory.env_class is load_env_creator(cost_envs.ENV_IDS[env_id])
    assert type(gym.make(env_id).unwrapped) is factory.env_class


def test_gymnasium_check_env(env_id: str) -> None:
    env = make(env_id)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        # Gymnasium's checker wants the bare env (it warns when given gym.make's wrappers)
        gym_check_env(env.unwrapped)
    assert relevant(record) == []


def test_sb3_check_env(env_id: str) -> None:
    env = make(env_id)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sb3_check_env(env, warn=True)
    assert relevant(record) == []


# -------------------------------------------------------------------------- determinism
def test_same_seed_same_episodes(env_id: str) -> None:
    a, b = make(env_id), make(env_id)
    m = n_agents(a)
    episodes = past_task_block(a)
    first = run_episodes(a, random_actions(m, seed=1), episodes=episodes, seed=123)
    second = run_episodes(b, random_actions(m, seed=1), episodes=episodes, seed=123)
    assert_same_trajectory(first, second)


def test_different_seeds_give_different_tasks(env_id: str) -> None:
    # guards the determinism test against passing trivially (e.g. a constant env)
    a, b = make(env_id), make(env_id)
    m = n_agents(a)
    first = run_episodes(a, random_actions(m, seed=1), episodes=6, seed=1)
    second = run_episodes(b, random_actions(m, seed=1), episodes=6, seed=2)
    with pytest.raises(AssertionError):
        assert_same_trajectory(first, second)


def start_mid_episode(env: gym.Env, seed: int) -> np.ndarray:
    """Reset and take one call-everything step that does not end the episode."""
    m = n_agents(env)
    for attempt in range(20):
        env.reset(seed=seed + attempt)
        obs, _, terminated, truncated, _ = env.step(np.ones(m, dtype=np.int8))
        if not (terminated or truncated):
            return obs
    raise AssertionError("every episode ended after one step; cannot test mid-episode copies")


#: Arguments that give episodes longer than one step, where the default has none.
#: Structural: a TraceRouting-v0 episode is one routing decision unless the cascade is on.
MULTI_STEP_KWARGS: dict[str, dict[str, Any]] = {"cost_envs/TraceRouting-v0": {"cascade": True}}


@pytest.mark.parametrize(
    "clone",
    [lambda env: pickle.loads(pickle.dumps(env)), copy.deepcopy],
    ids=["pickle", "deepcopy"],
)
def test_copy_mid_episode_continues_identically(
    env_id: str, clone: Callable[[gym.Env], gym.Env]
) -> None:
    env = make(env_id, **MULTI_STEP_KWARGS.get(env_id, {}))
    obs = start_mid_episode(env, seed=5)
    twin = clone(env)
    m = n_agents(env)
    trajs = []
    for e in (env, twin):
        actions = random_actions(m, seed=9)
        traj = Trajectory()
        finish_episode(e, actions, traj, obs)
        # later episodes check the task stream (queue and np_random) was copied too
        trajs.append(run_episodes(e, actions, episodes=past_task_block(e), traj=traj))
    assert_same_trajectory(*trajs)


# -------------------------------------------------------------------------- info contract
def test_info_contract(env_id: str) -> None:
    env = make(env_id)
    base = env.unwrapped
    weights = base.reward_weights
    m = n_agents(env)
    actions = random_actions(m, seed=3)
    for episode in range(25):
        env.reset(seed=77 if episode == 0 else None)
        step_costs: list[float] = []
        step_flops: list[float] = []
        done = False
        while not done:
            action = next(actions)
            _, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            assert type(info["cost"]) is float and info["cost"] >= 0
            assert type(info["flops"]) is float and info["flops"] >= 0
            # The episode's prices (the pool's, or the task's where calls are priced by tokens)
            expected_cost = base.step_cost + float(base.call_costs @ action)
            assert info["cost"] == pytest.approx(expected_cost, rel=1e-12)
            expected_flops = base.step_flops + float(base.call_flops @ action)
            assert info["flops"] == pytest.approx(expected_flops, rel=1e-12)
            calls = info["calls"]
            assert isinstance(calls, np.ndarray) and calls.dtype == np.int8
            assert calls.shape == (m,)
            np.testing.assert_array_equal(calls, action)
            step_costs.append(info["cost"])
            step_flops.append(info["flops"])
            if not done:
                # evaluators count episodes by these keys: they belong to the last step only
                assert FINAL_KEYS.isdisjoint(info), sorted(FINAL_KEYS & set(info))
                expected = weights(False, 0.0, info["cost"], int(action.sum()))
            else:
                assert type(info["success"]) is bool
                assert info["is_success"] is info["success"]  # SB3's success logging key
                assert type(info["quality"]) is float and 0.0 <= info["quality"] <= 10.0
                assert info["episode_cost"] == pytest.approx(math.fsum(step_costs), rel=1e-12)
                assert info["episode_flops"] == pytest.approx(math.fsum(step_flops), rel=1e-12)
                expected = weights(info["success"], info["quality"], info["cost"],
                                   int(action.sum()))
            # Eq. 1 is computed from exactly what info reports
            assert reward == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_returned_objects_are_fresh(env_id: str) -> None:
    env = make(env_id)
    m = n_agents(env)
    actions = random_actions(m, seed=4)
    previous: tuple[np.ndarray, dict[str, Any]] | None = None
    for episode in range(5):
        obs, info = env.reset(seed=11 if episode == 0 else None)
        previous = (obs, info) if previous is None else previous
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(next(actions))
            done = terminated or truncated
            old_obs, old_info = previous
            assert obs is not old_obs and not np.shares_memory(obs, old_obs)
            assert info is not old_info
            if "calls" in old_info:
                assert info["calls"] is not old_info["calls"]
                assert not np.shares_memory(info["calls"], old_info["calls"])
            previous = (obs, info)


def vandalize(obs: np.ndarray, info: dict[str, Any]) -> None:
    """Scribble over everything the env handed out, as careless user code might."""
    if obs.flags.writeable:
        obs.fill(0.123)
    for value in info.values():
        if isinstance(value, np.ndarray) and value.flags.writeable:
            value.fill(1)
    info.clear()
    info["junk"] = object()


def test_mutating_returned_data_does_not_change_env(env_id: str) -> None:
    clean, dirty = make(env_id), make(env_id)
    m = n_agents(clean)
    expected = run_episodes(clean, random_actions(m, seed=6), episodes=5, seed=21)

    got = Trajectory()
    actions = random_actions(m, seed=6)
    for episode in range(5):
        obs, info = dirty.reset(seed=21 if episode == 0 else None)
        got.record_reset(obs, info)
        vandalize(obs, info)
        done = False
        while not done:
            result = dirty.step(next(actions))
            got.record_step(result)
            vandalize(result[0], result[4])
            done = result[2] or result[3]
    assert_same_trajectory(expected, got)


def test_observations_lie_in_observation_space(env_id: str) -> None:
    env = make(env_id)
    space = env.observation_space
    actions = random_actions(n_agents(env), seed=8)
    traj = run_episodes(env, actions, episodes=40, seed=8)
    for obs, _ in traj.resets:
        assert obs in space, obs
    for obs, *_ in traj.steps:
        assert obs in space, obs


# --------------------------------------------------------------------------- reset options
def test_reset_task_option_replays_the_task(env_id: str) -> None:
    env = make(env_id)
    m = n_agents(env)
    actions = random_actions(m, seed=12)
    episodes = []
    for episode in range(4):
        traj, taken = play_episode(env, actions, seed=31 if episode == 0 else None)
        episodes.append((env.unwrapped.task, traj, taken))

    other = make(env_id)
    other.reset(seed=999)  # a different task stream must not matter for a replay
    for task, traj, taken in reversed(episodes):
        for replayer in (env, other):
            replay, _ = play_episode(replayer, iter(taken), options={"task": task})
            assert_same_trajectory(traj, replay)


def test_unknown_reset_option_raises(env_id: str) -> None:
    env = make(env_id)
    with pytest.raises(ValueError, match="bogus"):
        env.reset(options={"bogus": 1})


def test_reset_task_option_rejects_a_non_task(env_id: str) -> None:
    env = make(env_id)
    with pytest.raises(ValueError, match="task"):
        env.reset(options={"task": "not a task"})


# ----------------------------------------------------------------------- privileged hooks
def test_oracle_hooks_have_no_side_effects(env_id: str) -> None:
    def consult_oracle(env: gym.Env, obs: np.ndarray) -> None:
        before = obs.copy()
        action = env.unwrapped.oracle_action()
        env.unwrapped.oracle_plan()
        assert action in env.action_space
        np.testing.assert_array_equal(obs, before)

    plain, peeking = make(env_id), make(env_id)
    m = n_agents(plain)
    episodes = past_task_block(plain)
    expected = run_episodes(plain, random_actions(m, seed=13), episodes=episodes, seed=41)
    got = run_episodes(
        peeking, random_actions(m, seed=13), episodes, seed=41, before_step=consult_oracle
    )
    assert_same_trajectory(expected, got)
    assert rng_state(plain) == rng_state(peeking)


# ------------------------------------------------------------------------ episode order
def test_step_before_reset_raises(env_id: str) -> None:
    env = make(env_id)
    action = np.zeros(n_agents(env), dtype=np.int8)
    with pytest.raises(ResetNeeded):
        env.unwrapped.step(action)  # the env itself, not only gym.make's OrderEnforcing
    with pytest.raises(ResetNeeded):
        env.step(action)


def test_step_after_episode_end_raises(env_id: str) -> None:
    env = make(env_id).unwrapped
    run_episodes(env, random_actions(n_agents(env), seed=14), episodes=1, seed=0)
    with pytest.raises(ResetNeeded):
        env.step(np.zeros(n_agents(env), dtype=np.int8))


# -------------------------------------------------------------------------------- actions
def _bad_actions(m: int) -> dict[str, Any]:
    ones = np.ones(m, dtype=np.int8)
    with_value = lambda v, dtype: np.where(np.arange(m) == 0, v, 0).astype(dtype)  # noqa: E731
    return {
        "shape m-1": np.zeros(m - 1, dtype=np.int8),
        "shape m+1": np.zeros(m + 1, dtype=np.int8),
        "shape (1, m)": ones[None, :],
        "scalar": np.int8(1),
        "value 2 int8": with_value(2, np.int8),
        "value 2 int64": with_value(2, np.int64),
        "value 2 list": with_value(2, np.int64).tolist(),
        "value -1 int8": with_value(-1, np.int8),
        "value -1 list": with_value(-1, np.int64).tolist(),
        "value 255 uint8": with_value(255, np.uint8),
        "value 0.5": with_value(0.5, np.float32),
        "nan": with_value(np.nan, np.float64),
        "inf": with_value(np.inf, np.float32),
        "string": "1" * m,
        "string array": np.array(["1"] * m),
        "none": None,
        "list with none": [None] * m,
        "ragged list": [[0, 1], [0]],
    }


BAD_ACTION_NAMES = sorted(_bad_actions(2))


@pytest.mark.parametrize("case", BAD_ACTION_NAMES)
def test_malformed_action_raises_value_error(env_id: str, case: str) -> None:
    env = make(env_id)
    env.reset(seed=0)
    m = n_agents(env)
    with pytest.raises(ValueError) as excinfo:
        env.step(_bad_actions(m)[case])
    message = str(excinfo.value)
    assert f"MultiBinary({m})" in message
    assert env_id in message


def test_rejected_action_leaves_the_episode_untouched(env_id: str) -> None:
    clean, poked = make(env_id), make(env_id)
    m = n_agents(clean)
    expected = run_episodes(clean, random_actions(m, seed=15), episodes=3, seed=51)

    def poke(env: gym.Env, obs: np.ndarray) -> None:
        for action in _bad_actions(m).values():
            with pytest.raises(ValueError):
                env.step(action)

    got = run_episodes(poked, random_actions(m, seed=15), episodes=3, seed=51, before_step=poke)
    assert_same_trajectory(expected, got)


ACCEPTED_FORMS: dict[str, Callable[[np.ndarray], Any]] = {
    "float32 (SB3)": lambda a: a.astype(np.float32),
    "float64": lambda a: a.astype(np.float64),
    "int64": lambda a: a.astype(np.int64),
    "uint8": lambda a: a.astype(np.uint8),
    "bool": lambda a: a.astype(bool),
    "list of ints": lambda a: a.astype(int).tolist(),
}


@pytest.mark.parametrize("form", sorted(ACCEPTED_FORMS))
def test_equivalent_action_forms_give_the_int8_trajectory(env_id: str, form: str) -> None:
    reference, other = make(env_id), make(env_id)
    m = n_agents(reference)
    expected = run_episodes(reference, random_actions(m, seed=16), episodes=5, seed=61)
    converted = (ACCEPTED_FORMS[form](a) for a in random_actions(m, seed=16))
    got = run_episodes(other, converted, episodes=5, seed=61)
    assert_same_trajectory(expected, got)


# ---------------------------------------------------------------------- packaging / registry
def run_python(code: str, cwd: Any) -> None:
    # cwd away from the repo so the installed package is what gets imported
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


#: Forks a child per id from a process that imported Gymnasium and not cost_envs: each
#: child makes its id as a fresh process would (cost_envs imported and registered by
#: ``gym.make("cost_envs:ID")`` itself), without a new interpreter's start each.
FRESH = """
import json, os, sys, traceback
import gymnasium as gym
assert "cost_envs" not in sys.modules
out = {}
for env_id in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        try:
            env = gym.make(f"cost_envs:{env_id}")
            env.reset(seed=0)
            env.step(env.action_space.sample())
            said = "made, reset and stepped"
        except BaseException:
            said = traceback.format_exc()
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out[env_id] = pipe.read().decode()
    _, status = os.wait()
    if status:
        out[env_id] += f" (the child ended with wait status {status})"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def made_in_fresh_processes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each id's ``gym.make("cost_envs:ID")``, reset and step in a fresh process: what
    each said ("made, reset and stepped", or its traceback)."""
    # cwd away from the repo so the installed package is what gets imported
    result = subprocess.run([sys.executable, "-c", FRESH, *ENV_IDS], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path_factory.mktemp("fresh"))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fresh processes are forked")
def test_make_in_fresh_process(env_id: str, made_in_fresh_processes: dict[str, str]) -> None:
    assert made_in_fresh_processes[env_id] == "made, reset and stepped"


# Slow tier (issue #36): in the fast tier tests/test_imports.py imports every module of
# cost_envs in a fresh process and finds no torch (test_cost_envs_modules_load_no_torch).
@pytest.mark.slow
def test_import_does_not_import_torch(tmp_path: Any) -> None:
    run_python(
        "import sys, cost_envs\n"
        "assert 'torch' not in sys.modules, 'cost_envs imported torch'\n",
        tmp_path,
    )


def test_registration_is_idempotent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-registering would warn "Overriding environment"
        importlib.reload(cost_envs)
        importlib.reload(cost_envs)
    for env_id in ENV_IDS:
        assert env_id in gym.registry
        make(env_id).reset(seed=0)


def _smaller_pool_kwargs(env_id: str, source: cost_envs.OrchestrationEnv) -> dict:
    """Arguments that make the same env with fewer agents (each env names them its way)."""
    if "ToolBench" in env_id:
        return {"pool_size": 4}
    if "ExpertRouting" in env_id:
        return {"experts": [e.name for e in source.experts[::2]]}
    if "TraceRouting" in env_id:
        return {"models": list(source.pool.names[::2])}
    return {"pool": cost_envs.AgentPool(source.pool.agents[::2], source.pool.skills)}


def test_replaying_a_task_on_a_pool_of_another_size_is_refused(env_id: str) -> None:
    if "AgenticRouting" in env_id:
        # Structural: its pool is always the one large model (MultiBinary(1), small = 0);
        # replaying a task on an env of another profile is refused instead (tested in
        # tests/test_agentic_routing.py).
        pytest.skip("AgenticRouting-v0 has no pool of another size")
    source = make(env_id).unwrapped
    source.reset(seed=0)
    task = source.task
    other = make(env_id, **_smaller_pool_kwargs(env_id, source))
    with pytest.raises(ValueError, match=f"drawn for {source.n_agents} agents"):
        other.reset(options={"task": task})


def test_task_prices_must_be_finite_and_non_negative() -> None:
    from cost_envs.core import Prices

    env = make("cost_envs/ExpertRouting-v0").unwrapped
    env.reset(seed=0)
    for bad in (Prices(np.array([np.nan, 1.0, 1.0]), np.zeros(3)),
                Prices(np.array([1.0, -1.0, 1.0]), np.zeros(3)),
                Prices(np.ones(3), np.zeros(3), step_cost=-5.0)):
        with pytest.raises(ValueError, match="must be finite and >= 0"):
            env._set_prices(bad)
