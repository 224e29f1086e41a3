"""HardBudget and CostAccounting, generated over every registered env."""

from __future__ import annotations

import functools
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit
from hypothesis import given, settings
from hypothesis import strategies as st

import cost_envs
from cost_envs.wrappers import CostAccounting, HardBudget, StepLimit

ENV_IDS = list(cost_envs.ENV_IDS)
MODES = ["mask", "truncate"]
#: Arguments that give episodes of more than one step where the default has none.
#: Structural: a TraceRouting-v0 episode is one routing decision unless the cascade is on,
#: and then its second step always ends it.
MULTI_STEP_KWARGS: dict[str, dict] = {"cost_envs/TraceRouting-v0": {"cascade": True}}


@functools.cache
def _shared_env(env_id: str) -> gym.Env:
    """One env per id for the hypothesis tests: each example wraps it afresh and resets it."""
    return gym.make(env_id)


def _costs(env: gym.Env) -> np.ndarray:
    """This episode's price per call (the pool's, or the task's where calls cost tokens)."""
    return np.array(env.unwrapped.call_costs)


def _expected_kept(requested: np.ndarray, costs: np.ndarray, spent: float,
                   budget: float, step_cost: float = 0.0) -> np.ndarray:
    """The documented mask rule, written independently: in bit order, keep each requested
    agent that fits with the ones kept before it (and the step's own cost)."""
    kept = np.zeros_like(requested)
    total = step_cost
    for i in np.flatnonzero(requested):
        if spent + (total + float(costs[i])) <= budget:
            total += float(costs[i])
            kept[i] = 1
    return kept


def _random_actions(env: gym.Env, seed: int, n: int, p: float = 0.3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    m = env.action_space.n
    return [(rng.random(m) < p).astype(np.int8) for _ in range(n)]


def _budgets(costs: np.ndarray, step_cost: float = 0.0) -> st.SearchStrategy[float]:
    # Subset sums of the prices hit the boundary spend == budget exactly.
    prices = costs.tolist() + ([step_cost] if step_cost else [])
    subset_sums = st.lists(st.sampled_from(prices), max_size=8).map(
        lambda xs: math.fsum(xs)
    )
    return st.one_of(
        st.just(0.0),
        st.floats(0.0, 1e-3),
        st.floats(0.0, 3.0),
        subset_sums,
    )


# ------------------------------------------------------------------ properties
@pytest.mark.parametrize("on_exceed", MODES)
@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_spend_never_exceeds_budget(env_id: str, on_exceed: str, data: st.DataObject) -> None:
    base = _shared_env(env_id)
    seed = data.draw(st.integers(0, 2**16), label="seed")
    base.reset(seed=seed)  # the prices of the task this seed draws
    costs, step_cost = _costs(base), base.unwrapped.step_cost
    fallback = base.unwrapped.zero_action_fallback
    m = len(costs)
    budget = data.draw(_budgets(costs, step_cost), label="budget")
    actions = data.draw(
        st.lists(st.lists(st.integers(0, 1), min_size=m, max_size=m), min_size=1, max_size=12),
        label="actions",
    )
    env = HardBudget(base, budget=budget, on_exceed=on_exceed)
    env.reset(seed=seed)
    spent = 0.0
    for bits in actions:
        requested = np.array(bits, dtype=np.int8)
        mask = env.action_masks()
        assert mask.dtype == bool and mask.shape == (2 * m,)
        assert mask[0::2].all()
        np.testing.assert_array_equal(mask[1::2], spent + (step_cost + costs) <= budget)
        remaining = env.remaining_budget
        assert remaining == budget - spent >= 0.0
        off_boundary = np.abs(step_cost + costs - remaining) > 1e-12
        np.testing.assert_array_equal(mask[1::2][off_boundary],
                                      (step_cost + costs <= remaining)[off_boundary])

        _, reward, terminated, truncated, info = env.step(requested)
        assert not (terminated and truncated)
        kept = _expected_kept(requested, costs, spent, budget, step_cost)
        affordable = spent + (step_cost + float(costs @ requested)) <= budget
        fallback_fits = fallback and spent + step_cost <= budget
        if on_exceed == "mask" and not affordable and not kept.any() and not fallback_fits:
            # nothing requested is affordable: the budget is exhausted, never "answer now"
            assert truncated and not terminated and info["budget_exceeded"]
            assert info["cost"] == 0.0 and not info["calls"].any()
        elif on_exceed == "mask":
            assert not truncated
            np.testing.assert_array_equal(info["calls"], kept)
            assert not (info["calls"] & (1 - requested)).any()  # a subset of the request
        elif info.get("budget_exceeded"):
            assert truncated and reward == 0.0 and info["cost"] == 0.0
            assert not affordable  # it really would overspend
        else:
            np.testing.assert_array_equal(info["calls"], requested)
        spent += info["cost"]
        assert spent <= budget
        assert info["budget_remaining"] == budget - spent
        if terminated or truncated:
            with pytest.raises(ResetNeeded):
                env.step(np.zeros(m, dtype=np.int8))
            break


# ------------------------------------------------------------------ truncate mode
@pytest.mark.parametrize("on_exceed", ["truncate", "mask"])
def test_cut_short_observation_is_not_the_callers_array(on_exceed: str) -> None:
    env = HardBudget(gym.make("cost_envs/ToolBench-v0"), budget=0.0, on_exceed=on_exceed)
    obs0, _ = env.reset(seed=3)
    expected = obs0.copy()
    obs0[...] = -1.0  # the caller writes into the array it was handed
    obs, _, _, truncated, _ = env.step(np.ones(8, dtype=np.int8))
    assert truncated
    np.testing.assert_array_equal(obs, expected)  # the env's observation, not the scribble


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_truncate_at_first_step_spends_nothing(env_id: str) -> None:
    env = HardBudget(gym.make(env_id), budget=0.0, on_exceed="truncate")
    m = env.action_space.n
    obs0, _ = env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(np.ones(m, dtype=np.int8))
    assert (reward, terminated, truncated) == (0.0, False, True)
    np.testing.assert_array_equal(obs, obs0)
    assert obs is not obs0 and not np.shares_memory(obs, obs0)  # fresh: never the caller's
    assert info["cost"] == 0.0 and info["flops"] == 0.0
    assert info["calls"].dtype == np.int8 and not info["calls"].any()
    assert info["calls"].shape == (m,)
    assert info["success"] is False and info["quality"] == 0.0
    assert info["episode_cost"] == 0.0 and info["episode_flops"] == 0.0
    assert info["budget_exceeded"] is True and info["budget_remaining"] == 0.0
    assert env.unwrapped.turn == 0 and env.unwrapped.episode_cost == 0.0  # not stepped
    with pytest.raises(ResetNeeded):
        env.step(np.zeros(m, dtype=np.int8))
    env.reset()
    assert env.remaining_budget == 0.0
    env.step(np.zeros(m, dtype=np.int8))  # free actions still run


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_truncate_after_spending_keeps_last_obs_and_ledger(env_id: str) -> None:
    probe = gym.make(env_id, **MULTI_STEP_KWARGS.get(env_id, {}))
    costs = _costs(probe)
    m = len(costs)
    cheapest = int(np.argmin(costs))
    first = np.zeros(m, dtype=np.int8)
    first[cheapest] = 1
    expensive = np.ones(m, dtype=np.int8)
    budget = float(costs[cheapest]) + float(costs.sum()) / 2  # pays for `first`, not both
    env = HardBudget(probe, budget=budget, on_exceed="truncate")
    for seed in range(20):  # find a task that the first call does not finish
        env.reset(seed=seed)
        obs1, _, terminated, truncated, info1 = env.step(first)
        if not (terminated or truncated):
            break
    else:
        pytest.skip("every task ended after one call")
    obs, reward, terminated, truncated, info = env.step(expensive)
    assert (reward, terminated, truncated) == (0.0, False, True)
    np.testing.assert_array_equal(obs, obs1)
    assert info["budget_exceeded"] is True and info["cost"] == 0.0
    assert info["episode_cost"] == info1["cost"] == env.unwrapped.episode_cost
    assert info["episode_flops"] == info1["flops"]
    assert info["budget_remaining"] == budget - info1["cost"] == env.remaining_budget


# ------------------------------------------------------------------ mask mode
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_generous_mask_budget_is_transparent(env_id: str) -> None:
    wrapped = HardBudget(gym.make(env_id), budget=1e9)
    plain = gym.make(env_id)
    actions = iter(_random_actions(plain, seed=1, n=10_000))
    for episode in range(6):
        seed = 11 if episode == 0 else None
        obs_w, info_w = wrapped.reset(seed=seed)
        obs_p, info_p = plain.reset(seed=seed)
        np.testing.assert_array_equal(obs_w, obs_p)
        assert info_w.keys() == info_p.keys()
        done = False
        while not done:
            action = next(actions)
            out_w = wrapped.step(action)
            out_p = plain.step(action)
            np.testing.assert_array_equal(out_w[0], out_p[0])
            assert out_w[1:4] == out_p[1:4]
            info_w, info_p = out_w[4], out_p[4]
            assert info_w.pop("budget_remaining") == 1e9 - wrapped.unwrapped.episode_cost
            assert info_w.keys() == info_p.keys()
            for key, value in info_p.items():
                np.testing.assert_array_equal(info_w[key], value)
            done = out_p[2] or out_p[3]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_mask_accepts_float_actions_and_rejects_bad_ones(env_id: str) -> None:
    for on_exceed in MODES:
        env = HardBudget(gym.make(env_id), budget=0.0, on_exceed=on_exceed)
        m = env.action_space.n
        env.reset(seed=0)
        for bad in (np.full(m, 2), np.ones(m + 1), np.full(m, np.nan), "x"):
            with pytest.raises(ValueError, match="invalid action"):
                env.step(bad)
        _, _, _, truncated, info = env.step(np.ones(m, dtype=np.float32))  # as SB3 sends
        assert info["cost"] == 0.0
        assert truncated  # a zero budget affords nothing: exhausted in either mode


def test_step_before_reset_raises() -> None:
    env = HardBudget(gym.make(ENV_IDS[0]), budget=1.0)
    with pytest.raises(ResetNeeded):
        env.step(np.zeros(env.action_space.n, dtype=np.int8))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_restores_the_budget(env_id: str) -> None:
    env = HardBudget(gym.make(env_id), budget=0.05)
    m = env.action_space.n
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.ones(m, dtype=np.int8))
    assert info["cost"] > 0.0 and env.remaining_budget == 0.05 - info["cost"]
    env.reset()
    assert env.remaining_budget == 0.05
    step_cost = env.unwrapped.step_cost
    assert env.action_masks()[1::2].tolist() == (step_cost + _costs(env) <= 0.05).tolist()


# ------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("budget", "shown"),
    [(-1.0, "-1.0"), (float("nan"), "nan"), (float("inf"), "inf"), ("5", "'5'"),
     (None, "None"), (True, "True")],
)
def test_bad_budget_is_named(budget: object, shown: str) -> None:
    with pytest.raises(ValueError, match=r"budget: expected a finite number >= 0, got ") as err:
        HardBudget(gym.make(ENV_IDS[0]), budget=budget)  # type: ignore[arg-type]  # bad on purpose
    assert str(err.value).endswith(shown)


def test_bad_on_exceed_is_named() -> None:
    with pytest.raises(ValueError, match=r"on_exceed: expected one of \['mask', 'truncate'\], "
                                         r"got 'clip'"):
        HardBudget(gym.make(ENV_IDS[0]), budget=1.0, on_exceed="clip")


def test_budget_needs_an_orchestration_env() -> None:
    with pytest.raises(TypeError, match="CartPoleEnv"):
        HardBudget(gym.make("CartPole-v1"), budget=1.0)


def test_bad_stats_key_is_named() -> None:
    with pytest.raises(ValueError, match="stats_key: expected a non-empty string, got ''"):
        CostAccounting(gym.make(ENV_IDS[0]), stats_key="")


def test_budget_wrapper_records_its_arguments() -> None:
    env = HardBudget(gym.make(ENV_IDS[0]), budget=0.5, on_exceed="truncate")
    assert env._saved_kwargs == {"budget": 0.5, "on_exceed": "truncate"}
    assert (env.budget, env.on_exceed) == (0.5, "truncate")


# ------------------------------------------------------------------ accounting
@pytest.mark.parametrize(
    "budget_mode", [None, (0.02, "mask"), (0.02, "truncate")], ids=["plain", "mask", "trunc"]
)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_accounting_totals_match_steps(env_id: str, budget_mode: tuple | None) -> None:
    inner = gym.make(env_id)
    if budget_mode is not None:
        inner = HardBudget(inner, budget=budget_mode[0], on_exceed=budget_mode[1])
    env = CostAccounting(inner)
    m = env.action_space.n
    actions = iter(_random_actions(env, seed=5, n=10_000, p=0.5))
    previous_calls = None
    for episode in range(8):
        env.reset(seed=21 if episode == 0 else None)
        cost = flops = 0.0
        calls = np.zeros(m, dtype=np.int64)
        length = 0
        while True:
            _, _, terminated, truncated, info = env.step(next(actions))
            cost += info["cost"]
            flops += info["flops"]
            calls += info["calls"]
            length += 1
            if terminated or truncated:
                break
            assert "episode" not in info
        stats = info["episode"]
        assert stats["cost"] == cost == info["episode_cost"] == env.unwrapped.episode_cost
        assert stats["flops"] == flops == info["episode_flops"]
        assert stats["calls"].dtype == np.int64
        np.testing.assert_array_equal(stats["calls"], calls)
        assert stats["length"] == length == env.unwrapped.turn + bool(
            info.get("budget_exceeded")
        )
        assert stats["success"] is info["success"]
        assert stats["quality"] == info["quality"]
        assert set(stats) == {"cost", "flops", "success", "quality", "length", "calls"}
        if previous_calls is not None:  # fresh objects: the last episode's are untouched
            assert stats["calls"] is not previous_calls[0]
            np.testing.assert_array_equal(previous_calls[0], previous_calls[1])
        previous_calls = (stats["calls"], stats["calls"].copy())


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_accounting_defaults_outcome_on_foreign_truncation(env_id: str) -> None:
    env = CostAccounting(TimeLimit(gym.make(env_id, **MULTI_STEP_KWARGS.get(env_id, {})),
                                   max_episode_steps=1))
    m = env.action_space.n
    action = np.zeros(m, dtype=np.int8)
    action[int(np.argmin(_costs(env)))] = 1
    for seed in range(20):
        env.reset(seed=seed)
        _, _, terminated, truncated, info = env.step(action)
        if truncated and not terminated:
            break
    else:
        pytest.skip("every task ended after one call")
    assert "success" not in info
    stats = info["episode"]
    assert stats["success"] is False and stats["quality"] == 0.0
    assert stats["length"] == 1 and stats["cost"] == info["cost"]


def test_accounting_merges_with_inner_episode_statistics() -> None:
    env = CostAccounting(RecordEpisodeStatistics(gym.make(ENV_IDS[0])))
    env.reset(seed=0)
    m = env.action_space.n
    actions = iter(_random_actions(env, seed=2, n=100))
    while True:
        _, _, terminated, truncated, info = env.step(next(actions))
        if terminated or truncated:
            break
    assert {"r", "l", "t", "cost", "calls", "length"} <= set(info["episode"])
    assert info["episode"]["l"] == info["episode"]["length"]
    assert info["episode"]["calls"].shape == (m,)


def test_accounting_custom_key_is_deterministic() -> None:
    def run() -> list[dict]:
        env = CostAccounting(gym.make(ENV_IDS[0]), stats_key="costs")
        env.reset(seed=4)
        actions = iter(_random_actions(env, seed=4, n=1000))
        out = []
        while len(out) < 3:
            _, _, terminated, truncated, info = env.step(next(actions))
            if terminated or truncated:
                assert "episode" not in info
                out.append(info["costs"])
                env.reset()
        return out

    first, second = run(), run()
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


# ------------------------------------------------------------------ checkers, SB3
@pytest.mark.parametrize("on_exceed", MODES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_checker_passes(env_id: str, on_exceed: str) -> None:
    from gymnasium.utils.env_checker import check_env

    # The checker asserts no truncation at the first step, so truncate mode gets room.
    budget = 0.05 if on_exceed == "mask" else 1e9
    env = HardBudget(gym.make(env_id).unwrapped, budget=budget, on_exceed=on_exceed)
    with warnings.catch_warnings():
        # check_env warns that a wrapper is applied; that is the point of this test.
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_maskable_ppo_trains_and_respects_masks(env_id: str) -> None:
    pytest.importorskip("torch")
    from sb3_contrib import MaskablePPO

    costs = _costs(gym.make(env_id))
    budget = float(np.median(costs))  # some agents affordable alone, some not
    env = CostAccounting(HardBudget(gym.make(env_id), budget=budget), stats_key="costs")
    model = MaskablePPO(
        "MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu",
        policy_kwargs={"net_arch": [16]},
    )
    model.learn(total_timesteps=64)
    assert model.num_timesteps >= 64

    obs, _ = env.reset(seed=0)
    mask = env.get_wrapper_attr("action_masks")()
    assert not mask[1::2].all()  # the budget really masks something
    for _ in range(20):
        action, _ = model.predict(obs, action_masks=mask, deterministic=False)
        assert action.shape == (len(costs),)
        assert not action[~mask[1::2]].any()


# ------------------------------------------------------------------ StepLimit
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_limit_truncates_with_the_final_info_contract(env_id: str) -> None:
    # TraceRouting's cascade ends at its second step whatever is called: limit it to one
    max_steps = 1 if env_id in MULTI_STEP_KWARGS else 2
    env = CostAccounting(StepLimit(gym.make(env_id, **MULTI_STEP_KWARGS.get(env_id, {})),
                                   max_steps=max_steps))
    env.reset(seed=0)
    m = env.action_space.n
    ones = np.zeros(m, dtype=np.int8)
    ones[0] = 1  # the first agent of each preset never ends an episode on its own
    total = 0.0
    for step in range(max_steps):
        _, _, terminated, truncated, info = env.step(ones)
        total += info["cost"]
        assert not terminated
        assert truncated == (step == max_steps - 1)
    assert info["success"] is False and info["quality"] == 0.0
    assert info["episode_cost"] == pytest.approx(total)
    assert info["episode"]["length"] == max_steps
    assert info["episode"]["cost"] == pytest.approx(total)
    with pytest.raises(ResetNeeded):  # the env knows its episode ended
        env.unwrapped.step(ones)


def test_step_limit_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        StepLimit(gym.make(ENV_IDS[0]), max_steps=0)
    with pytest.raises(TypeError, match="OrchestrationEnv"):
        StepLimit(gym.make("CartPole-v1"), max_steps=3)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_budget_truncation_reaches_outer_accounting(env_id: str) -> None:
    env = CostAccounting(HardBudget(gym.make(env_id), budget=0.0, on_exceed="truncate"))
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(np.ones(env.action_space.n, dtype=np.int8))
    assert truncated and not terminated
    assert info["episode"]["cost"] == 0.0 and info["episode"]["success"] is False
