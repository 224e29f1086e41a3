"""Which SB3 hyperparameters ``train(ppo=...)`` and ``cost-envs train --config`` accept.

The accepted keys are read from the algorithm's own signature (SB3's ``PPO``, and for
``lora-ppo`` also :class:`agents.learners.lora_ppo.LoraGuidedPPO`'s extra arguments), so a
new SB3 release's arguments are accepted without a list to keep in step, and a misspelt
key is an error naming it and the valid ones instead of being ignored. Arguments the
training code sets itself (the policy, the env, the device, logging, the seed) are not
hyperparameters and are refused.

Values are checked here, before any training, by the kind of the signature's default
(an int, a float, a bool, or ``None`` for an optional float), so a bad value in a config
file fails at once rather than after the supervised stage.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from stable_baselines3 import PPO

from agents.learners import NOT_PPO
from agents.learners.bdq import BranchingDQN
from agents.learners.common.policies import check_widths
from agents.learners.dyna import DynaBDQ
from agents.learners.grpo import GroupRelativePPO
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.sac_bits import SACPerBit
from agents.learners.sil import SelfImitationPPO
from cost_envs.config import boolean, integer, number, suggestion

#: Arguments the training code sets itself: never hyperparameters.
RESERVED = frozenset({"self", "policy", "env", "device", "verbose", "tensorboard_log",
                      "policy_kwargs", "seed", "_init_setup_model", "rollout_buffer_class",
                      "rollout_buffer_kwargs", "kwargs"})
#: Integer arguments that may be -1 (SB3: "-1 = only at the beginning of the rollout").
_MINUS_ONE = frozenset({"sde_sample_freq"})
#: Hyperparameters that are lists of layer widths (``None``: the policy's own).
_WIDTHS = frozenset({"critic_hidden_sizes"})


def _arguments(cls: type[Any]) -> dict[str, Any]:
    """``cls.__init__``'s arguments that are hyperparameters, with their defaults."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {param.name: param.default for param in params
            if param.name not in RESERVED
            and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL)}


#: SB3 ``PPO``'s hyperparameters and their defaults.
PPO_ARGUMENTS: dict[str, Any] = _arguments(PPO)
#: What ``lora-ppo`` adds (cost_coef, value_lr_scale, action_lr_scale).
LORA_PPO_ARGUMENTS: dict[str, Any] = {
    name: default for name, default in _arguments(LoraGuidedPPO).items()
    if name not in PPO_ARGUMENTS}


#: What every RL stage adds (:class:`agents.learners.ppo.FastPPO`): ``fused_loss``, the
#: update's gradients by hand, float-close to SB3's rather than bit-identical and faster.
FAST_PPO_ARGUMENTS: dict[str, Any] = {"fused_loss": False}


#: What each method's model class adds to PPO's arguments (issue #38's learners: the
#: ``sil_*`` settings, ``group_size``).
METHOD_ARGUMENTS: dict[str, dict[str, Any]] = {
    "lora-ppo": LORA_PPO_ARGUMENTS,
    **{method: {name: default for name, default in _arguments(cls).items()
                if name not in PPO_ARGUMENTS and name not in FAST_PPO_ARGUMENTS}
       for method, cls in (("ppo-sil", SelfImitationPPO), ("ppo-grpo", GroupRelativePPO))},
    # not PPO: its own arguments only
    "bdq": _arguments(BranchingDQN),
    # BDQ's arguments and the model's (DynaBDQ passes BDQ's on as **kwargs)
    "dyna": {**_arguments(BranchingDQN), **_arguments(DynaBDQ)},
    "sac-bits": _arguments(SACPerBit)}


def accepted(method: str) -> dict[str, Any]:
    """The hyperparameters ``method`` accepts, with SB3's (or its model class's) defaults."""
    if method in NOT_PPO:
        return dict(METHOD_ARGUMENTS[method])
    return {**PPO_ARGUMENTS, **FAST_PPO_ARGUMENTS, **METHOD_ARGUMENTS.get(method, {})}


def check_hyperparameters(values: Mapping[str, Any], method: str,
                          where: str = "ppo") -> dict[str, Any]:
    """``values`` checked against ``method``'s signature; returns them as plain values.

    Raises:
        ValueError: One line naming an unknown key and the valid ones, or a key whose
            value is not of its default's kind (an int >= 1, a number >= 0, a bool, a
            list of layer widths).
    """
    allowed = accepted(method)
    unknown = sorted(str(key) for key in values if key not in allowed)
    if unknown:
        raise ValueError(f"{where}: unknown hyperparameter(s) {unknown} for {method}; valid: "
                         f"{sorted(allowed)}{suggestion(unknown[0], allowed)}")
    return {key: _checked(key, value, allowed[key], where) for key, value in values.items()}


def _checked(key: str, value: Any, default: Any, where: str) -> Any:
    """``value`` if it has the kind of ``default`` (a float default takes any number)."""
    if key in _WIDTHS:
        return None if value is None else check_widths(value, f"{where}: {key}")
    if isinstance(default, bool):
        return boolean(value, key, where=where)
    if isinstance(default, int):
        return integer(value, key, minimum=-1 if key in _MINUS_ONE else 1, where=where)
    if value is None and default is None:
        return None
    return number(value, key, minimum=0, where=where)
