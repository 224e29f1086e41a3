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

**rl-zoo3's own files** are read too: a mapping keyed by env id (``agents/zoo/ppo.yml``,
``agents/zoo/lora_ppo.yml``), of which the entry of ``--env`` is used (the full id or the
name without its namespace; a missing entry is a one-line error naming the ids there).
In an entry, ``n_timesteps`` is ``timesteps`` and ``n_envs``, ``env_kwargs`` and the SB3
hyperparameters are as above. ``policy``, ``policy_kwargs`` and ``callback`` are
checked, not applied (``cost-envs train`` builds the project's network and logs its cost
metrics itself): ``policy`` must be :class:`~agents.learners.common.policies.AllocatorPolicy`,
``policy_kwargs`` (rl-zoo3's Python expression, read as literals, never run) may set
``action_distribution`` and the ``lora_rank`` the method trains (``None`` for ``ppo``,
8 for the LoRA methods), ``callback`` may name
:class:`~agents.callbacks.CostMetricsCallback`. rl-zoo3's wrappers (``normalize``,
``frame_stack``, ``env_wrapper``, ...) are refused by name.

Command-line flags override the file: ``--timesteps``, ``--seed``, ``--n-envs`` and
``--base`` replace its values, and ``--env-kwargs``, ``--pool`` and ``--prices`` replace
its env kwargs key by key. An unknown key is a one-line error naming it and the valid
keys; so is a bad value, before any training starts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.learners import ACTION_DISTRIBUTIONS, BASES
from agents.learners.hyperparameter_names import accepted_names
from cost_envs.config import coerce_config, integer, one_of, suggestion
from cost_envs.config_files import read_config_file

#: Training settings a config file may hold beside the SB3 hyperparameters.
TRAIN_KEYS = ("timesteps", "seed", "n_envs", "base", "action_distribution", "env_kwargs",
              "supervised")
#: An rl-zoo3 entry's keys that ``cost-envs train`` checks rather than applies, and the
#: one the entry names otherwise (``n_timesteps`` is ``timesteps``).
ZOO_KEYS = ("n_timesteps", "policy", "policy_kwargs", "callback")
#: What an rl-zoo3 entry's ``policy`` and ``callback`` may name: what ``train`` uses.
ZOO_POLICY = "agents.learners.common.policies.AllocatorPolicy"
ZOO_CALLBACK = "agents.callbacks.CostMetricsCallback"
#: The adapter rank each method trains (``None``: the plain network of ``ppo``).
LORA_RANKS: dict[str, int | None] = {"ppo": None, "lora": 8, "lora-ppo": 8, "ppo-sil": None,
                                     "ppo-grpo": None, "bdq": None,
                                     "dyna": None, "sac-bits": None}
#: A top-level key of an rl-zoo3 file: a Gymnasium id (``cost_envs/ToolBench-v0``).
_ENV_ID = re.compile(r"([\w.-]+/)?[\w.:-]+-v\d+")


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


def read_train_config(path: Path | None, method: str,
                      env_id: str | None = None) -> TrainSettings:
    """The settings in ``path`` for ``method`` (the defaults when ``path`` is ``None``).

    ``path`` holds the settings at its top level, or is an rl-zoo3 file keyed by env id,
    of which ``env_id``'s entry is read (the module docstring).

    Raises:
        ValueError: One line naming the file and the bad key or value.
        FileNotFoundError: ``path`` does not exist.
    """
    if path is None:
        return TrainSettings()
    data = read_config_file(path)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a mapping of settings, got {data!r}")
    zoo = is_zoo_file(data)
    if zoo:
        data = zoo_settings(zoo_entry(data, path, env_id), path, method)
    # the names are known without SB3: a misspelt key is answered before torch loads
    hyper = accepted_names(method)
    unknown = sorted(str(key) for key in data if key not in TRAIN_KEYS and key not in hyper)
    if unknown:
        valid = [*TRAIN_KEYS, *(ZOO_KEYS if zoo else ()), *sorted(hyper)]
        raise ValueError(f"{path}: unknown key(s) {unknown} for {method}; valid: "
                         f"{valid}{suggestion(unknown[0], valid)}")
    from agents.learners.common.ppo_args import check_hyperparameters
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


def is_zoo_file(data: Mapping[Any, Any]) -> bool:
    """Whether ``data`` is an rl-zoo3 file: every key an env id, every value a mapping."""
    return bool(data) and all(isinstance(key, str) and _ENV_ID.fullmatch(key)
                              and isinstance(value, Mapping) for key, value in data.items())


def zoo_entry(data: Mapping[str, Any], path: Path, env_id: str | None) -> Mapping[str, Any]:
    """``env_id``'s entry of an rl-zoo3 file (keyed by the full id or the bare name).

    Raises:
        ValueError: One line naming the file, the id and the ids the file has.
    """
    ids = sorted(data)
    if env_id is None:
        raise ValueError(f"{path}: an rl-zoo3 file keyed by env id ({', '.join(ids)}); "
                         "which entry to read needs the env id")
    for key in (env_id, env_id.split("/")[-1]):
        if key in data:
            return data[key]
    raise ValueError(f"{path}: no entry for {env_id} in this rl-zoo3 file; it has "
                     f"{', '.join(ids)}")


def zoo_settings(entry: Mapping[str, Any], path: Path, method: str) -> dict[str, Any]:
    """An rl-zoo3 entry as this module's settings: renamed, and its zoo-only keys checked.

    ``n_timesteps`` becomes ``timesteps``; ``policy``, ``callback`` and ``policy_kwargs``
    must describe what ``cost-envs train`` builds (module docstring) and are dropped,
    except ``policy_kwargs``' ``action_distribution``, which is kept.

    Raises:
        ValueError: One line naming the file, the key and what was expected.
    """
    settings = {key: value for key, value in entry.items() if key not in ZOO_KEYS}
    if "n_timesteps" in entry:
        if "timesteps" in entry:
            raise ValueError(f"{path}: n_timesteps and timesteps both given; keep one")
        settings["timesteps"] = entry["n_timesteps"]
    for key, expected in (("policy", ZOO_POLICY), ("callback", ZOO_CALLBACK)):
        value = entry.get(key, expected)
        if value != expected and value != [expected]:
            raise ValueError(f"{path}: {key}: cost-envs train uses {expected}, got "
                             f"{value!r}")
    kwargs = _policy_kwargs(entry.get("policy_kwargs", {}), path)
    unknown = sorted(set(kwargs) - {"lora_rank", "action_distribution"})
    if unknown:
        raise ValueError(f"{path}: policy_kwargs: {unknown}: cost-envs train builds the "
                         "network itself; only lora_rank and action_distribution may be set")
    rank = kwargs.get("lora_rank", LORA_RANKS[method])
    if rank != LORA_RANKS[method]:
        raise ValueError(f"{path}: policy_kwargs: lora_rank={rank!r} is not the network "
                         f"{method} trains (lora_rank={LORA_RANKS[method]!r})")
    if "action_distribution" in kwargs:
        if "action_distribution" in entry:
            raise ValueError(f"{path}: action_distribution given twice (in policy_kwargs "
                             "too); keep one")
        settings["action_distribution"] = kwargs["action_distribution"]
    return settings


def _policy_kwargs(value: Any, path: Path) -> dict[str, Any]:
    """rl-zoo3's ``policy_kwargs``: a mapping, or the text of ``dict(...)``/``{...}``.

    rl-zoo3 passes the text to ``eval``; here it is parsed, and only literal values are
    read, so a config file never runs code.
    """
    if isinstance(value, Mapping):
        return dict(value)
    expected = (f"{path}: policy_kwargs: expected a mapping or the text dict(key=literal, "
                f"...), got {value!r}")
    if not isinstance(value, str):
        raise ValueError(expected)
    try:
        node = ast.parse(value.strip(), mode="eval").body
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "dict" and not node.args
                and all(item.arg is not None for item in node.keywords)):
            return {str(item.arg): ast.literal_eval(item.value) for item in node.keywords}
        parsed = ast.literal_eval(node)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise ValueError(expected) from None
    if not isinstance(parsed, dict) or not all(isinstance(key, str) for key in parsed):
        raise ValueError(expected)
    return parsed
