"""BoPO's experiment: the three AgenticRouting-v0 profiles, every router, 5 seeds, one report.

For each profile, :func:`prepare_profile` draws the base training tasks (training seed
``seed``) and the evaluation tasks, rolls out the boundaries, sets the per-task budget and
scores the fixed baselines, among them the rules of :data:`TRAINED_RULES` (the difficulty
threshold, the best fixed rule), each fitted on the base training tasks under the same
budget, then frozen. Every training seed then gets its own training-task draw, boundaries
and SFT warm start (:func:`experiments.bopo.jobs.warm_start`), from which
:func:`experiments.bopo.jobs.run_learning_job` trains each learned router of the table
(BoPO with the paper's reward, vanilla PPO) and, on the scan profile, those of the λ scan
(:mod:`experiments.bopo.scan`). :func:`run_all` runs all of it, in worker processes when
the scale says so (every unit seeded on its own: the result does not depend on the number
of workers), and :func:`report` writes ``bopo.md``, ``bopo.json`` and
``pareto_bopo_<profile>.png`` / ``.svg`` (rendered by :mod:`experiments.bopo.report`), all rendered
before any is written and written all together. A learned row pools its seeds: its value
is the mean over seeds and tasks, its interval a two-level bootstrap over both. Every
row is scored on the task set ``tasks`` (the validation set by default, the test set with
``tasks="test"``, :mod:`experiments.shared.task_sets`; a report of the test set names it).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.baselines import (
    AlwaysLarge,
    AlwaysSmall,
    Cascade,
    CostOptOracle,
    DifficultyThreshold,
    RandomMix,
)
from agents.files import write_files_atomic
from agents.learners.bopo import (
    ENV_ID,
    Boundary,
    boundary_rollouts,
    draw_tasks,
    inversion_share,
    make_env,
    strata_distribution,
)
from agents.planning import AgenticPlanner
from agents.rules import BestFixedRule
from agents.seeds import BOPO_TRAIN_TASK_SEED
from cost_envs.envs.agentic_routing import PROFILE_NAMES
from cost_envs.metrics import EpisodeRecord
from experiments.bopo.gaps import best_rule, gap_block
from experiments.bopo.jobs import (
    SCALES,
    BopoScale,
    LearnJob,
    LearnResult,
    WarmStart,
    budget_of,
    evaluate_on,
    profile_budget,
    run_learning_job,
    scale_of,
    training_draw,
    warm_start,
)
from experiments.bopo.report import (
    RIVALS,
    compare_frontiers,
    label,
    markdown,
    method_summary,
    pareto_figure,
)
from experiments.bopo.scan import scan_block
from experiments.shared.common import described, machine, quiet, recording, refitting_none
from experiments.shared.figures import figure_files
from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import run_units
from experiments.shared.task_sets import (
    DEFAULT_TASKS,
    choice_seed,
    choose,
    keeper_settings,
    tagged,
    task_seed,
)
from experiments.tune import runner as tune
from experiments.tune.bopo import PROFILE
from experiments.tune.methods import METHODS as SWEEPS

__all__ = ["SCALES", "BopoScale", "Prepared", "Results", "prepare_profile", "report",
           "run_all", "summarise"]

# ------------------------------------------------------------------- profile work
@dataclass
class Prepared:
    """One profile's setup and fixed rows (every learned row is a seed's, see ``Results``)."""

    profile: str
    budget: float
    train_boundaries: list[Boundary]
    eval_boundaries: list[Boundary]
    records: dict[str, tuple[EpisodeRecord, ...]] = field(default_factory=dict)
    #: Method key -> each evaluation episode's return (Eq. 1), in task order.
    returns: dict[str, tuple[float, ...]] = field(default_factory=dict)
    #: Method key -> what its fitting found, for its report entry (label, threshold, rule).
    fitted: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    #: The key of the gap's rule end (of :data:`TRAINED_RULES`), chosen on the validation
    #: tasks whatever set the rows were scored on; ``None`` (rows kept before it was
    #: recorded, all of the validation set): the better of ``returns``.
    rule: str | None = None


#: Rules fitted on a profile's training tasks, then frozen: key -> ``fit(env, train_tasks)``,
#: called with the env as it is scored (``make_env(profile, budget)``, see
#: :func:`experiments.bopo.jobs.evaluate_on`).
TRAINED_RULES: dict[str, Callable[[gym.Env, Sequence[Any]], Any]] = {
    "difficulty-threshold": DifficultyThreshold.fit,
    "best-rule": BestFixedRule.fit,
}


def _bound(factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[gym.Env], Any]:
    """``env -> factory(env, *args, **kwargs)``: a row's factory, its arguments bound now."""
    return lambda env: factory(env, *args, **kwargs)


def prepare_profile(profile: str, scale: str | BopoScale = "default", seed: int = 0,
                    tasks: str | int = DEFAULT_TASKS) -> Prepared:
    """Boundaries, taxonomy and budget of one profile, and its fixed rows (fitted rules too).

    The rules are fitted on the training draw; every row is scored on the task set
    ``tasks`` (:mod:`experiments.shared.task_sets`), or on the ``sc.n_eval`` tasks drawn
    from the reset seed ``tasks`` when it is a number (another study's own set). The
    gap's rule end (``rule``) is the better rule on the validation tasks
    (:func:`experiments.shared.task_sets.choose`): on these rows for the validation set,
    else on the rules scored again there (:func:`rule_returns_on_validation`).
    """
    start = time.perf_counter()
    sc = scale_of(scale)
    train_tasks, train_paths = training_draw(profile, sc, seed)
    train_b = [Boundary.from_trajectories(lo, hi) for lo, hi in train_paths]
    eval_seed = task_seed(tasks)
    eval_tasks = draw_tasks(profile, sc.n_eval, eval_seed)
    budget = budget_of(train_b)
    prepared = Prepared(profile, budget, train_b, boundary_rollouts(make_env(profile),
                                                                    eval_tasks))
    methods: dict[str, Callable[[gym.Env], Any]] = {
        "always-small": AlwaysSmall, "always-large": AlwaysLarge, "oracle": CostOptOracle,
        "planner": AgenticPlanner,
    }
    for p in sc.random_ps:
        methods[f"random-mix/{p:g}"] = _bound(RandomMix, p=p, seed=seed)
    for k in sc.patiences:
        methods[f"cascade/{k}"] = _bound(Cascade, patience=k)
    built: dict[str, Any] = {}
    for key, fit in TRAINED_RULES.items():
        methods[key] = recording(_bound(fit, train_tasks), built, key)
    for name, factory in methods.items():
        result = evaluate_on(factory, profile, eval_tasks, budget, eval_seed)
        prepared.records[name], prepared.returns[name] = result.records, result.returns
    for key, rule in built.items():  # what each fit found, in its label and its entry
        found: dict[str, Any] = described(rule)
        prepared.fitted[key] = found
        if isinstance(rule, DifficultyThreshold):
            found.update(label=f"{label(key)} (fitted, t={rule.threshold:g})",
                         fitted_threshold=rule.threshold)
        elif "rule" in found:
            found["label"] = f"{label(key)}: {found['rule']}"
    prepared.rule = choose(best_rule, {key: [prepared.returns[key]] for key in TRAINED_RULES},
                           tasks, lambda: rule_returns_on_validation(profile, sc, budget,
                                                                     train_tasks, built))
    prepared.seconds = time.perf_counter() - start
    return prepared


def rule_returns_on_validation(profile: str, sc: BopoScale, budget: float,
                               train_tasks: Sequence[Any], built: Mapping[str, Any] | None = None
                               ) -> dict[str, list[tuple[float, ...]]]:
    """Each rule of :data:`TRAINED_RULES`, fitted on ``train_tasks``, on the validation tasks.

    What a table scored on other tasks chooses its gap's rule end on
    (:func:`prepare_profile`): the same fits (on the same training draw, so the same
    rules), each scored once on ``sc.n_eval`` validation tasks under the same budget, as
    :func:`experiments.bopo.gaps.best_rule` reads them. ``built``: the rules the table
    fitted, scored as they are rather than fitted again (:func:`refitting_none`).
    """
    first = choice_seed()
    tasks = draw_tasks(profile, sc.n_eval, first)
    fits = refitting_none({key: _bound(fit, train_tasks) for key, fit in TRAINED_RULES.items()},
                          built or {})
    return {key: [evaluate_on(factory, profile, tasks, budget, first).returns]
            for key, factory in fits.items()}


# ----------------------------------------------------------------------- the runs
def table_keys(sc: BopoScale) -> list[str]:
    """The learned rows of every profile's table, trained with every seed."""
    return ([f"bopo/{lam:g}" for lam in sc.bopo_lams]
            + [f"ppo/{lam:g}" for lam in sc.ppo_lams])


#: The table's families that have an equal-budget sweep, and its method name.
SWEPT = {"bopo": "bopo", "ppo": "bopo-ppo"}


@cache  # the committed files, read once per process (learn_jobs asks per seed)
def tuned_choices(profile: str) -> dict[str, dict[str, Any]]:
    """Per swept family, what its sweep chose, if it ran on ``profile``.

    ``{family: {"config", "paper", "same_as_paper"}}`` from the committed files
    (``experiments/tuned/``); empty for a profile the sweeps did not run on.
    """
    if profile != PROFILE:
        return {}
    out = {}
    for family, method in SWEPT.items():
        config = tune.chosen(method, ENV_ID)
        if config is not None:
            paper = dict(SWEEPS[method].paper)
            out[family] = {"config": config, "paper": paper, "same_as_paper": config == paper}
    return out


def tuned_keys(profile: str) -> list[str]:
    """The tuned rows of ``profile``'s table: a sweep that chose other than the paper's point.

    A sweep that chose the paper's configuration adds no row: it would train the paper's
    row again (the report says so).
    """
    return [f"{family}/tuned" for family, choice in tuned_choices(profile).items()
            if not choice["same_as_paper"]]


def row_keys(sc: BopoScale, profile: str) -> list[str]:
    """The learned RL rows of ``profile``'s table: :func:`table_keys`, then the tuned ones."""
    return table_keys(sc) + tuned_keys(profile)


def _tuned_job(family: str, config: Mapping[str, Any], warm: WarmStart,
               common: Mapping[str, Any]) -> LearnJob:
    """The job of a tuned row: the sweep's choice, on the table's steps and seeds."""
    linear = config.get("cost_term") == "linear"
    method = "bopo-linear" if linear else family
    lam = float(config["linear_lam" if linear else "lam"])
    settings = {"learning_rate": float(config["learning_rate"]),
                "ent_coef": float(config["ent_coef"])}
    return LearnJob(method=method, lam=lam, ppo=settings, tuned=True,
                    sft_state=None if family == "ppo" else warm.sft_state, **common)


def scan_keys(sc: BopoScale) -> list[str]:
    """The λ scan's rows (scan profile, scan seeds): the paper's reward, then the linear one."""
    lams = sorted({*sc.scan_lams, *sc.bopo_lams})
    return [f"bopo/{lam:g}" for lam in lams] + [f"bopo-linear/{lam:g}"
                                                for lam in sorted(sc.linear_lams)]


def learn_jobs(warm: WarmStart, sc: BopoScale, budget: float, base_seed: int,
               tasks: str = DEFAULT_TASKS) -> list[LearnJob]:
    """One seed's RL runs on one profile: the table's rows, then the scan's own.

    ``tasks``: the task set they are scored on (:mod:`experiments.shared.task_sets`).
    """
    common: dict[str, Any] = {"profile": warm.profile, "scale": sc, "budget": budget,
                              "cost_scale": warm.cost_scale, "seed": warm.seed,
                              "train_boundaries": tuple(warm.train_boundaries),
                              "tasks": tasks}
    jobs = [LearnJob(method=key.split("/")[0], lam=float(key.split("/")[1]),
                     sft_state=None if key.startswith("ppo/") else warm.sft_state, **common)
            for key in table_keys(sc)]
    choices = tuned_choices(warm.profile)
    jobs += [_tuned_job(key.split("/")[0], choices[key.split("/")[0]]["config"], warm, common)
             for key in tuned_keys(warm.profile)]
    if warm.profile == sc.scan_profile and warm.seed < base_seed + sc.scan_seeds:
        jobs += [LearnJob(method=key.split("/")[0], lam=float(key.split("/")[1]),
                          sft_state=warm.sft_state, curve=False, **common)
                 for key in scan_keys(sc) if key not in table_keys(sc)]
    return jobs


@dataclass
class Results:
    """Everything the units produced: fixed rows, each seed's warm start and RL runs."""

    prepared: dict[str, Prepared]
    #: Profile -> the warm starts, in seed order.
    warm: dict[str, list[WarmStart]]
    #: Profile -> key -> the runs, in seed order.
    learned: dict[str, dict[str, list[LearnResult]]]

    def runs(self, profile: str, key: str) -> list[tuple[Sequence[EpisodeRecord],
                                                          Sequence[float]]]:
        """``(records, returns)`` of each run of ``key`` (one for a fixed row)."""
        if key == "sft":
            return [(w.records, w.returns) for w in self.warm[profile]]
        if key in self.learned[profile]:
            return [(r.records, r.returns) for r in self.learned[profile][key]]
        prep = self.prepared[profile]
        return [(prep.records[key], prep.returns[key])]


def _unit(unit: tuple[Any, ...]) -> Prepared | WarmStart | LearnResult:
    """One unit: a profile's fixed rows, a seed's warm start, or one RL run."""
    kind, *args = unit
    if kind == "prep":
        return prepare_profile(*args)
    return warm_start(*args) if kind == "warm" else run_learning_job(*args)


def _describe(unit: tuple[Any, ...]) -> str:
    if unit[0] == "prep":
        return f"{unit[1]} fixed rows"
    if unit[0] == "warm":
        return f"{unit[1]} seed {unit[3]} warm start"
    return f"{unit[1].profile} {unit[1].key} seed {unit[1].seed}"


def run_all(scale: str | BopoScale = "default", profiles: Sequence[str] = PROFILE_NAMES,
            seed: int = 0, log: Callable[[str], None] = quiet, address: str | None = None,
            keeper: Kept | None = None, tasks: str = DEFAULT_TASKS) -> Results:
    """Prepare every profile, warm-start every seed and train every router.

    Units of :func:`experiments.shared.scheduler.run_units` (``sc.jobs`` processes, or
    the Ray cluster at ``address``; kept in ``keeper``), in two rounds: each profile's
    fixed rows and each (profile, seed)'s warm start, then that seed's RL runs, which
    start from the warm start. Every unit is seeded on its own, so the results do not
    depend on ``jobs`` or ``address``. Every row is scored on the task set ``tasks``
    (:mod:`experiments.shared.task_sets`).
    """
    sc = scale_of(scale)
    task_seed(tasks)  # an unknown set is refused before any work
    seeds = range(seed, seed + sc.seeds)
    budgets = {p: profile_budget(p, sc, seed) for p in profiles}
    # the validation set's units as they always were; a test run's name their set
    prep_more: tuple[Any, ...] = () if tasks == DEFAULT_TASKS else (tasks,)
    warm_more: tuple[Any, ...] = () if tasks == DEFAULT_TASKS else (True, tasks)
    first: list[tuple[Any, ...]] = []
    for p in profiles:
        first += ([("prep", p, sc, seed, *prep_more)]
                  + [("warm", p, sc, s, budgets[p], *warm_more) for s in seeds])
    run: dict[str, Any] = {
        "jobs": sc.jobs, "address": address, "describe": _describe, "keeper": keeper,
        "label": "bopo", "log": lambda message: log(message.removeprefix("bopo: "))}
    ready = run_units(_unit, first, **run)
    prepared = {r.profile: r for r in ready if isinstance(r, Prepared)}
    warm: dict[str, dict[int, WarmStart]] = {p: {} for p in profiles}
    for w in ready:
        if isinstance(w, WarmStart):
            warm[w.profile][w.seed] = w
    second = [("learn", job) for p in profiles for s in seeds
              for job in learn_jobs(warm[p][s], sc, budgets[p], seed, tasks)]
    learned: dict[str, dict[tuple[str, int], LearnResult]] = {p: {} for p in profiles}
    for result in run_units(_unit, second, **run):
        learned[result.job.profile][result.key, result.job.seed] = result
    return in_job_order(prepared, warm, learned, profiles, sc, seed)


def in_job_order(prepared: Mapping[str, Prepared], warm: Mapping[str, Mapping[int, WarmStart]],
                 learned: Mapping[str, Mapping[tuple[str, int], LearnResult]],
                 profiles: Sequence[str], sc: BopoScale, seed: int) -> Results:
    """The results in the order of the profiles, of their rows and of the seeds.

    Workers finish in whatever order the machine's load gives; reports follow this order
    (rows, JSON keys, figure colours), as a one-process run does, so a rerun writes the
    same files.
    """
    ordered: dict[str, dict[str, list[LearnResult]]] = {}
    for profile in profiles:
        ordered[profile] = {}
        for s in range(seed, seed + sc.seeds):
            for job in learn_jobs(warm[profile][s], sc, 0.0, seed):
                ordered[profile].setdefault(job.key, []).append(learned[profile][job.key, s])
    return Results({p: prepared[p] for p in profiles},
                   {p: [warm[p][s] for s in range(seed, seed + sc.seeds)] for p in profiles},
                   ordered)


# ----------------------------------------------------------------------- the summary
def _row_order(keys: Sequence[str], sc: BopoScale, profile: str) -> list[str]:
    learned = row_keys(sc, profile)
    return (["always-small", "always-large"]
            + [k for k in keys if k.startswith("random-mix/")]
            + [k for k in keys if k.startswith("cascade/")]
            + [k for k in TRAINED_RULES if k in keys]
            + ["sft"] + [k for k in learned if k.startswith("ppo/")]
            + [k for k in learned if k.startswith("bopo/")] + ["planner", "oracle"])


def _warm_entry(warm: Sequence[WarmStart]) -> dict[str, Any]:
    first = warm[0]
    return {"trajectories": first.sft_counts, "steps": first.sft_steps,
            "epoch_losses": first.sft_losses,
            "demo_log_likelihood_before_after": list(first.sft_log_likelihood),
            "per_seed": [{"seed": w.seed, "trajectories": w.sft_counts, "steps": w.sft_steps,
                          "demo_log_likelihood_before_after": list(w.sft_log_likelihood)}
                         for w in warm]}


def _curves(runs: Sequence[LearnResult]) -> dict[str, Any]:
    """A row's learning curve: the mean over seeds at each checkpoint, and each seed's."""
    per_seed = [list(r.curve) for r in runs]
    mean = [{"timesteps": point["timesteps"],
             **{k: float(sum(c[i][k] for c in per_seed) / len(per_seed))
                for k in point if k != "timesteps"}}
            for i, point in enumerate(per_seed[0])]
    return {"mean": mean, "per_seed": per_seed}


def summarise(results: Results, sc: BopoScale, seed: int = 0,
              tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """The report's data, as JSON values (``tasks``: the set the results were scored on).

    Per profile: the taxonomy, the budget, every method's metrics (learned rows pooled
    over their seeds, each seed's values kept), the learning curves and the frontier
    outcomes; the ``lambda_scan`` block (:mod:`experiments.bopo.scan`) and the
    ``gap_closed`` block (:mod:`experiments.bopo.gaps`).
    """
    seeds = list(range(seed, seed + sc.seeds))
    out: dict[str, Any] = tagged({"machine": machine(), "scale": asdict(sc),
                                  "eval_task_seed": task_seed(tasks),
                                  "train_task_seed": BOPO_TRAIN_TASK_SEED + seed,
                                  "seeds": seeds, "profiles": {}}, tasks)
    returns: dict[str, dict[str, list[Sequence[float]]]] = {}
    for profile, prep in results.prepared.items():
        order = _row_order(list(prep.records), sc, profile)
        runs = {k: results.runs(profile, k) for k in order}
        returns[profile] = {k: [r for _, r in v] for k, v in runs.items()}
        methods = {k: {"label": label(k),
                       **method_summary([rec for rec, _ in runs[k]], prep.eval_boundaries,
                                        sc.resamples, seed, returns[profile][k]),
                       **prep.fitted.get(k, {})}
                   for k in order}
        for k in ["sft", *row_keys(sc, profile)]:
            methods[k]["seeds"] = seeds
        points = {k: (m["success_rate"], m["avg_cost"]) for k, m in methods.items()}
        records = {k: [rec for rec, _ in v] for k, v in runs.items()}
        out["profiles"][profile] = {
            "budget": prep.budget,
            "cost_scale": [w.cost_scale for w in results.warm[profile]],
            "strata_train": strata_distribution(prep.train_boundaries),
            "strata_eval": strata_distribution(prep.eval_boundaries),
            "inversion_share_train": inversion_share(prep.train_boundaries),
            "inversion_share_eval": inversion_share(prep.eval_boundaries),
            "sft": _warm_entry(results.warm[profile]),
            "methods": methods,
            "learning_curves": {k: _curves(results.learned[profile][k])
                                for k in row_keys(sc, profile)},
            "tuned": tuned_choices(profile),
            "frontiers": {rival: compare_frontiers(points, rival, records, sc.resamples, seed)
                          for rival in RIVALS},
        }
    if sc.scan_profile in results.prepared:
        profile = sc.scan_profile
        scan_runs = {k: results.runs(profile, k)[:sc.scan_seeds] for k in scan_keys(sc)}
        out["lambda_scan"] = scan_block(profile, scan_runs, seeds[:sc.scan_seeds],
                                        {k: results.runs(profile, k)[0]
                                         for k in TRAINED_RULES}, sc.resamples, seed)
    out["gap_closed"] = gap_block(returns, {profile: prep.rule for profile, prep
                                            in results.prepared.items()}, tasks)
    return out


def report(out_dir: Path, scale: str | BopoScale = "default", seed: int = 0,
           log: Callable[[str], None] = quiet, jobs: int | None = None,
           profiles: Sequence[str] = PROFILE_NAMES, address: str | None = None,
           tasks: str = DEFAULT_TASKS) -> str:
    """Run BoPO against its baselines on the three profiles and write the results.

    Writes ``bopo.md``, ``bopo.json`` and ``pareto_bopo_<profile>.png`` / ``.svg`` into
    ``out_dir``,
    all or nothing, after everything is computed and rendered
    (:func:`agents.files.write_files_atomic`).

    Args:
        out_dir: Output directory (created if needed).
        scale: ``"smoke"`` (seconds, for tests), ``"default"`` (about 4 minutes on 2
            cores), ``"full"`` (five times the RL steps, no λ scan) or a
            :class:`BopoScale`.
        seed: First training seed (seeds ``seed`` .. ``seed + scale.seeds - 1``: network
            initialisation, training tasks, SFT sampling); the base seed's training draw
            sets the budget and fits the rules.
        log: Progress printer.
        jobs: Worker processes, instead of the scale's own ``jobs``.
        profiles: The profiles to run (default all three).
        address: The Ray cluster to run the units on, instead of local processes.
        tasks: The task set every row is scored on, ``validation`` (today's tables) or
            ``test`` (:mod:`experiments.shared.task_sets`).

    Returns:
        The Markdown report.
    """
    sc = scale_of(scale)
    if jobs is not None:
        sc = dataclasses.replace(sc, jobs=jobs)
    start = time.perf_counter()
    keeper = Kept(units_folder(out_dir, "bopo", sc.name),
                  keeper_settings(repr((dataclasses.replace(sc, jobs=1), seed,
                                        tuple(profiles))), tasks))
    results = run_all(sc, profiles=profiles, seed=seed, log=log, address=address,
                      keeper=keeper, tasks=tasks)
    summary = summarise(results, sc, seed, tasks)
    seconds = time.perf_counter() - start
    summary["wall_seconds"] = seconds
    text = markdown(summary, seconds)
    files: dict[str, str | bytes] = {"bopo.md": text,
                                     "bopo.json": json.dumps(summary, indent=2) + "\n"}
    for profile, rep in summary["profiles"].items():
        files |= figure_files(f"pareto_bopo_{profile}", pareto_figure(profile, rep))
    write_files_atomic(out_dir, files)
    keeper.clear()
    return text
