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
own (:attr:`experiments.tune.space.Method.score`), averaged over the trial's training
runs: by default the mean Eq. 1 episode return, the objective PPO itself maximises,
which weighs success against cost with the env's own reward weights; CORL's sweeps score
accuracy within each tier's budget averaged over the tiers, BoPO's the Eq. 1 return under
the experiment's per-task budget. Success rate and CPS are recorded beside it.

**Where it runs.** ``address=None`` starts a one-machine Ray cluster (``ray.init`` with
``jobs`` CPUs and no dashboard); ``--address auto`` or ``--address ray://HOST:10001`` is
passed to ``ray.init(address=...)``, with this package shipped to the workers
(``runtime_env`` ``py_modules``, with single-threaded BLAS; every node needs cost-envs
installed), after a probe of
the address (:mod:`experiments.shared.cluster`: an address nobody answers at is one line
within seconds). ``jobs`` trials run at once either way.

**Kept and resumed.** Ray Tune's own files (every trial's results, the searcher's state)
stay in ``<out>/ray_results/<scale>/<method>-<Env>`` (:data:`RAY_DIR`; with ``ray://``
that path is on the cluster's head node). A sweep whose directory holds an experiment
is resumed (``Tuner.restore``): finished trials are kept, unfinished and failed ones run
again, and a finished sweep is read back without training, so a run stopped by Ctrl-C,
a lost cluster or a failed trial continues where it stopped when the same command is
run again. Delete the directory to start a sweep afresh.

**Reproducibility.** Each trial's score is a function of its configuration (fixed training
seeds and validation tasks, one torch thread), but with ``jobs`` > 1 which trials Optuna
has seen when it suggests the next one depends on which finished first, so two runs of a
sweep can try different configurations after the first ``jobs``.

**Outputs.** One YAML file per (method, env), ``<method>_<Env>.yaml`` in ``out``
(default ``experiments/tuned/``): the chosen configuration, the paper's, the search space
with the reason for each range, the budget, the task seeds, every trial, the wall time
(of this run: a resumed sweep also records ``resumed_trials``, those finished before)
and the machine. Written all or nothing (:func:`agents.files.write_files_atomic`) after
every sweep of the run has finished; ``methods`` runs some of :data:`SWEEPS` only.

**The methods** (their search spaces, the papers' points, how each trains and is scored)
are registered in :mod:`experiments.tune.methods`, which says how to add one; CORL's and
BoPO's live in :mod:`experiments.tune.corl` and :mod:`experiments.tune.bopo`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agents.files import write_files_atomic
from agents.learners.training import configure_torch_threads
from cost_envs.config import integer
from experiments.shared.cluster import connect
from experiments.tune.methods import METHODS, SWEEPS
from experiments.tune.report import render

#: Where the chosen configurations are committed.
TUNED_DIR = Path(__file__).resolve().parents[1] / "tuned"
#: The metric the search maximises (see the module docstring).
METRIC = "score"
#: Where in ``out`` Ray Tune keeps its experiments, one directory per scale.
RAY_DIR = "ray_results"
#: A directory where trials sign in (for tests that stop a sweep mid-trial): when the
#: environment names one, every trial but the first to sign in waits there until a file
#: ``release`` appears, so the test knows a trial is running when it interrupts.
TRIAL_GATE_VARIABLE = "COST_ENVS_TUNE_TRIAL_GATE"


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C, which Ray Tune catches: its state is saved to resume."""


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
    wait_at_gate(os.environ.get(TRIAL_GATE_VARIABLE))
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


def wait_at_gate(gate: str | None) -> None:
    """Sign in at ``gate`` (:data:`TRIAL_GATE_VARIABLE`); wait for its release unless first."""
    if not gate:
        return
    folder = Path(gate)
    (folder / f"started-{uuid.uuid4().hex}").touch()
    if len(list(folder.glob("started-*"))) == 1:
        return
    while not (folder / "release").exists():
        time.sleep(0.05)


def _plain(value: Any) -> Any:
    """Numpy scalars as Python values (YAML's safe dumper takes only those)."""
    return value.item() if isinstance(value, np.generic) else value


def experiment_name(method: str, env_id: str) -> str:
    """The directory of a sweep's Ray Tune experiment, e.g. ``ppo-ToolBench-v0``."""
    return f"{method}-{env_id.split('/')[-1]}"


def sweep(env_id: str, method: str, budget: Budget, storage: Path, jobs: int = 2,
          seed: int = 0, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one sweep on the connected Ray cluster; returns its results record.

    Ray Tune keeps the sweep in ``storage / experiment_name(method, env_id)``; an
    experiment already there is resumed (the module docstring), not started again.

    Raises:
        RuntimeError: If a trial failed (its error is in the message); the finished
            trials stay in ``storage`` and the next run resumes from them.
        SweepInterrupted: On Ctrl-C (which Tune catches, saving the experiment).
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
    name = experiment_name(method, env_id)
    path = Path(storage) / name
    resumed = 0
    if tune.Tuner.can_restore(path):
        # Finished trials are kept; interrupted and failed ones run again from scratch
        # (a trial is one report, with no checkpoint to resume from).
        tuner = tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                   restart_errored=True)
        resumed = sum(1 for result in tuner.get_results()
                      if result.error is None and METRIC in result.metrics)
        log(f"tune: {method} on {env_id}: resuming {path} ({resumed} of {budget.trials} "
            "trials finished)")
    else:
        tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=budget.trials, max_concurrent_trials=jobs),
            run_config=tune.RunConfig(name=name, storage_path=str(Path(storage).resolve()),
                                      verbose=0))
    results = tuner.fit()
    if results.errors:
        # The remote traceback is in each failed trial's error.txt; its last line here.
        last = (str(results.errors[0]).strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"tune {method} on {env_id}: {len(results.errors)} trial(s) "
                           f"failed, the first with {last} (tracebacks: error.txt in {path}; "
                           "the finished trials are kept there and the same command resumes)")
    if any(METRIC not in result.metrics for result in results):
        # Tune catches Ctrl-C itself, saves the experiment and returns what finished.
        raise SweepInterrupted(f"tune {method} on {env_id}: interrupted; the finished "
                               f"trials are kept in {path}")
    # Tune's tag starts with the trial's number in suggestion order (1 = the paper's).
    done = sorted(results, key=lambda r: int(r.metrics["experiment_tag"].split("_")[0]))
    if len(done) != budget.trials:
        raise RuntimeError(f"tune {method} on {env_id}: {path} holds {len(done)} trials, "
                           f"the budget {budget.trials}: a sweep of another scale? Delete "
                           "it to start afresh")
    wall = time.perf_counter() - start
    trials = [{"trial": i, "config": {p.name: _plain(result.config[p.name]) for p in spec.space},
               **{key: _plain(result.metrics[key]) for key in
                  (METRIC, "success_rate", "cps", "timesteps")},
               "seconds": round(float(result.metrics["seconds"]), 1)}
              for i, result in enumerate(done)]
    if trials[0]["config"] != dict(spec.paper):
        raise RuntimeError(f"tune {method}: the first trial is not the paper's configuration")
    best = max(trials, key=lambda trial: trial[METRIC])  # the first of equal scores
    log(f"tune: {method} on {env_id}: {len(trials)} trials"
        f"{f' ({resumed} finished before)' if resumed else ''} in {wall:.0f} s, best score "
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
        **({"resumed_trials": resumed} if resumed else {}),
    }


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
    # libyaml's safe loader where PyYAML has it: the same objects, 8x faster than the
    # pure-Python one (tests read these files at collection, issue #36)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    record = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    names = {param.name for param in METHODS[method].space}
    if (not isinstance(record, dict) or record.get("method") != method
            or record.get("env_id") != env_id or not isinstance(record.get("chosen"), dict)
            or set(record["chosen"]) != names):
        raise ValueError(f"{path}: expected the tuned {method} on {env_id} with a `chosen` "
                         f"configuration of {sorted(names)}")
    return dict(record["chosen"])


def chosen_sweeps(methods: Sequence[str] | None = None,
                  sweeps: Sequence[tuple[str, str]] = SWEEPS) -> list[tuple[str, str]]:
    """The sweeps of ``methods`` (all of ``sweeps`` for ``None``), in ``sweeps``' order.

    Raises:
        ValueError: One line naming a method no sweep has, and the methods there are.
    """
    if methods is None:
        return list(sweeps)
    known = list(dict.fromkeys(method for method, _ in sweeps))
    unknown = [method for method in methods if method not in known]
    if unknown or not methods:
        raise ValueError(f"--methods: unknown method(s) {', '.join(unknown) or 'none given'}"
                         f"; expected some of {', '.join(known)}")
    return [(method, env_id) for method, env_id in sweeps if method in methods]


def report(out: Path, scale: str = "default", address: str | None = None, jobs: int = 2,
           sweeps: Sequence[tuple[str, str]] = SWEEPS, methods: Sequence[str] | None = None,
           log: Callable[[str], None] = print) -> list[Path]:
    """Run the sweeps of ``methods`` at ``scale`` and write their files, all or nothing.

    Ray Tune's files stay in ``out / RAY_DIR / scale``, from which a second run resumes
    (the module docstring).
    """
    import ray

    budget = BUDGETS[scale]
    sweeps = chosen_sweeps(methods, sweeps)
    storage = Path(out) / RAY_DIR / scale
    log(f"tune: {len(sweeps)} sweep(s), each {budget.trials} trials x {budget.seeds} "
        f"seed(s) x {budget.timesteps} steps, on {address or 'this machine'}; Ray Tune's "
        f"files in {storage}")
    connect(address, jobs)
    try:
        files = {file_name(method, env_id): render(
            sweep(env_id, method, budget, storage, jobs=jobs, log=log), scale, address)
            for method, env_id in sweeps}
    finally:
        ray.shutdown()
    return write_files_atomic(out, files)

