import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import cost_envs
from agents import cli, files
from agents.baselines import BASELINES

FLIGHT = "cost_envs/FlightPlanner-v0"
HEADLINE = ("success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost")


def test_list_prints_the_registered_ids(capsys):
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out.splitlines() == list(cost_envs.ENV_IDS)


def test_evaluate_json(capsys):
    argv = ["evaluate", "--env", FLIGHT, "--methods", "rule,oracle", "--episodes", "50",
            "--resamples", "100", "--json"]
    assert cli.main(argv) == 0
    results = json.loads(capsys.readouterr().out)
    assert list(results) == ["rule", "oracle"]
    for summary in results.values():
        for key in HEADLINE:
            low, high = summary[f"{key}_ci"]
            assert low <= summary[key] <= high
        assert summary["episodes"] == 50
        assert set(summary["call_ratio"]) == set(cost_envs.flight_planner_pool().names)
    assert results["oracle"]["success_rate"] >= results["rule"]["success_rate"]


def test_evaluate_table_uses_default_methods_and_short_env_name(capsys):
    assert cli.main(["evaluate", "--env", "ToolBench-v0", "--episodes", "20",
                     "--resamples", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| Method | Success | CPS |")
    assert [line.split("|")[1].strip() for line in lines[2:]] == list(cli.DEFAULT_METHODS)


def test_evaluate_is_deterministic(capsys):
    argv = ["evaluate", "--env", FLIGHT, "--methods", "random", "--episodes", "30", "--json"]
    cli.main(argv)
    first = capsys.readouterr().out
    cli.main(argv)
    assert capsys.readouterr().out == first


@pytest.mark.parametrize(
    ("argv", "valid"),
    [
        (["evaluate", "--env", "cost_envs/Nope-v0"], list(cost_envs.ENV_IDS)),
        (["evaluate", "--env", FLIGHT, "--methods", "rule,bogus"], list(BASELINES)),
    ],
)
def test_unknown_names_exit_2_listing_the_valid_ones(argv, valid, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for name in valid:
        assert name in err


@pytest.mark.parametrize("episodes", ["0", "-3", "ten"])
def test_episodes_must_be_a_positive_int(episodes, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "--env", FLIGHT, "--episodes", episodes])
    assert exc.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_a_subcommand_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2


def test_reproduce_writes_tables_and_json(tmp_path, capsys):
    out = tmp_path / "results"
    assert cli.main(["reproduce", "--episodes", "20", "--resamples", "50",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    names = [env_id.split("/")[-1] for env_id in cost_envs.ENV_IDS]
    expected = {f"baselines_{n}{ext}" for n in names for ext in (".md", ".json")}
    assert {p.name for p in out.iterdir()} == expected  # no temp files left behind
    umask = os.umask(0)
    os.umask(umask)
    for path in out.iterdir():  # readable like any other file, not mkstemp's 0600
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    for env_id, name in zip(cost_envs.ENV_IDS, names, strict=True):
        assert f"## {env_id}" in printed
        payload = json.loads((out / f"baselines_{name}.json").read_text())
        assert payload["env_id"] == env_id and payload["episodes"] == 20
        assert list(payload["methods"]) == list(cli.REPRODUCE_METHODS)
        markdown = (out / f"baselines_{name}.md").read_text()
        assert "| Method | Success |" in markdown
        rows = [line for line in markdown.splitlines() if line.startswith("| ")][1:]
        assert [r.split("|")[1].strip() for r in rows] == list(cli.REPRODUCE_METHODS)


def test_reproduce_failure_keeps_previous_files(tmp_path, monkeypatch):
    out = tmp_path / "results"
    out.mkdir()
    old = out / "baselines_FlightPlanner-v0.md"
    old.write_text("previous results\n")

    def boom(*args, **kwargs):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(cli, "compare", boom)
    with pytest.raises(RuntimeError, match="simulated"):
        cli.main(["reproduce", "--episodes", "5", "--out", str(out)])
    assert old.read_text() == "previous results\n"
    assert [p.name for p in out.iterdir()] == [old.name]


def test_write_atomic_cleans_up_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x.md"
    target.write_text("old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        files.write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.md"]


def test_installed_console_script():
    script = shutil.which("cost-envs", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("cost-envs console script not installed in this environment")
    done = subprocess.run([script, "list"], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == list(cost_envs.ENV_IDS)
