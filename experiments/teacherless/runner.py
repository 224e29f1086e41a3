"""Screen the teacherless learners (issue #38, point 1) against plain PPO's committed curve.

Every row of :data:`~experiments.teacherless.settings.ROWS` asked for is trained
``scale.seeds`` times to ``scale.timesteps`` env steps with
:func:`agents.learners.training.train` (16 batched sub-envs, as PPO's committed curve) and
scored at its checkpoints and at the end on the tables' 400 evaluation tasks (task seed
0). Each run is kept as a JSON file in ``<out>/runs`` as it finishes
(:class:`experiments.shared.kept.Runs`), so a rerun trains only what is missing, one run
at a time (the machine is shared).

The table: for each row at its last checkpoint, the mean return and the share of the gap
from the best fixed row to the planner, each with a 95% interval over seeds and tasks
(:func:`experiments.shared.gaps.method_share`, the tables' own share code), the share of
each seed, and the difference of return to PPO paired over the same seeds and tasks. The
baseline is PPO's committed curve (``budgets_ToolBench-v0_ppo.csv``) at the same step
count, its first ``scale.seeds`` seeds. Written to ``<out>/teacherless.md`` and ``.json``
(:mod:`experiments.teacherless.report`).

**Held-out scoring** (``--test-episodes N``, issue #38's "on held-out tasks"): each final
policy is also scored on the first ``N`` test tasks (``TEST_TASK_SEED``,
:mod:`experiments.shared.task_sets`), which no choice reads: the rows, the step count and
every setting are chosen on the evaluation and validation tasks above. The table then
adds each row's test share (the gap's rule end still chosen on the validation tasks) and
its test return minus PPO's, paired over the seeds both have and the tasks; PPO's
committed curve was never scored there, so a test pairing needs the ``ppo`` row trained
again beside it. The screen itself (``N`` = 0, the default) scores no test task.

**Another env** (``--env cost_envs/FlightPlanner-v1``): the same rows and scoring on an env
whose gap ends need no profile or tier; no committed PPO screen exists there, so the
``ppo`` row, trained again beside the others, is the baseline (required), and the run
files name the env. **A setting of another experiment** (``--env
cost_envs/AgenticRouting-v0:appworld``, BoPO's AppWorld profile under its per-task budget;
``--env cost_envs/ExpertRouting-v1:mixed-low``, CORL's mixed profile under the low tier's
budget, scored by accuracy within it): the experiment that owns the env's gap
(:mod:`experiments.bopo.curve`, :mod:`experiments.corl.budgets`) gives the ``gym.make``
arguments every run trains on, scores each final policy on its own tasks of each reset
seed, and gives the gap's ends there, the rule end chosen on its validation tasks
(:mod:`experiments.teacherless.envs`); a run is scored at its end only, the ``ppo`` row is
required, and a row whose learner cannot act on the env's action space is refused before
any run.

``python -m experiments.teacherless [--rows KEY ...] [--out DIR] [--report-only]
[--seeds N] [--timesteps N] [--test-episodes N] [--env ID | ID:SETTING]``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agents.files import write_files_atomic
from agents.seeds import EVAL_TASK_SEED, TEST_TASK_SEED, VALIDATION_TASK_SEED
from experiments.budgets.settings import Scale
from experiments.shared.gaps import decode_scores, encode_scores
from experiments.shared.kept import Runs, run_file
from experiments.shared.scheduler import add_scheduling_arguments, run_units, scheduling
from experiments.teacherless.envs import OWNED, check_rows, owned
from experiments.teacherless.report import check_baseline, render
from experiments.teacherless.settings import ENV_ID, OUT, ROWS, SCREEN, SCREENED_ENVS


@dataclass(frozen=True)
class Job:
    """One training run: a row and a seed."""

    key: str
    seed: int
    scale: Scale
    validation_episodes: int = 400
    #: held-out test tasks the final policy is also scored on (0: none, the screen)
    test_episodes: int = 0
    env_id: str = ENV_ID

    def __str__(self) -> str:
        return f"{self.key} seed {self.seed}"


def run_job(job: Job) -> dict[str, Any]:
    """Train one row with one seed, scored at every checkpoint; its curve and wall time."""
    from agents.evaluation import evaluate
    from agents.learners.training import configure_torch_threads, train

    configure_torch_threads()
    row = ROWS[job.key]
    setting = owned(job.env_id)
    start = time.perf_counter()
    if setting is None:
        trained = train(job.env_id, row.method, job.scale.timesteps, seed=job.seed,
                        n_envs=job.scale.n_envs, evaluate_at=job.scale.checkpoints,
                        eval_episodes=job.scale.episodes, **dict(row.arguments))
    else:  # the owner's env; scored on its tasks below, so the curve is its end only
        trained = train(setting.env_id, row.method, job.scale.timesteps, seed=job.seed,
                        env_kwargs=setting.env_kwargs(), n_envs=job.scale.n_envs,
                        evaluate_at=(job.scale.timesteps,), eval_episodes=1,
                        **dict(row.arguments))
    seconds = time.perf_counter() - start

    def score(episodes: int, seed: int) -> list[float]:
        if setting is None:
            return list(evaluate(trained, job.env_id, episodes=episodes, seed=seed).returns)
        return list(setting.score(trained, episodes, seed))

    curve = (trained.curve if setting is None else
             [{**trained.curve[-1], "returns": score(job.scale.episodes, EVAL_TASK_SEED)}])
    # the validation tasks, where a choice among rows is made (not the evaluation tasks)
    validation = score(job.validation_episodes, VALIDATION_TASK_SEED)
    # the held-out tasks: scored, never read by a choice
    test = None if not job.test_episodes else score(job.test_episodes, TEST_TASK_SEED)
    return {"key": job.key, "seed": job.seed, "curve": curve, "seconds": seconds,
            "validation": validation, "test": test}


def _runs(out: Path, scale: Scale, validation_episodes: int = 400,
          test_episodes: int = 0, env_id: str = ENV_ID) -> Runs:
    def settings(name: str) -> dict[str, Any]:
        key, seed = name.rsplit(" seed ", 1)
        row = ROWS[key]
        # the scale but its seed count: a run is the same whichever seeds run beside it
        return {"key": key, "seed": int(seed), "timesteps": scale.timesteps,
                "checkpoints": list(scale.checkpoints), "episodes": scale.episodes,
                "n_envs": scale.n_envs, "validation_seed": VALIDATION_TASK_SEED,
                **({} if validation_episodes == 400 else
                   {"validation_episodes": validation_episodes}),
                # the screen's runs as they were; a held-out run names its test tasks
                **({} if not test_episodes else
                   {"test_episodes": test_episodes, "test_seed": TEST_TASK_SEED}),
                # ToolBench-v0's runs as they were; another env's name it
                **({} if env_id == ENV_ID else {"env": env_id}),
                "method": row.method, "arguments": repr(dict(row.arguments))}

    def encode(name: str, result: dict[str, Any]) -> dict[str, Any]:
        curve = [{**entry, "returns": encode_scores(entry["returns"])}
                 for entry in result["curve"]]
        validation, test = result.get("validation"), result.get("test")
        return {**settings(name), "seconds": result["seconds"], "curve": curve,
                "validation": None if validation is None else encode_scores(validation),
                **({} if test is None else {"test": encode_scores(test)})}

    def decode(content: dict[str, Any]) -> dict[str, Any]:
        curve = [{**entry, "returns": decode_scores(entry["returns"])}
                 for entry in content["curve"]]
        return {"key": content["key"], "seed": content["seed"], "curve": curve,
                "seconds": content["seconds"],
                # runs of the first screening round were not scored on validation tasks
                "validation": (None if content.get("validation") is None
                               else decode_scores(content["validation"])),
                "test": (None if content.get("test") is None
                         else decode_scores(content["test"]))}

    def path(name: str) -> Path:
        key, seed = name.rsplit(" seed ", 1)
        return run_file(Path(out) / "runs", key, int(seed))

    return Runs(path, settings, encode, decode)


def train_missing(keys: list[str], out: Path, scale: Scale, log: Any = print,
                  validation_episodes: int = 400, address: str | None = None,
                  test_episodes: int = 0, env_id: str = ENV_ID) -> list[dict[str, Any]]:
    """Every (row, seed) run where no kept file has it: one at a time, or on a Ray cluster."""
    unknown = [key for key in keys if key not in ROWS]
    if unknown:
        raise ValueError(f"rows: expected keys of {list(ROWS)}, got {unknown}")
    jobs = [Job(key, seed, scale, validation_episodes, test_episodes, env_id) for key in keys
            for seed in range(scale.seeds)]
    return run_units(run_job, jobs, describe=str,
                     keeper=_runs(out, scale, validation_episodes, test_episodes, env_id),
                     address=address, label="teacherless", log=log)


def report(out: Path = OUT, keys: list[str] | None = None, scale: Scale = SCREEN,
           kept_only: bool = False, log: Any = print, validation_episodes: int = 400,
           address: str | None = None, test_episodes: int = 0, env_id: str = ENV_ID
           ) -> list[Path]:
    """Train the rows ``keys`` (default all; what is kept is not retrained), write the table.

    ``kept_only``: train nothing; table the runs kept of seeds below ``scale.seeds`` (a
    row may then have fewer seeds than another). ``test_episodes``: each final policy also
    scored on that many test tasks (module docstring). ``env_id``: the env (ToolBench-v0 by
    default; another needs the ``ppo`` row, :func:`~experiments.teacherless.report.render`).
    Returns the paths.
    """
    keys = list(ROWS) if keys is None else list(keys)
    # before any run: the table would refuse them, or the learner the env
    check_baseline(keys, scale, env_id)
    check_rows(keys, env_id)
    if env_id in OWNED:  # scored on the owner's tasks at the end only (run_job)
        scale = replace(scale, checkpoints=())
    if kept_only:
        runs = _runs(out, scale, validation_episodes, test_episodes, env_id)
        kept = [runs.read(f"{key} seed {seed}") for key in keys for seed in range(scale.seeds)]
        results = [result for found, result in kept if found]
    else:
        results = train_missing(keys, out, scale, log, validation_episodes, address,
                                test_episodes, env_id)
    markdown, payload = render(results, scale, env_id)
    return write_files_atomic(out, {"teacherless.md": markdown,
                                    "teacherless.json": json.dumps(payload, indent=1)})


def main(argv: list[str] | None = None) -> None:
    """Train the rows asked for (what is not kept yet) and write the table."""
    parser = argparse.ArgumentParser(prog="python -m experiments.teacherless",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help=f"of {list(ROWS)}")
    parser.add_argument("--out", type=Path, default=OUT, help=f"results folder (default {OUT})")
    parser.add_argument("--report-only", action="store_true",
                        help="only the rows whose every run is kept already")
    parser.add_argument("--seeds", type=int, default=SCREEN.seeds,
                        help=f"training seeds per row (default {SCREEN.seeds})")
    parser.add_argument("--timesteps", type=int, default=SCREEN.timesteps,
                        help=f"requested env steps per run (default {SCREEN.timesteps:,}; "
                             "past it, also scored at 500,000)")
    parser.add_argument("--validation-episodes", type=int, default=400,
                        help="validation tasks each final policy is scored on (default 400)")
    parser.add_argument("--env", choices=SCREENED_ENVS, default=ENV_ID,
                        help=f"the env, or ID:SETTING as the experiment owning its gap sets "
                             f"it up (default {ENV_ID}; another needs the ppo row among "
                             "--rows, its only baseline)")
    parser.add_argument("--test-episodes", type=int, default=0,
                        help="held-out test tasks each final policy is also scored on "
                             "(default 0: none, the screen)")
    add_scheduling_arguments(parser)
    args = parser.parse_args(argv)
    if args.test_episodes < 0:
        parser.error(f"--test-episodes: expected an integer >= 0, got {args.test_episodes}")
    # the screen's checkpoints below the run's steps; one at the end where none is (a
    # curve of at least its final score: the table reads the last point)
    scale = replace(SCREEN, seeds=args.seeds, timesteps=args.timesteps, checkpoints=tuple(
        step for step in (*SCREEN.checkpoints, SCREEN.timesteps) if step < args.timesteps)
        or (args.timesteps,))
    try:
        with scheduling(args, parser.prog):  # a failure, --unit: one line, exit 1
            paths = report(args.out, args.rows, scale, kept_only=args.report_only,
                           validation_episodes=args.validation_episodes, address=args.address,
                           test_episodes=args.test_episodes, env_id=args.env)
    except (ValueError, ConnectionError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    for path in paths:
        print(path)
