"""Study (issue #14): many tenants on one pool, tenants x capacity on MultiTenantToolBench-v0.

Writes ``multitenant.md``, ``.json`` and ``.png``/``.svg`` (``multitenant_full.*`` at the
full scale).
Command: ``python -m experiments multitenant``.

:mod:`~experiments.multitenant.runner` runs the sweep (``report``);
:mod:`~experiments.multitenant.report` renders the table and figure;
:mod:`~experiments.multitenant.settings` holds the env's settings and scales both read.
"""
