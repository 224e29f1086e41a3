"""Moved to :mod:`agents.routing.routers.cv`.

Kept only for ``experiments/traces*.py``, which import the old path; remove once they
import from :mod:`agents.routing.routers`.
"""

from agents.routing.routers.cv import cross_validate

__all__ = ["cross_validate"]
