"""The command line's start-up (issue #26, items 16, 17 and 20).

* An argument or file error is answered before torch, SB3 or peft is imported (seconds
  of importing): asserted on the modules a fresh process has imported when the error is
  printed, not on wall time (``benchmarks/cli_startup.py`` times it).
* Without the ``agents`` extra (torch, SB3, ... blocked in a fresh process, as in an
  env-only ``pip install cost-envs``) the commands that need no torch work and the others
  say in one line which extra to install.
* A mistyped subcommand, option, env id or method gets the usage of the (sub)command it
  was given to and the closest valid one.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import agents
import cost_envs
from agents import cli
from cost_envs.extras import EXTRA_MODULES, install_hint

ROOT = Path(agents.__file__).resolve().parents[1]
TOOL = "cost_envs/ToolBench-v0"
HEAVY = ("torch", "stable_baselines3", "peft", "transformers")

#: Run in a fresh process: main(argv) from sys.argv, then what was imported, as JSON.
PROBE = """
import json, sys
{block}
from agents.cli.main import main
try:
    status = main(sys.argv[1:])
except SystemExit as end:
    status = end.code if isinstance(end.code, int) else 1
    if not isinstance(end.code, int) and end.code is not None:
        print(end.code, file=sys.stderr)
sys.stdout.flush()
heavy = sorted(m for m in {heavy!r} if sys.modules.get(m) is not None)  # None: blocked
print(json.dumps({{"status": status, "heavy": heavy}}), file=sys.__stdout__)
"""
#: Makes the agents extra's modules (and transformers, which peft brings) unimportable,
#: as in an install without the extra: ``import torch`` raises ``ModuleNotFoundError`` and
#: ``importlib.util.find_spec("torch")`` returns ``None``.
BLOCK = ("for _name in {modules!r}:\n    sys.modules[_name] = None"
         .format(modules=(*EXTRA_MODULES["agents"], "transformers")))


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def probe(*argv: str, block: bool = False, cwd: Path | None = None
          ) -> tuple[int, list[str], str, str]:
    """``main(argv)`` in a fresh process: (status, heavy modules imported, stdout, stderr)."""
    code = PROBE.format(block=BLOCK if block else "", heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=_env(), cwd=cwd or ROOT, timeout=300, check=False)
    *out, last = done.stdout.splitlines() or [""]
    assert last.startswith("{"), done.stdout + done.stderr
    seen = json.loads(last)
    return seen["status"], seen["heavy"], "\n".join(out), done.stderr


def run_module(*argv: str, block: bool = False) -> subprocess.CompletedProcess:
    """``python -m agents.cli ARGV`` in a fresh process (optionally without the extra)."""
    code = ("import runpy, sys\n" + (BLOCK + "\n" if block else "")
            + "sys.argv = ['cost-envs', *sys.argv[1:]]\n"
            + "runpy.run_module('agents.cli', run_name='__main__', alter_sys=True)\n")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=300, check=False)


#: Runs ``python -m agents.cli`` once per argv (the JSON list in argv[1]) in one process,
#: as the interpreter would have ended each: an exit message to stderr and status 1, an
#: uncaught error as a traceback; prints each run's status, stdout and stderr as JSON.
EACH = """
import contextlib, io, json, runpy, sys, traceback
{block}
runs = []
for argv in json.loads(sys.argv[1]):
    out, err, status = io.StringIO(), io.StringIO(), 0
    sys.argv = ['cost-envs', *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module('agents.cli', run_name='__main__', alter_sys=True)
        except SystemExit as end:
            if isinstance(end.code, int) or end.code is None:
                status = end.code or 0
            else:
                print(end.code, file=sys.stderr)
                status = 1
        except BaseException:
            traceback.print_exc()
            status = 1
    runs.append([status, out.getvalue(), err.getvalue()])
print(json.dumps(runs))
"""


def run_module_each(*argvs: list[str], block: bool = False
                    ) -> list[subprocess.CompletedProcess]:
    """:func:`run_module` of each argv, in one fresh process (one interpreter's start-up).

    Modules only accumulate from one run to the next, so a run that imports torch is not
    hidden: with the extra blocked, each run meets the blocked modules as the first did.
    """
    code = EACH.format(block=BLOCK if block else "")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True,
                          text=True, env=_env(), cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return [subprocess.CompletedProcess(argv, status, out, err)
            for argv, (status, out, err) in zip(argvs, json.loads(done.stdout), strict=True)]


def last_line_only(stderr: str, start: str) -> str:
    """The one error line (after argparse's usage, if any); no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith(start), stderr
    assert not any(line.startswith("cost-envs") for line in lines[:-1]), stderr
    return lines[-1]


# ----------------------------------------------------------- item 16: errors before torch
#: Runs ``main(argv)`` for each case (JSON list in argv[1]: name, argv, working directory)
#: in one fresh process, each as :data:`PROBE` runs it; prints name -> (status, heavy
#: modules imported, stdout, stderr) as JSON. Modules only accumulate from one case to the
#: next, so a case that imports torch is not hidden (it and the cases after it fail).
PROBE_EACH = """
import contextlib, io, json, os, sys, traceback
from agents.cli.main import main
seen = {{}}
for name, argv, cwd in json.loads(sys.argv[1]):
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as end:
            status = end.code if isinstance(end.code, int) else 1
            if not isinstance(end.code, int) and end.code is not None:
                print(end.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            status = 1
    heavy = sorted(m for m in {heavy!r} if sys.modules.get(m) is not None)
    seen[name] = [status, heavy, out.getvalue(), err.getvalue()]
print(json.dumps(seen))
"""
TRAIN_CONFIG = ["train", "--env", TOOL, "--method", "ppo", "--config", "{dir}/ppo.yaml",
                "--out", "{dir}/out"]
#: The errors answered before torch, by case: the argv (``{dir}``: the case's directory,
#: its working directory too) and the files made there first (a name ending in ``/``: a
#: directory).
CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "missing-model": (["evaluate", "--env", TOOL, "--model", "{dir}/nope"], {}),
    "model-without-files": (["evaluate", "--env", TOOL, "--model", "{dir}"], {}),
    "config-not-yaml": (TRAIN_CONFIG, {"ppo.yaml": "learning_rate: [\n"}),
    "config-missing": (TRAIN_CONFIG, {}),
    "config-unknown-key": (TRAIN_CONFIG, {"ppo.yaml": "n_step: 64\n"}),
    "out-a-file": (["train", "--env", TOOL, "--method", "ppo", "--out", "{dir}/file"],
                   {"file": "x"}),
    # pretrain writes <out>.safetensors, a file
    "out-file-a-directory": (["pretrain", "--env", TOOL, "--out", "{dir}/base"],
                             {"base.safetensors/": ""}),
    "env-id-evaluate": (["evaluate", "--env", "cost_envs/ToolBnch-v0"], {}),
    "env-id-train": (["train", "--env", "cost_envs/ToolBnch-v0", "--method", "ppo", "--out",
                      "o"], {}),
}


@dataclass
class Probed:
    """What each of :data:`CASES` did, in one fresh process, and the cases' directories."""

    root: Path
    seen: dict[str, tuple[int, list[str], str, str]]

    def __getitem__(self, case: str) -> tuple[int, list[str], str, str]:
        status, heavy, out, err = self.seen[case]
        return status, heavy, out, err


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Probed:
    """Every case of :data:`CASES` probed in one fresh process (one interpreter's start-up
    instead of one per case)."""
    root = tmp_path_factory.mktemp("probes")
    runs = []
    for name, (argv, files) in CASES.items():
        where = root / name
        where.mkdir()
        for file, text in files.items():
            if file.endswith("/"):
                (where / file).mkdir()
            else:
                (where / file).write_text(text)
        runs.append([name, [a.replace("{dir}", str(where)) for a in argv], str(where)])
    done = subprocess.run([sys.executable, "-c", PROBE_EACH.format(heavy=HEAVY),
                           json.dumps(runs)], capture_output=True, text=True, env=_env(),
                          cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return Probed(root, json.loads(done.stdout))


def test_a_missing_model_is_answered_before_torch_is_imported(probed):
    status, heavy, _, err = probed["missing-model"]
    line = last_line_only(err, "cost-envs evaluate: cannot load")
    assert "no such model directory or file" in line
    assert status == 1 and heavy == []


def test_a_model_directory_without_its_files_is_answered_before_torch(probed):
    status, heavy, _, err = probed["model-without-files"]
    assert "missing model.safetensors" in last_line_only(err, "cost-envs evaluate: cannot load")
    assert status == 1 and heavy == []


@pytest.mark.parametrize(("case", "expected"), [
    ("config-not-yaml", "not valid YAML"),
    ("config-missing", "No such file"),
    ("config-unknown-key", "unknown key(s) ['n_step'] for ppo"),
])
def test_a_bad_config_file_is_answered_before_torch_is_imported(probed, case, expected):
    status, heavy, _, err = probed[case]
    assert expected in last_line_only(err, "cost-envs train:")
    assert status == 1 and heavy == []
    assert not (probed.root / case / "out").exists()


def test_an_unwritable_out_is_answered_before_torch_is_imported(probed):
    status, heavy, _, err = probed["out-a-file"]
    assert "exists and is not a directory" in last_line_only(err, "cost-envs train: --out:")
    assert status == 1 and heavy == []
    status, heavy, _, err = probed["out-file-a-directory"]
    assert "exists and is not a file" in last_line_only(err, "cost-envs pretrain: --out:")
    assert status == 1 and heavy == []


@pytest.mark.parametrize(("case", "command"), [("env-id-evaluate", "evaluate"),
                                               ("env-id-train", "train")])
def test_a_bad_env_id_is_a_usage_error_before_torch_is_imported(probed, case, command):
    status, heavy, _, err = probed[case]
    assert "unknown environment 'cost_envs/ToolBnch-v0'" in last_line_only(
        err, f"cost-envs {command}: error: argument --env")
    assert status == 2 and heavy == []


# --------------------------------------------------------- item 17: without the agents extra
def test_list_and_help_work_without_the_agents_extra():
    done = run_module("list", block=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list(cost_envs.ENV_IDS)
    for done in run_module_each(["--help"], ["train", "--help"], ["evaluate", "--help"],
                                block=True):
        assert done.returncode == 0 and done.stdout.startswith("usage: cost-envs"), done.stderr


def test_baselines_evaluate_without_the_agents_extra():
    status, heavy, out, err = probe("evaluate", "--env", TOOL, "--methods", "random,rule",
                                    "--episodes", "3", "--resamples", "10", "--json",
                                    block=True)
    assert status == 0, err
    assert set(json.loads(out)) == {"random", "rule"}
    assert heavy == []


def test_a_command_needing_torch_names_the_extra_in_one_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # passes the on-disk check, which reads
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")  # a header
    argvs = [["train", "--env", TOOL, "--method", "ppo", "--out", str(tmp_path / "out")],
             ["pretrain", "--env", TOOL, "--out", str(tmp_path / "out")],
             ["evaluate", "--env", TOOL, "--model", str(model)]]
    for argv, done in zip(argvs, run_module_each(*argvs, block=True), strict=True):
        assert "Traceback" not in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"cost-envs {argv[0]}")
        assert "needs the 'agents' extra" in done.stderr and "torch" in done.stderr
        assert done.stderr.strip().endswith(install_hint("agents"))
        assert done.returncode == cli.main.__globals__["EXIT_INPUT"] == 1
        assert not (tmp_path / "out").exists()


def test_an_extra_module_a_command_imports_unannounced_is_named_in_one_line():
    # a command that imports an extra's module it did not declare: caught by main itself
    code = ("import sys\n" + BLOCK + "\n"
            "import agents.cli.main\n"
            "m = sys.modules['agents.cli.main']\n"
            "def run(args):\n    import tqdm\n"
            "listing = next(c for c in m.COMMANDS if c.name == 'list')\n"
            "object.__setattr__(listing, 'run', run)\n"
            "sys.exit(m.main(['list']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=300, check=False)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    assert done.stderr.strip() == (f"cost-envs list: needs the 'agents' extra, which "
                                   f"is not installed (missing: tqdm): {install_hint('agents')}")


def test_import_agents_works_without_the_extra_and_a_torch_name_says_which_to_install():
    code = ("import sys\n" + BLOCK + "\nimport agents\nfrom agents import evaluate\n"
            "try:\n    agents.train\nexcept ImportError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("agents.train needs the 'agents' extra (missing: torch")
    assert done.stdout.strip().endswith(install_hint("agents"))


# ---------------------------------------------------------------- item 20: did you mean
@pytest.mark.parametrize(("argv", "usage", "hint"), [
    (["evalute"], "usage: cost-envs [-h]", "did you mean 'evaluate'?"),
    (["evaluate", "--env", TOOL, "--n-env", "2"], "usage: cost-envs evaluate",
     "unrecognized arguments: --n-env 2; did you mean '--env'?"),
    (["evaluate", "--env", TOOL, "--episods=3"], "usage: cost-envs evaluate",
     "did you mean '--episodes'?"),
    (["train", "--env", "cost_envs/ToolBnch-v0", "--method", "ppo", "--out", "o"],
     "usage: cost-envs train", "did you mean 'cost_envs/ToolBench-v0'?"),
    (["evaluate", "--env", "ToolBnch-v0"], "usage: cost-envs evaluate",
     "did you mean 'ToolBench-v0'?"),
    (["evaluate", "--env", TOOL, "--methods", "rule,randm"], "usage: cost-envs evaluate",
     "unknown method(s) 'randm'; valid methods: random,"),
    (["evaluate", "--env", TOOL, "--methods", "rule,randm"], "usage: cost-envs evaluate",
     "did you mean 'random'?"),
    (["train", "--env", TOOL, "--method", "ppp", "--out", "o"], "usage: cost-envs train",
     "did you mean 'ppo'?"),
    (["export-minari", "--env", TOOL, "--policy", "gredy"], "usage: cost-envs export-minari",
     "did you mean 'greedy'?"),
    (["route", "trian"], "usage: cost-envs route", "did you mean 'train'?"),
    (["route", "train", "--data", "x", "--save", "y", "--wek", "a"],
     "usage: cost-envs route train", "did you mean '--weak'?"),
], ids=["subcommand", "option", "option=value", "env-id", "short-env-id", "method-list",
        "method", "train-method", "policy", "route-action", "route-option"])
def test_a_mistyped_name_gets_the_usage_and_the_closest_valid_one(capsys, argv, usage, hint):
    with pytest.raises(SystemExit) as end:
        cli.main(argv)
    assert end.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert hint in err.strip().splitlines()[-1], err


def test_nothing_close_gets_no_suggestion(capsys):
    with pytest.raises(SystemExit):
        cli.main(["evaluate", "--env", TOOL, "--zzzzzzzz"])
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith("unrecognized arguments: --zzzzzzzz")


@pytest.mark.parametrize("method", ["ppo", "lora-ppo", "lora"])
def test_the_hyperparameter_names_known_without_sb3_are_its_signatures(method: str) -> None:
    from agents.learners.common.ppo_args import accepted
    from agents.learners.hyperparameter_names import accepted_names

    assert accepted_names(method) == frozenset(accepted(method))
