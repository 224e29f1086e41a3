"""BoPO's sweeps (:mod:`experiments.tune`): its RL stage, and vanilla PPO, on one profile.

Both run on :data:`PROFILE` of AgenticRouting-v0 (AppWorld: the profile of the
experiment's λ scan, where the cost weight was measured inert), as
:mod:`experiments.bopo.runner` trains them, under the experiment's per-task budget
(``HardBudget(mask)`` at the 0.9 quantile of always-large's cost on the base training
draw, :func:`experiments.bopo.jobs.profile_budget`):

* ``bopo``: BoPO's RL stage from the seed's SFT warm start
  (:func:`experiments.bopo.jobs.warm_start`). The SFT data come from boundary rollouts
  on the training tasks and take no RL steps; they are the same in every trial (as
  LoRA-guided PPO's supervised traces are), so they are not counted in the budget. The
  space has the cost term (the paper's ``clipped`` or the ``linear`` variant,
  :data:`agents.learners.bopo.COST_TERMS`), its weight, the learning rate and the
  entropy bonus. The two cost terms take weights of different ranges (``clipped`` in
  [0, 1), ``linear`` any >= 0), so each has its own parameter, ``lam`` and
  ``linear_lam``; a trial reads the one of its cost term (Optuna's flat space samples
  both; the other is inert).
* ``bopo-ppo``: vanilla PPO from scratch on ``S - lam * cost / scale``, the same network
  and step budget.

Every trial takes the budget's RL steps exactly: 8 training envs x 256-step rollouts
(the experiment's) divide 2,048 and 20,480. **The score** is what BoPO's ``gap_closed``
scores: the mean Eq. 1 return (the env's own reward weights), here on ``episodes``
validation tasks of the profile, drawn with task seed ``VALIDATION_TASK_SEED``
(:func:`agents.learners.bopo.draw_tasks`) and played under the budget. Training draws use
``BOPO_TRAIN_TASK_SEED + seed`` and evaluation ``EVAL_TASK_SEED``, so validation meets
neither.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from agents.learners.bopo import (
    ENV_ID,
    LEARNING_RATE,
    Boundary,
    draw_tasks,
)
from agents.learners.bopo_sft import MaskedRouter, policy_weights
from agents.seeds import BOPO_TRAIN_TASK_SEED, EVAL_TASK_SEED, VALIDATION_TASK_SEED
from cost_envs.metrics import summarize
from experiments.bopo.jobs import (
    SCALES,
    BopoScale,
    LearnJob,
    cost_scale,
    evaluate_on,
    learner,
    profile_budget,
    training_draw,
    warm_start,
)
from experiments.tune.space import Method, Param

#: The profile BoPO's sweeps run on.
PROFILE = "appworld"
#: What :func:`score_router` scores (the results file's ``score``).
ROUTER_SCORE = (f"mean Eq. 1 episode return on validation tasks of the {PROFILE} profile "
                f"under the experiment's per-task budget (HardBudget mask), as BoPO's "
                f"gap_closed scores (higher is better)")
#: The experiment's RL settings that the spaces search (bopo_sft.build_model's defaults).
ENT_COEF = 0.01


@dataclass(frozen=True)
class Router:
    """A trained router's weights and where it plays: a profile under a budget."""

    weights: Any
    profile: str
    budget: float


def scale(timesteps: int) -> BopoScale:
    """The experiment's default scale with ``timesteps`` RL steps (one seed)."""
    return dataclasses.replace(SCALES["default"], timesteps=timesteps, seeds=1, scan_seeds=1)


@cache
def budget(profile: str = PROFILE) -> float:
    """The experiment's per-task budget of ``profile`` (base training draw, seed 0).

    It depends on the training draw only (``n_train`` tasks), not on the RL steps.
    """
    return profile_budget(profile, SCALES["default"], 0)


def bopo_task_seeds(seeds: int) -> dict[str, Any]:
    """BoPO's task seeds: each training run's draw, validation, evaluation."""
    return {"training": [BOPO_TRAIN_TASK_SEED + seed for seed in range(seeds)],
            "validation": VALIDATION_TASK_SEED, "evaluation": EVAL_TASK_SEED}


def score_router(router: Router, env_id: str, episodes: int) -> tuple[float, dict[str, Any]]:
    """Mean Eq. 1 return on ``episodes`` validation tasks of the router's profile, budgeted.

    Raises:
        ValueError: If ``env_id`` is not AgenticRouting-v0 (the only env BoPO runs on).
    """
    _check_env(env_id)
    tasks = draw_tasks(router.profile, episodes, VALIDATION_TASK_SEED)
    result = evaluate_on(lambda env: MaskedRouter(router.weights, env), router.profile,
                         tasks, router.budget)
    return float(np.mean(result.returns)), summarize(result.records)


def _check_env(env_id: str) -> None:
    if env_id != ENV_ID:
        raise ValueError(f"BoPO's sweeps: expected env {ENV_ID}, got {env_id!r}")


def _train(job: LearnJob) -> tuple[Router, int]:
    """Train ``job``'s router for its scale's steps; the router and the steps taken."""
    model = learner(job)
    model.learn(job.scale.timesteps)
    model.get_env().close()
    return Router(policy_weights(model.policy), job.profile, job.budget), model.num_timesteps


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"learning_rate": float(config["learning_rate"]),
            "ent_coef": float(config["ent_coef"])}


def fit_bopo(env_id: str, config: Mapping[str, Any], timesteps: int,
             seed: int) -> tuple[Router, int]:
    """BoPO's RL stage from seed ``seed``'s SFT warm start, ``config`` applied."""
    _check_env(env_id)
    sc, limit = scale(timesteps), budget()
    warm = warm_start(PROFILE, sc, seed, limit, scored=False)
    linear = config["cost_term"] == "linear"
    job = LearnJob(PROFILE, "bopo-linear" if linear else "bopo",
                   float(config["linear_lam" if linear else "lam"]), sc, limit,
                   warm.cost_scale, tuple(warm.train_boundaries), warm.sft_state,
                   seed=seed, curve=False, ppo=_settings(config))
    return _train(job)


def fit_bopo_ppo(env_id: str, config: Mapping[str, Any], timesteps: int,
                 seed: int) -> tuple[Router, int]:
    """Vanilla PPO from scratch on ``S - lam * cost / scale``, ``config`` applied."""
    _check_env(env_id)
    sc, limit = scale(timesteps), budget()
    _, paths = training_draw(PROFILE, sc, seed)
    boundaries = tuple(Boundary.from_trajectories(lo, hi) for lo, hi in paths)
    job = LearnJob(PROFILE, "ppo", float(config["lam"]), sc, limit, cost_scale(boundaries),
                   boundaries, None, seed=seed, curve=False, ppo=_settings(config))
    return _train(job)


_RATE = Param("learning_rate", "log", 1e-4, 1e-2,
              why="a decade either side of the experiment's 1e-3 (Adam, both RL methods), "
                  "log-uniform: the rate is a scale")
_ENTROPY = Param("ent_coef", "log", 1e-4, 5e-2,
                 why="around the experiment's 0.01: with two actions per step the bonus "
                     "decides how long the router keeps trying the other model")
#: BoPO's RL stage.
BOPO_SPACE = (
    Param("cost_term", "choice", choices=("clipped", "linear"),
          why="the paper's clipped term ranks every success above every failure for any "
              "lam < 1, which is why lam was inert in the experiment's scan; the linear "
              "variant (not the paper's) lets a large weight trade a success for cost"),
    Param("lam", "uniform", 0.05, 0.95,
          why="the clipped term's weight over the paper's range [0, 1) (the experiment "
              "uses 0.5 and scans 0.1 to 0.95); read only when cost_term is clipped"),
    Param("linear_lam", "log", 0.5, 64.0,
          why="the linear term's weight, log-uniform over the experiment's scan (1 to 64) "
              "and half a unit below it; read only when cost_term is linear (trial 0 "
              "does not read it)"),
    _RATE,
    _ENTROPY,
)
#: Vanilla PPO's.
BOPO_PPO_SPACE = (
    Param("lam", "log", 0.05, 4.0,
          why="the cost weight of S - lam * cost / scale (scale: always-large's mean cost "
              "on the training tasks), log-uniform around the experiment's table points "
              "0.25 and 1.0: from cost nearly free to a success worth 1/4 of always-large"),
    _RATE,
    _ENTROPY,
)
_COMMON: dict[str, Any] = {"score": score_router, "score_label": ROUTER_SCORE,
                           "seeds": bopo_task_seeds}
_SETTING = {"profile": PROFILE,
            "budget": "HardBudget(mask) at the 0.9 quantile of always-large's cost on the "
                      "base training draw (experiments.bopo.jobs.profile_budget, seed 0)",
            "training_tasks_per_run": SCALES["default"].n_train,
            "rollout": f"{SCALES['default'].n_envs} envs x 256 steps"}

BOPO_METHODS = {
    "bopo": Method("BoPO (RL stage)", BOPO_SPACE,
                   {"cost_term": "clipped", "lam": SCALES["default"].bopo_lams[0],
                    "linear_lam": 8.0, "learning_rate": LEARNING_RATE, "ent_coef": ENT_COEF},
                   fit_bopo,
                   setting={**_SETTING, "warm_start": "the seed's SFT warm start, "
                                                      "the experiment's, not counted"},
                   **_COMMON),
    # Trial 0: the experiment's table trains PPO at lam 0.25 and 1.0; the paper's point is
    # 1.0, at which a success is worth always-large's mean cost (the reward's own unit).
    "bopo-ppo": Method("BoPO's vanilla PPO", BOPO_PPO_SPACE,
                       {"lam": 1.0, "learning_rate": LEARNING_RATE, "ent_coef": ENT_COEF},
                       fit_bopo_ppo, setting=dict(_SETTING), **_COMMON),
}
