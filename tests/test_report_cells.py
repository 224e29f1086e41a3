"""The routing reports' table cells: a zero difference prints as 0 (issue #25)."""

from __future__ import annotations

import pytest

from agents.routers.report import cell


@pytest.mark.parametrize(("entry", "key", "text"), [
    # the paired cost difference of a router and random at the same cost: zero up to noise
    ({"value": -3.2384e-19, "ci": [-0.00056431, 0.00055012]}, "cost_per_query",
     "0 [-0.0005643, 0.0005501]"),
    ({"value": -0.0004, "ci": [-0.0123, 0.0101]}, "accuracy", "0.000 [-0.012, 0.010]"),
    ({"value": -0.0, "ci": None}, "accuracy", "0.000"),
    # real values keep their digits and sign
    ({"value": 1.4641e-05, "ci": [1.3801e-05, 1.5562e-05]}, "cost_per_query",
     "1.464e-05 [1.38e-05, 1.556e-05]"),
    ({"value": -0.041, "ci": [-0.1004, 0.0241]}, "accuracy", "-0.041 [-0.100, 0.024]"),
    ({"value": 0.0, "ci": [0.0, 0.0]}, "cost_per_query", "0 [0, 0]"),
    ({"value": float("nan"), "ci": [0.1, 0.2]}, "accuracy", "-"),
    (None, "accuracy", "-"),
    ({"value": 0.5, "ci": [float("nan"), 0.6]}, "accuracy", "0.500"),
])
def test_a_cell_rounds_to_its_precision_before_printing(entry, key, text) -> None:
    assert cell(entry, key) == text
