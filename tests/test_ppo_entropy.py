"""PPO without its entropy bonus against the committed PPO curve, paired (issue #23)."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from cost_envs.metrics import bootstrap_mean_ci
from experiments.budgets import runner as budgets
from experiments.ppo_entropy import runner as ppo_entropy
from experiments.shared.gaps import encode_scores

SMOKE = budgets.Scale("smoke", 1024, 2, (0, 512), episodes=20, n_envs=4, resamples=100)


def _baseline(path, returns: np.ndarray) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["row", "seed", "timesteps", "gradient_steps", "mean_return", "returns"])
        for seed, values in enumerate(returns):
            writer.writerow(["ppo", seed, 0, 0, "0", encode_scores(-values)])  # not the last
            writer.writerow(["ppo", seed, 2048, 80, f"{values.mean():.6f}",
                             encode_scores(values)])


def test_the_row_trains_ppo_with_no_entropy_bonus_and_nothing_else():
    row = budgets.BUDGET_ROWS[ppo_entropy.ROW]
    assert (row.method, dict(row.arguments)) == ("ppo", {"ppo": {"ent_coef": 0.0}})
    assert ppo_entropy.ROW not in budgets.BUDGET_ENVS[ppo_entropy.ENV_ID]  # not in the default
    assert ppo_entropy.SCALE.checkpoints == (0, 250_000, 500_000, 750_000)


def test_a_missing_baseline_is_refused_before_any_training(tmp_path, monkeypatch):
    monkeypatch.setattr(budgets, "run_job", lambda job: pytest.fail("trained"))
    with pytest.raises(ValueError, match=r"budgets_ToolBench-v0_ppo\.csv: expected a learning"):
        ppo_entropy.report(tmp_path, jobs=1, scale=SMOKE)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_comparison_pairs_the_last_checkpoint_over_seeds_and_tasks(tmp_path):
    baseline = np.linspace(-0.5, 0.5, 2 * 20).reshape(2, 20)
    _baseline(tmp_path / "budgets_ToolBench-v0_ppo.csv", baseline)
    paths = ppo_entropy.report(tmp_path, jobs=1, scale=SMOKE)
    assert sorted(p.name for p in paths) == ["budgets_ToolBench-v0_no_entropy.csv",
                                             "budgets_ToolBench-v0_no_entropy.md"]
    mine = ppo_entropy.last_returns(tmp_path / "budgets_ToolBench-v0_no_entropy.csv",
                                    ppo_entropy.ROW)
    mean, low, high = bootstrap_mean_ci(mine - baseline, n_resamples=SMOKE.resamples)
    text = (tmp_path / "budgets_ToolBench-v0_no_entropy.md").read_text(encoding="utf-8")
    found = re.search(r"no bonus - bonus = ([-+.\d]+) \[([-+.\d]+), ([-+.\d]+)\]", text)
    assert found is not None, text
    assert [float(x) for x in found.groups()] == pytest.approx([mean, low, high], abs=6e-4)
    assert "## PPO, no entropy bonus" in text
