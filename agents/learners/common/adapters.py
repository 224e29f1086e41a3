"""LoRA through peft: injection into an encoder, merging, and the optimizer check.

peft's :func:`~peft.inject_adapter_in_model` wraps each target ``nn.Linear`` in a
``lora.Linear`` that keeps the original layer as a frozen ``base_layer`` and adds
``lora_A`` (``in -> r``) and ``lora_B`` (``r -> out``, initialised to zero, so a fresh
adapter changes nothing). Only ``lora_A`` and ``lora_B`` require gradients afterwards.

Two traps this module guards against:

* Stable-Baselines3 builds the optimizer inside ``ActorCriticPolicy._build``. Adapters
  injected after that are not in the optimizer and silently never train, while the frozen
  base still is. :func:`verify_optimizer` compares the optimizer with the parameters
  that require gradients and names every difference.
* Dropout inside the adapter makes the log-probabilities PPO computes at rollout time
  (eval mode) and at update time (train mode) disagree. Adapters here have no dropout.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from cost_envs.config import integer, number

if TYPE_CHECKING:
    from typing import TypeGuard

    from peft.tuners.lora import LoraLayer


@dataclass(frozen=True)
class LoraSettings:
    """Rank and scale of the adapters (the update is ``(alpha / rank) * B @ A``).

    Args:
        rank: ``r``, the adapter rank (the paper's A.4 uses 8).
        alpha: ``lora_alpha``.
    """

    rank: int = 8
    alpha: float = 16.0

    def __post_init__(self) -> None:
        integer(self.rank, "LoRA rank", minimum=1)
        number(self.alpha, "LoRA alpha", minimum=0, inclusive=False)


def is_lora_layer(layer: nn.Module) -> TypeGuard[LoraLayer]:
    """Whether ``layer`` is a peft LoRA layer.

    peft takes seconds to import (transformers with it), so it is imported only where
    adapters are made (:func:`inject_lora`); until something has imported it, no layer can
    be one, and a plain policy never pays for it.
    """
    lora = sys.modules.get("peft.tuners.lora")
    return lora is not None and isinstance(layer, lora.LoraLayer)


def has_lora(module: nn.Module) -> bool:
    """Whether any layer of ``module`` carries a LoRA adapter."""
    return any(is_lora_layer(layer) for layer in module.modules())


def inject_lora(module: nn.Module, settings: LoraSettings) -> nn.Module:
    """Wrap every ``nn.Linear`` of ``module`` in a peft LoRA layer, in place.

    Afterwards the original weights are frozen and only the adapters require gradients.

    Args:
        module: A module with at least one ``nn.Linear`` and no adapters yet.
        settings: Rank and alpha.

    Returns:
        ``module`` itself.
    """
    from peft import LoraConfig, inject_adapter_in_model

    if has_lora(module):
        raise ValueError(f"{type(module).__name__} already carries LoRA adapters")
    targets = [name for name, layer in module.named_modules() if isinstance(layer, nn.Linear)]
    if not targets:
        raise ValueError(f"{type(module).__name__} has no nn.Linear layer to adapt")
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # peft says int; uses alpha / r
        lora_dropout=0.0,  # dropout would make rollout and update log-probs disagree
        bias="none",
        target_modules=targets,
    )
    return inject_adapter_in_model(config, module)


def adapted_linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for a plain or peft-adapted ``nn.Linear``, without peft's dispatch.

    For an unmerged adapter it computes ``W x + b + (alpha / r) * B A x`` over the active
    adapters, exactly what peft's ``lora.Linear.forward`` computes for a LoRA adapter
    without dropout (a test holds the two equal), in half the time: peft's per-call
    checks cost about 45 microseconds a layer, which is most of a small policy's forward.
    Merged or disabled adapters, and plain layers, go through the layer itself.
    """
    if not is_lora_layer(layer) or layer.merged or layer.disable_adapters:
        return plain_linear(layer, x)
    # lora.Linear: its base layer, lora_A and lora_B are nn.Linear (inject_lora's targets).
    base = cast(nn.Linear, layer.get_base_layer())
    out = F.linear(x, base.weight, base.bias)
    for name in layer.active_adapters:
        down = cast(nn.Linear, layer.lora_A[name]).weight
        up = cast(nn.Linear, layer.lora_B[name]).weight
        out = out + F.linear(F.linear(x, down), up) * layer.scaling[name]
    return out


def plain_linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``; for an ``nn.Linear`` without hooks, ``F.linear`` itself.

    The same operation without ``nn.Module.__call__``'s hook machinery, a few microseconds
    a call that add up in a policy of a few 64-wide layers called once per env step and
    per minibatch.
    """
    if type(layer) is nn.Linear and not (layer._forward_hooks or layer._forward_pre_hooks
                                         or _global_forward_hooks
                                         or _global_forward_pre_hooks):
        return F.linear(x, layer.weight, layer.bias)
    return layer(x)


def lora_parameter_names(module: nn.Module) -> list[str]:
    """Names of the adapter tensors (``lora_A`` / ``lora_B``) of ``module``."""
    return [name for name, _ in module.named_parameters() if ".lora_" in f".{name}"]


def merge_lora(module: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight and drop the LoRA wrappers, in place.

    ``W <- W + (alpha / r) * B @ A``; the result is a plain network computing the same
    function with no adapter overhead at inference.

    Returns:
        ``module`` itself (an adapted root module is returned as its merged base layer).
    """
    if is_lora_layer(module):
        module.merge()
        return module.get_base_layer()
    for name, child in list(module.named_children()):
        merged = merge_lora(child)
        if merged is not child:
            setattr(module, name, merged)
    return module


def verify_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Raise ``ValueError`` unless ``optimizer`` holds exactly the trainable parameters.

    Catches adapters injected after the optimizer was built (they would never train) and
    frozen tensors left in it.

    Args:
        model: The module whose ``requires_grad`` flags are the truth.
        optimizer: The optimizer that is meant to train it.
    """
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    named = list(model.named_parameters())
    missing = [name for name, p in named if p.requires_grad and id(p) not in in_optimizer]
    frozen = [name for name, p in named if not p.requires_grad and id(p) in in_optimizer]
    foreign = len(in_optimizer - {id(p) for _, p in named})
    if missing or frozen or foreign:
        problems = []
        if missing:
            problems.append(f"trainable but not in the optimizer (they would never train): "
                            f"{missing}")
        if frozen:
            problems.append(f"frozen but in the optimizer: {frozen}")
        if foreign:
            problems.append(f"{foreign} optimizer tensor(s) that are not the model's")
        raise ValueError(
            "the optimizer does not hold exactly the trainable parameters; "
            + "; ".join(problems)
            + ". Inject LoRA before the optimizer is built (AllocatorPolicy does) or "
            "rebuild it with AllocatorPolicy.train_only()"
        )
