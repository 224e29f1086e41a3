"""The plain allocator network's backward by hand: the fused PPO update without autograd.

With the loss's gradient in closed form
(:class:`~agents.learners.common.fused_loss.BernoulliPPOLoss`)
the only autograd left in a fused update is the network: a tanh MLP encoder shared by a
linear action head and a linear value head, a few 64-wide layers on minibatches of 64.
Walking its graph costs more than its arithmetic, so :class:`TanhNetwork` runs the same
layers forward without a graph and backpropagates by hand, writing each gradient straight
into the parameter's ``.grad`` (the views of :class:`agents.learners.common.fast_optim.FlatAdam`'s
flat buffer during an update). For ``h = tanh(z)``, ``z = x W^T + b``:

* ``dW = dz^T x``, ``db = sum_rows dz``, ``dx = dz W``;
* ``dz = dh (1 - h^2)``; the encoder's output gets ``dlogits W_a + dvalues W_v``.

The same gradients as autograd's, summed in another order: float-close, not
bit-identical (``tests/test_fast_ppo.py`` bounds the difference). Only the plain network
of the PPO baseline is covered (:meth:`TanhNetwork.of`): LoRA adapters, frozen layers or
any other architecture keep autograd.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from agents.learners.common.fused_loss import BernoulliPPOLoss


@dataclass(frozen=True)
class TanhNetwork:
    """The linear layers of a plain allocator policy, encoder first, then the two heads."""

    encoder: tuple[nn.Linear, ...]
    action: nn.Linear
    value: nn.Linear

    @classmethod
    def of(cls, policy: Any) -> TanhNetwork | None:
        """The network of ``policy`` if it is the plain one, else ``None``.

        Plain: :class:`agents.learners.common.policies.MlpEncoder` layers that are ``nn.Linear`` and
        ``Tanh`` in turn, an empty ``MlpExtractor`` and linear heads, every parameter
        trained, no hooks (:func:`agents.learners.ppo.fast_bernoulli` checked the rest).
        """
        from agents.learners.common.policies import MlpEncoder

        encoder = getattr(policy, "features_extractor", None)
        mlp = getattr(policy, "mlp_extractor", None)
        # the class itself: a subclass may compute something else than these layers
        if type(encoder) is not MlpEncoder or mlp is None or len(mlp.policy_net) or len(
                mlp.value_net):
            return None
        if any(module._forward_hooks or module._forward_pre_hooks
               for module in (encoder, encoder.net)):
            return None
        layers = list(encoder.net)
        linears = tuple(layers[::2])
        if not linears or any(type(layer) is not nn.Linear for layer in linears) or any(
                type(layer) is not nn.Tanh for layer in layers[1::2]) or len(layers) % 2:
            return None
        heads = (policy.action_net, policy.value_net)
        if any(type(head) is not nn.Linear for head in heads):
            return None
        modules = [*linears, *heads]
        if any(module._forward_hooks or module._forward_pre_hooks or module.bias is None
               for module in modules):
            return None
        if not all(p.requires_grad for module in modules for p in module.parameters()):
            return None
        if sum(1 for _ in policy.parameters()) != 2 * len(modules):
            return None  # parameters outside these layers (log_std, ...): not this network
        # each of linears is an nn.Linear (checked above)
        return cls(cast(tuple[nn.Linear, ...], linears), policy.action_net, policy.value_net)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """``(logits, values, activations)``: the activations are the input, then each ``h``."""
        hidden = obs.float()
        activations = [hidden]
        for layer in self.encoder:
            hidden = torch.tanh(torch.addmm(layer.bias, hidden, layer.weight.t()))
            activations.append(hidden)
        logits = torch.addmm(self.action.bias, hidden, self.action.weight.t())
        values = torch.addmm(self.value.bias, hidden, self.value.weight.t())
        return logits, values, activations

    def backward(self, activations: list[torch.Tensor], d_logits: torch.Tensor,
                 d_values: torch.Tensor) -> None:
        """Write every parameter's gradient into its ``.grad`` (which must exist)."""
        features = activations[-1]
        for head, grad in ((self.action, d_logits), (self.value, d_values)):
            torch.mm(grad.t(), features, out=head.weight.grad)
            torch.sum(grad, 0, out=head.bias.grad)
        d_hidden = torch.addmm(torch.mm(d_values, self.value.weight), d_logits,
                               self.action.weight)
        for index in range(len(self.encoder) - 1, -1, -1):
            layer, out, inp = self.encoder[index], activations[index + 1], activations[index]
            d_pre = d_hidden * (1 - out * out)
            torch.mm(d_pre.t(), inp, out=layer.weight.grad)
            torch.sum(d_pre, 0, out=layer.bias.grad)
            if index:
                d_hidden = torch.mm(d_pre, layer.weight)


class _Saved:
    """The ``ctx`` of :class:`BernoulliPPOLoss` outside autograd: keeps what it saves."""

    saved_tensors: tuple[torch.Tensor, ...] = ()

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        self.saved_tensors = tensors


@torch.no_grad()
def fused_step(network: TanhNetwork, obs: torch.Tensor, batch: tuple[torch.Tensor, ...],
               settings: dict[str, Any]) -> torch.Tensor:
    """One minibatch's loss, with every parameter's gradient written by hand; the loss.

    ``batch`` and ``settings`` are :class:`BernoulliPPOLoss`'s (it fills
    ``settings["out"]`` the same way); the gradient is that of the loss, as
    ``loss.backward()`` would leave it.
    """
    logits, values, activations = network.forward(obs)
    ctx = _Saved()
    loss = BernoulliPPOLoss.forward(ctx, logits, values, batch, settings)
    d_logits, d_values, _, _ = BernoulliPPOLoss.backward(ctx, torch.ones((), dtype=loss.dtype))
    network.backward(activations, d_logits, d_values)
    return loss
