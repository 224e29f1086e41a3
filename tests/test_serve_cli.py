"""``cost-envs serve``: a bad configuration is one line and status 1, before FastAPI loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Runs ``main(["serve", *argv])`` for each case (JSON list in argv[1]: name, argv) in one
#: process, ended as the interpreter would end it (an exit message to stderr, status 1);
#: prints name -> (status, stdout, stderr, whether FastAPI and uvicorn are imported).
#: Modules only accumulate from one case to the next, so a case that loads the server is
#: not hidden (it and the cases after it fail).
PROBE_EACH = """
import contextlib, io, json, sys, traceback
from agents.cli.main import main
seen = {}
for name, argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(["serve", *argv])
        except SystemExit as exit:
            if isinstance(exit.code, str):
                print(exit.code, file=sys.stderr)
            status = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
    seen[name] = [status, out.getvalue(), err.getvalue(),
                  ["fastapi" in sys.modules, "uvicorn" in sys.modules]]
print(json.dumps(seen))
"""
#: The bad configurations: case -> (the file's text, the one line naming it).
BAD = {
    "no-model": ("models: []\n", "models: expected at least one model, got []"),
    "negative-price": (
        "models:\n  - {name: a, base_url: 'http://x', input_price: -1, output_price: 1}\n",
        "models[0]: input_price: expected a finite number >= 0, got -1"),
    "misspelt-key": ("modles: []\n", "unknown key(s) ['modles']; expected some of ['storage', "
                     "'models', 'routers', 'budgets', 'server']; did you mean 'models'?"),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    """Every case run in one fresh process (one interpreter's start-up, not one per case)."""
    root = tmp_path_factory.mktemp("serve_cli")
    cases = []
    for name, (text, _) in BAD.items():
        (root / f"{name}.yaml").write_text(text)
        cases.append([name, ["--config", str(root / f"{name}.yaml")]])
    cases += [["missing", ["--config", str(root / "nope.yaml")]],
              ["bad-port", ["--config", "x.yaml", "--port", "70000"]]]
    done = subprocess.run([sys.executable, "-c", PROBE_EACH, json.dumps(cases)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout)
    seen["root"] = [root]
    return seen


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_config_is_one_line_before_the_server_loads(served: dict[str, list],
                                                           case: str) -> None:
    status, out, err, loaded = served[case]
    config = served["root"][0] / f"{case}.yaml"
    assert status == 1
    assert err.strip().splitlines() == [f"cost-envs serve: {config}: {BAD[case][1]}"]
    assert out == "" and loaded == [False, False]  # FastAPI and uvicorn never imported


def test_a_missing_config_and_a_bad_port_are_named(served: dict[str, list]) -> None:
    status, _, err, _ = served["missing"]
    assert status == 1 and "--config: no such file" in err
    status, _, err, _ = served["bad-port"]
    assert status == 2 and "expected a port in [1, 65535], got '70000'" in err
