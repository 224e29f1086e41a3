"""benchmarks/multitenant_throughput.py: a check of the script (--quick), not of the speed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("pettingzoo")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "multitenant_throughput.py"


def test_the_quick_run_prints_a_row_per_id_and_setting(capsys: pytest.CaptureFixture) -> None:
    spec = importlib.util.spec_from_file_location("multitenant_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--tenants", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| cost_envs/")]
    assert len(rows) == 4 * len(module.SETTINGS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        # rates positive, the verdict the ratio's; the ratio's size is timing, not checked
        # here (a quick run's ratio printed 0.00 once under a loaded CI)
        multi, single = (float(cell.replace(",", "")) for cell in cells[2:4])
        assert multi > 0 and single > 0 and float(cells[4]) >= 0
        printed = float(cells[4])  # rounded to 2 digits: the verdict is the exact ratio's
        assert cells[5] in ({"yes"} if printed > module.TARGET_RATIO + 0.005 else
                            {"**no**"} if printed < module.TARGET_RATIO - 0.005 else
                            {"yes", "**no**"})
    with pytest.raises(ValueError, match="expected steps, repeats and tenants >= 1"):
        module.measure("cost_envs/MultiTenantToolBench-v0", "open", 0, 1, 2)
