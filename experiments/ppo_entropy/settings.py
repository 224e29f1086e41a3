"""What the no-entropy run and its report both read: the env, the row, the scale, the files."""

from __future__ import annotations

from pathlib import Path

from experiments.budgets.settings import Scale as CurveScale

ENV_ID = "cost_envs/ToolBench-v0"
ROW = "ppo/no-entropy"
#: The PPO curve's scale (budgets_ToolBench-v0_ppo.md): its steps, seeds and checkpoints.
SCALE = CurveScale("ppo", 1_000_000, 5, (0, 250_000, 500_000, 750_000))
OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
NAME = "budgets_ToolBench-v0"
