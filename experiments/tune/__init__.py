"""The equal-budget tuning sweeps (Ray Tune + Optuna) of every learned method.

Writes ``<method>_<Env>.yaml`` into ``experiments/tuned/``, which the tables read.
Command: ``python -m experiments tune`` (the ``tune`` extra).

:mod:`~experiments.tune.runner` runs the sweeps (``report``);
:mod:`~experiments.tune.report` renders a sweep's YAML;
:mod:`~experiments.tune.methods` registers the methods (:mod:`~experiments.tune.space`:
what a method is; :mod:`~experiments.tune.corl` and :mod:`~experiments.tune.bopo`: CORL's
and BoPO's). The cluster at ``--address`` is probed and joined by
:mod:`experiments.shared.cluster`.
"""
