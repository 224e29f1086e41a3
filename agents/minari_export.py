"""Rollouts of any allocator, and the supervised warm-start data, as Minari datasets.

Offline-RL users load what this writes with ``minari.load_dataset(dataset_id)`` (with
``MINARI_DATASETS_PATH`` set to the directory) and remake the env with
``dataset.recover_environment()``:

* :func:`export_rollouts`: ``episodes`` episodes of an allocator (a baseline, a planner,
  a trained model, anything with SB3's ``predict``) on any registered env, played by the
  project's one rollout loop (:func:`agents.evaluation.rollout`) on the fixed task set
  of ``seed``, so the dataset holds exactly the episodes :func:`agents.evaluation.evaluate`
  scores;
* :func:`export_supervised`: the episodes the LoRA supervised stage learns from
  (:func:`agents.learners.supervised.traces_for`): its teacher (greedy heuristic or planner)
  on the tasks of ``TRACE_TASK_SEED + seed``. The stage's (observation, target action)
  pairs are each episode's ``observations[:-1]`` and ``actions``, in order.

Logged outcomes of real models are exported by
:func:`cost_envs.traces.minari_export.export_traces`; the storage, ids and the
all-or-nothing write are :mod:`cost_envs.minari_io`'s. Needs the ``minari`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.evaluation import build_allocator, check_binding, rollout
from agents.progress import progress_bar
from agents.seeds import TRACE_TASK_SEED
from cost_envs.config import integer
from cost_envs.limits import check_memory, recording_bytes
from cost_envs.minari_io import (
    EpisodeRecorder,
    check_new_dataset,
    datasets_root,
    default_dataset_id,
    require_minari,
    write_dataset,
)


def record_rollouts(allocator: Any, env: gym.Env, episodes: int, seed: int,
                    deterministic: bool = True, progress: bool = False
                    ) -> list[EpisodeRecorder]:
    """``episodes`` episodes of ``allocator`` on ``env``, the first reset with ``seed``.

    The task set is :func:`agents.evaluation.evaluate`'s: the same seed gives the same
    tasks to every allocator. Every episode is kept until the dataset is written, so after
    the first one the memory all of them need is estimated from its length
    (:func:`cost_envs.limits.recording_bytes`) and a count that cannot fit is refused.

    Raises:
        ValueError: A bad count or seed, or ``episodes`` that cannot fit in memory (one
            line naming ``episodes``).
    """
    integer(episodes, "episodes", minimum=1)
    integer(seed, "seed", minimum=0)
    check_binding(allocator, env)
    recorded = []
    with progress_bar(episodes, "minari: episodes", progress, "episode") as bar:
        for index in range(episodes):
            first = seed if index == 0 else None
            recorder = EpisodeRecorder(env.action_space.dtype, seed=first)
            rollout(allocator, env, seed=first, deterministic=deterministic,
                    observer=recorder)
            recorded.append(recorder)
            if index == 0:
                check_memory(recording_bytes(episodes, len(recorder.actions),
                                             recorder.observations[0].nbytes),
                             f"episodes={episodes} (kept until the dataset is written)",
                             "export fewer episodes")
            bar.update(1)
    return recorded


def _env_name(env_id: str) -> str:
    return env_id.split("/")[-1]


def _made(env_id: str, env_kwargs: Mapping[str, Any] | None) -> gym.Env:
    if not isinstance(env_id, str):
        raise ValueError(f"env_id: expected a registered id string, got {env_id!r}")
    return gym.make(env_id, **dict(env_kwargs or {}))


def export_rollouts(
    env_id: str,
    policy: Any,
    episodes: int,
    out: str | os.PathLike[str] | None = None,
    dataset_id: str | None = None,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    deterministic: bool = True,
    progress: bool = False,
    author: str | None = None,
) -> Path:
    """Play ``policy`` for ``episodes`` episodes on ``env_id`` and write a Minari dataset.

    Args:
        env_id: A registered id, e.g. ``cost_envs/ToolBench-v0``.
        policy: An allocator (anything with SB3's ``predict``) or a factory ``env ->
            allocator`` (a baseline class is its own factory; privileged ones such as the
            oracle must be given as a factory, to be built on the env played).
        episodes: Number of episodes, >= 1.
        out: The datasets directory; ``None`` reads ``$MINARI_DATASETS_PATH``.
        dataset_id: Default ``<env_id>/<name>-v0``.
        seed: Seed of the task set (the first reset's).
        env_kwargs: ``gym.make`` arguments (JSON values: they are stored for
            ``recover_environment``).
        name: The policy's name, stored as Minari's ``algorithm_name`` and used in the
            default id; default the class name of the allocator.
        deterministic: Passed to ``predict``.
        progress: Draw a progress bar on a terminal.
        author: Who made the dataset (default: :data:`cost_envs.minari_io.DEFAULT_AUTHOR`).

    Returns:
        The dataset's directory.

    Raises:
        ValueError: One line, before anything is written: a bad id, count or seed, no
            directory, an existing dataset, a policy that is not one.
    """
    require_minari()
    integer(episodes, "episodes", minimum=1)
    integer(seed, "seed", minimum=0)
    if dataset_id is None and name is not None:
        dataset_id = default_dataset_id(env_id, name)
    if dataset_id is not None:  # before a fitted policy is fitted
        check_new_dataset(dataset_id, out)
    datasets_root(out)
    env = _made(env_id, env_kwargs)
    try:
        allocator = build_allocator(policy, env, name or "policy")
        label = name or type(allocator).__name__
        dataset_id = dataset_id or default_dataset_id(env_id, label)
        check_new_dataset(dataset_id, out)  # before the episodes are played
        recorded = record_rollouts(allocator, env, episodes, seed, deterministic, progress)
        return write_dataset(dataset_id, recorded, env, out, algorithm_name=label, author=author,
                             description=f"{episodes} episodes of {label} on "
                                         f"{_env_name(env_id)}, task seed {seed}")
    finally:
        env.close()


def export_supervised(
    env_id: str,
    out: str | os.PathLike[str] | None = None,
    dataset_id: str | None = None,
    seed: int = 0,
    config: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
    progress: bool = False,
    author: str | None = None,
) -> Path:
    """Write the supervised warm-start stage's teacher episodes as a Minari dataset.

    The episodes are those :func:`agents.learners.training.train` collects for training seed
    ``seed`` (:func:`agents.learners.supervised.traces_for` on the tasks of
    ``TRACE_TASK_SEED + seed``), so the stage's observations and labels are the dataset's
    ``observations[:-1]`` and ``actions``, episode after episode.

    Args:
        env_id: A registered id.
        out: The datasets directory; ``None`` reads ``$MINARI_DATASETS_PATH``.
        dataset_id: Default ``<env_id>/supervised-<teacher>-v0``.
        seed: The training seed (the tasks are ``TRACE_TASK_SEED + seed``'s).
        config: A :class:`agents.learners.supervised.SupervisedConfig` (episodes, teacher,
            threshold); ``None`` is the stage's default (1500 greedy episodes).
        env_kwargs: ``gym.make`` arguments (JSON values).
        progress: Draw a progress bar on a terminal.
        author: Who made the dataset (default: :data:`cost_envs.minari_io.DEFAULT_AUTHOR`).

    Returns:
        The dataset's directory.
    """
    require_minari()
    from agents.learners.supervised import SupervisedConfig, teacher_for  # loads torch

    config = SupervisedConfig() if config is None else config
    if not isinstance(config, SupervisedConfig):
        raise ValueError(f"config: expected a SupervisedConfig or None, got "
                         f"{type(config).__name__}")
    integer(seed, "seed", minimum=0)
    label = f"supervised-{config.teacher}"
    dataset_id = dataset_id or default_dataset_id(env_id, label)
    check_new_dataset(dataset_id, out)
    env = _made(env_id, env_kwargs)
    try:
        teacher = teacher_for(env, config)
        recorded = record_rollouts(teacher, env, config.episodes, TRACE_TASK_SEED + seed,
                                   progress=progress)
        return write_dataset(dataset_id, recorded, env, out, algorithm_name=label, author=author,
                             description=f"the LoRA supervised stage's {config.teacher} "
                                         f"teacher on {_env_name(env_id)}: "
                                         f"{config.episodes} episodes, training seed {seed}")
    finally:
        env.close()
