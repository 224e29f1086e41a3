"""The oracle is a true hindsight optimum: checked against brute force on small pools.

With 3 agents there are 8 joint actions per turn, so every action sequence of a short
episode can be enumerated by stepping deep copies of the env: an independent check that
uses nothing but the public ``step`` and ``info``.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cost_envs import AgentPool, AgentSpec, FlightPlannerEnv, OrchestrationEnv, ToolBenchEnv
from cost_envs.envs import flight_planner, toolbench

# Three tools, one of which can answer, so ToolBench tasks are sometimes solvable.
TOOLBENCH_POOL = AgentPool(
    (
        AgentSpec("retriever", "retriever", 0.001, 1e8, (0.85, 0.0, 0.4, 0.0, 0.0, 0.0)),
        AgentSpec("coder", "code", 0.0025, 1e9, (0.2, 0.8, 0.0, 0.85, 0.1, 0.0)),
        AgentSpec("llm", "llm", 0.012, 1e13, (0.5, 0.6, 0.3, 0.6, 0.95, 0.95)),
    ),
    toolbench.SKILLS,
)

# One agent per role, priced so that useless cheap calls cannot pile up without bound.
FLIGHT_POOL = AgentPool(
    (
        AgentSpec("planner", "planner", 0.004, 1e13, (0.6, 0.0, 0.1)),
        AgentSpec("search", "search", 0.003, 1e9, (0.0, 0.7, 0.0)),
        AgentSpec("validator", "validator", 0.005, 1e12, (0.1, 0.0, 0.7)),
    ),
    flight_planner.SKILLS,
)

#: Floating-point slack when comparing costs summed along different paths.
COST_TOL = 1e-12


def joint_actions(m: int) -> list[np.ndarray]:
    return [np.array(bits, dtype=np.int8) for bits in itertools.product((0, 1), repeat=m)]


def clone(env: OrchestrationEnv) -> OrchestrationEnv:
    # The pool and the task are frozen with read-only arrays; sharing them halves the cost
    # of each copy, which is what makes exhaustive enumeration affordable.
    return copy.deepcopy(env, {id(env.pool): env.pool, id(env.task): env.task})


def brute_force_min_cost(env: OrchestrationEnv, bound: float = math.inf) -> float:
    """Cheapest successful completion of ``env``'s episode, by enumerating action sequences.

    Sequences whose cost already reaches ``bound`` or the best success found so far are
    cut: costs are >= 0, so no extension of them can be cheaper. Returns ``inf`` if no
    sequence cheaper than ``bound`` succeeds.
    """
    actions = joint_actions(env.n_agents)
    prices = [float(env.pool.costs @ a) for a in actions]
    best = bound

    def visit(node: OrchestrationEnv, spent: float) -> None:
        nonlocal best
        for action, price in zip(actions, prices, strict=True):
            if spent + price >= best:
                continue
            child = clone(node)
            _, _, terminated, truncated, info = child.step(action)
            total = spent + info["cost"]
            if terminated or truncated:
                if info["success"]:
                    best = min(best, total)
            else:
                visit(child, total)

    visit(env, 0.0)
    return best if best < bound else math.inf


def execute(env: OrchestrationEnv, actions: Any) -> tuple[bool, float]:
    """Run ``actions`` to the end of the episode; returns (success, cost of these steps)."""
    spent = 0.0
    for turn, action in enumerate(actions):
        _, _, terminated, truncated, info = env.step(action)
        spent += info["cost"]
        if terminated or truncated:
            assert turn == len(actions) - 1, "the episode ended before the plan did"
            return info["success"], spent
    raise AssertionError("the plan ended before the episode did")


def tasks_for(env: OrchestrationEnv, n: int, seed: int) -> list[Any]:
    source = copy.deepcopy(env)
    source.reset(seed=seed)
    return source.sample_tasks(n)


def short_toolbench_tasks(env: ToolBenchEnv, n: int, seed: int) -> Iterator[Any]:
    # at most 3 stages (4 turns): 8**4 sequences at most, enumerable in well under a second
    return (t for t in tasks_for(env, n, seed) if t.n_stages <= 3)


def check_oracle_exact(env: OrchestrationEnv, exhaustive: bool = True) -> bool | None:
    """Compare the oracle with brute force from ``env``'s current point.

    Returns True if the task is solvable from here, False if not, None if unchecked.

    ``exhaustive``: enumerate independently of the oracle. Otherwise only sequences
    cheaper than the oracle's plan are enumerated (all that could refute it), which keeps
    7-turn FlightPlanner episodes with 3 agents affordable; with the plan's own successful
    execution this still proves optimality. Proving that *nothing* succeeds needs the whole
    tree, so a ``None`` plan is then left unchecked.
    """
    plan = env.oracle_plan()
    if plan is None:
        if not exhaustive:
            return None
        assert brute_force_min_cost(env) == math.inf, "the oracle missed a success"
        action = env.oracle_action()
        assert action.dtype == np.int8
        np.testing.assert_array_equal(action, np.zeros(env.n_agents, np.int8))
        return False
    if exhaustive:
        assert plan.cost == pytest.approx(brute_force_min_cost(env), rel=0, abs=COST_TOL)
    else:
        cheaper = brute_force_min_cost(env, bound=plan.cost - COST_TOL)
        assert cheaper == math.inf, f"brute force found {cheaper} < oracle {plan.cost}"
    assert all(a in env.action_space for a in plan.actions)
    np.testing.assert_array_equal(env.oracle_action(), plan.actions[0])
    success, spent = execute(clone(env), plan.actions)
    assert success
    assert spent == plan.cost  # exactly: same prices, same order of summation
    return True


def test_toolbench_oracle_matches_brute_force() -> None:
    env = ToolBenchEnv(pool=TOOLBENCH_POOL)
    results = []
    for task in itertools.islice(short_toolbench_tasks(env, 40, seed=0), 8):
        env.reset(options={"task": task})
        results.append(check_oracle_exact(env))
    assert results.count(True) >= 2 and results.count(False) >= 1, results  # both branches


def test_toolbench_oracle_mid_episode() -> None:
    # from a later point the oracle plans the rest of the episode, given what already ran
    env = ToolBenchEnv(pool=TOOLBENCH_POOL)
    results = []
    for task in itertools.islice(short_toolbench_tasks(env, 40, seed=1), 2):
        for first in joint_actions(env.n_agents)[1:]:  # all-zero would end the episode
            env.reset(options={"task": task})
            env.step(first)  # nonzero: the episode goes on (>= 2 stages, >= 3 turns)
            results.append(check_oracle_exact(env))
    assert True in results, results


def test_toolbench_preset_pool_size_3() -> None:
    env = ToolBenchEnv(pool_size=3)
    results = []
    for task in itertools.islice(short_toolbench_tasks(env, 20, seed=2), 3):
        env.reset(options={"task": task})
        results.append(check_oracle_exact(env))
    if not env.pool.capabilities[:, list(toolbench.ANSWER_SKILLS)].any():
        # the first three catalogue tools cannot answer: nothing succeeds, ever
        assert results == [False] * 3


def test_flight_planner_oracle_matches_brute_force() -> None:
    env = FlightPlannerEnv(pool=FLIGHT_POOL)
    results = []
    for task in tasks_for(env, 8, seed=0):
        env.reset(options={"task": task})
        results.append(check_oracle_exact(env, exhaustive=False))
    assert results.count(True) >= 3, results


def test_flight_planner_oracle_mid_episode() -> None:
    env = FlightPlannerEnv(pool=FLIGHT_POOL)
    results = []
    for task in tasks_for(env, 4, seed=1):
        env.reset(options={"task": task})
        env.step(np.array([1, 1, 0], dtype=np.int8))  # plan and quote; may be a bad plan
        results.append(check_oracle_exact(env, exhaustive=False))
    assert True in results, results


def test_flight_planner_two_agents_exhaustive() -> None:
    # With a planner and a searcher only (4 actions a turn) all 4**7 sequences can be
    # enumerated, so both a solvable task and an unsolvable one are checked independently.
    env = FlightPlannerEnv(pool=AgentPool(FLIGHT_POOL.agents[:2], flight_planner.SKILLS))
    tasks = tasks_for(env, 40, seed=0)
    solvable, unsolvable = [], []
    for task in tasks:
        env.reset(options={"task": task})
        (solvable if env.oracle_plan() is not None else unsolvable).append(task)
    assert len(solvable) >= 2 and unsolvable, "need both kinds of task"
    for task, expected in [(solvable[0], True), (solvable[1], True), (unsolvable[0], False)]:
        env.reset(options={"task": task})
        assert check_oracle_exact(env) is expected


@pytest.mark.parametrize("make_env", [lambda: ToolBenchEnv(pool=TOOLBENCH_POOL),
                                      lambda: FlightPlannerEnv(pool=FLIGHT_POOL)],
                         ids=["ToolBench", "FlightPlanner"])
def test_following_oracle_action_realises_the_plan(make_env: Any) -> None:
    env = make_env()
    followed = 0
    for task in tasks_for(env, 10, seed=4):
        env.reset(options={"task": task})
        plan = env.oracle_plan()
        if plan is None:
            continue
        taken = []
        done = False
        while not done:
            taken.append(env.oracle_action())
            _, _, terminated, truncated, info = env.step(taken[-1])
            done = terminated or truncated
        assert info["success"]
        assert info["episode_cost"] == plan.cost
        assert len(taken) == len(plan.actions)
        for a, b in zip(taken, plan.actions, strict=True):
            np.testing.assert_array_equal(a, b)
        followed += 1
    assert followed >= 2


def test_oracle_after_episode_end() -> None:
    env = ToolBenchEnv(pool=TOOLBENCH_POOL)
    env.reset(seed=0)
    env.step(np.zeros(env.n_agents, dtype=np.int8))  # answering at once ends the episode
    assert env.oracle_plan() is None
