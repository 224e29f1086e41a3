"""CORL's learning curves on ExpertRouting-v1, to where each learned row stops improving (#23).

The converged budgets of :mod:`experiments.budgets.runner`, for the two learned rows of CORL's
table (:mod:`experiments.corl.runner`): the shared PPO controller (one policy for all tiers) and
the per-tier LoRA adapters trained on it. Per seed, the shared PPO trains
``ppo_checkpoints[-1]`` steps over all tiers (:func:`agents.learners.corl.train_shared_ppo`)
and is scored at each of ``ppo_checkpoints``; the adapters then train from the shared
controller as it was at ``adapter_from`` (the end of its stage in the committed full-scale
table, so that table's LoRA-PPO row is a point of this curve) for ``adapter_checkpoints[-1]``
steps per tier (:func:`agents.learners.corl.train_tier_adapters`), each scored on its own
tier at each of ``adapter_checkpoints``. A score is CORL's gated metric, accuracy within
the tier's budget, per query, on the table's evaluation queries (``episodes`` of task seed
0, profile ``mixed``: :class:`agents.learners.corl.TierScoresAtSteps`). The training
itself is the table's, bit for bit: scoring runs on fresh envs and deterministic actions.

Per tier, the gap is the table's: from the best fixed row of that tier (the rule,
:func:`experiments.corl.runner.fixed_rows`) to the planner; each row's curve is a part of
:func:`experiments.budgets.report.curve_section` (score and share with 95% intervals over seeds
and queries, the stop mark of :func:`experiments.budgets.report.stops_improving`).

Outputs in ``out``, written together or not at all: ``budgets_ExpertRouting-v1.md`` and
``budgets_ExpertRouting-v1.csv`` (row ``<tier>/<ppo|lora-ppo>``, seed, env steps,
gradient steps, the mean and the per-query scores; rows ``<tier>/rule`` and
``<tier>/planner``, without seed or steps, hold the gap's ends per query).
``python -m experiments.corl.budgets``.
"""

from __future__ import annotations

import argparse
import csv
import io
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from agents.files import write_files_atomic
from cost_envs.config import integer, one_of
from cost_envs.wrappers import TIERS
from experiments.budgets.report import curve_section
from experiments.corl.report import PAPER_LEARNED
from experiments.corl.settings import CORL_SCALES, EVAL_SEED
from experiments.shared.common import machine
from experiments.shared.gaps import encode_scores
from experiments.shared.kept import Runs, run_file
from experiments.shared.scheduler import add_scheduling_arguments, run_units, scheduling

if TYPE_CHECKING:
    from cost_envs.envs.expert_routing import ExpertRoutingEnv

ENV_ID = "cost_envs/ExpertRouting-v1"
#: The profile the curves are scored on: the table's first, where the low tier's gap is resolved.
PROFILE = "mixed"
#: The rows' keys in the CSV, and their labels (the table's).
ROWS = dict(zip(("ppo", "lora-ppo"), PAPER_LEARNED, strict=True))
#: PPO's rollout on CORL's single env (:data:`agents.learners.PPO_SETTINGS`): checkpoints
#: fall on its multiples.
ROLLOUT = 512


@dataclass(frozen=True)
class CurveScale:
    """Checkpoints of each stage (the last is its length), seeds, queries, tiers.

    ``fixed``: the scale of :data:`experiments.corl.settings.CORL_SCALES` whose fixed rows
    (the rule's search, the queries) set the gap; ``episodes`` must be its.
    """

    name: str
    ppo_checkpoints: tuple[int, ...]
    adapter_from: int
    adapter_checkpoints: tuple[int, ...]
    seeds: int = 5
    episodes: int = 400
    resamples: int = 1000
    tiers: tuple[str, ...] = TIERS
    fixed: str = "full"

    def __post_init__(self) -> None:
        fixed = one_of(self.fixed, "CurveScale.fixed", tuple(CORL_SCALES))
        if CORL_SCALES[fixed].episodes != self.episodes:
            raise ValueError(f"CurveScale.episodes: expected the {fixed} fixed rows' "
                             f"{CORL_SCALES[fixed].episodes} queries, got {self.episodes!r}")
        for name in ("seeds", "episodes", "resamples"):
            integer(getattr(self, name), f"CurveScale.{name}", minimum=1)
        for name in ("ppo_checkpoints", "adapter_checkpoints"):
            steps = getattr(self, name)
            if not steps or list(steps) != sorted(set(steps)) or steps[0] != 0 or any(
                    step % ROLLOUT for step in steps):
                raise ValueError(f"CurveScale.{name}: expected increasing multiples of "
                                 f"{ROLLOUT} from 0, got {steps!r}")
        if self.adapter_from not in self.ppo_checkpoints:
            raise ValueError(f"CurveScale.adapter_from: expected one of ppo_checkpoints "
                             f"{self.ppo_checkpoints}, got {self.adapter_from!r}")
        for tier in self.tiers:
            one_of(tier, "CurveScale.tiers", TIERS)


SCALES = {
    "smoke": CurveScale("smoke", (0, 512, 1024), 512, (0, 512), seeds=2, episodes=30,
                        resamples=100, tiers=("low",), fixed="smoke"),
    # The table's full scale is PPO 204,800 then 51,200 per adapter: twice each, so a
    # row that is still improving there shows it.
    "default": CurveScale("default", (0, 25_600, 51_200, 102_400, 204_800, 409_600), 204_800,
                          (0, 12_800, 25_600, 51_200, 102_400)),
}


def run_seed(seed: int, scale: CurveScale, env_id: str = ENV_ID) -> dict[str, Any]:
    """Train one seed's shared PPO and adapters, scoring both at their checkpoints.

    Returns ``{"seed", "ppo": {"curve", "seconds"}, "lora-ppo": {tier: {"curve",
    "seconds"}}}``; a curve entry's ``scores[tier]`` is the accuracy within budget per
    query. The adapters' seconds are the adapter stage's mean per tier.
    """
    from agents.learners.corl import TierScoresAtSteps, train_shared_ppo, train_tier_adapters
    from agents.learners.training import configure_torch_threads

    configure_torch_threads()
    kwargs = {"profile": PROFILE}
    start = time.perf_counter()
    shared = TierScoresAtSteps(env_id, scale.ppo_checkpoints, scale.tiers, scale.episodes,
                               EVAL_SEED, kwargs, keep=True)
    train_shared_ppo(scale.ppo_checkpoints[-1], seed, env_id=env_id, callbacks=[shared])
    middle = time.perf_counter()
    adapters = {tier: TierScoresAtSteps(env_id, scale.adapter_checkpoints, (tier,),
                                        scale.episodes, EVAL_SEED, kwargs)
                for tier in scale.tiers}
    train_tier_adapters(shared.policies[scale.adapter_from], scale.adapter_checkpoints[-1],
                        seed, env_id=env_id, tiers=scale.tiers,
                        callbacks={tier: [callback] for tier, callback in adapters.items()})
    per_tier = (time.perf_counter() - middle) / len(scale.tiers)
    return {"seed": seed, "ppo": {"curve": shared.curve, "seconds": middle - start},
            "lora-ppo": {tier: {"curve": callback.curve, "seconds": per_tier}
                         for tier, callback in adapters.items()}}


@cache  # a probe env per call otherwise: training and each scoring read it
def tier_budget(tier: str, env_id: str = ENV_ID) -> float:
    """The budget per query of ``tier`` on the curves' profile (as :class:`TierScoresAtSteps`)."""
    from agents.learners.corl import make_tier_env

    probe = make_tier_env({"profile": PROFILE}, env_id=env_id)
    budget = float(probe.budgets[one_of(tier, "tier", TIERS)])
    probe.close()
    return budget


def env_kwargs(tier: str) -> dict[str, Any]:
    """ExpertRouting-v1 of one tier for a learner without the tier slot, as ``gym.make`` args.

    The curves' profile under ``tier``'s budget per query as a hard cap (calls past it
    dropped, ``on_exceed="mask"``), for a trainer that builds its own envs
    (:mod:`experiments.teacherless`). Not CORL's own training env: CORL's rows train on
    :class:`~cost_envs.wrappers.BudgetTier`'s gated reward with no cap, and the fixed rows
    of :func:`gap_ends` play uncapped, scoring 0 on a query they overspend, while a
    learner here cannot overspend (its calls past the budget are dropped). That is an
    edge the gap's ends do not have, so its share of that gap is not like for like.
    """
    return {"profile": PROFILE, "budget": tier_budget(tier), "on_exceed": "mask"}


def score(allocator: Any, episodes: int, seed: int, tier: str) -> list[float]:
    """CORL's gated score (accuracy within ``tier``'s budget) per query of reset seed ``seed``.

    On :func:`env_kwargs`' env: the queries of :func:`agents.learners.corl.tier_records`
    (BudgetTier keeps the env's task stream), so those :func:`gap_ends` scores.
    """
    from agents.evaluation import evaluate
    from agents.learners.corl import within_budget

    result = evaluate(allocator, ENV_ID, episodes, seed, env_kwargs=env_kwargs(tier))
    return within_budget(result, tier_budget(tier)).tolist()


def gap_ends(episodes: int, seed: int, tier: str, scale: str | CurveScale = "default"
             ) -> tuple[list[float], list[float]]:
    """The curves' gap ends on ``tier``'s ``episodes`` queries of reset seed ``seed``.

    The best fixed row (chosen on the validation queries whatever ``seed`` is) and the
    planner, as :func:`report` takes them from the table's fixed rows
    (:func:`experiments.corl.runner.fixed_rows` of ``scale.fixed``, on these queries).
    """
    from dataclasses import replace

    from experiments.corl.runner import fixed_rows

    chosen = SCALES[scale] if isinstance(scale, str) else scale
    fixed = replace(CORL_SCALES[chosen.fixed], episodes=episodes)
    gap = fixed_rows(fixed, ENV_ID, (PROFILE,), seed, (tier,))["gap"][PROFILE][tier]
    return list(gap["rule_scores"]), list(gap["reference_scores"])


def row_runs(results: Sequence[dict[str, Any]], key: str, tier: str) -> list[dict[str, Any]]:
    """One row's runs on one tier in :func:`experiments.budgets.report.curve_section`'s form."""
    runs = []
    for result in sorted(results, key=lambda r: r["seed"]):
        run = result["ppo"] if key == "ppo" else result["lora-ppo"][tier]
        runs.append({"seed": result["seed"], "seconds": run["seconds"],
                     "curve": [{"timesteps": entry["timesteps"],
                                "gradient_steps": entry["gradient_steps"],
                                "scores": entry["scores"][tier]} for entry in run["curve"]]})
    return runs


def curves_table(results: Sequence[dict[str, Any]], gap: dict[str, dict[str, Any]],
                 budgets: dict[str, float], scale: CurveScale, env_id: str = ENV_ID
                 ) -> tuple[str, str]:
    """The Markdown and the CSV of the curves; ``gap[tier]`` from ``fixed_rows``' ``gap``."""
    full = CORL_SCALES["full"]
    where = (f" (the end of its stage in the full-scale table, `benchmarks/results/full/"
             f"corl_tiers_{env_id.split('/')[-1]}.md`, whose {full.adapter_timesteps:,} "
             "steps per adapter are a point of this curve)"
             if scale.adapter_from == full.ppo_timesteps else "")
    lines = [f"# Learning curves of CORL's controllers on {env_id}", "",
             f"{len(results)} seeds. The shared PPO (one policy for all tiers, a tier drawn "
             f"per query) trains {scale.ppo_checkpoints[-1]:,} env steps on one env; each "
             "tier's LoRA adapter then trains on that tier only from the shared controller as "
             f"it was at {scale.adapter_from:,} steps{where}, its env and gradient steps "
             "counted from there. Each point scores the policy on the same "
             f"{scale.episodes} evaluation tasks (queries of profile `{PROFILE}`, task seed "
             f"{EVAL_SEED}) of the tier: accuracy within the tier's budget [95% interval over "
             "seeds and tasks]; share: of the gap from the tier's best fixed row (0) to the "
             "planner that knows the question but not its luck (1), paired over the queries. "
             "**Stops** marks the first checkpoint from which no gain to the last one is "
             "resolved above zero. The wall time of the shared PPO includes its scoring on "
             "every tier; an adapter's is its stage's mean per tier.", "",
             f"Machine: {machine()}.", ""]
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    writer.writerow(["row", "seed", "timesteps", "gradient_steps",
                     "mean_accuracy_within_budget", "scores"])
    for tier in scale.tiers:
        rule, planner = gap[tier]["rule_scores"], gap[tier]["reference_scores"]
        # the gap's ends per query, so that every share can be recomputed from the file
        writer.writerows([f"{tier}/{end}", "", "", "", f"{np.mean(scores):.6f}",
                          encode_scores(scores)]
                         for end, scores in (("rule", rule), ("planner", planner)))
        lines += [f"## Tier `{tier}` (budget ${budgets[tier]:g} per query)", "",
                  f"Rule: {gap[tier]['rule']}, {np.mean(rule):.3f}; planner "
                  f"{np.mean(planner):.3f}.", ""]
        for key, label in ROWS.items():
            section, columns = curve_section(
                f"### {label}", row_runs(results, key, tier), rule, planner, scale.resamples,
                score="accuracy within budget", values="scores")
            lines += section
            writer.writerows([f"{tier}/{key}", *row] for row in columns)
    return "\n".join(lines), rows.getvalue()


def file_names(env_id: str = ENV_ID) -> tuple[str, str]:
    """The Markdown's and the CSV's names."""
    name = env_id.split("/")[-1]
    return f"budgets_{name}.md", f"budgets_{name}.csv"


def _seed(unit: tuple[int, CurveScale, str]) -> dict[str, Any]:
    return run_seed(*unit)


def report(out: Path, scale: str | CurveScale = "default", env_id: str = ENV_ID,
           log: Callable[[str], None] = print, cache: Path | None = None,
           address: str | None = None) -> list[Path]:
    """Run every seed and write the table and the CSV; returns the paths.

    ``scale``: a key of :data:`SCALES` or a :class:`CurveScale`. ``cache``: a directory
    where each seed's result is kept as it finishes and reused by a later call of the same
    settings (:mod:`experiments.shared.kept`: a run that stops resumes there). The seeds
    are units of :func:`experiments.shared.scheduler.run_units`: in this process, or on
    the Ray cluster at ``address``.
    """
    import gymnasium as gym

    from experiments.corl.runner import fixed_rows

    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    chosen = SCALES[scale] if isinstance(scale, str) else scale
    # The gap's ends: the table's own fixed rows (its rule search, its queries).
    gap = fixed_rows(chosen.fixed, env_id, (PROFILE,))["gap"][PROFILE]
    log(f"corl_budgets: fixed rows scored; {chosen.seeds} seeds to train")
    settings = {"env": env_id, **{name: list(value) if isinstance(value, tuple) else value
                                  for name, value in asdict(chosen).items()}}
    keeper = None if cache is None else Runs(
        path=lambda name: run_file(cache, chosen.name, int(name.split()[-1])),
        settings=lambda _name: settings,
        encode=lambda _name, result: {**settings, "result": result},
        decode=lambda kept: kept["result"])
    results = run_units(_seed, [(seed, chosen, env_id) for seed in range(chosen.seeds)],
                        address=address, describe=lambda unit: f"seed {unit[0]}",
                        keeper=keeper, label="corl_budgets", log=log)
    probe = gym.make(env_id)
    tier_budgets = cast("ExpertRoutingEnv", probe.unwrapped).tier_budgets
    budgets = {tier: float(budget) for tier, budget in tier_budgets.items()}
    probe.close()
    markdown, columns = curves_table(results, gap, budgets, chosen, env_id)
    names = file_names(env_id)
    return write_files_atomic(out, {names[0]: markdown, names[1]: columns})


def main(argv: list[str] | None = None) -> None:
    """Run the curves at ``--scale`` and write them to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m experiments.corl.budgets",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--cache", type=Path, default=None,
                        help="keep each seed's result here and resume from it")
    add_scheduling_arguments(parser)
    args = parser.parse_args(argv)
    with scheduling(args, parser.prog):
        for path in report(args.out, args.scale, cache=args.cache, address=args.address):
            print(f"corl_budgets: wrote {path}", flush=True)


if __name__ == "__main__":
    main()
