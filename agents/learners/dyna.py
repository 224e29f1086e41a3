"""Dyna on a branching dueling Q-network: a model learned from the agent's own steps.

Issue #38, point 1: a learner that uses nothing but interaction (observation, reward,
``info``). :class:`DynaBDQ` is :class:`agents.learners.bdq.BranchingDQN` (1-step
returns) whose gradient steps also learn from *imagined* transitions: short rollouts of
a model of the env fitted to the agent's own replay, branched from real replay states
(Sutton's Dyna; MBPO's short branched rollouts, Janner et al., 2019).

**The model** (:class:`TransitionModel`), fitted to the replay only. An observation's
slots are split once, from the data, into *discrete* slots (at most ``max_levels``
distinct values seen: counters, flags, one-hots) and *continuous* ones. A step's outcome
is one class of an :class:`OutcomeVocabulary`: class 0 "the episode terminated", class
``k >= 1`` "it went on, the discrete slots moved by the ``k``-th change vector seen and
these continuous slots kept their values" (the vocabulary grows as new changes are seen,
up to ``model_classes``). So the discrete part of the next observation is one
classification, and its slots move together (a stage cleared moves the counters, the
progress and the one-hot at once); a per-slot model would mix slots of different
outcomes. A continuous slot that keeps its value (the stage's difficulty while the stage
is not cleared) is kept by the class: a normal law of zero width would have a likelihood
whose gradients swamp the rest of the fit (it did: the class probabilities were off by
0.05-0.1 on a toy chain until then). Given the class, a second head predicts the step's
mean reward and a normal law of each continuous slot the class changes (mean and
log-std). An
ensemble of ``model_members`` MLPs (SiLU, ``model_hidden`` wide), each trained on its own
minibatches: cross-entropy of the class, squared error of the reward and normal
log-likelihood of the continuous slots (the last two given the true class).

**Imagination** (:meth:`DynaBDQ.imagine`). Every ``model_train_freq`` steps of the
batched env the model takes ``model_gradient_steps`` (``model_warmup_steps`` the first
time), then ``rollout_batch`` states are drawn from the real replay and rolled
``rollout_horizon`` steps: each step an action from the current exploring policy
(per-bit epsilon-greedy, the run's current epsilon), an ensemble member drawn per row,
an outcome class drawn from its softmax, the reward the member predicts for it, the
continuous slots it changes drawn from its normal law (clipped to the observation
space). Each
imagined transition goes into a ring of ``imagined_buffer_size``; discount 0 when the
class is "terminated", ``gamma`` otherwise, so imagined steps bootstrap as 1-step real
ones.

**Value learning** (:meth:`DynaBDQ.minibatch`, BDQ's hook). Each gradient step's
minibatch holds ``round(imagined_ratio * batch_size)`` imagined rows and the rest real
ones; BDQ's double-Q, mean-over-branches target and Huber loss are unchanged, and
``gradient_steps`` of them follow each step of the batched env. With
``imagined_ratio=0`` no model is built or fitted and the run is BDQ's to the bit.

What the model was meant to buy: actions the behaviour policy did not take at a state
valued by the model's expected outcome rather than only by the steps played, and the
luck of a task (fixed at reset, never observed) averaged in the model's reward instead
of replayed as it fell. Screened on ToolBench-v0 it does not pay (docs/learners.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from agents.learners.bdq import BranchingDQN, ReplayBuffer, Transition
from agents.learners.common.policies import AllocatorPolicy
from cost_envs.config import integer, number

#: Rounding of a change of a discrete slot (its key in the vocabulary).
_DECIMALS = 4


class EnsembleLinear(nn.Module):
    """``members`` independent linear layers applied to ``(members, batch, in)``."""

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / np.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features)
                                   .uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(members, batch, out)``."""
        return torch.baddbmm(self.bias, x, self.weight)


class TransitionModel(nn.Module):
    """An ensemble: ``(obs, action)`` to an outcome class, then reward and slots given it.

    Given the class: the step's mean reward and each continuous slot's normal law (module
    docstring).

    Args:
        obs_dim: Observation width.
        n_bits: The action's bits.
        n_continuous: Continuous slots of the observation.
        n_classes: Outcome classes (terminated and the discrete change vectors).
        members: Ensemble size.
        hidden: Width of the hidden layers.
    """

    def __init__(self, obs_dim: int, n_bits: int, n_continuous: int, n_classes: int,
                 members: int = 4, hidden: int = 128) -> None:
        super().__init__()
        self.members, self.n_classes, self.n_continuous = members, n_classes, n_continuous
        self.trunk = nn.ModuleList([EnsembleLinear(members, obs_dim + n_bits, hidden),
                                    EnsembleLinear(members, hidden, hidden)])
        self.logits = EnsembleLinear(members, hidden, n_classes)
        # given the class: a per-member embedding of it added to a projection of the
        # features (a linear layer on [features, one-hot] without the one-hot's product)
        self.embedding = nn.Parameter(torch.randn(members, n_classes, hidden) * 0.1)
        self.given = nn.ModuleList([EnsembleLinear(members, hidden, hidden),
                                    EnsembleLinear(members, hidden, 1 + 2 * n_continuous)])

    def features(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(members, batch, hidden)`` from ``(members, batch, .)`` inputs."""
        x = torch.cat([obs, actions], dim=-1)
        for layer in self.trunk:
            x = F.silu(layer(x))
        return x

    def outcome(self, features: torch.Tensor, classes: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reward ``(members, batch)``, continuous means and log-stds given the classes."""
        members = torch.arange(self.members).unsqueeze(-1)
        x = F.silu(self.given[0](features) + self.embedding[members, classes])
        out = self.given[1](x)
        k = self.n_continuous
        return out[..., 0], out[..., 1:1 + k], out[..., 1 + k:].clamp(-6.0, 1.0)


class OutcomeVocabulary:
    """Outcome classes: 0 terminated, ``k >= 1`` the ``k``-th change of the observation.

    A change is the change of every discrete slot and, for every continuous slot, whether
    it kept its value (a slot that keeps its value is part of the class, not a normal law
    of zero width, whose likelihood's gradients would swamp the rest of the fit).

    Args:
        discrete: ``(obs_dim,)`` which slots are discrete.
        capacity: Classes at most (terminated included); a change seen when it is full has
            no class (``-1``) and is left out of the model's fit.
    """

    def __init__(self, discrete: np.ndarray, capacity: int) -> None:
        self.discrete = np.asarray(discrete, dtype=bool)
        self.capacity = integer(capacity, "model_classes", minimum=2)
        #: ``(capacity, discrete slots)`` change vectors; row 0 (terminated) unused.
        self.changes = np.zeros((capacity, int(self.discrete.sum())), dtype=np.float32)
        #: ``(capacity, continuous slots)``: the class keeps the slot's value.
        self.kept = np.zeros((capacity, int((~self.discrete).sum())), dtype=bool)
        self.size = 1
        self._index: dict[bytes, int] = {}

    def key(self, change: np.ndarray, kept: np.ndarray) -> bytes:
        """The vocabulary's key of one change (discrete slots' change, continuous kept)."""
        rounded = np.round(np.asarray(change, dtype=np.float64), _DECIMALS) + 0.0  # no -0.0
        return rounded.tobytes() + np.asarray(kept, dtype=bool).tobytes()

    def encode(self, obs: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray
               ) -> np.ndarray:
        """``(batch,)`` classes of transitions, new changes added while there is room."""
        change = (next_obs[:, self.discrete] - obs[:, self.discrete]).astype(np.float32)
        kept = next_obs[:, ~self.discrete] == obs[:, ~self.discrete]
        out = np.zeros(len(obs), dtype=np.int64)
        for row in np.flatnonzero(~np.asarray(terminated, dtype=bool)):
            key = self.key(change[row], kept[row])
            found = self._index.get(key)
            if found is None:
                if self.size == self.capacity:
                    out[row] = -1
                    continue
                found = self._index[key] = self.size
                self.changes[found] = change[row]  # as first seen: exact on float32
                self.kept[found] = kept[row]
                self.size += 1
            out[row] = found
        return out


def discrete_slots(obs: np.ndarray, max_levels: int) -> np.ndarray:
    """``(obs_dim,)``: slots with at most ``max_levels`` distinct values in ``obs``."""
    return np.array([len(np.unique(np.round(obs[:, slot], _DECIMALS))) <= max_levels
                     for slot in range(obs.shape[1])])


class LabelledReplay(ReplayBuffer):
    """BDQ's replay with each row's outcome class (``-2`` until the model labels it)."""

    def __init__(self, capacity: int, obs_dim: int, n_bits: int) -> None:
        super().__init__(capacity, obs_dim, n_bits)
        self.classes = np.full(capacity, -2, dtype=np.int64)

    def add(self, transition: Transition) -> None:
        """Store one transition, unlabelled."""
        self.classes[self._next] = -2
        super().add(transition)


def store(replay: ReplayBuffer, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
          following: np.ndarray, discounts: np.ndarray) -> None:
    """Rows into a ring replay at once, as many :meth:`ReplayBuffer.add` calls in order."""
    count = len(obs)
    if count > replay.capacity:  # only the last ``capacity`` would survive
        obs, actions, rewards = obs[-replay.capacity:], actions[-replay.capacity:], \
            rewards[-replay.capacity:]
        following, discounts = following[-replay.capacity:], discounts[-replay.capacity:]
        replay._next = (replay._next + count - replay.capacity) % replay.capacity
        count = replay.capacity
    rows = (replay._next + np.arange(count)) % replay.capacity
    replay.obs[rows] = obs
    replay.actions[rows] = actions
    replay.returns[rows] = rewards
    replay.next_obs[rows] = following
    replay.discounts[rows] = discounts
    if isinstance(replay, LabelledReplay):
        replay.classes[rows] = -2
    replay._next = int((replay._next + count) % replay.capacity)
    replay.size = min(replay.size + count, replay.capacity)


class DynaBDQ(BranchingDQN):
    """BDQ whose updates also learn from a learned model's imagined steps (module docstring).

    Args:
        policy: As :class:`~agents.learners.bdq.BranchingDQN`.
        env: As :class:`~agents.learners.bdq.BranchingDQN`.
        imagined_ratio: Share of each minibatch drawn from imagined transitions (0: no
            model, BDQ to the bit).
        rollout_horizon: Model steps of each imagined rollout.
        rollout_batch: Real replay states each round of imagination starts from.
        imagined_buffer_size: Imagined transitions kept (the newest).
        model_train_freq: Steps of the batched env between two rounds of model fitting and
            imagination.
        model_gradient_steps: The model's gradient steps per round.
        model_warmup_steps: Its gradient steps in the first round.
        model_batch_size: Transitions per model gradient step and member.
        model_learning_rate: The model's Adam step size.
        model_members: Ensemble members.
        model_hidden: The model's hidden width.
        model_classes: Outcome classes at most.
        max_levels: A slot with at most this many distinct values is discrete.
        **kwargs: :class:`~agents.learners.bdq.BranchingDQN`'s arguments (``n_steps`` must
            be 1: imagined steps are 1-step transitions, and the model is fitted to the
            replay's).
    """

    def __init__(
        self,
        policy: type[AllocatorPolicy],
        env: VecEnv,
        imagined_ratio: float = 0.5,
        rollout_horizon: int = 1,
        rollout_batch: int = 1024,
        imagined_buffer_size: int = 50_000,
        model_train_freq: int = 64,
        model_gradient_steps: int = 32,
        model_warmup_steps: int = 500,
        model_batch_size: int = 128,
        model_learning_rate: float = 1e-3,
        model_members: int = 4,
        model_hidden: int = 64,
        model_classes: int = 256,
        max_levels: int = 32,
        **kwargs: Any,
    ) -> None:
        where = "DynaBDQ"
        self.imagined_ratio = number(imagined_ratio, "imagined_ratio", minimum=0, where=where)
        if self.imagined_ratio > 1:
            raise ValueError(f"{where}: imagined_ratio: expected a number in [0, 1], got "
                             f"{imagined_ratio}")
        self.rollout_horizon = integer(rollout_horizon, "rollout_horizon", minimum=1,
                                       where=where)
        self.rollout_batch = integer(rollout_batch, "rollout_batch", minimum=1, where=where)
        self.imagined_buffer_size = integer(imagined_buffer_size, "imagined_buffer_size",
                                            minimum=1, where=where)
        self.model_train_freq = integer(model_train_freq, "model_train_freq", minimum=1,
                                        where=where)
        self.model_gradient_steps = integer(model_gradient_steps, "model_gradient_steps",
                                            minimum=1, where=where)
        self.model_warmup_steps = integer(model_warmup_steps, "model_warmup_steps",
                                          minimum=1, where=where)
        self.model_batch_size = integer(model_batch_size, "model_batch_size", minimum=1,
                                        where=where)
        self.model_learning_rate = number(model_learning_rate, "model_learning_rate",
                                          minimum=0, where=where)
        self.model_members = integer(model_members, "model_members", minimum=1, where=where)
        self.model_hidden = integer(model_hidden, "model_hidden", minimum=1, where=where)
        self.model_classes = integer(model_classes, "model_classes", minimum=2, where=where)
        self.max_levels = integer(max_levels, "max_levels", minimum=1, where=where)
        if kwargs.get("n_steps", 1) != 1:
            raise ValueError(f"{where}: n_steps: imagined steps are 1-step transitions, so "
                             f"only 1 applies, got {kwargs['n_steps']!r}")
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        #: The model, its vocabulary and optimiser: built at the first fit (when the
        #: replay shows which slots are discrete); ``None`` before and without imagination.
        self.model: TransitionModel | None = None
        self.vocabulary: OutcomeVocabulary | None = None
        self.model_optimizer: torch.optim.Optimizer | None = None
        self.model_fits = 0
        self._batched_steps = 0
        if self.imagined_ratio > 0:
            self.replay = LabelledReplay(self.buffer_size, self.replay.obs.shape[1], self.n_bits)
            self.imagined = ReplayBuffer(self.imagined_buffer_size, self.replay.obs.shape[1],
                                         self.n_bits)
            space = self.observation_space
            assert isinstance(space, spaces.Box)  # checked by BDQ's _setup_model
            self._low = np.asarray(space.low, dtype=np.float32)
            self._high = np.asarray(space.high, dtype=np.float32)

    # ------------------------------------------------------------------ the model
    def label_replay(self) -> None:
        """Give every unlabelled replay row its outcome class (building the vocabulary)."""
        replay = self.replay
        assert isinstance(replay, LabelledReplay)
        if self.vocabulary is None:
            discrete = discrete_slots(replay.obs[:replay.size], self.max_levels)
            self.vocabulary = OutcomeVocabulary(discrete, self.model_classes)
            self._discrete = discrete
            self.model = TransitionModel(replay.obs.shape[1], self.n_bits,
                                         int((~discrete).sum()), self.model_classes,
                                         self.model_members, self.model_hidden)
            self.model_optimizer = torch.optim.Adam(self.model.parameters(),
                                                    lr=self.model_learning_rate)
        rows = np.flatnonzero(replay.classes[:replay.size] == -2)
        if len(rows):
            replay.classes[rows] = self.vocabulary.encode(
                replay.obs[rows], replay.next_obs[rows], replay.discounts[rows] == 0)

    def fit_model(self, steps: int) -> float:
        """``steps`` gradient steps of the model on the labelled replay; the last loss."""
        self.label_replay()
        model, optimizer, replay = self.model, self.model_optimizer, self.replay
        vocabulary = self.vocabulary
        assert model is not None and optimizer is not None and vocabulary is not None
        assert isinstance(replay, LabelledReplay)
        known = np.flatnonzero(replay.classes[:replay.size] >= 0)
        if len(known) == 0:
            return float("nan")
        continuous = ~self._discrete
        loss_value = float("nan")
        for _ in range(steps):
            rows = known[self._rng.integers(len(known),
                                            size=(self.model_members, self.model_batch_size))]
            obs = torch.from_numpy(replay.obs[rows])
            actions = torch.from_numpy(replay.actions[rows]).float()
            labels = replay.classes[rows]
            classes = torch.from_numpy(labels)
            rewards = torch.from_numpy(replay.returns[rows])
            following = torch.from_numpy(replay.next_obs[rows][..., continuous])
            features = model.features(obs, actions)
            logits = model.logits(features)
            reward, mean, log_std = model.outcome(features, classes)
            loss = F.cross_entropy(logits.reshape(-1, model.n_classes), classes.reshape(-1))
            loss = loss + F.mse_loss(reward, rewards)
            if model.n_continuous:
                # the continuous slots a step changed (not kept by its class)
                going = torch.from_numpy((labels > 0)[..., None]
                                         & ~vocabulary.kept[labels]).float()
                nll = 0.5 * ((following - mean) / log_std.exp()) ** 2 + log_std
                loss = loss + (nll * going).sum() / going.sum().clamp(min=1.0) / (
                    model.n_continuous)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_value = float(loss.detach())
        self.model_fits += 1
        return loss_value

    def outcome_probabilities(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``(batch, classes)``: the ensemble's mean probability of each outcome class."""
        model, vocabulary = self.model, self.vocabulary
        assert model is not None and vocabulary is not None
        with torch.no_grad():
            x = torch.as_tensor(np.asarray(obs, dtype=np.float32)).expand(model.members, -1, -1)
            a = torch.as_tensor(np.asarray(actions, dtype=np.float32)).expand(
                model.members, -1, -1)
            logits = model.logits(model.features(x, a))
            logits[..., vocabulary.size:] = -torch.inf
            return torch.softmax(logits, dim=-1).mean(dim=0).numpy()

    def predict_outcome(self, obs: np.ndarray, actions: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One imagined step of each row: ``(rewards, next observations, terminated)``.

        Each row's ensemble member, outcome class and continuous slots are drawn from the
        run's generator (module docstring, Imagination).
        """
        model, vocabulary = self.model, self.vocabulary
        assert model is not None and vocabulary is not None
        batch = len(obs)
        member = self._rng.integers(model.members, size=batch)
        with torch.no_grad():
            x = torch.from_numpy(np.asarray(obs, dtype=np.float32))
            a = torch.from_numpy(np.asarray(actions, dtype=np.float32))
            stacked = (x.expand(model.members, -1, -1), a.expand(model.members, -1, -1))
            features = model.features(*stacked)
            logits = model.logits(features)
            logits[..., vocabulary.size:] = -torch.inf  # classes not seen yet
            rows = torch.arange(batch)
            chosen = torch.from_numpy(member)
            probs = torch.softmax(logits[chosen, rows], dim=-1).numpy().astype(np.float64)
            draws = self._rng.random(batch)
            classes = np.minimum((np.cumsum(probs, axis=1) < draws[:, None]).sum(axis=1),
                                 vocabulary.size - 1)
            rewards, means, log_stds = model.outcome(
                features, torch.from_numpy(classes).expand(model.members, -1))
            reward = rewards[chosen, rows].numpy()
            mean = means[chosen, rows].numpy()
            std = log_stds[chosen, rows].exp().numpy()
        terminated = classes == 0
        following = np.array(obs, dtype=np.float32, copy=True)
        following[:, self._discrete] += vocabulary.changes[classes]
        drawn = mean + std * self._rng.standard_normal(mean.shape)
        following[:, ~self._discrete] = np.where(vocabulary.kept[classes],
                                                 following[:, ~self._discrete], drawn)
        following = np.clip(following, self._low, self._high).astype(np.float32)
        return reward.astype(np.float32), following, terminated

    def imagine(self) -> int:
        """Branched rollouts from ``rollout_batch`` real replay states; transitions added."""
        states = self.replay.obs[self._rng.integers(self.replay.size, size=self.rollout_batch)]
        added = 0
        for _ in range(self.rollout_horizon):
            if len(states) == 0:
                break
            actions = self.explore(states, self.exploration_rate)
            rewards, following, terminated = self.predict_outcome(states, actions)
            store(self.imagined, states, actions, rewards, following,
                  np.where(terminated, 0.0, self.gamma))
            added += len(states)
            states = following[~terminated]
        return added

    # ------------------------------------------------------------------ BDQ's hooks
    def _remember(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  new_obs: np.ndarray, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """BDQ's, then every ``model_train_freq`` batched steps a model fit and imagination."""
        super()._remember(obs, actions, rewards, new_obs, dones, infos)
        if self.imagined_ratio <= 0:
            return
        self._batched_steps += 1
        if (self._batched_steps % self.model_train_freq == 0
                and self.replay.size >= self.learning_starts):
            steps = self.model_warmup_steps if self.model is None else self.model_gradient_steps
            loss = self.fit_model(steps)
            self.logger.record("train/model_loss", loss)
            self.imagine()

    def minibatch(self) -> tuple[torch.Tensor, ...]:
        """Real rows and ``imagined_ratio`` of imagined ones (all real before any)."""
        if self.imagined_ratio <= 0 or self.imagined.size == 0:
            return super().minibatch()
        imagined = round(self.imagined_ratio * self.batch_size)
        real = self.replay.sample(self._rng, self.batch_size - imagined)
        dreamt = self.imagined.sample(self._rng, imagined)
        return tuple(torch.cat(pair) for pair in zip(real, dreamt, strict=True))
