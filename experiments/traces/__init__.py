"""Routing on logs: the routers on RouteLLM's real outcomes (GSM8K, MMLU; TraceRouting-v0).

Writes ``trace_routing.md``, ``.json`` and ``.png``/``.svg``.
Command: ``python -m experiments traces`` (the RouteLLM CSVs are read from ``--data``).

:mod:`~experiments.traces.runner` runs the routers (``report``);
:mod:`~experiments.traces.report` renders the page and figure;
:mod:`~experiments.traces.heldout` holds the held-out evaluations and
:mod:`~experiments.traces.multi` the K-model router's.
"""
