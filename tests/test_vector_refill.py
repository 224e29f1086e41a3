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
#: Steps of each id's run: enough for at least three blocks of tasks per sub-env (the test
#: checks it) with a margin of a third or more; AgenticRouting's long episodes need 3000.
STEPS: dict[str, int] = {
    "cost_envs/AgenticRouting-v0": 3000,
    "cost_envs/ExpertRouting-v0": 1000,
    "cost_envs/ExpertRouting-v1": 1000,
    "cost_envs/FlightPlanner-v0": 2000,
    "cost_envs/FlightPlanner-v1": 2000,
    "cost_envs/ToolBench-v0": 1000,
    "cost_envs/TraceRouting-v0": 2400,
}

#: (id, autoreset mode) -> digest of :func:`long_run_digest`, recorded before issue #26
#: (by this function, ``steps=STEPS[id]``, run on commit fa94891, the last per-sub-env draw).
#: ToolBench-v0's were recorded again when its task draw became one call of float32
#: uniforms per block (issue #37 point 1: another task stream, the same law), from the
#: single env's path (``vectorization_mode="sync"``: SyncVectorEnv of single envs; the
#: old digests are what that path gave on the code before, so it is the reference).
DIGESTS: dict[tuple[str, str], str] = {
    ("cost_envs/AgenticRouting-v0", "NextStep"): "2fe161111689f38203805003",
    ("cost_envs/AgenticRouting-v0", "SameStep"): "7826ccd590b13c72c6d98811",
    ("cost_envs/ExpertRouting-v0", "NextStep"): "554129d306071e4c8fe24463",
    ("cost_envs/ExpertRouting-v0", "SameStep"): "9c9111e701a3e9007d3ab9c2",
    ("cost_envs/ExpertRouting-v1", "NextStep"): "36d68727a42d72a3f2a25900",
    ("cost_envs/ExpertRouting-v1", "SameStep"): "281856093f9fb35266934b90",
    ("cost_envs/FlightPlanner-v0", "NextStep"): "49330c676b6c0b59ffa05a55",
    ("cost_envs/FlightPlanner-v0", "SameStep"): "22f0db1d8355c0c1a8a5c5ae",
    ("cost_envs/FlightPlanner-v1", "NextStep"): "da86912e888d3a6a706c53ae",
    ("cost_envs/FlightPlanner-v1", "SameStep"): "9e1c4e9dc5240fdbdde0b7d9",
    ("cost_envs/ToolBench-v0", "NextStep"): "a0c863489e8d1b4521ec0574",
    ("cost_envs/ToolBench-v0", "SameStep"): "80e90b8ab8d7f75a9db47bff",
    ("cost_envs/TraceRouting-v0", "NextStep"): "6007b85bb71741145bc6ffa5",
    ("cost_envs/TraceRouting-v0", "SameStep"): "e51f1d5a5cfb848e867ed8a2",
}


def _feed(digest: Any, value: Any) -> None:
    """Hash ``value`` with its type, dtype and shape (dicts key by key, sorted).

    The bytes are gathered and hashed in one ``update`` (the same sha256 as one update
    per piece), and each type's name and each (dtype, shape) header is formatted once.
    """
    parts: list[bytes] = []
    _gather(parts, value)
    digest.update(b"".join(parts))


_NAMES: dict[type, bytes] = {}
_HEADERS: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}


def _gather(parts: list[bytes], value: Any) -> None:
    kind = type(value)
    name = _NAMES.get(kind)
    if name is None:
        name = _NAMES[kind] = kind.__name__.encode()
    parts.append(name)
    if isinstance(value, dict):
        for key in sorted(value):
            parts.append(key.encode())
            _gather(parts, value[key])
    elif isinstance(value, np.ndarray) and value.dtype == object:
        for item in value:
            _gather(parts, item)
    elif isinstance(value, np.ndarray):
        header = _HEADERS.get((value.dtype, value.shape))
        if header is None:
            header = _HEADERS[value.dtype, value.shape] = f"{value.dtype}{value.shape}".encode()
        parts.append(header)
        parts.append(value.tobytes())
    elif value is None:
        parts.append(b"None")
    else:
        raise TypeError(f"unexpected value {value!r} in a batched trajectory")


def long_run_digest(env_id: str, mode: AutoresetMode, steps: int | None = None,
                    num_envs: int = N,
                    vectorization_mode: str = "vector_entry_point") -> tuple[str, int]:
    """sha256 of a seeded run of random actions, and how many episodes ended in it.

    Every sub-env is reseeded twice: all at once at the start, every third one (by
    ``reset_mask``) a third of the way in, so queues are refilled both in bulk and one
    sub-env at a time, at staggered steps. ``steps`` is ``STEPS[env_id]`` unless given.
    ``vectorization_mode="sync"`` runs the same through ``SyncVectorEnv`` of single envs
    (the path a digest is recorded from: the batched env must equal it).
    """
    steps = STEPS[env_id] if steps is None else steps
    if vectorization_mode == "sync":
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                           vector_kwargs={"autoreset_mode": mode})
    else:
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=vectorization_mode,
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
#: The same-step runs in the slow tier: the autoreset modes differ only in the shared
#: base (cost_envs/vector/base.py), whose same-step path the fast tier holds to
#: SyncVectorEnv in tests/test_vector_expert_routing.py; each id's own refill runs here in
#: the next-step runs (every mode and id: tests/test_vector.py, slow).
PARAMS = [pytest.param(case, marks=pytest.mark.slow) if case[1] is AutoresetMode.SAME_STEP
          else case for case in CASES]


@pytest.mark.parametrize("case", PARAMS, ids=lambda c: f"{c[0]}-{c[1].value}")
def test_long_runs_are_those_of_the_per_sub_env_draw(case) -> None:
    env_id, mode = case
    digest, ends = long_run_digest(env_id, mode)
    task_block = gym.make_vec(env_id, num_envs=1,
                              vectorization_mode="vector_entry_point").unwrapped.task_block
    assert ends >= 3 * N * task_block  # several refills per sub-env, most of them mid-run
    assert digest == DIGESTS[(env_id, mode.value)]


def test_every_batched_id_is_covered() -> None:
    assert {env_id for env_id, _ in DIGESTS} == set(STEPS) == set(VECTOR_IDS)


if __name__ == "__main__":  # print the digests (to record them), from the single envs' path
    for env_id, mode in CASES:
        print(f"    ({env_id!r}, {mode.value!r}): "
              f"{long_run_digest(env_id, mode, vectorization_mode='sync')!r},")


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
