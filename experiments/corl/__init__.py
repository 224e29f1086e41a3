"""CORL: one controller for three budget tiers, on ExpertRouting-v0 and ExpertRouting-v1.

Writes ``corl_tiers.md``, ``.json``, ``corl_tiers_curves.csv`` and ``pareto_corl.png``/
``.svg`` (ExpertRouting-v0), and the same with ``_ExpertRouting-v1`` for v1.
Command: ``python -m experiments corl``.

:mod:`~experiments.corl.runner` trains and scores the rows (``report``);
:mod:`~experiments.corl.report` renders the tables and figure;
:mod:`~experiments.corl.settings` holds the scales and evaluation seed (also read by the
sweeps, :mod:`experiments.tune.corl`). :mod:`~experiments.corl.budgets` is CORL's
learning-curve study (``budgets_ExpertRouting-v1.md`` and ``.csv``):
``python -m experiments.corl.budgets``.
"""
