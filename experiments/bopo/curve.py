"""AgenticRouting-v0's learning curves (AppWorld profile) to where each learned row stops improving.

Issue #23's converged budgets for BoPO's env: the table's AppWorld rows, PPO (λ=1) and BoPO
as in the paper (λ=0.5), each with 5 training seeds (each on its own training-task draw,
boundaries and, for BoPO, SFT warm start: :mod:`experiments.bopo.jobs`), are scored on
the same 1000 evaluation tasks (task seed 0) under the profile's per-task budget at each
checkpoint of :data:`SCALES` ``"curve"``. Every run is a
:class:`experiments.bopo.jobs.LearningRun`, and all of them are brought to a checkpoint
before any goes on to the next (each keeps its own random streams, so each trains what it
would train alone): a run stopped early still holds every row's curve to the last
checkpoint reached, and ``progress`` keeps it on disk after each one.

The table is :func:`experiments.budgets.report.curve_table`'s: per checkpoint the env steps,
gradient steps (:func:`agents.callbacks.gradient_steps`), the mean Eq. 1 return and the
share of the gap from the profile's best fixed rule to the planner
(:func:`experiments.bopo.gaps.best_rule`, as bopo's gap column), both with 95% intervals
over seeds and tasks, and where the row stops improving
(:func:`experiments.budgets.report.stops_improving`).

Outputs in ``out``: ``budgets_AgenticRouting-v0.md`` and ``.csv``, written together or not
at all (with ``tuned``, the tuned PPO of the equal-budget sweep alone, into
``budgets_AgenticRouting-v0_tuned.*``). ``python -m experiments.bopo.long --curve`` runs it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from agents.files import write_files_atomic
from agents.learners.bopo import draw_tasks
from agents.learners.bopo import env_kwargs as bopo_env_kwargs
from experiments.bopo.gaps import REFERENCE, RULES, best_rule
from experiments.bopo.jobs import (
    SCALES as BOPO_SCALES,
)
from experiments.bopo.jobs import (
    BopoScale,
    LearningRun,
    checkpoints_of,
    evaluate_on,
    profile_budget,
    scale_of,
    warm_start,
)
from experiments.bopo.report import label
from experiments.bopo.runner import learn_jobs, prepare_profile, table_keys, tuned_keys
from experiments.budgets.report import curve_table
from experiments.budgets.settings import Scale as CurveScale

PROFILE = "appworld"
NAME = "AgenticRouting-v0"
#: The table's AppWorld rows (the ``long`` scale's, :data:`experiments.bopo.jobs.SCALES`)
#: scored along the way to four times its steps (1,310,720 per router, about an hour on
#: one core); ``smoke`` is plumbing for the tests.
SCALES = {
    "smoke": replace(BOPO_SCALES["smoke"], name="curve-smoke", ppo_lams=(1.0,),
                     scan_lams=(), linear_lams=(), scan_seeds=1, random_ps=(), patiences=(),
                     n_envs=1, timesteps=512, checkpoints=(0, 256)),
    "curve": replace(BOPO_SCALES["long"], name="curve", timesteps=1_310_720, random_ps=(),
                     patiences=(),
                     checkpoints=(0, 40_960, 81_920, 163_840, 327_680, 655_360)),
}


def _scale(scale: str | BopoScale) -> BopoScale:
    return scale_of(scale, SCALES)


def run_curves(scale: str | BopoScale = "curve", seed: int = 0, progress: Path | None = None,
               log: Callable[[str], None] = print, tuned: bool = False) -> dict[str, Any]:
    """Train and score every (row, seed) at every checkpoint; the curves as JSON values.

    ``progress``: a JSON file rewritten after every checkpoint with everything so far
    (what :func:`render` reads), so a run stopped early keeps its curves. ``tuned``: the
    profile's tuned rows (:func:`experiments.bopo.runner.tuned_keys`) instead of the table's.
    """
    sc = _scale(scale)
    start = time.perf_counter()
    prepared = prepare_profile(PROFILE, sc, seed)
    rule = prepared.rule or best_rule({key: [prepared.returns[key]] for key in RULES})
    log(f"{PROFILE}: budget ${prepared.budget:.4f}, fixed rows in {prepared.seconds:.0f}s; "
        f"best fixed rule {rule}")
    wanted = tuned_keys(PROFILE) if tuned else table_keys(sc)
    runs = []
    for s in range(seed, seed + sc.seeds):
        warm = warm_start(PROFILE, sc, s, prepared.budget, scored=False)
        runs += [LearningRun(job) for job in learn_jobs(warm, sc, prepared.budget, seed)
                 if job.key in wanted]
    runs.sort(key=lambda run: (wanted.index(run.job.key), run.job.seed))
    data: dict[str, Any] = {
        "profile": PROFILE, "scale": sc.name, "budget": prepared.budget, "rule_key": rule,
        "rule": list(prepared.returns[rule]), "planner": list(prepared.returns[REFERENCE]),
        "n_envs": sc.n_envs, "resamples": sc.resamples, "suffix": "_tuned" if tuned else "",
        "runs": []}
    for checkpoint in checkpoints_of(runs[0].job):
        for run in runs:
            entry = run.advance(checkpoint)
            log(f"{run.job.key} seed {run.job.seed}: {entry['timesteps']} steps, return "
                f"{sum(entry['returns']) / len(entry['returns']):.3f} "
                f"({run.seconds:.0f}s so far)")
        data["runs"] = [{"key": run.job.key, "seed": run.job.seed, "seconds": run.seconds,
                         "curve": list(run.scored)} for run in runs]
        data["seconds"] = time.perf_counter() - start
        if progress is not None:
            _write_json(progress, data)
    for run in runs:
        run.finish()
    return data


def env_kwargs(scale: str | BopoScale = "curve") -> dict[str, Any]:
    """The env the curves' rows train and are scored on, as ``gym.make`` arguments.

    The profile under its per-task budget (:func:`experiments.bopo.jobs.profile_budget`
    of the base training draw, as :func:`run_curves`' ``prepare_profile``), requested
    calls past it dropped (:func:`agents.learners.bopo.env_kwargs`): for a trainer that
    builds its own envs (:mod:`experiments.teacherless`).
    """
    return _env_kwargs(_scale(scale))


@cache
def _env_kwargs(sc: BopoScale) -> dict[str, Any]:
    return bopo_env_kwargs(PROFILE, profile_budget(PROFILE, sc))


def score(allocator: Any, episodes: int, seed: int, scale: str | BopoScale = "curve"
          ) -> list[float]:
    """``allocator``'s returns on the first ``episodes`` tasks of reset seed ``seed``.

    The tasks and the env are the curves' (:func:`experiments.bopo.jobs.evaluate_on` of
    ``draw_tasks``, under :func:`env_kwargs`' budget), those :func:`gap_ends` scores.
    """
    budget = env_kwargs(scale)["budget"]
    return list(evaluate_on(lambda _env: allocator, PROFILE,
                            draw_tasks(PROFILE, episodes, seed), budget, seed).returns)


def gap_ends(episodes: int, seed: int, scale: str | BopoScale = "curve"
             ) -> tuple[list[float], list[float]]:
    """The curves' gap ends on ``episodes`` tasks of reset seed ``seed``: rule, planner.

    The best fixed rule chosen on the validation tasks whatever ``seed`` is
    (:func:`experiments.bopo.runner.prepare_profile`), as :func:`run_curves` does.
    """
    prepared = prepare_profile(PROFILE, replace(_scale(scale), n_eval=episodes), 0, seed)
    rule = prepared.rule or best_rule({key: [prepared.returns[key]] for key in RULES})
    return list(prepared.returns[rule]), list(prepared.returns[REFERENCE])


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """``data`` into ``path`` through a temporary file: a reader sees all of it or the last."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)


def render(data: Mapping[str, Any]) -> dict[str, str]:
    """The table and the CSV of :func:`run_curves`' data: file name -> text."""
    runs = data["runs"]
    if not runs:
        raise ValueError("bopo curves: expected at least one scored run, got none")
    steps = [entry["timesteps"] for entry in runs[0]["curve"]]
    keys = list(dict.fromkeys(run["key"] for run in runs))
    seeds = len({run["seed"] for run in runs})
    scale = CurveScale(data["scale"], max(steps), seeds, tuple(steps),
                       episodes=len(data["rule"]), n_envs=data["n_envs"],
                       resamples=data["resamples"])
    setup = (f"AppWorld profile under its per-task budget (${data['budget']:.4f}); "
             f"{seeds} training seeds x {max(steps):,} RL steps per router (MaskablePPO, "
             f"{data['n_envs']} envs; BoPO from each seed's SFT warm start, its point at 0 "
             "steps, PPO from scratch); the best fixed row is "
             f"{label(data['rule_key'])}. Total wall time {data['seconds'] / 60:.0f} min in "
             "one process")
    markdown, columns = curve_table(f"{NAME} ({PROFILE})", runs, data["rule"],
                                    data["planner"], scale,
                                    labels={key: label(key) for key in keys},
                                    setup=setup)
    name = f"budgets_{NAME}{data.get('suffix', '')}"
    return {f"{name}.md": markdown, f"{name}.csv": columns}


def report(out: Path, scale: str | BopoScale = "curve", progress: Path | None = None,
           log: Callable[[str], None] = print, tuned: bool = False) -> list[Path]:
    """Run the curves and write their table and CSV into ``out``, all or nothing.

    ``tuned``: the tuned rows, into ``budgets_AgenticRouting-v0_tuned.md``/``.csv``.
    """
    return write_files_atomic(out, render(run_curves(scale, progress=progress, log=log,
                                                     tuned=tuned)))


def report_from(progress: Path, out: Path) -> list[Path]:
    """The table and CSV of a progress file (a run stopped after some checkpoint)."""
    return write_files_atomic(out, render(json.loads(progress.read_text(encoding="utf-8"))))


__all__: Sequence[str] = ["SCALES", "env_kwargs", "gap_ends", "render", "report", "report_from",
                          "run_curves", "score"]
