"""The command line's failures: one line on stderr, no traceback, a non-zero status.

Corrupt or crafted models, an output path that cannot be written (checked before any
training), a closed pipe, a full disk and Ctrl-C. Some tests run ``python -m agents.cli``
in a real process, since a traceback or a second error at interpreter exit only shows there.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agents
from agents import cli

FLIGHT = "cost_envs/FlightPlanner-v0"
ROOT = Path(agents.__file__).resolve().parents[1]


def run_cli(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m agents.cli ARGV`` in a fresh process, with this tree first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])), "OMP_NUM_THREADS": "1"}
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "agents.cli", *argv], stderr=subprocess.PIPE,
                          text=True, env=env, timeout=300, check=False, **kwargs)


#: A progress line of a command (``cost-envs evaluate: [   0 s] loading the model ...``).
PROGRESS = re.compile(r"^cost-envs [\w-]+: \[\s*\d+ s\] ")


def assert_one_line(stderr: str, *names: str) -> None:
    """One error line, after any progress lines; it names every one of ``names``."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.strip().splitlines() if not PROGRESS.match(line)]
    assert len(errors) == 1, stderr
    for name in names:
        assert name in errors[0], (name, stderr)


def exit_message(argv: list[str]) -> str:
    """The message of the ``SystemExit`` that ``cli.main(argv)`` ends with (status 1)."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    message = info.value.code
    assert isinstance(message, str), message  # a string exits with status 1
    assert "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    import torch

    from agents.learners.checkpoints import save_allocator
    from agents.learners.supervised import SupervisedConfig
    from agents.learners.training import train

    torch.set_num_threads(1)
    allocator = train(FLIGHT, "lora", 1, seed=0, supervised=SupervisedConfig(episodes=30,
                                                                                epochs=2))
    return save_allocator(allocator, tmp_path_factory.mktemp("model") / "model")


def _copy(saved: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "model"))


# ------------------------------------------------------------ corrupt and crafted models
@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not a model", b"\x08" + b"\0" * 7 + b"{}"])
def test_evaluate_a_corrupt_model_exits_with_one_line(saved, tmp_path, content):
    path = _copy(saved, tmp_path)
    (path / "model.safetensors").write_bytes(content)
    message = exit_message(["evaluate", "--env", FLIGHT, "--model", str(path)])
    assert str(path / "model.safetensors") in message
    assert message.startswith("cost-envs evaluate: cannot load")


def test_evaluate_a_truncated_model_in_a_real_process(saved, tmp_path):
    path = _copy(saved, tmp_path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    done = run_cli("evaluate", "--env", FLIGHT, "--model", str(path), "--episodes", "5")
    assert done.returncode == 1
    assert done.stdout == ""
    assert_one_line(done.stderr, str(weights), "not a valid safetensors file")


def test_evaluate_refuses_a_model_that_changes_the_env(saved, tmp_path):
    path = _copy(saved, tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["env_kwargs"] = {"max_episode_steps": 1}
    (path / "config.json").write_text(json.dumps(config))
    message = exit_message(["evaluate", "--env", FLIGHT, "--model", str(path),
                            "--methods", "oracle", "--episodes", "20"])
    assert "max_episode_steps" in message and str(path / "config.json") in message


# ------------------------------------------------------------ --out checked before work
def _forbid(monkeypatch, module: str, name: str) -> None:
    import importlib

    def must_not_run(*args, **kwargs):
        raise AssertionError(f"{name} ran although --out cannot be written")

    monkeypatch.setattr(importlib.import_module(module), name, must_not_run)


@pytest.mark.parametrize("out", ["notes.txt", "notes.txt/model"])
def test_train_checks_out_before_training(tmp_path, monkeypatch, out):
    _forbid(monkeypatch, "agents.learners.training", "train")
    (tmp_path / "notes.txt").write_text("precious")
    message = exit_message(["train", "--env", FLIGHT, "--method", "lora", "--out",
                            str(tmp_path / out), "--no-progress"])
    assert "--out" in message and "notes.txt" in message
    assert (tmp_path / "notes.txt").read_text() == "precious"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_train_refuses_an_unwritable_out_before_training(monkeypatch):
    _forbid(monkeypatch, "agents.learners.training", "train")
    message = exit_message(["train", "--env", FLIGHT, "--method", "ppo", "--out",
                            "/proc/cost-envs-model", "--no-progress"])
    assert "--out" in message and "cannot write in /proc" in message


@pytest.mark.parametrize("out", ["notes.txt/base", "taken"])
def test_pretrain_checks_out_before_pretraining(tmp_path, monkeypatch, out):
    _forbid(monkeypatch, "agents.learners.pretrain", "pretrain_base")
    (tmp_path / "notes.txt").write_text("precious")
    (tmp_path / "taken.safetensors").mkdir()  # a directory where the weights would go
    message = exit_message(["pretrain", "--env", FLIGHT, "--out", str(tmp_path / out)])
    assert message.startswith("cost-envs pretrain: --out:")


def test_pretrain_with_a_bad_out_fails_in_a_real_process(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    done = run_cli("pretrain", "--env", FLIGHT, "--out", str(tmp_path / "notes.txt" / "b"))
    assert done.returncode == 1
    assert_one_line(done.stderr, "--out", "notes.txt")


# ------------------------------------------------- closed pipe, full disk, Ctrl-C
class _FailingStdout:
    """A stdout whose writes fail, as a closed pipe or a full disk makes them."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        raise self.error

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "no descriptor")


@pytest.mark.parametrize(("error", "status", "words"), [
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), 141, "broken pipe"),
    (OSError(errno.ENOSPC, "No space left on device"), 1, "No space left on device"),
])
def test_output_errors_are_one_line_and_a_status(monkeypatch, capsys, error, status, words):
    monkeypatch.setattr(sys, "stdout", _FailingStdout(error))
    assert cli.main(["list"]) == status
    assert_one_line(capsys.readouterr().err, words)


def test_a_closed_pipe_in_a_real_process():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "agents.cli", "list"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdout.close()  # the reader is gone before the command writes (`| head -0`)
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141
    assert_one_line(stderr, "broken pipe")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_in_a_real_process():
    with open("/dev/full", "w") as full:
        done = run_cli("list", stdout=full)
    assert done.returncode == 1
    assert_one_line(done.stderr, "No space left on device")


def test_help_into_a_full_disk_is_an_error_not_success():
    # argparse swallows write errors: without the project's parser this exited 0
    with open("/dev/full", "w") as full:
        done = run_cli("evaluate", "--help", stdout=full)
    assert done.returncode == 1
    assert_one_line(done.stderr, "No space left on device")


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.evaluate, "compare", interrupted)
    try:
        status = cli.main(["evaluate", "--env", FLIGHT, "--methods", "rule"])
    except KeyboardInterrupt:  # escaping, it would stop the whole test session
        pytest.fail("KeyboardInterrupt escaped cli.main")
    assert status == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line(captured.err, "interrupted")


# ------------------------------------------------------------------ reproduce is gone
def test_reproduce_is_no_longer_a_subcommand(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["reproduce"])
    assert info.value.code == 2
    assert "invalid choice: 'reproduce'" in capsys.readouterr().err
    assert [command.name for command in cli.COMMANDS] == ["list", "evaluate", "train",
                                                          "pretrain", "route",
                                                          "export-minari", "serve"]
    assert "python -m experiments" in cli.__doc__
