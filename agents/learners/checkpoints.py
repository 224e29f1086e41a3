"""Save and load allocators and adapters without pickle; merge adapters for deployment.

Formats (each a directory, written to a temporary sibling and renamed into place, so an
interrupted save never leaves a half-written checkpoint where a good one was):

* **Model**: ``model.safetensors`` (every tensor of the policy) and ``config.json``
  (``format: cost-envs-allocator``, the env id and kwargs, the method, the architecture,
  the training history). :func:`load_allocator` rebuilds the network from the config
  and loads the tensors: nothing is unpickled.
* **Adapter**: ``adapter.safetensors`` (LoRA ``A``/``B`` and the pool's heads) and
  ``adapter_config.json`` (rank, alpha, architecture and the SHA-256 of the frozen base it
  was trained on, checked at load).

Stable-Baselines3 ``.zip`` files keep Python objects serialised with cloudpickle, which
can run arbitrary code when loaded. :func:`load_allocator` opens one only with
``trust_pickle=True`` and otherwise raises :class:`UnsafeCheckpointError` saying why.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from gymnasium.envs.registration import load_env_creator
from safetensors.torch import save_file
from stable_baselines3 import PPO

import cost_envs
from agents.files import write_directory_atomic
from agents.learners import ACTION_DISTRIBUTIONS, BASES, METHODS
from agents.learners.checkpoint_paths import (  # torch-free, re-exported here
    ADAPTER_FORMAT,
    MODEL_FORMAT,
    check_model_path,
    check_writable,
    is_sb3_zip,
)
from agents.learners.checkpoint_paths import (
    UnsafeCheckpointError as UnsafeCheckpointError,  # raised by load_allocator
)
from agents.learners.common.adapters import merge_lora
from agents.learners.common.policies import (
    MAX_WIDTH,
    PARAMETER_GROUPS,
    AllocatorPolicy,
    check_widths,
    read_tensors,
)
from agents.learners.legacy import old_module_paths
from agents.learners.supervised import policy_for
from agents.learners.training import GYM_MAKE_OPTIONS, TrainedAllocator
from cost_envs.config import integer, number
from cost_envs.config_files import read_config_file

FORMAT_VERSION = 1
_ADAPTER_FILES = ("adapter.safetensors", "adapter_config.json")
_ARCHITECTURE_KEYS = {"hidden_sizes", "lora_rank", "lora_alpha", "action_distribution"}
#: Keys of each config: required first, then optional ones.
_MODEL_KEYS = (("format", "version", "env_id", "env_kwargs", "method", "architecture"),
               ("cost_envs_version", "seed", "timesteps", "base", "history", "n_envs"))
_ADAPTER_KEYS = (("format", "version", "architecture", "n_agents", "base_sha256"), ("groups",))
#: The parameter groups an adapter file holds: everything but the frozen base.
_ADAPTER_GROUPS = tuple(group for group in PARAMETER_GROUPS if group != "base")
#: SB3 registers the shared encoder three times; only ``features_extractor.*`` is stored.
_ALIASES = ("pi_features_extractor.", "vf_features_extractor.")


def _own_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict without the aliases of the shared encoder."""
    return {name: tensor for name, tensor in model.state_dict().items()
            if not name.startswith(_ALIASES)}


def _tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone().contiguous() for name, tensor in state.items()}


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # allow_nan=False: what is saved must load, and the loader refuses NaN and Infinity.
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _read_config(path: Path, expected_format: str,
                 keys: tuple[tuple[str, ...], tuple[str, ...]]) -> dict[str, Any]:
    """A config of ``expected_format``, read strictly (:mod:`cost_envs.config_files`).

    ``keys`` are the required and the optional keys; any other key is an error.
    """
    config = read_config_file(path)
    if not isinstance(config, dict) or config.get("format") != expected_format:
        raise ValueError(f"{path}: expected format {expected_format!r}, "
                         f"got {config.get('format') if isinstance(config, dict) else config!r}")
    version = config.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version != FORMAT_VERSION:
        raise ValueError(f"{path}: format version {version!r} is not "
                         f"supported (this cost-envs reads version {FORMAT_VERSION})")
    required, optional = keys
    missing = [key for key in required if key not in config]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}")
    unknown = sorted(set(config) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}; expected keys from "
                         f"{[*required, *optional]}")
    return config


def _check_architecture(value: Any, source: Path) -> dict[str, Any]:
    """The ``architecture`` of a config: the constructor arguments of the network."""
    if not isinstance(value, dict) or set(value) - _ARCHITECTURE_KEYS:
        raise ValueError(f"{source}: architecture must be an object with keys from "
                         f"{sorted(_ARCHITECTURE_KEYS)}, got {value!r}")
    if "hidden_sizes" in value:
        check_widths(value["hidden_sizes"], f"{source}: architecture.hidden_sizes")
    if value.get("lora_rank") is not None:  # null: no adapter
        integer(value["lora_rank"], "architecture.lora_rank", minimum=1, maximum=MAX_WIDTH,
                where=str(source))
    number(value.get("lora_alpha", 16.0), "architecture.lora_alpha", minimum=0,
           inclusive=False, where=str(source))
    if value.get("action_distribution", ACTION_DISTRIBUTIONS[0]) not in ACTION_DISTRIBUTIONS:
        raise ValueError(f"{source}: architecture.action_distribution: expected one of "
                         f"{list(ACTION_DISTRIBUTIONS)}, got {value['action_distribution']!r}")
    return value


@functools.cache
def env_arguments(env_id: str) -> frozenset[str] | None:
    """Names of the keyword arguments of ``env_id``'s constructor (its registered entry point).

    ``None`` when the constructor takes ``**kwargs`` and its names cannot be known.
    """
    entry_point = gym.spec(env_id).entry_point
    if entry_point is None:
        raise ValueError(f"{env_id}: registered without an entry point")
    creator = entry_point if callable(entry_point) else load_env_creator(entry_point)
    parameters = inspect.signature(creator).parameters.values()
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    return frozenset(parameter.name for parameter in parameters
                     if parameter.kind is not inspect.Parameter.VAR_POSITIONAL)


def check_env_kwargs(env_id: str, env_kwargs: Any, source: str | Path) -> dict[str, Any]:
    """Check a model's ``env_kwargs``: arguments of ``env_id``'s constructor, nothing else.

    Args:
        env_id: A registered id.
        env_kwargs: The keyword arguments a model records for ``gym.make(env_id, ...)``.
        source: The file (or object) named in errors.

    Returns:
        ``env_kwargs``.

    Raises:
        ValueError: Not an object, a :data:`~agents.learners.training.GYM_MAKE_OPTIONS` key,
            or a key that is not an argument of the env.
    """
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"{source}: env_kwargs must be an object, got {env_kwargs!r}")
    for key in env_kwargs:
        if key in GYM_MAKE_OPTIONS:
            raise ValueError(
                f"{source}: env_kwargs.{key}: a gym.make option, not an argument of "
                f"{env_id}; a model may not change the env it is scored on (refused: "
                f"{', '.join(GYM_MAKE_OPTIONS)})")
    arguments = env_arguments(env_id)
    unknown = sorted(set(env_kwargs) - arguments) if arguments is not None else []
    if unknown and arguments is not None:  # (unknown implies it; said for the type checker)
        raise ValueError(f"{source}: env_kwargs: {', '.join(map(repr, unknown))} is not an "
                         f"argument of {env_id}; expected names from "
                         f"{sorted(arguments - set(GYM_MAKE_OPTIONS))}")
    return env_kwargs


def _check_model_config(config: dict[str, Any], source: Path) -> None:
    """Type and range of every key of a model's ``config.json`` (format already checked)."""
    env_id, method = config["env_id"], config["method"]
    if not isinstance(env_id, str) or env_id not in cost_envs.ENV_IDS:
        raise ValueError(f"{source}: env_id {env_id!r} is not a registered id "
                         f"({list(cost_envs.ENV_IDS)})")
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"{source}: method {method!r} is not one of {list(METHODS)}")
    _check_architecture(config["architecture"], source)
    check_env_kwargs(env_id, config["env_kwargs"], source)
    for key in ("seed", "timesteps"):
        if key in config:
            integer(config[key], key, minimum=0, where=str(source))
    if "n_envs" in config:  # absent from models saved before training recorded it
        integer(config["n_envs"], "n_envs", minimum=1, where=str(source))
    if config.get("base") is not None and config["base"] not in BASES:
        raise ValueError(f"{source}: base: expected null or one of {list(BASES)}, "
                         f"got {config['base']!r}")
    if not isinstance(config.get("cost_envs_version", ""), str):
        raise ValueError(f"{source}: cost_envs_version: expected a string, "
                         f"got {config['cost_envs_version']!r}")
    history = config.get("history", [])
    if not isinstance(history, list):
        raise ValueError(f"{source}: history: expected a list of objects, got {history!r}")
    for index, entry in enumerate(history):
        if not isinstance(entry, dict) or not all(
                isinstance(value, (int, float)) and not isinstance(value, bool)
                for value in entry.values()):
            raise ValueError(f"{source}: history[{index}]: expected an object of numbers, "
                             f"got {entry!r}")


# ------------------------------------------------------------------------ models
def save_allocator(allocator: TrainedAllocator, directory: str | Path) -> Path:
    """Write ``allocator`` as ``model.safetensors`` + ``config.json`` in ``directory``."""
    policy = allocator.policy
    # What loads is checked at save too, so that a model that saves also loads.
    check_env_kwargs(allocator.env_id, allocator.env_kwargs, f"env_kwargs of {directory}")
    config = {
        "format": MODEL_FORMAT,
        "version": FORMAT_VERSION,
        "cost_envs_version": cost_envs.__version__,
        "env_id": allocator.env_id,
        "env_kwargs": allocator.env_kwargs,
        "method": allocator.method,
        "seed": allocator.seed,
        "timesteps": allocator.timesteps,
        "n_envs": allocator.n_envs,
        "base": allocator.base,
        "architecture": policy.architecture(),
        "history": allocator.history,
    }
    tensors = _tensors(_own_tensors(policy))

    def write(tmp: Path) -> None:
        save_file(tensors, tmp / "model.safetensors")
        _write_json(tmp / "config.json", config)

    return write_directory_atomic(check_writable(directory), write)


def load_allocator(path: str | Path, trust_pickle: bool = False,
                   env_kwargs: Mapping[str, Any] | None = None) -> Any:
    """Load a saved allocator: a cost-envs model directory, or an SB3 ``.zip`` if trusted.

    Args:
        path: A directory written by :func:`save_allocator`, or an SB3 ``.zip``.
        trust_pickle: Allow unpickling an SB3 ``.zip`` (only for files you trust).
        env_kwargs: The env's arguments instead of the saved ones (a data file that
            moved: ``cost-envs serve``); the network is built for that env, and tensors
            of another shape are refused.

    Returns:
        A :class:`TrainedAllocator`, or for a ``.zip`` the SB3 ``PPO`` model.

    Raises:
        UnsafeCheckpointError: For a ``.zip`` without ``trust_pickle``.
        FileNotFoundError: When ``path`` or one of the model's files is missing.
        ValueError: When the config or the tensors do not match a cost-envs model.
    """
    path = check_model_path(path, trust_pickle)  # what is on disk, before any parsing
    if is_sb3_zip(path):
        with old_module_paths():  # a .zip saved before issue #25 names agents.lora.*
            return PPO.load(path, device="cpu")
    source = path / "config.json"
    config = _read_config(source, MODEL_FORMAT, _MODEL_KEYS)
    _check_model_config(config, source)
    if env_kwargs is not None:
        config["env_kwargs"] = check_env_kwargs(config["env_id"], dict(env_kwargs),
                                                "env_kwargs")
    tensors = read_tensors(path / "model.safetensors")
    try:
        env = gym.make(config["env_id"], **config["env_kwargs"])
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise ValueError(f"{source}: env_kwargs refused by {config['env_id']}: "
                         f"{' '.join(str(error).split())}") from None
    policy = policy_for(env, **config["architecture"])
    env.close()
    _load_tensors(policy, tensors, path / "model.safetensors")
    policy.set_training_mode(False)
    return TrainedAllocator(policy, config["env_id"], config["env_kwargs"], config["method"],
                            config.get("seed", 0), config.get("timesteps", 0),
                            config.get("base"), list(config.get("history", [])),
                            config.get("n_envs", 1))


def _load_tensors(model: torch.nn.Module, state: Mapping[str, torch.Tensor], source: Path,
                  strict: bool = True) -> None:
    own = _own_tensors(model)
    unexpected = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state)) if strict else []
    wrong = sorted(name for name in set(state) & set(own)
                   if tuple(state[name].shape) != tuple(own[name].shape))
    if unexpected or missing or wrong:
        raise ValueError(f"{source}: tensors do not match the network built from the config "
                         f"(missing {missing}, unexpected {unexpected}, wrong shape {wrong})")
    dtypes = sorted(f"{name} ({state[name].dtype}, expected {own[name].dtype})"
                    for name in state if state[name].dtype != own[name].dtype)
    if dtypes:
        raise ValueError(f"{source}: tensors of the wrong type: {', '.join(dtypes)}")
    model.load_state_dict(state, strict=False)  # the aliases share the loaded tensors


# ---------------------------------------------------------------------- adapters
def base_fingerprint(policy: AllocatorPolicy) -> str:
    """SHA-256 of the frozen base's tensors (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for name, param in sorted(policy.parameter_groups()["base"]):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_adapter(policy: AllocatorPolicy, directory: str | Path) -> Path:
    """Write the adapter and heads of ``policy`` (everything but the frozen base)."""
    if policy.lora_rank is None:
        raise ValueError("this policy has no LoRA adapter to save")
    groups = policy.parameter_groups()
    tensors = _tensors({name: param for group in _ADAPTER_GROUPS
                        for name, param in groups[group]})
    config = {
        "format": ADAPTER_FORMAT,
        "version": FORMAT_VERSION,
        "architecture": policy.architecture(),
        "n_agents": policy.n_agents,
        "base_sha256": base_fingerprint(policy),
        "groups": list(_ADAPTER_GROUPS),
    }

    def write(tmp: Path) -> None:
        save_file(tensors, tmp / "adapter.safetensors")
        _write_json(tmp / "adapter_config.json", config)

    return write_directory_atomic(check_writable(directory, ADAPTER_FORMAT), write)


def load_adapter(policy: AllocatorPolicy, directory: str | Path) -> AllocatorPolicy:
    """Load an adapter saved by :func:`save_adapter` into ``policy`` (in place).

    Raises ``ValueError`` when the architecture, the pool size or the frozen base differ
    from the ones the adapter was trained with.
    """
    directory = Path(directory)
    for name in _ADAPTER_FILES:  # what exists but is no file: the readers say
        if not (directory / name).exists():
            raise FileNotFoundError(f"{directory}: missing {name}")
    config_path = directory / "adapter_config.json"
    config = _read_config(config_path, ADAPTER_FORMAT, _ADAPTER_KEYS)
    _check_architecture(config["architecture"], config_path)
    integer(config["n_agents"], "n_agents", minimum=1, where=str(config_path))
    saved_groups = config.get("groups", list(_ADAPTER_GROUPS))
    if not isinstance(saved_groups, list) or not all(
            isinstance(group, str) and group in _ADAPTER_GROUPS for group in saved_groups):
        raise ValueError(f"{config_path}: groups: expected a list of names from "
                         f"{list(_ADAPTER_GROUPS)}, got {saved_groups!r}")
    for key, ours in (("architecture", policy.architecture()),
                      ("n_agents", policy.n_agents),
                      ("base_sha256", base_fingerprint(policy))):
        if config.get(key) != ours:
            raise ValueError(f"{directory}: adapter {key} {config.get(key)!r} does not match "
                             f"this policy's {ours!r}")
    source = directory / "adapter.safetensors"
    state = read_tensors(source)
    groups = policy.parameter_groups()
    expected = {name for group in _ADAPTER_GROUPS for name, _ in groups[group]}
    if set(state) != expected:
        raise ValueError(f"{source}: expected exactly the adapter and head tensors; missing "
                         f"{sorted(expected - set(state))}, unexpected "
                         f"{sorted(set(state) - expected)}")
    _load_tensors(policy, state, source, strict=False)
    return policy


def merge_adapter(policy: AllocatorPolicy) -> AllocatorPolicy:
    """A copy of ``policy`` with every adapter folded into its base weights.

    The copy computes the same function with plain ``nn.Linear`` layers (no adapter
    overhead); ``policy`` itself is left unmerged.
    """
    # SB3 leaves the last training batch's distribution (with its autograd graph) on the
    # shared action_dist; it is not part of the model and cannot be deep-copied.
    if hasattr(policy.action_dist, "distribution"):
        del policy.action_dist.distribution
    merged = copy.deepcopy(policy)
    merge_lora(merged.features_extractor.net)
    merged.lora_rank = None
    merged.set_training_mode(False)
    return merged
