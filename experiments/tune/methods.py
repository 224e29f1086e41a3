"""The tunable methods of :mod:`experiments.tune`: search spaces, the papers' points, fits.

Each :class:`~experiments.tune.space.Method` is a documented search space
(:class:`~experiments.tune.space.Param`, each with why), the paper's configuration (always
a sweep's first trial), a ``fit(env_id, config, timesteps, seed)`` that trains one
allocator and a ``score`` on validation tasks. This module holds the LoRA paper's three
(PPO, LoRA-guided PPO, LoRA supervised, on ToolBench-v0) and the registry: :data:`METHODS`
adds CORL's (:mod:`experiments.tune.corl`) and BoPO's (:mod:`experiments.tune.bopo`).
:data:`TRAIN_ARGUMENTS` turns a chosen configuration into
:func:`agents.learners.training.train`'s arguments, which is how ``python -m experiments
lora_ppo``'s tuned rows train. :data:`SWEEPS` lists the sweeps ``python -m experiments
tune`` runs.

**Adding a method**: a :class:`~experiments.tune.space.Method` in :data:`METHODS` with its
space, the paper's point, a module-level ``fit`` (Ray ships it to the workers by
reference) and, if its experiment scores otherwise than by the Eq. 1 return, its
``score``, ``score_label`` and task ``seeds``; its argument builder in
:data:`TRAIN_ARGUMENTS` if an experiment trains its tuned configuration; then a (method,
env) pair in :data:`SWEEPS`. Its module stays apart when it is more than a space and a fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from agents.learners.bopo import ENV_ID as BOPO_ENV
from agents.learners.supervised import SupervisedConfig
from agents.learners.training import PPO_SETTINGS, train
from experiments.tune.bopo import BOPO_METHODS
from experiments.tune.corl import CORL_ENV, corl_methods
from experiments.tune.space import PPO_PAPER, PPO_SPACE, Method, Param


def ppo_arguments(config: Mapping[str, Any],
                  supervised: SupervisedConfig | None = None) -> dict[str, Any]:
    """A configuration of :data:`PPO_SPACE` as :func:`agents.learners.training.train`'s arguments.

    ``supervised`` is unused (PPO has no supervised stage); it keeps the signature of
    every method's argument builder (:data:`TRAIN_ARGUMENTS`).
    """
    return {"ppo": dict(config)}


def fit_ppo(env_id: str, config: Mapping[str, Any], timesteps: int,
            seed: int) -> tuple[Any, int]:
    """PPO from scratch (:func:`agents.learners.training.train`) with ``config`` applied."""
    trained = train(env_id, "ppo", timesteps, seed=seed, **ppo_arguments(config))
    return trained, trained.timesteps


def lora_ppo_arguments(config: Mapping[str, Any],
                       supervised: SupervisedConfig | None = None) -> dict[str, Any]:
    """A configuration of :data:`LORA_PPO_SPACE` as ``train``'s arguments.

    ``train`` is :func:`agents.learners.training.train`.

    ``supervised`` is the supervised stage the configuration's epochs are set in (default
    :class:`SupervisedConfig`: the paper's); the rest goes to ``ppo``.
    """
    stage = replace(supervised or SupervisedConfig(), epochs=int(config["supervised_epochs"]))
    overrides = {key: config[key] for key in ("learning_rate", "cost_coef", "ent_coef")}
    if config["action_head"] == "trained":
        overrides["action_lr_scale"] = 1.0
    return {"supervised": stage, "ppo": overrides}


def fit_lora_ppo(env_id: str, config: Mapping[str, Any], timesteps: int,
                 seed: int) -> tuple[Any, int]:
    """LoRA-guided PPO from its supervised warm start, ``config`` applied."""
    trained = train(env_id, "lora-ppo", timesteps, seed=seed, **lora_ppo_arguments(config))
    return trained, trained.timesteps


#: LoRA-guided PPO's space: what decides whether RL can move the policy off its warm
#: start. Rollout and batch sizes stay at the paper's A.4 (PPO's sweep shows how much
#: they matter for a policy from scratch; here the question is the warm start).
LORA_PPO_SPACE = (
    Param("learning_rate", "log", 1e-5, 3e-3,
          why="the adapter's rate, from a factor 5 below the paper's 5e-5 to a decade "
              "above PPO's 3e-4: at 5e-5 the adapter barely moves in 20k steps"),
    Param("supervised_epochs", "choice", choices=(1, 2, 5, 20),
          why="the warm start's passes over the teacher's traces: the paper's 20 "
              "saturate the action head on the teacher (p near 0 or 1), where PPO's "
              "clipped ratio gives almost no gradient; fewer leave it room to move"),
    Param("action_head", "choice", choices=("frozen", "trained"),
          why="the paper freezes the supervised action head, so the policy moves only "
              "through the rank-8 adapter; training the head (at the adapter's rate) "
              "tests whether that restriction is what holds it at the teacher"),
    Param("cost_coef", "uniform", 0.0, 0.2,
          why="the expected-cost penalty around the paper's 0.05, from none to 4x"),
    Param("ent_coef", "log", 1e-4, 5e-2,
          why="as in PPO's space: around the paper's 0.01"),
)

def lora_arguments(config: Mapping[str, Any],
                   supervised: SupervisedConfig | None = None) -> dict[str, Any]:
    """A configuration of :data:`LORA_SPACE` as :func:`~agents.learners.training.train`'s."""
    return {"supervised": replace(supervised or SupervisedConfig(), **config)}


def fit_lora(env_id: str, config: Mapping[str, Any], timesteps: int,
             seed: int) -> tuple[Any, int]:
    """The supervised LoRA allocator with ``config``; it takes no RL steps (returns 0)."""
    trained = train(env_id, "lora", timesteps, seed=seed, **lora_arguments(config))
    return trained, trained.timesteps


#: LoRA supervised's space: the supervised stage's settings. It takes no RL steps, so its
#: budget is the trials alone; its traces (``SupervisedConfig.episodes`` teacher episodes,
#: the same in every trial) are what LoRA-guided PPO starts from too.
LORA_SPACE = (
    Param("learning_rate", "log", 3e-4, 3e-2,
          why="a decade either side of the default 3e-3 (Adam on the adapter and heads)"),
    Param("epochs", "choice", choices=(2, 5, 20, 50),
          why="from a warm start that barely fits the labels to one that saturates them"),
    Param("threshold", "uniform", 0.3, 0.95,
          why="the greedy teacher's coverage threshold (default 0.7): it decides how many "
              "agents the labels call, so it sets the imitated policy's success and cost"),
    Param("lambda_c", "log", 1e-3, 1e-1,
          why="the expected-cost weight a decade either side of the default 1e-2"),
)

METHODS: dict[str, Method] = {
    "ppo": Method("PPO", PPO_SPACE, dict(PPO_PAPER), fit_ppo),
    "lora-ppo": Method("LoRA-Guided PPO", LORA_PPO_SPACE,
                       {"learning_rate": 5e-5, "supervised_epochs": SupervisedConfig().epochs,
                        "action_head": "frozen", "cost_coef": 0.05,
                        "ent_coef": PPO_SETTINGS["ent_coef"]},
                       fit_lora_ppo),
    "lora": Method("LoRA supervised", LORA_SPACE,
                   {key: getattr(SupervisedConfig(), key)
                    for key in ("learning_rate", "epochs", "threshold", "lambda_c")},
                   fit_lora),
    **corl_methods(),
    **BOPO_METHODS,
}
#: Method -> how one of its configurations becomes ``train``'s arguments.
TRAIN_ARGUMENTS: dict[str, Callable[..., dict[str, Any]]] = {
    "ppo": ppo_arguments, "lora-ppo": lora_ppo_arguments, "lora": lora_arguments}
#: The sweeps ``python -m experiments tune`` runs: (method, env id).
SWEEPS: tuple[tuple[str, str], ...] = (("ppo", "cost_envs/ToolBench-v0"),
                                       ("lora-ppo", "cost_envs/ToolBench-v0"),
                                       ("lora", "cost_envs/ToolBench-v0"),
                                       ("corl-ppo", CORL_ENV), ("corl-adapters", CORL_ENV),
                                       ("bopo", BOPO_ENV), ("bopo-ppo", BOPO_ENV))
