"""Study (issue #23): does memory pay? RecurrentPPO, and PPO on the episode's history, against PPO.

Writes ``memory.md`` and ``memory.csv`` (``memory_<scale>.*`` at the other scales).
Command: ``python -m experiments memory`` (or ``python -m experiments.memory --scale
toolbench|flight`` for the long scales, whose runs are kept in ``memory_runs/``).

:mod:`~experiments.memory.runner` trains and scores (``report``, ``main``);
:mod:`~experiments.memory.report` renders the table;
:mod:`~experiments.memory.settings` holds the learners, envs and scales both read.
"""
