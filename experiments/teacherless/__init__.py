"""Study (issue #38, point 1): learners that use nothing but interaction, screened.

Each row trains on ToolBench-v0 from the observation, the reward and the info contract
alone (no planner, no Bayes reference, no env internals) and is scored on the tables' 400
evaluation tasks: the share of the rule-to-planner gap it closes, with its interval over
seeds and tasks, beside plain PPO at the same budget.

Writes ``teacherless.md`` and ``teacherless.json`` into ``--out`` (default
``/tmp/teacherless``: screening figures, not committed results), and each run's JSON into
``<out>/runs`` as it finishes.
Command: ``python -m experiments.teacherless [--rows ...] [--out DIR]``.

:mod:`~experiments.teacherless.settings` holds the rows and the screening scale;
:mod:`~experiments.teacherless.runner` trains them (one kept JSON file per run) and writes
the table with :mod:`~experiments.teacherless.report`.
"""
