"""Learned rows at their converged budget, scored on enough tasks to resolve them (issue #23).

FlightPlanner-v1's PPO learning curve (:mod:`experiments.budgets.runner`,
``benchmarks/results/budgets_FlightPlanner-v1.md``) stops improving between 1M and 2M env
steps (no later gain is resolved); at 2M its five seeds agree within 0.006 of return (0.958
to 0.964) and sit a few thousandths above the one-turn rule. On the curve's 1000
evaluation tasks that gain is inside the task noise (share of the gap 0.20 [-0.22, 0.50]
at 2M): the interval is wide because of the tasks, not the seeds. This experiment trains
learned rows at that converged budget and scores them on ten times as many tasks, so the
tasks' share of the interval shrinks by about sqrt(10):

- each learned row of :data:`ROWS` (keys of :data:`experiments.budgets.settings.BUDGET_ROWS`: PPO
  with the paper's A.4 configuration on 16 batched sub-envs, and LoRA-guided PPO warm
  started by the paper's greedy teacher or by the Bayes reference with DAgger), 5 training
  seeds x :data:`STEPS` env steps, each scored once, after its last update, on the first
  :data:`EPISODES` evaluation tasks of task seed 0 (the tables' set: the curve's 1000
  tasks are its first 1000);
- every fixed row of the env's table (:func:`experiments.lora_ppo.runner.score_baselines`) on the
  same tasks: the best fixed row (the gap's rule end), the planner (which knows the task,
  not the luck; the other end) and the Bayes reference (which knows the prior, not the
  task: the non-privileged reference the issue asks the learners to be measured against).

Every learned figure is a two-level bootstrap over seeds and tasks, paired over the tasks
(:func:`cost_envs.metrics.bootstrap_mean_ci` on seeds x tasks arrays); fixed rows are
deterministic given the tasks, so their intervals are over tasks. The table gives each
row's return and share of the rule-to-planner gap, and per learned row the paired
differences that answer the issue: row - best fixed row, row - Bayes reference.

**Runs are kept as they finish** (:mod:`experiments.shared.kept`): one run is 5 to 10 minutes on
this 2-core machine (``converged_FlightPlanner-v1.md``: 5.4 to 9.3 a seed; 15 to 40 before
the faster learners and envs) and the whole grid more than an hour. Each
finished run (a row and a seed) and the fixed rows' scores are written at once to
``<out>/converged_runs/``; a later call trains only what is missing. The report is written
only when every run of the grid exists.

``python -m experiments.converged [--scale default|smoke] [--rows KEY ...] [--jobs N]
[--out DIR] [--ppo-path exact|fused]`` writes ``converged_FlightPlanner-v1.md`` and ``.csv``
into ``DIR`` (default ``benchmarks/results``), all or nothing. ``smoke`` takes seconds. The
CSV lists every learned row's seeds and the three reference rows with their mean return and
the kept file (in ``DIR``) that holds their per-task returns
(:func:`experiments.shared.gaps.encode_scores`),
from which every figure can be recomputed: the kept runs are the one home of those
returns (copied into the CSV, the 16 runs' 10,000 tasks made it larger than a tracked
file may be).

**The PPO path** (``--ppo-path``): every RL stage trains on FastPPO's exact path (SB3's
updates bit for bit; the committed runs) by default, or on its fused path (``fused``:
``fused_loss=True``, float-close, not bit for bit; :mod:`agents.learners.ppo`). A fused
report is ``converged_FlightPlanner-v1_fused.md`` and ``.csv``, its learned runs kept in
``converged_runs_fused/`` with ``"fused_loss": true`` among their settings (a kept file of
the other path is refused, never reused); the fixed rows, which no learner touches, are
the exact report's ``fixed.json``. ``benchmarks/ppo_fused_converged.py`` compares the two
paths' runs, paired over seeds and tasks.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.files import write_files_atomic
from experiments.budgets import runner as budgets
from experiments.budgets.settings import BUDGET_ROWS, on_path, path_suffix
from experiments.converged.report import Fixed, render
from experiments.converged.settings import ENV_ID, FIXED_FILE, OUT, ROWS, RUNS, SCALES, Scale
from experiments.shared.gaps import decode_scores, encode_scores
from experiments.shared.kept import Runs, run_file
from experiments.shared.scheduler import add_scheduling_arguments, run_units, scheduling
from experiments.shared.task_sets import DEFAULT_TASKS, TASK_SETS, check_tasks, tagged, task_seed


def runs_folder(tasks: str, fused: bool = False) -> str:
    """The folder (in ``out``) of the kept runs of a report scored on ``tasks``.

    :data:`RUNS` for the validation set on the exact path (the committed runs); a test
    run's kept apart, and so is a run on the fused path (``_fused``).
    """
    folder = RUNS if check_tasks(tasks) == DEFAULT_TASKS else f"{RUNS}_{tasks}"
    return folder + path_suffix(fused)


def score_fixed(scale: Scale, tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """Every fixed row on the tasks, and the rule end of the gap, as a kept file's content.

    The rows are scored on the task set ``tasks``; the rule end is chosen on the validation
    tasks whichever it is (:func:`experiments.lora_ppo.runner.score_baselines`).
    """
    from experiments.lora_ppo.runner import Scale as TableScale
    from experiments.lora_ppo.runner import gap_ends, score_baselines

    fixed = score_baselines(ENV_ID, TableScale("converged", 1, 1, scale.episodes, scale.resamples,
                                               rule_tasks=scale.rule_tasks),
                            eval_seed=task_seed(tasks))
    rule, _ = gap_ends(fixed)
    return {**tagged(scale.settings(), tasks), "rule_tasks": scale.rule_tasks, "rule": rule,
            "rows": {key: {"label": entry["label"], "returns": encode_scores(fixed.returns[key])}
                     for key, entry in fixed.entries.items()}}


def train_row(job: budgets.Job, tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """One learned row's run with one seed, as a kept file's content.

    ``tasks``: the set ``job`` scores its end on (``job.eval_seed`` its first seed), named
    in the content when it is not the validation set's.
    """
    result = budgets.run_job(job)
    return {**on_path(tagged({"env": job.env_id}, tasks), job.fused), "row": job.key,
            "seed": job.seed, "timesteps": job.scale.timesteps, "episodes": job.scale.episodes,
            "seconds": result["seconds"], "cpu_seconds": result["cpu_seconds"],
            "returns": encode_scores(result["curve"][-1]["returns"])}


def _task(item: tuple[Any, ...]) -> dict[str, Any]:
    kind, argument, *tasks = item
    return score_fixed(argument, *tasks) if kind == "fixed" else train_row(argument, *tasks)


def _name(item: tuple[str, int | None]) -> str:
    """A run's name: ``fixed`` (the fixed rows), or the row and its seed."""
    return "fixed" if item[0] == "fixed" else f"{item[0]} seed {item[1]}"


def _describe(task: tuple[str, Any]) -> str:
    return "fixed" if task[0] == "fixed" else _name((task[1].key, task[1].seed))


def report(out: Path, scale: str | Scale = "default", jobs: int = 2,
           rows: Sequence[str] = ROWS, log: Any = print,
           address: str | None = None, tasks: str = DEFAULT_TASKS,
           fused: bool = False) -> list[Path]:
    """Train and score what is not kept yet, then write the report; returns its paths.

    ``tasks``: the task set every row is scored on (:mod:`experiments.shared.task_sets`):
    ``validation`` (the committed report) or ``test``, whose runs are kept apart
    (``converged_runs_test/``, their files naming the set) and whose gap's rule end is
    still chosen on the validation tasks. The steps (:data:`STEPS`) are the stop mark read
    on the validation curve. ``fused``: the learned rows on FastPPO's fused path (module
    docstring), kept in ``converged_runs_fused/`` (``converged_runs_test_fused/``) and
    reported in ``converged_FlightPlanner-v1_fused.md`` and ``.csv``.

    Raises:
        ValueError: A bad scale, row or task set, or a kept file of other settings (before
            any run).
    """
    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    unknown = [key for key in rows if key not in BUDGET_ROWS]
    if unknown or not rows:
        raise ValueError(f"rows: expected keys of {list(BUDGET_ROWS)}, got "
                         f"{list(rows)!r}")
    chosen = SCALES[scale] if isinstance(scale, str) else scale
    runs = runs_folder(tasks, fused)
    folder = Path(out) / runs
    settings = tagged(chosen.settings(), tasks)
    items: list[tuple[str, int | None]] = [("fixed", None)]
    items += [(key, seed) for seed in range(chosen.seeds) for key in rows]
    # the fixed rows are the same on either path: the exact runs' folder keeps them
    paths = {_name(item): Path(out) / runs_folder(tasks) / FIXED_FILE if item[0] == "fixed"
             else run_file(folder, item[0], item[1] or 0) for item in items}
    keeper = Runs(path=paths.__getitem__, settings=lambda name: {
        **settings, "rule_tasks": chosen.rule_tasks} if name == "fixed"
        else on_path(settings, fused))
    for name in paths:  # a kept file of other settings is refused before any run
        keeper.read(name)
    extra = () if tasks == DEFAULT_TASKS else (tasks,)  # the validation units as they were
    units = [("fixed", chosen, *extra) if key == "fixed" else
             ("row", budgets.Job(ENV_ID, key, seed or 0, chosen.budget_scale(),
                                 task_seed(tasks), fused), *extra)
             for key, seed in items]
    log(f"converged: runs kept in {folder}")
    contents = run_units(_task, units, jobs=jobs, address=address, describe=_describe,
                         keeper=keeper, label="converged", log=log)
    kept = dict(zip(items, contents, strict=True))
    table = kept[("fixed", None)]
    fixed = Fixed({key: entry["label"] for key, entry in table["rows"].items()},
                  {key: decode_scores(entry["returns"]) for key, entry in table["rows"].items()},
                  table["rule"])
    learned = {key: np.array([decode_scores(kept[(key, seed)]["returns"])
                              for seed in range(chosen.seeds)]) for key in rows}
    minutes = {key: float(np.mean([kept[(key, seed)]["seconds"]
                                   for seed in range(chosen.seeds)])) / 60 for key in rows}
    # the CPU time where every run of a row has it (runs kept before it was recorded: not)
    cpu_minutes = {key: float(np.mean([kept[(key, seed)]["cpu_seconds"]
                                       for seed in range(chosen.seeds)])) / 60 for key in rows
                   if all("cpu_seconds" in kept[(key, seed)] for seed in range(chosen.seeds))}
    markdown, columns = render(learned, fixed, chosen, minutes, tasks, runs,
                               cpu_minutes=cpu_minutes, fused=fused,
                               fixed_runs=runs_folder(tasks))
    name = ENV_ID.split("/")[-1] + path_suffix(fused)
    return write_files_atomic(out, {f"converged_{name}.md": markdown,
                                    f"converged_{name}.csv": columns})


def main(argv: list[str] | None = None) -> None:
    """Run the experiment at ``--scale`` and write its report."""
    parser = argparse.ArgumentParser(prog="python -m experiments.converged",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--rows", nargs="+", choices=list(BUDGET_ROWS),
                        default=list(ROWS), help=f"learned rows (default {' '.join(ROWS)})")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    parser.add_argument("--tasks", choices=list(TASK_SETS), default=DEFAULT_TASKS,
                        help="the task set every row is scored on: validation (default; the "
                             "committed report) or test (the rule end still chosen on "
                             "validation)")
    parser.add_argument("--ppo-path", choices=("exact", "fused"), default="exact",
                        help="FastPPO's path: exact (default; SB3's updates bit for bit, the "
                             "committed runs) or fused (fused_loss=True, float-close; kept "
                             "and reported apart, *_fused)")
    add_scheduling_arguments(parser)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: expected an integer >= 1, got {args.jobs}")
    try:
        with scheduling(args, parser.prog):  # a failure, --unit: one line, exit 1
            report(args.out, args.scale, jobs=args.jobs, rows=args.rows, address=args.address,
                   tasks=args.tasks, fused=args.ppo_path == "fused")
    except (ValueError, ConnectionError) as error:
        parser.exit(2, f"python -m experiments.converged: error: {error}\n")
