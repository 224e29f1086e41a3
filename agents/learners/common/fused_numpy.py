"""The fused PPO gradient step in numpy: the same update as the torch one, at numpy's call cost.

A fused update of the plain allocator network (:mod:`agents.learners.common.fused_network`)
is about a hundred tensor operations per minibatch on arrays of a few hundred to a few
thousand floats; on CPU each torch call costs several microseconds of dispatch, numpy's
well under one, and the arithmetic itself is smaller still. :class:`NumpyFusedStep` runs
the whole gradient step (advantage normalisation, forward, the loss of
:class:`~agents.learners.common.fused_loss.BernoulliPPOLoss` and its closed-form gradient,
the network's backward, gradient clipping and Adam's single-tensor step) in float32 numpy,
writing into numpy views of :class:`~agents.learners.common.fast_optim.FlatAdam`'s flat
buffers, which the model's parameters, gradients and moments are views of during an
update.

The same formulas as the torch fused path; numpy's kernels (OpenBLAS matmuls, its
reductions, ``exp``/``log1p``) round differently, so it is float-close to it and to SB3's
PPO, not bit-identical (``tests/test_fast_ppo.py`` bounds the difference as for the torch
fused path).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from agents.learners.common.fast_optim import FlatAdam
from agents.learners.common.fused_network import TanhNetwork

_add = np.add.reduce


class NumpyFusedStep:
    """One minibatch's fused PPO update on the plain network, in numpy (module docstring).

    Args:
        network: The plain network (:meth:`TanhNetwork.of`).
        flat: The attached :class:`FlatAdam` whose buffers hold the network's parameters.
        settings: :class:`BernoulliPPOLoss`'s settings (``clip_range``, ``clip_range_vf``,
            ``ent_coef``, ``vf_coef``, ``aux_coef``, ``costs``).
        normalize_advantage: Normalise each minibatch's advantages (SB3's option).
        max_grad_norm: ``clip_grad_norm_``'s bound.

    Raises:
        ValueError: If a layer's parameter is not one of ``flat``'s.
    """

    def __init__(self, network: TanhNetwork, flat: FlatAdam, settings: dict[str, Any],
                 normalize_advantage: bool, max_grad_norm: float) -> None:
        position = {id(p): i for i, p in enumerate(flat.params)}

        def views(layer: torch.nn.Linear) -> tuple[np.ndarray, ...]:
            out = []
            for param in (layer.weight, layer.bias):
                if id(param) not in position:
                    raise ValueError(f"NumpyFusedStep: a parameter of shape "
                                     f"{tuple(param.shape)} is not in the flat Adam buffers")
                index = position[id(param)]
                out += [flat.views["param"][index].numpy(), flat.views["grad"][index].numpy()]
            return tuple(out)

        self.flat = flat
        self.encoder = [views(layer) for layer in network.encoder]
        self.action = views(network.action)
        self.value = views(network.value)
        self.clip_range = float(settings["clip_range"])
        vf = settings["clip_range_vf"]
        self.clip_range_vf = None if vf is None else float(vf)
        self.ent_coef = float(settings["ent_coef"])
        self.vf_coef = float(settings["vf_coef"])
        self.aux_coef = float(settings["aux_coef"])
        costs = settings["costs"]
        self.costs = None if costs is None else costs.detach().cpu().numpy().astype(np.float32)
        self.normalize_advantage = normalize_advantage
        self.max_grad_norm = float(max_grad_norm)
        self.param = flat.buffers["param"].numpy()
        self.grad = flat.buffers["grad"].numpy()
        self.exp_avg = flat.buffers["exp_avg"].numpy()
        self.exp_avg_sq = flat.buffers["exp_avg_sq"].numpy()
        self.scratch = np.empty_like(self.param)
        self.scratch2 = np.empty_like(self.param)
        self.slices = [(start, end, float(groups[0]["lr"])) for start, end, groups in flat.slices]
        if any(group["lr"] != lr for (_, _, lr), (_, _, groups) in
               zip(self.slices, flat.slices, strict=True) for group in groups):
            raise ValueError("NumpyFusedStep: learning rates differ within a run of groups")
        self.beta1, self.beta2, self.eps = flat.beta1, flat.beta2, flat.eps

    def gradient(self, obs: np.ndarray, actions: np.ndarray, old_values: np.ndarray,
                 old_log_prob: np.ndarray, advantages: np.ndarray, returns: np.ndarray,
                 ) -> tuple[Any, ...]:
        """One minibatch's loss, its gradient written into the gradient buffer.

        Call :meth:`update` next to clip it and take Adam's step (or skip both, as a PPO
        update stopped by ``target_kl`` does).

        Returns:
            ``(loss, policy_loss, value_loss, entropy_loss, cost_term, ratio, log_ratio)``:
            float32 scalars (``cost_term`` ``None`` without costs) and arrays.
        """
        n = len(advantages)
        if self.normalize_advantage and n > 1:
            centred = advantages - _add(advantages) / np.float32(n)
            std = np.sqrt(np.dot(centred, centred) / np.float32(n - 1))
            advantages = centred / (std + np.float32(1e-8))
        # forward
        activations = [obs]
        hidden = obs
        for weight, _, bias, _ in self.encoder:
            hidden = np.matmul(hidden, weight.T)
            hidden += bias
            np.tanh(hidden, out=hidden)
            activations.append(hidden)
        wa, ga, ba, gba = self.action
        wv, gv, bv, gbv = self.value
        logits = np.matmul(hidden, wa.T)
        logits += ba
        values = np.matmul(hidden, wv[0])
        values += bv[0]
        # the loss (BernoulliPPOLoss.forward's): softplus and sigmoid without overflow
        small = np.exp(-np.abs(logits))  # exp(-|l|) in (0, 1]
        softplus = np.log1p(small)
        softplus += np.maximum(logits, 0)
        reciprocal = 1 / (1 + small)
        probs = np.where(logits >= 0, reciprocal, small * reciprocal)
        log_prob = _add(actions * logits - softplus, axis=1)
        entropy = _add(softplus - logits * probs, axis=1)
        log_ratio = log_prob - old_log_prob
        ratio = np.exp(log_ratio)
        clipped = np.clip(ratio, 1 - self.clip_range, 1 + self.clip_range)
        surrogate, surrogate_clipped = advantages * ratio, advantages * clipped
        policy_loss = -_add(np.minimum(surrogate, surrogate_clipped)) / np.float32(n)
        if self.clip_range_vf is None:
            values_pred, value_mask = values, None
        else:
            delta = values - old_values
            values_pred = old_values + np.clip(delta, -self.clip_range_vf, self.clip_range_vf)
            value_mask = np.abs(delta) <= self.clip_range_vf
        error = values_pred - returns
        value_loss = np.dot(error, error) / np.float32(n)
        entropy_loss = -_add(entropy) / np.float32(n)
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        cost_term = None
        if self.costs is not None:
            cost_term = _add(probs @ self.costs) / np.float32(n)
            loss = loss + self.aux_coef * cost_term
        # its gradient (BernoulliPPOLoss.backward's)
        d_log_prob = (advantages * (-1 / n)) * (surrogate <= surrogate_clipped)
        d_log_prob *= ratio
        spread = probs * (1 - probs)
        d_logits = actions - probs
        d_logits *= d_log_prob[:, None]
        d_logits += (self.ent_coef / n) * logits * spread
        if self.costs is not None:
            d_logits += (self.aux_coef / n) * self.costs * spread
        d_values = (self.vf_coef * 2 / n) * error
        if value_mask is not None:
            d_values *= value_mask
        # the network's backward (TanhNetwork.backward's), into the gradient buffer
        np.matmul(d_logits.T, hidden, out=ga)
        _add(d_logits, axis=0, out=gba)
        np.matmul(d_values, hidden, out=gv[0])
        gbv[0] = _add(d_values)
        d_hidden = np.matmul(d_logits, wa)
        d_hidden += d_values[:, None] * wv[0]
        for index in range(len(self.encoder) - 1, -1, -1):
            weight, grad_w, _, grad_b = self.encoder[index]
            out = activations[index + 1]
            d_hidden *= 1 - out * out
            np.matmul(d_hidden.T, activations[index], out=grad_w)
            _add(d_hidden, axis=0, out=grad_b)
            if index:
                d_hidden = np.matmul(d_hidden, weight)
        return loss, policy_loss, value_loss, entropy_loss, cost_term, ratio, log_ratio

    def update(self) -> None:
        """``clip_grad_norm_`` and Adam's single-tensor step over the flat buffers."""
        grad, exp_avg, exp_avg_sq, scratch = self.grad, self.exp_avg, self.exp_avg_sq, self.scratch
        total = math.sqrt(float(np.dot(grad, grad)))
        coef = self.max_grad_norm / (total + 1e-6)
        if coef < 1.0:
            grad *= np.float32(coef)
        step = self.flat.advance()  # FlatAdam.release writes it into Adam's state
        # exp_avg.lerp_(grad, 1 - beta1)
        np.subtract(grad, exp_avg, out=scratch)
        scratch *= np.float32(1 - self.beta1)
        exp_avg += scratch
        # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        exp_avg_sq *= np.float32(self.beta2)
        np.multiply(grad, grad, out=scratch)
        scratch *= np.float32(1 - self.beta2)
        exp_avg_sq += scratch
        # denom = sqrt(exp_avg_sq) / sqrt(1 - beta2**step) + eps
        np.sqrt(exp_avg_sq, out=scratch)
        scratch /= np.float32((1 - self.beta2**step) ** 0.5)
        scratch += np.float32(self.eps)
        np.divide(exp_avg, scratch, out=self.scratch2)
        for start, end, lr in self.slices:
            step_size = lr / (1 - self.beta1**step)
            update = self.scratch2[start:end]
            update *= np.float32(step_size)
            self.param[start:end] -= update
