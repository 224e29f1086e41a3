"""PPO with fewer Python round trips: SB3's updates, bit for bit, about 3x as fast on CPU.

The allocator networks are a few 64-wide layers trained on minibatches of 64, so SB3's
:class:`~stable_baselines3.PPO` spends almost all its time in Python and in torch's
per-call overhead, not in arithmetic (``benchmarks/ppo_throughput.py`` measures it).
:class:`FastPPO` computes the same things with fewer calls:

* **Update** (:meth:`FastPPO.train`). The rollout becomes torch tensors once per update and
  each epoch's minibatches are cut from one gather in the epoch's shuffled order (SB3
  converts six numpy slices per minibatch); the Bernoulli log-probabilities and entropies
  are the same ``binary_cross_entropy_with_logits`` calls ``torch.distributions.Bernoulli``
  makes, without building (and validating) a distribution object; the logged statistics
  stay tensors until the end of the update instead of one ``.item()`` each per minibatch;
  gradient clipping and Adam are the exact tensor operations of
  ``torch.nn.utils.clip_grad_norm_`` and ``torch.optim.Adam``'s single-tensor step, run
  once over flat buffers that every parameter, gradient and moment is a view of during
  the update (:class:`agents.learners.common.fast_optim.FlatAdam`; Adam's operations are
  elementwise). For the PPO baseline's plain network and SB3's loss the update builds no
  autograd graph: :class:`agents.learners.common.exact_backward.ExactStep` runs the loss
  without one and then the operations autograd's backward would run, the same kernels on
  the same values, so the same gradients to the last bit; the operations whose bits are
  IEEE-754's whoever computes them (``+ - * /``, comparisons, ``where``, ``clamp``) run in
  numpy on the same memory, at a fraction of a torch call's cost, and each epoch runs in
  one tight loop (:meth:`FastPPO._exact_epoch`).
* **Rollout** (:meth:`FastPPO.collect_rollouts`). The same forward pass without a
  distribution object (for the plain network, its layers' functions called directly), the
  rollout buffer filled in place, and the time-limit bootstrap visits only the sub-envs
  that ended.

What does not change: the random draws (numpy's permutation per epoch, torch's Bernoulli
samples per step, in SB3's order), every loss, gradient and update, and the logged keys
and values. With the same seed a :class:`FastPPO` trains the same weights as SB3's
``PPO``, to the last bit (``tests/test_fast_ppo.py``). Anything the fast path does not
cover (another action distribution, a policy that overrides ``forward`` or
``evaluate_actions``, gSDE, a non-Adam optimizer or Adam options off its plain path) goes
through SB3's own code for that piece, so the results are SB3's there too.

``FastPPO(..., fused_loss=True)`` goes further at a price: the loss and its gradient with
respect to the logits and values as one autograd node
(:class:`agents.learners.common.fused_loss.BernoulliPPOLoss`), and for the PPO baseline's plain
network the network's backward by hand too (:mod:`agents.learners.common.fused_network`), so that
an update builds no graph at all; on CPU that whole gradient step (and the clipping and Adam
step) runs in numpy (:class:`agents.learners.common.fused_numpy.NumpyFusedStep`), whose calls
cost a fraction of torch's on arrays this small. Float-close to SB3's, not bit-identical
(``benchmarks/ppo_fused_curves.py`` compares the learning curves). Off by default.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import BernoulliDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import MlpExtractor
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv
from torch.nn import functional as F
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from agents.learners.common.adapters import plain_linear
from agents.learners.common.exact_backward import ExactStep
from agents.learners.common.fast_optim import FlatAdam, clip_grad_norm, optimizer_step
from agents.learners.common.fused_loss import BernoulliPPOLoss
from agents.learners.common.fused_network import TanhNetwork, fused_step
from agents.learners.common.fused_numpy import NumpyFusedStep
from agents.learners.common.rollout import (
    Rollout,
    approx_kls,
    as_floats,
    as_tensors,
    clip_fractions,
)


def fast_bernoulli(policy: Any) -> bool:
    """Whether ``policy`` computes what :func:`bernoulli_heads` computes.

    An SB3 ``ActorCriticPolicy`` with a Bernoulli action head (``MultiBinary``), a shared
    features extractor over a ``Box``, no gSDE, and SB3's own ``forward``,
    ``evaluate_actions`` and ``MlpExtractor``: then its outputs are exactly those of
    :func:`bernoulli_heads`. Any override, or another head, is used as it is.
    """
    return (isinstance(policy, ActorCriticPolicy)
            and type(policy.action_dist) is BernoulliDistribution
            and isinstance(policy.observation_space, spaces.Box)
            and policy.share_features_extractor and not policy.use_sde
            and type(policy).forward is ActorCriticPolicy.forward
            and type(policy).evaluate_actions is ActorCriticPolicy.evaluate_actions
            and type(policy).extract_features is ActorCriticPolicy.extract_features
            and type(policy.mlp_extractor) is MlpExtractor)


def _latents(policy: ActorCriticPolicy, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # SB3's extract_features (a Box observation is only cast to float) and MlpExtractor;
    # an empty MlpExtractor (the allocator's net_arch=[]) returns its input twice. The
    # extractor's own forward, without nn.Module.__call__'s dispatch when no hook is set.
    extractor = policy.features_extractor
    if (extractor._forward_hooks or extractor._forward_pre_hooks or _global_forward_hooks
            or _global_forward_pre_hooks):
        features = extractor(obs.float())
    else:
        features = extractor.forward(obs.float())
    mlp = policy.mlp_extractor
    if len(mlp.policy_net) == 0 and len(mlp.value_net) == 0:
        return features, features
    return mlp.forward_actor(features), mlp.forward_critic(features)


def bernoulli_heads(policy: ActorCriticPolicy, obs: torch.Tensor,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, values)`` of a :func:`fast_bernoulli` policy, its own layers in its order."""
    latent_pi, latent_vf = _latents(policy, obs)
    return plain_linear(policy.action_net, latent_pi), plain_linear(policy.value_net, latent_vf)


def bernoulli_log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``Bernoulli(logits=logits).log_prob(actions).sum(dim=1)``: torch's own formula."""
    return -F.binary_cross_entropy_with_logits(logits, actions, reduction="none").sum(dim=1)


def bernoulli_entropy(logits: torch.Tensor) -> torch.Tensor:
    """``Bernoulli(logits=logits).entropy().sum(dim=1)``: torch's own formula."""
    return F.binary_cross_entropy_with_logits(logits, torch.sigmoid(logits),
                                              reduction="none").sum(dim=1)


def rollout_step(policy: ActorCriticPolicy, obs: torch.Tensor,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``policy(obs)`` (sampled actions, values, log-probabilities) of a Bernoulli policy.

    The same operations and the same draw from torch's generator as SB3's
    ``ActorCriticPolicy.forward``: ``Bernoulli.sample`` is ``torch.bernoulli`` of
    ``sigmoid(logits)``. Call it under ``torch.no_grad()``.
    """
    logits, values = bernoulli_heads(policy, obs)
    actions = torch.bernoulli(torch.sigmoid(logits))
    log_prob = bernoulli_log_prob(logits, actions)
    shape = policy.action_space.shape
    assert shape is not None  # a Bernoulli head's MultiBinary space has one
    return actions.reshape((-1, *shape)), values, log_prob


def _box_tensor(obs: Any, device: torch.device) -> torch.Tensor:
    """SB3's ``obs_as_tensor`` of a ``Box`` env's observations: one array, so one tensor."""
    return cast(torch.Tensor, obs_as_tensor(obs, device))


class _PlainRollout:
    """:func:`rollout_step` of a plain network's policy, its layers' functions called directly.

    ``nn.Linear`` is ``F.linear``, ``nn.Tanh`` ``torch.tanh`` (no hooks: ``TanhNetwork.of``
    checked), ``Bernoulli.log_prob`` the ``binary_cross_entropy_with_logits`` kernel: the
    same operations on the same values, in :func:`rollout_step`'s order, without the
    modules' and the functional wrappers' Python.
    """

    def __init__(self, network: TanhNetwork, policy: ActorCriticPolicy) -> None:
        self.encoder = tuple((layer.weight, layer.bias) for layer in network.encoder)
        self.action = (network.action.weight, network.action.bias)
        self.value = (network.value.weight, network.value.bias)
        shape = policy.action_space.shape
        assert shape is not None  # a Bernoulli head's MultiBinary space has one
        self.shape = shape
        self.device = policy.device

    def as_tensor(self, obs: Any) -> torch.Tensor:
        """SB3's ``obs_as_tensor`` of a ``Box`` env's observations (shares an array's memory)."""
        return torch.from_numpy(obs) if type(obs) is np.ndarray else _box_tensor(obs, self.device)

    def __call__(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions, values, log_prob)``; call it under ``torch.no_grad()``."""
        hidden = obs.float()
        for weight, bias in self.encoder:
            hidden = torch.tanh(_linear(hidden, weight, bias))
        logits = _linear(hidden, *self.action)
        values = _linear(hidden, *self.value)
        actions = torch.bernoulli(torch.sigmoid(logits))
        log_prob = -torch.binary_cross_entropy_with_logits(logits, actions, None, None,
                                                           0).sum(dim=1)  # reduction none
        if actions.shape[1:] != self.shape:
            actions = actions.reshape((-1, *self.shape))
        return actions, values, log_prob


def _add(buffer: RolloutBuffer, obs: Any, actions: np.ndarray, rewards: np.ndarray,
         episode_starts: Any, values: torch.Tensor, log_probs: torch.Tensor) -> None:
    """``RolloutBuffer.add`` of a ``Box`` env's step on CPU: the same values in each row.

    Assigning an array casts it to the buffer's dtype as assigning SB3's copy of it does;
    the tensors' values are read where they are (SB3 clones them first).
    """
    pos = buffer.pos
    buffer.observations[pos] = obs
    buffer.actions[pos] = actions.reshape((buffer.n_envs, buffer.action_dim))
    buffer.rewards[pos] = rewards
    buffer.episode_starts[pos] = episode_starts
    buffer.values[pos] = values.numpy().reshape(-1)
    buffer.log_probs[pos] = (log_probs.reshape(-1, 1) if log_probs.dim() == 0
                             else log_probs).numpy()
    buffer.pos = pos + 1
    if buffer.pos == buffer.buffer_size:
        buffer.full = True


_linear = torch._C._nn.linear


class FastPPO(PPO):
    """SB3's ``PPO`` with the same updates in fewer Python calls (module docstring).

    Takes exactly SB3 ``PPO``'s arguments. Subclasses add a loss term by overriding
    :meth:`_evaluate` and :meth:`_aux_loss` (weighted by :attr:`aux_coef`), and their logs
    by :meth:`_record_train_logs`.
    """

    #: Weight of :meth:`_aux_loss`'s term in the loss.
    aux_coef: float = 0.0

    def __init__(self, *args: Any, fused_loss: bool = False, **kwargs: Any) -> None:
        #: Whether the loss and its gradient go through
        #: :class:`agents.learners.common.fused_loss.BernoulliPPOLoss` (float-close, not
        #: bit-identical).
        self.fused_loss = bool(fused_loss)
        super().__init__(*args, **kwargs)

    def _fused_costs(self) -> torch.Tensor | bool | None:
        """The cost term's per-agent costs for the fused loss.

        ``None``: no term; ``False``: a term the fused loss cannot compute (then the eager
        loss is used).
        """
        return None if type(self)._aux_loss is FastPPO._aux_loss else False

    # ------------------------------------------------------------------ rollout
    def collect_rollouts(self, env: VecEnv, callback: BaseCallback,
                         rollout_buffer: RolloutBuffer, n_rollout_steps: int) -> bool:
        """SB3's ``OnPolicyAlgorithm.collect_rollouts``, step for step (module docstring)."""
        if not fast_bernoulli(self.policy):
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        assert self._last_obs is not None, "No previous observation was provided"
        self.policy.set_training_mode(False)
        n_steps = 0
        rollout_buffer.reset()
        callback.on_rollout_start()
        policy, device = self.policy, self.device
        # the plain network's layers called directly, the buffer filled in place (the same
        # operations and values as rollout_step and RolloutBuffer.add)
        # (not where a global module hook expects to see each layer called)
        network = (TanhNetwork.of(policy) if device.type == "cpu" and not (
            _global_forward_hooks or _global_forward_pre_hooks) else None)
        step_of = _PlainRollout(network, policy) if network is not None else None
        direct_add = (type(rollout_buffer).add is RolloutBuffer.add and device.type == "cpu"
                      and not isinstance(rollout_buffer.observation_space, spaces.Discrete))
        while n_steps < n_rollout_steps:
            if step_of is not None:
                with torch.no_grad():
                    obs_tensor = step_of.as_tensor(self._last_obs)
                    sampled, values, log_probs = step_of(obs_tensor)
                actions = sampled.numpy()
            else:
                with torch.no_grad():
                    obs_tensor = _box_tensor(self._last_obs, device)
                    sampled, values, log_probs = rollout_step(policy, obs_tensor)
                actions = sampled.cpu().numpy()
            clipped_actions = actions  # SB3's name, in the callback's locals
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            # Time-limit bootstrap (SB3's GitHub issue #633), only where an episode ended
            for idx in np.flatnonzero(dones).tolist():
                if (infos[idx].get("terminal_observation") is not None
                        and infos[idx].get("TimeLimit.truncated", False)):
                    terminal_obs = policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                    with torch.no_grad():
                        terminal_value = policy.predict_values(terminal_obs)[0]
                    rewards[idx] += self.gamma * terminal_value
            if direct_add:
                _add(rollout_buffer, self._last_obs, actions, rewards,
                     self._last_episode_starts, values, log_probs)
                self._last_obs = new_obs  # type: ignore[assignment]  # as below
                self._last_episode_starts = dones
                continue
            # SB3's types: _last_obs may be a dict and, like _last_episode_starts, None
            # (before _setup_learn); here both are arrays, the observations a Box env's.
            rollout_buffer.add(self._last_obs,  # type: ignore[arg-type]  # see above
                               actions, rewards,
                               self._last_episode_starts,  # type: ignore[arg-type]  # see above
                               values, log_probs)
            self._last_obs = new_obs  # type: ignore[assignment]  # SB3's type lacks tuple obs
            self._last_episode_starts = dones
        with torch.no_grad():
            values = policy.predict_values(_box_tensor(new_obs, device))
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    # ------------------------------------------------------------------- update
    def _evaluate(self, obs: torch.Tensor, actions: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, Any]:
        """``(values, log_prob, entropy, aux)`` of a minibatch; ``aux`` feeds :meth:`_aux_loss`.

        SB3's ``evaluate_actions`` (its order of operations, which fixes autograd's order of
        summing gradients). Subclasses that add a loss term return what it needs as ``aux``.
        """
        if self._fast_heads:
            logits, values = bernoulli_heads(self.policy, obs)
            log_prob = bernoulli_log_prob(logits, actions)
            return values, log_prob, bernoulli_entropy(logits), None
        values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)
        return values, log_prob, entropy, None

    def _aux_loss(self, aux: Any) -> torch.Tensor | None:
        """A term added to SB3's loss as ``+ self.aux_coef * term`` (``None``: none)."""
        return None

    def _eager_loss(self, obs: torch.Tensor, actions: torch.Tensor, old_values: torch.Tensor,
                    old_log_prob: torch.Tensor, advantages: torch.Tensor,
                    returns: torch.Tensor, clip_range: float, clip_range_vf: float | None,
                    logs: dict[str, list[torch.Tensor]]) -> tuple[torch.Tensor, ...]:
        """SB3's loss of one minibatch, its operations in SB3's order (autograd sums in it).

        Returns ``(loss, policy_loss, value_loss, entropy_loss, ratio, log_ratio)``;
        appends the auxiliary term (if any) to ``logs["aux"]``.
        """
        if isinstance(self.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        values, log_prob, entropy, aux = self._evaluate(obs, actions)
        values = values.flatten()
        if self.normalize_advantage and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = log_prob - old_log_prob
        ratio = torch.exp(log_ratio)
        policy_loss = -torch.min(
            advantages * ratio,
            advantages * torch.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
        if clip_range_vf is None:
            values_pred = values
        else:
            values_pred = old_values + torch.clamp(values - old_values,
                                                   -clip_range_vf, clip_range_vf)
        value_loss = F.mse_loss(returns, values_pred)
        entropy_loss = -torch.mean(-log_prob) if entropy is None else -torch.mean(entropy)
        aux_term = self._aux_loss(aux)
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        if aux_term is not None:
            loss = loss + self.aux_coef * aux_term
            logs["aux"].append(aux_term.detach())
        # SB3 recomputes log_prob - old_log_prob without a graph: the same values
        return loss, policy_loss.detach(), value_loss.detach(), entropy_loss.detach(), ratio, \
            log_ratio.detach()

    def _past_target_kl(self, approx_kl_div: float | np.ndarray, epoch: int) -> bool:
        """SB3's early stop: the minibatch's approximate KL is past ``1.5 target_kl``.

        Called only with a ``target_kl``; ``approx_kl_div`` is a float or, as in SB3, a
        0-d array.
        """
        assert self.target_kl is not None
        if approx_kl_div <= 1.5 * self.target_kl:
            return False
        if self.verbose >= 1:
            print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
        return True

    def train(self) -> None:
        """SB3's ``PPO.train``: the same minibatches, losses, updates and logs (see the module)."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        # SB3 types clip_range(_vf) float | Schedule; _setup_model made them Schedules.
        clip_range = self.clip_range(  # type: ignore[operator]  # see above
            self._current_progress_remaining)
        clip_range_vf = (None if self.clip_range_vf is None else
                         self.clip_range_vf(  # type: ignore[operator]  # see above
                             self._current_progress_remaining))
        self._fast_heads = fast_bernoulli(self.policy)
        costs = self._fused_costs()
        fused = self.fused_loss and self._fast_heads and costs is not False
        fused_settings: dict[str, Any] = {"clip_range": clip_range, "clip_range_vf": clip_range_vf,
                          "ent_coef": self.ent_coef, "vf_coef": self.vf_coef,
                          "aux_coef": self.aux_coef, "out": [],
                          "costs": costs if isinstance(costs, torch.Tensor) else None}
        # The plain network's backward by hand too (float-close,
        # agents.learners.common.fused_network)
        network = TanhNetwork.of(self.policy) if fused else None
        # SB3's loss on the plain network with autograd's backward replayed exactly
        # (agents.learners.common.exact_backward): bit for bit, without a graph; on the
        # CPU only, where its elementwise work reads the tensors' memory as numpy arrays
        exact = (ExactStep(plain) if not fused and self._fast_heads and _sb3_loss(self)
                 and self.device.type == "cpu"
                 and (plain := TanhNetwork.of(self.policy)) is not None else None)
        params = list(self.policy.parameters())  # clip_grad_norm_ skips those without grad
        optimizer = self.policy.optimizer
        optimizer_params = [p for group in optimizer.param_groups for p in group["params"]]
        rollout = Rollout(self.rollout_buffer)
        logs: dict[str, list[torch.Tensor]] = {"entropy": [], "pg": [], "value": [],
                                               "aux": []}
        ratios: list[torch.Tensor] = []
        log_ratios: list[torch.Tensor] = []
        kl_per_epoch: list[list[Any]] = []
        continue_training = True
        loss = torch.zeros(())
        # Adam over flat buffers from the first update that finds Adam's state
        flat = FlatAdam.attach(optimizer, params)
        # The plain network's whole fused step in numpy (fused_numpy), once Adam has state
        in_numpy = network is not None and self.device.type == "cpu"
        stepper: NumpyFusedStep | None = None
        try:
            for epoch in range(self.n_epochs):
                kl_epoch: list[Any] = []
                kl_per_epoch.append(kl_epoch)
                first_of_epoch = len(ratios)
                batches = rollout.epoch(self.batch_size, numpy=in_numpy)
                if exact is not None and flat is not None:  # bit for bit, in a tight loop
                    with torch.no_grad():  # once an epoch, not in each of its calls
                        continue_training, loss = self._exact_epoch(
                            batches, exact, flat, logs, ratios, log_ratios, kl_epoch, epoch,
                            clip_range, clip_range_vf, loss)
                    batches = []
                for minibatch in batches:
                    # network is not None whenever in_numpy is (the type checker's check)
                    if in_numpy and stepper is None and flat is not None and network is not None:
                        stepper = NumpyFusedStep(network, flat, fused_settings,
                                                 self.normalize_advantage, self.max_grad_norm)
                    if stepper is not None:
                        (loss, policy_loss, value_loss, entropy_loss, aux_term, ratio,
                         log_ratio) = stepper.gradient(*minibatch)
                        logs["pg"].append(policy_loss)
                        logs["value"].append(value_loss)
                        logs["entropy"].append(entropy_loss)
                        if aux_term is not None:
                            logs["aux"].append(aux_term)
                        ratios.append(torch.from_numpy(ratio))
                        log_ratios.append(torch.from_numpy(log_ratio))
                        if self.target_kl is not None:
                            approx_kl_div = np.mean((ratio - 1) - log_ratio)
                            kl_epoch.append(approx_kl_div)
                            if self._past_target_kl(approx_kl_div, epoch):
                                continue_training = False
                                break
                        stepper.update()
                        continue
                    if in_numpy:
                        minibatch = as_tensors(minibatch)
                    obs, actions, old_values, old_log_prob, advantages, returns = minibatch
                    by_hand = False
                    if fused:
                        if self.normalize_advantage and len(advantages) > 1:
                            advantages = ((advantages - advantages.mean())
                                          / (advantages.std() + 1e-8))
                        batch = (actions, old_values, old_log_prob, advantages, returns)
                        if network is not None and flat is not None:
                            by_hand = True
                            loss = fused_step(network, obs, batch, fused_settings)
                        else:
                            logits, values = bernoulli_heads(self.policy, obs)
                            loss = BernoulliPPOLoss.apply(logits, values, batch,
                                                          fused_settings)
                        (policy_loss, value_loss, entropy_loss, aux_term, ratio,
                         log_ratio) = fused_settings["out"]
                        if aux_term is not None:
                            logs["aux"].append(aux_term)
                    elif exact is not None and flat is not None:
                        (loss, policy_loss, value_loss, entropy_loss, ratio,
                         log_ratio) = exact.loss(obs, actions, old_values, old_log_prob,
                                                 advantages, returns, clip_range, clip_range_vf,
                                                 self.ent_coef, self.vf_coef,
                                                 self.normalize_advantage)
                        by_hand = True
                    else:
                        (loss, policy_loss, value_loss, entropy_loss, ratio,
                         log_ratio) = self._eager_loss(obs, actions, old_values, old_log_prob,
                                                       advantages, returns, clip_range,
                                                       clip_range_vf, logs)
                    logs["pg"].append(policy_loss)
                    logs["value"].append(value_loss)
                    logs["entropy"].append(entropy_loss)
                    ratios.append(ratio.detach())
                    log_ratios.append(log_ratio)
                    if self.target_kl is not None:
                        approx_kl_div = torch.mean((torch.exp(log_ratio) - 1) - log_ratio
                                                   ).cpu().numpy()
                        kl_epoch.append(approx_kl_div)
                        if self._past_target_kl(approx_kl_div, epoch):
                            continue_training = False
                            break
                    if flat is not None:
                        if exact is not None and not fused:
                            exact.backward()  # writes every gradient
                        elif not by_hand:  # by hand, the gradients are written already
                            flat.zero_grad()
                            loss.backward()
                        flat.clip(self.max_grad_norm)
                        flat.step()
                        continue
                    for param in optimizer_params:  # optimizer.zero_grad(): set_to_none
                        param.grad = None
                    loss.backward()
                    clip_grad_norm(params, self.max_grad_norm)
                    optimizer_step(optimizer)
                    flat = FlatAdam.attach(optimizer, params)  # Adam has its state now
                if self.target_kl is None:  # the epoch's KL estimates, computed once
                    kl_epoch.extend(approx_kls(ratios[first_of_epoch:],
                                                log_ratios[first_of_epoch:]))
                self._n_updates += 1
                if not continue_training:
                    break
        finally:
            if flat is not None:
                flat.release()
        if not isinstance(loss, torch.Tensor):
            loss = torch.as_tensor(loss)
        self._record_train_logs(logs, ratios, kl_per_epoch, clip_range, clip_range_vf, loss)

    def _exact_epoch(self, batches: list[tuple[Any, ...]], exact: ExactStep, flat: FlatAdam,
                     logs: dict[str, list[torch.Tensor]], ratios: list[torch.Tensor],
                     log_ratios: list[torch.Tensor], kl_epoch: list[Any], epoch: int,
                     clip_range: float, clip_range_vf: float | None, loss: torch.Tensor,
                     ) -> tuple[bool, torch.Tensor]:
        """One epoch of :meth:`train`'s exact path: what its general loop does, fewer lookups.

        SB3's loss and autograd's gradient of it (:class:`ExactStep`), the clipping and Adam
        on the flat buffers, the same logs and the same early stop. Returns whether to go
        on (``False``: past the target KL) and the last minibatch's loss.
        """
        exact_loss, backward, clip, step = exact.loss, exact.backward, flat.clip, flat.step
        ent_coef, vf_coef, normalize = self.ent_coef, self.vf_coef, self.normalize_advantage
        max_grad_norm, target_kl = self.max_grad_norm, self.target_kl
        pg_logs, value_logs, entropy_logs = logs["pg"], logs["value"], logs["entropy"]
        for obs, actions, old_values, old_log_prob, advantages, returns in batches:
            (loss, policy_loss, value_loss, entropy_loss, ratio,
             log_ratio) = exact_loss(obs, actions, old_values, old_log_prob, advantages, returns,
                                     clip_range, clip_range_vf, ent_coef, vf_coef, normalize)
            pg_logs.append(policy_loss)
            value_logs.append(value_loss)
            entropy_logs.append(entropy_loss)
            ratios.append(ratio)  # computed without a graph: detached already
            log_ratios.append(log_ratio)
            if target_kl is not None:
                approx_kl_div = torch.mean((torch.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                kl_epoch.append(approx_kl_div)
                if self._past_target_kl(approx_kl_div, epoch):
                    return False, loss
            backward()  # writes every gradient
            clip(max_grad_norm)
            step()
        return True, loss

    def _record_train_logs(self, logs: dict[str, list[torch.Tensor]],
                           ratios: list[torch.Tensor], kl_per_epoch: list[list[Any]],
                           clip_range: float, clip_range_vf: float | None,
                           loss: torch.Tensor) -> None:
        """SB3's ``train/`` keys with SB3's values: per-minibatch floats, averaged."""
        explained_var = explained_variance(self.rollout_buffer.values.flatten(),
                                           self.rollout_buffer.returns.flatten())
        self.logger.record("train/entropy_loss", np.mean(as_floats(logs["entropy"])))
        self.logger.record("train/policy_gradient_loss", np.mean(as_floats(logs["pg"])))
        self.logger.record("train/value_loss", np.mean(as_floats(logs["value"])))
        self.logger.record("train/approx_kl", np.mean(kl_per_epoch[-1]))
        self.logger.record("train/clip_fraction", np.mean(clip_fractions(ratios, clip_range)))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", torch.exp(self.policy.log_std).mean().item())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)


def _sb3_loss(model: FastPPO) -> bool:
    """Whether ``model``'s loss is SB3's: no subclass changes its terms."""
    cls = type(model)
    return (cls._evaluate is FastPPO._evaluate and cls._aux_loss is FastPPO._aux_loss
            and cls._eager_loss is FastPPO._eager_loss)
