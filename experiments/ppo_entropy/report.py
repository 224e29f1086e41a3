"""The no-entropy curve paired with PPO's, from what :mod:`experiments.ppo_entropy.runner` ran."""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_envs.metrics import bootstrap_mean_ci
from experiments.budgets import runner as budgets
from experiments.budgets.report import curve_table
from experiments.budgets.settings import Scale as CurveScale
from experiments.ppo_entropy.settings import ENV_ID, NAME
from experiments.shared.gaps import kept_scores


def render(results: list[dict[str, Any]], ppo: np.ndarray, scale: CurveScale
           ) -> tuple[str, str]:
    """The curve table with the paired comparison, and its CSV.

    ``results``: one run per seed (:func:`experiments.budgets.runner.run_job`'s); ``ppo``: PPO's
    ``(seeds, tasks)`` returns at its last checkpoint.
    """
    rule, planner = budgets.reference_returns(ENV_ID, scale.episodes)
    markdown, columns = curve_table(ENV_ID, results, rule, planner, scale)
    # paired on the scores both CSVs keep, as the curve's cells are (experiments.budgets)
    mine = np.array([kept_scores(result["curve"][-1]["returns"]) for result in results])
    if mine.shape != ppo.shape:
        raise ValueError(f"{NAME}_ppo.csv: expected {mine.shape} returns, got {ppo.shape}")
    mean, low, high = bootstrap_mean_ci(mine - ppo, n_resamples=scale.resamples)
    markdown += ("\n## Against PPO with the paper's entropy bonus (0.01)\n\n"
                 f"At the last checkpoint, paired over the same seeds and tasks "
                 f"({NAME}_ppo.csv): no bonus - bonus = {mean:+.3f} [{low:+.3f}, {high:+.3f}] "
                 "of mean return (95% interval over seeds and tasks).\n")
    return markdown, columns
