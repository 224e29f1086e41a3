"""Issue #10's rule search: the best fixed rule on every registered env, and its scores.

Writes ``rule_search.md`` and ``rule_search.json``.
Command: ``python -m experiments rules``.

:mod:`~experiments.rules.runner` searches and scores (``report``);
:mod:`~experiments.rules.report` renders the page.
"""
