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
import hashlib
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from safetensors.torch import load_file, save_file
from stable_baselines3 import PPO

import cost_envs
from agents.files import write_directory_atomic
from agents.lora import METHODS
from agents.lora.adapters import merge_lora
from agents.lora.policies import AllocatorPolicy
from agents.lora.supervised import policy_for
from agents.lora.training import TrainedAllocator

MODEL_FORMAT = "cost-envs-allocator"
ADAPTER_FORMAT = "cost-envs-adapter"
FORMAT_VERSION = 1
_MODEL_FILES = ("model.safetensors", "config.json")
_ADAPTER_FILES = ("adapter.safetensors", "adapter_config.json")
_ARCHITECTURE_KEYS = {"hidden_sizes", "lora_rank", "lora_alpha"}
#: SB3 registers the shared encoder three times; only ``features_extractor.*`` is stored.
_ALIASES = ("pi_features_extractor.", "vf_features_extractor.")


def _own_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict without the aliases of the shared encoder."""
    return {name: tensor for name, tensor in model.state_dict().items()
            if not name.startswith(_ALIASES)}


class UnsafeCheckpointError(ValueError):
    """A checkpoint would have to be unpickled and the caller did not say it is trusted."""


def _tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone().contiguous() for name, tensor in state.items()}


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _read_config(path: Path, expected_format: str) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(config, dict) or config.get("format") != expected_format:
        raise ValueError(f"{path}: expected format {expected_format!r}, "
                         f"got {config.get('format') if isinstance(config, dict) else config!r}")
    if config.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: format version {config.get('version')!r} is not "
                         f"supported (this cost-envs reads version {FORMAT_VERSION})")
    return config


def check_writable(directory: str | Path, expected_format: str = MODEL_FORMAT) -> Path:
    """Raise ``ValueError`` unless ``directory`` may be (over)written by a save.

    A save replaces the whole directory, so it may only be new, empty, or a checkpoint of
    the same kind; anything else is refused rather than deleted.
    """
    directory = Path(directory)
    if not directory.exists():
        return directory
    if not directory.is_dir():
        raise ValueError(f"{directory} exists and is not a directory")
    if not any(directory.iterdir()):
        return directory
    config_name = "config.json" if expected_format == MODEL_FORMAT else "adapter_config.json"
    try:
        found = json.loads((directory / config_name).read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        found = None
    if found != expected_format:
        raise ValueError(f"{directory} is not empty and is not a {expected_format} "
                         "checkpoint; saving would delete its contents. Choose a new or "
                         "empty directory")
    return directory


# ------------------------------------------------------------------------ models
def save_allocator(allocator: TrainedAllocator, directory: str | Path) -> Path:
    """Write ``allocator`` as ``model.safetensors`` + ``config.json`` in ``directory``."""
    policy = allocator.policy
    config = {
        "format": MODEL_FORMAT,
        "version": FORMAT_VERSION,
        "cost_envs_version": cost_envs.__version__,
        "env_id": allocator.env_id,
        "env_kwargs": allocator.env_kwargs,
        "method": allocator.method,
        "seed": allocator.seed,
        "timesteps": allocator.timesteps,
        "base": allocator.base,
        "architecture": policy.architecture(),
        "history": allocator.history,
    }
    tensors = _tensors(_own_tensors(policy))

    def write(tmp: Path) -> None:
        save_file(tensors, tmp / "model.safetensors")
        _write_json(tmp / "config.json", config)

    return write_directory_atomic(check_writable(directory), write)


def load_allocator(path: str | Path, trust_pickle: bool = False) -> Any:
    """Load a saved allocator: a cost-envs model directory, or an SB3 ``.zip`` if trusted.

    Args:
        path: A directory written by :func:`save_allocator`, or an SB3 ``.zip``.
        trust_pickle: Allow unpickling an SB3 ``.zip`` (only for files you trust).

    Returns:
        A :class:`TrainedAllocator`, or for a ``.zip`` the SB3 ``PPO`` model.

    Raises:
        UnsafeCheckpointError: For a ``.zip`` without ``trust_pickle``.
        FileNotFoundError: When ``path`` or one of the model's files is missing.
        ValueError: When the config or the tensors do not match a cost-envs model.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such model directory or file")
    if path.is_file() and (path.suffix == ".zip" or zipfile.is_zipfile(path)):
        if not trust_pickle:
            raise UnsafeCheckpointError(
                f"{path} is a Stable-Baselines3 .zip: its 'data' entry is deserialised "
                "with cloudpickle, which can run any code the file contains. Load it only "
                "if you trust where it came from, with trust_pickle=True (--trust-pickle "
                "on the command line). Models saved by cost-envs (a directory with "
                "model.safetensors and config.json) load without unpickling."
            )
        return PPO.load(path, device="cpu")
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such model directory")
    for name in _MODEL_FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path}: missing {name} (expected {list(_MODEL_FILES)})")
    config = _read_config(path / "config.json", MODEL_FORMAT)
    missing = [key for key in ("env_id", "env_kwargs", "method", "architecture")
               if key not in config]
    if missing:
        raise ValueError(f"{path / 'config.json'}: missing keys {missing}")
    source = path / "config.json"
    if config["method"] not in METHODS:
        raise ValueError(f"{source}: method {config['method']!r} is not one of {list(METHODS)}")
    if config["env_id"] not in cost_envs.ENV_IDS:
        raise ValueError(f"{source}: env_id {config['env_id']!r} is not a registered id "
                         f"({list(cost_envs.ENV_IDS)})")
    architecture = config["architecture"]
    if not isinstance(architecture, dict) or set(architecture) - _ARCHITECTURE_KEYS:
        raise ValueError(f"{source}: architecture must be an object with keys from "
                         f"{sorted(_ARCHITECTURE_KEYS)}, got {architecture!r}")
    if not isinstance(config["env_kwargs"], dict):
        raise ValueError(f"{source}: env_kwargs must be an object, got {config['env_kwargs']!r}")
    env = gym.make(config["env_id"], **config["env_kwargs"])
    policy = policy_for(env, **architecture)
    env.close()
    _load_tensors(policy, load_file(path / "model.safetensors"), path / "model.safetensors")
    policy.set_training_mode(False)
    return TrainedAllocator(policy, config["env_id"], config["env_kwargs"], config["method"],
                            int(config.get("seed", 0)), int(config.get("timesteps", 0)),
                            config.get("base"), list(config.get("history", [])))


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
    tensors = _tensors({name: param for group in ("adapter", "action", "value")
                        for name, param in groups[group]})
    config = {
        "format": ADAPTER_FORMAT,
        "version": FORMAT_VERSION,
        "architecture": policy.architecture(),
        "n_agents": int(policy.action_space.n),
        "base_sha256": base_fingerprint(policy),
        "groups": ["adapter", "action", "value"],
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
    for name in _ADAPTER_FILES:
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory}: missing {name}")
    config = _read_config(directory / "adapter_config.json", ADAPTER_FORMAT)
    for key, ours in (("architecture", policy.architecture()),
                      ("n_agents", int(policy.action_space.n)),
                      ("base_sha256", base_fingerprint(policy))):
        if config.get(key) != ours:
            raise ValueError(f"{directory}: adapter {key} {config.get(key)!r} does not match "
                             f"this policy's {ours!r}")
    source = directory / "adapter.safetensors"
    state = load_file(source)
    groups = policy.parameter_groups()
    expected = {name for group in ("adapter", "action", "value") for name, _ in groups[group]}
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
