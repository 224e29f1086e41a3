"""The supervised LoRA allocator: imitate the greedy heuristic with the paper's cost-aware loss.

Labels ``y_t`` are the agent sets :class:`agents.baselines.GreedyHeuristic` calls along its
own trajectories (the cheapest set of agents whose capabilities cover the task). Beyond
the paper, the teacher can be the env family's planner instead (``teacher="planner"``,
:mod:`agents.planning`: it knows the task's parameters but not the luck, so its labels are
decisions a policy could learn to approximate from what it observes). The
policy's call probabilities ``p_t = sigmoid(action_net(encoder(o_t)))`` (with the
autoregressive head, each agent's given the label's earlier bits) are fitted with

    L_sup = BCE(p_t, y_t) + lambda_1 * ||p_t||_1 + lambda_c * sum_i c_i p_{t,i}
            + lambda_cov * ((1/m) sum_i p_{t,i} - rho)^2,

each term averaged over the batch (BCE also over agents). ``c_i`` is agent i's price
divided by the pool's highest price, so ``lambda_c`` means the same for any currency or
price level. Only the adapter and the new action head learn from ``L_sup``; the frozen
base does not move. The value head is fitted at the same time, on detached features, to
the discounted returns of the traces, so that LoRA-guided PPO starts with a critic that
knows what the warm-started policy earns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from agents.baselines import GreedyHeuristic
from agents.evaluation import rollout
from agents.learners.common.policies import AllocatorPolicy
from agents.progress import progress_bar
from cost_envs.config import integer, number
from cost_envs.core import OrchestrationEnv


@dataclass(frozen=True)
class Traces:
    """A teacher's labels of steps: its own trajectories, or a student's (DAgger).

    Attributes:
        observations: ``(n, obs_dim)`` float32.
        labels: ``(n, m)`` float32 in {0, 1}: the agents the teacher called (or would
            have called, at a student's state).
        returns: ``(n,)`` float32 discounted return from each step.
    """

    observations: np.ndarray
    labels: np.ndarray
    returns: np.ndarray


def greedy_traces(
    env: gym.Env, episodes: int, seed: int, threshold: float = 0.7, gamma: float = 0.99,
    progress: bool = False,
) -> Traces:
    """Roll out :class:`GreedyHeuristic` on ``episodes`` tasks of ``env`` (task seed ``seed``)."""
    return teacher_traces(GreedyHeuristic(env, threshold=threshold), env, episodes, seed, gamma,
                          progress=progress)


def teacher_traces(teacher: Any, env: gym.Env, episodes: int, seed: int,
                   gamma: float = 0.99, progress: bool = False) -> Traces:
    """Roll out ``teacher`` (an allocator built on ``env``) on ``episodes`` tasks of ``seed``.

    ``progress`` draws a bar on a terminal (:func:`agents.progress.progress_bar`): a
    planner teacher can take minutes.
    """
    observations: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    returns: list[float] = []
    with progress_bar(episodes, "supervised: teacher episodes", progress, "episode") as bar:
        for episode in range(episodes):
            _record_episode(teacher, env, seed if episode == 0 else None, gamma,
                            (observations, labels, returns))
            bar.update(1)
    return Traces(
        np.concatenate(observations).astype(np.float32),
        np.concatenate(labels).astype(np.float32),
        np.asarray(returns, dtype=np.float32),
    )


def _record_episode(teacher: Any, env: gym.Env, seed: int | None, gamma: float,
                    into: tuple[list[Any], list[Any], list[float]]) -> None:
    """Play one episode of ``teacher`` and append its steps, actions and returns."""
    observations, labels, returns = into
    played = rollout(teacher, env, seed=seed, record_steps=True)
    assert played.rewards is not None  # record_steps keeps them
    observations.append(played.observations)
    labels.append(played.actions)
    returns.extend(discounted_returns(played.rewards, gamma).tolist())


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """The discounted return from each step of one episode's ``rewards``."""
    out = np.empty(len(rewards), dtype=np.float64)
    running = 0.0
    for index in range(len(rewards) - 1, -1, -1):
        running = float(rewards[index]) + gamma * running
        out[index] = running
    return out


def supervised_loss(
    probs: torch.Tensor,
    labels: torch.Tensor,
    costs: torch.Tensor,
    lambda_1: float,
    lambda_c: float,
    lambda_cov: float,
    rho: float,
) -> dict[str, torch.Tensor]:
    """The terms of ``L_sup`` (module docstring) and their weighted sum.

    Args:
        probs: ``p_t``, shape ``(batch, m)``, in ``(0, 1)``.
        labels: ``y_t``, same shape, in {0, 1}.
        costs: ``c``, shape ``(m,)``.
        lambda_1: Weight of the L1 (sparsity) term.
        lambda_c: Weight of the expected-cost term.
        lambda_cov: Weight of the coverage term.
        rho: Target fraction of agents called.

    Returns:
        ``bce``, ``l1``, ``cost``, ``coverage`` (unweighted batch means) and ``total``.
    """
    terms = {
        "bce": F.binary_cross_entropy(probs, labels),
        "l1": probs.sum(dim=1).mean(),
        "cost": (probs * costs).sum(dim=1).mean(),
        "coverage": ((probs.mean(dim=1) - rho) ** 2).mean(),
    }
    terms["total"] = (terms["bce"] + lambda_1 * terms["l1"] + lambda_c * terms["cost"]
                      + lambda_cov * terms["coverage"])
    return terms


@dataclass(frozen=True)
class SupervisedConfig:
    """Hyperparameters of the supervised stage.

    Args:
        episodes: Greedy episodes to collect labels from.
        epochs: Passes over the traces.
        batch_size: Steps per gradient step.
        learning_rate: Adam step size for the adapter and the heads.
        lambda_1: L1 weight.
        lambda_c: Expected-cost weight (prices relative to the pool's highest).
        lambda_cov: Coverage weight.
        rho: Target call fraction; ``None`` takes the labels' mean.
        threshold: GreedyHeuristic's coverage threshold.
        gamma: Discount of the returns the value head is fitted to.
        teacher: Whose actions are the labels: ``greedy`` (the paper's
            :class:`GreedyHeuristic`), ``planner`` (the env family's planner, which knows
            the task but not its luck) or ``bayes`` (the family's Bayes reference, which
            knows the task prior and what the episode showed: not privileged).
        dagger_rounds: DAgger rounds after the first fit (:mod:`agents.learners.dagger`): the
            student plays, the teacher labels its states; 0 is plain behaviour cloning.
            The greedy teacher cannot label states it did not reach, so it takes none.
        dagger_episodes: Student episodes per DAgger round.
    """

    episodes: int = 1500
    epochs: int = 20
    batch_size: int = 256
    learning_rate: float = 3e-3
    lambda_1: float = 1e-3
    lambda_c: float = 1e-2
    lambda_cov: float = 1e-2
    rho: float | None = None
    threshold: float = 0.7
    gamma: float = 0.99
    teacher: str = "greedy"
    dagger_rounds: int = 0
    dagger_episodes: int = 500

    def __post_init__(self) -> None:
        if self.teacher not in TEACHERS:
            raise ValueError(f"SupervisedConfig.teacher: expected one of {list(TEACHERS)}, "
                             f"got {self.teacher!r}")
        integer(self.dagger_rounds, "SupervisedConfig.dagger_rounds", minimum=0)
        if self.dagger_rounds and self.teacher == "greedy":
            raise ValueError("SupervisedConfig.dagger_rounds: the greedy teacher labels only "
                             "its own trajectories; DAgger needs teacher='planner' or 'bayes', "
                             f"got dagger_rounds={self.dagger_rounds} with teacher='greedy'")
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in ("teacher", "dagger_rounds") or (field.name == "rho"
                                                              and value is None):
                continue
            if field.name in _COUNTS:
                integer(value, f"SupervisedConfig.{field.name}", minimum=1)
                continue
            low, high, low_open = _RANGES.get(field.name, (0.0, math.inf, False))
            number(value, f"SupervisedConfig.{field.name}", minimum=low,
                   maximum=None if high == math.inf else high, inclusive=(not low_open, True))


_COUNTS = ("episodes", "epochs", "batch_size", "dagger_episodes")
#: The supervised stage's teachers (:attr:`SupervisedConfig.teacher`).
TEACHERS = ("greedy", "planner", "bayes")


def traces_for(env: gym.Env, config: SupervisedConfig, seed: int,
               progress: bool = False) -> Traces:
    """The supervised stage's traces: ``config.episodes`` of its teacher on ``seed``'s tasks.

    ``progress`` draws a bar of the episodes on a terminal.

    Raises:
        ValueError: For the planner teacher on an env no planner models.
    """
    return teacher_traces(teacher_for(env, config), env, config.episodes, seed, config.gamma,
                          progress=progress)


def teacher_for(env: gym.Env, config: SupervisedConfig) -> Any:
    """The allocator whose actions are ``config``'s labels, built on ``env``.

    :class:`GreedyHeuristic` at ``config.threshold``, the env family's planner, or its
    Bayes reference.

    Raises:
        ValueError: For the planner or Bayes teacher on an env no such planner models.
    """
    if config.teacher == "greedy":
        return GreedyHeuristic(env, threshold=config.threshold)
    from agents.planning import bayes_planner, planner  # they import the baselines, not this

    return planner(env) if config.teacher == "planner" else bayes_planner(env)
_RANGES = {"learning_rate": (0.0, math.inf, True), "rho": (0.0, 1.0, False),
           "threshold": (0.0, 1.0, True), "gamma": (0.0, 1.0, False)}


def relative_prices(costs: np.ndarray) -> np.ndarray:
    """Each price over the highest one, as float32 (all zero for a free pool)."""
    costs = np.asarray(costs, dtype=np.float32)
    top = float(costs.max()) if costs.size else 0.0
    return costs / top if top > 0 else np.zeros_like(costs)


def relative_costs(env: gym.Env) -> np.ndarray:
    """:func:`relative_prices` of the pool of ``env`` (wrapped or not).

    Raises:
        ValueError: ``env`` is not a cost-envs environment (it has no agent pool).
    """
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise ValueError(f"relative_costs: expected a cost-envs environment (an "
                         f"OrchestrationEnv, whose pool has the prices), got "
                         f"{type(base).__name__}")
    return relative_prices(base.pool.costs)


def train_supervised(
    policy: AllocatorPolicy,
    traces: Traces,
    costs: np.ndarray,
    config: SupervisedConfig,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, float]]:
    """Fit ``policy`` to ``traces`` with ``L_sup``; returns one loss dict per epoch.

    ``progress`` draws a bar of the epochs, with the last epoch's loss, on a terminal.

    Trains the ``adapter`` and ``action`` groups on ``L_sup`` and the ``value`` group on
    the returns; everything else stays frozen. The policy's optimizer is left set up for
    exactly those groups.
    """
    policy.learning_rate = config.learning_rate
    policy.train_only({"adapter": 1.0, "action": 1.0, "value": 1.0}
                      if policy.lora_rank is not None else
                      {"base": 1.0, "action": 1.0, "value": 1.0})
    generator = torch.Generator().manual_seed(seed)
    obs = torch.as_tensor(traces.observations)
    labels = torch.as_tensor(traces.labels)
    returns = torch.as_tensor(traces.returns)
    cost = torch.as_tensor(costs, dtype=torch.float32)
    rho = float(labels.mean()) if config.rho is None else config.rho
    history = []
    policy.set_training_mode(True)
    bar = progress_bar(config.epochs, "supervised: epochs", progress, "epoch")
    for _ in range(config.epochs):
        order = torch.randperm(len(obs), generator=generator)
        sums: dict[str, float] = {}
        batches = 0
        for start in range(0, len(obs), config.batch_size):
            index = order[start:start + config.batch_size]
            features = policy.shared_features(obs[index])
            probs = policy.call_probabilities(features, labels[index])
            terms = supervised_loss(probs, labels[index], cost, config.lambda_1,
                                    config.lambda_c, config.lambda_cov, rho)
            values = policy.value_net(features.detach()).squeeze(-1)
            terms["value"] = F.mse_loss(values, returns[index])
            policy.optimizer.zero_grad()
            (terms["total"] + terms["value"]).backward()
            policy.optimizer.step()
            for key, value in terms.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach())
            batches += 1
        history.append({key: value / batches for key, value in sums.items()})
        bar.set_postfix(loss=f"{history[-1]['total']:.4f}", refresh=False)
        bar.update(1)
    bar.close()
    policy.set_training_mode(False)
    return history


def policy_for(env: gym.Env, learning_rate: float = 3e-4, **policy_kwargs: Any) -> AllocatorPolicy:
    """An :class:`AllocatorPolicy` for ``env``'s spaces, outside any SB3 algorithm."""
    return AllocatorPolicy(env.observation_space, env.action_space,
                           lambda _: learning_rate, **policy_kwargs)
