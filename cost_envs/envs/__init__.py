"""One environment per module."""

from cost_envs.envs.agentic_routing import AgenticRoutingEnv, AgenticTask, RoutingProfile
from cost_envs.envs.expert_routing import ExpertRoutingEnv, ExpertTask, ModelProfile
from cost_envs.envs.expert_routing_v1 import ExpertRoutingV1Env, ExpertTaskV1
from cost_envs.envs.flight_planner import FlightPlannerEnv, FlightTask, flight_planner_pool
from cost_envs.envs.flight_planner_v1 import FlightPlannerV1Env
from cost_envs.envs.toolbench import ToolBenchEnv, ToolTask, toolbench_pool
from cost_envs.envs.trace_routing import TraceRoutingEnv, TraceTask

__all__ = [
    "AgenticRoutingEnv",
    "AgenticTask",
    "ExpertRoutingEnv",
    "ExpertRoutingV1Env",
    "ExpertTask",
    "ExpertTaskV1",
    "FlightPlannerEnv",
    "FlightPlannerV1Env",
    "FlightTask",
    "ModelProfile",
    "RoutingProfile",
    "ToolBenchEnv",
    "ToolTask",
    "TraceRoutingEnv",
    "TraceTask",
    "flight_planner_pool",
    "toolbench_pool",
]
