"""BoPO's warm start: stratified SFT data, behaviour cloning, and the router network.

Steps 4 and 5 of :mod:`agents.learners.bopo` (whose docstring describes the method):

* :func:`synthesize_sft_data`: per training task, the cheapest successful trajectory
  among the two boundary trajectories and ``samples`` mixed ones per large-model
  probability, then balanced across the difficulty strata (:class:`SFTData`);
* :func:`build_model`: the ``MaskablePPO`` router every learned method uses (BoPO, the
  SFT policy alone, vanilla PPO);
* :func:`sft_warm_start`: behaviour cloning of that router's policy MLP and action head
  on the demonstrations (:func:`demonstration_log_likelihood` measures it);
* :class:`MaskedRouter`: a trained router as a fast numpy allocator that respects the
  budget's action masks (:func:`policy_weights` extracts its weights).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.learners.bopo import (
    LEARNING_RATE,
    NET_ARCH,
    STRATA,
    Boundary,
    Trajectory,
    rollout,
)
from cost_envs.envs.agentic_routing import AgenticTask


# --------------------------------------------------------------------- SFT data
@dataclass(frozen=True)
class SFTData:
    """Demonstrations for the warm start.

    Attributes:
        observations: ``(N, obs_dim)`` float32, every step of every kept trajectory.
        actions: ``(N, m)`` int8, the demonstrated actions.
        trajectories: The kept trajectories, one per task.
        task_indices: Index (into the task list) of each kept trajectory.
        strata: Stratum of each kept trajectory.
    """

    observations: np.ndarray
    actions: np.ndarray
    trajectories: tuple[Trajectory, ...]
    task_indices: tuple[int, ...]
    strata: tuple[str, ...]

    def counts(self) -> dict[str, int]:
        """Kept trajectories per stratum."""
        return {s: self.strata.count(s) for s in STRATA}


def synthesize_sft_data(
    env: gym.Env,
    tasks: Sequence[AgenticTask],
    boundaries: Sequence[Boundary],
    mix_probs: Sequence[float] = (0.1, 0.25, 0.5),
    samples: int = 4,
    seed: int = 0,
    boundary_paths: Sequence[tuple[Trajectory, Trajectory]] | None = None,
) -> SFTData:
    """Stratified SFT data: the cheapest successful trajectory per task, balanced by stratum.

    See :mod:`agents.learners.bopo` (step 4).

    Args:
        env: The environment (unbudgeted: demonstrations measure the task).
        tasks: The training tasks.
        boundaries: Their boundary rollouts, in the same order.
        mix_probs: Probabilities of the large model per step of the mixed samples.
        samples: Mixed trajectories per probability and task.
        seed: Seed of the sampler's and the balancing's generator.
        boundary_paths: Always-small's and always-large's trajectory on each task, as
            :func:`boundary_trajectories` returns them; rolled out again when not given.
            (They draw nothing from the generator, so the data are the same either way.)
    """
    if len(tasks) != len(boundaries):
        raise ValueError("synthesize_sft_data: expected one boundary per task")
    if boundary_paths is not None and len(boundary_paths) != len(tasks):
        raise ValueError("synthesize_sft_data: expected one pair of boundary trajectories "
                         "per task")
    space = env.action_space
    if not isinstance(space, spaces.MultiBinary) or not isinstance(space.n, int):
        raise ValueError(f"synthesize_sft_data: expected a flat MultiBinary action space "
                         f"(cost_envs/AgenticRouting-v0's), got {space}")
    rng = np.random.default_rng(seed)
    m = space.n
    kept: dict[str, list[tuple[int, Trajectory]]] = {s: [] for s in STRATA}
    for index, (task, boundary) in enumerate(zip(tasks, boundaries, strict=True)):
        if boundary.stratum == "intractable":
            continue
        if boundary_paths is None:
            candidates = [rollout(env, task, lambda _o: np.zeros(m, np.int8)),
                          rollout(env, task, lambda _o: np.ones(m, np.int8))]
        else:
            candidates = list(boundary_paths[index])
        for q in mix_probs:
            def mixed(_observation: np.ndarray, q: float = q) -> np.ndarray:
                return (rng.random(m) < q).astype(np.int8)

            for _ in range(samples):
                candidates.append(rollout(env, task, mixed))
        successes = [t for t in candidates if t.success]
        best = min(successes, key=lambda t: (t.cost, t.length))
        kept[boundary.stratum].append((index, best))
    present = [s for s in STRATA if kept[s]]
    if not present:
        raise ValueError("synthesize_sft_data: no task has a successful trajectory")
    per_stratum = min(len(kept[s]) for s in present)
    chosen: list[tuple[int, Trajectory, str]] = []
    for s in present:
        picks = np.sort(rng.choice(len(kept[s]), per_stratum, replace=False))
        chosen += [(*kept[s][i], s) for i in picks.tolist()]
    chosen.sort(key=lambda item: item[0])
    trajectories = tuple(t for _, t, _ in chosen)
    return SFTData(
        observations=np.concatenate([t.observations for t in trajectories]),
        actions=np.concatenate([t.actions for t in trajectories]).astype(np.int8),
        trajectories=trajectories,
        task_indices=tuple(i for i, _, _ in chosen),
        strata=tuple(s for _, _, s in chosen),
    )


# ------------------------------------------------------------------- the network
def build_model(env: Any, seed: int = 0, learning_rate: float = LEARNING_RATE, n_steps: int = 256,
                **kwargs: Any) -> Any:
    """The MaskablePPO router every learned method uses (``NET_ARCH`` policy and value MLPs)."""
    from sb3_contrib import MaskablePPO

    from agents.learners.training import quiet_logger

    settings: dict[str, Any] = {"batch_size": 256, "n_epochs": 5, "gamma": 1.0,
                                "gae_lambda": 0.95, "clip_range": 0.2, "ent_coef": 0.01,
                                "vf_coef": 0.5}
    settings.update(kwargs)
    model = MaskablePPO("MlpPolicy", env, learning_rate=learning_rate, n_steps=n_steps,
                        seed=seed, device="cpu", verbose=0,
                        policy_kwargs={"net_arch": list(NET_ARCH)}, **settings)
    quiet_logger(model)
    return model


def demonstration_log_likelihood(policy: Any, data: SFTData) -> float:
    """Mean log-probability the (unmasked) policy gives the demonstrated actions."""
    import torch

    with torch.no_grad():
        obs = torch.as_tensor(data.observations)
        actions = torch.as_tensor(data.actions.astype(np.float32))
        _, log_prob, _ = policy.evaluate_actions(obs, actions)
    return float(log_prob.mean())


def sft_warm_start(policy: Any, data: SFTData, epochs: int = 10, learning_rate: float = 1e-3,
                   batch_size: int = 256, seed: int = 0) -> list[float]:
    """Behaviour cloning: cross-entropy of the policy's action head on the demonstrations.

    Trains the policy MLP and the action head (not the value head) with Adam. The loss is
    minus the log-likelihood of the demonstrated actions under the unmasked policy
    (``evaluate_actions`` without ``action_masks``): the demonstrations come from
    unbudgeted rollouts, where nothing is masked.

    Returns:
        The mean loss of each epoch.
    """
    import torch

    params = [p for name, p in policy.named_parameters()
              if name.startswith(("mlp_extractor.policy_net", "action_net"))]
    optimiser = torch.optim.Adam(params, lr=learning_rate)
    obs = torch.as_tensor(data.observations)
    actions = torch.as_tensor(data.actions.astype(np.float32))
    generator = torch.Generator().manual_seed(seed)
    losses = []
    policy.set_training_mode(True)
    for _ in range(epochs):
        order = torch.randperm(len(obs), generator=generator)
        total = 0.0
        for start in range(0, len(obs), batch_size):
            batch = order[start:start + batch_size]
            _, log_prob, _ = policy.evaluate_actions(obs[batch], actions[batch])
            loss = -log_prob.mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * len(batch)
        losses.append(total / len(obs))
    policy.set_training_mode(False)
    return losses


class MaskedRouter:
    """A trained router as an allocator: the policy's most likely *unmasked* action.

    The policy MLP and action head are run in numpy (an SB3 ``predict`` costs about half
    a millisecond per call, far more than the env step); the result equals
    ``MaskablePPO.predict(obs, action_masks=env.action_masks(), deterministic=True)``.

    Args:
        weights: ``(W, b)`` pairs of the policy MLP's linear layers (tanh after each)
            followed by the action head's, as returned by :func:`policy_weights`.
        env: The env it acts in; masks come from its ``action_masks()`` (a
            ``HardBudget`` in the stack), or nothing is masked.
    """

    def __init__(self, weights: Sequence[tuple[np.ndarray, np.ndarray]], env: gym.Env | None
                 ) -> None:
        self.weights = [(np.asarray(w, np.float64), np.asarray(b, np.float64))
                        for w, b in weights]
        self._masks: Callable[[], np.ndarray] | None = None
        if env is not None:
            try:
                self._masks = env.get_wrapper_attr("action_masks")
            except AttributeError:
                self._masks = None

    def logits(self, observation: np.ndarray) -> np.ndarray:
        """``(2m,)`` logits: ``[bit 0 off, bit 0 on, bit 1 off, ...]``."""
        hidden = np.asarray(observation, dtype=np.float64)
        for w, b in self.weights[:-1]:
            hidden = np.tanh(w @ hidden + b)
        w, b = self.weights[-1]
        return w @ hidden + b

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """The most likely unmasked value of every bit (single observations)."""
        logits = self.logits(observation).reshape(-1, 2)
        if self._masks is not None:
            mask = np.asarray(self._masks(), dtype=bool).reshape(-1, 2)
            logits = np.where(mask, logits, -np.inf)
        return np.argmax(logits, axis=1).astype(np.int8), state


def policy_weights(policy: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The policy MLP's and the action head's ``(W, b)`` as numpy arrays."""
    import torch

    layers = [m for m in policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)]
    layers.append(policy.action_net)
    return [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()) for m in layers]
