"""Limits checked before a large allocation: file sizes, memory estimates, resamples.

Every size a user can pass that turns into memory or time is checked here *before* the
allocation, and refused with a one-line ``ValueError`` naming the argument, its value and
the limit (rather than a ``MemoryError``, a SIGSEGV inside numpy or a run of minutes):

* files the loaders read (:func:`check_regular_file`): pools, price tables and configs
  (at most :data:`MAX_CONFIG_BYTES`), trace logs (at most :data:`MAX_TRACE_BYTES`),
  weights files (at most :data:`MAX_WEIGHTS_BYTES`: :mod:`agents.weight_files`); only
  regular files, never a character device or FIFO such as ``/dev/zero``;
* memory (:func:`check_memory`): an estimate against :func:`available_memory`, for the
  batched envs' ``num_envs`` (:func:`batched_env_bytes`), the multi-tenant envs'
  ``n_tenants`` (:func:`tenant_bytes`), training's ``n_envs x n_steps``
  (:func:`check_training_memory`: the batched env and PPO's rollout buffer), an
  evaluation's episodes and fitting tasks (:func:`evaluation_bytes`), recorded episodes
  (:func:`recording_bytes`) and TraceRouting's query features
  (:func:`feature_matrix_bytes`);
* bootstrap resamples: at most :data:`MAX_RESAMPLES`
  (:func:`cost_envs.metrics.bootstrap.check_bootstrap_args`).

The estimates are deliberately rough (measured on the envs of this package, rounded up):
they exist to refuse sizes that cannot fit, not to plan memory to the byte.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: Largest configuration file read (pools, price tables, profiles, checkpoint configs).
MAX_CONFIG_BYTES = 64 * 2**20
#: Largest trace log read (one CSV or JSONL file of logged outcomes).
MAX_TRACE_BYTES = 4 * 2**30
#: Largest weights file read (a model's, adapter's, base's or saved router's safetensors):
#: far above the allocators of at most ``MAX_WIDTH``-wide layers and the routers here.
MAX_WEIGHTS_BYTES = 4 * 2**30
#: Most bootstrap resamples: the percentile interval's Monte-Carlo error is already far
#: below any reported precision at 10,000; a million bounds time and memory.
MAX_RESAMPLES = 1_000_000
#: Memory a batched sub-env holds beyond two copies of its task queue (the queue and the
#: block drawn at a reset): observations, prices, bookkeeping, transients (measured on
#: main at 512 sub-envs: the estimate is within 0.6-1.9 times the peak of every family).
SUB_ENV_OVERHEAD = 16 * 2**10
#: Memory of a single env (a tenant) per byte of its task block's arrays, and beyond it:
#: the tasks built from the block are Python objects (measured on main: 2.5-14 times the
#: block's arrays, 130-440 KiB an env).
SINGLE_ENV_FACTOR = 5
SINGLE_ENV_OVERHEAD = 128 * 2**10
#: Bytes per sub-env and step of an on-policy rollout buffer beyond its observations and
#: actions: SB3's rewards, returns, episode starts, values, log-probabilities and
#: advantages (float32), each flattened once more by ``RolloutBuffer.get``, and a
#: minibatch index (int64).
ROLLOUT_SCALARS = 6
#: Memory one evaluated episode holds until its method is summarised: its record (per-agent
#: call counts and the scalars) and its return (measured 1.5 KiB on ToolBench-v0's 8
#: agents).
EPISODE_BYTES = 2 * 2**10
#: Memory one training task of a fitted method (best-rule, difficulty-threshold) holds
#: while it is fitted: the task and the observations the search keeps (measured 0.7-7.0
#: KiB at the peak of drawing them, over the families).
FIT_TASK_BYTES = 8 * 2**10
#: Memory one recorded step of an exported episode holds until the dataset is written,
#: beyond its observation: the action, the reward and flags, the info as a flat dict
#: (measured 1.0-2.8 KiB a step over the families).
RECORDED_STEP_BYTES = 4 * 2**10
#: Bytes per query and feature of TraceRouting's hashed features at their peak: the
#: float64 counts, their damped copy and a temporary, the float32 result and the
#: observation rows built from it.
FEATURE_CELL_BYTES = 32
_FLOAT = 4


def check_regular_file(path: str | Path, what: str, max_bytes: int) -> int:
    """The size of ``path`` after checking it is a regular file of at most ``max_bytes``.

    Symbolic links are followed. A character device (``/dev/zero``), a FIFO, a socket or
    a directory is refused: reading one could block or never end.

    Args:
        path: The file.
        what: What the file is, for the message (``"trace file"``, ``"pool"``).
        max_bytes: The largest size accepted.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: One line naming ``what``, the path and the limit.
    """
    mode = os.stat(path)  # follows links; FileNotFoundError names the path
    if not stat.S_ISREG(mode.st_mode):
        kind = ("a directory" if stat.S_ISDIR(mode.st_mode) else
                "a character device" if stat.S_ISCHR(mode.st_mode) else
                "a FIFO" if stat.S_ISFIFO(mode.st_mode) else
                "a block device" if stat.S_ISBLK(mode.st_mode) else
                "a socket" if stat.S_ISSOCK(mode.st_mode) else "not a file")
        raise ValueError(f"{what}: {path} is {kind}; expected a regular file of at most "
                         f"{_size(max_bytes)}")
    if mode.st_size > max_bytes:
        raise ValueError(f"{what}: {path} is {_size(mode.st_size)}, more than the limit of "
                         f"{_size(max_bytes)}")
    return mode.st_size


def available_memory() -> int | None:
    """Bytes of memory this process can still allocate, or ``None`` when unknown.

    Linux's ``MemAvailable`` (``/proc/meminfo``), lowered to the cgroup's limit less its
    usage inside a container; elsewhere the free pages (``os.sysconf``).
    """
    found: list[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:  # cgroup v2: memory.max is "max" without a limit
        limit = Path("/sys/fs/cgroup/memory.max").read_text(encoding="ascii").strip()
        if limit != "max":
            used = Path("/sys/fs/cgroup/memory.current").read_text(encoding="ascii").strip()
            found.append(max(0, int(limit) - int(used)))
    except (OSError, ValueError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError):
            return None
    return min(found)


def check_memory(estimate_bytes: float, what: str, hint: str = "") -> None:
    """Refuse when ``estimate_bytes`` exceeds :func:`available_memory`.

    Args:
        estimate_bytes: The memory the request needs.
        what: The argument and its value (``"num_envs=1000000"``), for the message.
        hint: What to do instead (``"use fewer sub-envs"``), appended to the message.

    Raises:
        ValueError: One line naming ``what``, the estimate and the memory available.
    """
    available = available_memory()
    if available is None or estimate_bytes <= available:
        return
    raise ValueError(f"{what} needs about {_size(estimate_bytes)} of memory, more than the "
                     f"{_size(available)} available{'; ' + hint if hint else ''}")


def task_block_bytes(env: Any) -> int:
    """Bytes of the arrays of one block of ``env``'s tasks (0 if it draws no blocks).

    Drawn with a throwaway generator through the env's own ``draw_block``, so the figure
    follows the env's arguments (a larger pool, longer tasks); the env is not changed.
    """
    draw = getattr(env, "draw_block", None)
    if draw is None:
        return 0
    return _nbytes(draw(np.random.default_rng(0), int(getattr(env, "task_block", 64))))


def batched_env_bytes(single_env: Any, num_envs: int) -> int:
    """Estimated peak memory of a batched env of ``num_envs`` sub-envs of ``single_env``.

    Per sub-env: its task queue twice (the queue and the block drawn at a reset) and
    :data:`SUB_ENV_OVERHEAD`.
    """
    return num_envs * (2 * task_block_bytes(single_env) + SUB_ENV_OVERHEAD)


def tenant_bytes(single_env: Any, n_tenants: int) -> int:
    """Estimated memory of ``n_tenants`` single envs like ``single_env`` after a reset."""
    per_env = SINGLE_ENV_FACTOR * task_block_bytes(single_env) + SINGLE_ENV_OVERHEAD
    return n_tenants * per_env


def rollout_bytes(n_envs: int, n_steps: int, obs_size: int, action_size: int) -> int:
    """Memory of an on-policy rollout buffer of ``n_envs x n_steps`` steps (SB3's PPO).

    Observations, actions and :data:`ROLLOUT_SCALARS` float32 per step, twice (the buffer
    and its flattened copy), and an int64 minibatch index.
    """
    per_step = 2 * _FLOAT * (obs_size + action_size + ROLLOUT_SCALARS) + 8
    return n_envs * n_steps * per_step


def check_training_memory(env: Any, n_envs: int, n_steps: int,
                          env_kwargs: Mapping[str, Any] | None = None) -> None:
    """Refuse ``n_envs x n_steps`` when the batched env and the rollout buffer cannot fit.

    Args:
        env: A single env of the training id, or the id (made with ``env_kwargs``).
        n_envs: Sub-envs of the batched env.
        n_steps: PPO's steps per sub-env and rollout.
        env_kwargs: The env's arguments when ``env`` is an id.

    Raises:
        ValueError: One line naming ``n_envs``, ``n_steps``, the estimate and the memory
            available.
    """
    if isinstance(env, str):
        import gymnasium as gym

        made = gym.make(env, **dict(env_kwargs or {}))
        try:
            check_training_memory(made, n_envs, n_steps)
        finally:
            made.close()
        return
    obs = int(np.prod(env.observation_space.shape))
    action = int(np.prod(env.action_space.shape))
    estimate = (rollout_bytes(n_envs, n_steps, obs, action)
                + batched_env_bytes(env.unwrapped, n_envs))
    check_memory(estimate, f"n_envs={n_envs} x n_steps={n_steps} (the batched env and the "
                 "PPO rollout buffer)", "lower n_envs or n_steps")


def evaluation_bytes(episodes: int, runs: int = 1, fit_tasks: int = 0) -> int:
    """Estimated peak memory of evaluating ``runs`` methods on ``episodes`` episodes each.

    Every method's episodes are kept until all are summarised (:data:`EPISODE_BYTES`
    each); a fitted method draws ``fit_tasks`` training tasks first (:data:`FIT_TASK_BYTES`
    each, one method's at a time).
    """
    return episodes * runs * EPISODE_BYTES + fit_tasks * FIT_TASK_BYTES


def recording_bytes(episodes: int, steps_per_episode: float, observation_bytes: int) -> int:
    """Estimated memory of ``episodes`` recorded episodes kept until a dataset is written.

    Per step :data:`RECORDED_STEP_BYTES` and the observation, per episode one observation
    more (the reset's).
    """
    per_episode = (steps_per_episode + 1) * (RECORDED_STEP_BYTES + observation_bytes)
    return int(episodes * per_episode)


def feature_matrix_bytes(n_queries: int, n_features: int) -> int:
    """Peak memory of ``n_features`` hashed features of ``n_queries`` queries."""
    return n_queries * n_features * FEATURE_CELL_BYTES


def _nbytes(value: Any, depth: int = 0) -> int:
    """Bytes of the numpy arrays in ``value`` (arrays, tuples, lists, dicts, objects)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if depth > 3:
        return 0
    if isinstance(value, Mapping):
        return sum(_nbytes(v, depth + 1) for v in value.values())
    if isinstance(value, tuple | list):
        return sum(_nbytes(v, depth + 1) for v in value)
    if hasattr(value, "__dict__"):
        return sum(_nbytes(v, depth + 1) for v in vars(value).values())
    return 0


def _size(n_bytes: float) -> str:
    """``n_bytes`` for a message: ``"32.0 GiB"``, ``"512 KiB"``, ``"17 bytes"``."""
    if n_bytes < 1024:
        return f"{int(n_bytes)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n_bytes /= 1024
        if n_bytes < 1024 or unit == "TiB":
            return f"{n_bytes:.1f} {unit}"
    raise AssertionError("unreachable")
