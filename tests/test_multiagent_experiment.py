"""experiments/multitenant/runner.py at the smoke scale: the sweep's rows, table, figure, files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("matplotlib")

from experiments.__main__ import main
from experiments.multitenant import runner as multitenant


def test_the_smoke_sweep_writes_its_table_json_and_figure(tmp_path: Path) -> None:
    assert main(["multitenant", "--scale", "smoke", "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["multitenant.json", "multitenant.md", "multitenant.png",
                     "multitenant.svg"]
    result = json.loads((tmp_path / "multitenant.json").read_text())
    config = multitenant.SCALES["smoke"]
    cells = {(r["method"], r["capacity"], r["tenants"]) for r in result["rows"]}
    assert cells == {(m, c, n) for m in multitenant.METHODS for c in config["capacities"]
                     for n in config["tenants"]}
    for row in result["rows"]:
        assert row["seeds"] == config["seeds"]
        low_high = row["throughput"]
        assert low_high[1] <= low_high[0] <= low_high[2]
        assert 0 <= row["wait_share"][0] <= 1 and 0 < row["fairness"][0] <= 1
    one = [r for r in result["rows"] if r["tenants"] == 1]
    assert all(r["wait_share"][0] == 0.0 for r in one)  # one tenant calls a model once a step
    table = (tmp_path / "multitenant.md").read_text()
    assert table.count("\n| 1 | ") == len(result["rows"])
    assert (tmp_path / "multitenant.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unknown_scale_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"scale: expected one of \['smoke', 'default', 'full'\]"):
        multitenant.run("huge")


def test_the_full_scale_adds_the_shared_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = {**multitenant.SCALES["smoke"], "tenants": (2,), "ppo_timesteps": 64}
    monkeypatch.setitem(multitenant.SCALES, "tiny", tiny)
    result = multitenant.run("tiny", log=lambda _: None, jobs=1)
    methods = [r["method"] for r in result["rows"]]
    assert methods == ["independent", "scheduler", "shared-ppo"]
    assert result["rows"][-1]["seeds"] == tiny["seeds"]
