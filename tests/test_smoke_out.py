"""A smoke run never writes into the committed results unless ``--out`` says so."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments import __main__ as command


@pytest.mark.parametrize("experiment", [*command.EXPERIMENTS, "all", *command.ON_REQUEST])
def test_smoke_output_defaults_to_the_ignored_smoke_folder(experiment: str) -> None:
    out = command.default_out(experiment, "smoke")
    assert out.is_relative_to(command.SMOKE_OUT)
    assert out not in (command.DEFAULT_OUT, command.DEFAULT_OUT / "full", command.TUNED_DIR)


@pytest.mark.parametrize(("argv", "expected"), [
    (["all", "--scale", "smoke"], command.SMOKE_OUT),
    (["tune", "--scale", "smoke"], command.SMOKE_OUT / "tuned"),
    (["corl", "--scale", "default"], command.DEFAULT_OUT),
])
def test_main_runs_into_the_default_of_its_scale(monkeypatch, tmp_path: Path, argv: list[str],
                                                 expected: Path) -> None:
    seen: list[Path] = []

    def fake_run(args: argparse.Namespace, log: Callable[[str], None]) -> None:
        seen.append(args.out)

    monkeypatch.setattr(command, "run", fake_run)
    monkeypatch.setattr(command, "check_writable", lambda path: path)  # create nothing
    assert command.main(argv) == 0
    assert seen == [expected]
    explicit = tmp_path / "results"
    assert command.main([*argv, "--out", str(explicit)]) == 0
    assert seen[-1] == explicit  # an explicit --out goes wherever it says, at any scale


def test_the_smoke_folder_is_ignored_by_git() -> None:
    repo = command.REPO
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    probe = command.SMOKE_OUT / "lora_ppo.md"
    done = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=repo, check=False)
    assert done.returncode == 0, f"{probe} is not git-ignored"
    committed = command.DEFAULT_OUT / "lora_ppo.md"
    done = subprocess.run(["git", "check-ignore", "-q", str(committed)], cwd=repo, check=False)
    assert done.returncode == 1  # the committed results stay tracked
