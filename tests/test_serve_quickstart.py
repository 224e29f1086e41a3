"""docs/serving.md's quickstart works as written: its commands, then its OpenAI client block.

The shell block's commands run in a fresh directory holding a copy of ``examples/`` and the
packaged example logs at the paths the block names (as in a clone), with ``cost-envs``
being this venv's command; the backgrounded stand-in and the server are started as the
block starts them, on the ports the example configuration names. Then the page's Python
block runs unchanged against them, and the ledger the configuration names holds the call.
Skipped (saying why) when a port the quickstart uses is taken on this machine.
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
pytest.importorskip("openai", reason="the serve extra is not installed")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "serving.md"
PORTS = (8100, 8000)  # the stand-in's (the block) and the server's (examples/serve.yaml)


def _quickstart() -> tuple[list[str], str]:
    """The quickstart's shell commands (continuations joined) and its Python block."""
    section = PAGE.read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    python = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    joined = shell.replace("\\\n", " ")
    commands = [line.split("  #")[0].strip() for line in joined.splitlines()]
    return [c for c in commands if c and not c.startswith(("#", "pip "))], python


def _taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_for(port: int, process: subprocess.Popen, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not _taken(port):
        if process.poll() is not None:
            raise AssertionError(f"exited {process.returncode}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on {port} after {seconds} s")
        time.sleep(0.2)


def _argv(command: str) -> list[str]:
    words = shlex.split(command.rstrip("&").strip())
    if words[0] == "cost-envs":
        return [sys.executable, "-m", "agents.cli", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    raise AssertionError(f"the quickstart runs a command this test does not know: {command}")


def _in_process(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> None:
    """``cost-envs ARGV`` run from ``cwd`` in this process; it must succeed."""
    from agents import cli

    with monkeypatch.context() as patch:
        patch.chdir(cwd)
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = exit_.code
    assert code == 0, capsys.readouterr().err


def test_the_quickstart_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    for port in PORTS:
        if _taken(port):
            pytest.skip(f"port {port}, which the quickstart uses, is taken on this machine")
    commands, python = _quickstart()
    assert any(c.endswith("&") for c in commands) and commands[-1].startswith("cost-envs serve")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "cost_envs" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "cost_envs" / "data" / "example_traces.jsonl",
                tmp_path / "cost_envs" / "data")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    servers: list[subprocess.Popen] = []
    try:
        for command in commands:
            argv = _argv(command)
            if command.endswith("&") or command is commands[-1]:
                servers.append(subprocess.Popen(argv, cwd=tmp_path, env=env, text=True,
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.PIPE))
            elif command.startswith("cost-envs "):
                # in this process, from the same directory (a new interpreter costs seconds
                # of imports); the servers above and below are processes, as in the block
                _in_process(shlex.split(command)[1:], tmp_path, monkeypatch, capsys)
            else:
                done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True,
                                      text=True, timeout=600)
                assert done.returncode == 0, done.stderr
        for port, process in zip(PORTS, servers, strict=True):
            _wait_for(port, process)
        namespace: dict[str, object] = {}
        exec(compile(python, f"{PAGE}:quickstart", "exec"), namespace)
        answer = namespace["answer"]
        assert answer.model in {"small", "large"} and answer.usage.total_tokens > 0
    finally:
        for process in reversed(servers):
            process.terminate()
            process.wait(timeout=30)
    with sqlite3.connect(tmp_path / "examples" / "serve-ledger.db") as ledger:
        rows = ledger.execute("select model, outcome, cost_micros from requests").fetchall()
    assert len(rows) == 1 and rows[0][0] == answer.model and rows[0][2] > 0
    assert rows[0][2] <= 10_000  # the block's X-Cost-Envs-Budget: $0.01
