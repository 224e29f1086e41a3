"""Every env's trajectories, bit for bit, as they were before the step path was sped up.

Issue #15 removed per-step Python overhead from the shared step and reset path
(``core.py``), ExpertRouting v0/v1 and FlightPlanner v0/v1. The digests below were recorded
from the code before those changes: a sha256 over everything ``reset`` and ``step``
return (observation bytes and dtype, reward, flags, every info key with its value's type
and bytes) over seeded random actions of every accepted dtype, with replayed tasks, the
oracle's actions and a budget wrapper in the mix. Any change to a trajectory, an info
value or even a Python type (``float`` versus ``np.float64``) changes the digest.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cost_envs

STEPS = 1000
#: Action dtypes cycled through: SB3 sends floats, users ints or bools.
DTYPES = (np.int8, np.float32, np.int64, np.bool_, np.float64)

#: (id, gym.make kwargs) -> digest recorded before issue #15's speed-ups.
CASES: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = {
    ("cost_envs/AgenticRouting-v0", ()):
        "f33957866b478786f9aa92b7",
    ("cost_envs/ExpertRouting-v0", ()):
        "b5a009377879095d4a310ca3",
    ("cost_envs/ExpertRouting-v0", (("profile", "aime"), ("max_rounds", 5))):
        "a1602b4ec7458fe102e6020b",
    ("cost_envs/ExpertRouting-v0", (("budget", 0.03), ("on_exceed", "mask"))):
        "fb202f88ebdcdd8e18ddac6c",
    ("cost_envs/ExpertRouting-v1", ()):
        "857a75bb49551eed64fe2e3c",
    ("cost_envs/ExpertRouting-v1", (("budget", 0.06), ("on_exceed", "truncate"))):
        "9be1e0d8ff53f6f164e921fb",
    ("cost_envs/FlightPlanner-v0", ()):
        "ac4313258d33caec3445ac36",
    ("cost_envs/FlightPlanner-v1", ()):
        "d67de6b3f79b8fd4470a3f8d",
    ("cost_envs/FlightPlanner-v1", (("budget", 0.1), ("on_exceed", "mask"))):
        "8672fce880f3b144bb6d1928",
    ("cost_envs/ToolBench-v0", ()):  # recorded again for #37 point 1's task stream
        "91285933516f58cf7c968809",
    ("cost_envs/TraceRouting-v0", ()):
        "03ac988440b94e5ed13b1dc3",
    ("cost_envs/TraceRouting-v0", (("cascade", True),)):
        "bc904ea0e66b23d8ce1edaeb",
    ("cost_envs/TraceRouting-v0",
     (("cascade", True), ("budget", 0.01), ("on_exceed", "truncate"))):
        "4b1fe5f7e3689495ac31a9e5",
}


def _feed(digest: Any, value: Any) -> None:
    """Hash ``value`` with its type, so 1.0 and np.float64(1.0) differ."""
    digest.update(type(value).__name__.encode())
    if isinstance(value, np.ndarray):
        digest.update(str(value.dtype).encode() + str(value.shape).encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value):
            digest.update(str(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (bool, np.bool_)):
        digest.update(b"1" if value else b"0")
    elif isinstance(value, (float, np.floating)):
        digest.update(struct.pack("<d", float(value)))
    elif isinstance(value, (int, np.integer)):
        digest.update(str(int(value)).encode())
    else:
        raise TypeError(f"unexpected value {value!r} in a trajectory")


def trajectory_digest(env_id: str, kwargs: dict[str, Any], steps: int = STEPS) -> str:
    """sha256 of ``steps`` seeded random steps, resets, replays and oracle actions included."""
    env = gym.make(env_id, **kwargs)
    base = env.unwrapped
    rng = np.random.default_rng(7)
    digest = hashlib.sha256()
    env.reset(seed=5)
    replay = base.sample_tasks(3)
    obs, info = env.reset(seed=11)
    episode = 0
    for step in range(steps):
        if step == 0 or episode < 6:
            _feed(digest, base.oracle_action())
        action = rng.integers(0, 2, base.n_agents).astype(DTYPES[step % len(DTYPES)])
        obs, reward, terminated, truncated, info = env.step(action)
        for value in (obs, reward, terminated, truncated, info):
            _feed(digest, value)
        if terminated or truncated:
            episode += 1
            options = {"task": replay[episode % 3]} if episode % 4 == 0 and replay else None
            obs, info = env.reset(options=options)
            _feed(digest, obs)
            _feed(digest, info)
    env.close()
    return digest.hexdigest()[:24]


def test_every_registered_id_is_covered() -> None:
    assert {env_id for env_id, _ in CASES} == set(cost_envs.ENV_IDS)


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: f"{c[0]}{dict(c[1])}")
def test_trajectories_are_those_recorded_before_the_speed_ups(case) -> None:
    env_id, kwargs = case
    assert trajectory_digest(env_id, dict(kwargs)) == CASES[case]


def test_block_wrong_answers_follow_the_running_sum_rule() -> None:
    # ExpertRouting-v1 draws answer codes for a whole block at once; each must be the
    # code the documented rule gives one slip: distractor k iff the slip is below the
    # running sum attraction * (p_1 + ... + p_k), else the model's own wrong answer.
    from cost_envs.envs.expert_routing_v1 import DISTRACTOR_SHARES, wrong_answer, wrong_answers

    def one(slip: float, attraction: float, shares: tuple[float, ...], own: int) -> int:
        cumulative = 0.0
        for k, share in enumerate(shares, start=1):
            cumulative += attraction * share
            if slip < cumulative:
                return k
        return own

    rng = np.random.default_rng(3)
    n = 400
    shares = [DISTRACTOR_SHARES[int(k)] for k in rng.integers(1, 4, n)]
    attraction = rng.beta(2.0, 2.0, n)
    slips = rng.random((n, 2, 3))
    slips[:, 0, 0] = [q * s[0] for q, s in zip(attraction, shares, strict=True)]  # on a bound
    codes = wrong_answers(slips, attraction.tolist(), shares, 100 + np.arange(3))
    assert codes.shape == slips.shape
    seen = set()
    for b, t, i in np.ndindex(*slips.shape):
        expected = one(float(slips[b, t, i]), float(attraction[b]), shares[b], 100 + i)
        assert codes[b, t, i] == expected
        assert wrong_answer(float(slips[b, t, i]), float(attraction[b]), shares[b],
                            100 + i) == expected
        seen.add(expected)
    assert {1, 2, 3, 100, 101, 102} <= seen  # every distractor and every own answer occurs
