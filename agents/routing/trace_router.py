"""Moved to :mod:`agents.routing.routers.two_model` and :mod:`agents.routing.routers.policy`.

Kept only for ``experiments/traces*.py``, which import the old path; remove once they
import from :mod:`agents.routing.routers`.
"""

from agents.routing.routers.policy import RouterPolicy, cascade_observations
from agents.routing.routers.solvers import LogisticRegression
from agents.routing.routers.two_model import CascadeRouter, cascade_curve
from agents.routing.routers.two_model import LogisticRouter as TraceRouter

__all__ = ["CascadeRouter", "LogisticRegression", "RouterPolicy", "TraceRouter", "cascade_curve",
           "cascade_observations"]
