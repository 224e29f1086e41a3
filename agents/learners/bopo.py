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
   the rest subsampled) (:func:`~agents.learners.bopo_sft.synthesize_sft_data`).
5. **SFT warm start.** Behaviour cloning of the policy's action head and its policy MLP:
   a few epochs of cross-entropy (minus the log-likelihood of the demonstrated actions
   under the *unmasked* policy) (:func:`~agents.learners.bopo_sft.sft_warm_start`). No
   action masks are applied: the demonstrations are rolled out without a budget (step
   4), so no mask was in force in their states.
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
   Beside this cost term, as in the paper, :class:`BoPOReward` offers a variant that is
   not the paper's, ``cost_term="linear"`` (unclipped, any ``lam >= 0``; see
   :data:`COST_TERMS` for why).
7. **Strict budgets at inference.** Every method (baselines included) is evaluated under
   ``HardBudget(on_exceed="mask")`` with one per-task budget per profile (the 90th
   percentile of always-large's cost on the training tasks): a large step that does not
   fit is masked down to a small step, and a step nothing fits truncates the episode.
   The learned routers are also trained under it and act through the budget's
   ``action_masks()`` (MaskablePPO), so they never choose a masked action.

Training details, shared by BoPO and PPO: ``MaskablePPO("MlpPolicy")`` with separate
64-64 tanh policy and value MLPs, Adam at ``LEARNING_RATE`` (1e-3), 8 training envs
(each replaying the training tasks in its own shuffled order) x 256 steps per rollout,
minibatch 256, 5 epochs, ``gamma = 1``, GAE 0.95, clip 0.2, entropy 0.01 (the experiment
trains 5 seeds, each on its own training-task draw and SFT warm start). An episode the
budget cuts short is final for the learner (reported as terminated by the reward
wrappers, so no value is bootstrapped past it). Each run is also scored at the scale's
checkpoints (its learning curve; step 0 of BoPO is the SFT policy).

The baselines are :data:`agents.baselines.ROUTING_BASELINES` (AlwaysSmall, AlwaysLarge,
RandomMix at several ``p``, Cascade at several patiences), the privileged hindsight oracle,
and **vanilla PPO**: the same network, MaskablePPO and step budget on the Eq.-style reward
``S - lam * cost / scale`` (paid per step; ``scale`` = always-large's mean cost on the
training tasks), without SFT or reference. The SFT policy alone is reported too (the
warm start's own contribution).

This module holds the method's task-level pieces (environments, boundaries, taxonomy,
normalised cost, rewards); :mod:`agents.learners.bopo_sft` holds steps 4-5 and the router
network. The experiment (scales, training runs, the comparison on the three profiles and
its report ``bopo.md``) is ``experiments/bopo/runner.py`` in the repository, not part of the
installed package. There, every method is scored on the same evaluation tasks (drawn
with task seed ``EVAL_TASK_SEED``; training tasks use ``BOPO_TRAIN_TASK_SEED``), with 95%
percentile-bootstrap intervals over those tasks (over seeds and tasks for the learned
routers); frontier points vary ``lam`` for PPO, ``p`` for RandomMix and the patience for
Cascade, and a λ scan trains BoPO at several ``lam`` with both cost terms
(:data:`COST_TERMS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np

import cost_envs  # noqa: F401  (registers the envs)
from agents.allocator import Allocator
from agents.baselines import AlwaysLarge, AlwaysSmall
from agents.evaluation import rollout as rollout_episode
from cost_envs.config import number
from cost_envs.envs.agentic_routing import AgenticRoutingEnv, AgenticTask
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
#: How the per-task budget binds: requested calls past it are dropped (``HardBudget``).
ON_EXCEED = "mask"


def make_env(profile: str, budget: float | None = None, **env_kwargs: Any) -> gym.Env:
    """``gym.make(AgenticRouting-v0, profile=profile)``, under ``HardBudget(mask)`` if given."""
    env = gym.make(ENV_ID, profile=profile, **env_kwargs)
    return env if budget is None else HardBudget(env, budget=budget, on_exceed=ON_EXCEED)


def env_kwargs(profile: str, budget: float) -> dict[str, Any]:
    """:func:`make_env`'s env as ``gym.make`` arguments, for a trainer that makes its own envs.

    ``budget`` and ``on_exceed`` build the same ``HardBudget`` (:mod:`cost_envs.registration`).
    """
    return {"profile": profile, "budget": budget, "on_exceed": ON_EXCEED}


def draw_tasks(profile: str, n: int, seed: int, **env_kwargs: Any) -> list[AgenticTask]:
    """``n`` tasks of ``profile`` drawn with task seed ``seed`` (reproducible)."""
    env = gym.make(ENV_ID, profile=profile, **env_kwargs)
    env.reset(seed=seed)
    base = env.unwrapped
    assert isinstance(base, AgenticRoutingEnv)  # ENV_ID's class
    tasks = base.sample_tasks(n)
    env.close()
    return tasks


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


class _Acting(Allocator):
    """A plain ``observation -> action`` callable as an allocator."""

    def __init__(self, act: Callable[[np.ndarray], Any]) -> None:
        self._act = act

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Whatever the callable returns for this observation."""
        return self._act(observation)


def rollout(env: gym.Env, task: AgenticTask, act: Callable[[np.ndarray], Any]) -> Trajectory:
    """Replay ``task`` on ``env`` with ``act(observation) -> action`` until it ends.

    The episode is played by the project's one rollout loop
    (:func:`agents.evaluation.rollout`); the cost is the env's ledger, also when a budget
    cuts the episode short.
    """
    played = rollout_episode(_Acting(act), env, options={"task": task}, record_steps=True)
    # record_steps=True: both arrays are there
    return Trajectory(cast(np.ndarray, played.observations), cast(np.ndarray, played.actions),
                      played.record.success, played.record.cost)


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

    def offset(self, cost: float) -> float:
        """``(C - C_lo) / (C_hi - C_lo)``, unclipped: below 0 under the cheaper boundary.

        When both boundaries cost the same the ratio is undefined: 0 at or below their
        cost, 1 above it (a step, as in :meth:`position`).
        """
        low, high = sorted((self.small_cost, self.large_cost))
        if high <= low:
            return 0.0 if cost <= low else 1.0
        return (cost - low) / (high - low)

    def position(self, cost: float) -> float:
        """``clip((C - C_lo) / (C_hi - C_lo), 0, 1)``: 0 at the cheaper boundary, 1 at the dearer.

        Equal to :meth:`normalised` (clipped) unless the task is inverted.
        """
        return min(1.0, max(0.0, self.offset(cost)))

    @classmethod
    def from_trajectories(cls, small: Trajectory, large: Trajectory) -> Boundary:
        """The boundary of a task from always-small's and always-large's trajectories."""
        return cls(small.success, small.cost, small.length,
                   large.success, large.cost, large.length)


def boundary_trajectories(env: gym.Env, tasks: Sequence[AgenticTask]
                          ) -> list[tuple[Trajectory, Trajectory]]:
    """AlwaysSmall's and AlwaysLarge's trajectory on each task (no budget: this measures it)."""
    small, large = AlwaysSmall(env), AlwaysLarge(env)
    # AlwaysLarge.act is CallAll.act, bound to a class outside CallAll's: both only read
    # self.n_agents, which every Baseline has.
    large_act = large.act  # type: ignore[misc]  # see above
    return [(rollout(env, task, small.act), rollout(env, task, large_act)) for task in tasks]


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
#: BoPO's cost terms. ``clipped``, as in the paper: ``lam * position(C)``, the cost's
#: position between the boundaries clipped to [0, 1], with ``0 <= lam < 1``. ``linear``,
#: a variant that is not the paper's: ``lam * offset(C)``, unclipped (a trajectory cheaper
#: than the cheaper boundary earns a bonus, one dearer than the dearer boundary pays
#: more), with any ``lam >= 0`` (from 1 up, a success can be worth less than its cost).
#: Why a variant: under ``clipped`` every success outranks every failure and, among
#: equal outcomes, the cheaper ranks higher, for every lam in (0, 1); lam only weighs a
#: risk of failure against a share of the boundaries' cost gap, and not at all below
#: the cheaper boundary.
COST_TERMS = ("clipped", "linear")


def _check_cost_term(cost_term: str) -> str:
    if cost_term not in COST_TERMS:
        raise ValueError(f"cost_term: expected one of {list(COST_TERMS)}, got {cost_term!r}")
    return cost_term


def _check_lam(lam: float, cost_term: str = "clipped") -> float:
    if _check_cost_term(cost_term) == "linear":
        return number(lam, "lam", minimum=0)
    # lam < 1: a success must outweigh its cost
    return number(lam, "lam", minimum=0, maximum=1, inclusive=(True, False))


def bopo_reward(success: bool, cost: float, boundary: Boundary, lam: float,
                cost_term: str = "clipped") -> float:
    """Boundary-relative episode reward ``S - lam * position(C)`` (``offset`` if linear)."""
    lam = _check_lam(lam, cost_term)
    term = boundary.position(cost) if cost_term == "clipped" else boundary.offset(cost)
    return float(success) - lam * term


def reference_reward(boundary: Boundary, lam: float, cost_term: str = "clipped") -> float:
    """The better boundary policy's :func:`bopo_reward` on the task."""
    return max(bopo_reward(boundary.small_success, boundary.small_cost, boundary, lam,
                           cost_term),
               bopo_reward(boundary.large_success, boundary.large_cost, boundary, lam,
                           cost_term))


def guided_reward(success: bool, cost: float, boundary: Boundary, lam: float,
                  cost_term: str = "clipped") -> float:
    """Reference-guided reward: :func:`bopo_reward` minus :func:`reference_reward`."""
    return (bopo_reward(success, cost, boundary, lam, cost_term)
            - reference_reward(boundary, lam, cost_term))


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
        env: A :class:`~cost_envs.wrappers.TaskReplay` stack (its ``task_index`` names
            the boundary).
        boundaries: One :class:`Boundary` per task of the replay list.
        lam: Cost weight: in ``[0, 1)`` for the paper's ``clipped`` cost term, ``>= 0``
            for ``linear``.
        cost_term: One of :data:`COST_TERMS`; ``clipped`` is the paper's.
    """

    def __init__(self, env: gym.Env, boundaries: Sequence[Boundary], lam: float,
                 cost_term: str = "clipped") -> None:
        super().__init__(env)
        self.boundaries = list(boundaries)
        self.cost_term = _check_cost_term(cost_term)
        self.lam = _check_lam(lam, cost_term)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step; the reward is paid when the episode ends (terminated or truncated).

        The episode's cost is the env's ledger, ``info["episode_cost"]`` of the last step.
        """
        obs, terminated, truncated, info = self._step(action)
        reward = 0.0
        if terminated or truncated:
            boundary = self.boundaries[self.env.get_wrapper_attr("task_index")]
            reward = guided_reward(bool(info.get("success", False)), info["episode_cost"],
                                   boundary, self.lam, self.cost_term)
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
        self.lam = number(lam, "lam", minimum=0, where="CostPenaltyReward")
        self.scale = number(scale, "scale", minimum=0, inclusive=False, where="CostPenaltyReward")

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step with the cost-penalised reward."""
        obs, terminated, truncated, info = self._step(action)
        reward = -self.lam * info["cost"] / self.scale
        if terminated or truncated:
            reward += float(info.get("success", False))
        return obs, reward, terminated, truncated, info
