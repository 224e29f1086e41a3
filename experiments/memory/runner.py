"""Does memory pay? PPO with and without memory at the same settings (issue #23, point 5).

``python -m experiments.memory [--scale smoke|default|toolbench|flight] [--out DIR]
[--jobs N]``, or ``python -m experiments memory``.

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
difference learner - PPO with its interval (:func:`paired_difference`: seeds of each
learner resampled independently, tasks resampled with one draw for both, so the
difference is paired over tasks), plus the wall time of each run. On FlightPlanner the
one-turn rule (the tables' best fixed row) is scored on the same tasks for scale.

Outputs in ``out``, written together or not at all (:func:`agents.files.write_files_atomic`):
``memory.md`` (``memory_<scale>.md`` but at the default scale: the table, steps, machine,
command) and ``memory.csv`` (env, learner, seed, steps, wall times and the per-task
returns, :func:`experiments.shared.gaps.encode_scores`; the rule's returns as learner ``rule``).
The table is rendered from what the CSV holds (``render(read_csv(csv), ...)``), so every
figure in it can be recomputed.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agents.files import write_files_atomic
from agents.learners import PPO_SETTINGS
from cost_envs.config import integer
from cost_envs.envs.flight_planner import MAX_TURNS as FLIGHT_TURNS
from cost_envs.envs.toolbench import MAX_TURNS as TOOLBENCH_TURNS
from cost_envs.metrics import bootstrap_mean_ci, interval_around
from cost_envs.metrics.bootstrap import percentile_interval
from experiments.shared.common import check_writable, machine, quiet, run_each
from experiments.shared.gaps import decode_scores, encode_scores
from experiments.shared.kept import keep, read_kept, run_file

#: The learners: key -> (label, SB3 policy name). ``ppo`` is the control.
LEARNERS = {"ppo": ("PPO (MlpPolicy)", "MlpPolicy"),
            "recurrent": ("RecurrentPPO (MlpLstmPolicy)", "MlpLstmPolicy"),
            "history": ("PPO on the episode's observations (VecFrameStack)", "MlpPolicy")}
ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1", "cost_envs/ToolBench-v0")
#: Decisions per episode at most: the ``history`` learner sees this many observations, so
#: it sees every observation of its episode (zeros before the first).
MAX_DECISIONS = {"cost_envs/FlightPlanner-v0": FLIGHT_TURNS, "cost_envs/FlightPlanner-v1":
                 FLIGHT_TURNS, "cost_envs/ToolBench-v0": TOOLBENCH_TURNS}
#: The reference row scored on the same tasks: the tables' best fixed row on FlightPlanner.
RULE_ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1")
RULE_LABEL = "One-turn plan+search rule"
COMMAND = "python -m experiments.memory"
#: SB3's defaults, which the project's PPO keeps (agents.learners.training.train), named here
#: so that both learners are given them explicitly.
EPOCHS = 10
LEARNING_RATE = 3e-4
#: Below this many env steps PPO has not converged on these envs (the committed curves,
#: ``benchmarks/results/budgets_*.md``), and the report says so.
CONVERGED_STEPS = 500_000
BATCH = PPO_SETTINGS["batch_size"]
CSV_FIELDS = ("env", "learner", "seed", "timesteps", "train_seconds", "eval_seconds",
              "mean_return", "returns")


@dataclass(frozen=True)
class Scale:
    """Steps per run, seeds, evaluation tasks, sub-envs, bootstrap resamples, envs."""

    name: str
    timesteps: int
    seeds: int
    episodes: int
    n_envs: int
    resamples: int
    envs: tuple[str, ...] = ENVS
    learners: tuple[str, ...] = ("ppo", "recurrent")
    #: Keep each finished run in ``<out>/memory_runs/<name>/`` (:mod:`experiments.shared.kept`).
    keep: bool = False

    def __post_init__(self) -> None:
        for name in ("timesteps", "seeds", "episodes", "n_envs", "resamples"):
            integer(getattr(self, name), f"Scale.{name}", minimum=1)
        unknown = sorted(set(self.envs) - set(ENVS))
        if unknown or not self.envs:
            raise ValueError(f"Scale.envs: expected some of {list(ENVS)}, got {list(self.envs)}")
        if "ppo" not in self.learners or not set(self.learners) <= set(LEARNERS):
            raise ValueError(f"Scale.learners: expected 'ppo' and some of {list(LEARNERS)}, "
                             f"got {list(self.learners)}")

    @property
    def files(self) -> tuple[str, str]:
        """The report's and the CSV's names: ``memory.md``/``.csv`` at the default scale."""
        stem = "memory" if self.name == "default" else f"memory_{self.name}"
        return f"{stem}.md", f"{stem}.csv"


SCALES = {
    # Plumbing for the tests, seconds: not a result.
    "smoke": Scale("smoke", 1024, 2, 12, 2, 100, ENVS[:2]),
    # About 8 CPU-minutes (RecurrentPPO about 35 CPU-s a run, PPO about 5): FlightPlanner
    # v0 and v1, the contrast that says whether memory replaces v1's slots. On this 2-core
    # machine at load 10-16 a RecurrentPPO run of 20,480 steps took 17 minutes of wall
    # time, which is why the default stops at 8,192 (two rollouts of 8 x 512).
    "default": Scale("default", 8_192, 5, 400, 8, 1000, ENVS[:2]),
}
SCALES["full"] = SCALES["default"]  # `python -m experiments memory --scale full`
# Where the learners move (issue #23, point 5): PPO with and without the episode's
# observations at PPO's own converged budgets (``benchmarks/results/budgets_*.md``),
# RecurrentPPO left out (6-9x PPO's CPU a step: hours a run here). Runs are kept
# (:mod:`experiments.shared.kept`), so a scale longer than one sitting completes over several.
SCALES["toolbench"] = Scale("toolbench", 500_000, 5, 400, 16, 1000, ("cost_envs/ToolBench-v0",),
                            ("ppo", "history"), keep=True)
SCALES["flight"] = Scale("flight", 2_000_000, 5, 1000, 16, 1000, ENVS[:1], ("ppo", "history"),
                         keep=True)


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
    from agents.vec_env import make_batched_vec_env

    if learner not in LEARNERS:
        raise ValueError(f"learner: expected one of {list(LEARNERS)}, got {learner!r}")
    venv = make_batched_vec_env(env_id, n_envs)
    seeds = train_task_seeds(seed, n_envs)
    if n_envs == 1:  # as agents.learners.training.train seeds its env
        venv.seed(seeds[0])
    else:
        venv.unwrapped.seed_each(seeds)
    if learner == "history":
        venv = VecFrameStack(venv, MAX_DECISIONS[env_id])
    cls = RecurrentPPO if learner == "recurrent" else FastPPO
    model = cls(LEARNERS[learner][1], venv, seed=seed, device="cpu", n_epochs=EPOCHS,
                learning_rate=LEARNING_RATE, **PPO_SETTINGS)
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
    from agents.evaluation import evaluate

    env = gym.make(env_id)
    start = time.perf_counter()
    try:
        returns = evaluate(FAMILY_BASELINES["one-turn"](env), env, episodes, seed=0).returns
    finally:
        env.close()
    return {"env": env_id, "learner": "rule", "seed": 0, "timesteps": 0, "train_seconds": 0.0,
            "eval_seconds": time.perf_counter() - start, "returns": list(returns)}


def paired_difference(treated: np.ndarray, control: np.ndarray, resamples: int,
                      seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``treated`` - mean of ``control`` with a 95% two-level bootstrap interval.

    ``treated[s, j]``, ``control[s, j]``: seed ``s`` of each learner on task ``j`` (the same
    tasks). Each resample draws each learner's seeds independently (their networks share
    nothing) and one draw of tasks for both, so task difficulty cancels in the difference.

    Raises:
        ValueError: If the arrays are not 2-D, finite, on the same number of tasks.
    """
    a, b = np.asarray(treated, dtype=np.float64), np.asarray(control, dtype=np.float64)
    if (a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or a.size == 0 or b.size == 0
            or not (np.isfinite(a).all() and np.isfinite(b).all())):
        raise ValueError(f"paired_difference: expected finite seeds x tasks arrays on the same "
                         f"tasks, got shapes {a.shape} and {b.shape}")
    integer(resamples, "resamples", minimum=1)
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, a.shape[1], size=(resamples, a.shape[1]))
    runs_a = rng.integers(0, a.shape[0], size=(resamples, a.shape[0]))
    runs_b = rng.integers(0, b.shape[0], size=(resamples, b.shape[0]))
    diffs = np.array([a[np.ix_(ra, t)].mean() - b[np.ix_(rb, t)].mean()
                      for t, ra, rb in zip(tasks, runs_a, runs_b, strict=True)])
    point = float(a.mean() - b.mean())
    low, high = interval_around(point, percentile_interval([diffs], 0.95))
    return point, low, high


def write_csv(results: Sequence[Mapping[str, Any]]) -> str:
    """The runs as CSV (:data:`CSV_FIELDS`), per-task returns encoded in one column."""
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in results:
        writer.writerow([r["env"], r["learner"], r["seed"], r["timesteps"],
                         f"{r['train_seconds']:.1f}", f"{r['eval_seconds']:.1f}",
                         f"{np.mean(r['returns']):.6f}", encode_scores(r["returns"])])
    return rows.getvalue()


def read_csv(text: str) -> list[dict[str, Any]]:
    """The runs of :func:`write_csv` (returns as they were rounded there)."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != CSV_FIELDS:
        raise ValueError(f"read_csv: expected the columns {list(CSV_FIELDS)}, got "
                         f"{reader.fieldnames}")
    return [{"env": row["env"], "learner": row["learner"], "seed": int(row["seed"]),
             "timesteps": int(row["timesteps"]), "train_seconds": float(row["train_seconds"]),
             "eval_seconds": float(row["eval_seconds"]),
             "returns": list(decode_scores(row["returns"]))} for row in reader]


def summarize(results: Sequence[Mapping[str, Any]], resamples: int
              ) -> dict[str, dict[str, Any]]:
    """Per env: each learner's (mean, low, high) and wall times, and the difference.

    Returns:
        env -> {"learners": {key: {"return": (mean, low, high), "train_minutes": mean,
        "eval_seconds": mean, "seeds": n, "timesteps": steps}},
        "differences": {key: (mean, low, high) of that learner - ppo, for each other
        learner run with ppo}}.
    """
    summary: dict[str, dict[str, Any]] = {}
    for env_id in dict.fromkeys(r["env"] for r in results):
        arrays, learners = {}, {}
        for key in LEARNERS:
            runs = sorted((r for r in results if r["env"] == env_id and r["learner"] == key),
                          key=lambda r: r["seed"])
            if not runs:
                continue
            arrays[key] = np.array([r["returns"] for r in runs])
            learners[key] = {
                "return": bootstrap_mean_ci(arrays[key], n_resamples=resamples),
                "train_minutes": float(np.mean([r["train_seconds"] for r in runs])) / 60,
                "eval_seconds": float(np.mean([r["eval_seconds"] for r in runs])),
                "seeds": len(runs), "timesteps": sorted({r["timesteps"] for r in runs})}
        differences = {key: paired_difference(values, arrays["ppo"], resamples)
                       for key, values in arrays.items() if key != "ppo" and "ppo" in arrays}
        summary[env_id] = {"learners": learners, "differences": differences}
    return summary


def _interval(values: Sequence[float], signed: bool = False) -> str:
    mean, low, high = values
    form = "+.3f" if signed else ".3f"
    return f"{mean:{form}} [{low:{form}}, {high:{form}}]"


def render(results: Sequence[Mapping[str, Any]], scale: Scale, where: str) -> str:
    """``memory.md``: per env the learners' returns, the difference, steps and wall times.

    ``results``: the runs (:func:`read_csv`), the rule's as learner ``rule``; ``where``: the
    machine.
    """
    summary = summarize(results, scale.resamples)
    rules = {r["env"]: r["returns"] for r in results if r["learner"] == "rule"}
    # what was trained: SB3 completes its last rollout, past the scale's steps
    taken = max((r["timesteps"] for r in results if r["learner"] != "rule"), default=0)
    own = SCALES.get(scale.name)
    envs = "" if own is not None and own.envs == scale.envs else f" --envs {','.join(scale.envs)}"
    lines = ["# Does memory pay? "
             + " and ".join(LEARNERS[key][0].split(" (")[0] for key in scale.learners
                            if key != "ppo") + " against PPO (issue #23)", "",
             f"`{COMMAND} --scale {scale.name}{envs}` on {where}, one torch thread per run.",
             "",
             f"{scale.seeds} training seeds per learner, {scale.timesteps:,} env steps each on "
             f"{scale.n_envs} batched sub-envs, at the project's PPO settings "
             f"({PPO_SETTINGS['n_steps']} steps per sub-env and rollout, minibatch {BATCH}, "
             f"{EPOCHS} epochs, lr {LEARNING_RATE:g}, entropy {PPO_SETTINGS['ent_coef']}). The "
             "learners have the same 64-64 heads"
             + ("; RecurrentPPO adds sb3-contrib's LSTM (256 units)"
                if "recurrent" in scale.learners else "")
             + ("; the history PPO sees the episode's last "
                + ", ".join(f"{MAX_DECISIONS[e]} ({e.split('/')[-1]})" for e in scale.envs)
                + " observations, zeros before its first: every observation of its episode"
                if "history" in scale.learners else "")
             + f". Scored on the tables' first {scale.episodes} evaluation tasks (task seed "
             "0), memory reset at each episode start. Return: mean Eq. 1 "
             "return [95% interval over seeds and tasks]; difference: learner - PPO, seeds "
             "resampled independently, tasks paired.", "",
             "| Env | Row | Return | Train min/run | Eval s/run |",
             "|---|---|---|---:|---:|"]
    for env_id, entry in summary.items():
        name = env_id.split("/")[-1]
        if env_id in rules:
            rule = bootstrap_mean_ci(rules[env_id], n_resamples=scale.resamples)
            lines.append(f"| {name} | {RULE_LABEL} | {_interval(rule)} | | |")
        for key, row in entry["learners"].items():
            lines.append(f"| {name} | {LEARNERS[key][0]} | {_interval(row['return'])} | "
                         f"{row['train_minutes']:.2f} | {row['eval_seconds']:.1f} |")
        for key, difference in entry["differences"].items():
            lines.append(f"| {name} | **{LEARNERS[key][0].split(' (')[0]} - PPO** | "
                         f"**{_interval(difference, signed=True)}** | | |")
    lines += ["", "Steps taken per run (SB3 completes its last rollout): " + "; ".join(
        f"{env_id.split('/')[-1]} {key} {', '.join(f'{s:,}' for s in row['timesteps'])}"
        for env_id, entry in summary.items() for key, row in entry["learners"].items()) + ".",
        "", f"Gradient steps per run: {taken // BATCH * EPOCHS:,} (minibatch {BATCH}, "
        f"{EPOCHS} epochs), the same for every learner.", ""]
    if scale.timesteps < CONVERGED_STEPS:
        lines += ["**Not converged.** At this budget neither learner is near convergence: the "
                  "project's PPO stops improving at about 500k env steps on ToolBench-v0 and "
                  "2M on FlightPlanner-v1, where it is a little above the one-turn rule "
                  "(`benchmarks/results/budgets_*.md`, `converged_FlightPlanner-v1.md`). "
                  "The difference compares what each learner reaches at this small equal "
                  "budget, not what memory buys at convergence.", ""]
    return "\n".join(lines)


def job_settings(job: Job) -> dict[str, Any]:
    """What a kept run must have been run with to stand for ``job``."""
    return {"env": job.env_id, "learner": job.learner, "seed": job.seed,
            "asked_timesteps": job.scale.timesteps, "episodes": job.scale.episodes,
            "n_envs": job.scale.n_envs}


def reproduce(scale: Scale, jobs: int = 2, log: Callable[[str], None] = quiet,
              runs: Path | None = None) -> list[dict[str, Any]]:
    """Every (env, learner, seed) run, then the rule's runs, in table order.

    ``runs``: a folder where each run is kept as it finishes and from which kept runs are
    reused (:mod:`experiments.shared.kept`); ``None`` keeps nothing.
    """
    integer(jobs, "jobs", minimum=1)
    # The slow learner first, so the pool's two workers end together.
    order = sorted(scale.learners, key=lambda key: key != "recurrent")
    grid = [Job(env_id, key, seed, scale) for key in order
            for env_id in scale.envs for seed in range(scale.seeds)]
    paths = [None if runs is None else
             run_file(runs, f"{job.env_id.split('/')[-1]}/{job.learner}", job.seed)
             for job in grid]
    results: list[dict[str, Any] | None] = []
    for job, path in zip(grid, paths, strict=True):
        kept = None if path is None else read_kept(path, job_settings(job))
        results.append(None if kept is None else {
            **kept["result"], "returns": list(decode_scores(kept["result"]["returns"]))})
    todo = [index for index, result in enumerate(results) if result is None]
    log(f"memory: {len(grid) - len(todo)} of {len(grid)} runs kept, {len(todo)} to run in "
        f"{jobs} process(es)")

    def done(position: int, result: dict[str, Any]) -> None:
        index = todo[position]
        job, path = grid[index], paths[index]
        results[index] = result
        if path is not None:
            keep(path, {**job_settings(job),
                        "result": {**result, "returns": encode_scores(result["returns"])}})
        log(f"memory: {job.env_id} {job.learner} seed {job.seed}: "
            f"{result['train_seconds']:.0f} s training")

    run_each(run_job, [grid[index] for index in todo], jobs, done)
    finished = sorted((r for r in results if r is not None),
                      key=lambda r: (scale.envs.index(r["env"]), list(LEARNERS).index(r["learner"]),
                                     r["seed"]))
    return [rule_result(env_id, scale.episodes) for env_id in scale.envs
            if env_id in RULE_ENVS] + finished


def report(out: Path, scale: str | Scale = "default", jobs: int = 2,
           log: Callable[[str], None] = quiet) -> list[Path]:
    """Run the experiment and write its report and CSV (:attr:`Scale.files`) together."""
    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    chosen = SCALES[scale] if isinstance(scale, str) else scale
    runs = Path(out) / "memory_runs" / chosen.name if chosen.keep else None
    columns = write_csv(reproduce(chosen, jobs=jobs, log=log, runs=runs))
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

    for path in report(out, scale, jobs=args.jobs, log=log):
        log(f"memory: wrote {path}")
    return 0
