"""CORL's budget-tier controller on ExpertRouting: one policy for every budget tier.

CORL (arXiv 2511.02755) trains a single controller that sees the query's budget tier
and is rewarded with its task performance gated by that tier's budget. Here:

* :func:`train_shared_ppo` trains PPO (SB3's updates, :class:`~agents.learners.ppo.FastPPO`)
  with the plain :class:`AllocatorPolicy` on
  ``BudgetTier(ExpertRouting-v0)``, a tier drawn per query, gated reward;
* :func:`train_tier_adapters` is the LoRA variant: the shared PPO encoder becomes a frozen
  base, and each tier gets its own LoRA adapter (with its own value head), trained by
  :class:`agents.learners.lora_ppo.LoraGuidedPPO` on that tier only (with its expected-cost term
  off, so both variants optimise the same gated reward), starting from the shared
  policy (LoRA's B = 0, so each adapter starts as exactly the shared policy);
  :class:`TierAdapters` routes each observation to its tier's adapter;
* :func:`tier_table` scores methods per tier on one fixed task set: accuracy, accuracy
  within budget (CORL's gated metric), average cost, the expert-call ratio (share of
  queries that consult at least one expert) and the calls per query of each expert,
  with 95% bootstrap intervals over queries; :class:`FixedConsultation` gives its
  reference rows (the controller alone, each single expert).

Observations are read through names: the env's ``observation_layout`` extended with the
tier slots that :class:`~cost_envs.wrappers.BudgetTier` appends (:func:`tier_layout`).

Every function takes ``env_id``: ``cost_envs/ExpertRouting-v0`` by default, or any env with
its observation layout and tier budgets (``cost_envs/ExpertRouting-v1``).

Training tasks use task seeds ``TRAIN_TASK_SEED + seed`` and evaluation small seeds, as
everywhere in :mod:`agents`. The experiment (scales, the tables per profile, the figure)
is ``experiments/corl/runner.py`` in the repository.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed
from torch import nn

import cost_envs  # noqa: F401  (registers the envs)
from agents.allocator import Allocator
from agents.callbacks import CostMetricsCallback, EvaluateAtSteps
from agents.evaluation import EvaluationResult, evaluate
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.ppo import FastPPO
from agents.learners.training import ppo_settings, quiet_logger
from agents.seeds import TRAIN_TASK_SEED
from cost_envs.config import one_of
from cost_envs.core import OrchestrationEnv
from cost_envs.metrics import bootstrap_mean_ci
from cost_envs.wrappers import TIERS, BudgetTier

EXPERT_ROUTING = "cost_envs/ExpertRouting-v0"
#: Adapter learning rate of the per-tier variant. The paper's LoRA-PPO rate (5e-5) barely
#: moves a saturated policy (benchmarks/results/warm_start.md); a tier adapter has to.
ADAPTER_LEARNING_RATE = 1e-3


def make_tier_env(env_kwargs: Mapping[str, Any] | None = None, tier: str | None = None,
                  reward: str = "gated", env_id: str = EXPERT_ROUTING) -> BudgetTier:
    """``BudgetTier(gym.make(env_id, **env_kwargs))`` (default ExpertRouting-v0)."""
    return BudgetTier(gym.make(env_id, **dict(env_kwargs or {})), tier=tier, reward=reward)


def tier_layout(env: gym.Env) -> dict[str, slice]:
    """Named slots of a ``BudgetTier`` observation: the env's, then ``tier`` and ``budget_left``.

    ``BudgetTier`` appends the tier's one-hot (in ``TIERS`` order) and the remaining budget
    fraction to the env's observation and names them (``added_observation_layout``), so
    the env's own ``observation_layout`` keeps its positions and the two new slots follow.

    Raises:
        ValueError: If ``env`` is not a ``BudgetTier`` directly over the env.
    """
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise ValueError(f"tier_layout: expected a BudgetTier over a cost-envs environment, "
                         f"got {type(env).__name__} over {type(base).__name__}")
    size = int(base.observation_space.shape[0])
    if not isinstance(env, BudgetTier) or env.observation_space.shape != (size + len(TIERS) + 1,):
        raise ValueError(f"tier_layout: expected a BudgetTier observation of "
                         f"{size + len(TIERS) + 1} entries over {type(base).__name__}, got "
                         f"{type(env).__name__} with shape {env.observation_space.shape}")
    return {**base.observation_layout, **env.added_observation_layout}


def train_shared_ppo(timesteps: int, seed: int = 0, env_kwargs: Mapping[str, Any] | None = None,
                     verbose: int = 0, env_id: str = EXPERT_ROUTING,
                     ppo: Mapping[str, Any] | None = None,
                     callbacks: Sequence[BaseCallback] = ()
                     ) -> tuple[AllocatorPolicy, list[dict[str, Any]]]:
    """PPO on every tier at once (a tier drawn per query); returns the policy and history.

    ``ppo`` overrides :data:`PPO_SETTINGS` and SB3's learning rate (a tuning sweep's
    configuration, :mod:`experiments.tune.corl`); ``None`` keeps the experiment's.
    ``callbacks`` run beside the cost metrics' (a learning curve's,
    :class:`TierScoresAtSteps`).
    """
    settings = ppo_settings(ppo, "ppo")
    set_random_seed(seed)
    env = make_tier_env(env_kwargs, env_id=env_id)
    # FastPPO: SB3's PPO updates bit for bit, in fewer Python calls (agents.learners.ppo)
    model = FastPPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, seed=seed,
                device="cpu", **settings)
    quiet_logger(model, verbose)
    venv = model.get_env()
    assert venv is not None  # SB3 wrapped env in one
    venv.seed(TRAIN_TASK_SEED + seed)
    callback = CostMetricsCallback()
    model.learn(timesteps, callback=[callback, *callbacks])
    env.close()
    return cast(AllocatorPolicy, model.policy), callback.history  # the class it was built with


@dataclass
class TierAdapters(Allocator):
    """One LoRA-adapted policy per tier over a shared frozen base; an allocator.

    Each observation goes to the policy of the tier its one-hot names (``layout["tier"]``,
    see :func:`tier_layout`).

    Attributes:
        policies: Tier name -> policy.
        layout: The observation's named slots (:func:`tier_layout` of the tier env).
        history: Tier name -> the training callback's history.
    """

    policies: dict[str, AllocatorPolicy]
    layout: Mapping[str, slice]
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def act_with(self, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        """The action of the observation's tier adapter."""
        tier = TIERS[int(np.argmax(observation[self.layout["tier"]]))]
        action, _ = self.policies[tier].predict(observation, None, None, deterministic)
        return action


def train_tier_adapters(
    shared: AllocatorPolicy,
    timesteps: int,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    learning_rate: float = ADAPTER_LEARNING_RATE,
    verbose: int = 0,
    env_id: str = EXPERT_ROUTING,
    ppo: Mapping[str, Any] | None = None,
    callbacks: Mapping[str, Sequence[BaseCallback]] | None = None,
    tiers: Sequence[str] = TIERS,
) -> TierAdapters:
    """A LoRA adapter per tier on the frozen encoder of ``shared`` (module docstring).

    ``timesteps`` is each tier's; ``ppo`` overrides :data:`PPO_SETTINGS` (not the
    learning rate, which is ``learning_rate``), as in :func:`train_shared_ppo`.
    ``callbacks[tier]`` run beside that tier's cost metrics. ``tiers``: the tiers that get
    an adapter (each trains as it would beside the others; the result acts on those only).
    """
    settings = ppo_settings(ppo, "ppo")
    if "learning_rate" in settings:
        raise ValueError("train_tier_adapters: the adapters' rate is learning_rate, not "
                         "ppo['learning_rate']")
    if shared.lora_rank is not None:
        raise ValueError("train_tier_adapters: expected the plain shared PPO policy "
                         "(lora_rank=None) whose encoder becomes the frozen base")
    encoder = shared.features_extractor.net
    obs_dim = int(cast(nn.Linear, encoder[0]).in_features)  # tanh_mlp's first layer
    policies: dict[str, AllocatorPolicy] = {}
    history: dict[str, list[dict[str, Any]]] = {}
    probe = make_tier_env(env_kwargs, env_id=env_id)
    layout = tier_layout(probe)
    probe.close()
    # The shared encoder, handed over as tensors: it becomes every tier's frozen base.
    state = {k: v.detach().clone().contiguous() for k, v in encoder.state_dict().items()}
    base = (state, {"obs_dim": obs_dim, "hidden_sizes": list(shared.hidden_sizes)})
    for tier in tiers:
        one_of(tier, "tiers", TIERS, where="train_tier_adapters")
    for offset, tier in enumerate(TIERS):
        if tier not in tiers:
            continue
        set_random_seed(seed)
        env = make_tier_env(env_kwargs, tier=tier, env_id=env_id)
        # cost_coef=0: the gated reward is the whole objective, as for the shared PPO
        # (LoRA-PPO's expected-cost term prices calls nominally, the same in every tier).
        model = LoraGuidedPPO(
            AllocatorPolicy, env, learning_rate=learning_rate, cost_coef=0.0, seed=seed,
            device="cpu",
            policy_kwargs={"hidden_sizes": shared.hidden_sizes, "lora_rank": 8,
                           "base": base},
            **settings)
        # Start from the shared policy: its heads, and adapters that add nothing (B=0).
        model.policy.action_net.load_state_dict(shared.action_net.state_dict())
        model.policy.value_net.load_state_dict(shared.value_net.state_dict())
        quiet_logger(model, verbose)
        venv = model.get_env()
        assert venv is not None  # SB3 wrapped env in one
        venv.seed(TRAIN_TASK_SEED + 100 * (offset + 1) + seed)
        callback = CostMetricsCallback()
        model.learn(timesteps, callback=[callback, *(callbacks or {}).get(tier, ())])
        env.close()
        policies[tier] = model.policy
        history[tier] = callback.history
    return TierAdapters(policies, layout, history)


# ------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class TierScores:
    """One method's scores on one tier, each a point with a 95% interval."""

    accuracy: tuple[float, float, float]
    accuracy_within_budget: tuple[float, float, float]
    avg_cost: tuple[float, float, float]
    expert_call_ratio: tuple[float, float, float]
    calls_per_query: dict[str, float]
    budget_exceeded: float
    #: Accuracy within budget of each run (training seed) the scores pool.
    accuracy_within_budget_per_run: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"accuracy": list(self.accuracy),
                "accuracy_within_budget": list(self.accuracy_within_budget),
                "avg_cost": list(self.avg_cost),
                "expert_call_ratio": list(self.expert_call_ratio),
                "calls_per_query": dict(self.calls_per_query),
                "budget_exceeded": self.budget_exceeded,
                "accuracy_within_budget_per_run": list(self.accuracy_within_budget_per_run)}


def tier_records(allocator_for: Callable[[gym.Env], Any], tier: str, episodes: int,
                 seed: int, env_kwargs: Mapping[str, Any] | None = None,
                 env_id: str = EXPERT_ROUTING) -> EvaluationResult:
    """One method's episodes on ``episodes`` queries of ``tier`` (task set of ``seed``).

    ``allocator_for`` is called with the tier's env, ``BudgetTier(..., tier=tier)``, so a
    rule fitted when it is built is fitted on that tier.
    """
    env = make_tier_env(env_kwargs, tier=tier, env_id=env_id)
    try:
        return evaluate(allocator_for(env), env, episodes, seed)
    finally:
        env.close()


def within_budget(run: EvaluationResult, budget: float) -> np.ndarray:
    """Per query, 1.0 if the answer was right and cost at most ``budget`` (CORL's gated score)."""
    return np.array([float(r.success and r.cost <= budget) for r in run.records])


class TierScoresAtSteps(EvaluateAtSteps):
    """:class:`~agents.callbacks.EvaluateAtSteps` scoring CORL's gated metric per tier.

    At each checkpoint the policy answers ``episodes`` queries of each of ``tiers``
    (:func:`tier_records`, task seed ``seed``, ``env_kwargs`` such as the profile), and the
    curve entry's ``scores[tier]`` is its accuracy within that tier's budget per query
    (:func:`within_budget`). With ``keep``, :attr:`policies` maps each checkpoint's step
    count to a copy of the policy there (the start of a later stage).
    """

    def __init__(self, env_id: str, at_steps: Any, tiers: Sequence[str] = TIERS,
                 episodes: int = 400, seed: int = 0,
                 env_kwargs: dict[str, Any] | None = None, keep: bool = False) -> None:
        super().__init__(env_id, at_steps, episodes, seed, env_kwargs)
        self.tiers = tuple(one_of(tier, "tiers", TIERS, where="TierScoresAtSteps")
                           for tier in tiers)
        probe = make_tier_env(env_kwargs, env_id=env_id)
        self.budgets = {tier: float(probe.budgets[tier]) for tier in self.tiers}
        probe.close()
        self.keep = keep
        self.policies: dict[int, AllocatorPolicy] = {}

    def scores(self) -> dict[str, Any]:
        """Accuracy within budget per query on each tier (class docstring)."""
        # the AllocatorPolicy of train_shared_ppo's or train_tier_adapters' model
        policy = cast(AllocatorPolicy, self.model.policy)
        if self.keep:
            self.policies[int(self.num_timesteps)] = copy.deepcopy(policy)
        return {"scores": {tier: within_budget(
            tier_records(lambda env: policy, tier, self.episodes, self.seed, self.env_kwargs,
                         self.env_id), budget).tolist()
            for tier, budget in self.budgets.items()}}


def tier_scores(runs: Sequence[EvaluationResult], budget: float, n_resamples: int = 1000,
                seed: int = 0) -> TierScores:
    """Scores of one method on one tier from its runs on the same queries.

    One run (a fixed rule, or one training seed): intervals over queries. Several runs
    (training seeds): the value pools them and the interval is the two-level bootstrap over
    runs and queries of :func:`~cost_envs.metrics.bootstrap_mean_ci`.
    """
    if not runs:
        raise ValueError("tier_scores: expected at least one run, got none")
    names = runs[0].agent_names
    success = np.array([[r.success for r in run.records] for run in runs], dtype=float)
    cost = np.array([[r.cost for r in run.records] for run in runs])
    within = np.stack([within_budget(run, budget) for run in runs])
    consulted = np.array([[r.calls.sum() > 0 for r in run.records] for run in runs],
                         dtype=float)
    calls = np.stack([r.calls for run in runs for r in run.records]).mean(axis=0)
    # One run keeps the one-level bootstrap (and its numbers) of a single evaluation.
    shape = (lambda a: a[0]) if len(runs) == 1 else (lambda a: a)
    return TierScores(
        accuracy=bootstrap_mean_ci(shape(success), n_resamples=n_resamples, seed=seed),
        accuracy_within_budget=bootstrap_mean_ci(shape(within), n_resamples=n_resamples,
                                                 seed=seed + 1),
        avg_cost=bootstrap_mean_ci(shape(cost), n_resamples=n_resamples, seed=seed + 2),
        expert_call_ratio=bootstrap_mean_ci(shape(consulted), n_resamples=n_resamples,
                                            seed=seed + 3),
        calls_per_query={n: float(c) for n, c in zip(names, calls, strict=True)},
        budget_exceeded=float(np.mean(cost > budget)),
        accuracy_within_budget_per_run=tuple(float(v) for v in within.mean(axis=1)),
    )


def score_tier(allocator_for: Callable[[gym.Env], Any], tier: str, episodes: int, seed: int,
               env_kwargs: Mapping[str, Any] | None = None, n_resamples: int = 1000,
               env_id: str = EXPERT_ROUTING) -> TierScores:
    """Run one method on ``episodes`` queries of ``tier`` and score it (one run)."""
    probe = make_tier_env(env_kwargs, tier=tier, env_id=env_id)
    budget = probe.budgets[tier]
    probe.close()
    result = tier_records(allocator_for, tier, episodes, seed, env_kwargs, env_id)
    return tier_scores([result], budget, n_resamples, seed)


def tier_table(methods: Mapping[str, Callable[[gym.Env], Any]], episodes: int, seed: int = 0,
               env_kwargs: Mapping[str, Any] | None = None, n_resamples: int = 1000,
               env_id: str = EXPERT_ROUTING) -> dict[str, dict[str, TierScores]]:
    """``{tier: {method: scores}}`` on the same queries for every method and tier."""
    return {tier: {name: score_tier(factory, tier, episodes, seed, env_kwargs, n_resamples,
                                    env_id)
                   for name, factory in methods.items()} for tier in TIERS}
