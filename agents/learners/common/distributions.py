"""Action distributions over ``MultiBinary(m)``: which agents to call, as one joint decision.

SB3's :class:`~stable_baselines3.common.distributions.BernoulliDistribution` gives every
agent an independent logit. Moving a policy from "call the large LLM" to "call the medium
one instead" then flips two bits, and the path there goes through worse actions (neither,
or both), which PPO's small steps rarely cross (issue #23: PPO on ToolBench-v0 kept the
large LLM where the medium one pays). :class:`AutoregressiveBernoulliDistribution` lets
each agent's decision depend on the decisions before it, MADE-style:

    logit_i = w_i . features + b_i + sum_{j < i} U_ij a_j

``U`` is one strictly lower-triangular ``(m, m)`` matrix, shared by all states: whether to
call agent i can then depend on whether an earlier agent was called ("medium only if not
large"). ``U`` starts at zero, so a fresh head is exactly the independent one.

* ``log_prob(a)`` is exact and one pass (teacher forcing: every logit sees the given
  earlier bits);
* ``sample`` and ``mode`` draw (or take the likelier value of) the bits one at a time, in
  agent order; ``mode`` is the greedy chain, not always the joint mode;
* ``entropy`` is the chain-rule estimate ``sum_i H(a_i | a_<i)`` at the actions last
  scored by ``log_prob`` (PPO scores its rollout's actions, drawn from the policy) or at a
  fresh sample: its expectation under the policy is the joint entropy.
"""

from __future__ import annotations

import torch
from stable_baselines3.common.distributions import BernoulliDistribution
from torch import nn
from torch.distributions import Bernoulli
from torch.nn import functional as F

__all__ = ["AutoregressiveBernoulliDistribution", "AutoregressiveHead"]


class AutoregressiveHead(nn.Module):
    """The head's parameters: the per-agent ``Linear`` and the coupling ``U`` (module docstring).

    ``forward`` gives the state's part of the logits; :meth:`conditional_logits` adds the
    earlier agents' bits.
    """

    mask: torch.Tensor  # the strictly lower-triangular 0/1 buffer registered in __init__

    def __init__(self, latent_dim: int, n_agents: int) -> None:
        super().__init__()
        self.linear = nn.Linear(latent_dim, n_agents)
        self.coupling = nn.Parameter(torch.zeros(n_agents, n_agents))
        self.register_buffer("mask", torch.tril(torch.ones(n_agents, n_agents), diagonal=-1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The logits of each agent before the earlier agents' bits are added."""
        return self.linear(features)

    def conditional_logits(self, state_logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``logit_i`` given the earlier bits of ``actions``, for every agent at once."""
        return state_logits + actions.to(state_logits.dtype) @ (self.coupling * self.mask).T

    def chain(self, state_logits: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor,
                                                                                torch.Tensor]:
        """Draw (or take greedily) the bits in agent order; returns ``(actions, logits)``."""
        coupling = self.coupling * self.mask
        bits: list[torch.Tensor] = []
        logits: list[torch.Tensor] = []
        for i in range(state_logits.shape[1]):
            # Lists, not in-place writes: autograd keeps every earlier bit it multiplied.
            logit = state_logits[:, i]
            if bits:
                logit = logit + torch.stack(bits, dim=1) @ coupling[i, :i]
            logits.append(logit)
            bits.append((logit > 0).to(logit.dtype) if deterministic
                        else torch.bernoulli(torch.sigmoid(logit.detach())))
        return torch.stack(bits, dim=1), torch.stack(logits, dim=1)


class AutoregressiveBernoulliDistribution(BernoulliDistribution):
    """Bernoulli bits drawn in agent order, each conditioned on the earlier ones (module docstring).

    SB3's interface: :meth:`proba_distribution` takes the state's logits and the
    :class:`AutoregressiveHead` that owns the coupling.
    """

    def __init__(self, action_dims: int) -> None:
        super().__init__(action_dims)
        self.state_logits: torch.Tensor | None = None
        self.head: AutoregressiveHead | None = None
        self._scored: torch.Tensor | None = None  # conditional logits of the last actions

    def proba_distribution_net(self, latent_dim: int) -> AutoregressiveHead:
        """The head: a ``Linear`` per agent and the coupling."""
        return AutoregressiveHead(latent_dim, self.action_dims)

    def proba_distribution(
        self, action_logits: torch.Tensor, head: AutoregressiveHead | None = None
    ) -> AutoregressiveBernoulliDistribution:
        """Set the state's logits and the head whose coupling conditions them."""
        if head is None:
            raise ValueError("AutoregressiveBernoulliDistribution needs the head that owns "
                             "the coupling: proba_distribution(action_logits, head)")
        self.state_logits, self.head, self._scored = action_logits, head, None
        self.distribution = None  # type: ignore[assignment]  # SB3 types it Bernoulli; unused here
        return self

    def _logits_at(self, actions: torch.Tensor) -> torch.Tensor:
        assert self.head is not None and self.state_logits is not None
        return self.head.conditional_logits(self.state_logits, actions)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Exact ``log pi(a)``: the sum of each bit's conditional log-probability."""
        assert self.state_logits is not None
        actions = actions.to(self.state_logits.dtype)
        logits = self._logits_at(actions)
        self._scored = logits
        return -F.binary_cross_entropy_with_logits(logits, actions, reduction="none").sum(dim=1)

    def conditional_probabilities(self, actions: torch.Tensor) -> torch.Tensor:
        """``P(a_i = 1 | a_<i)`` at the given actions' earlier bits, shape ``(batch, m)``."""
        assert self.state_logits is not None
        return torch.sigmoid(self._logits_at(actions.to(self.state_logits.dtype)))

    def entropy(self) -> torch.Tensor:
        """``sum_i H(a_i | a_<i)`` at the last scored actions (or at a fresh sample)."""
        logits = self._scored
        if logits is None:
            assert self.head is not None and self.state_logits is not None
            _, logits = self.head.chain(self.state_logits, deterministic=False)
        return Bernoulli(logits=logits).entropy().sum(dim=1)

    def sample(self) -> torch.Tensor:
        """Bits drawn in agent order, each from its conditional."""
        assert self.head is not None and self.state_logits is not None
        actions, self._scored = self.head.chain(self.state_logits, deterministic=False)
        return actions

    def mode(self) -> torch.Tensor:
        """The greedy chain: each bit at its likelier value given the bits before it."""
        assert self.head is not None and self.state_logits is not None
        actions, self._scored = self.head.chain(self.state_logits, deterministic=True)
        return actions

    def actions_from_params(  # type: ignore[override]  # SB3's 2nd parameter is deterministic
        self, action_logits: torch.Tensor, head: AutoregressiveHead | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Actions straight from the state's logits and the head."""
        self.proba_distribution(action_logits, head)
        return self.get_actions(deterministic=deterministic)

    def log_prob_from_params(self, action_logits: torch.Tensor,
                             head: AutoregressiveHead | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample and its log-probability."""
        actions = self.actions_from_params(action_logits, head)
        return actions, self.log_prob(actions)
