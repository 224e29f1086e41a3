"""Study (issue #23): PPO with no entropy bonus against PPO's ToolBench-v0 plateau.

Writes ``budgets_ToolBench-v0_no_entropy.md`` and ``.csv`` (reads
``budgets_ToolBench-v0_ppo.csv``).
Command: ``python -m experiments.ppo_entropy``.

:mod:`~experiments.ppo_entropy.runner` trains the row (``report``);
:mod:`~experiments.ppo_entropy.report` renders the curve and the paired comparison;
:mod:`~experiments.ppo_entropy.settings` holds the env, row and scale both read.
"""
