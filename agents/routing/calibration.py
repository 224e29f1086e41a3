"""Moved to :mod:`agents.routing.routers.calibration`.

Kept only for ``experiments/traces*.py``, which import the old path; remove once they
import from :mod:`agents.routing.routers`.
"""

from agents.routing.routers.calibration import calibrate_cost, calibrate_lam, calibrate_share

__all__ = ["calibrate_cost", "calibrate_lam", "calibrate_share"]
