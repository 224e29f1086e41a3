"""PPO's loss on a Bernoulli head as one autograd node: the same loss, its gradient by hand.

SB3's PPO loss on independent Bernoulli logits (clipped surrogate, entropy bonus, value
loss, and optionally LoRA-guided PPO's expected-cost term) builds about 25 autograd nodes
per minibatch, each a few tensor operations; backward then spends more time walking them
than the network's layers. :class:`BernoulliPPOLoss` computes the same forward values and
returns the gradient with respect to the logits and the values in closed form, in about a
dozen operations (torch's own conventions included: ``minimum`` splits the gradient at
ties, ``clamp`` passes it at its bounds). The network's layers stay with autograd.

The gradient is the same mathematical quantity computed in another order, so the weights
after training are float-close to, not bit-identical with, SB3's (``FastPPO(...,
fused_loss=True)``; ``tests/test_fast_ppo.py`` bounds the difference and
``benchmarks/ppo_throughput.py`` reports it). Per element, with ``s = sigmoid(logits)``:

* ``log_prob = sum_i a_i l_i - softplus(l_i)``: ``d/dl = a - s``;
* ``entropy = sum_i softplus(l_i) - l_i s_i``: ``d/dl = -l s (1 - s)``;
* ``ratio = exp(log_prob - old)``: ``d/dlog_prob = ratio``;
* cost term ``mean_t sum_i c_i s_i``: ``d/dl = c s (1 - s) / B``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F


class BernoulliPPOLoss(torch.autograd.Function):
    """``loss(logits, values)`` of one minibatch; see the module docstring.

    ``forward(ctx, logits, values, batch, settings)``: ``batch`` is ``(actions,
    old_values, old_log_prob, advantages, returns)`` (advantages already normalised when
    they are to be), ``settings`` a dict with ``clip_range``, ``clip_range_vf`` (or
    ``None``), ``ent_coef``, ``vf_coef``, ``aux_coef`` and ``costs`` (``None`` for no cost
    term) and ``out``, a list the forward fills with the policy, value and entropy
    losses, the cost term (or ``None``), the ratio and the log-ratio (no graph). Returns
    the loss.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, values: torch.Tensor,
                batch: tuple[torch.Tensor, ...], settings: dict[str, Any]) -> torch.Tensor:
        """The loss (SB3's operations, without a graph); fills ``settings["out"]``."""
        actions, old_values, old_log_prob, advantages, returns = batch
        clip_range, clip_range_vf = settings["clip_range"], settings["clip_range_vf"]
        probs = torch.sigmoid(logits)
        log_prob = -F.binary_cross_entropy_with_logits(logits, actions,
                                                        reduction="none").sum(dim=1)
        entropy = F.binary_cross_entropy_with_logits(logits, probs, reduction="none").sum(dim=1)
        values = values.flatten()
        log_ratio = log_prob - old_log_prob
        ratio = torch.exp(log_ratio)
        clipped = torch.clamp(ratio, 1 - clip_range, 1 + clip_range)
        surrogate, surrogate_clipped = advantages * ratio, advantages * clipped
        policy_loss = -torch.min(surrogate, surrogate_clipped).mean()
        if clip_range_vf is None:
            values_pred, value_mask = values, None
        else:
            delta = values - old_values
            values_pred = old_values + torch.clamp(delta, -clip_range_vf, clip_range_vf)
            value_mask = (delta >= -clip_range_vf) & (delta <= clip_range_vf)
        value_loss = F.mse_loss(returns, values_pred)
        entropy_loss = -torch.mean(entropy)
        costs = settings["costs"]
        cost_term = None if costs is None else (probs * costs).sum(dim=1).mean()
        loss = policy_loss + settings["ent_coef"] * entropy_loss + settings["vf_coef"] * value_loss
        if cost_term is not None:
            loss = loss + settings["aux_coef"] * cost_term
        ctx.settings = settings
        ctx.save_for_backward(logits, actions, probs, advantages, ratio, surrogate,
                              surrogate_clipped, returns, values_pred)
        ctx.value_mask = value_mask
        settings["out"][:] = [policy_loss, value_loss, entropy_loss, cost_term, ratio, log_ratio]
        return loss

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor,
                 ) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        """The gradients with respect to the logits and the values (module docstring)."""
        (logits, actions, probs, advantages, ratio, surrogate, surrogate_clipped, returns,
         values_pred) = ctx.saved_tensors
        settings = ctx.settings
        n = len(ratio)
        # -mean(minimum(x, y)) with x = A r, y = A clamp(r): torch gives half the gradient
        # to each side at a tie and clamp passes it inside its bounds. A tie is r inside the
        # bounds (both halves reach r) or A = 0 (nothing reaches r); x > y only outside
        # them. So r gets -grad/n * A exactly where x <= y, as it does from torch.
        d_ratio = (-grad / n * advantages) * (surrogate <= surrogate_clipped)
        d_log_prob = d_ratio * ratio
        spread = probs * (1 - probs)
        d_logits = d_log_prob[:, None] * (actions - probs)
        # entropy_loss = -mean(entropy), weighted by ent_coef
        d_logits += (grad * settings["ent_coef"] / n) * logits * spread
        if settings["costs"] is not None:
            d_logits += (grad * settings["aux_coef"] / n) * settings["costs"] * spread
        d_values = (grad * settings["vf_coef"] * 2 / n) * (values_pred - returns)
        if ctx.value_mask is not None:
            d_values = d_values * ctx.value_mask
        return d_logits, d_values[:, None], None, None
