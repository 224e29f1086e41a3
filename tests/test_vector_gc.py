"""Single envs under SB3's or Gymnasium's vector envs: no garbage collection work in steps.

Issue #26 item 13: ``SyncVectorEnv`` (or ``DummyVecEnv``) over 1,024 single ToolBench envs
lost half its speed once tasks were redrawn. Each env queued its block of 64 drawn tasks
as Python objects (a dataclass per task, its tables as nested lists: about 1,300 objects
the garbage collector tracks per ToolBench env, 2,300 per FlightPlanner env); every draw
allocated that many, triggering young collections that promoted them, and full
collections then traversed the million queued objects of all the envs, freeing nothing.
The queue now holds the block's arrays (:class:`cost_envs.task_blocks.TaskBlock`) and
builds a task when the env reaches it, so a step or a draw allocates tracked objects only
for the episode that starts.
"""

from __future__ import annotations

import gc
import types
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the ids)

#: Ids whose queues build their tasks when reached (ExpertRouting's queues its questions'
#: objects still: about 560 tracked objects per env, one full collection per 400 batches of
#: 1,024 envs).
LAZY = ["cost_envs/AgenticRouting-v0", "cost_envs/FlightPlanner-v0",
        "cost_envs/FlightPlanner-v1", "cost_envs/ToolBench-v0", "cost_envs/TraceRouting-v0"]


def tracked_reachable(root: Any, env: Any) -> int:
    """How many gc-tracked objects ``root`` keeps alive of its own (itself included).

    Not counted, nor followed: the env, classes, modules; a function is followed into its
    closure only (its globals are its module's).
    """
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if (id(obj) in seen or not gc.is_tracked(obj) or obj is env
                or isinstance(obj, type | types.ModuleType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            stack.extend(cell.cell_contents for cell in obj.__closure__ or ())
        else:
            stack.extend(gc.get_referents(obj))
    return len(seen)


@pytest.mark.parametrize("env_id", LAZY)
def test_the_task_queue_holds_no_tracked_objects_per_task(env_id: str) -> None:
    env = gym.make(env_id)
    base = env.unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(3 * base.task_block + 5):  # past two redraws
        while True:
            *_, terminated, truncated, _ = env.step(rng.integers(0, 2, base.n_agents))
            if terminated or truncated:
                break
        env.reset()
    gc.collect()  # untracks what can be (tuples and dicts of atoms)
    # a TaskBlock, its builder and the builder's tuple of arrays; no task
    assert tracked_reachable(base._task_queue, base) <= 8
    assert len(base._task_queue) == base.task_block


def test_vector_steps_with_redraws_trigger_almost_no_collections() -> None:
    # 16 ToolBench envs in SyncVectorEnv, 1,500 batches: every env redraws its block
    # about five times. Before, every draw allocated ~1,300 tracked objects that outlived
    # it (kept so by a draw, 78 young collections here, 315 with 64 envs); now the steps
    # and draws allocate next to none that outlive them.
    n, batches = 16, 1500
    env = gym.make_vec("cost_envs/ToolBench-v0", num_envs=n, vectorization_mode="sync")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (batches, n, 8)).astype(np.int8)
    counts = [0, 0, 0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            counts[info["generation"]] += 1

    ends = 0
    gc.collect()
    gc.callbacks.append(count)
    try:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            ends += int((terminated | truncated).sum())
    finally:
        gc.callbacks.remove(count)
    assert ends >= 4 * n * 64  # several redraws per env
    assert sum(counts) <= 20, counts
