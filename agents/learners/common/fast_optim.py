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

import numpy as np
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
        states = [optimizer.state.get(p, {}) for p in params]  # {} (no state yet) is falsy too
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


class FlatAdam:
    """A plain Adam's parameters, gradients and moments as views of one flat buffer each.

    Adam's arithmetic is elementwise, so each of its operations can run once over every
    parameter instead of tensor by tensor: :meth:`step` is the single-tensor step of every
    trained tensor, :meth:`clip` ``clip_grad_norm_`` (the per-tensor norms are still taken
    tensor by tensor, in ``parameters``' order, so the total norm is torch's), and
    :meth:`zero_grad` zeroes the gradient buffer, which backward then accumulates into
    (``0 + g`` is ``g``). :meth:`release` gives every tensor its own memory again, so that
    outside an update the model and the optimizer are as torch made them.

    Use :meth:`attach`, which returns ``None`` when the optimizer is off this path (see
    :func:`optimizer_step`), a parameter has no gradient or no Adam state yet, the
    tensors are not contiguous float32 CPU tensors, or the step counts or Adam's betas
    and eps differ between them.
    """

    def __init__(self, optimizer: torch.optim.Optimizer,
                 parameters: Sequence[torch.Tensor]) -> None:
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        states = [optimizer.state[p] for p in self.params]
        sizes = [p.numel() for p in self.params]
        self.steps = [state["step"] for state in states]
        self.views: dict[str, list[torch.Tensor]] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        for name, tensors in (("param", [p.detach() for p in self.params]),
                              ("grad", [p.grad for p in self.params]),
                              ("exp_avg", [state["exp_avg"] for state in states]),
                              ("exp_avg_sq", [state["exp_avg_sq"] for state in states])):
            flat = torch.cat([t.reshape(-1) for t in tensors])
            self.buffers[name] = flat
            self.views[name] = [v.view_as(t) for v, t in
                                zip(flat.split(sizes), tensors, strict=True)]
        with torch.no_grad():
            for index, (param, state) in enumerate(zip(self.params, states, strict=True)):
                param.data = self.views["param"][index]
                param.grad = self.views["grad"][index]
                state["exp_avg"] = self.views["exp_avg"][index]
                state["exp_avg_sq"] = self.views["exp_avg_sq"][index]
        # addcdiv_ per run of consecutive groups with the same learning rate
        self.slices: list[tuple[int, int, list[dict]]] = []
        start = 0
        for group in optimizer.param_groups:
            end = start + sum(p.numel() for p in group["params"])
            if self.slices and self.slices[-1][1] == start and (
                    self.slices[-1][2][0]["lr"] == group["lr"]):
                self.slices[-1] = (self.slices[-1][0], end, [*self.slices[-1][2], group])
            elif end > start:
                self.slices.append((start, end, [group]))
            start = end
        position = {id(p): i for i, p in enumerate(self.params)}
        self.clip_grads = [self.views["grad"][position[id(p)]] for p in parameters
                           if p.grad is not None]
        group = optimizer.param_groups[0]
        self.beta1, self.beta2 = group["betas"]
        self.eps = group["eps"]
        #: Adam's step count (every parameter's ``state["step"]``), kept as a Python float
        #: during the update (integers: exact) and written back by :meth:`release`.
        self.count = float(self.steps[0])
        self.grad_array = self.buffers["grad"].numpy()
        buffers = self.buffers
        self._flat = (buffers["grad"], buffers["exp_avg"], buffers["exp_avg_sq"],
                      buffers["param"], torch.empty_like(buffers["exp_avg_sq"]))
        self._arrays = (self._flat[2].numpy(), self._flat[4].numpy())
        # torch casts a Python scalar to the tensor's float32 before the operation
        self._beta2_eps = (np.float32(self.beta2), np.float32(self.eps))
        #: The one group whose step covers every parameter, if there is one (else the
        #: slices' step per run of groups).
        self.whole = (optimizer.param_groups[0] if len(optimizer.param_groups) == 1
                      and self.slices == [(0, len(buffers["param"]), optimizer.param_groups)]
                      else None)

    @classmethod
    def attach(cls, optimizer: torch.optim.Optimizer,
               parameters: Sequence[torch.Tensor]) -> FlatAdam | None:
        """A :class:`FlatAdam` over ``optimizer``, or ``None`` off its path (class docstring).

        ``parameters``: every parameter of the model, in the order ``clip_grad_norm_``
        gets them; those with a gradient must be exactly the optimizer's.
        """
        if not _plain_adam(optimizer):
            return None
        groups = optimizer.param_groups
        params = [p for group in groups for p in group["params"]]
        if not params or len({(g["betas"], g["eps"]) for g in groups}) != 1:
            return None
        for p in params:
            state = optimizer.state.get(p)
            if (not state or p.grad is None or p.dtype != torch.float32
                    or p.device.type != "cpu" or p.grad.is_sparse or not p.is_contiguous()
                    or not p.grad.is_contiguous()):
                return None
        if len({float(optimizer.state[p]["step"]) for p in params}) != 1:
            return None
        with_grad = {id(p) for p in parameters if p.grad is not None}
        if with_grad != {id(p) for p in params}:
            return None
        return cls(optimizer, parameters)

    def zero_grad(self) -> None:
        """Zero every gradient (backward adds into them)."""
        self.buffers["grad"].zero_()

    def clip(self, max_norm: float) -> None:
        """:func:`clip_grad_norm` of the model's parameters.

        The norms are torch's; the coefficient's scalar float32 operations (``total +
        1e-6``, ``reciprocal``, ``* max_norm``, ``clamp``; ``max_norm / tensor`` is
        ``tensor.reciprocal() * max_norm`` in torch) and the multiplication of every
        gradient by it are IEEE-exact, so numpy's give the same bits at less cost. The
        gradients are plain tensors (no autograd): no ``no_grad`` needed.
        """
        norms = torch._foreach_norm(self.clip_grads, 2.0)
        total = np.float32(torch.linalg.vector_norm(torch.stack(norms), 2.0).item())
        coef = (np.float32(1.0) / (total + np.float32(1e-6))) * np.float32(max_norm)
        self.grad_array *= np.minimum(coef, np.float32(1.0))

    def advance(self) -> float:
        """Count one Adam step; the new step count."""
        self.count += 1.0
        return self.count

    def step(self) -> None:
        """Adam's single-tensor step for every parameter (:func:`optimizer_step`).

        The same kernels on the same values: ``torch.sqrt`` into a buffer kept for it and
        the division in place (``sqrt`` must be torch's: its vectorised kernel is not
        IEEE's correctly rounded square root), ``addcdiv_`` once over the whole buffer when
        every group shares one learning rate; the two one-rounding operations, ``* beta2``
        and ``+ eps`` (Python floats cast to float32 first, as torch casts them), in numpy
        on the same memory. The buffers are plain tensors (no autograd), so no ``no_grad``
        is needed.
        """
        grad, exp_avg, exp_avg_sq, param, denom = self._flat
        exp_avg_sq_array, denom_array = self._arrays
        step = self.advance()
        beta1, beta2 = self.beta1, self.beta2
        exp_avg.lerp_(grad, 1 - beta1)
        np.multiply(exp_avg_sq_array, self._beta2_eps[0], out=exp_avg_sq_array)  # IEEE
        exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)
        torch.sqrt(exp_avg_sq, out=denom).div_((1 - beta2**step) ** 0.5)
        np.add(denom_array, self._beta2_eps[1], out=denom_array)  # IEEE
        if self.whole is not None:
            param.addcdiv_(exp_avg, denom, value=-(self.whole["lr"] / (1 - beta1**step)))
            return
        for start, end, groups in self.slices:
            step_size = groups[0]["lr"] / (1 - beta1**step)
            if any(group["lr"] != groups[0]["lr"] for group in groups):
                raise ValueError("FlatAdam: learning rates changed within a run of groups "
                                 "during an update; release() and attach() again")
            param[start:end].addcdiv_(exp_avg[start:end], denom[start:end], value=-step_size)

    def release(self) -> None:
        """Give every parameter, gradient and moment its own memory again (copies).

        Also writes the step count into every ``state["step"]``.
        """
        with torch.no_grad():
            for step in self.steps:
                step.fill_(self.count)
            for index, param in enumerate(self.params):
                state = self.optimizer.state[param]
                param.data = self.views["param"][index].clone()
                param.grad = self.views["grad"][index].clone()
                state["exp_avg"] = self.views["exp_avg"][index].clone()
                state["exp_avg_sq"] = self.views["exp_avg_sq"][index].clone()
