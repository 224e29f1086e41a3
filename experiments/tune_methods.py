"""The tunable methods of :mod:`experiments.tune`: search spaces, the papers' points, fits.

Each :class:`Method` is a documented search space (:class:`Param`, each with why), the
paper's configuration (always a sweep's first trial) and a ``fit(env_id, config,
timesteps, seed)`` that trains one allocator; :data:`TRAIN_ARGUMENTS` turns a chosen
configuration into :func:`agents.lora.training.train`'s arguments, which is how
``python -m experiments lora_ppo``'s tuned rows train. :data:`SWEEPS` lists the sweeps
``python -m experiments tune`` runs.

**Adding a method** (CORL, BoPO): a :class:`Method` in :data:`METHODS` with its space, the
paper's point and a module-level ``fit`` (Ray ships it to the workers by reference); its
argument builder in :data:`TRAIN_ARGUMENTS` if an experiment trains its tuned
configuration; then a (method, env) pair in :data:`SWEEPS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agents.lora.supervised import SupervisedConfig
from agents.lora.training import PPO_SETTINGS, train

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
            return distributions.IntDistribution(int(self.low), int(self.high))  # type: ignore[arg-type]
        return distributions.FloatDistribution(self.low, self.high, log=self.kind == "log")  # type: ignore[arg-type]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` lies in this range."""
        if self.kind == "choice":
            return value in self.choices
        if self.kind == "int" and value != int(value):
            return False
        return self.low <= value <= self.high  # type: ignore[operator]

    def describe(self) -> dict[str, Any]:
        """The range and its reason, as plain values (the results file's search space)."""
        bounds = ({"choices": list(self.choices)} if self.kind == "choice"
                  else {"low": self.low, "high": self.high})
        return {"kind": self.kind, **bounds, "why": self.why}


#: A trained allocator and the environment steps its training took.
Fit = Callable[[str, Mapping[str, Any], int, int], tuple[Any, int]]


@dataclass(frozen=True)
class Method:
    """A tunable learned method: its search space, the paper's point, how to train it.

    Attributes:
        label: Human name.
        space: The searched hyperparameters.
        paper: The paper's configuration (one value per parameter of ``space``), run as
            the first trial.
        fit: ``(env_id, config, timesteps, seed) -> (allocator, steps taken)``; must be a
            module-level function (Ray ships it to the workers by reference).
    """

    label: str
    space: tuple[Param, ...]
    paper: Mapping[str, Any]
    fit: Fit

    def __post_init__(self) -> None:
        names = [param.name for param in self.space]
        if sorted(names) != sorted(self.paper) or len(set(names)) != len(names):
            raise ValueError(f"{self.label}: the paper's point must set exactly {names}")
        outside = [p.name for p in self.space if not p.contains(self.paper[p.name])]
        if outside:
            raise ValueError(f"{self.label}: the paper's point lies outside the space: {outside}")


def ppo_arguments(config: Mapping[str, Any],
                  supervised: SupervisedConfig | None = None) -> dict[str, Any]:
    """A configuration of :data:`PPO_SPACE` as :func:`agents.lora.training.train`'s arguments.

    ``supervised`` is unused (PPO has no supervised stage); it keeps the signature of
    every method's argument builder (:data:`TRAIN_ARGUMENTS`).
    """
    return {"ppo": dict(config)}


def fit_ppo(env_id: str, config: Mapping[str, Any], timesteps: int,
            seed: int) -> tuple[Any, int]:
    """PPO from scratch (:func:`agents.lora.training.train`) with ``config`` applied."""
    trained = train(env_id, "ppo", timesteps, seed=seed, **ppo_arguments(config))
    return trained, trained.timesteps


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

def lora_ppo_arguments(config: Mapping[str, Any],
                       supervised: SupervisedConfig | None = None) -> dict[str, Any]:
    """A configuration of :data:`LORA_PPO_SPACE` as :func:`agents.lora.training.train`'s arguments.

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
    """A configuration of :data:`LORA_SPACE` as :func:`agents.lora.training.train`'s arguments."""
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
    "ppo": Method("PPO", PPO_SPACE,
                  {"learning_rate": 3e-4, **{key: PPO_SETTINGS[key] for key in
                                            ("n_steps", "batch_size", "ent_coef",
                                             "clip_range")}},
                  fit_ppo),
    "lora-ppo": Method("LoRA-Guided PPO", LORA_PPO_SPACE,
                       {"learning_rate": 5e-5, "supervised_epochs": SupervisedConfig().epochs,
                        "action_head": "frozen", "cost_coef": 0.05,
                        "ent_coef": PPO_SETTINGS["ent_coef"]},
                       fit_lora_ppo),
    "lora": Method("LoRA supervised", LORA_SPACE,
                   {key: getattr(SupervisedConfig(), key)
                    for key in ("learning_rate", "epochs", "threshold", "lambda_c")},
                   fit_lora),
}
#: Method -> how one of its configurations becomes ``train``'s arguments.
TRAIN_ARGUMENTS: dict[str, Callable[..., dict[str, Any]]] = {
    "ppo": ppo_arguments, "lora-ppo": lora_ppo_arguments, "lora": lora_arguments}
#: The sweeps ``python -m experiments tune`` runs: (method, env id).
SWEEPS: tuple[tuple[str, str], ...] = (("ppo", "cost_envs/ToolBench-v0"),
                                       ("lora-ppo", "cost_envs/ToolBench-v0"),
                                       ("lora", "cost_envs/ToolBench-v0"))
