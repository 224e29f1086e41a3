"""Train the Bayes-taught LoRA allocator memoryless and with the teacher's history; pair them.

Each (arm, seed) is one unit: :func:`train_lora` trains the ``lora/bayes`` row's supervised
stage exactly as :func:`agents.learners.training.train` does for ``method="lora"`` (the
same seeds, teacher, traces and fits; ``tests/test_teacher_memory.py`` checks the weights
bit for bit), on ``gym.make(ENV_ID, **arm's kwargs)``, and scores it on the evaluation
tasks. One more unit scores the tables' fixed rows on them
(:func:`experiments.lora_ppo.runner.score_baselines`): the best fixed row and the planner
are the gap's ends (:func:`~experiments.lora_ppo.runner.gap_ends`), the Bayes reference
(the teacher) is shown beside them.

**The base.** The shipped pretrained base reads the 17 slots of the memoryless
observation. With the option the student's frozen base is that base with zero weights on
the 4 added slots (:func:`widened_base`): at the start it computes the memoryless base's
function, and the history reaches the policy only through what training learns, the
LoRA adapter of the first layer (which reads every slot) and the heads. Nothing else
differs between the arms.

``python -m experiments.teacher_memory [--jobs N] [--out DIR] [--address ADDRESS]`` writes
``teacher_memory.md`` into ``DIR`` (default ``benchmarks/results``), all or nothing. About
15 s a unit on an idle 2-core machine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.utils import set_random_seed

from agents.evaluation import evaluate
from agents.learners.common.policies import load_base
from agents.learners.dagger import fit_supervised
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import SupervisedConfig, policy_for
from agents.learners.training import (
    DEFAULT_TORCH_THREADS,
    TrainedAllocator,
    configure_torch_threads,
    threads,
)
from agents.seeds import TRACE_TASK_SEED
from experiments.lora_ppo.runner import LEARNED_ROWS, gap_ends, score_baselines
from experiments.lora_ppo.runner import Scale as TableScale
from experiments.shared.study import study_main, write_study
from experiments.teacher_memory.report import render
from experiments.teacher_memory.settings import ARMS, DEFAULT, ENV_ID, NAME, OUT, ROW, Scale

#: The memoryless observation's slots (what the shipped base reads).
ENV_OBS_SLOTS = 17


def widened_base(extra: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """ToolBench's shipped base with ``extra`` input slots after its own, weighted 0.

    ``extra = 0`` is the shipped base itself (as the pair :func:`load_base` reads).
    """
    state, config = load_base(pretrained_base_path(ENV_ID))
    if extra:
        first = state["0.weight"]
        state = {**state, "0.weight": torch.cat(
            (first, first.new_zeros(first.shape[0], extra)), dim=1)}
        config = {**config, "obs_dim": int(config["obs_dim"]) + extra}
    return state, config


def row_config(scale: Scale) -> SupervisedConfig:
    """The row's supervised settings at ``scale`` (its teacher, DAgger rounds and episodes)."""
    arguments = LEARNED_ROWS[ROW].arguments(ENV_ID, scale.supervised)
    assert arguments is not None and set(arguments) == {"supervised"}  # ToolBench has both
    return arguments["supervised"]


def train_lora(seed: int, supervised: SupervisedConfig,
               env_kwargs: Mapping[str, Any]) -> TrainedAllocator:
    """``train(ENV_ID, "lora", ..., seed=seed, supervised=supervised)`` on ``env_kwargs``' env.

    :func:`agents.learners.training.train`'s own steps for ``lora`` (seeded, one torch
    thread, the supervised stage with DAgger on the traces of ``TRACE_TASK_SEED + seed``),
    with the base :func:`widened_base` makes for the env's observation.
    """
    with threads(DEFAULT_TORCH_THREADS):
        set_random_seed(seed)
        env = gym.make(ENV_ID, **env_kwargs)
        shape = env.observation_space.shape
        assert shape is not None  # ToolBench's observation is a flat Box
        extra = shape[0] - ENV_OBS_SLOTS
        policy = policy_for(env, base=widened_base(extra))
        fit_supervised(policy, env, supervised, seed=seed, trace_seed=TRACE_TASK_SEED + seed)
        env.close()
    return TrainedAllocator(policy, ENV_ID, dict(env_kwargs), "lora", seed, 0, "pretrained")


def run_unit(unit: tuple[str, int, Scale]) -> dict[str, Any]:
    """One arm's seed trained and scored, or (arm ``"fixed"``) the fixed rows scored."""
    configure_torch_threads()
    arm, seed, scale = unit
    start = time.perf_counter()
    if arm == "fixed":
        fixed = score_baselines(ENV_ID, TableScale("teacher_memory", 1, 1, scale.episodes,
                                                   100, rule_tasks=scale.rule_tasks),
                                eval_seed=scale.eval_seed)
        rule, planner = gap_ends(fixed)
        return {"rule": list(fixed.returns[rule]), "rule_label": fixed.entries[rule]["label"],
                "planner": list(fixed.returns[planner]),
                "bayes": list(fixed.returns["bayes-planner"])}
    kwargs = ARMS[arm][0]
    trained = train_lora(seed, row_config(scale), kwargs)
    result = evaluate(trained, ENV_ID, episodes=scale.episodes, seed=scale.eval_seed,
                      env_kwargs=kwargs)
    return {"arm": arm, "seed": seed, "returns": list(result.returns),
            "success": float(result.summary(n_resamples=10)["success_rate"]),
            "seconds": time.perf_counter() - start}


def _describe(unit: tuple[str, int, Scale]) -> str:
    arm, seed, _ = unit
    return "fixed rows" if arm == "fixed" else f"{arm} seed {seed}"


def report(out: Path = OUT, jobs: int = 2, scale: Scale = DEFAULT, address: str | None = None,
           log: Any = print, command: str | None = None) -> list[Path]:
    """Run every unit and write ``teacher_memory.md`` into ``out``; returns the paths.

    ``jobs``, ``address``: where the units run (:func:`experiments.shared.study.write_study`,
    which keeps them until the file is written). ``command``: the command line the file
    says made it.
    """
    units = [("fixed", 0, scale)] + [(arm, seed, scale) for arm in ARMS
                                     for seed in range(scale.seeds)]

    def files(results: list[Any]) -> dict[str, str]:
        return {NAME: render(results[0], results[1:], scale, row_config(scale),
                             command or "python -m experiments.teacher_memory")}

    return write_study(out, "teacher_memory", scale, run_unit, units, files, jobs=jobs,
                       address=address, describe=_describe, log=log)


def main(argv: list[str] | None = None) -> None:
    """Run the comparison and write its file."""
    study_main("python -m experiments.teacher_memory", __doc__.splitlines()[0], OUT, argv, report)
