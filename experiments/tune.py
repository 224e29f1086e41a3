"""Equal-budget tuning on Ray Tune with Optuna (issue #11): ``python -m experiments tune``.

**A sweep** tunes one learned method on one env: Ray Tune's ``Tuner`` runs
``budget.trials`` trials whose configurations Optuna's TPE sampler suggests
(``ray.tune.search.optuna.OptunaSearch``, seeded). The first trial is always the
configuration the paper uses (the method's ``paper`` point), so the tuned configuration is
never chosen over the paper's without having beaten it on the same tasks.

**Equal budget.** Every method gets the same :class:`Budget` at a scale: the same number of
trials, and in every trial the same number of training runs (seeds ``0..seeds-1``, the
same seeds in every trial, so trials differ by configuration only) of the same number of
environment steps. The steps a trial actually took are recorded beside it (SB3 completes
its last rollout; the PPO space's rollout lengths all divide the budget's steps).

**Validation.** Trials train on training tasks (task seeds ``TRAIN_TASK_SEED + seed``, as
:func:`agents.lora.training.train` draws them) and are scored on ``budget.episodes``
validation tasks, the task stream of ``VALIDATION_TASK_SEED`` (:mod:`agents.seeds`),
disjoint from training and from evaluation (``EVAL_TASK_SEED``). Every trial meets the
same validation tasks. **The score** is the mean Eq. 1 episode return over the validation
tasks and the trial's training runs: the objective PPO itself maximises, which weighs
success against cost with the env's own reward weights; success rate and CPS are recorded
beside it.

**Where it runs.** ``address=None`` starts a one-machine Ray cluster (``ray.init`` with
``jobs`` CPUs and no dashboard); ``--address auto`` or ``--address ray://HOST:10001`` is
passed to ``ray.init(address=...)``, with this package shipped to the workers
(``runtime_env`` ``py_modules``; every node needs cost-envs installed). ``jobs`` trials
run at once either way. Ray Tune's own files go to a temporary directory, never the
repository.

**Reproducibility.** Each trial's score is a function of its configuration (fixed training
seeds and validation tasks, one torch thread), but with ``jobs`` > 1 which trials Optuna
has seen when it suggests the next one depends on which finished first, so two runs of a
sweep can try different configurations after the first ``jobs``.

**Outputs.** One YAML file per (method, env), ``<method>_<Env>.yaml`` in ``out``
(default ``experiments/tuned/``): the chosen configuration, the paper's, the search space
with the reason for each range, the budget, the task seeds, every trial, the wall time
and the machine. Written all or nothing (:func:`agents.files.write_files_atomic`) after
every sweep has finished.

**Adding a method** (LoRA supervised, LoRA-guided PPO, CORL, BoPO): a :class:`Method` in
:data:`METHODS` with its search space (:class:`Param`, each with why), the paper's point,
and a ``fit(env_id, config, timesteps, seed)`` returning the trained allocator and the
environment steps it took; then a (method, env) pair in :data:`SWEEPS`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from agents.evaluation import rollout
from agents.files import write_files_atomic
from agents.lora.supervised import SupervisedConfig
from agents.lora.training import PPO_SETTINGS, configure_torch_threads, train
from agents.seeds import EVAL_TASK_SEED, TRAIN_TASK_SEED, VALIDATION_TASK_SEED
from cost_envs.config import integer
from cost_envs.metrics import summarize
from experiments.common import machine

#: Where the chosen configurations are committed.
TUNED_DIR = Path(__file__).resolve().parent / "tuned"
#: The metric the search maximises (see the module docstring).
METRIC = "score"
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


@dataclass(frozen=True)
class Budget:
    """What every method gets at a scale (the equal budget).

    Attributes:
        trials: Configurations tried.
        timesteps: Environment steps of each training run.
        seeds: Training runs per trial (seeds ``0..seeds-1``, the same in every trial).
        episodes: Validation tasks each training run is scored on.
    """

    trials: int
    timesteps: int
    seeds: int
    episodes: int

    def __post_init__(self) -> None:
        for name in ("trials", "timesteps", "seeds", "episodes"):
            integer(getattr(self, name), name, minimum=1)


BUDGETS = {
    "smoke": Budget(trials=2, timesteps=2048, seeds=1, episodes=20),
    "default": Budget(trials=12, timesteps=20_480, seeds=1, episodes=200),
    "full": Budget(trials=32, timesteps=61_440, seeds=3, episodes=400),
}


def validate(allocator: Any, env_id: str, episodes: int) -> tuple[float, dict[str, Any]]:
    """Mean episode return and the point metrics on the validation tasks."""
    env = gym.make(env_id)
    try:
        played = [rollout(allocator, env, VALIDATION_TASK_SEED if i == 0 else None)
                  for i in range(episodes)]
    finally:
        env.close()
    metrics = summarize([episode.record for episode in played])
    return float(np.mean([episode.episode_return for episode in played])), metrics


def run_trial(config: Mapping[str, Any], *, method: str, env_id: str, budget: Budget) -> None:
    """One trial (run in a Ray worker): train ``budget.seeds`` times, report the score."""
    from ray import tune

    configure_torch_threads()
    start = time.perf_counter()
    scores, successes, costs, steps = [], [], [], 0
    for seed in range(budget.seeds):
        allocator, taken = METHODS[method].fit(env_id, config, budget.timesteps, seed)
        score, metrics = validate(allocator, env_id, budget.episodes)
        scores.append(score)
        successes.append(metrics["success_rate"])
        costs.append(metrics["cps"])
        steps += taken
    tune.report({METRIC: float(np.mean(scores)), "success_rate": float(np.mean(successes)),
                 "cps": float(np.mean(costs)), "timesteps": steps,
                 "seconds": time.perf_counter() - start})


def connect(address: str | None, jobs: int) -> None:
    """``ray.init``: a one-machine cluster of ``jobs`` CPUs, or the cluster at ``address``."""
    import ray

    if address is None:
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
    else:  # the cluster's workers import this package from the job, not from a checkout
        ray.init(address=address, runtime_env={"py_modules": [str(Path(__file__).parent)]})


def _plain(value: Any) -> Any:
    """Numpy scalars as Python values (YAML's safe dumper takes only those)."""
    return value.item() if isinstance(value, np.generic) else value


def sweep(env_id: str, method: str, budget: Budget, jobs: int = 2, seed: int = 0,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one sweep on the connected Ray cluster; returns its results record.

    Raises:
        RuntimeError: If a trial failed (its error is in the message).
    """
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    spec = METHODS[method]
    searcher = OptunaSearch(space={p.name: p.distribution() for p in spec.space},
                            metric=METRIC, mode="max", seed=seed,
                            points_to_evaluate=[dict(spec.paper)])
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, method=method, env_id=env_id, budget=budget),
        {"cpu": 1})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cost-envs-tune-") as storage:
        tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=budget.trials, max_concurrent_trials=jobs),
            run_config=tune.RunConfig(name=f"{method}-{env_id.split('/')[-1]}",
                                      storage_path=storage, verbose=0))
        results = tuner.fit()
        if results.errors:
            raise RuntimeError(f"tune {method} on {env_id}: {len(results.errors)} trial(s) "
                               f"failed; the first: {results.errors[0]}")
        # Tune's tag starts with the trial's number in suggestion order (1 = the paper's).
        done = sorted(results, key=lambda r: int(r.metrics["experiment_tag"].split("_")[0]))
    wall = time.perf_counter() - start
    trials = [{"trial": i, "config": {p.name: _plain(result.config[p.name]) for p in spec.space},
               **{key: _plain(result.metrics[key]) for key in
                  (METRIC, "success_rate", "cps", "timesteps")},
               "seconds": round(float(result.metrics["seconds"]), 1)}
              for i, result in enumerate(done)]
    if trials[0]["config"] != dict(spec.paper):
        raise RuntimeError(f"tune {method}: the first trial is not the paper's configuration")
    best = max(trials, key=lambda trial: trial[METRIC])  # the first of equal scores
    log(f"tune: {method} on {env_id}: {len(trials)} trials in {wall:.0f} s, best score "
        f"{best[METRIC]:.4f} (trial {best['trial']}; the paper's, trial 0: "
        f"{trials[0][METRIC]:.4f})")
    return {
        "env_id": env_id, "method": method, "label": spec.label,
        "chosen": dict(best["config"]), "chosen_trial": best["trial"],
        "paper": dict(spec.paper), "paper_trial": 0,
        "score": "mean Eq. 1 episode return on the validation tasks (higher is better)",
        "budget": {**asdict(budget), "env_steps_total": budget.trials * budget.seeds
                   * budget.timesteps},
        "task_seeds": {"training": [TRAIN_TASK_SEED + s for s in range(budget.seeds)],
                       "validation": VALIDATION_TASK_SEED, "evaluation": EVAL_TASK_SEED},
        "search": {"algorithm": "Optuna TPE (ray.tune.search.optuna.OptunaSearch)",
                   "seed": seed, "first_trial": "the paper's configuration",
                   "concurrent_trials": jobs},
        "search_space": {p.name: p.describe() for p in spec.space},
        "trials": trials, "wall_time_seconds": round(wall, 1),
    }


def render(record: Mapping[str, Any], scale: str, address: str | None) -> str:
    """The results file of one sweep, as YAML with a header comment."""
    from importlib.metadata import version

    header = (f"# Tuned {record['label']} on {record['env_id']}: `python -m experiments tune "
              f"--scale {scale}`{'' if address is None else f' --address {address}'}.\n"
              "# Chosen: the trial with the best validation score; its configuration is "
              "`chosen`.\n")
    body = {**record, "scale": scale, "where": address or "local",
            "machine": machine(),
            "versions": {name: version(name) for name in ("ray", "optuna")}}
    return header + yaml.dump(body, Dumper=_PlainDumper, sort_keys=False, width=100)


class _PlainDumper(yaml.SafeDumper):
    """YAML's safe dumper, writing a repeated value out again instead of an alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def file_name(method: str, env_id: str) -> str:
    """``<method>_<Env>.yaml``, e.g. ``ppo_ToolBench-v0.yaml``."""
    return f"{method}_{env_id.split('/')[-1]}.yaml"


def chosen(method: str, env_id: str, directory: Path = TUNED_DIR) -> dict[str, Any] | None:
    """The committed sweep's chosen configuration of ``method`` on ``env_id``, or ``None``.

    Raises:
        ValueError: If the file exists but is not a sweep of that method and env, or its
            configuration does not match the method's search space.
    """
    path = directory / file_name(method, env_id)
    if not path.exists():
        return None
    record = yaml.safe_load(path.read_text(encoding="utf-8"))
    names = {param.name for param in METHODS[method].space}
    if (not isinstance(record, dict) or record.get("method") != method
            or record.get("env_id") != env_id or not isinstance(record.get("chosen"), dict)
            or set(record["chosen"]) != names):
        raise ValueError(f"{path}: expected the tuned {method} on {env_id} with a `chosen` "
                         f"configuration of {sorted(names)}")
    return dict(record["chosen"])


def report(out: Path, scale: str = "default", address: str | None = None, jobs: int = 2,
           sweeps: Sequence[tuple[str, str]] = SWEEPS,
           log: Callable[[str], None] = print) -> list[Path]:
    """Run every sweep of ``sweeps`` at ``scale`` and write their files, all or nothing."""
    import ray

    budget = BUDGETS[scale]
    log(f"tune: {len(sweeps)} sweep(s), each {budget.trials} trials x {budget.seeds} "
        f"seed(s) x {budget.timesteps} steps, on {address or 'this machine'}")
    connect(address, jobs)
    try:
        files = {file_name(method, env_id): render(
            sweep(env_id, method, budget, jobs=jobs, log=log), scale, address)
            for method, env_id in sweeps}
    finally:
        ray.shutdown()
    return write_files_atomic(out, files)

