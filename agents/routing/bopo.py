"""BoPO: boundary-guided training of a budget-aware small/large router (AgenticRouting-v0).

BoPO (Budget-Aware Agentic Routing via Boundary-Guided Training) routes every step of a
long-horizon agent task to a small or a large model. Its ingredients, as implemented here:

1. **Boundary rollouts.** The two boundary policies, :class:`~agents.baselines.AlwaysSmall`
   and :class:`~agents.baselines.AlwaysLarge`, are rolled out on every training task,
   replayed through ``reset(options={"task": t})`` (the task fixes all of its luck, so a
   replay is the same episode). Each task gets a :class:`Boundary`: ``C_small``,
   ``C_large`` and both success flags. No budget applies to the boundary rollouts: they
   measure the task.
2. **Difficulty taxonomy.** ``easy``: the small model alone succeeds; ``hard``: only the
   large model does; ``intractable``: neither (:func:`stratum`). The share of each
   stratum per profile is :func:`strata_distribution`; the share of tasks where
   always-small costs more than always-large (cost inversions) is
   :func:`inversion_share`.
3. **Boundary-normalised cost.** ``(C - C_small) / (C_large - C_small)`` per task
   (:func:`normalised_cost`): 0 for always-small, 1 for always-large. On an inverted
   task (``C_small > C_large``) the denominator is negative and this formula would call
   a trajectory cheaper than always-large "more expensive than the large boundary", so
   the reward uses the cost's position between the *cheaper* and the *dearer*
   boundary, ``clip((C - C_lo) / (C_hi - C_lo), 0, 1)`` (:meth:`Boundary.position`),
   which equals the formula on every task without inversion.
4. **Stratified SFT data.** For each training task, ``samples`` mixed trajectories are
   drawn per large-model probability ``q`` in ``mix_probs`` (each step large with
   probability ``q``, the sampler's own generator); with the two boundary trajectories
   (step 1's own) they are the candidates, and the cheapest *successful* candidate is
   kept (on a hard task always-large is always a candidate, so one exists; intractable
   tasks are skipped). The kept trajectories are then balanced across strata: every
   non-empty stratum contributes the same number of tasks (the smallest stratum's count,
   the rest subsampled) (:func:`synthesize_sft_data`).
5. **SFT warm start.** Behaviour cloning of the policy's action head and its policy MLP:
   a few epochs of cross-entropy (minus the log-likelihood of the demonstrated actions
   under the *unmasked* policy) (:func:`sft_warm_start`). No action masks are applied:
   the demonstrations are rolled out without a budget (step 4), so no mask was in force
   in their states.
6. **BoPO policy optimisation.** sb3-contrib's ``MaskablePPO``, warm-started from the SFT
   weights, on a boundary-relative episode reward paid at the last step (0 before):
   ``r = S - lam * position(C)``, and a **reference-guided advantage**: the reward of the
   better boundary policy on that task, ``r_ref = max(r(AlwaysSmall), r(AlwaysLarge))``,
   is subtracted (:func:`guided_reward`, :class:`BoPOReward`). With ``gamma = 1`` the
   return of every state is ``r - r_ref``, so GAE's advantages are measured against what
   the reference achieves on the same task; on a task the reference solves, a cheap
   failure gets ``-lam * pos - (1 - lam * pos_ref) <= lam - 1 < 0``, strictly worse than
   any success, which is what stops the policy from collapsing to cheap failures (with
   ``0 <= lam < 1``). On intractable tasks only cost matters (``r_ref`` is the cheaper
   failure). The reference enters as this per-task shift of the return; SB3 then
   computes GAE advantages against its critic as usual, and the critic sees the task
   only through the observation, so the shift is not an exact per-task baseline.
7. **Strict budgets at inference.** Every method (baselines included) is evaluated under
   ``HardBudget(on_exceed="mask")`` with one per-task budget per profile (the 90th
   percentile of always-large's cost on the training tasks): a large step that does not
   fit is masked down to a small step, and a step nothing fits truncates the episode.
   The learned routers are also trained under it and act through the budget's
   ``action_masks()`` (MaskablePPO), so they never choose a masked action.

Training details, shared by BoPO and PPO: ``MaskablePPO("MlpPolicy")`` with separate
64-64 tanh policy and value MLPs, Adam at ``LEARNING_RATE`` (1e-3), 8 training envs
(each replaying the training tasks in its own shuffled order) x 256 steps per rollout,
minibatch 256, 5 epochs, ``gamma = 1``, GAE 0.95, clip 0.2, entropy 0.01, one training
seed. An episode the budget cuts short is final for the learner (reported as terminated
by the reward wrappers, so no value is bootstrapped past it). Each run is also scored at
the scale's checkpoints (its learning curve; step 0 of BoPO is the SFT policy).

The baselines are :data:`agents.baselines.ROUTING_BASELINES` (AlwaysSmall, AlwaysLarge,
RandomMix at several ``p``, Cascade at several patiences), the privileged hindsight oracle,
and **vanilla PPO**: the same network, MaskablePPO and step budget on the Eq.-style reward
``S - lam * cost / scale`` (paid per step; ``scale`` = always-large's mean cost on the
training tasks), without SFT or reference. The SFT policy alone is reported too (the
warm start's own contribution).

:func:`experiments.bopo.report` (also importable as :func:`report` from here) runs the
comparison on the three profiles (:func:`run_all`) and writes ``bopo.md``, ``bopo.json``
and ``pareto_bopo_<profile>.png``. Every method is scored on the same evaluation tasks
(drawn with task seed ``EVAL_TASK_SEED``; training tasks use ``BOPO_TRAIN_TASK_SEED``), with
95% percentile-bootstrap intervals over those tasks. Frontier points vary ``lam`` for
BoPO and PPO, ``p`` for RandomMix and the patience for Cascade.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

import cost_envs  # noqa: F401  (registers the envs)
from agents.baselines import (
    AlwaysLarge,
    AlwaysSmall,
    Cascade,
    CostOptOracle,
    RandomMix,
)
from agents.evaluation import evaluate
from agents.seeds import BOPO_TRAIN_TASK_SEED, EVAL_TASK_SEED
from cost_envs.envs.agentic_routing import PROFILE_NAMES, AgenticTask
from cost_envs.metrics import EpisodeRecord, summarize
from cost_envs.pool import is_number
from cost_envs.wrappers import HardBudget

ENV_ID = "cost_envs/AgenticRouting-v0"
#: The difficulty taxonomy.
STRATA = ("easy", "hard", "intractable")
#: Quantile of always-large's training-task cost used as the per-task inference budget.
BUDGET_QUANTILE = 0.9
#: Network of every learned router (BoPO, SFT only, PPO): policy and value MLPs.
NET_ARCH = (64, 64)
#: Adam learning rate of both RL methods (BoPO from the SFT weights, PPO from scratch).
LEARNING_RATE = 1e-3


# ---------------------------------------------------------------------- environments
def make_env(profile: str, budget: float | None = None, **env_kwargs: Any) -> gym.Env:
    """``gym.make(AgenticRouting-v0, profile=profile)``, under ``HardBudget(mask)`` if given."""
    env = gym.make(ENV_ID, profile=profile, **env_kwargs)
    return env if budget is None else HardBudget(env, budget=budget, on_exceed="mask")


def draw_tasks(profile: str, n: int, seed: int, **env_kwargs: Any) -> list[AgenticTask]:
    """``n`` tasks of ``profile`` drawn with task seed ``seed`` (reproducible)."""
    env = gym.make(ENV_ID, profile=profile, **env_kwargs)
    env.reset(seed=seed)
    tasks = env.unwrapped.sample_tasks(n)
    env.close()
    return tasks


class TaskReplay(gym.Wrapper[Any, Any, Any, Any]):
    """Every ``reset`` replays the next task of a fixed list (in order, or shuffled).

    Put it on top of ``HardBudget`` (which passes ``options`` through). A ``seed`` given
    to ``reset`` still reaches the env; the task is always the list's.

    Args:
        env: The environment (possibly wrapped by a budget).
        tasks: The tasks to replay, at least one.
        shuffle: Visit the tasks in a fresh random order each pass (own generator).
        seed: Seed of the shuffling generator.
    """

    def __init__(self, env: gym.Env, tasks: Sequence[AgenticTask], shuffle: bool = False,
                 seed: int = 0) -> None:
        super().__init__(env)
        if not tasks:
            raise ValueError("TaskReplay: expected at least one task, got none")
        self.tasks = list(tasks)
        self._shuffle = shuffle
        self._rng = np.random.default_rng(seed)
        self._order: list[int] = []
        self.task_index = -1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        """Reset on the next task of the list."""
        if not self._order:
            order = np.arange(len(self.tasks))
            if self._shuffle:
                self._rng.shuffle(order)
            self._order = order[::-1].tolist()
        self.task_index = self._order.pop()
        options = {**(options or {}), "task": self.tasks[self.task_index]}
        return self.env.reset(seed=seed, options=options)


# ------------------------------------------------------------------- boundaries
@dataclass(frozen=True)
class Trajectory:
    """One episode: what the policy saw and did, and how it ended."""

    observations: np.ndarray
    actions: np.ndarray
    success: bool
    cost: float

    @property
    def length(self) -> int:
        """Number of steps."""
        return len(self.actions)


def rollout(env: gym.Env, task: AgenticTask, act: Callable[[np.ndarray], Any]) -> Trajectory:
    """Replay ``task`` on ``env`` with ``act(observation) -> action`` until it ends.

    The cost is the env's ledger, ``info["episode_cost"]`` of the last step (the sum of
    ``info["cost"]``, also when a budget cuts the episode short).
    """
    obs, _ = env.reset(options={"task": task})
    observations, actions = [], []
    done = False
    info: dict[str, Any] = {}
    while not done:
        action = np.asarray(act(obs), dtype=np.int8).reshape(-1)
        observations.append(obs)
        actions.append(action)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return Trajectory(np.asarray(observations, dtype=np.float32), np.asarray(actions),
                      bool(info.get("success", False)), float(info["episode_cost"]))


def stratum(small_success: bool, large_success: bool) -> str:
    """The taxonomy: ``easy`` (small succeeds), ``hard`` (only large), ``intractable``."""
    if small_success:
        return "easy"
    return "hard" if large_success else "intractable"


def normalised_cost(cost: float, c_small: float, c_large: float) -> float:
    """Boundary-normalised cost ``(C - C_small) / (C_large - C_small)``.

    0 for the cost of always-small, 1 for always-large's.

    Raises:
        ValueError: If the two boundaries cost the same (the ratio is undefined).
    """
    span = c_large - c_small
    if span == 0:
        raise ValueError("normalised_cost: the boundaries cost the same; the ratio is "
                         "undefined")
    return (cost - c_small) / span


@dataclass(frozen=True)
class Boundary:
    """Both boundary policies on one task.

    Attributes:
        small_success: Whether always-small succeeds.
        small_cost: ``C_small``, the money always-small spends.
        small_steps: Its episode length.
        large_success: Whether always-large succeeds.
        large_cost: ``C_large``.
        large_steps: Its episode length.
    """

    small_success: bool
    small_cost: float
    small_steps: int
    large_success: bool
    large_cost: float
    large_steps: int

    @property
    def stratum(self) -> str:
        """``easy``, ``hard`` or ``intractable``."""
        return stratum(self.small_success, self.large_success)

    @property
    def inverted(self) -> bool:
        """A cost inversion: always-small costs more than always-large."""
        return self.small_cost > self.large_cost

    def normalised(self, cost: float) -> float:
        """:func:`normalised_cost` of ``cost`` on this task."""
        return normalised_cost(cost, self.small_cost, self.large_cost)

    def position(self, cost: float) -> float:
        """``clip((C - C_lo) / (C_hi - C_lo), 0, 1)``: 0 at the cheaper boundary, 1 at the dearer.

        Equal to :meth:`normalised` (clipped) unless the task is inverted.
        """
        low, high = sorted((self.small_cost, self.large_cost))
        if high <= low:
            return 0.0 if cost <= low else 1.0
        return min(1.0, max(0.0, (cost - low) / (high - low)))

    @classmethod
    def from_trajectories(cls, small: Trajectory, large: Trajectory) -> Boundary:
        """The boundary of a task from always-small's and always-large's trajectories."""
        return cls(small.success, small.cost, small.length,
                   large.success, large.cost, large.length)


def boundary_trajectories(env: gym.Env, tasks: Sequence[AgenticTask]
                          ) -> list[tuple[Trajectory, Trajectory]]:
    """AlwaysSmall's and AlwaysLarge's trajectory on each task (no budget: this measures it)."""
    small, large = AlwaysSmall(env), AlwaysLarge(env)
    return [(rollout(env, task, small.act), rollout(env, task, large.act)) for task in tasks]


def boundary_rollouts(env: gym.Env, tasks: Sequence[AgenticTask]) -> list[Boundary]:
    """Roll out AlwaysSmall and AlwaysLarge on each task (no budget: this measures the task)."""
    return [Boundary.from_trajectories(lo, hi) for lo, hi in boundary_trajectories(env, tasks)]


def strata_distribution(boundaries: Sequence[Boundary]) -> dict[str, float]:
    """Share of tasks in each stratum."""
    if not boundaries:
        raise ValueError("strata_distribution: expected at least one boundary")
    return {s: sum(b.stratum == s for b in boundaries) / len(boundaries) for s in STRATA}


def inversion_share(boundaries: Sequence[Boundary]) -> float:
    """Share of tasks where always-small costs more than always-large."""
    if not boundaries:
        raise ValueError("inversion_share: expected at least one boundary")
    return sum(b.inverted for b in boundaries) / len(boundaries)


# --------------------------------------------------------------------- rewards
def _check_lam(lam: float) -> float:
    if not is_number(lam) or not 0.0 <= lam < 1.0:
        raise ValueError(f"lam: expected a number in [0, 1) (a success must outweigh its "
                         f"cost), got {lam!r}")
    return float(lam)


def bopo_reward(success: bool, cost: float, boundary: Boundary, lam: float) -> float:
    """Boundary-relative episode reward ``S - lam * position(C)``."""
    return float(success) - _check_lam(lam) * boundary.position(cost)


def reference_reward(boundary: Boundary, lam: float) -> float:
    """The better boundary policy's :func:`bopo_reward` on the task."""
    return max(bopo_reward(boundary.small_success, boundary.small_cost, boundary, lam),
               bopo_reward(boundary.large_success, boundary.large_cost, boundary, lam))


def guided_reward(success: bool, cost: float, boundary: Boundary, lam: float) -> float:
    """Reference-guided reward: :func:`bopo_reward` minus :func:`reference_reward`."""
    return bopo_reward(success, cost, boundary, lam) - reference_reward(boundary, lam)


class _BudgetCutIsFinal(gym.Wrapper[Any, Any, Any, Any]):
    """Base of the reward wrappers: an episode the budget cut short is final for the learner.

    The step is reported as terminated, so PPO does not bootstrap a value past it as it
    would after a time limit (the env and ``HardBudget`` themselves keep reporting it as
    truncated).
    """

    def _step(self, action: Any) -> tuple[Any, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = self.env.step(action)
        if truncated and info.get("budget_exceeded", False):
            terminated, truncated = True, False
        return obs, terminated, truncated, info


class BoPOReward(_BudgetCutIsFinal):
    """BoPO's reward: 0 until the last step, then :func:`guided_reward` of the episode.

    Args:
        env: A :class:`TaskReplay` stack (its ``task_index`` names the boundary).
        boundaries: One :class:`Boundary` per task of the replay list.
        lam: Cost weight in ``[0, 1)``.
    """

    def __init__(self, env: gym.Env, boundaries: Sequence[Boundary], lam: float) -> None:
        super().__init__(env)
        self.boundaries = list(boundaries)
        self.lam = _check_lam(lam)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step; the reward is paid when the episode ends (terminated or truncated).

        The episode's cost is the env's ledger, ``info["episode_cost"]`` of the last step.
        """
        obs, terminated, truncated, info = self._step(action)
        reward = 0.0
        if terminated or truncated:
            boundary = self.boundaries[self.env.get_wrapper_attr("task_index")]
            reward = guided_reward(bool(info.get("success", False)), info["episode_cost"],
                                   boundary, self.lam)
        return obs, reward, terminated, truncated, info


class CostPenaltyReward(_BudgetCutIsFinal):
    """Vanilla PPO's reward: ``-lam * cost_t / scale`` per step plus 1 on success.

    Args:
        env: The environment.
        lam: Cost weight (>= 0).
        scale: Money that ``lam = 1`` trades against one success (> 0).
    """

    def __init__(self, env: gym.Env, lam: float, scale: float) -> None:
        super().__init__(env)
        if not lam >= 0 or not scale > 0:
            raise ValueError(f"CostPenaltyReward: expected lam >= 0 and scale > 0, got "
                             f"{lam!r}, {scale!r}")
        self.lam, self.scale = float(lam), float(scale)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step with the cost-penalised reward."""
        obs, terminated, truncated, info = self._step(action)
        reward = -self.lam * info["cost"] / self.scale
        if terminated or truncated:
            reward += float(info.get("success", False))
        return obs, reward, terminated, truncated, info


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

    See the module docstring (step 4).

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
    rng = np.random.default_rng(seed)
    m = env.action_space.n
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
            for _ in range(samples):
                candidates.append(rollout(
                    env, task, lambda _o, q=q: (rng.random(m) < q).astype(np.int8)))
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

    from agents.lora.training import quiet_logger

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


# ------------------------------------------------------------------- the scale
@dataclass(frozen=True)
class BopoScale:
    """How much work :func:`report` does.

    Args:
        name: ``smoke`` or ``default``.
        n_train: Training tasks per profile.
        n_eval: Evaluation tasks per profile.
        timesteps: RL environment steps per learned router.
        bopo_lams: BoPO's cost weights (one frontier point each).
        ppo_lams: Vanilla PPO's cost weights.
        mix_probs: Large-model probabilities of the SFT samples.
        samples: SFT samples per probability and task.
        sft_epochs: Behaviour-cloning epochs.
        n_envs: Parallel envs per RL run (one batched policy call per step).
        resamples: Bootstrap resamples.
        jobs: Worker processes.
        random_ps: RandomMix's probabilities of the large model.
        patiences: Cascade's patiences.
        checkpoints: RL steps at which the learning curves score the policy (the final
            evaluation at ``timesteps`` is always one).
    """

    name: str
    n_train: int
    n_eval: int
    timesteps: int
    bopo_lams: tuple[float, ...]
    ppo_lams: tuple[float, ...]
    mix_probs: tuple[float, ...] = (0.1, 0.25, 0.5)
    samples: int = 4
    sft_epochs: int = 10
    n_envs: int = 8
    resamples: int = 1000
    jobs: int = 2
    random_ps: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)
    patiences: tuple[int, ...] = (1, 2, 3)
    checkpoints: tuple[int, ...] = (0, 2048, 8192)


SCALES = {
    # Plumbing for the tests: every row, every file, in seconds. Not a result.
    "smoke": BopoScale("smoke", n_train=24, n_eval=16, timesteps=256, bopo_lams=(0.5,),
                       ppo_lams=(0.5,), samples=1, sft_epochs=2, n_envs=2, resamples=50,
                       jobs=1, random_ps=(0.5,), patiences=(1,), checkpoints=(0,)),
    # What the benchmark runs: all three profiles in under 4 minutes on 2 cores.
    "default": BopoScale("default", n_train=400, n_eval=400, timesteps=32_768,
                         bopo_lams=(0.1, 0.4, 0.7, 0.95), ppo_lams=(0.25, 0.5, 1.0, 2.0)),
}


def _scale(scale: str | BopoScale) -> BopoScale:
    if isinstance(scale, BopoScale):
        return scale
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    return SCALES[scale]


# ------------------------------------------------------------------- profile work
@dataclass
class Prepared:
    """What one profile's preparation leaves for the learning jobs and the report."""

    profile: str
    budget: float
    cost_scale: float
    train_boundaries: list[Boundary]
    eval_boundaries: list[Boundary]
    sft_counts: dict[str, int]
    sft_steps: int
    sft_losses: list[float]
    sft_log_likelihood: tuple[float, float]
    sft_state: dict[str, Any]
    records: dict[str, tuple[EpisodeRecord, ...]] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class LearnJob:
    """One RL run: ``method`` (``bopo`` or ``ppo``) with cost weight ``lam``."""

    profile: str
    method: str
    lam: float
    scale: BopoScale
    budget: float
    cost_scale: float
    train_boundaries: tuple[Boundary, ...]
    sft_state: dict[str, Any] | None
    seed: int = 0


def _evaluate(allocator_for: Callable[[gym.Env], Any], profile: str, tasks: Sequence[Any],
              budget: float) -> tuple[EpisodeRecord, ...]:
    """Every evaluation task once, in order, under the budget."""
    env = TaskReplay(make_env(profile, budget), tasks)
    allocator = allocator_for(env)
    result = evaluate(allocator, env, episodes=len(tasks), seed=EVAL_TASK_SEED)
    env.close()
    return result.records


def _vec_env(profile: str, tasks: Sequence[Any], budget: float, n_envs: int, seed: int,
             reward: Callable[[gym.Env], gym.Env]) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv

    def factory(i: int) -> Callable[[], gym.Env]:
        return lambda: reward(TaskReplay(make_env(profile, budget), tasks, shuffle=True,
                                         seed=seed * 1000 + i))

    return DummyVecEnv([factory(i) for i in range(n_envs)])


def prepare_profile(profile: str, scale: str | BopoScale = "default", seed: int = 0
                    ) -> Prepared:
    """Boundaries, taxonomy, budget, SFT warm start and the fixed baselines of one profile."""
    from stable_baselines3.common.utils import set_random_seed

    from agents.lora.training import configure_torch_threads

    configure_torch_threads()

    start = time.perf_counter()
    sc = _scale(scale)
    train_tasks = draw_tasks(profile, sc.n_train, BOPO_TRAIN_TASK_SEED + seed)
    eval_tasks = draw_tasks(profile, sc.n_eval, EVAL_TASK_SEED)
    env = make_env(profile)
    train_paths = boundary_trajectories(env, train_tasks)
    train_b = [Boundary.from_trajectories(lo, hi) for lo, hi in train_paths]
    eval_b = boundary_rollouts(env, eval_tasks)
    large_costs = np.array([b.large_cost for b in train_b])
    budget = float(np.quantile(large_costs, BUDGET_QUANTILE))
    cost_scale = float(large_costs.mean())
    data = synthesize_sft_data(env, train_tasks, train_b, sc.mix_probs, sc.samples, seed=seed,
                               boundary_paths=train_paths)
    set_random_seed(seed)
    vec = _vec_env(profile, train_tasks, budget, 1, seed, lambda e: e)
    model = build_model(vec, seed=seed)
    before = demonstration_log_likelihood(model.policy, data)
    losses = sft_warm_start(model.policy, data, epochs=sc.sft_epochs, seed=seed)
    after = demonstration_log_likelihood(model.policy, data)
    weights = policy_weights(model.policy)
    prepared = Prepared(profile, budget, cost_scale, train_b, eval_b, data.counts(),
                        len(data.actions), losses, (before, after),
                        {k: v.clone() for k, v in model.policy.state_dict().items()})
    methods: dict[str, Callable[[gym.Env], Any]] = {
        "always-small": AlwaysSmall, "always-large": AlwaysLarge, "oracle": CostOptOracle,
        "sft": lambda e: MaskedRouter(weights, e),
    }
    for p in sc.random_ps:
        methods[f"random-mix/{p:g}"] = lambda e, p=p: RandomMix(e, p=p, seed=seed)
    for k in sc.patiences:
        methods[f"cascade/{k}"] = lambda e, k=k: Cascade(e, patience=k)
    for name, factory in methods.items():
        prepared.records[name] = _evaluate(factory, profile, eval_tasks, budget)
    env.close()
    vec.close()
    prepared.seconds = time.perf_counter() - start
    return prepared


@dataclass(frozen=True)
class LearnResult:
    """A trained router's evaluation episodes and its learning curve.

    Attributes:
        job: What was trained.
        records: Evaluation episodes of the final policy.
        curve: ``timesteps``, ``success_rate``, ``avg_cost`` and ``cps`` of the policy on
            the evaluation tasks at each of the scale's checkpoints (0 = before RL).
        seconds: Wall time of the job.
    """

    job: LearnJob
    records: tuple[EpisodeRecord, ...]
    curve: tuple[dict[str, float], ...]
    seconds: float

    @property
    def key(self) -> str:
        """``<method>/<lam>``, the method's key in reports."""
        return f"{self.job.method}/{self.job.lam:g}"


def run_learning_job(job: LearnJob) -> LearnResult:
    """Train one router (BoPO from the SFT weights, or vanilla PPO) and evaluate it.

    The policy is also scored at each checkpoint of ``scale.checkpoints`` (its learning
    curve); the final evaluation is the one at ``scale.timesteps``.
    """
    from stable_baselines3.common.utils import set_random_seed

    from agents.lora.training import configure_torch_threads

    configure_torch_threads()

    start = time.perf_counter()
    sc = job.scale
    train_tasks = draw_tasks(job.profile, sc.n_train, BOPO_TRAIN_TASK_SEED + job.seed)
    eval_tasks = draw_tasks(job.profile, sc.n_eval, EVAL_TASK_SEED)
    set_random_seed(job.seed)
    if job.method == "bopo":
        boundaries = list(job.train_boundaries)
        reward: Callable[[gym.Env], gym.Env] = lambda e: BoPOReward(e, boundaries, job.lam)  # noqa: E731
    elif job.method == "ppo":
        reward = lambda e: CostPenaltyReward(e, job.lam, job.cost_scale)  # noqa: E731
    else:
        raise ValueError(f"method: expected 'bopo' or 'ppo', got {job.method!r}")
    n_steps = max(16, min(256, sc.timesteps // sc.n_envs))
    vec = _vec_env(job.profile, train_tasks, job.budget, sc.n_envs, job.seed, reward)
    model = build_model(vec, seed=job.seed, learning_rate=LEARNING_RATE, n_steps=n_steps,
                        batch_size=min(256, n_steps * sc.n_envs))
    if job.sft_state is not None:
        model.policy.load_state_dict(job.sft_state)
    curve = []
    records: tuple[EpisodeRecord, ...] = ()
    for checkpoint in sorted({*(c for c in sc.checkpoints if c < sc.timesteps), sc.timesteps}):
        if checkpoint > model.num_timesteps:
            model.learn(checkpoint - model.num_timesteps, reset_num_timesteps=False)
        weights = policy_weights(model.policy)
        records = _evaluate(lambda e, w=weights: MaskedRouter(w, e), job.profile, eval_tasks,
                            job.budget)
        point = summarize(records)
        curve.append({"timesteps": model.num_timesteps,
                      **{k: point[k] for k in ("success_rate", "avg_cost", "cps")}})
    vec.close()
    return LearnResult(job, records, tuple(curve), time.perf_counter() - start)


# ----------------------------------------------------------------------- the runs
def _learn_jobs(prepared: Prepared, sc: BopoScale, seed: int) -> list[LearnJob]:
    common = {"profile": prepared.profile, "scale": sc, "budget": prepared.budget,
              "cost_scale": prepared.cost_scale,
              "train_boundaries": tuple(prepared.train_boundaries), "seed": seed}
    return ([LearnJob(method="bopo", lam=lam, sft_state=prepared.sft_state, **common)
             for lam in sc.bopo_lams]
            + [LearnJob(method="ppo", lam=lam, sft_state=None, **common)
               for lam in sc.ppo_lams])


def run_all(scale: str | BopoScale = "default", profiles: Sequence[str] = PROFILE_NAMES,
            seed: int = 0, log: Callable[[str], None] = lambda _m: None
            ) -> tuple[dict[str, Prepared], dict[str, dict[str, LearnResult]]]:
    """Prepare every profile and train every router; returns what each produced."""
    sc = _scale(scale)
    prepared: dict[str, Prepared] = {}
    learned: dict[str, dict[str, LearnResult]] = {p: {} for p in profiles}

    def take(result: LearnResult) -> None:
        learned[result.job.profile][result.key] = result
        log(f"{result.job.profile}: {result.job.method} lam={result.job.lam:g} trained and "
            f"scored in {result.seconds:.0f}s")

    if sc.jobs <= 1:
        for profile in profiles:
            prepared[profile] = prepare_profile(profile, sc, seed)
            for job in _learn_jobs(prepared[profile], sc, seed):
                take(run_learning_job(job))
        return prepared, learned
    from agents.lora.training import spawn_pool

    with spawn_pool(sc.jobs) as pool:
        pending: dict[Future[Any], str] = {
            pool.submit(prepare_profile, p, sc, seed): "prep" for p in profiles}
        while pending:
            done = next(as_completed(pending))
            kind = pending.pop(done)
            if kind == "prep":
                prep = done.result()
                prepared[prep.profile] = prep
                log(f"{prep.profile}: boundaries, SFT and baselines in {prep.seconds:.0f}s")
                for job in _learn_jobs(prep, sc, seed):
                    pending[pool.submit(run_learning_job, job)] = "learn"
            else:
                take(done.result())
    return prepared, learned


def report(out_dir: Path, scale: str = "default", seed: int = 0,
           log: Callable[[str], None] = lambda _m: None) -> str:
    """Run BoPO against its baselines and write the results: :func:`experiments.bopo.report`."""
    from experiments.bopo import report as run

    return run(out_dir, scale, seed, log)
