"""A lower entropy bonus against PPO's ToolBench plateau (issue #23, point 1).

Issue #23 lists "a lower or annealed entropy bonus" among the candidates to try with 5
seeds: the bonus (SB3's ``ent_coef``, 0.01 in the paper's A.4 settings) keeps each
agent's call uncertain, which could hold PPO at about half of the rule-to-planner gap.
This trains PPO with no bonus (``ent_coef = 0``; everything else the paper's) exactly as
``benchmarks/results/budgets_ToolBench-v0_ppo.md`` trained PPO (:mod:`experiments.budgets.runner`:
5 seeds x 1M env steps on 16 batched sub-envs, scored at the same checkpoints on the same
400 evaluation tasks), writes its curve beside it, and pairs the two rows' per-task returns
at the last checkpoint (same seeds, same tasks): the difference of mean return with a 95%
interval over seeds and tasks.

``python -m experiments.ppo_entropy [--jobs N] [--out DIR] [--address ADDRESS]`` writes
``budgets_ToolBench-v0_no_entropy.md`` and ``.csv`` into ``DIR`` (default
``benchmarks/results``), all or nothing; it reads ``budgets_ToolBench-v0_ppo.csv`` there.
About 3-6 minutes a seed on a 2-core machine.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from experiments.budgets import runner as budgets
from experiments.budgets.settings import Scale as CurveScale
from experiments.ppo_entropy.report import render
from experiments.ppo_entropy.settings import ENV_ID, NAME, OUT, ROW, SCALE
from experiments.shared.gaps import decode_scores
from experiments.shared.study import study_main, write_study


def last_returns(path: Path, row: str) -> np.ndarray:
    """``(seeds, tasks)``: each seed's per-task returns at the CSV's last checkpoint."""
    if not Path(path).is_file():
        raise ValueError(f"{path}: expected a learning curve's CSV (experiments.budgets)")
    with open(path, encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["row"] == row]
    if not rows:
        raise ValueError(f"{path}: expected rows of {row!r}")
    last = max(int(r["timesteps"]) for r in rows)
    by_seed = {int(r["seed"]): decode_scores(r["returns"]) for r in rows
               if int(r["timesteps"]) == last}
    return np.array([by_seed[seed] for seed in sorted(by_seed)])


def report(out: Path = OUT, jobs: int = 2, scale: CurveScale = SCALE,
           address: str | None = None, log: Any = print) -> list[Path]:
    """Train the row, write its curve with the paired comparison; returns the paths.

    The seeds are units of :func:`experiments.shared.scheduler.run_units` (``jobs``
    processes, or the Ray cluster at ``address``), kept until the files are written.
    """
    baseline = Path(out) / f"{NAME}_ppo.csv"
    ppo = last_returns(baseline, "ppo")  # read first: a missing baseline fails before training
    units = [budgets.Job(ENV_ID, ROW, seed, scale) for seed in range(scale.seeds)]

    def files(results: list[Any]) -> dict[str, str]:
        markdown, columns = render(results, ppo, scale)
        return {f"{NAME}_no_entropy.md": markdown, f"{NAME}_no_entropy.csv": columns}

    return write_study(out, "ppo_entropy", scale, budgets.run_job, units, files, jobs=jobs,
                       address=address, log=log)


def main(argv: list[str] | None = None) -> None:
    """Run the comparison and write its files."""
    study_main("python -m experiments.ppo_entropy", __doc__.splitlines()[0], OUT, argv,
               lambda out, jobs, address, command: report(out, jobs, address=address))
