"""CORL's sweeps (:mod:`experiments.tune`): its shared PPO, and its per-tier adapters.

CORL's experiment (:mod:`experiments.corl.runner`) has two learned rows, so two methods:

* ``corl-ppo``: the shared PPO controller (:func:`agents.learners.corl.train_shared_ppo`,
  a tier drawn per query, the gated reward), all of the budget's steps, in PPO's space
  (:data:`experiments.tune.space.PPO_SPACE`: the same settings, the same reasons).
* ``corl-adapters``: both stages of the per-tier variant. The budget's steps split as
  :func:`split_steps` says: the shared stage gets ``T - 3 * t`` steps at the experiment's
  PPO settings, then each tier's LoRA adapter gets ``t`` steps, where ``3 * t`` is the
  configuration's ``adapter_share`` of ``T`` rounded to whole 512-step rollouts (at
  least one each). The experiment itself spends 40,960 steps on the shared stage and 3 x
  10,240 on the adapters (60k and 3 x 15k when the sweep ran): a share of 0.43 either
  way, trial 0's. The space is the adapter stage's (its rate, its entropy bonus) and the
  split; the shared stage is the ``corl-ppo`` sweep's question, and tuning both in one
  space would thin a dozen trials over twice the dimensions.

Every trial takes exactly the budget's steps, as a PPO trial does. **The score** is
CORL's own metric (:func:`score_tiers`): accuracy within the tier's budget
(:func:`agents.learners.corl.within_budget`), averaged over the three tiers, each on
``episodes`` validation queries of the default (mixed) profile drawn from the task stream
of ``VALIDATION_TASK_SEED``. CORL's training uses task seeds ``TRAIN_TASK_SEED + seed``
(the adapters ``TRAIN_TASK_SEED + 100 * (tier + 1) + seed``) and its evaluation seed 0
(:data:`experiments.corl.settings.EVAL_SEED`), so validation meets neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np

from agents.learners.corl import (
    ADAPTER_LEARNING_RATE,
    EXPERT_ROUTING,
    tier_records,
    train_shared_ppo,
    train_tier_adapters,
    within_budget,
)
from agents.learners.training import PPO_SETTINGS
from agents.seeds import TRAIN_TASK_SEED, VALIDATION_TASK_SEED
from cost_envs.metrics import summarize
from cost_envs.wrappers import TIERS
from experiments.corl.settings import CORL_SCALES, EVAL_SEED
from experiments.tune.space import PPO_PAPER, PPO_SPACE, Method, Param

if TYPE_CHECKING:
    from cost_envs.envs.expert_routing import ExpertRoutingEnv

#: What :func:`score_tiers` scores (the results file's ``score``).
TIER_SCORE = ("CORL's metric: accuracy within the tier's budget, averaged over the three "
              "tiers, on the validation queries of each tier (higher is better)")
#: The rollout both CORL stages use (the experiment's PPO settings): the unit of the split.
ROLLOUT = int(PPO_SETTINGS["n_steps"])
_DEFAULT = CORL_SCALES["default"]
#: The experiment's share of its steps spent on the adapters (3 x 10,240 of 71,680), rounded.
EXPERIMENT_SHARE = round(3 * _DEFAULT.adapter_timesteps
                         / (_DEFAULT.ppo_timesteps + 3 * _DEFAULT.adapter_timesteps), 2)


def corl_task_seeds(seeds: int) -> dict[str, Any]:
    """CORL's task seeds: the shared stage's and each tier adapter's, validation, evaluation."""
    training = [TRAIN_TASK_SEED + seed for seed in range(seeds)]
    adapters = [TRAIN_TASK_SEED + 100 * (offset + 1) + seed
                for offset in range(len(TIERS)) for seed in range(seeds)]
    return {"training": training, "training_adapters": adapters,
            "validation": VALIDATION_TASK_SEED, "evaluation": EVAL_SEED}


def score_tiers(allocator: Any, env_id: str, episodes: int) -> tuple[float, dict[str, Any]]:
    """Mean accuracy within budget over the tiers, on ``episodes`` validation queries each.

    Returns the score and the point metrics of all the tiers' episodes together
    (``success_rate``, ``cps``, ...), with each tier's accuracy within budget.
    """
    probe = gym.make(env_id)
    budgets = dict(cast("ExpertRoutingEnv", probe.unwrapped).tier_budgets)
    probe.close()
    runs = {tier: tier_records(lambda env: allocator, tier, episodes, VALIDATION_TASK_SEED,
                               None, env_id) for tier in TIERS}
    within = {tier: float(within_budget(run, budgets[tier]).mean())
              for tier, run in runs.items()}
    metrics = summarize([record for run in runs.values() for record in run.records])
    return float(np.mean(list(within.values()))), {**metrics, "within_budget": within}


def _steps(history: list[dict[str, Any]]) -> int:
    """The steps a training run took: the step count at its last rollout's end."""
    return int(history[-1]["timesteps"]) if history else 0


def fit_corl_ppo(env_id: str, config: Mapping[str, Any], timesteps: int,
                 seed: int) -> tuple[Any, int]:
    """CORL's shared PPO on every tier, ``config`` overriding the experiment's settings."""
    policy, history = train_shared_ppo(timesteps, seed, env_id=env_id, ppo=dict(config))
    return policy, _steps(history)


def split_steps(timesteps: int, adapter_share: float) -> tuple[int, int]:
    """``(shared stage's steps, each tier adapter's)``, together exactly ``timesteps``.

    Each adapter gets ``adapter_share * timesteps / 3`` rounded to whole rollouts (at
    least one); the shared stage the rest.

    Raises:
        ValueError: If ``timesteps`` is not a multiple of the rollout or leaves the
            shared stage less than one rollout.
    """
    tiers = len(TIERS)
    if timesteps % ROLLOUT or timesteps < (tiers + 1) * ROLLOUT:
        raise ValueError(f"corl-adapters: timesteps must be a multiple of {ROLLOUT} of at "
                         f"least {(tiers + 1) * ROLLOUT}, got {timesteps}")
    per_tier = max(1, round(adapter_share * timesteps / tiers / ROLLOUT)) * ROLLOUT
    per_tier = min(per_tier, (timesteps - ROLLOUT) // tiers // ROLLOUT * ROLLOUT)
    return timesteps - tiers * per_tier, per_tier


def fit_corl_adapters(env_id: str, config: Mapping[str, Any], timesteps: int,
                      seed: int) -> tuple[Any, int]:
    """The shared stage, then a LoRA adapter per tier, ``timesteps`` in all (module docstring)."""
    shared_steps, tier_steps = split_steps(timesteps, float(config["adapter_share"]))
    shared, history = train_shared_ppo(shared_steps, seed, env_id=env_id)
    adapters = train_tier_adapters(shared, tier_steps, seed, env_id=env_id,
                                   learning_rate=float(config["learning_rate"]),
                                   ppo={"ent_coef": float(config["ent_coef"])})
    return adapters, _steps(history) + sum(_steps(h) for h in adapters.history.values())


#: The adapter stage's space, and how the steps split between the stages.
ADAPTER_SPACE = (
    Param("learning_rate", "log", 1e-4, 1e-2,
          why="a decade either side of the experiment's 1e-3 (ADAPTER_LEARNING_RATE, "
              "chosen because LoRA-PPO's 5e-5 barely moves a saturated policy), "
              "log-uniform: the rate is a scale"),
    Param("ent_coef", "log", 1e-4, 5e-2,
          why="around the experiment's 0.01 (PPO's A.4 value): a tier adapter starts from "
              "the shared policy, and the bonus decides how far from it it explores"),
    Param("adapter_share", "choice", choices=(0.25, EXPERIMENT_SHARE, 0.6, 0.75),
          why=f"the share of the budget's steps spent on the three adapters, the shared "
              f"stage getting the rest: the experiment's {EXPERIMENT_SHARE} (3 x 15k of "
              f"105k when the sweep ran, 3 x 10,240 of 71,680 now), a quarter, and more: "
              f"a short budget may do better with a longer shared stage, or with more "
              f"steps where each tier's gate differs"),
)

#: How ``corl-adapters`` splits the budget's steps ``T`` (the results file's ``setting``).
STEPS = (f"the shared stage T - 3t at the experiment's PPO settings, then t per tier "
         f"adapter; 3t is adapter_share of T in whole {ROLLOUT}-step rollouts, at least one "
         f"each (experiments.tune.corl.split_steps)")


def corl_methods() -> dict[str, Method]:
    """CORL's two methods: ``corl-ppo`` and ``corl-adapters`` (module docstring)."""
    common: dict[str, Any] = {"score": score_tiers, "score_label": TIER_SCORE,
                              "seeds": corl_task_seeds}
    where = {"training": "BudgetTier over the env, a tier drawn per query, the gated reward",
             "validation": "each tier's queries of the env's default (mixed) profile"}
    return {
        "corl-ppo": Method("CORL shared PPO", PPO_SPACE, dict(PPO_PAPER), fit_corl_ppo,
                           setting=where, **common),
        "corl-adapters": Method(
            "CORL per-tier adapters", ADAPTER_SPACE,
            {"learning_rate": ADAPTER_LEARNING_RATE, "ent_coef": PPO_SETTINGS["ent_coef"],
             "adapter_share": EXPERIMENT_SHARE}, fit_corl_adapters,
            setting={**where, "steps": STEPS, "shared_stage": dict(PPO_PAPER)}, **common),
    }


#: The env CORL's sweeps run on (its experiment runs v0 and v1; v0 is the paper's).
CORL_ENV = EXPERT_ROUTING
