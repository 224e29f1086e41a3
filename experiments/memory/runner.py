"""Does memory pay? PPO with and without memory at the same settings (issue #23, point 5).

``python -m experiments.memory [--scale smoke|default|toolbench|flight] [--out DIR]
[--jobs N] [--address ADDRESS]``, or ``python -m experiments memory``.

Three learners, identical but for memory: PPO with ``MlpPolicy`` (the control; the
project's :class:`~agents.learners.ppo.FastPPO`, which trains SB3 ``PPO``'s weights bit for
bit), sb3-contrib's ``RecurrentPPO`` with ``MlpLstmPolicy``
(:class:`agents.learners.common.recurrent.RecurrentPPO`, which trains on ``MultiBinary``
actions), and the same PPO on SB3's ``VecFrameStack`` of the episode's last
:data:`MAX_DECISIONS` observations: an episode has at most that many decisions, so this
policy sees every observation of its episode so far (perfect memory, at PPO's speed). All
take the project's PPO settings (:data:`agents.learners.PPO_SETTINGS`: 512 steps per
sub-env and rollout, minibatch 64, clip 0.2, entropy 0.01, value 0.5, GAE 0.95; SB3's
learning rate 3e-4 and 10 epochs), the same sub-envs of the env's native batched env and
the same training tasks (:func:`agents.seeds.train_task_seeds`), and the same env steps.
The recurrent policy puts an LSTM (sb3-contrib's default, 256 units, one for the actor,
one for the critic) between the observation and the same 64-64 heads. (The tables' PPO
row is the project's ``AllocatorPolicy``, a shared 64-64 encoder: not this row.)

Each run is scored on the tables' evaluation tasks (``episodes`` tasks of task seed 0,
:func:`agents.evaluation.evaluate`, which starts each episode with no recurrent state and
``episode_start=True`` and threads the LSTM state through the episode; the history
learner on Gymnasium's ``FrameStackObservation``, laid out as ``VecFrameStack`` lays it).

The envs are where memory could pay: FlightPlanner-v0, whose observation has no
verification-history slots (memory could carry what v1's slots carry); FlightPlanner-v1,
with the slots (the control: memory should buy nothing there); ToolBench-v0, whose Bayes
reference remembers the difficulties seen. Scales: ``default`` (RecurrentPPO against PPO
at 8,192 steps, where neither moves: the report says so), ``toolbench`` (PPO and the
history PPO at 500k steps, where PPO stops improving on ToolBench-v0) and ``flight`` (the
same at 2M steps on FlightPlanner-v0, where PPO stops improving on v1); RecurrentPPO costs
6-9x PPO's CPU a step here, hours a run at those budgets, and is left out of them. Their
runs are kept as they finish (:mod:`experiments.shared.kept`, in ``<out>/memory_runs/<scale>/``),
so a scale longer than one sitting completes over several calls.

Per env the report gives each learner's mean Eq. 1 return with its 95% interval over
seeds and tasks (:func:`cost_envs.metrics.bootstrap_mean_ci`, two levels) and the
difference learner - PPO with its interval
(:func:`~experiments.memory.report.paired_difference`: seeds of each learner resampled
independently, tasks resampled with one draw for both, so the difference is paired over
tasks), plus the wall time of each run. On FlightPlanner the one-turn rule (the tables'
best fixed row) is scored on the same tasks for scale.

Outputs in ``out``, written together or not at all (:func:`agents.files.write_files_atomic`):
``memory.md`` (``memory_<scale>.md`` but at the default scale: the table, steps, machine,
command) and ``memory.csv`` (env, learner, seed, steps, wall times and the per-task
returns, :func:`experiments.shared.gaps.encode_scores`; the rule's returns as learner ``rule``).
The table is rendered (:mod:`experiments.memory.report`) from what the CSV holds
(``render(read_csv(csv), ...)``), so every figure in it can be recomputed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from agents.files import write_files_atomic
from agents.learners import PPO_SETTINGS
from cost_envs.config import integer
from experiments.memory.report import read_csv, render, write_csv
from experiments.memory.settings import (
    COMMAND,
    ENVS,
    EPOCHS,
    LEARNERS,
    LEARNING_RATE,
    MAX_DECISIONS,
    RULE_ENVS,
    SCALES,
    Scale,
)
from experiments.shared.common import check_writable, machine, quiet
from experiments.shared.gaps import decode_scores, encode_scores
from experiments.shared.kept import Runs, run_file
from experiments.shared.scheduler import add_scheduling_arguments, run_units, scheduling


@dataclass(frozen=True)
class Job:
    """One training run and its evaluation."""

    env_id: str
    learner: str
    seed: int
    scale: Scale


def build_model(env_id: str, learner: str, n_envs: int, seed: int) -> Any:
    """The untrained learner on ``n_envs`` batched sub-envs seeded as ``train`` seeds them.

    PPO is the project's :class:`~agents.learners.ppo.FastPPO`, which trains SB3 ``PPO``'s
    weights bit for bit in less time; ``history`` is the same PPO on SB3's
    ``VecFrameStack`` of the episode's last :data:`MAX_DECISIONS` observations.
    """
    from stable_baselines3.common.vec_env import VecFrameStack

    from agents.learners.common.recurrent import RecurrentPPO
    from agents.learners.ppo import FastPPO
    from agents.learners.training import quiet_logger
    from agents.seeds import train_task_seeds
    from agents.vec_env import BatchedVecEnv, make_batched_vec_env

    if learner not in LEARNERS:
        raise ValueError(f"learner: expected one of {list(LEARNERS)}, got {learner!r}")
    venv = make_batched_vec_env(env_id, n_envs)
    seeds = train_task_seeds(seed, n_envs)
    if n_envs == 1:  # as agents.learners.training.train seeds its env
        venv.seed(seeds[0])
    else:
        cast(BatchedVecEnv, venv.unwrapped).seed_each(seeds)  # make_batched_vec_env's
    if learner == "history":
        venv = VecFrameStack(venv, MAX_DECISIONS[env_id])
    cls = RecurrentPPO if learner == "recurrent" else FastPPO
    model = cls(LEARNERS[learner][1], venv, seed=seed, device="cpu", n_epochs=EPOCHS,
                learning_rate=LEARNING_RATE, **cast(dict[str, Any], PPO_SETTINGS))
    quiet_logger(model)
    return model


def evaluation_env(env_id: str, learner: str) -> Any:
    """The env a learner is scored on: ``history`` sees what ``VecFrameStack`` showed it.

    Gymnasium's ``FrameStackObservation`` with zero padding, flattened: the last
    :data:`MAX_DECISIONS` observations oldest first, zeros before the episode's first, as
    SB3's ``VecFrameStack`` lays out a vector observation (``tests/test_memory.py``).
    """
    import gymnasium as gym
    from gymnasium.wrappers import FlattenObservation, FrameStackObservation

    env = gym.make(env_id)
    if learner == "history":
        env = FlattenObservation(FrameStackObservation(env, MAX_DECISIONS[env_id],
                                                       padding_type="zero"))
    return env


def run_job(job: Job) -> dict[str, Any]:
    """Train one learner with one seed, score it on the evaluation tasks; its returns."""
    from agents.evaluation import evaluate
    from agents.learners.training import configure_torch_threads

    configure_torch_threads()
    start = time.perf_counter()
    model = build_model(job.env_id, job.learner, job.scale.n_envs, job.seed)
    model.learn(job.scale.timesteps)
    trained = time.perf_counter()
    env = evaluation_env(job.env_id, job.learner)
    try:
        result = evaluate(model, env, episodes=job.scale.episodes, seed=0)
    finally:
        env.close()
    model.get_env().close()
    return {"env": job.env_id, "learner": job.learner, "seed": job.seed,
            "timesteps": int(model.num_timesteps), "train_seconds": trained - start,
            "eval_seconds": time.perf_counter() - trained, "returns": list(result.returns)}


def rule_result(env_id: str, episodes: int) -> dict[str, Any]:
    """The one-turn rule on the evaluation tasks (FlightPlanner), as a run of learner ``rule``."""
    import gymnasium as gym

    from agents.baselines import FAMILY_BASELINES
    from agents.evaluation import AllocatorFactory, evaluate

    env = gym.make(env_id)
    # a family baseline is constructed as cls(env) (Allocator's own __init__ takes none)
    rule = cast(AllocatorFactory, FAMILY_BASELINES["one-turn"])
    start = time.perf_counter()
    try:
        returns = evaluate(rule(env), env, episodes, seed=0).returns
    finally:
        env.close()
    return {"env": env_id, "learner": "rule", "seed": 0, "timesteps": 0, "train_seconds": 0.0,
            "eval_seconds": time.perf_counter() - start, "returns": list(returns)}


def _name(job: Job) -> str:
    """A run's name: ``<Env>/<learner> seed <seed>`` (its kept file's key and seed)."""
    return f"{job.env_id.split('/')[-1]}/{job.learner} seed {job.seed}"


def job_settings(job: Job) -> dict[str, Any]:
    """What a kept run must have been run with to stand for ``job``."""
    return {"env": job.env_id, "learner": job.learner, "seed": job.seed,
            "asked_timesteps": job.scale.timesteps, "episodes": job.scale.episodes,
            "n_envs": job.scale.n_envs}


def reproduce(scale: Scale, jobs: int = 2, log: Callable[[str], None] = quiet,
              runs: Path | None = None, address: str | None = None) -> list[dict[str, Any]]:
    """Every (env, learner, seed) run, then the rule's runs, in table order.

    ``runs``: a folder where each run is kept as it finishes and from which kept runs are
    reused (:mod:`experiments.shared.kept`); ``None`` keeps nothing. The runs are units
    of :func:`experiments.shared.scheduler.run_units` (``jobs`` processes, or the Ray
    cluster at ``address``).
    """
    integer(jobs, "jobs", minimum=1)
    # The slow learner first, so the pool's two workers end together.
    order = sorted(scale.learners, key=lambda key: key != "recurrent")
    grid = [Job(env_id, key, seed, scale) for key in order
            for env_id in scale.envs for seed in range(scale.seeds)]
    jobs_of = {_name(job): job for job in grid}
    keeper = None if runs is None else Runs(
        path=lambda name: run_file(runs, name.split(" seed ")[0], jobs_of[name].seed),
        settings=lambda name: job_settings(jobs_of[name]),
        encode=lambda name, result: {**job_settings(jobs_of[name]), "result": {
            **result, "returns": encode_scores(result["returns"])}},
        decode=lambda kept: {**kept["result"],
                             "returns": list(decode_scores(kept["result"]["returns"]))})
    results = run_units(run_job, grid, jobs=jobs, address=address, keeper=keeper,
                        describe=_name, label="memory", log=log)
    finished = sorted(results,
                      key=lambda r: (scale.envs.index(r["env"]), list(LEARNERS).index(r["learner"]),
                                     r["seed"]))
    return [rule_result(env_id, scale.episodes) for env_id in scale.envs
            if env_id in RULE_ENVS] + finished


def report(out: Path, scale: str | Scale = "default", jobs: int = 2,
           log: Callable[[str], None] = quiet, address: str | None = None) -> list[Path]:
    """Run the experiment and write its report and CSV (:attr:`Scale.files`) together."""
    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    chosen = SCALES[scale] if isinstance(scale, str) else scale
    runs = Path(out) / "memory_runs" / chosen.name if chosen.keep else None
    columns = write_csv(reproduce(chosen, jobs=jobs, log=log, runs=runs, address=address))
    # The table from the CSV's (rounded) returns, so the two files agree to the digit.
    markdown, csv_name = chosen.files
    return write_files_atomic(out, {markdown: render(read_csv(columns), chosen, machine()),
                                    csv_name: columns})


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m experiments.memory``: parse, check ``--out``, run, write."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--scale", choices=tuple(SCALES), default="default")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: benchmarks/results, at the smoke "
                             "scale the git-ignored benchmarks/results/smoke)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default: 2)")
    add_scheduling_arguments(parser)
    parser.add_argument("--envs", default=None,
                        help=f"comma-separated env ids, some of {', '.join(ENVS)} (default: "
                             "the scale's)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: expected an integer >= 1, got {args.jobs}")
    scale = SCALES[args.scale]
    if args.envs is not None:
        try:
            scale = replace(scale, envs=tuple(e.strip() for e in args.envs.split(",")
                                              if e.strip()))
        except ValueError as error:
            parser.error(str(error))
    results_dir = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    out = args.out or (results_dir / "smoke" if args.scale == "smoke" else results_dir)
    try:
        out = check_writable(out)
    except ValueError as error:
        print(f"{COMMAND}: error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:5.0f} s] {message}", file=sys.stderr, flush=True)

    with scheduling(args, COMMAND):
        for path in report(out, scale, jobs=args.jobs, log=log, address=args.address):
            log(f"memory: wrote {path}")
    return 0
