"""Aggregates across envs and profiles (rliable's IQM, mean, probability of improvement).

Reads the ``gap_closed`` blocks of the other experiments' JSON in ``--out``; writes
``aggregates.md`` and ``aggregates.json``.
Command: ``python -m experiments aggregates`` (``all`` ends with it).

:mod:`~experiments.aggregates.runner` pools the blocks (``report``);
:mod:`~experiments.aggregates.report` renders the page.
"""
