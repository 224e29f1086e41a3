"""CORL's experiment: one controller for three budget tiers, on ExpertRouting-v0 and -v1.

:func:`run_corl` trains both variants of :mod:`agents.learners.corl` (the shared PPO
policy and one LoRA adapter per tier on its frozen encoder) on one env and scores them
with the reference rows (the controller alone, each single expert, consulting every
expert, the escalation rule, the best fixed rule searched per tier on training tasks, the
privileged oracle and the privileged planner that knows each question but not its luck)
per profile and tier, on the same queries for every method
(:func:`agents.learners.corl.tier_records`). Each env's JSON carries a ``gap_closed``
block (:mod:`experiments.shared.gaps`): per (profile, tier), the share of the gap from the best
fixed row to the planner that each learned row closes. :func:`report` does that for each
env of :data:`CORL_ENVS` (in worker processes when the scale says so) and writes, per env,
the tables and figure (:mod:`experiments.corl.report`) and the JSON: ``corl_tiers.md``,
``corl_tiers.json`` and ``pareto_corl.png`` / ``.svg`` for ExpertRouting-v0,
``corl_tiers_ExpertRouting-v1.md``, ``.json`` and ``pareto_corl_ExpertRouting-v1.png`` /
``.svg`` for v1 (:func:`file_names`), all rendered before any is written and written all together
(:func:`agents.files.write_files_atomic`). The paper PPO's training curves, one per seed,
are a CSV beside each JSON (``corl_tiers_curves.csv``, :func:`json_files`); the JSON names
it, and :func:`read_result` reads both back into the result :func:`run_corl` returned.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from agents.files import write_files_atomic
from agents.learners.corl import (
    EXPERT_ROUTING,
    tier_records,
    tier_scores,
    train_shared_ppo,
    train_tier_adapters,
    within_budget,
)
from cost_envs.wrappers import TIERS
from experiments.corl.report import (  # noqa: F401  (the row labels, importable from here)
    BEST_RULE,
    CONSULT_ALL,
    EVERY_PROFILE,
    LEARNED,
    LEARNED_KEYS,
    ORACLE,
    PAPER_LEARNED,
    PLANNER,
    PRIVILEGED,
    TUNED_LEARNED,
    corl_figure,
    corl_markdown,
    learned_in,
    task_name,
)
from experiments.corl.settings import CORL_SCALES, EVAL_SEED, CorlScale
from experiments.shared import gaps
from experiments.shared.common import described, machine, quiet, recording, refitting_none
from experiments.shared.figures import figure_files
from experiments.shared.histories import detach, read_with_histories
from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import run_units
from experiments.shared.task_sets import (
    CHOICE_TASKS,
    DEFAULT_TASKS,
    choice_seed,
    choose,
    chooses_apart,
    keeper_settings,
    tagged,
    task_seed,
)
from experiments.tune import corl as tune_corl
from experiments.tune import runner as tune

if TYPE_CHECKING:
    from cost_envs.envs.expert_routing import ExpertRoutingEnv

PROFILES_EVALUATED = ("mixed", "gsm8k", "math500", "aime")
#: The envs the experiment runs on, each with its own report: v0, and v1 where wrong
#: answers can coincide (issue #10).
CORL_ENVS = (EXPERT_ROUTING, "cost_envs/ExpertRouting-v1")


def _policy_allocator(policy: Any) -> Callable[[gym.Env], Any]:
    return lambda env: policy


def _single_expert(consult: Callable[[gym.Env, list[int]], Any], i: int
                   ) -> Callable[[gym.Env], Any]:
    """``env -> consult(env, [i])``: expert ``i`` alone (a new list for each env)."""
    return lambda env: consult(env, [i])


def fixed_methods(expert_names: list[str], rule_tasks: int = 200
                  ) -> dict[str, Callable[[gym.Env], Any]]:
    """The fixed reference rows, each a factory called with the tier's env.

    The controller alone, each single expert, all experts, the escalation rule, the best
    fixed rule, the oracle and the planner. Each is called with the tier's env, so the best
    fixed rule is searched per tier, on ``rule_tasks`` training tasks of the profile
    (their own seed range), for the most gated reward, and the planner plans for the
    tier's budget.
    """
    from agents.baselines import ConsultAll, CostOptOracle, FixedConsultation, RuleBased
    from agents.planning import planner
    from agents.rules import BestFixedRule

    methods: dict[str, Callable[[gym.Env], Any]] = {
        "Controller alone": lambda env: FixedConsultation(env, [])}
    for i, name in enumerate(expert_names):
        methods[f"Single expert: {name}"] = _single_expert(FixedConsultation, i)
    methods[CONSULT_ALL] = ConsultAll
    methods["Escalate until agreement (rule)"] = RuleBased
    methods[BEST_RULE] = partial(BestFixedRule, n_tasks=rule_tasks)
    methods[ORACLE] = CostOptOracle
    methods[PLANNER] = planner
    return methods


def _check_scale(scale: str | CorlScale) -> CorlScale:
    if isinstance(scale, CorlScale):
        return scale
    if scale not in CORL_SCALES:
        raise ValueError(f"scale: expected one of {list(CORL_SCALES)}, got {scale!r}")
    return CORL_SCALES[scale]


def tuned_configs(env_id: str) -> dict[str, dict[str, Any]]:
    """The configurations CORL's sweeps chose on ``env_id``, by tuned row label.

    Read from the committed sweeps (``experiments/tuned/``); empty where the env has none.
    """
    configs = {label: tune.chosen(method, env_id)
               for label, method in zip(TUNED_LEARNED, ("corl-ppo", "corl-adapters"),
                                        strict=True)}
    return {label: config for label, config in configs.items() if config is not None}


def _tuned_rows(settings: CorlScale, seed: int, env_id: str
                ) -> dict[str, Callable[[gym.Env], Any]]:
    """Train the tuned rows on the untuned ones' steps.

    PPO ``ppo_timesteps``; the adapters' two stages ``ppo_timesteps + 3 *
    adapter_timesteps`` in all, split as the sweep chose
    (:func:`experiments.tune.corl.split_steps`).
    """
    configs = tuned_configs(env_id)
    # looked up on the module at call time (tests stand in for the fits)
    fits = {TUNED_LEARNED[0]: (tune_corl.fit_corl_ppo, settings.ppo_timesteps),
            TUNED_LEARNED[1]: (tune_corl.fit_corl_adapters,
                               settings.ppo_timesteps + len(TIERS) * settings.adapter_timesteps)}
    rows = {}
    for label, config in configs.items():
        fit, steps = fits[label]
        policy, _ = fit(env_id, config, steps, seed)
        rows[label] = _policy_allocator(policy)
    return rows


def learned_runs(scale: str, seed: int, env_id: str = EXPERT_ROUTING,
                 tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """Train one seed's controllers; their episodes on every profile and tier.

    The paper's two (shared PPO, then per-tier adapters on it), and where ``env_id`` has
    committed sweeps (:func:`tuned_configs`) the same two in their tuned configuration,
    scored on the task set ``tasks`` (:mod:`experiments.shared.task_sets`).

    Returns ``{"seed", "curve", "runs"}``, ``runs[(profile, tier, method)]`` an
    :class:`~agents.evaluation.EvaluationResult` on the evaluation queries; ``curve`` is
    the paper PPO's training curve.
    """
    settings = _check_scale(scale)
    shared, curve = train_shared_ppo(settings.ppo_timesteps, seed, env_id=env_id)
    adapters = train_tier_adapters(shared, settings.adapter_timesteps, seed, env_id=env_id)
    rows = dict(zip(PAPER_LEARNED, (_policy_allocator(shared), _policy_allocator(adapters)),
                    strict=True))
    rows.update(_tuned_rows(settings, seed, env_id))
    runs = {(profile, tier, method): tier_records(factory, tier, settings.episodes,
                                                  task_seed(tasks), {"profile": profile},
                                                  env_id)
            for profile in PROFILES_EVALUATED for tier in TIERS
            for method, factory in rows.items()}
    return {"seed": seed, "curve": [dict(point) for point in curve], "runs": runs}


def is_rule_candidate(method: str) -> bool:
    """Whether the row ``method`` can be the gap's rule: fixed, and reads no hidden question."""
    return method not in PRIVILEGED and method not in LEARNED


def best_fixed_row(rows: Mapping[str, Any]) -> str:
    """The rule of the gap: the non-privileged fixed row of the highest accuracy within budget.

    ``rows``: the scores of the table's rows on the validation queries (:func:`fixed_rows`
    chooses there whatever set it scores; on the validation set those very queries, which
    favours the rule, so the learned rows' shares are if anything understated); ties go
    to the cheaper row, then to the first in table order.
    """
    fixed = [m for m in rows if is_rule_candidate(m)]
    return max(fixed, key=lambda m: (rows[m]["accuracy_within_budget"][0],
                                     -rows[m]["avg_cost"][0]))


def tier_table(methods: Mapping[str, Callable[[gym.Env], Any]], profile: str, tier: str,
               budget: float, scale: str | CorlScale, env_id: str, first_seed: int,
               built: dict[str, Any] | None = None
               ) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The rows ``methods`` on one (profile, tier)'s queries of reset seed ``first_seed``.

    Returns the JSON-ready scores of each row (a method built with a ``description``, a
    rule searched per tier, has it as ``rule``) and each row's accuracy within budget on
    each query. ``built``, if given, keeps each row's allocator as it was built.
    """
    settings = _check_scale(scale)
    rows, per_query = {}, {}
    built = {} if built is None else built
    for method, factory in methods.items():
        run = tier_records(recording(factory, built, method), tier, settings.episodes,
                           first_seed, {"profile": profile}, env_id)
        scores = tier_scores([run], budget, settings.n_resamples, EVAL_SEED)
        rows[method] = {**scores.as_dict(), **described(built[method])}
        per_query[method] = within_budget(run, budget).tolist()
    return rows, per_query


def fixed_rows(scale: str | CorlScale, env_id: str = EXPERT_ROUTING,
               profiles: tuple[str, ...] = PROFILES_EVALUATED,
               tasks: str | int = DEFAULT_TASKS, tiers: tuple[str, ...] = TIERS
               ) -> dict[str, Any]:
    """Every fixed row's scores per profile (of ``profiles``) and tier, on the evaluation queries.

    The queries are those of the task set ``tasks`` (:mod:`experiments.shared.task_sets`),
    or those of the reset seed ``tasks`` when it is a number (another study's own set);
    ``tiers``: the tiers scored (default all). The best fixed rule is searched on its own
    training queries whichever it is. The rule
    of each table's gap is chosen on the validation queries
    (:func:`experiments.shared.task_sets.choose`): on the table itself for the validation
    set, else on the rule candidates scored again on the validation queries.

    Returns ``{"tables": {profile: {tier: {method: scores}}}, "gap": {profile: {tier:
    {"rule", "rule_scores", "reference_scores"}}}}``: the JSON-ready scores, and per table
    the best fixed row (:func:`best_fixed_row`) with its and the planner's accuracy within
    budget on each query of ``tasks``, for the ``gap_closed`` block.
    """
    settings = _check_scale(scale)
    probe = gym.make(env_id)
    base = cast("ExpertRoutingEnv", probe.unwrapped)
    names = list(base.pool.names)
    budgets = dict(base.tier_budgets)
    probe.close()
    methods = fixed_methods(names, settings.rule_tasks)
    candidates = {method: factory for method, factory in methods.items()
                  if is_rule_candidate(method)}
    tables: dict[str, Any] = {}
    gap: dict[str, Any] = {}
    for profile in profiles:
        tables[profile], gap[profile] = {}, {}
        for tier in tiers:
            table = partial(tier_table, profile=profile, tier=tier, budget=budgets[tier],
                            scale=scale, env_id=env_id)
            built: dict[str, Any] = {}
            rows, per_query = table(methods, first_seed=task_seed(tasks), built=built)

            def rescored(table: Callable[..., Any] = table,
                         built: dict[str, Any] = built) -> dict[str, Any]:
                return table(refitting_none(candidates, built), first_seed=choice_seed())[0]

            # the searched rule as it froze
            rule = choose(best_fixed_row, rows, tasks, rescored)
            tables[profile][tier] = rows
            gap[profile][tier] = {"rule": rule, "rule_scores": per_query[rule],
                                  "reference_scores": per_query[PLANNER]}
    return {"tables": tables, "gap": gap}


#: What the ``gap_closed`` block calls its rule (:func:`gap_rule` for a report of the test set).
GAP_RULE = ("the best fixed row of the (profile, tier) table: the non-privileged fixed row "
            "of the highest accuracy within budget on the same queries (each task's "
            "rule_label names it)")


def gap_rule(tasks: str) -> str:
    """:data:`GAP_RULE`, or for a report scored on other queries, where its rule was chosen."""
    if not chooses_apart(tasks):
        return GAP_RULE
    return GAP_RULE.replace("on the same queries", f"on the {CHOICE_TASKS} queries")


def assemble(env_id: str, scale: str, fixed: Mapping[str, Any],
             learned: list[dict[str, Any]], tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """The report of one env: fixed rows, learned rows pooled over seeds, the gap closed.

    The ``gap_closed`` block (:mod:`experiments.shared.gaps`) has one task per profile and tier.
    ``tasks``: the set ``fixed`` and ``learned`` were scored on; a report of the test set
    names it (``"tasks": "test"``).
    """
    settings = _check_scale(scale)
    probe = gym.make(env_id)
    base = cast("ExpertRoutingEnv", probe.unwrapped)
    names = list(base.pool.names)
    budgets = dict(base.tier_budgets)
    probe.close()
    learned = sorted(learned, key=lambda run: run["seed"])
    methods = learned_in({method for _, _, method in learned[0]["runs"]})
    results: dict[str, Any] = {}
    per_task = {}
    for profile, table in fixed["tables"].items():
        results[profile] = {}
        for tier, rows in table.items():
            results[profile][tier] = dict(rows)
            per_seed = {}
            for method in methods:
                runs = [run["runs"][profile, tier, method] for run in learned]
                scores = tier_scores(runs, budgets[tier], settings.n_resamples, EVAL_SEED)
                results[profile][tier][method] = {**scores.as_dict(), "seeds": len(runs)}
                per_seed[LEARNED_KEYS[method]] = (
                    method, [within_budget(run, budgets[tier]) for run in runs])
            gap = fixed["gap"][profile][tier]
            entry = gaps.task_entry(gap["rule_scores"], gap["reference_scores"], per_seed)
            per_task[task_name(env_id, profile, tier)] = {**entry, "rule_label": gap["rule"]}
    settings_used = {k: v for k, v in settings.__dict__.items() if k != "jobs"}  # any jobs
    return tagged({"env_id": env_id, "machine": machine(), "scale": scale,
                   "seeds": [run["seed"] for run in learned],
                   "settings": settings_used, "budgets": budgets, "experts": names,
                   "results": results, "training_curves": [run["curve"] for run in learned],
                   "tuned": tuned_configs(env_id),
                   "gap_closed": gaps.block("corl", "accuracy within the tier's budget per "
                                            "query", gap_rule(tasks), PLANNER, per_task)},
                  tasks)


def run_corl(scale: str = "default", seed: int = 0,
             log: Callable[[str], None] = quiet, env_id: str = EXPERT_ROUTING,
             tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """Train the scale's seeds (``seed``, ``seed + 1``, ...) on ``env_id`` and score all.

    Every method meets the same queries per profile and tier (those of the task set
    ``tasks``); the learned rows pool their seeds (intervals: two-level bootstrap over
    seeds and queries), the fixed rows are scored once (intervals over queries).

    Raises:
        ValueError: For an unknown scale.
    """
    settings = _check_scale(scale)
    name = env_id.split("/")[-1]
    fixed = fixed_rows(scale, env_id, tasks=tasks)
    log(f"corl: {name}: fixed rows scored")
    learned = []
    for offset in range(settings.seeds):
        learned.append(learned_runs(scale, seed + offset, env_id, tasks))
        log(f"corl: {name}: seed {seed + offset} trained and scored")
    return assemble(env_id, scale, fixed, learned, tasks)


def _unit(unit: tuple[Any, ...]) -> dict[str, Any]:
    """One unit: an env's fixed rows, or one seed's training and scores.

    ``(env_id, kind, seed, scale)``, and the task set after them when it is not the default.
    """
    from agents.learners.training import configure_torch_threads

    configure_torch_threads()  # one torch thread in a worker process
    env_id, kind, seed, scale, *rest = unit
    tasks = rest[0] if rest else DEFAULT_TASKS
    return (fixed_rows(scale, env_id, tasks=tasks) if kind == "fixed"
            else learned_runs(scale, seed, env_id, tasks))


def run_envs(scale: str = "default", seed: int = 0, envs: tuple[str, ...] = CORL_ENVS,
             log: Callable[[str], None] = quiet, jobs: int | None = None,
             address: str | None = None, keeper: Kept | None = None,
             tasks: str = DEFAULT_TASKS) -> dict[str, dict[str, Any]]:
    """:func:`run_corl` on each env, its seeds and fixed rows run as units.

    ``tasks``: the task set every method is scored on (:mod:`experiments.shared.task_sets`).

    The units go to :func:`experiments.shared.scheduler.run_units` (``jobs`` workers, by
    default the scale's, or the Ray cluster at ``address``; kept in ``keeper`` as each
    finishes).

    The result does not depend on ``jobs`` or ``address``: every unit is seeded on its own.

    Returns:
        Env id -> report, in the order of ``envs`` whatever order the workers finish in.
    """
    settings = _check_scale(scale)
    # in run_corl's order: an env's fixed rows, then its seeds
    task_seed(tasks)  # an unknown set is refused before any work
    extra = () if tasks == DEFAULT_TASKS else (tasks,)  # the default's units as they were
    units = [(env_id, kind, seed if kind == "fixed" else seed + k, scale, *extra)
             for env_id in envs
             for kind, k in [("fixed", 0), *(("learned", k) for k in range(settings.seeds))]]
    results = run_units(_unit, units, jobs=jobs or settings.jobs, address=address,
                        describe=lambda unit: (f"{unit[0].split('/')[-1]} fixed rows"
                                               if unit[1] == "fixed" else
                                               f"{unit[0].split('/')[-1]} seed {unit[2]}"),
                        keeper=keeper, label="corl", log=log)
    done = dict(zip([unit[:3] for unit in units], results, strict=True))
    return {env_id: assemble(env_id, scale, done[env_id, "fixed", seed],
                             [v for (e, kind, _), v in done.items()
                              if e == env_id and kind == "learned"], tasks)
            for env_id in envs}


def file_names(env_id: str) -> tuple[str, str, str]:
    """The Markdown and JSON names and the figure's stem of ``env_id``'s report.

    ExpertRouting-v0 keeps the names it always had (``corl_tiers.md``, ``corl_tiers.json``,
    ``pareto_corl`` .png and .svg); another env's carry its name
    (``corl_tiers_ExpertRouting-v1.md``).
    """
    suffix = "" if env_id == EXPERT_ROUTING else f"_{env_id.split('/')[-1]}"
    return f"corl_tiers{suffix}.md", f"corl_tiers{suffix}.json", f"pareto_corl{suffix}"


#: The curves' method in the CSV: they are the paper PPO's (the ``ppo`` learned key).
CURVES_METHOD = "ppo"


def json_files(result: Mapping[str, Any]) -> dict[str, str]:
    """The JSON text of ``result`` and the CSV of its training curves, by file name.

    The JSON's ``training_curves_csv`` names the CSV (:func:`experiments.shared.histories.detach`).
    """
    json_name = file_names(result["env_id"])[1]
    curves_name = json_name.removesuffix(".json") + "_curves.csv"
    summary, text = detach({**result, "training_curves": {
        CURVES_METHOD: result["training_curves"]}}, "training_curves", curves_name)
    return {json_name: json.dumps(summary, indent=2) + "\n", curves_name: text}


def read_result(path: Path) -> dict[str, Any]:
    """A ``corl_tiers*.json`` file with its training curves read back from their CSV.

    Raises:
        ValueError: If the file or its CSV cannot be read.
    """
    result = read_with_histories(path, "training_curves", "corl")
    return {**result, "training_curves": result["training_curves"][CURVES_METHOD]}


def report(out_dir: Path, scale: str = "default", seed: int = 0,
           log: Callable[[str], None] = quiet, envs: tuple[str, ...] = CORL_ENVS,
           jobs: int | None = None, address: str | None = None,
           tasks: str = DEFAULT_TASKS) -> dict[str, str]:
    """Run :func:`run_corl` on each env and write its tables, JSON, curves CSV and figure.

    Everything is rendered before anything is written, and the files of every env are
    written all or nothing (:func:`agents.files.write_files_atomic`); names from
    :func:`file_names`.

    Args:
        out_dir: Output directory (created if needed).
        scale: A key of :data:`CORL_SCALES`.
        seed: Training seed.
        log: Progress printer.
        envs: Env ids, each with its own report.
        jobs: Worker processes (one env each), instead of the scale's own ``jobs``.
        address: The Ray cluster to run the units on, instead of local processes.
        tasks: The task set every method is scored on, ``validation`` (today's tables) or
            ``test`` (:mod:`experiments.shared.task_sets`).

    Returns:
        Env id -> its Markdown.
    """
    keeper = Kept(units_folder(out_dir, "corl", scale),
                  keeper_settings(repr((dataclasses.replace(_check_scale(scale), jobs=1),
                                        seed)), tasks))
    results = run_envs(scale, seed, envs, log, jobs, address, keeper, tasks)
    files: dict[str, str | bytes] = {}
    pages = {}
    for env_id, result in results.items():
        markdown_name, _, figure_stem = file_names(env_id)
        pages[env_id] = files[markdown_name] = corl_markdown(result)
        files |= json_files(result)
        files |= figure_files(figure_stem, corl_figure(result))
    write_files_atomic(out_dir, files)
    keeper.clear()
    return pages
