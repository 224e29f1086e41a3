"""Issue #10's rule search on every registered env: the best fixed rule, and what it scores.

For each env id (default arguments), :class:`agents.rules.BestFixedRule` searches its family
(open-loop call patterns, single thresholds on one observed feature, the project's
hand-written rules) on ``train_tasks`` training tasks drawn from
:data:`agents.seeds.RULE_TASK_SEED`, ranks by mean episode return and freezes the simplest
rule within one standard error of the top one. That rule, the top-ranked one and the best
open-loop rule are then scored on ``episodes`` evaluation tasks (task seed 0, the validation
set; with ``tasks="test"`` the test set, :mod:`experiments.shared.task_sets`, and the report
names it), with 95% bootstrap intervals over tasks. For FlightPlanner and ToolBench these
are the tasks of ``lora_ppo``'s tables; CORL and BoPO score per tier and per profile on
their own task sets, where their tables carry their own best-rule rows. An env of logged
queries (TraceRouting, ``split=``) is searched on its train split and scored once on every
query of its test split, so no query is both fitted and scored.

Outputs, in ``out``: ``rule_search.md`` (:mod:`experiments.rules.report`) and
``rule_search.json``, rendered before either is written and written all or nothing. The
envs are independent, so they run in ``jobs`` worker processes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

import cost_envs
from agents.baselines import FixedSequence
from agents.evaluation import evaluate
from agents.files import write_files_atomic
from agents.rules import BestFixedRule, ScoredRule
from agents.seeds import RULE_TASK_SEED
from experiments.rules.report import markdown
from experiments.shared.common import machine
from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import run_units
from experiments.shared.task_sets import DEFAULT_TASKS, keeper_settings, tagged, task_seed


@dataclass(frozen=True)
class Scale:
    """How much work the search does (see :class:`agents.rules.BestFixedRule`)."""

    name: str
    train_tasks: int
    episodes: int
    resamples: int
    beam: int
    max_turns: int
    cuts: int


SCALES = {
    # Plumbing check for the tests: every env, every file, in seconds. Not a result.
    "smoke": Scale("smoke", train_tasks=30, episodes=30, resamples=50, beam=2, max_turns=2,
                   cuts=2),
    "default": Scale("default", train_tasks=200, episodes=400, resamples=1000, beam=3,
                     max_turns=4, cuts=8),
}


def _training(candidate: ScoredRule) -> dict[str, Any]:
    return {"rule": candidate.description, "mean_return": candidate.mean_return,
            "stderr": candidate.stderr, "success_rate": candidate.success,
            "avg_cost": candidate.cost}


def _envs(env_id: str) -> tuple[gym.Env, gym.Env]:
    """The env the search fits on and the one it is scored on (splits for logged queries)."""
    probe = gym.make(env_id)
    if getattr(probe.unwrapped, "split", None) is None:
        return probe, gym.make(env_id)
    probe.close()
    return gym.make(env_id, split="train"), gym.make(env_id, split="test")


def search_env(env_id: str, scale: Scale, tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """Search one env's rules on training tasks; score the chosen ones on evaluation tasks.

    ``tasks``: the set they are scored on (:mod:`experiments.shared.task_sets`); the search
    itself reads only its training tasks (``RULE_TASK_SEED``).
    """
    start = time.perf_counter()
    eval_seed = task_seed(tasks)
    train_env, eval_env = _envs(env_id)
    best = BestFixedRule(train_env, n_tasks=scale.train_tasks, seed=RULE_TASK_SEED,
                         beam=scale.beam, max_turns=scale.max_turns, cuts=scale.cuts)
    open_loop = next(c for c in best.ranking if isinstance(c.rule, FixedSequence))
    dataset = getattr(eval_env.unwrapped, "dataset", None)
    episodes = scale.episodes if dataset is None else dataset.n_queries  # each query once
    rows = {}
    for key, candidate in (("chosen", best.chosen), ("top", best.ranking[0]),
                           ("open_loop", open_loop)):
        result = evaluate(candidate.rule, eval_env, episodes, eval_seed)
        rows[key] = {"label": candidate.description, "training": _training(candidate),
                     **result.summary(n_resamples=scale.resamples, seed=eval_seed)}
    train_env.close()
    eval_env.close()
    return {"env_id": env_id, "candidates": len(best.ranking), "rows": rows,
            "seconds": round(time.perf_counter() - start, 1)}


def _search(unit: tuple[Any, ...]) -> dict[str, Any]:
    return search_env(*unit)


def reproduce(scale: Scale, envs: Collection[str] = cost_envs.ENV_IDS, jobs: int = 2,
              log: Any = print, address: str | None = None,
              keeper: Kept | None = None, tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """Every env's search; returns the JSON-ready report.

    Each env is a unit of :func:`experiments.shared.scheduler.run_units` (``jobs``
    processes, or the Ray cluster at ``address``; kept in ``keeper`` as it finishes).
    ``tasks``: the set the rules are scored on (:mod:`experiments.shared.task_sets`);
    a report scored on the test set names it (``"tasks": "test"``).
    """
    eval_seed = task_seed(tasks)
    # the validation set's units as they always were (the kept files' names and contents)
    units: list[tuple[Any, ...]] = [(env_id, scale) if tasks == DEFAULT_TASKS
                                    else (env_id, scale, tasks) for env_id in envs]
    log(f"rules: searching {len(envs)} envs ({scale.name}: {scale.train_tasks} training "
        f"tasks) in {jobs} process(es)")
    results = run_units(_search, units, jobs=jobs,
                        address=address, describe=lambda unit: unit[0], keeper=keeper,
                        label="rules", log=log)
    return tagged({"machine": machine(), "scale": asdict(scale), "eval_seed": eval_seed,
                   "train_seed": RULE_TASK_SEED, "envs": results}, tasks)


def report(out: Path, scale: str = "default", jobs: int = 2, log: Any = print,
           address: str | None = None, tasks: str = DEFAULT_TASKS) -> list[Path]:
    """Run the search at ``scale``; write ``rule_search.md`` and ``.json``; return the paths.

    ``tasks``: the set the rules are scored on, ``validation`` (today's page) or ``test``
    (:mod:`experiments.shared.task_sets`).

    Raises:
        ValueError: For an unknown scale or task set.
    """
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    keeper = Kept(units_folder(out, "rules", scale), keeper_settings(repr(SCALES[scale]), tasks))
    result = reproduce(SCALES[scale], jobs=jobs, log=log, address=address, keeper=keeper,
                       tasks=tasks)
    files = {"rule_search.md": markdown(result),
             "rule_search.json": json.dumps(result, indent=2, sort_keys=True) + "\n"}
    written = write_files_atomic(out, files)
    keeper.clear()
    return written
