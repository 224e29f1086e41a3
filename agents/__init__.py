"""Allocators for cost_envs: baselines, evaluation and (with torch) learned policies.

This package's learners need the ``agents`` extra (``pip install 'cost-envs[agents]'``).
``import agents`` works without it, so that the ``cost-envs`` command (:mod:`agents.cli`),
installed with the envs, can list and describe them and say which extra a command needs
(issue #26); the baselines, rules, planners and evaluation need no torch either. A
public name whose module needs the extra fails, when asked for, with a one-line
``ImportError`` naming the ``pip install`` line (:func:`cost_envs.extras.require_extra`).
Importing this package does not import torch; modules that need it import it themselves.

The user-facing names are importable from here (``from agents import train, evaluate``)
and listed in ``__all__``; each is imported from its module the first time it is asked
for (PEP 562's module ``__getattr__``), so ``import agents`` stays light and torch is
loaded only by a name that needs it (``train``, ``load_allocator``, ...). Where each
lives:

* learners (:mod:`agents.learners`): ``train``, ``TrainedAllocator``, ``save_allocator``,
  ``load_allocator``, CORL's ``train_shared_ppo`` and ``train_tier_adapters``, the
  multi-tenant ``train_shared``;
* evaluation (:mod:`agents.evaluation`): ``evaluate``, ``compare``, ``format_table``,
  ``EvaluationResult``;
* references: ``BASELINES``, ``RuleBased``, ``CostOptOracle``, ``GreedyHeuristic``,
  ``FixedConsultation``, ``ConsultAll`` (:mod:`agents.baselines`), ``BestFixedRule``
  (:mod:`agents.rules`), ``PLANNERS`` and ``planner`` (:mod:`agents.planning`),
  ``CentralScheduler`` and ``IndependentTenants`` (:mod:`agents.multiagent`);
* routers over logs (:mod:`agents.routers`): ``ROUTERS``, ``make_router``,
  ``save_router``, ``load_router``;
* SB3 glue: ``CostMetricsCallback`` (:mod:`agents.callbacks`), ``make_batched_vec_env``
  (:mod:`agents.vec_env`).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each public name -> the module that defines it (imported on first use).
_PUBLIC = {
    "train": "agents.learners.training",
    "TrainedAllocator": "agents.learners.training",
    "save_allocator": "agents.learners.checkpoints",
    "load_allocator": "agents.learners.checkpoints",
    "train_shared_ppo": "agents.learners.corl",
    "train_tier_adapters": "agents.learners.corl",
    "train_shared": "agents.learners.multitenant",
    "evaluate": "agents.evaluation",
    "compare": "agents.evaluation",
    "format_table": "agents.evaluation",
    "EvaluationResult": "agents.evaluation",
    "BASELINES": "agents.baselines",
    "RuleBased": "agents.baselines",
    "CostOptOracle": "agents.baselines",
    "GreedyHeuristic": "agents.baselines",
    "FixedConsultation": "agents.baselines",
    "ConsultAll": "agents.baselines",
    "BestFixedRule": "agents.rules",
    "PLANNERS": "agents.planning",
    "planner": "agents.planning",
    "CentralScheduler": "agents.multiagent",
    "IndependentTenants": "agents.multiagent",
    "ROUTERS": "agents.routers",
    "make_router": "agents.routers",
    "save_router": "agents.routers",
    "load_router": "agents.routers",
    "CostMetricsCallback": "agents.callbacks",
    "make_batched_vec_env": "agents.vec_env",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time (PEP 562)."""
    module = _PUBLIC.get(name)
    if module is None:  # also how ``from agents import cli`` finds a subpackage
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    # here, not at the top: ``import agents`` (the ``cost-envs`` command's ``--help``)
    # imports neither cost_envs nor NumPy and Gymnasium behind it
    from cost_envs.extras import extra_of, require_extra

    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as error:
        extra = extra_of(error.name or "")
        if extra is None:
            raise
        try:
            require_extra(extra, f"agents.{name}")
        except ImportError as missing:  # one line naming the pip install line
            raise missing from None
        raise  # the extra is there, but a module of it failed to import: say so as is
    value = getattr(imported, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The module's names and the public ones not imported yet."""
    return sorted({*globals(), *__all__})
