"""FlightPlanner-v1: v0's dynamics, an observation that counts what a careful planner tracks."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from test_oracle import FLIGHT_POOL, check_oracle_exact, tasks_for

from cost_envs import FlightPlannerEnv, FlightPlannerV1Env, FlightTask, toolbench_pool
from cost_envs.envs.flight_planner import MAX_TURNS, SEARCH_NOTICE

V0, V1 = "cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1"
# the preset pool's agents, in order, and their strengths in their own roles
P_SMALL, P_LARGE, S_BASIC, S_PRO, V_SMALL, V_LARGE = range(6)
STRENGTH = {P_SMALL: 0.45, P_LARGE: 0.88, S_BASIC: 0.45, S_PRO: 0.92, V_SMALL: 0.55,
            V_LARGE: 0.95}
HIGH = 0.99  # luck at which every agent fails: planners propose broken routes, no check bites


def act(*agents: int) -> np.ndarray:
    action = np.zeros(6, dtype=np.int8)
    action[list(agents)] = 1
    return action


def slots(env: FlightPlannerV1Env, obs: np.ndarray) -> dict[str, float]:
    return {name: float(obs[s][0]) for name, s in env.observation_layout.items()
            if s.stop - s.start == 1}


def crafted_task(env: FlightPlannerV1Env, luck: dict[tuple[int, int], float],
                 **changes: object) -> FlightTask:
    """A drawn task with every luck ``HIGH`` but the ``(turn, agent)`` cells given.

    Fare luck is 0, the broken route is priced like the optimum and the budget is twice
    that, so only connectivity decides whether a plan of the optimum's length is valid.
    """
    task = env.sample_tasks(1)[0]
    table = np.full(task.luck.shape, HIGH)
    for cell, value in luck.items():
        table[cell] = value
    price = task.route_price.copy()
    price[2] = price[0]
    fields = {"luck": table, "fare_luck": np.zeros(task.luck.shape), "route_price": price,
              "budget": 2.0 * float(price[0])}
    return dataclasses.replace(task, **{**fields, **changes})


def lockstep(seed: int, p_call: float) -> int:
    """Play v0 and v1 with the same seed and actions; return the number of steps compared."""
    v0, v1 = gym.make(V0), gym.make(V1)
    rng = np.random.default_rng(seed)
    steps = 0
    for episode in range(v0.unwrapped.task_block + 2):  # into the second block of tasks
        kwargs = {"seed": seed} if episode == 0 else {}
        (o0, i0), (o1, i1) = v0.reset(**kwargs), v1.reset(**kwargs)
        assert data_equivalence(i0, i1)
        done = False
        while True:
            np.testing.assert_array_equal(o1[:15], o0)  # v0's slots, v0's values
            if done:
                break
            action = (rng.random(6) < p_call).astype(np.int8)
            o0, r0, t0, tr0, i0 = v0.step(action)
            o1, r1, t1, tr1, i1 = v1.step(action)
            assert (r0, t0, tr0) == (r1, t1, tr1)
            assert data_equivalence(i0, i1)
            done, steps = t0 or tr0, steps + 1
    return steps


@pytest.mark.parametrize(("seed", "p_call"), [(0, 0.5), (1, 0.2)])
def test_v0_and_v1_give_identical_trajectories(seed: int, p_call: float) -> None:
    # success, quality, cost, FLOPs, rewards and v0's slots agree step by step
    assert lockstep(seed, p_call) > 300


def test_layout_keeps_v0_slots_and_adds_named_unit_slots() -> None:
    v0, v1 = FlightPlannerEnv(), FlightPlannerV1Env()
    assert v1.observation_space.shape == (25,)
    assert list(v1.observation_layout.items())[:len(v0.observation_layout)] == list(
        v0.observation_layout.items())
    covered = sorted(i for s in v1.observation_layout.values() for i in range(s.start, s.stop))
    assert covered == list(range(25))
    assert v0.observation_space.shape == (15,)  # v0 is unchanged


def test_counts_of_passes_and_quotes_by_strength() -> None:
    env = FlightPlannerV1Env()
    env.reset(seed=3)
    task = crafted_task(env, {(0, P_LARGE): 0.0})  # the large planner proposes the optimum
    obs, _ = env.reset(options={"task": task})
    assert slots(env, obs)["broken_survival"] == 1.0
    survival = 1.0
    expected = [
        # action, weak/strong passes, weak/strong quotes, factor on survival
        (act(P_LARGE, S_BASIC), 0, 0, 1, 0, 1 - SEARCH_NOTICE * STRENGTH[S_BASIC]),
        (act(V_SMALL), 1, 0, 1, 0, 1 - STRENGTH[V_SMALL]),
        (act(V_SMALL), 2, 0, 1, 0, 1 - STRENGTH[V_SMALL]),
        (act(S_PRO, V_LARGE), 2, 1, 1, 1,
         (1 - SEARCH_NOTICE * STRENGTH[S_PRO]) * (1 - STRENGTH[V_LARGE])),
    ]
    for action, weak_p, strong_p, weak_q, strong_q, factor in expected:
        obs, _, terminated, _, _ = env.step(action)
        survival *= factor
        seen = slots(env, obs)
        assert not terminated
        assert seen["weak_passes"] == pytest.approx(weak_p / MAX_TURNS)
        assert seen["strong_passes"] == pytest.approx(strong_p / MAX_TURNS)
        assert seen["weak_quotes"] == pytest.approx(weak_q / MAX_TURNS)
        assert seen["strong_quotes"] == pytest.approx(strong_q / MAX_TURNS)
        assert seen["broken_survival"] == pytest.approx(survival, rel=1e-6)
        assert seen["plans_proposed"] == pytest.approx(1 / MAX_TURNS)
        assert seen["validated"] == (weak_p + strong_p > 0)
    # a new proposal starts the evidence afresh; the episode's proposals keep counting
    obs, *_ = env.step(act(P_SMALL))
    seen = slots(env, obs)
    assert [seen[k] for k in ("weak_passes", "strong_passes", "weak_quotes",
                              "strong_quotes")] == [0, 0, 0, 0]
    assert seen["broken_survival"] == 1.0
    assert seen["plans_proposed"] == pytest.approx(2 / MAX_TURNS)


def test_drops_name_who_dropped_the_plan() -> None:
    env = FlightPlannerV1Env()
    env.reset(seed=4)
    # every planner proposes the broken route; the pro searcher notices at turn 1, the
    # large validator catches it at turn 3 (the basic searcher misses it then)
    task = crafted_task(env, {(1, S_PRO): 0.0, (3, V_LARGE): 0.0})
    env.reset(options={"task": task})
    drops = ("dropped_by_search", "dropped_by_validator", "dropped_last_turn",
             "search_drops", "validator_drops", "plans_proposed")
    expected = [
        (act(P_LARGE), (0, 0, 0, 0, 0, 1)),
        (act(S_PRO), (1, 0, 1, 1, 0, 1)),
        (act(P_LARGE), (0, 0, 0, 1, 0, 2)),
        (act(S_BASIC, V_LARGE), (0, 1, 1, 1, 1, 2)),
        (act(), (0, 0, 0, 1, 1, 2)),  # waiting: the episode's counts stay
    ]
    for action, values in expected:
        obs, _, terminated, _, _ = env.step(action)
        seen = slots(env, obs)
        assert not terminated
        flags, counts = values[:3], values[3:]
        assert [seen[k] for k in drops[:3]] == list(flags)
        assert [seen[k] for k in drops[3:]] == pytest.approx([c / MAX_TURNS for c in counts])
        if seen["dropped_last_turn"]:
            assert seen["has_plan"] == 0 and seen["weak_quotes"] == seen["weak_passes"] == 0


def test_a_hidden_missing_leg_shows_only_when_a_check_catches_it() -> None:
    env = FlightPlannerV1Env()
    env.reset(seed=5)
    # both tasks: the large planner proposes the "broken" route; in one its missing leg
    # exists. Searchers and the small validator miss at their luck, the large one catches.
    broken = crafted_task(env, {(5, V_LARGE): 0.0})
    whole = dataclasses.replace(broken, route_connected=np.array([True, True, True]))
    quiet = [act(P_LARGE), act(S_BASIC), act(V_SMALL), act(S_PRO, V_SMALL)]

    def history(task: FlightTask, actions: list[np.ndarray]) -> tuple[list, dict]:
        obs, _ = env.reset(options={"task": task})
        seen, info = [obs], {}
        for action in actions:
            obs, _, terminated, _, info = env.step(action)
            seen.append(obs)
            if terminated:
                break
        return seen, info

    # committing without a revealing check: the same observations, different outcomes
    (a, info_a), (b, info_b) = history(broken, [*quiet, act()]), history(whole, [*quiet, act()])
    np.testing.assert_array_equal(np.array(a), np.array(b))
    assert info_a["success"] is False and info_b["success"] is True
    # a check that catches it tells them apart
    reveal = [*quiet, act(V_SMALL), act(V_LARGE)]
    (a, _), (b, _) = history(broken, reveal), history(whole, reveal)
    np.testing.assert_array_equal(np.array(a[:-1]), np.array(b[:-1]))
    assert slots(env, a[-1])["dropped_by_validator"] == 1
    assert slots(env, b[-1])["strong_passes"] == pytest.approx(1 / MAX_TURNS)


def test_oracle_matches_v0_on_the_same_tasks() -> None:
    v0, v1 = FlightPlannerEnv(), FlightPlannerV1Env()
    rng = np.random.default_rng(0)
    compared = 0
    for task in tasks_for(v0, 60, seed=8):
        first = (rng.random(6) < 0.3).astype(np.int8)
        for mid in (False, True):  # from the start, and after one random action
            plans = []
            for env in (v0, v1):
                env.reset(options={"task": task})
                ended = mid and env.step(first)[2]
                plans.append("ended" if ended else env.oracle_plan())
            p0, p1 = plans
            if p0 is None or p0 == "ended":
                assert p1 == p0
            else:
                assert (p1.cost, p1.quality) == (p0.cost, p0.quality)
                compared += 1
    assert compared > 60


def test_oracle_is_exact_on_v1s_own_transitions() -> None:
    # brute force over v1's transition (counters included) finds nothing cheaper
    env = FlightPlannerV1Env(pool=FLIGHT_POOL)
    solved = 0
    for task in tasks_for(env, 6, seed=2):
        env.reset(options={"task": task})
        solved += bool(check_oracle_exact(env, exhaustive=False))
    assert solved > 0


def test_following_the_oracle_realises_its_plan() -> None:
    env = FlightPlannerV1Env()
    env.reset(seed=6)
    realised = 0
    for task in env.sample_tasks(20):
        env.reset(options={"task": task})
        state = env._state
        plan = env.oracle_plan()
        assert env._state is state  # the search over v0's part puts v1's state back
        if plan is None:
            continue
        done, info = False, {}
        while not done:
            _, _, done, _, info = env.step(env.oracle_action())
        assert info["success"] and info["episode_cost"] == plan.cost
        realised += 1
    assert realised > 10


def test_constructor_errors_name_v1() -> None:
    with pytest.raises(ValueError, match="FlightPlanner-v1"):
        FlightPlannerV1Env(pool=toolbench_pool(3))


def test_making_v0_beside_v1_prints_no_upgrade_warning() -> None:
    # v0 stays registered as v1's baseline: Gymnasium's "out of date" warning is wrong advice
    code = f"import gymnasium as gym, cost_envs; gym.make({V0!r}); gym.make({V1!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
