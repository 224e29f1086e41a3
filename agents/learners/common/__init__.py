"""What the learners share: the policy network and its parts, and PPO's fast update.

:mod:`~agents.learners.common.policies` (the allocator policy: a tanh MLP encoder, LoRA
or not, an action head, a value head), :mod:`~agents.learners.common.adapters` (peft LoRA
on it), :mod:`~agents.learners.common.distributions` (the autoregressive action head),
:mod:`~agents.learners.common.rollout`, :mod:`~agents.learners.common.exact_backward`
(autograd's backward replayed, bit for bit), :mod:`~agents.learners.common.fused_loss`,
:mod:`~agents.learners.common.fused_network`, :mod:`~agents.learners.common.fused_numpy`
(the float-close fused step) and :mod:`~agents.learners.common.fast_optim` (PPO's update
by hand, for :class:`~agents.learners.ppo.FastPPO`), :mod:`~agents.learners.common.recurrent`
(sb3-contrib's RecurrentPPO on MultiBinary actions) and
:mod:`~agents.learners.common.ppo_args` (which SB3 hyperparameters a learner accepts).
Importing this package does not import torch.
"""
