"""Moved to :mod:`agents.routing.routers.solvers`.

Kept only for ``experiments/traces*.py``, which import the old path; remove once they
import from :mod:`agents.routing.routers`.
"""

from agents.routing.routers.solvers import solver_name

__all__ = ["solver_name"]
