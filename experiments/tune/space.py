"""What a tunable method is (:mod:`experiments.tune`): a space, a paper point, a fit, a score.

:class:`Param` is one searched hyperparameter with the reason for its range;
:class:`Method` bundles a method's space, the configuration its paper (or the project's
experiment) uses, how one configuration trains (``fit``) and how a trained allocator is
scored on validation tasks (``score``, by default :func:`validate`: the mean Eq. 1 return
on the env's validation task stream). The methods themselves live in
:mod:`experiments.tune.methods` (the LoRA paper's), :mod:`experiments.tune.corl` and
:mod:`experiments.tune.bopo`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agents.evaluation import rollout
from agents.learners.training import PPO_SETTINGS
from agents.seeds import EVAL_TASK_SEED, TRAIN_TASK_SEED, VALIDATION_TASK_SEED
from cost_envs.metrics import summarize

KINDS = ("log", "uniform", "int", "choice")


@dataclass(frozen=True)
class Param:
    """One searched hyperparameter: its range and why that range.

    Attributes:
        name: The keyword the method's ``fit`` reads.
        kind: ``log`` (log-uniform float), ``uniform`` (float), ``int`` or ``choice``.
        low, high: Bounds of ``log``, ``uniform`` and ``int`` (inclusive).
        choices: The values of ``choice``.
        why: Why this range (written into the results file).
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    why: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Param {self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "choice":
            if not self.choices or self.low is not None or self.high is not None:
                raise ValueError(f"Param {self.name}: a choice has choices and no bounds")
        elif (self.choices or self.low is None or self.high is None
              or not self.low < self.high or (self.kind == "log" and self.low <= 0)):
            raise ValueError(f"Param {self.name}: expected bounds low < high (> 0 for log)")

    def distribution(self) -> Any:
        """The Optuna distribution (imports optuna: call only inside a sweep)."""
        from optuna import distributions

        if self.kind == "choice":
            return distributions.CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            # low and high are set for every kind but choice (__post_init__)
            return distributions.IntDistribution(
                int(self.low), int(self.high))  # type: ignore[arg-type]  # see above
        return distributions.FloatDistribution(
            self.low, self.high, log=self.kind == "log")

    def contains(self, value: Any) -> bool:
        """Whether ``value`` lies in this range."""
        if self.kind == "choice":
            return value in self.choices
        if self.kind == "int" and value != int(value):
            return False
        return self.low <= value <= self.high

    def describe(self) -> dict[str, Any]:
        """The range and its reason, as plain values (the results file's search space)."""
        bounds = ({"choices": list(self.choices)} if self.kind == "choice"
                  else {"low": self.low, "high": self.high})
        return {"kind": self.kind, **bounds, "why": self.why}


#: A trained allocator and the environment steps its training took.
Fit = Callable[[str, Mapping[str, Any], int, int], tuple[Any, int]]
#: ``(trained, env_id, episodes) -> (score, metrics)``; ``metrics`` has at least
#: ``success_rate`` and ``cps`` (recorded beside the score).
Score = Callable[[Any, str, int], tuple[float, dict[str, Any]]]
#: What :func:`validate` scores (the results file's ``score``).
RETURN_SCORE = "mean Eq. 1 episode return on the validation tasks (higher is better)"


def validate(allocator: Any, env_id: str, episodes: int) -> tuple[float, dict[str, Any]]:
    """Mean episode return and the point metrics on the validation tasks.

    The tasks are the stream of ``VALIDATION_TASK_SEED`` on ``gym.make(env_id)``: the
    first episode resets with it, the rest continue the env's own stream.
    """
    env = gym.make(env_id)
    try:
        played = [rollout(allocator, env, VALIDATION_TASK_SEED if i == 0 else None)
                  for i in range(episodes)]
    finally:
        env.close()
    metrics = summarize([episode.record for episode in played])
    return float(np.mean([episode.episode_return for episode in played])), metrics


def task_seeds(seeds: int) -> dict[str, Any]:
    """The task seeds of a method trained by :func:`agents.learners.training.train`.

    Training runs ``0..seeds-1`` draw the task streams ``TRAIN_TASK_SEED + seed``.
    """
    return {"training": [TRAIN_TASK_SEED + seed for seed in range(seeds)],
            "validation": VALIDATION_TASK_SEED, "evaluation": EVAL_TASK_SEED}


@dataclass(frozen=True)
class Method:
    """A tunable learned method: its search space, the paper's point, how to train and score it.

    Attributes:
        label: Human name.
        space: The searched hyperparameters.
        paper: The paper's configuration (one value per parameter of ``space``), run as
            the first trial.
        fit: ``(env_id, config, timesteps, seed) -> (allocator, steps taken)``; must be a
            module-level function (Ray ships it to the workers by reference).
        score: How a trained allocator is scored on the validation tasks (its
            experiment's own measure); :func:`validate` unless the experiment scores
            otherwise. Module-level, as ``fit``.
        score_label: What ``score`` measures, for the results file.
        seeds: ``seeds -> {"training", "validation", "evaluation"}``: the task seeds the
            method's training runs ``0..seeds-1`` use, its validation and its evaluation
            task seeds (the results file's ``task_seeds``). Module-level, as ``fit``.
        setting: What else fixes the sweep (a profile, how the steps split between
            stages), written into the results file as ``setting``; empty for none.
    """

    label: str
    space: tuple[Param, ...]
    paper: Mapping[str, Any]
    fit: Fit
    score: Score = validate
    score_label: str = RETURN_SCORE
    seeds: Callable[[int], dict[str, Any]] = task_seeds
    setting: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [param.name for param in self.space]
        if sorted(names) != sorted(self.paper) or len(set(names)) != len(names):
            raise ValueError(f"{self.label}: the paper's point must set exactly {names}")
        outside = [p.name for p in self.space if not p.contains(self.paper[p.name])]
        if outside:
            raise ValueError(f"{self.label}: the paper's point lies outside the space: {outside}")


#: PPO's space: the settings that decide how far a short budget gets. GAE lambda (0.95)
#: and the value weight (0.5) stay at the paper's A.4; with 3-7 step episodes they matter
#: little, and each extra dimension thins a dozen trials further.
PPO_SPACE = (
    Param("learning_rate", "log", 1e-5, 3e-3,
          why="a decade below to a decade above SB3's 3e-4 (the paper's PPO), log-uniform: "
              "the rate is a scale"),
    Param("n_steps", "choice", choices=(256, 512, 1024, 2048),
          why="the paper's 512, halved and doubled twice: shorter rollouts give more "
              "updates in a short budget, longer ones steadier gradients; each divides "
              "the budget's steps, so every trial takes exactly them"),
    Param("batch_size", "choice", choices=(32, 64, 128),
          why="the paper's 64, halved and doubled; each divides every n_steps"),
    Param("ent_coef", "log", 1e-4, 5e-2,
          why="around the paper's 0.01: MultiBinary(m) exploration collapses to a fixed "
              "call pattern without it, and a large bonus keeps calls random"),
    Param("clip_range", "choice", choices=(0.1, 0.2, 0.3),
          why="PPO's usual values around the paper's 0.2"),
)
#: PPO's configuration in the paper's A.4 (and in CORL's experiment): PPO_SETTINGS with
#: SB3's default learning rate.
PPO_PAPER = {"learning_rate": 3e-4, **{key: PPO_SETTINGS[key] for key in
                                      ("n_steps", "batch_size", "ent_coef", "clip_range")}}
