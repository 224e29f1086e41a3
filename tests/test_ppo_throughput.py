"""benchmarks/ppo_throughput.py: its table and its arguments (the speed is the script's job)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "ppo_throughput.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ppo_throughput_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _run(rate: float, weight: float) -> dict:
    return {"rate": rate, "collect_us": 10.0, "train_us": 50.0,
            "weights": {"w": torch.tensor([weight])}}


def test_report_ratios_are_medians_of_same_round_ratios(bench) -> None:
    runs = {"SB3 PPO @ ref": [_run(100, 1.0), _run(200, 1.0), _run(100, 1.0)],
            "SB3 PPO": [_run(100, 1.0)] * 3,
            "FastPPO": [_run(300, 1.0), _run(500, 1.0), _run(250, 1.0)],
            "FastPPO fused": [_run(400, 1.5)] * 3,
            "FastPPO, batch_size 256": [_run(1000, 2.0)] * 3}
    table = bench.report({16: runs}, 8192, 3, "c3fd72f881f2")
    rows = {line.split("|")[2].strip(): line for line in table.splitlines()
            if line.startswith("| 16 |")}
    # round ratios 3.0, 2.5, 2.5 -> median 2.5, below the target; rate median 300
    assert "| 300 | 2.50 | **no** |" in rows["FastPPO"]
    assert rows["FastPPO"].endswith("| same |")
    assert "| 4.00 | yes |" in rows["FastPPO fused"] and "5.0e-01" in rows["FastPPO fused"]
    assert "SB3 PPO @ c3fd72f" in rows
    assert "| 16 | FastPPO, batch_size 256 | 1,000 | 10.00 |" in table
    assert "Machine:" in table


@pytest.mark.parametrize("argv", [["--envs", "1,x"], ["--repeats", "0"], ["--envs", "0"]])
def test_bad_arguments_are_one_line_errors(bench, argv, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert "error: --" in capsys.readouterr().err


def test_the_child_imports_the_learners_from_where_the_tree_has_them(bench, tmp_path) -> None:
    # The baseline ref predates agents/learners/ (issue #25): its child imports agents.lora.
    assert bench.has_learners_package(bench.REPO)
    (tmp_path / "agents" / "lora").mkdir(parents=True)
    assert not bench.has_learners_package(tmp_path)
    (tmp_path / "agents" / "learners").mkdir()
    assert bench.has_learners_package(tmp_path)
