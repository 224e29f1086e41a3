"""Moved to :mod:`agents.routing.routers.multi`.

Kept only for ``experiments/traces*.py``, which import the old path; remove once they
import from :mod:`agents.routing.routers`.
"""

from agents.routing.routers.multi import SINGLE_MODELS, MultiRouter, sweep_metrics

__all__ = ["SINGLE_MODELS", "MultiRouter", "sweep_metrics"]
