"""What the memory study's runner and report both read: the learners, envs and scales."""

from __future__ import annotations

from dataclasses import dataclass

from agents.learners import PPO_SETTINGS
from cost_envs.config import integer
from cost_envs.envs.flight_planner import MAX_TURNS as FLIGHT_TURNS
from cost_envs.envs.toolbench import MAX_TURNS as TOOLBENCH_TURNS

#: The learners: key -> (label, SB3 policy name). ``ppo`` is the control.
LEARNERS = {"ppo": ("PPO (MlpPolicy)", "MlpPolicy"),
            "recurrent": ("RecurrentPPO (MlpLstmPolicy)", "MlpLstmPolicy"),
            "history": ("PPO on the episode's observations (VecFrameStack)", "MlpPolicy")}
ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1", "cost_envs/ToolBench-v0")
#: Decisions per episode at most: the ``history`` learner sees this many observations, so
#: it sees every observation of its episode (zeros before the first).
MAX_DECISIONS = {"cost_envs/FlightPlanner-v0": FLIGHT_TURNS, "cost_envs/FlightPlanner-v1":
                 FLIGHT_TURNS, "cost_envs/ToolBench-v0": TOOLBENCH_TURNS}
#: The reference row scored on the same tasks: the tables' best fixed row on FlightPlanner.
RULE_ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1")
RULE_LABEL = "One-turn plan+search rule"
COMMAND = "python -m experiments.memory"
#: SB3's defaults, which the project's PPO keeps (agents.learners.training.train), named here
#: so that both learners are given them explicitly.
EPOCHS = 10
LEARNING_RATE = 3e-4
#: Below this many env steps PPO has not converged on these envs (the committed curves,
#: ``benchmarks/results/budgets_*.md``), and the report says so.
CONVERGED_STEPS = 500_000
BATCH = PPO_SETTINGS["batch_size"]
CSV_FIELDS = ("env", "learner", "seed", "timesteps", "train_seconds", "eval_seconds",
              "mean_return", "returns")


@dataclass(frozen=True)
class Scale:
    """Steps per run, seeds, evaluation tasks, sub-envs, bootstrap resamples, envs."""

    name: str
    timesteps: int
    seeds: int
    episodes: int
    n_envs: int
    resamples: int
    envs: tuple[str, ...] = ENVS
    learners: tuple[str, ...] = ("ppo", "recurrent")
    #: Keep each finished run in ``<out>/memory_runs/<name>/`` (:mod:`experiments.shared.kept`).
    keep: bool = False

    def __post_init__(self) -> None:
        for name in ("timesteps", "seeds", "episodes", "n_envs", "resamples"):
            integer(getattr(self, name), f"Scale.{name}", minimum=1)
        unknown = sorted(set(self.envs) - set(ENVS))
        if unknown or not self.envs:
            raise ValueError(f"Scale.envs: expected some of {list(ENVS)}, got {list(self.envs)}")
        if "ppo" not in self.learners or not set(self.learners) <= set(LEARNERS):
            raise ValueError(f"Scale.learners: expected 'ppo' and some of {list(LEARNERS)}, "
                             f"got {list(self.learners)}")

    @property
    def files(self) -> tuple[str, str]:
        """The report's and the CSV's names: ``memory.md``/``.csv`` at the default scale."""
        stem = "memory" if self.name == "default" else f"memory_{self.name}"
        return f"{stem}.md", f"{stem}.csv"


SCALES = {
    # Plumbing for the tests, seconds: not a result.
    "smoke": Scale("smoke", 1024, 2, 12, 2, 100, ENVS[:2]),
    # About 8 CPU-minutes (RecurrentPPO about 35 CPU-s a run, PPO about 5): FlightPlanner
    # v0 and v1, the contrast that says whether memory replaces v1's slots. On this 2-core
    # machine at load 10-16 a RecurrentPPO run of 20,480 steps took 17 minutes of wall
    # time, which is why the default stops at 8,192 (two rollouts of 8 x 512).
    "default": Scale("default", 8_192, 5, 400, 8, 1000, ENVS[:2]),
}
SCALES["full"] = SCALES["default"]  # `python -m experiments memory --scale full`
# Where the learners move (issue #23, point 5): PPO with and without the episode's
# observations at PPO's own converged budgets (``benchmarks/results/budgets_*.md``),
# RecurrentPPO left out (6-9x PPO's CPU a step: hours a run here). Runs are kept
# (:mod:`experiments.shared.kept`), so a scale longer than one sitting completes over several.
SCALES["toolbench"] = Scale("toolbench", 500_000, 5, 400, 16, 1000, ("cost_envs/ToolBench-v0",),
                            ("ppo", "history"), keep=True)
SCALES["flight"] = Scale("flight", 2_000_000, 5, 1000, 16, 1000, ENVS[:1], ("ppo", "history"),
                         keep=True)
