"""The distribution as a user gets it: sdist -> wheel -> a fresh venv with the envs only.

The sdist is built from a copy of the source tree and the wheel from the unpacked sdist
(as ``python -m build`` does), both through setuptools' PEP 517 hooks in this venv, so
the build needs no download. The wheel is then installed into a new venv (no
``--system-site-packages``) with ``-c constraints.txt`` and no extra: only the envs'
own dependencies come from the package index. If pip cannot reach the index, the
fresh-venv test is skipped, saying so; any other failure fails it.
"""

from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from cost_envs.extras import EXTRA_MODULES, import_extra, install_hint, require_extra

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cost_envs", "agents")
NOT_DISTRIBUTED = ("tests", "experiments", "benchmarks", "examples", "docs")
#: What `pip install cost-envs` may bring: the envs' dependencies and theirs.
ENV_ONLY = {"cost-envs", "gymnasium", "numpy", "pyyaml", "cloudpickle", "farama-notifications",
            "typing-extensions", "pip", "setuptools"}
HEAVY = {"torch", "stable-baselines3", "sb3-contrib", "peft", "safetensors", "scikit-learn",
         "transformers", "tqdm", "rich"}
#: What cost_envs may import: its install_requires' modules, and, inside the function that
#: needs it, an optional package it can do without (named in its error or its fallback).
ENV_IMPORTS = {"cost_envs", "gymnasium", "numpy", "yaml"}
ENV_OPTIONAL_IMPORTS = {*EXTRA_MODULES["embeddings"], "tiktoken"}
#: pip's output when it could not reach the index (as opposed to a resolution error).
NETWORK_ERROR = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name "
                           r"resolution|Network is unreachable|ConnectTimeout|ReadTimeout|"
                           r"Connection refused|connection broken|ProxyError|Could not fetch URL",
                           re.IGNORECASE)

# Run in the fresh venv (python -I: neither PYTHONPATH nor the working directory is seen).
PROBE = """
import importlib.metadata as md, importlib.util, json
import gymnasium as gym, pkgutil, importlib
import cost_envs
modules = [cost_envs.__name__] + [m.name for m in pkgutil.walk_packages(cost_envs.__path__,
                                                                         "cost_envs.")]
for name in modules:
    importlib.import_module(name)
steps = {}
for env_id in cost_envs.ENV_IDS:
    env = gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)
    info = env.step(env.action_space.sample())[-1]
    steps[env_id] = sorted(info)
    env.close()
import agents  # the cost-envs command's package: importable without the agents extra
try:
    agents.train
    agents_error = None
except ImportError as err:
    agents_error = str(err)
print(json.dumps({
    "modules": modules, "steps": steps, "agents_error": agents_error,
    "torch": importlib.util.find_spec("torch") is not None,
    "cost_envs": cost_envs.__file__,
    "dists": sorted(d.metadata["Name"] for d in md.distributions()),
}))
"""


def _normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _clean_env() -> dict[str, str]:
    """This process's environment without what would make the worktree importable."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(args: list[str | Path], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=_clean_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def _build(hook: str, source: Path, out: Path) -> Path:
    """Call setuptools' PEP 517 ``hook`` in ``source``; the one file it writes to ``out``."""
    out.mkdir()
    done = _run([sys.executable, "-c",
                 f"from setuptools import build_meta; build_meta.{hook}({str(out)!r})"], source)
    assert done.returncode == 0, done.stderr[-3000:]
    # a data folder left out of `packages`: setuptools ships it today, but warns it will not
    assert "absent from the `packages` configuration" not in done.stdout + done.stderr
    (built,) = out.iterdir()
    return built


def _copy_source(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build",
                                    "dist", "results", "runs", ".*_cache", ".hypothesis")
    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist built from a copy of the tree, and the wheel built from the sdist."""
    tmp = tmp_path_factory.mktemp("dist")
    sdist = _build("build_sdist", _copy_source(tmp / "src"), tmp / "sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    wheel = _build("build_wheel", unpacked, tmp / "wheel")
    return {"sdist": sdist, "wheel": wheel}


def _package_data() -> set[str]:
    """Every non-Python file of the packages in the source tree, relative to ROOT."""
    return {p.relative_to(ROOT).as_posix() for name in PACKAGES
            for p in (ROOT / name).rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}


def test_the_wheel_holds_the_packages_and_their_data_only(dist: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {*PACKAGES, f"cost_envs-{_version()}.dist-info"}
    assert _package_data() - names == set()  # prices, traces, pretrained LoRA bases, py.typed
    assert {"cost_envs/data/prices.yaml", "cost_envs/py.typed", "agents/py.typed"} <= names
    assert any(n.startswith("agents/learners/pretrained/") and n.endswith(".safetensors")
               for n in names)
    sources = {p.relative_to(ROOT).as_posix() for name in PACKAGES
               for p in (ROOT / name).rglob("*.py")}
    assert sources - names == set()


def test_the_wheel_requires_the_envs_dependencies_and_offers_the_extras(
        dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as whl:
        info = f"cost_envs-{_version()}.dist-info"
        metadata = whl.read(f"{info}/METADATA").decode()
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    requires = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)([^;\n]*)(;.*)?$", metadata, re.M)
    assert sorted(_normalise(name) for name, _, marker in requires if not marker) == [
        "gymnasium", "numpy", "pyyaml"]
    by_extra = {}
    for name, _, marker in requires:
        if marker:
            extra = re.search(r'extra == "([^"]+)"', marker).group(1)
            by_extra.setdefault(extra, set()).add(_normalise(name))
    assert {"torch", "stable-baselines3", "sb3-contrib", "peft", "safetensors",
            "scikit-learn"} <= by_extra["agents"]
    assert set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M)) == set(_extras())
    assert re.search(r"^cost-envs = agents\.cli\.main:main$", entry_points, re.M)


def test_the_sdist_holds_what_builds_the_wheel_and_no_tests(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"setup.cfg", "pyproject.toml", "README.md", "LICENSE", "constraints.txt",
            "PKG-INFO"} <= names
    assert _package_data() - names == set()
    assert {n.split("/")[0] for n in names} & set(NOT_DISTRIBUTED) == set()
    assert not any(n.endswith(".pyc") for n in names)


def test_the_wheel_installs_the_envs_without_torch_into_a_fresh_venv(
        dist: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", venv], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    pip = _run([python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "-c", ROOT / "constraints.txt", dist["wheel"]], tmp_path)
    if pip.returncode != 0 and NETWORK_ERROR.search(pip.stdout + pip.stderr):
        pytest.skip("the package index is unreachable: pip could not download the wheel's "
                    f"dependencies ({NETWORK_ERROR.search(pip.stdout + pip.stderr).group(0)})")
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]

    probe = _run([python, "-I", "-c", PROBE], tmp_path, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.splitlines()[-1])
    assert Path(seen["cost_envs"]).is_relative_to(venv)  # the installed copy, not the tree
    dists = {_normalise(name) for name in seen["dists"]}
    assert dists <= ENV_ONLY and not dists & HEAVY, dists
    assert not seen["torch"]
    import cost_envs

    assert len(seen["modules"]) == len(list((ROOT / "cost_envs").rglob("*.py")))
    assert set(seen["steps"]) == set(cost_envs.ENV_IDS)
    for keys in seen["steps"].values():
        assert {"cost", "flops", "calls"} <= set(keys)
    message = seen["agents_error"]
    assert message is not None and "\n" not in message
    assert install_hint("agents") in message and "torch" in message

    cli = _run([venv / "bin" / "cost-envs", "list"], tmp_path, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.split() == list(cost_envs.ENV_IDS)
    cli = _run([venv / "bin" / "cost-envs", "train", "--env", "cost_envs/ToolBench-v0",
                "--method", "ppo", "--out", tmp_path / "model"], tmp_path, timeout=60)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.count("\n") == 1, cli.stderr
    assert cli.stderr.strip().endswith(install_hint("agents"))


def _version() -> str:
    import cost_envs

    return cost_envs.__version__


def _extras() -> dict[str, set[str]]:
    """setup.cfg's extras: each one's requirement names, lower case."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {extra: {_normalise(re.match(r"[A-Za-z0-9_.-]+", line).group(0))
                    for line in value.splitlines() if line.strip()}
            for extra, value in cfg["options.extras_require"].items()}


def test_each_extra_module_belongs_to_a_requirement_of_its_extra() -> None:
    extras = _extras()
    installed = packages_distributions()
    assert set(EXTRA_MODULES) <= set(extras)
    agents = extras["agents"]
    provided = {_normalise(dist) for module in EXTRA_MODULES["agents"]
                for dist in installed.get(module, ())}
    assert provided == agents  # every module has its requirement, every requirement a module


def test_require_extra_names_the_missing_modules_and_the_install_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    require_extra("agents", "the agents package")  # all there in the dev venv
    monkeypatch.setitem(sys.modules, "sb3_contrib", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(ImportError, match=r"^the agents package needs the 'agents' extra "
                       r"\(missing: sb3_contrib, peft\): pip install 'cost-envs\[agents\]'$"):
        require_extra("agents", "the agents package")
    with pytest.raises(ImportError, match=r"\(missing: peft\): pip install 'cost-envs\[agents\]'"):
        import_extra("peft", "agents", "LoRA")
    with pytest.raises(ValueError, match=r"extra: expected one of .*, got 'agent'"):
        require_extra("agent", "x")


def _third_party_imports(path: Path) -> tuple[set[str], set[str]]:
    """Top-level names of the non-stdlib modules ``path`` imports: (at import time, anywhere)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    deferred = {id(node) for func in ast.walk(tree) if isinstance(func, functions)
                for node in ast.walk(func)}
    at_import, anywhere = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {node.module.split(".")[0]}
        else:
            continue
        names -= set(sys.stdlib_module_names) | {"__future__"}
        anywhere |= names
        if id(node) not in deferred:
            at_import |= names
    return at_import, anywhere


@pytest.mark.parametrize("path", sorted((ROOT / "cost_envs").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_cost_envs_imports_only_the_env_dependencies(path: Path) -> None:
    at_import, anywhere = _third_party_imports(path)
    assert at_import <= ENV_IMPORTS, f"imports {sorted(at_import - ENV_IMPORTS)} at import time"
    assert anywhere <= ENV_IMPORTS | ENV_OPTIONAL_IMPORTS, (
        f"imports {sorted(anywhere - ENV_IMPORTS - ENV_OPTIONAL_IMPORTS)}")
    assert not anywhere & set(EXTRA_MODULES["agents"])
