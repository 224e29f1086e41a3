"""BoPO against its baselines on AgenticRouting-v0's three profiles (ALFWorld, SciWorld, AppWorld).

Writes ``bopo.md``, ``bopo.json`` and ``pareto_bopo_<profile>.png``/``.svg``.
Command: ``python -m experiments bopo``.

:mod:`~experiments.bopo.runner` runs the experiment (``report``);
:mod:`~experiments.bopo.report` renders its tables and figures; :mod:`~experiments.bopo.jobs`
holds the units of work the worker processes run, :mod:`~experiments.bopo.scan` the λ
scan and :mod:`~experiments.bopo.gaps` the ``gap_closed`` block. At ten times the steps:
:mod:`~experiments.bopo.long` (``python -m experiments.bopo.long``, into
``benchmarks/results/bopo_long/``), whose ``--curve`` runs the learning curves of
:mod:`~experiments.bopo.curve`.
"""
