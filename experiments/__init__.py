"""The papers' experiments: not installed, run from a checkout with ``python -m experiments``.

One package per paper or study (``experiments/README.md`` lists them, one line each), each
with a ``runner`` module whose ``report`` runs it at a scale and writes its tables, JSON
and figures, and a ``report`` module that renders them (rendered first, then written all
or nothing):

* :mod:`experiments.lora_ppo`: the LoRA-Guided PPO paper's Tables 1-2 (FlightPlanner-v0,
  ToolBench-v0, and FlightPlanner-v1);
* :mod:`experiments.corl`: CORL's budget tiers on ExpertRouting-v0 and ExpertRouting-v1;
* :mod:`experiments.bopo`: BoPO against its baselines on AgenticRouting-v0;
* :mod:`experiments.traces`: routers on RouteLLM's real outcomes (TraceRouting-v0);
* :mod:`experiments.rules`: the best fixed rule of every registered env;
* :mod:`experiments.aggregates`: the tables' shares of the gap, pooled per experiment;
* the studies :mod:`experiments.budgets`, :mod:`experiments.converged`,
  :mod:`experiments.memory`, :mod:`experiments.multitenant` and
  :mod:`experiments.ppo_entropy`, and the tuning sweeps, :mod:`experiments.tune`.

The tables of the first three also have the fixed baselines of issue #10 where they apply:
the best fixed rule (:class:`agents.rules.BestFixedRule`, searched on training tasks, then
frozen) in every table, FlightPlanner's one-turn rule, CORL's consult-all and BoPO's
difficulty threshold (fitted on training tasks).

:mod:`experiments.shared` holds the plumbing they share (worker pools, figures, the
machine, the writability check, the ``gap_closed`` blocks; files are written all or
nothing by :func:`agents.files.write_files_atomic`) and :mod:`experiments.__main__` the
command line. Imports flow one way: ``cost_envs`` <- ``agents`` <- ``experiments``; within
it every package may import :mod:`experiments.shared`, which imports none of them.
"""

import os

# Training's floats differ between CPUs unless both of torch's CPU backends take one fixed
# path: its own kernels (AVX2, AVX-512) add in a different order on different CPUs, and
# so does MKL's matrix product. BoPO's committed cell, made on another CPU, came out 37 of
# 400 episodes apart on an Intel Xeon with AVX-512 and bit for bit with torch's scalar
# kernels; CORL's cells moved with MKL's path too. MKL_CBWR=COMPATIBLE is MKL's one
# SSE2-only path for Intel and compatible CPUs (its conditional numerical
# reproducibility); networks this small train about as fast either way. Both are read
# once, when torch is imported: here, before any experiment imports it (issue #36).
os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")
