"""The multi-tenant ParallelEnv: PettingZoo's API tests, determinism, copies, bad actions,
and the shared limits (capacity, organisation budget, surge prices) never exceeded."""

from __future__ import annotations

import copy
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pettingzoo")

from pettingzoo.test import api_test, parallel_api_test

from cost_envs.multiagent import (
    MULTIAGENT_ENV_IDS,
    MultiTenantEnv,
    SharedLimits,
    env,
    jain_index,
    parallel_env,
    run_episode,
)

REPO = Path(__file__).resolve().parents[1]
TIGHT = {"capacity": 1, "org_budget": 0.05, "budget_window": 5, "price_slope": 1.0}


def _random_actions(env: MultiTenantEnv, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {a: rng.integers(0, 2, env.n_models, dtype=np.int8) for a in env.agents}


def _play(env: MultiTenantEnv, seed: int, action_seed: int, steps: int | None = None
          ) -> list[tuple]:
    rng = np.random.default_rng(action_seed)
    env.reset(seed=seed)
    return _continue(env, rng, steps)


def _continue(env: MultiTenantEnv, rng: np.random.Generator, steps: int | None = None
              ) -> list[tuple]:
    trace = []
    while env.agents and (steps is None or len(trace) < steps):
        obs, rew, term, trunc, info = env.step(_random_actions(env, rng))
        trace.append((obs, rew, term, trunc, info))
    return trace


def _same(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for (oa, ra, ta, ua, ia), (ob, rb, tb, ub, ib) in zip(a, b, strict=True):
        if ra != rb or ta != tb or ua != ub or oa.keys() != ob.keys():
            return False
        if any(not np.array_equal(oa[k], ob[k]) for k in oa):
            return False
        for k in ia:
            if ia[k].keys() != ib[k].keys():
                return False
            if any(not np.array_equal(ia[k][x], ib[k][x]) for x in ia[k]):
                return False
    return True


@pytest.mark.parametrize("env_id", sorted(MULTIAGENT_ENV_IDS))
def test_pettingzoo_parallel_api_test_passes(env_id: str) -> None:
    parallel_api_test(parallel_env(env_id, n_tenants=3, max_steps=40, **TIGHT), num_cycles=100)


def test_the_aec_form_passes_pettingzoo_api_test() -> None:
    api_test(env("cost_envs/MultiTenantExpertRouting-v0", n_tenants=2, max_steps=20, **TIGHT),
             num_cycles=50)


@pytest.mark.parametrize("env_id", sorted(MULTIAGENT_ENV_IDS))
def test_same_seed_and_actions_give_the_same_whole_episode(env_id: str) -> None:
    kwargs = {"n_tenants": 4, "max_steps": 60, **TIGHT}
    first = _play(parallel_env(env_id, **kwargs), seed=3, action_seed=9)
    again = _play(parallel_env(env_id, **kwargs), seed=3, action_seed=9)
    assert len(first) == 60 and _same(first, again)
    other = _play(parallel_env(env_id, **kwargs), seed=4, action_seed=9)
    assert not _same(first, other)


def test_a_tenant_sees_the_same_tasks_whatever_the_number_of_tenants() -> None:
    # Without shared limits, tenant_0's trajectory depends only on the seed and its actions.
    alone = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=1, capacity=None,
                         max_steps=30)
    crowd = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=5, capacity=None,
                         max_steps=30)
    alone.reset(seed=11)
    crowd.reset(seed=11)
    rng = np.random.default_rng(0)
    for _ in range(30):
        action = rng.integers(0, 2, alone.n_models, dtype=np.int8)
        obs_a, rew_a, *_ = alone.step({"tenant_0": action})
        obs_c, rew_c, *_ = crowd.step({a: action for a in crowd.agents})
        own = alone.observation_layout["own"]
        assert np.array_equal(obs_a["tenant_0"][own], obs_c["tenant_0"][own])
        assert rew_a["tenant_0"] == rew_c["tenant_0"]


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copy_mid_episode_continues_exactly_like_the_original(how: str) -> None:
    original = parallel_env("cost_envs/MultiTenantAgenticRouting-v0", n_tenants=3,
                            max_steps=50, **TIGHT)
    _play(original, seed=5, action_seed=1, steps=20)
    clone = pickle.loads(pickle.dumps(original)) if how == "pickle" else copy.deepcopy(original)
    rest = _continue(original, np.random.default_rng(7))
    rest_clone = _continue(clone, np.random.default_rng(7))
    assert len(rest) == 30 and _same(rest, rest_clone)


@pytest.mark.parametrize("bad", [np.array([0, 2, 0]), np.array([1, 0]), [0.5, 0, 1], "110",
                                 np.array([np.nan, 0, 0])])
def test_a_malformed_action_names_the_tenant_and_the_space(bad: object) -> None:
    par = parallel_env("cost_envs/MultiTenantExpertRouting-v0", n_tenants=3)
    par.reset(seed=0)
    actions = {a: np.zeros(3, dtype=np.int8) for a in par.agents}
    actions["tenant_1"] = bad
    with pytest.raises(ValueError, match=r"tenant 'tenant_1': invalid action .* "
                                         r"expected an element of MultiBinary\(3\)"):
        par.step(actions)


def test_missing_or_unknown_tenants_are_errors() -> None:
    par = parallel_env("cost_envs/MultiTenantExpertRouting-v0", n_tenants=2)
    par.reset(seed=0)
    zero = np.zeros(3, dtype=np.int8)
    with pytest.raises(ValueError, match=r"missing \['tenant_1'\]"):
        par.step({"tenant_0": zero})
    with pytest.raises(ValueError, match=r"unknown \['tenant_9'\]"):
        par.step({"tenant_0": zero, "tenant_1": zero, "tenant_9": zero})


@pytest.mark.parametrize("kwargs, match", [
    ({"n_tenants": 0}, r"n_tenants: expected an int >= 1, got 0"),
    ({"capacity": 0}, r"capacity .*expected an int >= 1, got 0"),
    ({"capacity": (1, 2)}, r"capacity has 2 entries, the pool has 8 models"),
    ({"org_budget": -1.0}, r"org_budget: expected a finite number >= 0"),
    ({"capacity": None, "price_slope": 0.5}, r"price_slope=0.5 needs a capacity"),
    ({"env_kwargs": {"n_agentz": 3}}, r"n_agentz"),
    ({"base": "cost_envs/ToolBench-v0"}, r"the id fixes the base env"),
])
def test_bad_arguments_are_one_line_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parallel_env("cost_envs/MultiTenantToolBench-v0", **kwargs)


def test_calls_beyond_capacity_wait_and_the_rotation_admits_the_other_tenant() -> None:
    par = parallel_env("cost_envs/MultiTenantAgenticRouting-v0", n_tenants=2, capacity=1,
                       max_steps=6)
    obs, _ = par.reset(seed=0)
    large = np.ones(1, dtype=np.int8)
    before = {a: obs[a][par.observation_layout["own"]].copy() for a in par.agents}
    obs, rewards, _, _, infos = par.step({a: large for a in par.agents})
    # step 0: tenant_0 first in the rotation gets the slot, tenant_1 waits
    assert not infos["tenant_0"]["waited"] and infos["tenant_1"]["waited"]
    assert infos["tenant_1"]["cost"] == 0.0 and rewards["tenant_1"] == 0.0
    assert infos["tenant_1"]["calls"].tolist() == [0]
    assert np.array_equal(obs["tenant_1"][par.observation_layout["own"]], before["tenant_1"])
    assert obs["tenant_1"][par.observation_layout["waited_last_step"]] == 1.0
    assert obs["tenant_0"][par.observation_layout["load"]].tolist() == [1.0]
    _, _, _, _, infos = par.step({a: large for a in par.agents})
    # step 1: the rotation starts at tenant_1
    assert infos["tenant_0"]["waited"] and not infos["tenant_1"]["waited"]


def test_a_task_s_final_info_counts_its_waits_and_its_spend() -> None:
    par = parallel_env("cost_envs/MultiTenantAgenticRouting-v0", n_tenants=3, capacity=1,
                       price_slope=0.5, max_steps=80)
    par.reset(seed=2)
    spent = dict.fromkeys(par.agents, 0.0)
    steps = dict.fromkeys(par.agents, 0)
    waits = dict.fromkeys(par.agents, 0)
    finished = 0
    large = np.ones(1, dtype=np.int8)
    while par.agents:
        _, _, _, _, infos = par.step({a: large for a in par.agents})
        for agent, info in infos.items():
            spent[agent] += info["cost"]
            steps[agent] += 1
            waits[agent] += info["waited"]
            assert {"cost", "flops", "calls", "waited", "surcharge"} <= set(info)
            if "task_steps" in info:
                assert {"success", "is_success", "quality", "episode_cost", "episode_flops",
                        "task_waits", "task_cut"} <= set(info)
                assert info["episode_cost"] == pytest.approx(spent[agent], rel=1e-12)
                assert (info["task_steps"], info["task_waits"]) == (steps[agent], waits[agent])
                finished += not info["task_cut"]
                spent[agent], steps[agent], waits[agent] = 0.0, 0, 0
    assert finished >= 3 and all(s == 0 for s in steps.values())  # the horizon cut the rest


def test_surge_prices_follow_the_previous_step_s_load() -> None:
    par = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=2, capacity=2,
                       price_slope=1.5, max_steps=5)
    par.reset(seed=0)
    base = par.tenant_envs["tenant_0"].call_costs[6]  # llm_large
    call = np.eye(8, dtype=np.int8)[6]
    _, _, _, _, infos = par.step({a: call for a in par.agents})
    assert infos["tenant_0"]["surcharge"] == 0.0  # no load before the first step
    _, _, _, _, infos = par.step({a: call for a in par.agents})
    assert infos["tenant_1"]["surcharge"] == pytest.approx(base * 1.5 * 1.0)
    assert infos["tenant_1"]["cost"] == pytest.approx(base * 2.5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), action_seed=st.integers(0, 2**16),
       capacity=st.integers(1, 3), budget=st.sampled_from([0.0, 0.01, 0.05, 0.3]),
       window=st.integers(1, 6), slope=st.sampled_from([0.0, 2.0]),
       env_id=st.sampled_from(sorted(MULTIAGENT_ENV_IDS)))
def test_capacity_and_the_org_budget_are_never_exceeded(
        seed: int, action_seed: int, capacity: int, budget: float, window: int, slope: float,
        env_id: str) -> None:
    par = parallel_env(env_id, n_tenants=5, capacity=capacity, org_budget=budget,
                       budget_window=window, price_slope=slope, max_steps=25)
    rng = np.random.default_rng(action_seed)
    par.reset(seed=seed)
    window_spend, step = 0.0, 0
    while par.agents:
        actions = _random_actions(par, rng)
        _, _, _, _, infos = par.step(actions)
        if step % window == 0:
            window_spend = 0.0
        ran = np.sum([infos[a]["calls"] for a in infos], axis=0)
        assert (ran <= capacity).all()
        window_spend += sum(info["cost"] for info in infos.values())
        assert window_spend <= budget + 1e-12
        for agent, info in infos.items():
            assert info["waited"] or np.array_equal(info["calls"], actions[agent])
        step += 1


def test_metrics_of_an_episode() -> None:
    assert jain_index([1, 1, 1]) == 1.0 and jain_index([1, 0, 0]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="jain_index"):
        jain_index([-1.0])
    par = parallel_env("cost_envs/MultiTenantAgenticRouting-v0", n_tenants=4, capacity=1,
                       max_steps=40)
    small = {a: np.zeros(1, dtype=np.int8) for a in par.possible_agents}
    free = run_episode(par, lambda obs: {a: small[a] for a in obs}, seed=0).metrics()
    large = {a: np.ones(1, dtype=np.int8) for a in par.possible_agents}
    jammed = run_episode(par, lambda obs: {a: large[a] for a in obs}, seed=0).metrics()
    # the all-small action never waits; always-large queues three of four tenants per step
    assert free["wait_share"] == 0.0 and jammed["wait_share"] == pytest.approx(0.75)
    assert jammed["throughput"] < free["throughput"]
    assert jammed["latency"] > free["latency"]


def test_the_parallel_env_needs_no_pettingzoo_and_the_aec_form_names_the_extra() -> None:
    code = ("import sys\n"
            "sys.modules['pettingzoo'] = None\n"
            "import numpy as np\n"
            "from cost_envs import multiagent\n"
            "par = multiagent.parallel_env(n_tenants=2)\n"
            "par.reset(seed=0)\n"
            "par.step({a: np.zeros(8, dtype=np.int8) for a in par.agents})\n"
            "try:\n"
            "    multiagent.env()\n"
            "except ImportError as err:\n"
            "    print(err)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    # (missing: pettingzoo.utils here, as sys.modules blocks the parent; pettingzoo when
    # it is not installed)
    assert re.fullmatch(r"the AEC form of a multi-tenant env needs the 'multiagent' extra "
                        r"\(missing: pettingzoo[\w.]*\): pip install 'cost-envs\[multiagent\]'",
                        result.stdout.strip())


def test_shared_limits_accept_one_capacity_per_model() -> None:
    limits = SharedLimits(capacity=[1, 2, 3])
    assert limits.capacities(3) == [1.0, 2.0, 3.0]
    par = MultiTenantEnv("cost_envs/ExpertRouting-v0", 2, capacity=(1, 1, 1))
    assert par.ledger.capacity == [1.0, 1.0, 1.0]


def test_the_package_docstring_example_runs() -> None:
    import doctest

    import cost_envs.multiagent

    result = doctest.testmod(cost_envs.multiagent, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_ansi_render_needs_a_reset_and_names_every_tenant() -> None:
    import gymnasium as gym

    par = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=2, render_mode="ansi")
    with pytest.raises(gym.error.ResetNeeded, match=r"reset\(\) before render\(\)"):
        par.render()
    par.reset(seed=0)
    par.step({a: np.zeros(par.n_models, dtype=np.int8) for a in par.agents})
    text = par.render()
    assert "step 1" in text and "tenant_0" in text and "tenant_1" in text
