"""``cost-envs serve``: a bad configuration is one line and status 1, before FastAPI loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import sys
from agents.cli.main import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    if isinstance(exit.code, str):
        print(exit.code, file=sys.stderr)
    status = exit.code if isinstance(exit.code, int) else 1
print("fastapi" in sys.modules, "uvicorn" in sys.modules)
sys.exit(status)
"""


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, "serve", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize(("text", "message"), [
    ("models: []\n", "models: expected at least one model, got []"),
    ("models:\n  - {name: a, base_url: 'http://x', input_price: -1, output_price: 1}\n",
     "models[0]: input_price: expected a finite number >= 0, got -1"),
    ("modles: []\n", "unknown key(s) ['modles']; expected some of ['storage', 'models', "
                      "'routers', 'budgets', 'server']; did you mean 'models'?"),
])
def test_a_bad_config_is_one_line_before_the_server_loads(tmp_path: Path, text: str,
                                                           message: str) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(text)
    done = _serve("--config", str(config))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"cost-envs serve: {config}: {message}"]
    assert done.stdout.split() == ["False", "False"]  # FastAPI and uvicorn never imported


def test_a_missing_config_and_a_bad_port_are_named(tmp_path: Path) -> None:
    done = _serve("--config", str(tmp_path / "nope.yaml"))
    assert done.returncode == 1 and "--config: no such file" in done.stderr
    done = _serve("--config", "x.yaml", "--port", "70000")
    assert done.returncode == 2 and "expected a port in [1, 65535], got '70000'" in done.stderr
