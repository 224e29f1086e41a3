"""benchmarks/throughput.py: every registered env in the table, as a ratio to CartPole.

A check of the script (``--quick``), not of the speed: the rates themselves depend on
the machine and its load.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

import cost_envs

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"


@pytest.fixture(scope="module")
def throughput() -> ModuleType:
    spec = importlib.util.spec_from_file_location("throughput_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(table: str) -> dict[str, list[str]]:
    """Env id -> the cells of its row in the Markdown table."""
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[2:]}


def test_quick_run_lists_every_registered_env_as_a_ratio_to_cartpole(throughput, tmp_path,
                                                                     capsys) -> None:
    out = tmp_path / "throughput.md"
    assert throughput.main(["--quick", "--output", str(out)]) == 0
    table = out.read_text(encoding="utf-8")
    assert table == capsys.readouterr().out.rstrip("\n") + "\n"
    rows = _rows(table)
    assert set(rows) == {throughput.REFERENCE, *cost_envs.ENV_IDS}
    assert rows[throughput.REFERENCE][2:] == ["1.00", "ref"]
    reference = float(rows[throughput.REFERENCE][0].replace(",", ""))
    for env_id in cost_envs.ENV_IDS:
        rate = float(rows[env_id][0].replace(",", ""))
        assert rate > 0
        # one round (--quick): the ratio is the two rates' quotient
        assert float(rows[env_id][2]) == pytest.approx(rate / reference, abs=0.01)
    assert f"{throughput.QUICK['steps']} random steps" in table


def test_check_fails_only_when_an_env_is_below_the_target(throughput, monkeypatch) -> None:
    rates = {throughput.REFERENCE: [100.0, 200.0, 100.0]} | {
        env_id: [50.0, 100.0, 50.0] for env_id in cost_envs.ENV_IDS}
    monkeypatch.setattr(throughput, "measure", lambda env_ids, steps, repeats: dict(rates))
    assert throughput.main(["--check"]) == 0
    # the ratio is taken round by round: 39/100, 200/200, 39/100 has a median of 0.39
    rates[next(iter(cost_envs.ENV_IDS))] = [39.0, 200.0, 39.0]
    assert throughput.main(["--check"]) == 1
    assert throughput.main([]) == 0  # without --check the table is only reported


def test_bad_counts_are_one_line_errors(throughput, capsys) -> None:
    with pytest.raises(ValueError, match="steps=0"):
        throughput.measure([throughput.REFERENCE], steps=0, repeats=1)
    with pytest.raises(SystemExit) as exc:
        throughput.main(["--repeats", "0"])
    assert exc.value.code == 2
    assert "repeats=0" in capsys.readouterr().err
