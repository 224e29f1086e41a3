"""benchmarks/vector_throughput.py: a check of the script (``--quick``), not of the speed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

import cost_envs
from cost_envs.registration import VECTOR_IDS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vector_throughput.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vector_throughput_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_reports_every_id_ppo_and_scaling(bench, tmp_path, capsys) -> None:
    out = tmp_path / "vector_throughput.md"
    assert bench.main(["--quick", "--output", str(out)]) == 0
    table = out.read_text(encoding="utf-8")
    assert table == capsys.readouterr().out.rstrip("\n") + "\n"
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in table.splitlines() if line.startswith("| cost_envs/")}
    assert set(rows) == set(cost_envs.ENV_IDS)
    for env_id, cells in rows.items():
        if env_id in VECTOR_IDS:
            native, sync, ratio = (float(c.replace(",", "")) for c in cells[:3])
            assert native > 0 and sync > 0
            assert ratio == pytest.approx(native / sync, rel=0.05)  # one round: the quotient
        else:
            assert cells[0] == "no batched env yet"
    assert "| ratio (median over runs) |" in table
    for n in bench.QUICK["scaling"]:
        assert f"\n| {n} | " in table


def test_bad_counts_are_one_line_errors(bench, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--repeats", "0"])
    assert exc.value.code == 2
    assert "--repeats" in capsys.readouterr().err
