"""What the LoRA-Guided PPO experiment and its report both read: its envs and row kinds.

:mod:`experiments.lora_ppo.runner` runs the experiment and calls :mod:`experiments.lora_ppo.report`
to write it; the report needs these two names too, so they live here, below both.
"""

#: The paper's two environments.
PAPER_ENVS = ("cost_envs/FlightPlanner-v0", "cost_envs/ToolBench-v0")
#: Rows that read hidden env state (kept off the non-privileged Pareto front).
PRIVILEGED_ROWS = ("oracle", "planner")
