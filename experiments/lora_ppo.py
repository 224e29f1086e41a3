"""Tables 1 and 2 of the LoRA-Guided PPO paper on its two envs and on FlightPlanner-v1.

:data:`ENVS` are the paper's FlightPlanner-v0 and ToolBench-v0 and FlightPlanner-v1 (the
same tasks and dynamics, a 25-slot observation); every learned row runs on each of them
(FlightPlanner-v1 with its own shipped pretrained base). Each table has the paper's
baselines, two references (the greedy label source, call-all), the best fixed rule
(:class:`agents.rules.BestFixedRule`, searched on ``rule_tasks`` training tasks of its own
seed range, then frozen) and the rows of :data:`FAMILY_ROWS` on the envs they apply to
(FlightPlanner's one-turn plan+search rule; on ToolBench the achievable reference,
:class:`agents.planning.ExpectimaxPlanner`, which knows the task but not the luck).
For each env, every method is scored on the same ``episodes`` tasks (task seed
``eval_seed``). The learned methods are trained ``seeds`` times (training seeds
0..seeds-1, on tasks disjoint from the evaluation set, see :mod:`agents.lora.training`);
their point values pool the episodes of all seeds and their 95% intervals come from a
two-level bootstrap over seeds and tasks (:func:`cost_envs.metrics.bootstrap_cis_over_runs`).
The fixed baselines are deterministic given the tasks, so their intervals are over tasks.

Outputs, in ``out``: ``table_<Env>.md`` and ``.json`` per env (``<Env>`` the id without
its namespace, e.g. ``table_FlightPlanner-v1.md``), ``pareto_<Env>.png``
(success vs average cost with interval bars) and ``learning_curves_<Env>.png`` (CPS and
success against environment steps, PPO vs LoRA-guided PPO, mean over seeds with the
seeds' range). Everything is computed and rendered before anything is written, and the
files are written all or nothing (:func:`agents.files.write_files_atomic`).

Training runs are independent, so they run in ``jobs`` worker processes, each with one
torch thread (on 2 cores, two processes beat two threads for networks this small); each
env's fixed rows are scored in the same pool, beside them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from agents.baselines import BASELINES, FAMILY_BASELINES
from agents.evaluation import compare, evaluate, format_table
from agents.files import write_files_atomic
from agents.lora.supervised import SupervisedConfig
from agents.lora.training import configure_torch_threads, train
from agents.planning import planner
from agents.rules import BestFixedRule
from cost_envs.config import integer
from cost_envs.metrics import (
    HEADLINE_METRICS,
    EpisodeRecord,
    bootstrap_cis_over_runs,
    interval_around,
    pareto_front,
    summarize,
)
from experiments.common import described, figure_png, recording, spawn_pool

#: The paper's two environments.
PAPER_ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/ToolBench-v0")
#: What the experiment runs: the paper's envs and FlightPlanner-v1 (issue #10).
ENVS = (*PAPER_ENVS, "cost_envs/FlightPlanner-v1")
#: Fixed baselines: key -> table label. ``greedy`` is the supervised label source and
#: ``all`` the brute-force reference; neither is one of the paper's seven methods.
BASELINE_ROWS = {
    "random": "Random",
    "capability": "CapabilityMatch",
    "rule": "RuleBased",
    "oracle": "CostOpt-Oracle",
    "greedy": "Greedy heuristic (label source)",
    "all": "Call all (reference)",
}
#: Rows that read hidden env state (kept off the non-privileged Pareto front).
PRIVILEGED_ROWS = ("oracle", "planner")
#: Rules searched on training tasks when they are built, then frozen: key -> table label.
SEARCHED_ROWS = {"best-rule": "Best fixed rule (searched on training tasks)"}


@dataclass(frozen=True)
class FamilyRow:
    """A fixed baseline that applies to some envs only: label, factory, those env ids."""

    label: str
    factory: Any
    envs: tuple[str, ...]


#: Baselines of one env family, in the tables of the envs they apply to only.
FAMILY_ROWS = {
    "one-turn": FamilyRow("One-turn plan+search rule", FAMILY_BASELINES["one-turn"],
                          ("cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1")),
    "planner": FamilyRow("Planner (knows the task, not the luck)", planner,
                         ("cost_envs/ToolBench-v0",
                          "cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1")),
}


def baseline_rows(env_id: str, rule_tasks: int = 200) -> dict[str, tuple[str, Any]]:
    """The fixed rows of ``env_id``'s table: key -> (label, factory), in table order.

    ``rule_tasks``: training tasks on which the best fixed rule is searched.
    """
    rows = {key: (label, BASELINES[key]) for key, label in BASELINE_ROWS.items()}
    rows["best-rule"] = (SEARCHED_ROWS["best-rule"], partial(BestFixedRule, n_tasks=rule_tasks))
    rows.update({key: (row.label, row.factory) for key, row in FAMILY_ROWS.items()
                 if env_id in row.envs})
    return rows


@dataclass(frozen=True)
class LearnedRow:
    """A learned method in the table: training method, base, label."""

    method: str
    base: str
    label: str


LEARNED_ROWS = {
    "lora": LearnedRow("lora", "pretrained", "LoRA supervised"),
    "ppo": LearnedRow("ppo", "pretrained", "PPO"),
    "lora-ppo": LearnedRow("lora-ppo", "pretrained", "LoRA-Guided PPO"),
    "lora/random-base": LearnedRow("lora", "random", "LoRA supervised, random base (ablation)"),
    "lora-ppo/random-base": LearnedRow("lora-ppo", "random",
                                       "LoRA-Guided PPO, random base (ablation)"),
}
#: The paper's seven methods (the other rows are references and ablations).
PAPER_METHODS = ("random", "capability", "rule", "oracle", "lora", "ppo", "lora-ppo")


@dataclass(frozen=True)
class Scale:
    """How much work a reproduction does.

    Args:
        name: ``smoke``, ``default`` or ``full``.
        timesteps: RL environment steps per training run.
        seeds: Training seeds per learned method.
        episodes: Evaluation tasks per method.
        resamples: Bootstrap resamples.
        supervised: Supervised-stage settings.
        rule_tasks: Training tasks on which the best fixed rule is searched.
    """

    name: str
    timesteps: int
    seeds: int
    episodes: int
    resamples: int
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    rule_tasks: int = 200

    def __post_init__(self) -> None:
        for name in ("timesteps", "seeds", "episodes", "resamples", "rule_tasks"):
            integer(getattr(self, name), f"Scale.{name}", minimum=1)


SCALES = {
    # Plumbing check for the tests: every row, every file, in seconds. Not a result.
    "smoke": Scale("smoke", timesteps=512, seeds=2, episodes=30, resamples=100,
                   supervised=SupervisedConfig(episodes=60, epochs=2), rule_tasks=10),
    # What `make reproduce` runs: under 10 minutes on 2 cores.
    "default": Scale("default", timesteps=20_000, seeds=3, episodes=400, resamples=1000),
    # Paper scale: ten times the RL steps and five seeds.
    "full": Scale("full", timesteps=200_000, seeds=5, episodes=1000, resamples=2000),
}


@dataclass(frozen=True)
class Job:
    """One training run and its evaluation."""

    env_id: str
    key: str
    seed: int
    scale: Scale
    eval_seed: int


@dataclass(frozen=True)
class JobResult:
    """What a worker sends back: the evaluation episodes and the learning curve."""

    job: Job
    records: tuple[EpisodeRecord, ...]
    agent_names: tuple[str, ...]
    history: list[dict[str, Any]]


def run_job(job: Job) -> JobResult:
    """Train one learned method with one seed and evaluate it on the shared task set."""
    configure_torch_threads()
    row = LEARNED_ROWS[job.key]
    trained = train(job.env_id, row.method, job.scale.timesteps, seed=job.seed, base=row.base,
                    supervised=job.scale.supervised)
    result = evaluate(trained, job.env_id, episodes=job.scale.episodes, seed=job.eval_seed)
    return JobResult(job, result.records, result.agent_names, trained.history)


def score_baselines(env_id: str, scale: Scale, eval_seed: int) -> dict[str, dict[str, Any]]:
    """Every fixed row of ``env_id``'s table on the shared tasks, as table entries.

    A rule searched when it is built (the best fixed rule) is searched here, on the env it
    is scored on, and its entry says which rule it froze (``rule``).
    """
    fixed = baseline_rows(env_id, scale.rule_tasks)
    built: dict[str, Any] = {}
    summaries = compare({key: recording(factory, built, key)
                         for key, (_, factory) in fixed.items()}, env_id,
                        episodes=scale.episodes, seed=eval_seed, n_resamples=scale.resamples)
    return {key: {"label": fixed[key][0], "seeds": 1, **summary, **described(built[key])}
            for key, summary in summaries.items()}


def _run_all(jobs: Sequence[Job], workers: int, log: Any = print,
             baselines: Sequence[tuple[str, Scale, int]] = ()
             ) -> tuple[list[JobResult], dict[str, dict[str, dict[str, Any]]]]:
    """Every job's result in the order of ``jobs``, and each env's fixed rows.

    ``baselines`` holds ``(env_id, scale, eval_seed)`` per env; its rows come back as env
    id -> entries (:func:`score_baselines`). A progress line as each result arrives. In a
    pool the fixed rows are submitted first, so they are not left for the end.
    """
    results: list[JobResult] = []

    def take(result: JobResult) -> None:
        results.append(result)
        job = result.job
        log(f"lora_ppo: {job.env_id.split('/')[-1]} {job.key} seed {job.seed} trained and "
            f"scored ({len(results)}/{len(jobs)})")

    def scored(env_id: str, entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        log(f"lora_ppo: {env_id.split('/')[-1]} fixed rows scored ({len(entries)})")
        return entries

    if workers <= 1:
        for job in jobs:
            take(run_job(job))
        return results, {args[0]: scored(args[0], score_baselines(*args)) for args in baselines}
    with spawn_pool(workers) as pool:
        pending = {args[0]: pool.submit(score_baselines, *args) for args in baselines}
        for result in pool.map(run_job, jobs):  # in job order, as each is ready
            take(result)
        fixed = {env_id: scored(env_id, future.result()) for env_id, future in pending.items()}
    return results, fixed


def _learned_summary(runs: Sequence[Sequence[EpisodeRecord]], agent_names: Sequence[str],
                     resamples: int, seed: int) -> dict[str, Any]:
    pooled = [record for run in runs for record in run]
    summary = summarize(pooled)
    summary["call_ratio"] = dict(zip(agent_names, summary["call_ratio"], strict=True))
    intervals = bootstrap_cis_over_runs(runs, HEADLINE_METRICS, n_resamples=resamples, seed=seed)
    for key, interval in zip(HEADLINE_METRICS, intervals, strict=True):
        summary[f"{key}_ci"] = interval_around(summary[key], interval)
    per_seed = [summarize(run) for run in runs]
    summary["per_seed"] = [{key: seed[key] for key in HEADLINE_METRICS} for seed in per_seed]
    return summary


def reproduce(
    scale: Scale,
    envs: Sequence[str] = ENVS,
    rows: Sequence[str] = tuple(LEARNED_ROWS),
    eval_seed: int = 0,
    jobs: int = 2,
    log: Any = print,
) -> dict[str, dict[str, Any]]:
    """Run the whole grid; returns env id -> report (rows, scale, learning curves).

    Args:
        scale: A :class:`Scale` (see :data:`SCALES`).
        envs: Environment ids.
        rows: Keys of :data:`LEARNED_ROWS` to train.
        eval_seed: Task seed of the evaluation set.
        jobs: Worker processes for the training runs.
        log: Progress printer.
    """
    grid = [Job(env_id, key, seed, scale, eval_seed)
            for env_id in envs for key in rows for seed in range(scale.seeds)]
    log(f"lora_ppo: training {len(grid)} runs ({scale.name}: {scale.timesteps} steps x "
        f"{scale.seeds} seeds) in {jobs} process(es)")
    results, fixed = _run_all(grid, jobs, log, [(env_id, scale, eval_seed) for env_id in envs])
    reports = {}
    for env_id in envs:
        methods: dict[str, dict[str, Any]] = dict(fixed[env_id])
        curves = {}
        for key in rows:
            done = sorted((r for r in results if r.job.env_id == env_id and r.job.key == key),
                          key=lambda r: r.job.seed)
            summary = _learned_summary([r.records for r in done], done[0].agent_names,
                                       scale.resamples, eval_seed)
            methods[key] = {"label": LEARNED_ROWS[key].label, "seeds": len(done), **summary}
            curves[key] = [r.history for r in done]
        reports[env_id] = {"env_id": env_id, "scale": asdict(scale), "eval_seed": eval_seed,
                           "methods": methods, "learning_curves": curves}
    return reports


def report(out: Path, scale: str = "default", jobs: int = 2, log: Any = print) -> list[Path]:
    """Run the grid at ``scale`` and write every table, JSON file and figure; returns the paths.

    Args:
        out: Output directory (created if needed).
        scale: A key of :data:`SCALES`.
        jobs: Worker processes for the training runs.
        log: Progress printer.

    Raises:
        ValueError: For an unknown scale.
    """
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    return write_reports(reproduce(SCALES[scale], jobs=jobs, log=log), out)


# ------------------------------------------------------------------------ output
def markdown_table(report: Mapping[str, Any]) -> str:
    """The report's Markdown page: what was run, then the table."""
    scale = report["scale"]
    rows = {entry["label"]: entry for entry in report["methods"].values()}
    rules = "".join(f"\n{entry['label']}: {entry['rule']}.\n"
                    for entry in report["methods"].values() if "rule" in entry)
    other = ("" if report["env_id"] in PAPER_ENVS else
             f"{report['env_id']} is not one of the paper's envs: the same methods, run on it "
             "as on them. ")
    return (
        f"# LoRA-Guided PPO paper, Tables 1-2: {report['env_id']}\n\n"
        f"{other}Scale `{scale['name']}`: learned methods trained with {scale['seeds']} seeds x "
        f"{scale['timesteps']} environment steps; every method scored on the same "
        f"{scale['episodes']} tasks (task seed {report['eval_seed']}). 95% intervals: "
        "two-level bootstrap over training seeds and tasks for learned methods, over tasks "
        f"for the fixed baselines ({scale['resamples']} resamples). Reproduce with "
        f"`python -m experiments lora_ppo"
        f"{'' if scale['name'] == 'default' else ' --scale ' + scale['name']}`.\n\n"
        f"{format_table(rows)}\n{rules}"
    )


def json_report(report: Mapping[str, Any]) -> str:
    """The report as JSON text (learning curves included)."""
    return json.dumps(report, indent=2) + "\n"


def pareto_figure(report: Mapping[str, Any]) -> bytes:
    """Success vs average cost, one point per method with its 95% interval bars (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 5))
    colours = plt.get_cmap("tab20").colors
    markers = "osD^vP*Xh<>p"
    for index, entry in enumerate(report["methods"].values()):
        x, y = entry["avg_cost"], entry["success_rate"]
        xerr = [[max(0.0, x - entry["avg_cost_ci"][0])], [max(0.0, entry["avg_cost_ci"][1] - x)]]
        yerr = [[max(0.0, y - entry["success_rate_ci"][0])],
                [max(0.0, entry["success_rate_ci"][1] - y)]]
        # Hollow markers, later rows larger: methods with identical results (the LoRA
        # rows often land on the greedy teacher) show as concentric shapes, not one.
        axis.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=markers[index % len(markers)],
                      color=colours[index % len(colours)], markerfacecolor="none",
                      markersize=5 + 1.2 * index, capsize=3, label=entry["label"])
    # The front of what a policy can reach from the observation: the privileged rows (the
    # hindsight oracle, the planner that knows the task's parameters) are left out of it.
    front = pareto_front({key: (entry["success_rate"], entry["avg_cost"])
                          for key, entry in report["methods"].items()
                          if key not in PRIVILEGED_ROWS})
    axis.plot([cost for _, cost in front.values()], [success for success, _ in front.values()],
              "k--", linewidth=0.8, label="Pareto front (non-privileged)")
    axis.set_xscale("log")
    axis.set_xlabel("average cost per task ($, log scale)")
    axis.set_ylabel("success rate")
    axis.set_title(f"{report['env_id']}: success vs cost (95% intervals)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    png = figure_png(figure)
    plt.close(figure)
    return png


def learning_curves_figure(report: Mapping[str, Any],
                           keys: Sequence[str] = ("ppo", "lora-ppo")) -> bytes:
    """CPS and success vs environment steps: mean over seeds, shaded over the seeds' range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key in keys:
        histories = [h for h in report["learning_curves"].get(key, []) if h]
        if not histories:
            continue
        length = min(len(h) for h in histories)
        steps = np.array([point["timesteps"] for point in histories[0][:length]])
        for axis, metric in zip(axes, ("cost/cps", "rollout/success_rate"), strict=True):
            values = np.array([[point[metric] for point in h[:length]] for h in histories])
            axis.plot(steps, values.mean(axis=0), label=report["methods"][key]["label"])
            axis.fill_between(steps, values.min(axis=0), values.max(axis=0), alpha=0.2)
    for axis, title in zip(axes, ("CPS (last 100 training episodes)",
                                  "success rate (last 100 training episodes)"), strict=True):
        axis.set_xlabel("environment steps")
        axis.set_title(title, fontsize=10)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    axes[0].set_yscale("log")
    figure.suptitle(f"{report['env_id']}: training curves, mean and range over seeds")
    figure.tight_layout()
    png = figure_png(figure)
    plt.close(figure)
    return png


def render_reports(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, str | bytes]:
    """File name -> content of every table, JSON file and figure."""
    files: dict[str, str | bytes] = {}
    for env_id, report in reports.items():
        name = env_id.split("/")[-1]
        files[f"table_{name}.md"] = markdown_table(report)
        files[f"table_{name}.json"] = json_report(report)
        files[f"pareto_{name}.png"] = pareto_figure(report)
        files[f"learning_curves_{name}.png"] = learning_curves_figure(report)
    return files


def write_reports(reports: Mapping[str, Mapping[str, Any]], out: Path) -> list[Path]:
    """Render everything, then write all files or none; returns the paths.

    Rendering first means a failing figure leaves every old file in place.
    """
    return write_files_atomic(out, render_reports(reports))
