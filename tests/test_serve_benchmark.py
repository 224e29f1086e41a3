"""benchmarks/serve_latency.py runs end to end and its table says what it measured."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_latency_benchmark_writes_one_row_per_clients_and_route(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("serve_latency",
                                                  ROOT / "benchmarks" / "serve_latency.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--requests", "64", "--output", str(tmp_path / "t.md")]) == 0
    rows = [line.split("|")[1:-1] for line in (tmp_path / "t.md").read_text().splitlines()
            if re.match(r"\| (1|64) \|", line)]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("1", "cheap"), ("1", "router-demo"), ("64", "cheap"), ("64", "router-demo")]
    for row in rows:  # added = through the server - upstream (3 roundings)
        up50, up99, s50, s99, add50, add99 = (float(cell) for cell in row[2:8])
        assert abs((s99 - up99) - add99) <= 0.1001 and float(row[8]) > 0
        if row[0].strip() == "64":  # the difference of the p50s
            assert abs((s50 - up50) - add50) <= 0.1001
        else:  # the median of the pairs' differences: between the sides' extremes
            assert -up99 <= add50 <= s99


def test_the_benchmark_refuses_too_few_requests() -> None:
    spec = importlib.util.spec_from_file_location("serve_latency",
                                                  ROOT / "benchmarks" / "serve_latency.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit):
        module.main(["--requests", "3"])
