"""Fit ToolBench's prior from logs, teach the ``lora/bayes`` row with it, score and pair.

Each unit is one of:

* ``fixed``: the tables' fixed rows on the evaluation tasks
  (:func:`experiments.lora_ppo.runner.score_baselines`; the best fixed row and the
  planner are the gap's ends, :func:`~experiments.lora_ppo.runner.gap_ends`; the Bayes
  reference is the true-prior teacher), and the learned-prior pipeline's teacher built
  from the *true* parameters (:func:`agents.planning.learned_prior.true_parameters`: its
  own particles drawn by :meth:`~agents.planning.learned_prior.FittedToolBench.draw`),
  the control that shows what the pipeline loses when the fit is exact;
* ``true`` seed ``s``: the ``lora/bayes`` row as the tables train it (:func:`train_taught`
  with the env's Bayes reference is :func:`agents.learners.training.train` for ``lora``,
  bit for bit: ``tests/test_learned_prior.py``), scored;
* ``learned`` (steps ``n``, seed ``s``): ``n`` steps of the uniform random allocator
  logged on the batched env (reset seed ``LOG_TASK_SEED + 1000 s``), the parameters
  fitted (:func:`agents.planning.learned_prior.fit`), the learned-prior teacher built and
  scored, and the same row taught by it (:func:`train_taught`, the same seed, traces,
  DAgger rounds and fits; only the teacher differs), scored.

On FlightPlanner-v1 (``--env FlightPlanner-v1``, a
:class:`~experiments.learned_prior.settings.FlightScale`) the fit is
:func:`agents.planning.learned_prior_flight.fit` on the logs of FlightPlanner-v1's
batched env, the teachers are :class:`~agents.planning.flight_bayes.BayesFlightPlanner`'s,
and by default only the teachers are scored (no ``true`` units, no students; the
``lora/bayes`` row is ToolBench's alone in the tables).

``python -m experiments.learned_prior [--env ENV] [--smoke] [--students] [--jobs N]
[--out DIR] [--address ADDRESS]`` writes ``learned_prior.md`` (ToolBench-v0, the default) or
``learned_prior_FlightPlanner-v1.md`` into ``DIR`` (default ``benchmarks/results``), all
or nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.utils import set_random_seed

from agents.evaluation import evaluate
from agents.learners.common.policies import AllocatorPolicy, load_base
from agents.learners.dagger import joined, student_traces
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import (
    SupervisedConfig,
    policy_for,
    relative_costs,
    teacher_traces,
    train_supervised,
)
from agents.learners.training import (
    DEFAULT_TORCH_THREADS,
    TrainedAllocator,
    configure_torch_threads,
    threads,
)
from agents.planning import bayes_planner
from agents.planning import learned_prior_flight as flight_prior
from agents.planning.learned_prior import FittedToolBench, fit, log_random, true_parameters
from agents.seeds import LOG_TASK_SEED, TRACE_TASK_SEED
from experiments.learned_prior.report import render, render_flight
from experiments.learned_prior.settings import (
    DEFAULT,
    ENV_ID,
    ENVS,
    FLIGHT_NAME,
    FLIGHT_STUDENTS,
    FLIGHT_STUDENTS_NAME,
    LOG_ENVS,
    NAME,
    OUT,
    ROW,
    FlightScale,
    Scale,
    env_of,
)
from experiments.lora_ppo.runner import LEARNED_ROWS, gap_ends, score_baselines
from experiments.lora_ppo.runner import Scale as TableScale
from experiments.shared.study import study_main, write_study

Unit = tuple[str, int, int, Scale]


def row_config(scale: Scale) -> SupervisedConfig:
    """The row's supervised settings at ``scale`` (its teacher, DAgger rounds and episodes).

    On FlightPlanner-v1, whose tables have no ``lora/bayes`` row, the settings the row
    would have there: the Bayes teacher, 2 DAgger rounds of a third of the episodes.
    """
    if isinstance(scale, FlightScale):
        return replace(scale.supervised, teacher="bayes", dagger_rounds=2,
                       dagger_episodes=max(1, scale.supervised.episodes // 3))
    arguments = LEARNED_ROWS[ROW].arguments(ENV_ID, scale.supervised)
    assert arguments is not None and set(arguments) == {"supervised"}  # ToolBench has both
    return arguments["supervised"]


def fit_taught(policy: AllocatorPolicy, env: gym.Env, config: SupervisedConfig, teacher: Any,
               seed: int, trace_seed: int) -> list[dict[str, float]]:
    """:func:`agents.learners.dagger.fit_supervised` with ``teacher`` as its teacher.

    The same steps (the teacher's traces on ``trace_seed``'s tasks, a fit, then
    ``config.dagger_rounds`` rounds of student episodes labelled by the teacher, each
    followed by a fit on all the data, with the same minibatch seeds), the teacher given
    instead of built from ``config.teacher``.
    """
    traces = teacher_traces(teacher, env, config.episodes, trace_seed, config.gamma)
    costs = relative_costs(env)
    history = train_supervised(policy, traces, costs, config, seed=seed)
    for round_ in range(config.dagger_rounds):
        traces = joined(traces, student_traces(policy, teacher, env, config.dagger_episodes,
                                               config.gamma))
        round_seed = int(np.random.SeedSequence([seed, round_ + 1]).generate_state(1)[0])
        history += train_supervised(policy, traces, costs, config, seed=round_seed)
    return history


def train_taught(seed: int, supervised: SupervisedConfig,
                 teacher: Callable[[gym.Env], Any], env_id: str = ENV_ID) -> TrainedAllocator:
    """``train(ENV_ID, "lora", ..., seed=seed, supervised=supervised)`` with another teacher.

    :func:`agents.learners.training.train`'s own steps for ``lora`` (seeded, one torch
    thread, the shipped pretrained base, the supervised stage with DAgger on the traces of
    ``TRACE_TASK_SEED + seed``), the teacher ``teacher(env)`` (built after the policy, as
    the row builds its own).
    """
    with threads(DEFAULT_TORCH_THREADS):
        set_random_seed(seed)
        env = gym.make(env_id)
        policy = policy_for(env, base=load_base(pretrained_base_path(env_id)))
        fit_taught(policy, env, supervised, teacher(env), seed=seed,
                   trace_seed=TRACE_TASK_SEED + seed)
        env.close()
    return TrainedAllocator(policy, env_id, {}, "lora", seed, 0, "pretrained")


def log_seed(seed: int) -> int:
    """The reset seed of training seed ``seed``'s logs (every size starts there)."""
    return LOG_TASK_SEED + 1000 * seed


def fitted_for(steps: int, seed: int) -> FittedToolBench:
    """The parameters fitted on ``steps`` logged steps of ``seed``'s log (ToolBench-v0)."""
    env = gym.make(ENV_ID)
    fitted = fit(log_random(None, steps, log_seed(seed), n_envs=LOG_ENVS), env)
    env.close()
    return fitted


def parameters(fitted: FittedToolBench) -> dict[str, Any]:
    """The fitted parameters as JSON values (the report's table)."""
    return {"stage_counts": list(fitted.stage_counts), "stage_skills": list(fitted.stage_skills),
            "answer_skills": list(fitted.answer_skills), "difficulty": list(fitted.difficulty),
            "capabilities": fitted.capabilities.tolist(), "costs": fitted.costs.tolist(),
            "flops": fitted.flops.tolist(), "names": list(fitted.names),
            "episodes": fitted.episodes,
            "steps": fitted.steps, "clears": fitted.clears}


def flight_fitted_for(steps: int, seed: int, scale: FlightScale
                      ) -> flight_prior.FittedFlight:
    """FlightPlanner-v1's parameters fitted on ``steps`` logged steps of ``seed``'s log."""
    env = gym.make(flight_prior.ENV_ID)
    fitted = flight_prior.fit(flight_prior.log_flight(steps, log_seed(seed), n_envs=LOG_ENVS),
                              env, n_sim=scale.n_sim, max_evaluations=scale.fit_evaluations)
    env.close()
    return fitted


def flight_parameters(fitted: flight_prior.FittedFlight) -> dict[str, Any]:
    """FlightPlanner's fitted parameters as JSON values (the report's table)."""
    law = fitted.law
    return {"edge_probability": law.edge_probability, "fare_factor": list(law.fare_factor),
            "slack": list(law.slack), "strengths": fitted.strengths.tolist(),
            "costs": fitted.costs.tolist(), "flops": fitted.flops.tolist(),
            "names": list(fitted.names), "episodes": fitted.episodes, "steps": fitted.steps,
            "first_turns": fitted.first_turns, "distance": fitted.distance}


def _scored(allocator: Any, scale: Scale) -> dict[str, Any]:
    result = evaluate(allocator, env_of(scale), episodes=scale.episodes, seed=scale.eval_seed)
    return {"returns": list(result.returns),
            "success": float(result.summary(n_resamples=10)["success_rate"])}


def run_unit(unit: Unit) -> dict[str, Any]:
    """One unit of the module docstring's list."""
    configure_torch_threads()
    kind, steps, seed, scale = unit
    if isinstance(scale, FlightScale):
        return _flight_unit(unit)
    start = time.perf_counter()
    if kind == "fixed":
        fixed = score_baselines(ENV_ID, TableScale("learned_prior", 1, 1, scale.episodes,
                                                   100, rule_tasks=scale.rule_tasks),
                                eval_seed=scale.eval_seed)
        rule, planner = gap_ends(fixed)
        env = gym.make(ENV_ID)
        control = _scored(true_parameters(env).teacher(env, scale.particles), scale)
        return {"kind": kind, "rule": list(fixed.returns[rule]),
                "rule_label": fixed.entries[rule]["label"],
                "planner": list(fixed.returns[planner]),
                "bayes": list(fixed.returns["bayes-planner"]),
                "control": control["returns"], "true": parameters(true_parameters(env))}
    config = row_config(scale)
    if kind == "true":
        student = train_taught(seed, config, bayes_planner)
        return {"kind": kind, "steps": 0, "seed": seed, "student": _scored(student, scale),
                "seconds": time.perf_counter() - start}
    fitted = fitted_for(steps, seed)
    fitting = time.perf_counter() - start
    teacher = _scored(fitted.teacher(gym.make(ENV_ID), scale.particles), scale)
    student = train_taught(seed, config,
                           lambda env: fitted.teacher(env, scale.particles))
    return {"kind": kind, "steps": steps, "seed": seed, "fitted": parameters(fitted),
            "teacher": teacher, "student": _scored(student, scale),
            "fit_seconds": fitting, "seconds": time.perf_counter() - start}


def _flight_unit(unit: Unit) -> dict[str, Any]:
    """:func:`run_unit` on FlightPlanner-v1 (a :class:`FlightScale`)."""
    kind, steps, seed, scale = unit
    assert isinstance(scale, FlightScale)
    env_id = env_of(scale)
    start = time.perf_counter()
    if kind == "fixed":
        fixed = score_baselines(env_id, TableScale("learned_prior", 1, 1, scale.episodes,
                                                   100, rule_tasks=scale.rule_tasks),
                                eval_seed=scale.eval_seed)
        rule, planner = gap_ends(fixed)
        env = gym.make(env_id)
        control = _scored(flight_prior.true_parameters(env).teacher(env, scale.particles),
                          scale)
        return {"kind": kind, "rule": list(fixed.returns[rule]),
                "rule_label": fixed.entries[rule]["label"],
                "planner": list(fixed.returns[planner]),
                "bayes": list(fixed.returns["bayes-planner"]),
                "control": control["returns"],
                "true": flight_parameters(flight_prior.true_parameters(env)),
                "seconds": time.perf_counter() - start}
    config = row_config(scale)
    if kind == "true":
        student = train_taught(seed, config, bayes_planner, env_id)
        return {"kind": kind, "steps": 0, "seed": seed, "student": _scored(student, scale),
                "seconds": time.perf_counter() - start}
    fitted = flight_fitted_for(steps, seed, scale)
    fitting = time.perf_counter() - start
    teacher = _scored(fitted.teacher(gym.make(env_id), scale.particles), scale)
    result = {"kind": kind, "steps": steps, "seed": seed, "fitted": flight_parameters(fitted),
              "teacher": teacher, "fit_seconds": fitting,
              "teacher_seconds": time.perf_counter() - start - fitting}
    if scale.students:
        student = train_taught(seed, config,
                               lambda env: fitted.teacher(env, scale.particles), env_id)
        result["student"] = _scored(student, scale)
    return {**result, "seconds": time.perf_counter() - start}


def _describe(unit: Unit) -> str:
    kind, steps, seed, _ = unit
    if kind == "fixed":
        return "fixed rows"
    return f"true prior seed {seed}" if kind == "true" else f"{steps:,} steps seed {seed}"


def units_of(scale: Scale) -> list[Unit]:
    """Every unit of ``scale``: the fixed rows, then each seed's true and learned priors.

    A :class:`FlightScale` without students has no ``true`` units.
    """
    true = not isinstance(scale, FlightScale) or scale.students
    return [("fixed", 0, 0, scale)] + [
        unit for seed in range(scale.seeds) for unit in
        [*([("true", 0, seed, scale)] if true else []),
         *(("learned", steps, seed, scale) for steps in scale.sizes)]]


def report(out: Path = OUT, jobs: int = 2, scale: Scale = DEFAULT, address: str | None = None,
           log: Any = print, command: str | None = None) -> list[Path]:
    """Run every unit and write ``learned_prior.md`` into ``out``; returns the paths.

    ``jobs``, ``address``: where the units run (:func:`experiments.shared.study.write_study`,
    which keeps them until the file is written). ``command``: the command line the file
    says made it.
    """
    units = units_of(scale)
    made = command or "python -m experiments.learned_prior"

    def files(results: list[Any]) -> dict[str, str]:
        if isinstance(scale, FlightScale):
            return {FLIGHT_STUDENTS_NAME if scale.students else FLIGHT_NAME: render_flight(
                results[0], results[1:], scale, row_config(scale), made)}
        return {NAME: render(results[0], results[1:], scale, row_config(scale), made)}

    experiment = ("learned_prior" if not isinstance(scale, FlightScale)
                  else "learned_prior_FlightPlanner-v1"
                  + ("_students" if scale.students else ""))
    return write_study(out, experiment, scale, run_unit, units, files, jobs=jobs,
                       address=address, describe=_describe, log=log)


def main(argv: list[str] | None = None) -> None:
    """Run the study and write its file (``--env``: ToolBench-v0 or FlightPlanner-v1)."""
    import argparse
    import sys

    given = sys.argv[1:] if argv is None else list(argv)
    prog = "python -m experiments.learned_prior"
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    parser.add_argument("--env", choices=sorted(ENVS), default="ToolBench-v0",
                        help="the env family whose prior is fitted (default ToolBench-v0)")
    parser.add_argument("--smoke", action="store_true", help="the plumbing scale")
    parser.add_argument("--students", action="store_true",
                        help="FlightPlanner-v1's students too")
    known, rest = parser.parse_known_args(given)
    _, default, smoke, _ = ENVS[known.env]
    scale = smoke if known.smoke else default
    if known.students:
        if not isinstance(scale, FlightScale):
            raise SystemExit("--students: FlightPlanner-v1's option (ToolBench's runs train "
                             "the students always)")
        scale = (FLIGHT_STUDENTS if not known.smoke
                 else replace(scale, name=scale.name + "-students", students=True))

    def run(out: Path, jobs: int, address: str | None = None,
            command: str | None = None) -> list[Path]:
        return report(out, jobs, scale=scale, address=address,
                      command=" ".join([prog, *given]))

    study_main(prog, __doc__.splitlines()[0], OUT, rest, run, parents=[parser])
