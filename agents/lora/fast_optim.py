"""Gradient clipping and an Adam step: torch's operations, in fewer Python calls.

:func:`clip_grad_norm` is ``torch.nn.utils.clip_grad_norm_`` (2-norm, CPU tensors) and
:func:`optimizer_step` is ``optimizer.step()`` of a plain ``torch.optim.Adam``: the same
tensor operations on the same tensors in the same order, so the same bits, without the
Python bookkeeping that costs more than the arithmetic on a network of a few thousand
weights. Adam's single-tensor step (torch's choice on CPU) runs each operation tensor by
tensor; here each is one ``torch._foreach_*`` call over the group, which on CPU applies that
same operation tensor by tensor inside torch. Anything off that path (another optimizer,
AMSGrad, weight decay, ``maximize``, ``capturable``, ``differentiable``, ``fused``,
``foreach=True``, tensor hyperparameters, step hooks, a first step, parameters at
different step counts) is handed to ``optimizer.step()`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

#: Adam options :func:`optimizer_step` reproduces, with the values it requires.
_PLAIN_ADAM = {"amsgrad": False, "weight_decay": 0, "maximize": False, "capturable": False,
               "differentiable": False, "decoupled_weight_decay": False}


@torch.no_grad()
def clip_grad_norm(parameters: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(parameters, max_norm)`` for CPU tensors of one dtype.

    Torch's own steps: the per-tensor norms by ``torch._foreach_norm``, their 2-norm, the
    coefficient ``min(max_norm / (total + 1e-6), 1)`` and ``torch._foreach_mul_``. Tensors
    without a gradient are skipped, as torch does.

    Returns:
        The total norm before clipping.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    if len({(g.device, g.dtype) for g in grads}) != 1 or grads[0].device.type != "cpu":
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    total_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    clip_coef = float(max_norm) / (total_norm + 1e-6)
    torch._foreach_mul_(grads, torch.clamp(clip_coef, max=1.0))
    return total_norm


def _plain_adam(optimizer: torch.optim.Optimizer) -> bool:
    if (type(optimizer) is not torch.optim.Adam or optimizer._optimizer_step_pre_hooks
            or optimizer._optimizer_step_post_hooks or _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks):
        return False
    for group in optimizer.param_groups:
        if any(group[key] != value for key, value in _PLAIN_ADAM.items()):
            return False
        if group["foreach"] or group["fused"]:
            return False
        if not all(isinstance(v, float) for v in (group["lr"], *group["betas"])):
            return False
    return True


@torch.no_grad()
def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; for a plain CPU ``torch.optim.Adam``, the same step in fewer calls.

    Per group, the single-tensor step's operations: ``step += 1``;
    ``exp_avg.lerp_(grad, 1 - beta1)``; ``exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
    value=1 - beta2)``; ``denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2**step)).add_(eps)``;
    ``param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))``.
    """
    if not _plain_adam(optimizer):
        optimizer.step()
        return
    groups = []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        states = [optimizer.state.get(p) for p in params]
        if any(not state or p.device.type != "cpu" or p.is_complex() or p.grad.is_sparse
               for p, state in zip(params, states, strict=True)):
            optimizer.step()  # first step (state to create) or a case torch handles itself
            return
        steps = [state["step"] for state in states]
        if len({float(step) for step in steps}) != 1:
            optimizer.step()
            return
        groups.append((group, params, states, steps))
    for group, params, states, steps in groups:
        grads = [p.grad for p in params]
        exp_avgs = [state["exp_avg"] for state in states]
        exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        step = steps[0].item()
        step_size = group["lr"] / (1 - beta1**step)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, (1 - beta2**step) ** 0.5)
        torch._foreach_add_(denom, group["eps"])
        torch._foreach_addcdiv_(params, exp_avgs, denom, -step_size)
