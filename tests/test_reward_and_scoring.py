"""Eq. 1 and token-level F1, against hand-computed values."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the envs)
from cost_envs import RewardWeights, token_f1


def test_reward_weights_implement_eq1() -> None:
    w = RewardWeights(alpha=2.0, beta=0.1, lam=10.0, gamma=0.5)
    # 2*1 + 0.1*8 - 10*0.03 - 0.5*3 = 2 + 0.8 - 0.3 - 1.5
    assert w(True, 8.0, 0.03, 3) == pytest.approx(1.0)
    assert w(False, 0.0, 0.0, 0) == 0.0


@pytest.mark.parametrize("bad", [{"alpha": -1.0}, {"lam": float("nan")}, {"gamma": "x"}])
def test_reward_weights_reject_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        RewardWeights(**bad)


def test_reward_weights_reject_unknown_keys() -> None:
    with pytest.raises(ValueError, match="delta"):
        RewardWeights.coerce({"delta": 1.0})


def test_env_reward_is_eq1_of_its_info() -> None:
    weights = RewardWeights(alpha=1.0, beta=0.2, lam=7.0, gamma=0.01)
    env = gym.make("cost_envs/ToolBench-v0", reward_weights=weights)
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(200):
        action = rng.integers(0, 2, env.action_space.n, dtype=np.int8)
        action[0] = 1  # keep episodes going past the first turn
        _, reward, terminated, truncated, info = env.step(action)
        final = terminated or truncated
        expected = weights(
            info["success"] if final else False,
            info["quality"] if final else 0.0,
            info["cost"],
            int(info["calls"].sum()),
        )
        assert reward == pytest.approx(expected)
        if final:
            env.reset()


def test_token_f1_hand_examples() -> None:
    assert token_f1(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert token_f1(["a", "b"], ["c", "d"]) == 0.0
    # overlap 2 (a, b); precision 2/3, recall 2/4 -> F1 = 2*(2/3)*(1/2)/(2/3+1/2) = 4/7
    assert token_f1(["a", "b", "x"], ["a", "b", "c", "d"]) == pytest.approx(4 / 7)
    # multisets: a repeated token only counts as often as the reference has it
    assert token_f1(["a", "a"], ["a"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1([], []) == 1.0
    assert token_f1([], ["a"]) == 0.0


def test_toolbench_quality_is_ten_times_f1_of_the_composed_answer() -> None:
    env = gym.make("cost_envs/ToolBench-v0")
    env.reset(seed=0)
    base = env.unwrapped
    checked = 0
    for _ in range(50):
        env.reset()
        done = False
        while not done:
            turn = base.turn
            action = np.ones(env.action_space.n, dtype=np.int8)
            hits = base._hits[turn][base._state[0]] if base._state[0] < base.task.n_stages else []
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        if base._state[0] == base.task.n_stages:  # answered: recompute F1 independently
            cleared = [i for i, hit in enumerate(hits) if hit]
            composer = max(cleared, key=base.composer_strength)
            answer = base.answer_tokens(turn, composer)
            f1 = token_f1(answer.tolist(), base.task.reference.tolist())
            assert info["quality"] == pytest.approx(10 * f1)
            assert info["success"] == (f1 >= base.f1_threshold)
            checked += 1
    assert checked > 10
