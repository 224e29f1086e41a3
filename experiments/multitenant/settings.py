"""What the multi-tenant sweep and its report both read: the env's settings and the scales."""

from __future__ import annotations

from typing import Any

ENV_ID = "cost_envs/MultiTenantToolBench-v0"
ORG_BUDGET = 0.6
BUDGET_WINDOW = 10
PRICE_SLOPE = 0.5
STEPS = 60
METRICS = ("throughput", "success_rate", "latency", "wait_share", "fairness", "org_cps",
           "spend_per_tenant")
SCALES: dict[str, dict[str, Any]] = {
    "smoke": {"tenants": (1, 2), "capacities": (1,), "seeds": 2, "steps": 15,
              "rule_tasks": 10},
    "default": {"tenants": (1, 2, 4, 8, 16), "capacities": (1, 2, 4), "seeds": 5,
                "steps": STEPS, "rule_tasks": 100},
}
#: ``full``: the default sweep plus shared-parameter PPO (tenant-steps of training each).
SCALES["full"] = {**SCALES["default"], "ppo_timesteps": 40_000}
#: Tenants the shared policy trains with, and its PPO overrides (more updates per step
#: than the single-agent n_steps=512 with 8 tenants per rollout).
TRAIN_TENANTS = 8
PPO_OVERRIDES = {"n_steps": 128}
STEM = "multitenant"
