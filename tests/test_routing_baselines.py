"""Small/large routing baselines (BoPO's): each does what it says."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401
from agents.baselines import (
    BASELINES,
    ROUTING_BASELINES,
    AlwaysLarge,
    AlwaysSmall,
    Cascade,
    RandomMix,
)

ENV_ID = "cost_envs/AgenticRouting-v0"


def _play(env: gym.Env, policy, seed: int) -> list[tuple[np.ndarray, tuple, tuple]]:
    """(action, state before, state after) of every step of one episode."""
    obs, _ = env.reset(seed=seed)
    base = env.unwrapped
    steps, done = [], False
    while not done:
        action, _ = policy.predict(obs)
        before = base._state
        obs, _, terminated, truncated, info = env.step(action)
        np.testing.assert_array_equal(info["calls"], action)
        steps.append((np.asarray(action), before, base._state))
        done = terminated or truncated
    return steps


def test_boundary_policies_always_pick_their_model() -> None:
    env = gym.make(ENV_ID, profile="sciworld")
    for cls, bit in ((AlwaysSmall, 0), (AlwaysLarge, 1)):
        for seed in range(3):
            actions = [a for a, _, _ in _play(env, cls(env), seed)]
            assert all(a.tolist() == [bit] for a in actions)


def test_random_mix_calls_the_large_model_with_probability_p() -> None:
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    state = env.unwrapped.np_random.bit_generator.state
    for p in (0.0, 0.25, 0.75, 1.0):
        mix = RandomMix(env, p=p, seed=1)
        draws = np.array([mix.act(obs)[0] for _ in range(4000)])
        assert abs(draws.mean() - p) < 0.03
    a = [RandomMix(env, p=0.5, seed=7).predict(obs)[0] for _ in range(5)]
    b = [RandomMix(env, p=0.5, seed=7).predict(obs)[0] for _ in range(5)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert env.unwrapped.np_random.bit_generator.state == state  # its own generator
    with pytest.raises(ValueError, match=r"RandomMix: p: expected a number in \[0, 1\]"):
        RandomMix(env, p=1.5)
    with pytest.raises(ValueError, match=r"RandomMix: p: expected a number in \[0, 1\]"):
        RandomMix(env, p=True)
    assert RandomMix(env, p=np.float32(0.25)).p == 0.25  # numpy numbers are numbers


def _failed(before: tuple, after: tuple) -> bool:
    """Privileged: the step neither cleared a subgoal nor a recovery step."""
    return after[0] == before[0] and after[1] >= before[1]


@pytest.mark.parametrize("patience", [1, 2, 3])
def test_cascade_escalates_exactly_after_failed_steps(patience: int) -> None:
    env = gym.make(ENV_ID, profile="appworld")
    escalations = 0
    for seed in range(8):
        run = 0  # consecutive failed steps so far, from the privileged state
        for action, before, after in _play(env, Cascade(env, patience=patience), seed):
            assert action.tolist() == [int(run >= patience)], (seed, run)
            escalations += int(action[0])
            run = run + 1 if _failed(before, after) else 0
    assert escalations > 0  # the rule was exercised both ways


def test_cascade_checks_its_patience() -> None:
    env = gym.make(ENV_ID)
    for bad in (0, 4, 1.5, True):
        with pytest.raises(ValueError, match="patience"):
            Cascade(env, patience=bad)


@pytest.mark.parametrize("name", sorted(ROUTING_BASELINES))
def test_routing_baselines_need_a_routing_env(name: str) -> None:
    with pytest.raises(ValueError, match="zero_action_fallback"):
        ROUTING_BASELINES[name](gym.make("cost_envs/ToolBench-v0"))


def test_routing_baselines_are_kept_out_of_the_generic_table() -> None:
    # the generic baselines run on every env; these need a small/large routing env
    assert set(ROUTING_BASELINES).isdisjoint(BASELINES)
    assert set(ROUTING_BASELINES) == {"always-small", "always-large", "random-mix", "cascade",
                                      "difficulty-threshold"}


def test_batched_predict_matches_single() -> None:
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    for policy in (AlwaysSmall(env), AlwaysLarge(env), Cascade(env)):
        batch, _ = policy.predict(np.stack([obs, obs]))
        single, _ = policy.predict(obs)
        assert batch.shape == (2, 1) and (batch == single).all()
