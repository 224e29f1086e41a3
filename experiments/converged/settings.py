"""What the converged-budget runner and its report both read: the env, rows and scales."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cost_envs.config import integer
from experiments.budgets.settings import Scale as CurveScale

ENV_ID = "cost_envs/FlightPlanner-v1"
#: Where FlightPlanner-v1's PPO curve stops improving (budgets_FlightPlanner-v1.md).
STEPS = 2_000_000
#: Evaluation tasks: ten times the curve's 1000.
EPISODES = 10_000
#: The learned rows, keys of :data:`experiments.budgets.settings.BUDGET_ROWS`.
ROWS = ("ppo", "lora-ppo", "lora-ppo/bayes")
#: The fixed rows whose per-task returns the CSV keeps beside the rule (the gap's other
#: end and the non-privileged reference).
REFERENCE_KEYS = ("planner", "bayes-planner")
OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: The folder (in ``out``) that keeps each finished run, and its file of the fixed rows.
RUNS = "converged_runs"
FIXED_FILE = "fixed.json"


@dataclass(frozen=True)
class Scale:
    """Steps, seeds and evaluation tasks of one run of the experiment."""

    name: str
    timesteps: int
    seeds: int
    episodes: int
    resamples: int = 2000
    #: Training tasks on which the best fixed row is searched (the tables' 200).
    rule_tasks: int = 200

    def __post_init__(self) -> None:
        for name in ("timesteps", "seeds", "episodes", "resamples", "rule_tasks"):
            integer(getattr(self, name), f"Scale.{name}", minimum=1)

    def budget_scale(self) -> CurveScale:
        """The curve's :class:`experiments.budgets.settings.Scale` with one point, at the end."""
        return CurveScale(self.name, self.timesteps, self.seeds, (self.timesteps,),
                          episodes=self.episodes)

    def settings(self) -> dict[str, Any]:
        """What a kept run must have been run with to be reused at this scale."""
        return {"env": ENV_ID, "timesteps": self.timesteps, "episodes": self.episodes}


SCALES = {"default": Scale("default", STEPS, 5, EPISODES),
          "smoke": Scale("smoke", 1024, 2, 30, resamples=200, rule_tasks=5)}
