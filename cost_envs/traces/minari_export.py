"""Logged outcomes (:class:`cost_envs.traces.TraceDataset`) as a Minari dataset.

A trace file logs, for each query, what *every* model answered. As offline-RL data that
is one ``cost_envs/TraceRouting-v0`` episode per (query, model): the env is reset to the
query (``options={"task": ...}``) and model ``j`` alone is called (the one-hot action;
with ``cascade=True`` the answer is then accepted by the all-zero action). The episodes
are played in the env itself, so observations, rewards and infos are exactly what the
env gives: ``success`` is the logged correctness, ``quality`` 10 x the logged score,
``cost`` the logged cost (or tokens x price), as :class:`TraceRoutingEnv` replays them.
Each episode's metadata names its ``query_id``, ``query`` (row in the env's split) and
``model``. Episodes come query by query, models in the env's order.

Needs the ``minari`` extra (:mod:`cost_envs.minari_io`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from cost_envs.envs.trace_routing import TraceRoutingEnv, TraceTask
from cost_envs.minari_io import (
    EpisodeRecorder,
    check_new_dataset,
    default_dataset_id,
    require_minari,
    write_dataset,
)

ENV_ID = "cost_envs/TraceRouting-v0"
#: The dataset name of :func:`export_traces` by default: ``<ENV_ID>/logged-v0``.
DEFAULT_NAME = "logged"


def _data_argument(data: str | os.PathLike[str] | None) -> str | None:
    """A trace path as an absolute string (stored in the spec, remade anywhere)."""
    if data is None:
        return None
    if not isinstance(data, (str, os.PathLike)):
        raise ValueError(f"data: expected a path to a trace file or None (the packaged "
                         f"example), got {type(data).__name__}; a TraceDataset object "
                         "cannot be stored for recover_environment")
    path = Path(data).expanduser().absolute()
    if not path.exists():
        raise ValueError(f"data: no such file or directory: {path}")
    return str(path)


def trace_episodes(env: gym.Env) -> list[EpisodeRecorder]:
    """Every (query, model) episode of a made TraceRouting env, played in it.

    Args:
        env: From ``gym.make("cost_envs/TraceRouting-v0", ...)`` (any split, models,
            prices, cascade; a budget wrapper may mask calls, as it would online).
    """
    base = env.unwrapped
    if not isinstance(base, TraceRoutingEnv):
        raise ValueError(f"env: expected {ENV_ID}, got {type(base).__name__}")
    data, m = base.dataset, base.n_agents
    zeros = np.zeros(m, dtype=np.int8)
    episodes = []
    for query, query_id in enumerate(data.query_ids):
        task = TraceTask(query, query_id, m, data.fingerprint)
        for model in range(m):
            recorder = EpisodeRecorder(env.action_space.dtype, metadata={
                "query_id": query_id, "query": query, "model": data.models[model]})
            recorder.reset(*env.reset(options={"task": task}))
            action = np.zeros(m, dtype=np.int8)
            action[model] = 1
            while not recorder.done:
                recorder.step(action, *env.step(action))
                action = zeros  # a cascade's second step accepts the answer bought
            episodes.append(recorder)
    return episodes


def export_traces(
    data: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    dataset_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    author: str | None = None,
) -> Path:
    """Write every logged (query, model) outcome of ``data`` as a Minari dataset.

    Args:
        data: A trace file (any format :func:`cost_envs.traces.load_traces` reads), or
            ``None`` for the packaged synthetic example.
        out: The datasets directory; ``None`` reads ``$MINARI_DATASETS_PATH``.
        dataset_id: Default ``cost_envs/TraceRouting-v0/logged-v0``.
        env_kwargs: More ``gym.make`` arguments of TraceRouting-v0 (``split``,
            ``models``, ``prices``, ``cascade``, ...), JSON values.
        author: Who made the dataset (default: :data:`cost_envs.minari_io.DEFAULT_AUTHOR`).

    Returns:
        The dataset's directory.

    Raises:
        ValueError: One line, before anything is written (see
            :func:`cost_envs.minari_io.write_dataset`).
    """
    require_minari()
    dataset_id = dataset_id or default_dataset_id(ENV_ID, DEFAULT_NAME)
    check_new_dataset(dataset_id, out)  # before the env is built and the episodes played
    kwargs = dict(env_kwargs or {})
    if "data" in kwargs:
        raise ValueError("env_kwargs: pass the trace file as data=..., not in env_kwargs")
    path = _data_argument(data)
    if path is not None:
        kwargs["data"] = path
    env = gym.make(ENV_ID, **kwargs)
    try:
        episodes = trace_episodes(env)
        source = path or "the packaged synthetic example"
        return write_dataset(dataset_id, episodes, env, out, algorithm_name="logged-outcomes",
                             author=author,
                             description=f"every logged (query, model) outcome of {source} "
                                         "as one TraceRouting-v0 episode each")
    finally:
        env.close()
