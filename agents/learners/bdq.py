"""A Branching Dueling Q-Network over the action's bits (BDQ; Tavakoli et al., AAAI 2018).

Issue #38 asks for learners that use nothing but interaction: observations, rewards and
the ``info`` contract. The PPO family credits a whole ``MultiBinary(m)`` action through
one log-probability; value learning over factored actions is the other way round: one
Q-value per bit and sub-action, learned off-policy from a replay of every step played.

**Network** (:class:`BranchingQNetwork`). The allocator's torso (``tanh`` MLP, the PPO
baseline's ``hidden_sizes``), a state-value stream ``V(s)`` (a linear layer) and one
advantage branch per bit ``d`` with its two sub-actions (call, do not call; a linear
layer with ``2m`` outputs), aggregated as in the paper's dueling form
(:func:`dueling_q`)::

    Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean_{a'} A_d(s, a')

The greedy action takes each bit's argmax on its own (``m`` comparisons instead of
``2^m``).

**Targets.** Double Q-learning over branches: the online network picks each bit's next
action, the target network values it, and the TD target is the paper's best variant,
the *mean over branches*::

    y = R^(n) + gamma^n * (1/m) * sum_d Q^-_d(s', argmax_a Q_d(s', a))

(``per_branch_targets=True``: ``y_d = R^(n) + gamma^n Q^-_d(s', argmax_a Q_d(s', a))``,
each branch bootstrapping on its own value). The mean is the default because the reward is
shared by all bits: the branches estimate one state's return, and averaging their next-
state values ties them to one target and lowers its variance, where per-branch targets
let a branch whose value is biased feed that bias back to itself (the paper found the
mean target the most stable). ``R^(n)`` is the n-step discounted reward
(:class:`NStepTransitions`); an episode that terminates stops the bootstrap, one that is
truncated (a budget, a time limit) bootstraps from its last observation
(``info["terminal_observation"]``). The loss is the Huber loss of each branch's chosen
``Q_d(s, a_d)`` against its target, averaged over branches and the batch; gradients are
clipped to ``max_grad_norm``; the target network is the online one copied every
``target_update_interval`` gradient steps. (The paper also scales the torso's gradient by
``1/(m+1)``; under Adam, whose steps do not depend on a constant gradient scale, that is
left out.)

**Exploration.** Epsilon-greedy per bit: with probability ``epsilon`` a bit is drawn
uniformly, independently of the others; ``epsilon`` falls linearly from
``exploration_initial_eps`` to ``exploration_final_eps`` over the first
``exploration_fraction`` of the run (SB3 DQN's schedule).

**Environment.** The batched env's ``n_envs`` sub-envs step together (as PPO's); each
step's transitions go into a uniform replay of ``buffer_size``; every ``train_freq``
steps of the batched env, once ``learning_starts`` transitions are stored,
``gradient_steps`` minibatches of ``batch_size`` train the network. Steps are grouped in
"rollouts" of ``rollout_steps`` per sub-env (PPO's 512 by default) only for the callbacks:
the metrics logged, the learning curve's checkpoints and the rounding of the run's length
are the PPO runs' (500k requested steps are 507,904 taken on 16 sub-envs). No action mask:
as PPO's policy, BDQ steps any action and a budget wrapper truncates the episode.

**Policy.** :attr:`BranchingDQN.policy` is the greedy policy as the library's
:class:`~agents.learners.common.policies.AllocatorPolicy` (the plain network): the torso
and ``V`` copied, each bit's logit ``A_d(s, 1) - A_d(s, 0) = Q_d(s, 1) - Q_d(s, 0)``, so
"call iff ``p > 0.5``" is each branch's argmax, and a BDQ model is saved, loaded,
evaluated and served as every other allocator. It is refreshed at every rollout boundary
and at the end of training (:meth:`BranchingDQN.sync_policy`).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import ConstantSchedule
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from agents.learners.common.fast_optim import clip_grad_norm
from agents.learners.common.policies import AllocatorPolicy, tanh_mlp
from cost_envs.config import boolean, integer, number


def dueling_q(value: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """``Q_d(s, a) = V(s) + A_d(s, a) - mean_a A_d(s, a)``.

    Args:
        value: ``(batch, 1)`` state values.
        advantages: ``(batch, m, k)``: ``k`` sub-actions of each of ``m`` branches.

    Returns:
        ``(batch, m, k)`` Q-values.
    """
    return value.unsqueeze(-1) + advantages - advantages.mean(dim=-1, keepdim=True)


class BranchingQNetwork(nn.Module):
    """Shared torso, value stream, one two-way advantage branch per bit (module docstring).

    Args:
        obs_dim: Observation width.
        n_bits: ``m``, the action's bits.
        hidden_sizes: The torso's widths.
    """

    def __init__(self, obs_dim: int, n_bits: int, hidden_sizes: Sequence[int] = (64, 64)
                 ) -> None:
        super().__init__()
        self.n_bits = integer(n_bits, "n_bits", minimum=1)
        self.torso = tanh_mlp(obs_dim, hidden_sizes)
        width = int(hidden_sizes[-1])
        self.value = nn.Linear(width, 1)
        self.advantage = nn.Linear(width, 2 * self.n_bits)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(batch, m, 2)`` Q-values of each bit's two sub-actions (0: idle, 1: call)."""
        features = self.torso(obs)
        advantages = self.advantage(features).view(-1, self.n_bits, 2)
        return dueling_q(self.value(features), advantages)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """``(batch, m)`` greedy action: each branch's argmax (a tie goes to 0)."""
        return self(obs).argmax(dim=-1)


def double_q_targets(online: nn.Module, target: nn.Module, next_obs: torch.Tensor,
                     returns: torch.Tensor, discounts: torch.Tensor,
                     per_branch: bool = False) -> torch.Tensor:
    """``(batch, m)`` TD targets: the online argmax valued by the target network.

    Args:
        online: The network that picks each bit's next action.
        target: The network that values it.
        next_obs: ``(batch, obs_dim)`` observations the n-step transitions lead to.
        returns: ``(batch,)`` n-step discounted rewards.
        discounts: ``(batch,)`` ``gamma^n``, or 0 where the episode terminated.
        per_branch: Each branch's own next value instead of the mean over branches.
    """
    with torch.no_grad():
        chosen = online(next_obs).argmax(dim=-1, keepdim=True)
        values = target(next_obs).gather(-1, chosen).squeeze(-1)
        if not per_branch:
            values = values.mean(dim=-1, keepdim=True).expand_as(values)
        return returns.unsqueeze(-1) + discounts.unsqueeze(-1) * values


@dataclass(frozen=True)
class Transition:
    """An n-step transition.

    Attributes:
        obs: Where it starts.
        action: The action taken there.
        ret: The discounted reward of its (up to n) steps.
        next_obs: The observation they lead to.
        discount: The bootstrap's weight: ``gamma^k`` after ``k`` steps, 0 if the episode
            terminated within them.
    """

    obs: np.ndarray
    action: np.ndarray
    ret: float
    next_obs: np.ndarray
    discount: float


class NStepTransitions:
    """Per sub-env windows of the last ``n`` steps, turned into n-step transitions.

    :meth:`add` takes one step of one sub-env and returns the transitions it completes:
    the oldest step of a full window (its ``n`` rewards, bootstrapped ``gamma^n`` from the
    new observation), or, when the episode ends, every step still in the window, each
    with the rewards up to the end (bootstrapped from the last observation if truncated,
    not at all if terminated).
    """

    def __init__(self, n_envs: int, n: int, gamma: float) -> None:
        self.n = integer(n, "n_steps", minimum=1)
        self.gamma = float(gamma)
        self._windows: list[deque[tuple[np.ndarray, np.ndarray, float]]] = [
            deque() for _ in range(integer(n_envs, "n_envs", minimum=1))]

    def add(self, env: int, obs: np.ndarray, action: np.ndarray, reward: float,
            next_obs: np.ndarray, terminated: bool, truncated: bool) -> list[Transition]:
        """Record a step of sub-env ``env``; the transitions it completes (class docstring)."""
        window = self._windows[env]
        window.append((obs, action, float(reward)))
        if terminated or truncated:
            out = [self._first(window, next_obs, terminated) for _ in range(len(window))]
            return out
        if len(window) == self.n:
            return [self._first(window, next_obs, False)]
        return []

    def _first(self, window: deque[tuple[np.ndarray, np.ndarray, float]],
               next_obs: np.ndarray, terminated: bool) -> Transition:
        """The window's oldest step as a transition to ``next_obs``; dropped from it."""
        ret = 0.0
        for k, (_, _, reward) in enumerate(window):
            ret += self.gamma ** k * reward
        obs, action, _ = window.popleft()
        discount = 0.0 if terminated else self.gamma ** (len(window) + 1)
        return Transition(obs, action, ret, next_obs, discount)


class ReplayBuffer:
    """A uniform ring replay of n-step transitions (numpy arrays, oldest overwritten)."""

    def __init__(self, capacity: int, obs_dim: int, n_bits: int) -> None:
        self.capacity = integer(capacity, "buffer_size", minimum=1)
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros((capacity, n_bits), dtype=np.int64)
        self.returns = np.zeros(capacity, dtype=np.float32)
        self.discounts = np.zeros(capacity, dtype=np.float32)
        self.size = 0
        self._next = 0

    def add(self, transition: Transition) -> None:
        """Store one transition."""
        row = self._next
        self.obs[row] = transition.obs
        self.actions[row] = transition.action
        self.returns[row] = transition.ret
        self.next_obs[row] = transition.next_obs
        self.discounts[row] = transition.discount
        self._next = (row + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[torch.Tensor, ...]:
        """``batch_size`` rows drawn uniformly with replacement, as tensors."""
        rows = rng.integers(self.size, size=batch_size)
        return (torch.from_numpy(self.obs[rows]), torch.from_numpy(self.actions[rows]),
                torch.from_numpy(self.returns[rows]), torch.from_numpy(self.next_obs[rows]),
                torch.from_numpy(self.discounts[rows]))


def linear_epsilon(progress: float, initial: float, final: float, fraction: float) -> float:
    """SB3 DQN's schedule: ``initial`` to ``final`` over the first ``fraction`` of the run.

    Args:
        progress: Share of the run done, 0 to 1.
        initial: Epsilon at the start.
        final: Epsilon from ``fraction`` on.
        fraction: Share of the run over which it falls.
    """
    if fraction <= 0 or progress >= fraction:
        return final
    return initial + (final - initial) * progress / fraction


class OffPolicyBits(BaseAlgorithm):
    """The off-policy loop over a ``MultiBinary`` VecEnv that BDQ and SAC per bit share.

    What it holds is what the learners have in common (module docstring, Environment):
    the batched env stepped ``rollout_steps`` at a time for the callbacks, each sub-env's
    steps turned into n-step transitions of a uniform replay (a truncated episode
    bootstrapping from ``info["terminal_observation"]``), ``gradient_steps`` gradient
    steps every ``train_freq`` batched steps once ``learning_starts`` transitions are
    stored, and the exported :class:`~agents.learners.common.policies.AllocatorPolicy`
    (the plain network, ``lora_rank=None``, the independent head). What differs is left
    to a subclass: :meth:`build_networks`, :meth:`behaviour` (the exploring action),
    :meth:`greedy` (the deterministic one), :meth:`train_step`, :meth:`sync_policy` and
    :meth:`record_rollout`.

    Args:
        policy: The policy class (``AllocatorPolicy``).
        env: A VecEnv with a flat ``Box`` observation and a ``MultiBinary(m)`` action.
        learning_rate: Adam's step size.
        buffer_size: Transitions the replay keeps.
        learning_starts: Transitions stored before the first gradient step.
        batch_size: Transitions per gradient step.
        gamma: Discount.
        train_freq: Steps of the batched env between two rounds of gradient steps.
        gradient_steps: Gradient steps per round.
        n_steps: The n of the n-step return.
        max_grad_norm: Gradient clipping (global norm).
        rollout_steps: Steps per sub-env between two callback rollout boundaries.
        stats_window_size: SB3's window of episode statistics.
        tensorboard_log: SB3's TensorBoard folder.
        policy_kwargs: ``AllocatorPolicy`` arguments (``hidden_sizes``; ``lora_rank`` must
            be ``None`` and ``action_distribution`` ``independent``).
        verbose: SB3 verbosity.
        device: Only ``cpu``.
        where: The learner's name in error messages.

    Raises:
        ValueError: A bad hyperparameter or an env the loop does not handle.
    """

    policy: AllocatorPolicy

    def __init__(
        self,
        policy: type[AllocatorPolicy],
        env: VecEnv,
        learning_rate: float,
        buffer_size: int,
        learning_starts: int,
        batch_size: int,
        gamma: float,
        train_freq: int,
        gradient_steps: int,
        n_steps: int,
        max_grad_norm: float,
        rollout_steps: int,
        stats_window_size: int,
        tensorboard_log: str | None,
        policy_kwargs: dict[str, Any] | None,
        verbose: int,
        device: str,
        where: str,
    ) -> None:
        self.where = where
        self.buffer_size = integer(buffer_size, "buffer_size", minimum=1, where=where)
        self.learning_starts = integer(learning_starts, "learning_starts", minimum=1,
                                       where=where)
        self.batch_size = integer(batch_size, "batch_size", minimum=1, where=where)
        self.train_freq = integer(train_freq, "train_freq", minimum=1, where=where)
        self.gradient_steps = integer(gradient_steps, "gradient_steps", minimum=1, where=where)
        self.n_steps = integer(n_steps, "n_steps", minimum=1, where=where)
        self.rollout_steps = integer(rollout_steps, "rollout_steps", minimum=1, where=where)
        self.gamma = number(gamma, "gamma", minimum=0, where=where)
        self.max_grad_norm = number(max_grad_norm, "max_grad_norm", minimum=0, where=where)
        if self.gamma > 1:
            raise ValueError(f"{where}: gamma: expected a number in [0, 1], got {self.gamma}")
        number(learning_rate, "learning_rate", minimum=0, where=where)
        if str(device) != "cpu":
            raise ValueError(f"{where}: device: expected 'cpu', got {device!r}")
        kwargs = dict(policy_kwargs or {})
        if kwargs.get("lora_rank") is not None:
            raise ValueError(f"{where}: trains the plain network; lora_rank must be None")
        if kwargs.get("action_distribution", "independent") != "independent":
            raise ValueError(f"{where}: action_distribution: the greedy action takes each "
                             "bit's argmax on its own, so only 'independent' applies, got "
                             f"{kwargs['action_distribution']!r}")
        kwargs["lora_rank"] = None
        super().__init__(policy, env, float(learning_rate), policy_kwargs=kwargs,
                         stats_window_size=stats_window_size, tensorboard_log=tensorboard_log,
                         verbose=verbose, device="cpu", support_multi_env=True,
                         supported_action_spaces=(spaces.MultiBinary,))
        self._setup_model()

    # ------------------------------------------------------------------ model
    def _setup_model(self) -> None:
        obs_space = self.observation_space
        if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
            raise ValueError(f"{self.where}: expected a flat Box observation space, "
                             f"got {obs_space}")
        action_space = self.action_space
        assert isinstance(action_space, spaces.MultiBinary)  # checked by BaseAlgorithm
        self.n_bits = int(np.prod(action_space.shape))
        obs_dim = int(obs_space.shape[0])
        hidden = tuple(int(size) for size in self.policy_kwargs.get("hidden_sizes", (64, 64)))
        assert isinstance(self.learning_rate, float)  # checked in __init__
        # the exported policy (BDQ overwrites its initialisation in sync_policy)
        self.policy = self.policy_class(  # type: ignore[assignment]  # an AllocatorPolicy
            obs_space, action_space, ConstantSchedule(self.learning_rate), **self.policy_kwargs)
        self.policy.set_training_mode(False)
        self.build_networks(obs_dim, hidden)
        self.replay = ReplayBuffer(self.buffer_size, obs_dim, self.n_bits)
        self._nstep = NStepTransitions(self.n_envs, self.n_steps, self.gamma)
        # exploration and minibatches from a stream of their own, drawn from numpy's global
        # one (seeded by train's set_random_seed), so a seed fixes the run
        self._rng = np.random.default_rng(int(np.random.randint(2 ** 31 - 1)))
        #: Gradient steps taken (SB3's ``_n_updates``).
        self._n_updates = 0
        self.after_setup()
        self.sync_policy()

    def build_networks(self, obs_dim: int, hidden: tuple[int, ...]) -> None:
        """The learner's networks and optimisers (after :attr:`policy`, before the replay)."""
        raise NotImplementedError

    def after_setup(self) -> None:
        """State the learner sets once the replay and the generator exist (none here)."""

    def sync_policy(self) -> None:
        """Refresh :attr:`policy` from the learner's networks (none here)."""

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """``(batch, m)`` deterministic action of a batch of observations."""
        raise NotImplementedError

    def behaviour(self, obs: np.ndarray, progress: float) -> np.ndarray:
        """``(n, m)`` exploring actions at ``progress`` (share of the run done, 0 to 1)."""
        raise NotImplementedError

    def train_step(self) -> float:
        """One gradient step on a minibatch of the replay; its loss."""
        raise NotImplementedError

    def record_rollout(self, losses: list[float]) -> None:
        """Log what a rollout's training did (SB3's logger, dumped at the boundary)."""
        self.logger.record("train/n_updates", self._n_updates)
        if losses:
            self.logger.record("train/loss", float(np.mean(losses)))

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """The greedy action of ``observation`` (one or a batch); exploration is not applied."""
        obs = np.asarray(observation, dtype=np.float32)
        single = obs.ndim == 1
        with torch.no_grad():
            actions = self.greedy(torch.as_tensor(obs.reshape(-1, obs.shape[-1])))
        out = actions.numpy().astype(np.int8)
        return (out[0] if single else out), state

    # ------------------------------------------------------------------ acting
    def _remember(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  new_obs: np.ndarray, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """Each sub-env's step into its n-step window; completed transitions into the replay."""
        for env in range(len(rewards)):
            done = bool(dones[env])
            truncated = done and bool(infos[env].get("TimeLimit.truncated", False))
            following = (np.asarray(infos[env]["terminal_observation"], dtype=np.float32)
                         if done else new_obs[env])
            for transition in self._nstep.add(env, obs[env], actions[env], float(rewards[env]),
                                              following, done and not truncated, truncated):
                self.replay.add(transition)

    # ------------------------------------------------------------------ learning
    def learn(self, total_timesteps: int, callback: MaybeCallback = None,
              log_interval: int = 1, tb_log_name: str = "off_policy",
              reset_num_timesteps: bool = True, progress_bar: bool = False
              ) -> OffPolicyBits:
        """Train for ``total_timesteps`` env steps, rounded up to whole rollouts."""
        total, hooks = self._setup_learn(total_timesteps, callback, reset_num_timesteps,
                                         tb_log_name, progress_bar)
        hooks.on_training_start(locals(), globals())
        assert self.env is not None
        while self.num_timesteps < total:
            if not self.rollout(self.env, hooks, total):
                break
        self.sync_policy()
        hooks.on_training_end()
        return self

    def rollout(self, env: VecEnv, callback: BaseCallback, total: int) -> bool:
        """``rollout_steps`` steps of every sub-env, training between them.

        Returns:
            ``False`` when a callback stops the run.
        """
        assert self._last_obs is not None  # set by _setup_learn
        callback.on_rollout_start()
        start = self.num_timesteps - self._num_timesteps_at_start
        span = max(1, total - self._num_timesteps_at_start)
        losses: list[float] = []
        for step in range(self.rollout_steps):
            obs = np.asarray(self._last_obs, dtype=np.float32)
            actions = self.behaviour(obs, (start + step * self.n_envs) / span)
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            self._remember(obs, actions, rewards, np.asarray(new_obs, dtype=np.float32),
                           dones, infos)
            self._last_obs = new_obs  # type: ignore[assignment]  # a Box env's array
            if (step + 1) % self.train_freq == 0 and self.replay.size >= max(
                    self.learning_starts, 1):
                losses += [self.train_step() for _ in range(self.gradient_steps)]
        self.sync_policy()
        self.record_rollout(losses)
        callback.update_locals(locals())
        callback.on_rollout_end()
        self.logger.dump(step=self.num_timesteps)
        return True


class BranchingDQN(OffPolicyBits):
    """BDQ on a ``MultiBinary`` VecEnv (module docstring); an SB3 algorithm to ``learn``.

    Args:
        policy: The policy class the greedy policy is exported to (``AllocatorPolicy``).
        env: A VecEnv with a flat ``Box`` observation and a ``MultiBinary(m)`` action.
        learning_rate: Adam's step size.
        buffer_size: Transitions the replay keeps.
        learning_starts: Transitions stored before the first gradient step.
        batch_size: Transitions per gradient step.
        gamma: Discount.
        train_freq: Steps of the batched env between two rounds of gradient steps.
        gradient_steps: Gradient steps per round.
        n_steps: The n of the n-step return (SB3 DQN's name). 1 by default: chosen on
            validation tasks (ToolBench-v0, 0.55 of the gap against 0.37 at 3 and 0.25 at 5;
            longer returns, uncorrected off-policy, carry the exploring bits' value).
        target_update_interval: Gradient steps between two copies of the online network
            into the target network.
        per_branch_targets: Each branch's own TD target instead of the mean over branches.
        exploration_fraction: Share of the run over which epsilon falls.
        exploration_initial_eps: Epsilon at the start.
        exploration_final_eps: Epsilon after ``exploration_fraction`` of the run.
        max_grad_norm: Gradient clipping (global norm).
        rollout_steps: Steps per sub-env between two callback rollout boundaries.
        stats_window_size: SB3's window of episode statistics.
        tensorboard_log: SB3's TensorBoard folder.
        policy_kwargs: ``AllocatorPolicy`` arguments (``hidden_sizes``; ``lora_rank`` must
            be ``None`` and ``action_distribution`` ``independent``: BDQ trains the plain
            network and each bit on its own).
        verbose: SB3 verbosity.
        device: Only ``cpu``.

    Raises:
        ValueError: A bad hyperparameter or an env BDQ does not handle.
    """

    def __init__(
        self,
        policy: type[AllocatorPolicy],
        env: VecEnv,
        learning_rate: float = 5e-4,
        buffer_size: int = 100_000,
        learning_starts: int = 5_000,
        batch_size: int = 128,
        gamma: float = 0.99,
        train_freq: int = 1,
        gradient_steps: int = 1,
        n_steps: int = 1,
        target_update_interval: int = 500,
        per_branch_targets: bool = False,
        exploration_fraction: float = 0.2,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float = 0.05,
        max_grad_norm: float = 10.0,
        rollout_steps: int = 512,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        device: str = "cpu",
    ) -> None:
        where = "BranchingDQN"
        self.target_update_interval = integer(target_update_interval,
                                              "target_update_interval", minimum=1, where=where)
        self.per_branch_targets = boolean(per_branch_targets, "per_branch_targets",
                                          where=where)
        self.exploration_fraction = number(exploration_fraction, "exploration_fraction",
                                           minimum=0, where=where)
        self.exploration_initial_eps = number(exploration_initial_eps,
                                              "exploration_initial_eps", minimum=0, where=where)
        self.exploration_final_eps = number(exploration_final_eps, "exploration_final_eps",
                                            minimum=0, where=where)
        for name, value in (("exploration_fraction", self.exploration_fraction),
                            ("exploration_initial_eps", self.exploration_initial_eps),
                            ("exploration_final_eps", self.exploration_final_eps)):
            if value > 1:
                raise ValueError(f"{where}: {name}: expected a number in [0, 1], got {value}")
        #: The current epsilon.
        self.exploration_rate = self.exploration_initial_eps
        super().__init__(policy, env, learning_rate, buffer_size, learning_starts, batch_size,
                         gamma, train_freq, gradient_steps, n_steps, max_grad_norm,
                         rollout_steps, stats_window_size, tensorboard_log, policy_kwargs,
                         verbose, device, where)

    # ------------------------------------------------------------------ model
    def build_networks(self, obs_dim: int, hidden: tuple[int, ...]) -> None:
        """The online Q-network, its target copy and Adam over the online one."""
        assert isinstance(self.learning_rate, float)  # checked in __init__
        self.q_net = BranchingQNetwork(obs_dim, self.n_bits, hidden)
        self.q_net_target = copy.deepcopy(self.q_net)
        self.q_net_target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_net.parameters(), lr=self.learning_rate)

    def after_setup(self) -> None:
        """Target syncs taken: none yet."""
        self.target_syncs = 0

    def sync_policy(self) -> None:
        """Copy the greedy Q-network into :attr:`policy` (module docstring, Policy)."""
        policy, q_net = self.policy, self.q_net
        with torch.no_grad():
            policy.features_extractor.net.load_state_dict(q_net.torso.state_dict())
            policy.value_net.load_state_dict(q_net.value.state_dict())
            weight = q_net.advantage.weight.view(self.n_bits, 2, -1)
            bias = q_net.advantage.bias.view(self.n_bits, 2)
            action_net = policy.action_net
            assert isinstance(action_net, nn.Linear)  # the independent head
            action_net.weight.copy_(weight[:, 1] - weight[:, 0])
            action_net.bias.copy_(bias[:, 1] - bias[:, 0])

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """Each branch's argmax of the online Q-network."""
        return self.q_net.greedy(obs)

    # ------------------------------------------------------------------ acting
    def behaviour(self, obs: np.ndarray, progress: float) -> np.ndarray:
        """Per-bit epsilon-greedy at the schedule's epsilon (SB3 DQN's linear one)."""
        self.exploration_rate = linear_epsilon(
            progress, self.exploration_initial_eps, self.exploration_final_eps,
            self.exploration_fraction)
        return self.explore(obs, self.exploration_rate)

    def explore(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """``(n, m)`` actions: each bit random with probability ``epsilon``, else greedy."""
        with torch.no_grad():
            greedy = self.q_net.greedy(torch.as_tensor(obs, dtype=torch.float32)).numpy()
        shape = greedy.shape
        random_bit = self._rng.random(shape) < epsilon
        coins = self._rng.integers(2, size=shape)
        return np.where(random_bit, coins, greedy).astype(np.int8)

    # ------------------------------------------------------------------ learning
    def train_step(self) -> float:
        """One gradient step on a minibatch of the replay; its loss.

        The target network is synced every ``target_update_interval`` of them.
        """
        obs, actions, returns, next_obs, discounts = self.minibatch()
        targets = double_q_targets(self.q_net, self.q_net_target, next_obs, returns,
                                   discounts, self.per_branch_targets)
        chosen = self.q_net(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        loss = F.smooth_l1_loss(chosen, targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(list(self.q_net.parameters()), self.max_grad_norm)
        self.optimizer.step()
        self._n_updates += 1
        if self._n_updates % self.target_update_interval == 0:
            self.sync_target()
        return float(loss.detach())

    def minibatch(self) -> tuple[torch.Tensor, ...]:
        """The transitions of one gradient step: ``batch_size`` rows of the replay.

        The hook of :class:`agents.learners.dyna.DynaBDQ`, which mixes imagined rows in.
        """
        return self.replay.sample(self._rng, self.batch_size)

    def sync_target(self) -> None:
        """Copy the online network into the target network."""
        self.q_net_target.load_state_dict(self.q_net.state_dict())
        self.target_syncs += 1

    def record_rollout(self, losses: list[float]) -> None:
        """The loop's records and the rollout's last epsilon."""
        self.logger.record("train/exploration_rate", self.exploration_rate)
        super().record_rollout(losses)

    def learn(self, total_timesteps: int, callback: MaybeCallback = None,
              log_interval: int = 1, tb_log_name: str = "bdq",
              reset_num_timesteps: bool = True, progress_bar: bool = False
              ) -> BranchingDQN:
        """Train for ``total_timesteps`` env steps, rounded up to whole rollouts."""
        super().learn(total_timesteps, callback, log_interval, tb_log_name,
                      reset_num_timesteps, progress_bar)
        return self
