"""One environment per module."""

from cost_envs.envs.expert_routing import ExpertRoutingEnv, ExpertTask, ModelProfile
from cost_envs.envs.flight_planner import FlightPlannerEnv, FlightTask, flight_planner_pool
from cost_envs.envs.toolbench import ToolBenchEnv, ToolTask, toolbench_pool

__all__ = [
    "ExpertRoutingEnv",
    "ExpertTask",
    "FlightPlannerEnv",
    "FlightTask",
    "ModelProfile",
    "ToolBenchEnv",
    "ToolTask",
    "flight_planner_pool",
    "toolbench_pool",
]
