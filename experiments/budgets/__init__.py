"""Study (issue #23): learning curves of the learned rows to where they stop improving.

Writes ``budgets_<Env>.md`` and ``budgets_<Env>.csv`` (ToolBench-v0 and FlightPlanner-v1).
Command: ``python -m experiments budgets``.

:mod:`~experiments.budgets.runner` trains and scores at the checkpoints (``report``);
:mod:`~experiments.budgets.report` renders the curve tables (also CORL's and BoPO's);
:mod:`~experiments.budgets.settings` holds the rows and scales both read.
"""
