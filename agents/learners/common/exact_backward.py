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

Which operations must be torch's and which need not: the matrix products (MKL's blocking
fixes their sums' order), every reduction (``sum``, ``std``, the norms: torch's summation
order; a ``mean`` is torch's ``sum`` divided by the count, as torch computes it on CPU,
``sum_out(...).div_(count)``), the transcendental kernels (``tanh``, ``sigmoid``,
``log_sigmoid``, ``exp``, and ``sqrt`` too: SLEEF's vectorised approximations, not the C
library's or IEEE's correctly rounded results) and the fused kernels (``tanh_backward``,
``sigmoid_backward``, ``mse_loss``'s, Adam's ``lerp_`` / ``addcmul_`` / ``addcdiv_``, which
may round once where numpy rounds twice) stay torch calls on tensors of the shapes
autograd sees. Everything else is one IEEE-754 operation per element (``+ - * /``,
negation, ``minimum``, ``clamp``, comparisons, ``where``), which gives the same bits
whoever computes it: those run in numpy, on the same float32 memory, at a fifth of a torch
call's cost on arrays of 64. Among them ``binary_cross_entropy_with_logits``' own
composite, ``(1 - t) * x - log_sigmoid(x)``, with ``log_sigmoid`` computed once for both of
the loss's calls (the same kernel on the same logits), and the scalar arithmetic of the
loss in numpy float32 scalars (Python floats are cast to float32 first, as torch does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from agents.learners.common.fused_network import TanhNetwork


class ExactStep:
    """One minibatch of SB3's PPO loss on a plain network, and its exact gradient.

    :meth:`loss` computes the loss and what SB3 logs; :meth:`backward` then writes each
    parameter's gradient into its ``.grad`` (which must exist: the flat Adam buffers), as
    ``loss.backward()`` on zeroed gradients would leave it.
    """

    def __init__(self, network: TanhNetwork) -> None:
        self.network = network
        # the parameters themselves (not their modules' __getattr__ per minibatch)
        self.encoder = tuple((layer.weight, layer.bias) for layer in network.encoder)
        self.heads = ((network.action.weight, network.action.bias),
                      (network.value.weight, network.value.bias))
        self.saved: tuple[Any, ...] = ()
        self.constants: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    @staticmethod
    def _constants(n: int, width: int, dtype: torch.dtype, ent_coef: float,
                   vf_coef: float) -> tuple[Any, ...]:
        """The backward's values that depend only on the minibatch's shape and the weights.

        ``(d value_loss, d min, d min / 2, d entropy terms, whether the entropy's zero
        term can be left out)``: the loss's gradient 1 through ``loss = policy_loss +
        ent_coef * entropy_loss + vf_coef * value_loss``, ``-mean`` (the expanded gradient
        over the count) and the entropy's ``sum``; torch's tensors, the last three as numpy
        arrays. The zero term (``(sigmoid(l) - sigmoid(l)) * d entropy``, ``0 * d``) is
        ``-0`` when ``d`` has its sign bit set (``ent_coef >= 0``), and adding ``-0``
        changes no value.
        """
        one = torch.ones((), dtype=dtype)
        grad_value_loss, grad_entropy_loss = one * vf_coef, one * ent_coef
        grad_min = (-one).expand(n) / n
        grad_entropy = ((-grad_entropy_loss).expand(n) / n).unsqueeze(1)
        return (grad_value_loss, grad_min.numpy(), (grad_min / 2).numpy(),
                grad_entropy.numpy(), bool(np.signbit(grad_entropy.numpy()).all()))

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, old_values: torch.Tensor,
             old_log_prob: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
             clip_range: float, clip_range_vf: float | None, ent_coef: float, vf_coef: float,
             normalize_advantage: bool) -> tuple[torch.Tensor, ...]:
        """``_eager_loss``'s operations in its order, without a graph.

        Returns:
            ``(loss, policy_loss, value_loss, entropy_loss, ratio, log_ratio)``.
        """
        if not torch.is_grad_enabled():  # the caller's no_grad (FastPPO's loop) is enough
            return self._loss(obs, actions, old_values, old_log_prob, advantages, returns,
                              clip_range, clip_range_vf, ent_coef, vf_coef,
                              normalize_advantage)
        with torch.no_grad():
            return self._loss(obs, actions, old_values, old_log_prob, advantages, returns,
                              clip_range, clip_range_vf, ent_coef, vf_coef,
                              normalize_advantage)

    def _loss(self, obs: torch.Tensor, actions: torch.Tensor, old_values: torch.Tensor,
              old_log_prob: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
              clip_range: float, clip_range_vf: float | None, ent_coef: float,
              vf_coef: float, normalize_advantage: bool) -> tuple[torch.Tensor, ...]:
        hidden = obs if obs.dtype == torch.float32 else obs.float()
        activations = [hidden]
        for weight, bias in self.encoder:  # MlpEncoder.forward: tanh(F.linear) per layer
            hidden = torch.tanh(_linear(hidden, weight, bias))
            activations.append(hidden)
        (action_weight, action_bias), (value_weight, value_bias) = self.heads
        logits = _linear(hidden, action_weight, action_bias)
        values = _linear(hidden, value_weight, value_bias).flatten()
        # binary_cross_entropy_with_logits(x, t) is (1 - t) * x - log_sigmoid(x) in torch
        # (its composite's kernels); here log_sigmoid once for both, the rest in numpy
        probs = torch.sigmoid(logits)
        log_sigmoid = _log_sigmoid(logits)
        x, p, ls, a = logits.numpy(), probs.numpy(), log_sigmoid.numpy(), actions.numpy()
        log_prob = -torch.sum(torch.from_numpy((1 - a) * x - ls), 1).numpy()
        entropy = torch.sum(torch.from_numpy((1 - p) * x - ls), 1)
        count = np.float32(len(x))  # torch's mean on CPU: sum(x).div_(count)
        if normalize_advantage and len(x) > 1:
            adv = ((advantages.numpy() - torch.sum(advantages).numpy() / count)
                   / (advantages.std().numpy() + np.float32(1e-8)))
        else:
            adv = advantages.numpy()
        log_ratio = torch.from_numpy(log_prob - old_log_prob.numpy())
        ratio = torch.exp(log_ratio)
        r = ratio.numpy()
        low, high = np.float32(1 - clip_range), np.float32(1 + clip_range)
        surrogate = adv * r
        surrogate_clipped = adv * np.minimum(np.maximum(r, low), high)  # clamp
        policy_loss = -(torch.sum(torch.from_numpy(np.minimum(surrogate, surrogate_clipped)))
                        .numpy() / count)
        delta = None
        if clip_range_vf is None:
            values_pred = values
        else:
            bound = np.float32(clip_range_vf)
            old = old_values.numpy()
            delta = values.numpy() - old
            values_pred = torch.from_numpy(old + np.minimum(np.maximum(delta, -bound), bound))
        value_loss = _mse_loss(returns, values_pred, 1)  # reduction "mean"
        entropy_loss = -(torch.sum(entropy).numpy() / count)
        loss = (policy_loss + float(ent_coef) * entropy_loss
                + float(vf_coef) * value_loss.numpy())
        self.saved = (activations, a, x, p, probs, adv, r, surrogate, surrogate_clipped,
                      returns, values_pred, delta, clip_range, clip_range_vf, ent_coef,
                      vf_coef, logits.dtype)
        return (_tensor(loss), _tensor(policy_loss), value_loss, _tensor(entropy_loss),
                ratio, log_ratio)

    def backward(self) -> None:
        """Write ``loss.backward()``'s gradients into the parameters' ``.grad``."""
        if not torch.is_grad_enabled():
            self._backward()
            return
        with torch.no_grad():
            self._backward()

    def _backward(self) -> None:
        (activations, a, x, p, probs, adv, r, surrogate, surrogate_clipped, returns,
         values_pred, delta, clip_range, clip_range_vf, ent_coef, vf_coef,
         dtype) = self.saved
        self.saved = ()
        n, width = x.shape
        key = (n, width, dtype, ent_coef, vf_coef)
        if key not in self.constants:  # the same for every minibatch of this shape
            self.constants = {key: self._constants(n, width, dtype, ent_coef, vf_coef)}
        grad_value_loss, grad_min, half_min, grad_entropy, zero_term_is_minus_zero = (
            self.constants[key])
        # value_loss = mse_loss(returns, values_pred): the target's gradient
        grad_values = _mse_loss_backward(grad_value_loss, values_pred, returns, 1)
        if delta is not None:  # values_pred = old + clamp(values - old)
            bound = np.float32(clip_range_vf)
            inside = (delta >= -bound) & (delta <= bound)
            grad_values = torch.from_numpy(np.where(inside, grad_values.numpy(),
                                                    np.float32(0)))
        grad_values = grad_values.view(n, 1)
        # policy_loss = -mean(minimum(A r, A clamp(r))): minimum halves at ties
        split = np.where(surrogate == surrogate_clipped, half_min, grad_min)
        grad_surrogate = np.where(surrogate > surrogate_clipped, np.float32(0), split)
        grad_clipped = np.where(surrogate < surrogate_clipped, np.float32(0), split)
        inside = (r >= np.float32(1 - clip_range)) & (r <= np.float32(1 + clip_range))
        grad_ratio = grad_surrogate * adv + np.where(inside, grad_clipped * adv, np.float32(0))
        # ratio = exp(log_prob - old); log_prob = -sum(bce(logits, actions)), whose input
        # gradient is (sigmoid(x) - t) * grad (sigmoid(x): probs, the same op's values)
        grad_logits = (p - a) * (-(grad_ratio * r))[:, None]
        # entropy_loss = -mean(sum(bce(logits, sigmoid(logits)))): the input's gradient
        # (sigmoid(x) - sigmoid(x)) * d is -0 (see _constants), the target's through sigmoid
        if not zero_term_is_minus_zero:
            grad_logits = grad_logits + (p - p) * grad_entropy
        grad_logits = grad_logits + _sigmoid_backward(
            torch.from_numpy(-x * grad_entropy), probs).numpy()
        grad_logits_t = torch.from_numpy(grad_logits)
        # the heads (addmm: weight gradient grad^T h, bias gradient summed over rows)
        (action_weight, action_bias), (value_weight, value_bias) = self.heads
        features = activations[-1]
        torch.mm(grad_logits_t.t(), features, out=action_weight.grad)
        torch.sum(grad_logits_t, 0, out=action_bias.grad)
        torch.mm(grad_values.t(), features, out=value_weight.grad)
        torch.sum(grad_values, 0, out=value_bias.grad)
        grad_hidden = grad_logits_t.mm(action_weight).add_(grad_values.mm(value_weight))
        encoder = self.encoder
        for index in range(len(encoder) - 1, -1, -1):
            weight, bias = encoder[index]
            grad_pre = _tanh_backward(grad_hidden, activations[index + 1])
            torch.mm(grad_pre.t(), activations[index], out=weight.grad)
            torch.sum(grad_pre, 0, out=bias.grad)
            if index:
                grad_hidden = grad_pre.mm(weight)


def _tensor(value: Any) -> torch.Tensor:
    """A numpy scalar (or 0-d array) as a 0-d tensor."""
    return torch.from_numpy(np.asarray(value))


# torch's own functions, without their Python wrappers' checks (the same kernels)
_linear = torch._C._nn.linear
_log_sigmoid = torch._C._nn.log_sigmoid
#: mse_loss(input, target, reduction: int); torch's stub types the reduction as a str
_mse_loss = cast(Callable[..., torch.Tensor], torch._C._nn.mse_loss)
_mse_loss_backward = torch.ops.aten.mse_loss_backward
_sigmoid_backward = torch.ops.aten.sigmoid_backward
_tanh_backward = torch.ops.aten.tanh_backward
