"""The batched envs' task queues over long runs: the same tasks, drawn in one pass per step.

Issue #26 item 11: every sub-env that runs out of tasks in a step gets its next block from
one vectorised pass over all of them (only the draws from each sub-env's own generator run
sub-env by sub-env) instead of one ``draw_block`` each. The trajectories stay those of the
per-sub-env draw, bit for bit: the digests below were recorded from the code before that
change (a sha256 over everything ``reset`` and ``step`` return over a long run with many
refills, reseeded and masked resets in it), so a change in the order of any random draw,
in a queued value or in an info dtype changes them.
"""

from __future__ import annotations

import hashlib
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from cost_envs.registration import VECTOR_IDS

N = 32
STEPS = 3000

#: (id, autoreset mode) -> digest of :func:`long_run_digest`, recorded before issue #26.
DIGESTS: dict[tuple[str, str], str] = {
    ("cost_envs/AgenticRouting-v0", "NextStep"): "2fe161111689f38203805003",
    ("cost_envs/AgenticRouting-v0", "SameStep"): "7826ccd590b13c72c6d98811",
    ("cost_envs/ExpertRouting-v0", "NextStep"): "a35181b17c0731b62fdca556",
    ("cost_envs/ExpertRouting-v0", "SameStep"): "942b6114cf0d9979761f98ae",
    ("cost_envs/ExpertRouting-v1", "NextStep"): "c773eef591a4714f1329120d",
    ("cost_envs/ExpertRouting-v1", "SameStep"): "d24a18651c095f76086268a2",
    ("cost_envs/FlightPlanner-v0", "NextStep"): "b42c3d942b91e0a6236aa4b6",
    ("cost_envs/FlightPlanner-v0", "SameStep"): "cddd7b132260d1d5d1570005",
    ("cost_envs/FlightPlanner-v1", "NextStep"): "25b75bfdc014131fb9990d31",
    ("cost_envs/FlightPlanner-v1", "SameStep"): "abf9d441da444f863020e2b7",
    ("cost_envs/ToolBench-v0", "NextStep"): "65362189e7dc096b00de930b",
    ("cost_envs/ToolBench-v0", "SameStep"): "f56cebf59838c8b0ffe86a1e",
    ("cost_envs/TraceRouting-v0", "NextStep"): "9cdfb77a3f8c4f1de171d24b",
    ("cost_envs/TraceRouting-v0", "SameStep"): "aef544edc902cd3a59483185",
}


def _feed(digest: Any, value: Any) -> None:
    """Hash ``value`` with its type, dtype and shape (dicts key by key, sorted)."""
    digest.update(type(value).__name__.encode())
    if isinstance(value, dict):
        for key in sorted(value):
            digest.update(key.encode())
            _feed(digest, value[key])
    elif isinstance(value, np.ndarray) and value.dtype == object:
        for item in value:
            _feed(digest, item)
    elif isinstance(value, np.ndarray):
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif value is None:
        digest.update(b"None")
    else:
        raise TypeError(f"unexpected value {value!r} in a batched trajectory")


def long_run_digest(env_id: str, mode: AutoresetMode, steps: int = STEPS,
                    num_envs: int = N) -> tuple[str, int]:
    """sha256 of a seeded run of random actions, and how many episodes ended in it.

    Every sub-env is reseeded twice: all at once at the start, every third one (by
    ``reset_mask``) a third of the way in, so queues are refilled both in bulk and one
    sub-env at a time, at staggered steps.
    """
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                       autoreset_mode=mode)
    rng = np.random.default_rng(1)
    digest = hashlib.sha256()
    obs, info = env.reset(seed=[100 + 7 * i for i in range(num_envs)])
    _feed(digest, obs)
    ends = 0
    m = env.single_action_space.n
    for step in range(steps):
        if step == steps // 3:
            mask = np.arange(num_envs) % 3 == 0
            seeds = [None if not mask[i] else 5000 + i for i in range(num_envs)]
            obs, info = env.reset(seed=seeds, options={"reset_mask": mask})
            _feed(digest, obs)
            _feed(digest, info)
        actions = rng.integers(0, 2, (num_envs, m)).astype(np.int8)
        actions[rng.random(num_envs) < 0.15] = 0
        obs, reward, terminated, truncated, info = env.step(actions)
        for value in (obs, reward, terminated, truncated, info):
            _feed(digest, value)
        ends += int((terminated | truncated).sum())
    env.close()
    return digest.hexdigest()[:24], ends


CASES = [(env_id, mode) for env_id in sorted(VECTOR_IDS)
         for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1].value}")
def test_long_runs_are_those_of_the_per_sub_env_draw(case) -> None:
    env_id, mode = case
    digest, ends = long_run_digest(env_id, mode)
    task_block = gym.make_vec(env_id, num_envs=1,
                              vectorization_mode="vector_entry_point").unwrapped.task_block
    assert ends >= 3 * N * task_block  # several refills per sub-env, most of them mid-run
    assert digest == DIGESTS[(env_id, mode.value)]


def test_every_batched_id_is_covered() -> None:
    assert {env_id for env_id, _ in DIGESTS} == set(VECTOR_IDS)


if __name__ == "__main__":  # print the digests (to record them)
    for env_id, mode in CASES:
        print(f"    ({env_id!r}, {mode.value!r}): {long_run_digest(env_id, mode)!r},")


#: Ids whose single-env ``draw_block`` derives much beyond the generator's calls, and the
#: module-level function of that derivation the batched env calls (once per pass).
DERIVED = {
    "cost_envs/FlightPlanner-v0": ("cost_envs.vector.flight_planner", "derive_networks"),
    "cost_envs/FlightPlanner-v1": ("cost_envs.vector.flight_planner", "derive_networks"),
    "cost_envs/ToolBench-v0": ("cost_envs.vector.toolbench", "derive_block"),
}


@pytest.mark.parametrize("env_id", sorted(DERIVED))
def test_a_refill_derives_every_sub_envs_block_in_one_pass(env_id, monkeypatch) -> None:
    # Per refilling sub-env only its generator's calls run; the derivation of the tasks
    # (for FlightPlanner the search for trips too) runs once over all of them, and the
    # single env's per-block draw_block never.
    import importlib

    from cost_envs.vector import base

    chunk = getattr(base, "REFILL_CHUNK", 64)
    env = gym.make_vec(env_id, num_envs=chunk + 8,
                       vectorization_mode="vector_entry_point").unwrapped
    module, name = DERIVED[env_id]
    calls = {"derive": 0, "draw_block": 0}
    derive = getattr(importlib.import_module(module), name, None)

    def counted(*args: Any) -> Any:
        calls["derive"] += 1
        return derive(*args)

    def draw_block(*args: Any) -> Any:
        calls["draw_block"] += 1
        return type(env.single_env).draw_block(env.single_env, *args)

    if derive is not None:
        monkeypatch.setattr(module + "." + name, counted)
    monkeypatch.setattr(env.single_env, "draw_block", draw_block)
    env.reset(seed=0)  # every sub-env draws: two passes (a chunk and 8 sub-envs)
    assert calls == {"derive": 2, "draw_block": 0}
    env._queued[:chunk] = env.task_block  # a chunk of sub-envs run out of tasks at once
    env._begin(np.arange(chunk))
    assert calls == {"derive": 3, "draw_block": 0}
