"""cost-envs: Gymnasium environments for cost-aware orchestration of AI sub-agents.

Importing the package registers every environment (idempotently) under the
``cost_envs/`` namespace, so ``gym.make("cost_envs/ToolBench-v0")`` works after
``import cost_envs``, and ``gym.make("cost_envs:cost_envs/ToolBench-v0")`` works in a fresh
process. This package never imports torch.
"""

import warnings

from gymnasium.envs.registration import register, registry

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
from cost_envs.reward import RewardWeights
from cost_envs.scoring import token_f1
from cost_envs.traces import TraceDataset, load_traces
from cost_envs.wrappers import BudgetTier, CostAccounting, HardBudget, StepLimit

__version__ = "0.1.0"

#: Registered ids and their entry points; tests are generated from this registry.
ENV_IDS = {
    "cost_envs/FlightPlanner-v0": "cost_envs.envs.flight_planner:FlightPlannerEnv",
    "cost_envs/FlightPlanner-v1": "cost_envs.envs.flight_planner_v1:FlightPlannerV1Env",
    "cost_envs/ToolBench-v0": "cost_envs.envs.toolbench:ToolBenchEnv",
    "cost_envs/ExpertRouting-v0": "cost_envs.envs.expert_routing:ExpertRoutingEnv",
    "cost_envs/ExpertRouting-v1": "cost_envs.envs.expert_routing_v1:ExpertRoutingV1Env",
    "cost_envs/AgenticRouting-v0": "cost_envs.envs.agentic_routing:AgenticRoutingEnv",
    "cost_envs/TraceRouting-v0": "cost_envs.envs.trace_routing:TraceRoutingEnv",
}


# v0 ids stay registered beside their v1 on purpose, as the baseline the new version is
# compared with (issue #10), so Gymnasium's "out of date, consider upgrading" warning on
# every make of a v0 would be wrong advice; only that warning, only for these ids.
warnings.filterwarnings("ignore", message=r".*The environment cost_envs/\S+ is out of date",
                        category=DeprecationWarning)


def _register_envs() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in registry:  # idempotent: re-imports and reloads are harmless
            register(id=env_id, entry_point=entry_point)


_register_envs()

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
