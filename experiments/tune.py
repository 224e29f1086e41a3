"""Equal-budget tuning on Ray Tune with Optuna (issue #11): ``python -m experiments tune``.

**A sweep** tunes one learned method on one env: Ray Tune's ``Tuner`` runs
``budget.trials`` trials whose configurations Optuna's TPE sampler suggests
(``ray.tune.search.optuna.OptunaSearch``, seeded). The first trial is always the
configuration the paper uses (the method's ``paper`` point), so the tuned configuration is
never chosen over the paper's without having beaten it on the same tasks.

**Equal budget.** Every method gets the same :class:`Budget` at a scale: the same number of
trials, and in every trial the same number of training runs (seeds ``0..seeds-1``, the
same seeds in every trial, so trials differ by configuration only) of the same number of
environment steps (a method of two stages splits them, as its ``setting`` says). The
steps a trial actually took are recorded beside it (SB3 completes its last rollout; every
space's rollout lengths divide the budget's steps).

**Validation.** Trials train on training tasks (task seeds ``TRAIN_TASK_SEED + seed``, as
:func:`agents.learners.training.train` draws them; each method's own are in its results file)
and are scored on ``budget.episodes`` validation tasks, from ``VALIDATION_TASK_SEED``
(:mod:`agents.seeds`), disjoint from training and from evaluation (``EVAL_TASK_SEED``).
Every trial of a sweep meets the same validation tasks. **The score** is the method's
own (:attr:`experiments.tune_space.Method.score`), averaged over the trial's training
runs: by default the mean Eq. 1 episode return, the objective PPO itself maximises,
which weighs success against cost with the env's own reward weights; CORL's sweeps score
accuracy within each tier's budget averaged over the tiers, BoPO's the Eq. 1 return under
the experiment's per-task budget. Success rate and CPS are recorded beside it.

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

**The methods** (their search spaces, the papers' points, how each trains and is scored)
are registered in :mod:`experiments.tune_methods`, which says how to add one; CORL's and
BoPO's live in :mod:`experiments.tune_corl` and :mod:`experiments.tune_bopo`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agents.files import write_files_atomic
from agents.learners.training import configure_torch_threads
from cost_envs.config import integer
from experiments.common import machine
from experiments.tune_methods import METHODS, SWEEPS

#: Where the chosen configurations are committed.
TUNED_DIR = Path(__file__).resolve().parent / "tuned"
#: The metric the search maximises (see the module docstring).
METRIC = "score"
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


def run_trial(config: Mapping[str, Any], *, method: str, env_id: str, budget: Budget) -> None:
    """One trial (run in a Ray worker): train ``budget.seeds`` times, report the score."""
    from ray import tune

    configure_torch_threads()
    start = time.perf_counter()
    scores, successes, costs, steps = [], [], [], 0
    for seed in range(budget.seeds):
        spec = METHODS[method]
        allocator, taken = spec.fit(env_id, config, budget.timesteps, seed)
        score, metrics = spec.score(allocator, env_id, budget.episodes)
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
        "score": spec.score_label,
        "budget": {**asdict(budget), "env_steps_total": budget.trials * budget.seeds
                   * budget.timesteps},
        **({"setting": dict(spec.setting)} if spec.setting else {}),
        "task_seeds": spec.seeds(budget.seeds),
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

