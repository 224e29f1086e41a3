"""SB3's PPO loss on the plain allocator network and autograd's backward of it, without autograd.

For the plain network (:class:`~agents.learners.common.fused_network.TanhNetwork`: tanh
encoder, linear action and value heads) and SB3's loss (clipped surrogate, entropy bonus,
optionally clipped value loss), :class:`ExactStep` runs the forward operations of
:meth:`agents.learners.ppo.FastPPO._eager_loss` without recording a graph, then the
operations autograd's backward would run, each one exactly: the formulas of torch's
``derivatives.yaml`` for every node (``minimum`` halves the gradient at ties, ``clamp``
passes it at its bounds, ``mean`` divides the expanded gradient by the count, ``addmm``'s
matrix gradients as ``mm_mat1_backward`` / ``mm_mat2_backward`` compute them for these
strides, a broadcast bias summed over the batch), the fused backward kernels through
``torch.ops.aten`` (``tanh_backward``, ``sigmoid_backward``, ``mse_loss_backward``), and
where a tensor feeds two nodes the two gradients added (addition commutes, so autograd's
order does not matter; the logits get three, one of which is exactly zero: the entropy's
``sigmoid(l) - sigmoid(l)``). So the gradients are autograd's bit for bit
(``tests/test_fast_ppo.py`` trains SB3's weights with it), at a third of the cost: no
graph to build and walk.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from agents.learners.common.fused_network import TanhNetwork


class ExactStep:
    """One minibatch of SB3's PPO loss on a plain network, and its exact gradient.

    :meth:`loss` computes the loss and what SB3 logs; :meth:`backward` then writes each
    parameter's gradient into its ``.grad`` (which must exist: the flat Adam buffers), as
    ``loss.backward()`` on zeroed gradients would leave it.
    """

    def __init__(self, network: TanhNetwork) -> None:
        self.network = network
        self.saved: tuple[Any, ...] = ()
        self.constants: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = {}

    @staticmethod
    def _constants(n: int, width: int, dtype: torch.dtype, ent_coef: float,
                   vf_coef: float) -> tuple[torch.Tensor, ...]:
        """The backward's tensors that depend only on the minibatch's shape and the weights.

        ``(zero, d value_loss, d min, d min / 2, d entropy terms)``: the loss's gradient 1
        through ``loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss``,
        ``-mean`` (the expanded gradient over the count) and the entropy's ``sum``.
        """
        one = torch.ones((), dtype=dtype)
        grad_value_loss, grad_entropy_loss = one * vf_coef, one * ent_coef
        grad_min = (-one).expand(n) / n
        grad_entropy = ((-grad_entropy_loss).expand(n) / n).unsqueeze(1).expand(n, width)
        return (torch.zeros((), dtype=dtype), grad_value_loss, grad_min, grad_min / 2,
                grad_entropy)

    @torch.no_grad()
    def loss(self, obs: torch.Tensor, actions: torch.Tensor, old_values: torch.Tensor,
             old_log_prob: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
             clip_range: float, clip_range_vf: float | None, ent_coef: float, vf_coef: float,
             normalize_advantage: bool) -> tuple[torch.Tensor, ...]:
        """``_eager_loss``'s operations in its order, without a graph.

        Returns:
            ``(loss, policy_loss, value_loss, entropy_loss, ratio, log_ratio)``.
        """
        network = self.network
        hidden = obs.float()
        activations = [hidden]
        for layer in network.encoder:  # MlpEncoder.forward: tanh(F.linear) per layer
            hidden = torch.tanh(F.linear(hidden, layer.weight, layer.bias))
            activations.append(hidden)
        logits = F.linear(hidden, network.action.weight, network.action.bias)
        values = F.linear(hidden, network.value.weight, network.value.bias).flatten()
        log_prob = -F.binary_cross_entropy_with_logits(logits, actions,
                                                        reduction="none").sum(dim=1)
        probs = torch.sigmoid(logits)
        entropy = F.binary_cross_entropy_with_logits(logits, probs, reduction="none").sum(dim=1)
        if normalize_advantage and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = log_prob - old_log_prob
        ratio = torch.exp(log_ratio)
        surrogate = advantages * ratio
        surrogate_clipped = advantages * torch.clamp(ratio, 1 - clip_range, 1 + clip_range)
        policy_loss = -torch.min(surrogate, surrogate_clipped).mean()
        delta = None
        if clip_range_vf is None:
            values_pred = values
        else:
            delta = values - old_values
            values_pred = old_values + torch.clamp(delta, -clip_range_vf, clip_range_vf)
        value_loss = F.mse_loss(returns, values_pred)
        entropy_loss = -torch.mean(entropy)
        loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss
        self.saved = (activations, actions, logits, probs, advantages, ratio, surrogate,
                      surrogate_clipped, returns, values_pred, delta, clip_range,
                      clip_range_vf, ent_coef, vf_coef, loss.dtype)
        return loss, policy_loss, value_loss, entropy_loss, ratio, log_ratio

    @torch.no_grad()
    def backward(self) -> None:
        """Write ``loss.backward()``'s gradients into the parameters' ``.grad``."""
        (activations, actions, logits, probs, advantages, ratio, surrogate, surrogate_clipped,
         returns, values_pred, delta, clip_range, clip_range_vf, ent_coef, vf_coef,
         dtype) = self.saved
        self.saved = ()
        n, width = logits.shape
        key = (n, width, dtype, ent_coef, vf_coef)
        if key not in self.constants:  # the same for every minibatch of this shape
            self.constants = {key: self._constants(n, width, dtype, ent_coef, vf_coef)}
        zero, grad_value_loss, grad_min, half_min, grad_entropy = self.constants[key]
        # value_loss = mse_loss(returns, values_pred): the target's gradient
        grad_values = torch.ops.aten.mse_loss_backward(grad_value_loss, values_pred, returns, 1)
        if delta is not None:  # values_pred = old + clamp(values - old)
            inside = (delta >= -clip_range_vf).logical_and_(delta <= clip_range_vf)
            grad_values = torch.where(inside, grad_values, zero)
        grad_values = grad_values.view(n, 1)
        # policy_loss = -mean(minimum(A r, A clamp(r)))
        split = torch.where(surrogate == surrogate_clipped, half_min, grad_min)
        grad_surrogate = split.masked_fill(surrogate > surrogate_clipped, 0)
        grad_clipped = split.masked_fill(surrogate < surrogate_clipped, 0)
        inside = (ratio >= 1 - clip_range).logical_and_(ratio <= 1 + clip_range)
        grad_ratio = grad_surrogate * advantages + torch.where(
            inside, grad_clipped * advantages, zero)
        # ratio = exp(log_prob - old); log_prob = -sum(bce(logits, actions))
        grad_bce = (-(grad_ratio * ratio)).unsqueeze(1).expand(n, width)
        grad_logits = (torch.sigmoid(logits) - actions) * grad_bce
        # entropy_loss = -mean(sum(bce(logits, sigmoid(logits))))
        grad_logits = grad_logits + (torch.sigmoid(logits) - probs) * grad_entropy
        grad_logits = grad_logits + torch.ops.aten.sigmoid_backward(-logits * grad_entropy,
                                                                    probs)
        # the heads (addmm: weight gradient grad^T h, bias gradient summed over rows)
        network = self.network
        features = activations[-1]
        for head, grad in ((network.action, grad_logits), (network.value, grad_values)):
            torch.mm(grad.t(), features, out=head.weight.grad)
            torch.sum(grad, 0, out=head.bias.grad)
        grad_hidden = (grad_logits.mm(network.action.weight)
                       + grad_values.mm(network.value.weight))
        for index in range(len(network.encoder) - 1, -1, -1):
            layer = network.encoder[index]
            grad_pre = torch.ops.aten.tanh_backward(grad_hidden, activations[index + 1])
            torch.mm(grad_pre.t(), activations[index], out=layer.weight.grad)
            torch.sum(grad_pre, 0, out=layer.bias.grad)
            if index:
                grad_hidden = grad_pre.mm(layer.weight)
