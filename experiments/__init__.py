"""The papers' experiments: not installed, run from a checkout with ``python -m experiments``.

One module per experiment, each with a ``report`` that runs it at a scale and writes its
tables, JSON and figures (rendered first, then written all together):

* :mod:`experiments.lora_ppo`: the LoRA-Guided PPO paper's Tables 1-2 (FlightPlanner-v0,
  ToolBench-v0);
* :mod:`experiments.corl`: CORL's budget tiers on ExpertRouting-v0;
* :mod:`experiments.bopo`: BoPO against its baselines on AgenticRouting-v0;
* :mod:`experiments.traces`: routers on RouteLLM's real outcomes (TraceRouting-v0).

Imports flow one way: ``cost_envs`` <- ``agents`` <- ``experiments``.
"""
