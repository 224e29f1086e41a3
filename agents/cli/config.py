"""``cost-envs train --config FILE``: training settings and SB3 hyperparameters in a file.

The file is one JSON or YAML mapping. SB3 hyperparameters sit at its top level, as in
rl-zoo3's files (the keys of SB3's ``PPO`` signature, and for ``lora-ppo`` also
``cost_coef``, ``value_lr_scale`` and ``action_lr_scale``); beside them::

    timesteps: 20000          # RL steps (ppo, lora-ppo)
    seed: 0
    n_envs: 8                 # sub-envs the RL stage steps at once (batched env; default 1)
    action_distribution: autoregressive  # or independent (the default, the paper's)
    base: pretrained          # or random (lora, lora-ppo)
    env_kwargs: {pool: my_pool.yaml}   # gym.make arguments
    supervised: {epochs: 10}  # the supervised stage of lora and lora-ppo (SupervisedConfig)
    learning_rate: 1.0e-4     # SB3 hyperparameters (ppo, lora-ppo)
    n_steps: 256

Command-line flags override the file: ``--timesteps``, ``--seed``, ``--n-envs`` and
``--base`` replace its values, and ``--env-kwargs``, ``--pool`` and ``--prices`` replace
its env kwargs key by key. An unknown key is a one-line error naming it and the valid
keys; so is a bad value, before any training starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.learners import ACTION_DISTRIBUTIONS, BASES
from cost_envs.config import coerce_config, integer, one_of, suggestion
from cost_envs.config_files import read_config_file

#: Training settings a config file may hold beside the SB3 hyperparameters.
TRAIN_KEYS = ("timesteps", "seed", "n_envs", "base", "action_distribution", "env_kwargs",
              "supervised")


@dataclass(frozen=True)
class TrainSettings:
    """What ``cost-envs train`` runs with, after the file and the flags are merged.

    Attributes:
        timesteps: RL environment steps.
        seed: Training seed.
        n_envs: Sub-envs of the RL stage (``train(n_envs=...)``).
        base: Frozen base of the LoRA encoder.
        action_distribution: The policy's action head (``train(action_distribution=...)``).
        env_kwargs: ``gym.make`` arguments from the file (flags are merged later).
        ppo: SB3 hyperparameters (``train(ppo=...)``), checked against the signature.
        supervised: The supervised stage's :class:`SupervisedConfig` (``None``: default).
    """

    timesteps: int = 20_000
    seed: int = 0
    n_envs: int = 1
    base: str = "pretrained"
    action_distribution: str = "independent"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    ppo: dict[str, Any] = field(default_factory=dict)
    supervised: Any = None


def read_train_config(path: Path | None, method: str) -> TrainSettings:
    """The settings in ``path`` for ``method`` (the defaults when ``path`` is ``None``).

    Raises:
        ValueError: One line naming the file and the bad key or value.
        FileNotFoundError: ``path`` does not exist.
    """
    if path is None:
        return TrainSettings()
    data = read_config_file(path)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a mapping of settings, got {data!r}")
    from agents.learners.common.ppo_args import accepted, check_hyperparameters

    hyper = accepted(method)
    unknown = sorted(str(key) for key in data if key not in TRAIN_KEYS and key not in hyper)
    if unknown:
        valid = [*TRAIN_KEYS, *sorted(hyper)]
        raise ValueError(f"{path}: unknown key(s) {unknown} for {method}; valid: "
                         f"{valid}{suggestion(unknown[0], valid)}")
    ppo = {key: value for key, value in data.items() if key in hyper}
    if ppo and method == "lora":
        raise ValueError(f"{path}: {sorted(ppo)}: lora trains the supervised stage only and "
                         f"takes no PPO hyperparameters; put its settings under supervised:")
    defaults = TrainSettings()
    return TrainSettings(
        timesteps=integer(data.get("timesteps", defaults.timesteps), "timesteps", minimum=1,
                          where=str(path)),
        seed=integer(data.get("seed", defaults.seed), "seed", minimum=0, where=str(path)),
        n_envs=integer(data.get("n_envs", defaults.n_envs), "n_envs", minimum=1,
                       where=str(path)),
        base=one_of(data.get("base", defaults.base), "base", BASES, where=str(path)),
        action_distribution=one_of(
            data.get("action_distribution", defaults.action_distribution),
            "action_distribution", ACTION_DISTRIBUTIONS, where=str(path)),
        env_kwargs=_mapping(data.get("env_kwargs", {}), path, "env_kwargs"),
        ppo=check_hyperparameters(ppo, method, where=str(path)),
        supervised=_supervised(data.get("supervised"), path),
    )


def _mapping(value: Any, path: Path, key: str) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{path}: {key}: expected a mapping of argument names to values, "
                         f"got {value!r}")
    return dict(value)


def _supervised(value: Any, path: Path) -> Any:
    """The ``supervised`` section as a :class:`SupervisedConfig` (``None`` if absent)."""
    if value is None:
        return None
    from agents.learners.supervised import SupervisedConfig

    if not isinstance(value, Mapping):
        raise ValueError(f"{path}: supervised: expected a mapping of SupervisedConfig "
                         f"fields, got {value!r}")
    try:
        return coerce_config(SupervisedConfig, value, {}, f"{path}: supervised")
    except ValueError as error:
        message = str(error)
        prefix = f"{path}: supervised"
        raise ValueError(message if message.startswith(prefix) else f"{prefix}: {message}"
                         ) from None
