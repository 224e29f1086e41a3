"""Learning curves to where each learned row stops improving (issue #23, converged budgets).

Every row of :data:`BUDGET_ROWS` is trained ``seeds`` times to ``timesteps`` environment
steps on the env's native batched env (``n_envs`` sub-envs), and its policy is scored on
the tables' evaluation tasks (``episodes`` tasks of task seed 0, the set every table uses)
at each of ``checkpoints`` (:class:`agents.callbacks.EvaluateAtSteps`). Each point is the
mean Eq. 1 return and the share of the gap between the best fixed row and the planner it
closes, both with 95% intervals over seeds and tasks (a two-level bootstrap, paired over
the tasks). A row *stops improving* at the first checkpoint from which no point's paired
gain to the last checkpoint is resolved above zero (the interval of last - that point,
seeds and tasks resampled together, reaches 0 at it and at every later point): more steps
buy nothing the intervals can see. A row whose last step is still resolved above the one
before has not stopped at this budget, and the table says so.

By default the curves are ToolBench-v0's rows (:data:`BUDGET_ENVS`) and FlightPlanner-v1's
PPO, the latter at its own longer scale (:data:`ENV_SCALES`).

Every PPO stage trains on FastPPO's exact path (SB3's updates bit for bit) unless
``fused``: then on its fused path (``fused_loss=True``, float-close, not bit for bit;
:mod:`agents.learners.ppo`), whose kept units and files are apart (``budgets_<Env>_fused``),
so that neither path's runs stand for the other's.

The RL steps are what the curve counts; a row with a supervised stage (``lora-ppo``) spent
its teacher's episodes before step 0, and its point at step 0 is that warm start.

Outputs in ``out``: ``budgets_<Env>.md`` (the table, the machine, the wall time of each
row) and ``budgets_<Env>.csv`` (row, seed, timesteps, gradient steps, mean return and the
per-task returns, :func:`experiments.shared.gaps.encode_scores`: the curves as a columnar file
from which every interval can be recomputed), written together or not at all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.files import write_files_atomic
from agents.learners.training import configure_torch_threads, train
from agents.seeds import EVAL_TASK_SEED
from experiments.budgets.report import curve_table
from experiments.budgets.settings import (
    BUDGET_ENVS,
    BUDGET_ROWS,
    SCALES,
    Scale,
    path_suffix,
    row_arguments,
    scale_for,
)
from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import run_units


@dataclass(frozen=True)
class Job:
    """One training run: an env, a row, a seed (and where its checkpoints are scored).

    ``eval_seed``: the first reset seed of the checkpoints' tasks: the validation set's,
    where the curves' stop marks are read; a report that scores a run's end on the test
    set (:mod:`experiments.converged`) gives that set's.
    """

    env_id: str
    key: str
    seed: int
    scale: Scale
    eval_seed: int = EVAL_TASK_SEED
    #: On FastPPO's fused path (:func:`experiments.budgets.settings.row_arguments`).
    fused: bool = False

    def __str__(self) -> str:
        path = " fused" if self.fused else ""
        return f"{self.env_id.split('/')[-1]} {self.key} seed {self.seed}{path}"


def run_job(job: Job) -> dict[str, Any]:
    """Train one row with one seed, scoring it at every checkpoint.

    Returns its curve, wall time (``seconds``) and the process's CPU time
    (``cpu_seconds``: the fairer figure on a shared machine).
    """
    configure_torch_threads()
    row = BUDGET_ROWS[job.key]
    start, cpu = time.perf_counter(), time.process_time()
    trained = train(job.env_id, row.method, job.scale.timesteps, seed=job.seed,
                    n_envs=job.scale.n_envs, evaluate_at=job.scale.checkpoints,
                    eval_episodes=job.scale.episodes, eval_seed=job.eval_seed,
                    **row_arguments(job.key, job.fused))
    return {"key": job.key, "seed": job.seed, "curve": trained.curve,
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


def reference_returns(env_id: str, episodes: int, eval_seed: int = EVAL_TASK_SEED
                      ) -> tuple[list[float], list[float]]:
    """The best fixed row's and the planner's per-task returns on the evaluation tasks.

    ``eval_seed``: the task set's seed (the validation set, where the stop marks are read).
    """
    from experiments.lora_ppo.runner import SCALES as TABLE_SCALES
    from experiments.lora_ppo.runner import Scale as TableScale
    from experiments.lora_ppo.runner import gap_ends, score_baselines

    fixed = score_baselines(env_id, TableScale("budgets", 1, 1, episodes, 100,
                                               rule_tasks=TABLE_SCALES["default"].rule_tasks),
                            eval_seed=eval_seed)
    rule, planner = gap_ends(fixed)
    return list(fixed.returns[rule]), list(fixed.returns[planner])


def report(out: Path, scale: str | Scale = "default", jobs: int = 2,
           envs: Mapping[str, Sequence[str]] | None = None, log: Any = print,
           address: str | None = None, fused: bool = False) -> list[Path]:
    """Run every (env, row, seed) and write each env's table and CSV; returns the paths.

    ``scale``: a key of :data:`SCALES` or a :class:`Scale`. The runs are units of
    :func:`experiments.shared.scheduler.run_units` (``jobs`` processes, or the Ray cluster
    at ``address``), each kept as it finishes until the files are written. ``fused``: on
    FastPPO's fused path, into ``budgets_<Env>_fused.md`` and ``.csv`` (its units kept
    apart, under settings that name the path).
    """
    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    chosen = SCALES[scale] if isinstance(scale, str) else scale
    envs = BUDGET_ENVS if envs is None else envs
    grid = [Job(env_id, key, seed, scale_for(env_id, chosen), fused=fused)
            for env_id, keys in envs.items()
            for key in keys for seed in range(scale_for(env_id, chosen).seeds)]
    # the exact path's settings as they were; the fused path's name it
    settings = (chosen, dict(envs), "fused_loss") if fused else (chosen, dict(envs))
    keeper = Kept(units_folder(out, f"budgets{path_suffix(fused)}", chosen.name),
                  repr(settings))
    results = run_units(run_job, grid, jobs=jobs, address=address, keeper=keeper,
                        label="budgets", log=log)
    files = {}
    for env_id in envs:
        own = scale_for(env_id, chosen)
        rule, planner = reference_returns(env_id, own.episodes)
        mine = [r for job, r in zip(grid, results, strict=True) if job.env_id == env_id]
        setup = (f"{own.seeds} seeds x {own.timesteps} env steps on {own.n_envs} batched "
                 "sub-envs, on FastPPO's fused path (`fused_loss=True`: float-close to SB3's "
                 "updates, not bit for bit)") if fused else None
        markdown, columns = curve_table(env_id, mine, rule, planner, own, setup=setup)
        name = env_id.split("/")[-1] + path_suffix(fused)
        files[f"budgets_{name}.md"] = markdown
        files[f"budgets_{name}.csv"] = columns
    written = write_files_atomic(out, files)
    keeper.clear()
    return written
