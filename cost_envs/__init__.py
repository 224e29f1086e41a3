"""cost-envs: Gymnasium environments for cost-aware orchestration of AI sub-agents.

Importing the package registers every environment (idempotently) under the
``cost_envs/`` namespace, so ``gym.make("cost_envs/ToolBench-v0")`` works after
``import cost_envs``, and ``gym.make("cost_envs:cost_envs/ToolBench-v0")`` works in a fresh
process. ``gym.make(id, budget=0.2, on_exceed="truncate")`` builds the per-episode budget
(:class:`HardBudget`) inside the env, beneath any ``Monitor`` stacked on it
(:mod:`cost_envs.registration`). This package never imports torch.
"""

import warnings

from cost_envs.core import OraclePlan, OrchestrationEnv, Outcome
from cost_envs.envs import (
    AgenticRoutingEnv,
    AgenticTask,
    ExpertRoutingEnv,
    ExpertRoutingV1Env,
    ExpertTask,
    ExpertTaskV1,
    FlightPlannerEnv,
    FlightPlannerV1Env,
    FlightTask,
    ToolBenchEnv,
    ToolTask,
    TraceRoutingEnv,
    TraceTask,
    flight_planner_pool,
    toolbench_pool,
)
from cost_envs.pool import AgentPool, AgentSpec
from cost_envs.registration import ENV_IDS, register_envs
from cost_envs.reward import RewardWeights
from cost_envs.scoring import token_f1
from cost_envs.traces import TraceDataset, load_traces
from cost_envs.wrappers import BudgetTier, CostAccounting, HardBudget, StepLimit

__version__ = "0.1.0"

# v0 ids stay registered beside their v1 on purpose, as the baseline the new version is
# compared with (issue #10), so Gymnasium's "out of date, consider upgrading" warning on
# every make of a v0 would be wrong advice; only that warning, only for these ids.
warnings.filterwarnings("ignore", message=r".*The environment cost_envs/\S+ is out of date",
                        category=DeprecationWarning)


register_envs()

__all__ = [
    "ENV_IDS",
    "AgentPool",
    "AgentSpec",
    "AgenticRoutingEnv",
    "AgenticTask",
    "BudgetTier",
    "CostAccounting",
    "ExpertRoutingEnv",
    "ExpertRoutingV1Env",
    "ExpertTask",
    "ExpertTaskV1",
    "FlightPlannerEnv",
    "FlightPlannerV1Env",
    "FlightTask",
    "HardBudget",
    "OraclePlan",
    "OrchestrationEnv",
    "Outcome",
    "RewardWeights",
    "StepLimit",
    "ToolBenchEnv",
    "ToolTask",
    "TraceDataset",
    "TraceRoutingEnv",
    "TraceTask",
    "flight_planner_pool",
    "load_traces",
    "token_f1",
    "toolbench_pool",
]
