"""Episodes of any cost-envs environment as Minari datasets (the ``minari`` extra).

`Minari <https://minari.farama.org>`_ is Farama's format for offline-RL datasets: an
offline-RL user loads one with ``minari.load_dataset(dataset_id)`` and remakes its env
with ``dataset.recover_environment()``. This module is the one place that turns played
episodes into such a dataset:

* :class:`EpisodeRecorder` takes an episode's ``reset`` and ``step`` results (it is the
  observer :func:`agents.evaluation.rollout` feeds, and what
  :mod:`cost_envs.traces.minari_export` fills) and keeps them as a Minari episode:
  ``T + 1`` observations, ``T`` actions, rewards, terminations and truncations, and the
  infos (``cost``, ``flops``, ``calls`` at every step; ``success``, ``quality``,
  ``episode_cost``, ``episode_flops`` at the last);
* :func:`write_dataset` writes the episodes as one dataset (Arrow storage), with the
  env's spec so that ``recover_environment`` gives the same id and ``gym.make`` kwargs;
* :func:`load_dataset` reads one back from an explicit directory.

**Where datasets land.** In the directory given as ``out``, or, without one, in
``$MINARI_DATASETS_PATH``; never in Minari's default ``~/.minari`` (no ``out`` and no
variable is an error). ``minari.load_dataset(dataset_id)`` finds a dataset when
``MINARI_DATASETS_PATH`` names that directory. Nothing touches the network.

**All or nothing.** A dataset is written into a hidden staging folder beside its
destination and moved into place by one rename once complete; on any error the staging
folder is removed, so a failed export leaves no dataset behind. (Minari reads its target
directory from the environment variable, which :func:`write_dataset` sets for the
duration of the write: do not run two writes in threads of one process.)

**Infos.** Minari stores each info key as one column over the episode's ``T + 1``
entries (entry 0 is ``reset``'s info). A key some entries lack is filled there: ``NaN``
for numbers (integers become floats), ``False`` for flags, zeros for arrays, ``""`` for
text. So ``success`` is ``False`` before an episode's last step and ``quality`` ``NaN``;
read the outcome at index ``-1``. Nested mappings (a wrapper's ``info["episode"]``) are
flattened to ``"episode.r"`` keys. Every episode of a dataset has the same keys.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from cost_envs.extras import import_extra, require_extra

#: The environment variable Minari reads its dataset directory from.
DATASETS_PATH_VARIABLE = "MINARI_DATASETS_PATH"
#: ``namespace/name-vN`` with at least one namespace, as Minari parses dataset ids.
DATASET_ID = re.compile(r"^(?P<namespace>[-_\w][-_\w/]*[-_\w]+)/(?P<name>[-_\w]+?)-v(\d+)$")
#: What needs the extra, in its ImportError.
WHAT = "exporting a Minari dataset"
#: Minari's storage backend used here (pyarrow; no HDF5 needed).
DATA_FORMAT = "arrow"


def dataset_name(text: str) -> str:
    """``text`` as a Minari dataset name: runs of other characters become ``-``."""
    return re.sub(r"[^-\w]+", "-", text).strip("-") or "dataset"


def default_dataset_id(env_id: str, name: str) -> str:
    """``<env id>/<name>-v0``, e.g. ``cost_envs/ToolBench-v0/rule-based-v0``."""
    return f"{env_id}/{dataset_name(name)}-v0"


def check_dataset_id(dataset_id: Any) -> str:
    """A namespaced, versioned Minari id (``cost_envs/ToolBench-v0/rule-based-v0``).

    Raises:
        ValueError: One line naming the id and the expected form.
    """
    if not isinstance(dataset_id, str) or not DATASET_ID.fullmatch(dataset_id):
        raise ValueError(f"dataset_id: expected 'namespace/name-vN' (letters, digits, '-', '_'; "
                         f"e.g. 'cost_envs/ToolBench-v0/rule-based-v0'), got {dataset_id!r}")
    return dataset_id


def check_new_dataset(dataset_id: Any, out: str | os.PathLike[str] | None) -> Path:
    """The directory ``dataset_id`` would be written to, checked to be free.

    Raises:
        ValueError: A bad id, no directory (:func:`datasets_root`), or a dataset of
            that id already there.
    """
    check_dataset_id(dataset_id)
    root = datasets_root(out)
    if (root / dataset_id).exists():
        raise ValueError(f"dataset_id: {dataset_id!r} already exists in {root}; remove it or "
                         "choose another name or version")
    return root / dataset_id


def datasets_root(out: str | os.PathLike[str] | None) -> Path:
    """The directory datasets are written to: ``out``, else ``$MINARI_DATASETS_PATH``.

    Raises:
        ValueError: With neither (Minari's default, ``~/.minari``, is never used
            silently), or when ``out`` is an existing file.
    """
    if out is None:
        out = os.environ.get(DATASETS_PATH_VARIABLE) or None
        if out is None:
            raise ValueError(f"out: expected a directory for the dataset (or "
                             f"{DATASETS_PATH_VARIABLE} set to one), got neither")
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise ValueError(f"out: expected a directory path, got {out!r}")
    root = Path(out).expanduser().absolute()
    if root.exists() and not root.is_dir():
        raise ValueError(f"out: expected a directory, got the file {root}")
    return root


# ---------------------------------------------------------------------------- recording
@dataclass
class EpisodeRecorder:
    """Collects one episode's ``reset`` and ``step`` results as a Minari episode.

    Call :meth:`reset` with what ``env.reset`` returned, then :meth:`step` with each
    action and what ``env.step`` returned (or pass the recorder as
    :func:`agents.evaluation.rollout`'s ``observer``); :func:`write_dataset` writes the
    finished recorders.

    Args:
        action_dtype: The action space's dtype; actions are stored cast to it (SB3's
            0.0/1.0 floats become the env's int8 bits), refused if the cast changes them.
        seed: The reset seed, recorded in the episode's metadata (``None``: continued).
        metadata: More per-episode metadata (JSON values), e.g. a logged query's id.
    """

    action_dtype: Any = np.int8
    seed: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    observations: list[np.ndarray] = field(default_factory=list, init=False)
    actions: list[np.ndarray] = field(default_factory=list, init=False)
    rewards: list[float] = field(default_factory=list, init=False)
    terminations: list[bool] = field(default_factory=list, init=False)
    truncations: list[bool] = field(default_factory=list, init=False)
    infos: list[dict[str, Any]] = field(default_factory=list, init=False)

    def reset(self, observation: Any, info: Mapping[str, Any]) -> None:
        """Start the episode with ``env.reset``'s observation and info."""
        if self.observations:
            raise ValueError("EpisodeRecorder: reset twice; use one recorder per episode")
        self.observations.append(np.array(observation, copy=True))
        self.infos.append(_flat(info))

    def step(self, action: Any, observation: Any, reward: SupportsFloat, terminated: bool,
             truncated: bool, info: Mapping[str, Any]) -> None:
        """Record one transition: the action sent and what ``env.step`` returned."""
        if not self.observations:
            raise ValueError("EpisodeRecorder: step before reset")
        if self.done:
            raise ValueError("EpisodeRecorder: step after the episode ended")
        raw = np.asarray(action)
        cast = raw.astype(self.action_dtype)
        if not np.array_equal(cast, raw):
            raise ValueError(f"action: expected values of dtype {np.dtype(self.action_dtype)}, "
                             f"got {raw.tolist()!r}")
        self.actions.append(cast)
        self.observations.append(np.array(observation, copy=True))
        self.rewards.append(float(reward))
        self.terminations.append(bool(terminated))
        self.truncations.append(bool(truncated))
        self.infos.append(_flat(info))

    @property
    def done(self) -> bool:
        """Whether the episode has ended (terminated or truncated)."""
        return bool(self.terminations) and (self.terminations[-1] or self.truncations[-1])


def _flat(info: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``info`` with nested mappings flattened to ``"outer.inner"`` keys, values copied."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        else:
            if isinstance(value, np.ndarray):  # a 0-d array is a scalar
                value = value.item() if value.ndim == 0 else np.array(value, copy=True)
            out[name] = value
    return out


# -------------------------------------------------------------------------------- infos
def _kind(key: str, value: Any) -> tuple[str, Any]:
    """How an info value is stored: ("bool"|"int"|"float"|"str", None) or ("array", proto)."""
    if isinstance(value, (bool, np.bool_)):
        return "bool", None
    if isinstance(value, (int, np.integer)):
        return "int", None
    if isinstance(value, (float, np.floating)):
        return "float", None
    if isinstance(value, str):
        return "str", None
    if isinstance(value, np.ndarray) and value.ndim and value.dtype.kind in "biuf":
        return "array", np.zeros_like(value)
    raise ValueError(f"info[{key!r}]: expected a number, flag, text or numeric array to "
                     f"store in a Minari dataset, got {type(value).__name__}")


def _info_schema(recorders: Sequence[EpisodeRecorder]) -> dict[str, tuple[str, Any]]:
    """Every info key of every entry, with the one kind it is stored as."""
    schema: dict[str, tuple[str, Any]] = {}
    for recorder in recorders:
        for info in recorder.infos:
            for key, value in info.items():
                kind = _kind(key, value)
                known = schema.setdefault(key, kind)
                if known[0] != kind[0]:
                    if {known[0], kind[0]} == {"int", "float"}:
                        schema[key] = ("float", None)
                        continue
                    raise ValueError(f"info[{key!r}]: a {known[0]} at one step and a "
                                     f"{kind[0]} at another; expected one kind")
                if kind[0] == "array" and known[1].shape != kind[1].shape:
                    raise ValueError(f"info[{key!r}]: arrays of shapes {known[1].shape} and "
                                     f"{kind[1].shape}; expected one shape")
    # an integer missing somewhere (in any episode) needs NaN there: store it as a float
    return {key: ("float", None) if kind[0] == "int" and not all(
                key in info for recorder in recorders for info in recorder.infos) else kind
            for key, kind in schema.items()}


def _info_columns(recorder: EpisodeRecorder, schema: Mapping[str, tuple[str, Any]]
                  ) -> dict[str, Any]:
    """One column per info key over the episode's ``T + 1`` entries.

    Scalars go as lists of Python values: Minari 0.5.4 stores a 1-D array with an empty
    shape tag that it cannot read back.
    """
    columns: dict[str, Any] = {}
    for key, (kind, proto) in schema.items():
        values = [info.get(key) for info in recorder.infos]
        if kind == "array":
            columns[key] = np.stack([proto if v is None else np.asarray(v, proto.dtype)
                                     for v in values])
        elif kind == "bool":
            columns[key] = [bool(v) if v is not None else False for v in values]
        elif kind == "int":
            columns[key] = [int(info[key]) for info in recorder.infos]  # in every entry
        elif kind == "float":
            columns[key] = [math.nan if v is None else float(v) for v in values]
        else:
            columns[key] = ["" if v is None else str(v) for v in values]
    return columns


# ------------------------------------------------------------------------------ writing
@contextlib.contextmanager
def _datasets_path(path: Path) -> Iterator[None]:
    """Point Minari at ``path`` for the block (it reads the variable at every call)."""
    before = os.environ.get(DATASETS_PATH_VARIABLE)
    os.environ[DATASETS_PATH_VARIABLE] = str(path)
    try:
        yield
    finally:
        if before is None:
            del os.environ[DATASETS_PATH_VARIABLE]
        else:
            os.environ[DATASETS_PATH_VARIABLE] = before


@contextlib.contextmanager
def _size_measured_once(minari: Any) -> Iterator[None]:
    """Skip Minari's folder measurement after each episode written; measure once after.

    Minari 0.5.4's Arrow storage re-measures the whole dataset folder (a recursive glob
    and a ``stat`` per file) after every episode it writes, which is quadratic: 900
    one-step episodes took 160 s, almost all of it there. The caller stores the one
    measurement of the finished folder.
    """
    storage = minari.dataset.minari_storage.MinariStorage
    measure = storage.get_size
    storage.get_size = lambda self: 0.0
    try:
        yield
    finally:
        storage.get_size = measure


def require_minari() -> None:
    """Raise the one-line ``ImportError`` naming the ``minari`` extra if it is missing.

    The exporters call it first, before playing any episode.
    """
    require_extra("minari", WHAT)  # minari and its Arrow backend, pyarrow


def _minari() -> Any:
    """The ``minari`` module, or the one-line ``ImportError`` naming the extra."""
    require_minari()
    return import_extra("minari", "minari", WHAT)


def check_recoverable(env: gym.Env) -> gym.envs.registration.EnvSpec:
    """``env``'s spec; ``ValueError`` unless it can be stored and remade from JSON.

    ``recover_environment`` remakes the env from its stored spec, so the env must come
    from ``gym.make`` with JSON-valued kwargs (a path as a string, not an object).
    """
    spec = env.spec
    if spec is None:
        raise ValueError(f"env: expected an env made by gym.make (it records the spec "
                         f"recover_environment needs), got {type(env).__name__} without one")
    try:
        spec.to_json()
    except (TypeError, ValueError) as err:
        raise ValueError(f"{spec.id}: expected gym.make kwargs that are JSON values (so the "
                         f"dataset can remake the env), got {sorted(spec.kwargs)}: "
                         f"{' '.join(str(err).split())}") from None
    return spec


#: The author a dataset names when the caller gives none: the program that wrote it.
DEFAULT_AUTHOR = "cost-envs (export-minari)"


def write_dataset(
    dataset_id: str,
    episodes: Sequence[EpisodeRecorder],
    env: gym.Env,
    out: str | os.PathLike[str] | None = None,
    algorithm_name: str | None = None,
    description: str | None = None,
    author: str | None = None,
) -> Path:
    """Write ``episodes`` of ``env`` as the Minari dataset ``dataset_id`` under ``out``.

    Args:
        dataset_id: Namespaced and versioned: ``cost_envs/ToolBench-v0/rule-based-v0``.
        episodes: Complete episodes (each ended by termination or truncation).
        env: The env (from ``gym.make``) they were played on: its spec and spaces are
            stored, so ``recover_environment()`` remakes it with the same kwargs.
        out: The datasets directory (created if needed); ``None`` reads
            ``$MINARI_DATASETS_PATH``.
        algorithm_name: Who chose the actions (stored as Minari's ``algorithm_name``).
        description: A sentence stored with the dataset.
        author: Who made the dataset (Minari's ``author``); ``None``: :data:`DEFAULT_AUTHOR`,
            the exporting program, so that the dataset never says "Author Unknown".

    Returns:
        The dataset's directory, ``out/<dataset_id>``.

    Raises:
        ValueError: One line, before anything is written: a bad id, no directory, an
            existing dataset of that id, no episodes, an unfinished episode, an env whose
            spec cannot be stored, an info value Minari cannot store.
        ImportError: Without the ``minari`` extra (naming ``pip install``).
    """
    final = check_new_dataset(dataset_id, out)
    root = datasets_root(out)
    if not episodes:
        raise ValueError("episodes: expected at least one episode, got none")
    for index, episode in enumerate(episodes):
        if not episode.done:
            raise ValueError(f"episodes[{index}]: expected a finished episode, got one "
                             f"of {len(episode.actions)} step(s) that has not ended")
    spec = check_recoverable(env)
    schema = _info_schema(episodes)
    minari = _minari()
    # attributes, not import statements: cost_envs's modules name no optional package in
    # an import statement (tests/test_packaging.py), the extra is looked up when used
    EpisodeBuffer = minari.data_collector.EpisodeBuffer  # noqa: N806
    namespaces = minari.namespace

    buffers = [EpisodeBuffer(id=i, seed=e.seed, observations=np.stack(e.observations),
                             actions=np.stack(e.actions), rewards=list(e.rewards),
                             terminations=list(e.terminations),
                             truncations=list(e.truncations), infos=_info_columns(e, schema))
               for i, e in enumerate(episodes)]
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".cost-envs-minari-", dir=root))
    try:
        with _datasets_path(staging), warnings.catch_warnings(), _size_measured_once(minari):
            # Minari recommends an e-mail and a code link for published datasets; a local
            # export has none to give.
            warnings.filterwarnings("ignore", message=r"`(author_email|code_permalink)`")
            dataset = minari.create_dataset_from_buffers(
                dataset_id, buffers, env=env, eval_env=spec,
                author=author or DEFAULT_AUTHOR,
                algorithm_name=algorithm_name or "unspecified",
                description=description or f"episodes of {spec.id}",
                data_format=DATA_FORMAT)
            dataset.storage.update_episode_metadata([dict(e.metadata) for e in episodes])
        dataset.storage.update_metadata({"dataset_size": dataset.storage.get_size()})
        namespace = dataset_id.rsplit("/", 1)[0]
        with _datasets_path(root):
            if namespace not in namespaces.list_local_namespaces():
                namespaces.create_namespace(namespace)
        os.rename(staging / dataset_id, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def load_dataset(dataset_id: str, out: str | os.PathLike[str] | None = None) -> Any:
    """The Minari dataset ``dataset_id`` from the directory ``out`` (or the variable's).

    The same as ``minari.load_dataset(dataset_id)`` with ``MINARI_DATASETS_PATH=out``,
    without setting the variable. Never downloads.

    Raises:
        ValueError: A bad id, or no such dataset in that directory.
    """
    check_dataset_id(dataset_id)
    root = datasets_root(out)
    data = root / dataset_id / "data"
    if not data.is_dir():
        raise ValueError(f"dataset_id: no dataset {dataset_id!r} in {root}")
    return _minari().MinariDataset(data)
