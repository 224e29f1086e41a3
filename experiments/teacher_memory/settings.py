"""What the teacher-memory runner and its report both read: the env, the arms, the scale."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agents.learners.supervised import SupervisedConfig
from cost_envs.config import integer

ENV_ID = "cost_envs/ToolBench-v0"
#: The row trained in both arms (:data:`experiments.lora_ppo.runner.LEARNED_ROWS`).
ROW = "lora/bayes"
#: Each arm: its ``gym.make`` arguments and its label. The memoryless arm is the row as
#: the tables train it; the other adds the teacher's memory to the observation.
ARMS = {
    "memoryless": ({}, "memoryless (the 17-slot observation)"),
    "history": ({"cleared_difficulties": True},
                "with the teacher's history (cleared_difficulties=True, 21 slots)"),
}
OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
NAME = "teacher_memory.md"


@dataclass(frozen=True)
class Scale:
    """How much work a run does.

    Args:
        name: Its name (the kept units' folder).
        seeds: Training seeds per arm (0..seeds-1).
        episodes: Evaluation tasks (task seed ``eval_seed``).
        resamples: Bootstrap resamples of the return intervals.
        supervised: The supervised stage's settings, before the row sets its teacher and
            DAgger rounds (:meth:`experiments.lora_ppo.runner.LearnedRow.arguments`).
        rule_tasks: Training tasks the best fixed rule is searched on (the tables' 200).
        eval_seed: Task seed of the evaluation set (the tables': 0).
    """

    name: str
    seeds: int = 5
    episodes: int = 400
    resamples: int = 10_000
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    rule_tasks: int = 200
    eval_seed: int = 0

    def __post_init__(self) -> None:
        for key in ("seeds", "episodes", "resamples", "rule_tasks"):
            integer(getattr(self, key), f"Scale.{key}", minimum=1)
        integer(self.eval_seed, "Scale.eval_seed", minimum=0)


#: The training seeds of the lora_ppo tables' row; the report pairs them apart too.
TABLE_SEEDS = 5
#: The lora_ppo tables' scale of the row (1,500 teacher episodes, two DAgger rounds of
#: 500, 400 evaluation tasks) with 15 seeds: at the tables' 5 the paired difference's
#: interval (+0.03 [-0.07, 0.14] of the gap) held both none and all of what separates the
#: teacher from the memoryless student (about 0.09), so it decided nothing.
DEFAULT = Scale("default", seeds=15)
#: Plumbing for the tests, in seconds: not a result.
SMOKE = Scale("smoke", seeds=2, episodes=20, resamples=200,
              supervised=SupervisedConfig(episodes=20, epochs=1), rule_tasks=5)
