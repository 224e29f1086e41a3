"""Study (issue #23): FlightPlanner-v1's learned rows at their converged budget, 10,000 tasks.

Writes ``converged_FlightPlanner-v1.md`` and ``.csv``, keeping each run in
``converged_runs/``.
Command: ``python -m experiments.converged``.

:mod:`~experiments.converged.runner` trains, scores and keeps the runs (``report``);
:mod:`~experiments.converged.report` renders the table;
:mod:`~experiments.converged.settings` holds the env, rows and scales both read.
"""
