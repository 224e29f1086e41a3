"""Every module imports in a fresh process, the packages stay torch-free at import, and
imports flow one way: ``cost_envs`` <- ``agents`` <- ``experiments``."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import code_lines

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cost_envs", "agents", "experiments")
#: What each package may import from the project (imports flow one way).
ALLOWED = {"cost_envs": {"cost_envs"}, "agents": {"cost_envs", "agents"},
           "experiments": {"cost_envs", "agents", "experiments"}}
MAX_MODULE_LINES = 500


def _modules(package: str) -> list[str]:
    root = REPO / package
    names = [package]
    names += [info.name for info in pkgutil.walk_packages([str(root)], prefix=f"{package}.")]
    return sorted(names)


def _source_files(folders: tuple[str, ...] = PACKAGES) -> list[Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def every_module_imported() -> dict[str, object]:
    """Import every module of the three packages in one fresh process; what it saw.

    ``imported``: how many modules imported; ``extras``: which top-level packages of the
    tune extra were loaded by then. Both tests below read this one process.
    """
    modules = [name for package in PACKAGES for name in _modules(package)]
    assert "experiments.lora_ppo.runner" in modules and "agents.learners.checkpoints" in modules
    code = ("import importlib, json, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps({'imported': len(" + repr(modules) + "), 'extras': "
            "sorted({m.split('.')[0] for m in sys.modules} & "
            "{'ray', 'optuna', 'rliable', 'arch'})}))")
    return {"modules": modules, **json.loads(_run(code))}


def test_every_module_imports_in_a_fresh_process(every_module_imported) -> None:
    assert every_module_imported["imported"] == len(every_module_imported["modules"])


#: Packages imported in turn in one fresh process (one interpreter instead of four:
#: modules only accumulate, so the first to load torch is the one named).
NO_TORCH_PACKAGES = ["cost_envs", "agents", "agents.routers", "agents.learners"]


def test_package_import_loads_no_torch() -> None:
    code = ("import importlib, json, sys\n"
            "import gymnasium as gym\n"
            "seen = {}\n"
            f"for package in {NO_TORCH_PACKAGES!r}:\n"
            "    importlib.import_module(package)\n"
            "    seen[package] = 'torch' in sys.modules\n"
            "env = gym.make('cost_envs/ToolBench-v0')\n"
            "env.reset(seed=0)\n"
            "seen['an env made and reset'] = 'torch' in sys.modules\n"
            "print(json.dumps(seen))")
    loaded = json.loads(_run(code))
    assert loaded == {**dict.fromkeys(NO_TORCH_PACKAGES, False),
                      "an env made and reset": False}, loaded


def test_no_module_loads_the_tune_extra(every_module_imported) -> None:
    # Ray, Optuna and rliable are an optional extra: every module imports without them.
    # (Slow: it imports every module in a fresh process; the fast tier reads the sources,
    # test_no_module_imports_the_tune_extra_when_imported.)
    assert every_module_imported["extras"] == []


#: Top-level packages of the tune extra.
TUNE_EXTRA = {"ray", "optuna", "rliable", "arch"}


def _imports_run_at_import(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported: not inside a function or
    lambda, nor under ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if not isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            continue  # an expression holds no import statement: not walked (issue #36)
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for statement in child.orelse:
                yield from _imports_run_at_import(ast.Module(body=[statement], type_ignores=[]))
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _imports_run_at_import(child)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_the_tune_extra_when_imported(package: str) -> None:
    # The fast tier's check of the test above, from the sources: Ray, Optuna and rliable
    # are imported inside the functions that use them, never when a module is imported.
    found = []
    for path in _source_files((package,)):
        for node in _imports_run_at_import(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if node.level == 0 else [])
            found += [f"{path.relative_to(REPO)}:{node.lineno} imports {name}"
                      for name in names if name.split(".")[0] in TUNE_EXTRA]
    assert not found, "\n".join(found)


def test_cost_envs_modules_load_no_torch() -> None:
    # Every module of the env package, not only its __init__: none may need torch.
    modules = _modules("cost_envs")
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print('torch' in sys.modules)")
    assert _run(code).strip() == "False"


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_flow_one_way(path: Path) -> None:
    package = path.relative_to(REPO).parts[0]
    forbidden = _imported_packages(path) - ALLOWED[package]
    assert not forbidden, f"{path.relative_to(REPO)} imports {sorted(forbidden)}"


@pytest.mark.parametrize("path", _source_files((*PACKAGES, "tests", "benchmarks", "examples")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_over_500_lines_of_code(path: Path) -> None:
    # Code lines only: docstrings and comments never count (issue #25: the limit is a
    # guideline for cohesion, not a reason to trim documentation). A module of no more
    # lines than the limit has no more lines of code either: only longer ones are read.
    source = path.read_text(encoding="utf-8")
    if len(source.splitlines()) > MAX_MODULE_LINES:
        lines = code_lines(source)
        assert lines <= MAX_MODULE_LINES, f"{path.relative_to(REPO)} has {lines} lines of code"
