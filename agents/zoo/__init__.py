r"""rl-zoo3 support: shipped hyperparameter files, and LoRA-guided PPO as a zoo algorithm.

**PPO** needs only the shipped file (``ppo.yml``: every registered id, the project's
network through ``policy: agents.learners.common.policies.AllocatorPolicy`` and ``policy_kwargs``)::

    python -m rl_zoo3.train --algo ppo --env cost_envs/ToolBench-v0 \
        --gym-packages cost_envs -conf "$(python -m agents.zoo path ppo)"

**LoRA-guided PPO** is not an algorithm rl-zoo3 knows, and it starts from a supervised
allocator, a stage rl-zoo3 has no place for. So it takes two commands: ``warm-start`` runs
the supervised stage (:func:`agents.learners.training.train` with ``method="lora"``) and saves
the result as a :class:`~agents.learners.lora_ppo.LoraGuidedPPO` model, and ``train`` is
``python -m rl_zoo3.train`` with ``lora_ppo`` added to ``rl_zoo3.utils.ALGOS``, continuing
from that model through rl-zoo3's own ``-i`` (trained agent) option::

    python -m agents.zoo warm-start --env cost_envs/ToolBench-v0 --out warm.zip
    python -m agents.zoo train --algo lora_ppo --env cost_envs/ToolBench-v0 \
        --gym-packages cost_envs -conf "$(python -m agents.zoo path lora_ppo)" -i warm.zip

Without ``-i`` rl-zoo3 would build LoRA-guided PPO on a random base with a random frozen
action head: not the method. Importing this module needs neither torch nor rl-zoo3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cost_envs.config_files import read_config_file

#: The shipped hyperparameter file of each algorithm, beside this module.
CONFIGS = {"ppo": "ppo.yml", "lora_ppo": "lora_ppo.yml"}
#: The name ``lora_ppo`` has in ``rl_zoo3.utils.ALGOS`` after :func:`register_algos`.
LORA_PPO = "lora_ppo"
#: Keys of a ``lora_ppo`` entry that decide the optimizer's parameter groups: the
#: warm-start model must be built with them for rl-zoo3 to load it (SB3 restores the
#: optimizer state, which holds one group per trained part).
GROUP_KEYS = ("value_lr_scale", "action_lr_scale")


def config_path(algo: str) -> Path:
    """The shipped rl-zoo3 hyperparameter file of ``algo`` (``ppo`` or ``lora_ppo``).

    Raises:
        ValueError: ``algo`` has no shipped file.
    """
    if algo not in CONFIGS:
        raise ValueError(f"algo: expected one of {list(CONFIGS)}, got {algo!r}")
    return Path(__file__).with_name(CONFIGS[algo])


def hyperparameters(env_id: str, config: str | Path) -> dict[str, Any]:
    """``env_id``'s entry of an rl-zoo3 hyperparameter file.

    Raises:
        ValueError: The file has no entry for ``env_id`` (and no ``default``).
    """
    entries = read_config_file(config)
    entry = entries.get(env_id, entries.get("default"))
    if not isinstance(entry, dict):
        raise ValueError(f"{config}: no entry for {env_id!r}; expected one of "
                         f"{sorted(entries)}")
    return dict(entry)


def register_algos() -> None:
    """Add :class:`~agents.learners.lora_ppo.LoraGuidedPPO` to rl-zoo3 as ``lora_ppo``.

    Idempotent. Call before rl-zoo3 parses its arguments (``--algo`` choices are read
    from ``ALGOS``), as ``python -m agents.zoo train`` does.
    """
    from rl_zoo3.utils import ALGOS

    from agents.learners.lora_ppo import LoraGuidedPPO

    ALGOS[LORA_PPO] = LoraGuidedPPO
