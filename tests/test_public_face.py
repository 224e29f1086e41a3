"""``agents``' public face: ``from agents import train, evaluate, ...`` (PEP 562, lazy).

``import agents`` imports no torch and none of the modules behind the names; a name
imports its module when first asked for and is the very object that module defines.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import agents

REPO = Path(__file__).resolve().parents[1]


def _fresh(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_import_agents_and_dir_load_no_torch_and_no_module_behind_a_name() -> None:
    seen = _fresh(
        "import json, sys\n"
        "import agents\n"
        "names = dir(agents)\n"
        "print(json.dumps({'torch': sorted(m for m in sys.modules if m.split('.')[0] == "
        "'torch'), 'loaded': sorted(m for m in sys.modules if m.startswith('agents.')),"
        " 'in_dir': sorted(set(agents.__all__) - set(names))}))")
    assert seen["torch"] == []
    assert seen["loaded"] == []  # not even the light modules: nothing is imported eagerly
    assert seen["in_dir"] == []


def test_a_torch_name_imports_torch_only_when_asked_for() -> None:
    # make_batched_vec_env, the lightest name that needs torch (SB3's VecEnv). The fresh
    # process refuses torch and records when it is asked for: loading it would cost seconds
    # for the same check (the name is its module's object: the test below, in process).
    seen = _fresh(
        "import json, sys\n"
        "asked = []\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            asked.append(name)\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "from agents import evaluate, RuleBased\n"
        "before = list(asked)\n"
        "try:\n"
        "    from agents import make_batched_vec_env\n"
        "except ImportError as error:\n"
        "    failed = str(error)\n"
        "print(json.dumps({'before': before, 'after': asked[:1], 'failed': failed}))")
    assert seen == {"before": [], "after": ["torch"], "failed": "No module named 'torch'"}
    assert agents._PUBLIC["make_batched_vec_env"] == "agents.vec_env"


@pytest.mark.parametrize("name", [name for name in agents.__all__ if name != "train_shared"])
def test_each_name_is_the_object_its_module_defines(name: str) -> None:
    module = agents._PUBLIC[name]
    assert getattr(agents, name) is getattr(importlib.import_module(module), name)


def test_the_multitenant_learner_is_public_too() -> None:
    pytest.importorskip("supersuit")
    from agents.learners.multitenant import train_shared

    assert agents.train_shared is train_shared


def test_an_unknown_name_is_an_attribute_error_and_subpackages_still_import() -> None:
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        agents.trian  # noqa: B018
    from agents import cli

    assert cli.__name__ == "agents.cli" and callable(cli.main)
