"""Moved to :mod:`agents.routing.routers.statistics`.

Kept only for ``experiments/traces*.py``, which import the old path; remove once they
import from :mod:`agents.routing.routers`.
"""

from agents.routing.routers.statistics import (
    ANSWER_STATISTICS,
    STATISTICS,
    answer_statistics,
    text_statistics,
    weak_answers,
)

__all__ = ["ANSWER_STATISTICS", "STATISTICS", "answer_statistics", "text_statistics",
           "weak_answers"]
