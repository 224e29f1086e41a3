"""``python -m experiments``: the whole smoke run, the --out check, all-or-nothing reports."""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import code_lines

from agents import files
from experiments import __main__ as command
from experiments.shared import common

REPO = Path(__file__).resolve().parents[1]
ROUTELLM = REPO.parent / "shared" / "data" / "routellm"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ENV_NAMES = ("FlightPlanner-v0", "ToolBench-v0", "FlightPlanner-v1")
PROFILES = ("alfworld", "sciworld", "appworld")


def run_command(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m experiments ARGS`` from the repository root, one BLAS thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "experiments", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


# smoke_all (tests/conftest.py): one ``python -m experiments all --scale smoke`` per session,
# shared with the corl, bopo, traces and rules tests, which read the reports it wrote.


def test_all_runs_the_five_experiments_in_order_with_progress(smoke_all) -> None:
    assert smoke_all.status == 0
    progress = smoke_all.progress
    lines = progress.splitlines()
    assert all(re.match(r"\[ *\d+ s\] ", line) for line in lines), lines  # timestamped
    starts = [line.split("] ")[1].split(":")[0] for line in lines if ": started at" in line]
    if ROUTELLM.is_dir():
        assert starts == ["lora_ppo", "corl", "bopo", "traces", "rules"]
    else:
        assert starts == ["lora_ppo", "corl", "bopo", "rules"]
        assert f"traces: skipped: RouteLLM data not found at {ROUTELLM}" in progress
    for name in starts:
        assert re.search(rf"\] {name}: done in \d+ s$", progress, re.MULTILINE), name
    assert progress.rstrip().endswith("all: finished")


def test_all_ends_with_the_aggregates_of_its_tables_or_says_why_not(smoke_all) -> None:
    out, progress = smoke_all.out, smoke_all.progress
    after_tables = progress.split("wrote " + str(out / "routing.md"), 1)[1]
    written = "aggregates: wrote" in after_tables
    assert written or "aggregates: skipped: " in after_tables
    assert written == (out / "aggregates.md").exists() == (out / "aggregates.json").exists()


def test_all_writes_every_table_and_figure(smoke_all) -> None:
    out = smoke_all.out
    names = {p.name for p in out.iterdir()}
    assert not [n for n in names if n.startswith(".")]  # no temporaries or backups left
    for env_name in ENV_NAMES:
        text = (out / f"table_{env_name}.md").read_text(encoding="utf-8")
        assert "| Method | Success | CPS |" in text
        assert "| Best fixed rule (searched on training tasks) |" in text
        assert ("| One-turn plan+search rule |" in text) == env_name.startswith("FlightPlanner")
        assert "Reproduce with `python -m experiments lora_ppo --scale smoke`." in text
        assert (out / f"table_{env_name}.json").read_text(encoding="utf-8").startswith("{")
        for kind in ("pareto", "learning_curves"):
            assert (out / f"{kind}_{env_name}.png").read_bytes()[:8] == PNG_MAGIC
            assert (out / f"{kind}_{env_name}.svg").read_bytes().startswith(b"<?xml")
    for version, suffix in (("v0", ""), ("v1", "_ExpertRouting-v1")):
        corl = (out / f"corl_tiers{suffix}.md").read_text(encoding="utf-8")
        assert corl.startswith(f"# CORL on cost_envs/ExpertRouting-{version}: ")
        assert "| Tier | Method | Accuracy | Accuracy within budget |" in corl
        assert "| low | LoRA-PPO, one adapter per tier |" in corl
        assert "| high | Consult all experts |" in corl
        assert "| medium | Best fixed rule (searched on training tasks): " in corl
        assert (out / f"corl_tiers{suffix}.json").read_text(encoding="utf-8").startswith("{")
        assert (out / f"pareto_corl{suffix}.png").read_bytes()[:8] == PNG_MAGIC
        assert (out / f"pareto_corl{suffix}.svg").read_bytes().startswith(b"<?xml")
    bopo = (out / "bopo.md").read_text(encoding="utf-8")
    assert "| Method | Success | Avg cost ($) | CPS ($) |" in bopo
    profiles, scan = bopo.split("\n## λ scan", 1)  # the scan names the rule once more
    assert profiles.count("| Difficulty threshold (fitted, t=") == len(PROFILES)
    assert profiles.count("| Best fixed rule (searched on training tasks): ") == len(PROFILES)
    assert scan.count("| Difficulty threshold (fitted, t=") == 1
    for profile in PROFILES:
        assert f"## {profile}" in bopo
        assert (out / f"pareto_bopo_{profile}.png").read_bytes()[:8] == PNG_MAGIC
        assert (out / f"pareto_bopo_{profile}.svg").read_bytes().startswith(b"<?xml")
    if ROUTELLM.is_dir():
        traces = (out / "trace_routing.md").read_text(encoding="utf-8")
        assert "| Router | APGR | CPT(50%) | CPT(80%) |" in traces
        assert (out / "trace_routing.png").read_bytes()[:8] == PNG_MAGIC
        assert (out / "trace_routing.svg").read_bytes().startswith(b"<?xml")
        # the data's place differs per machine, so the JSON names it from the data root
        payload = json.loads((out / "trace_routing.json").read_text(encoding="utf-8"))
        assert payload["gsm8k"]["source"] == "routellm/gsm8k_responses.csv"
        assert str(ROUTELLM.parent) not in json.dumps(payload)
    assert "## cost_envs/FlightPlanner-v1" in (out / "rule_search.md").read_text(encoding="utf-8")
    for path in out.iterdir():  # shareable like any result file
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_all_records_the_routing_wall_times_in_the_old_format(smoke_all) -> None:
    out = smoke_all.out
    lines = (out / "routing.md").read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["# Budget-aware routing benchmarks (issue #4)", ""]
    assert re.fullmatch(r"`python -m experiments all --scale smoke` on \S+ \S+, [^,]+(, AVX2|"
                        r", AVX-512)?, \d+ logical CPUs, Python [\d.]+, torch kernels \S+, "
                        r"MKL_CBWR \S+, one torch thread\.",
                        lines[2]), lines[2]
    assert lines[3:6] == ["", "| Part | Wall time |", "|---|---|"]
    assert re.fullmatch(r"\| corl \| \d+ s \|", lines[6])
    assert re.fullmatch(r"\| bopo \| \d+ s \|", lines[7])
    skipped = f"skipped: RouteLLM data not found at {re.escape(str(ROUTELLM))}"
    expected = r"\| traces \| \d+ s \|" if ROUTELLM.is_dir() else rf"\| traces \| {skipped} \|"
    assert re.fullmatch(expected, lines[8])
    assert len(lines) == 9


def test_traces_without_data_fails_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    # Issue #26: a missing --data exited 0 and left an empty --out behind.
    out = tmp_path / "out"
    done = run_command("traces", "--scale", "smoke", "--out", str(out),
                       "--data", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"python -m experiments: error: --data {tmp_path / 'nowhere'}: expected the RouteLLM "
        "folder holding gsm8k_responses.csv (and mmlu/), but it does not exist"]
    assert not out.exists()


@pytest.mark.parametrize(("kind", "reason"), [
    ("missing", "it does not exist"), ("empty", "it is empty"),
    ("file", "it is not a directory"), ("other", "it has no gsm8k_responses.csv")])
def test_traces_with_unreadable_data_is_one_line_before_out_is_made(tmp_path: Path, capsys,
                                                                     kind, reason) -> None:
    # Issue #26: an empty --data was a FileNotFoundError traceback.
    data = tmp_path / "data"
    if kind in ("empty", "other"):
        data.mkdir()
    if kind == "other":
        (data / "notes.txt").write_text("not the traces")
    if kind == "file":
        data.write_text("not a folder")
    out = tmp_path / "new" / "out"
    assert command.main(["traces", "--scale", "smoke", "--out", str(out),
                         "--data", str(data)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"python -m experiments: error: --data {data}: expected the RouteLLM folder holding "
        f"gsm8k_responses.csv (and mmlu/), but {reason}"]
    assert not (tmp_path / "new").exists()


def test_the_data_check_names_the_file_traces_reads() -> None:
    from experiments.traces import runner as traces

    assert command.TRACES_FILE == traces.GSM8K


def test_all_refuses_an_explicit_data_it_cannot_read_but_skips_a_missing_default(
        tmp_path: Path, monkeypatch, capsys) -> None:
    ran: list[object] = []
    monkeypatch.setattr(command, "run", lambda args, log: ran.append(args))
    out = tmp_path / "out"
    assert command.main(["all", "--out", str(out), "--data", str(tmp_path / "nowhere")]) == 2
    assert ran == [] and not out.exists()
    assert "--data " in capsys.readouterr().err
    # the default folder absent: all runs, and skips traces (a checkout without the data)
    monkeypatch.setattr(command, "DEFAULT_DATA", tmp_path / "nowhere")
    assert command.main(["all", "--out", str(out)]) == 0
    assert [args.data for args in ran] == [tmp_path / "nowhere"]


@pytest.mark.parametrize("raised", [ValueError("nothing to aggregate"), KeyboardInterrupt()])
def test_a_failed_run_removes_the_out_it_created_if_empty(tmp_path: Path, monkeypatch,
                                                          raised: BaseException) -> None:
    def run(args, log) -> None:
        raise raised

    monkeypatch.setattr(command, "run", run)
    out = tmp_path / "new" / "out"
    assert command.main(["rules", "--out", str(out)]) in (2, 130)
    assert not (tmp_path / "new").exists()  # the parents it created too
    out.mkdir(parents=True)  # a directory that was there before stays
    assert command.main(["rules", "--out", str(out)]) in (2, 130)
    assert out.is_dir()


def test_an_unwritable_out_fails_at_once_with_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "results"
    done = run_command("all", "--out", str(out))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"python -m experiments: error: output directory {out} is not "
                               "writable: ")
    assert f"{blocker} is a file, not a directory" in lines[0]
    assert done.stdout == ""  # and nothing ran: test_the_out_check_comes_before_any_experiment


def test_the_out_check_comes_before_any_experiment(tmp_path: Path, monkeypatch, capsys
                                                   ) -> None:
    ran = []
    monkeypatch.setattr(command, "run", lambda args, log: ran.append(args))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert command.main(["all", "--out", str(blocker)]) == 2
    assert ran == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(blocker) in err
    assert command.main(["corl", "--out", str(tmp_path / "new" / "dir")]) == 0
    assert len(ran) == 1 and (tmp_path / "new" / "dir").is_dir()  # created, then run


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only directories")
def test_a_read_only_out_is_not_writable(tmp_path: Path) -> None:
    out = tmp_path / "read-only"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(ValueError, match=f"output directory {out} is not writable"):
            common.check_writable(out)
    finally:
        out.chmod(0o755)


@pytest.mark.parametrize("argv, message", [
    (["everything"], "invalid choice: 'everything'"),
    (["corl", "--scale", "huge"], "invalid choice: 'huge'"),
    (["bopo", "--jobs", "0"], "expected an integer >= 1, got '0'"),
    ([], "the following arguments are required: experiment"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        command.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("python -m experiments")


def test_help_says_what_full_means(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        command.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "full the converged budgets" in text
    assert "traces and rules have no larger scale and run `default`" in text
    assert ("{lora_ppo,corl,bopo,traces,rules,all,tune,aggregates,multitenant,budgets,memory,"
            "converged}"
            in text)
    assert "multitenant (not part of all): tenants x capacity on one pool" in text
    assert "tune (not part of all): equal-budget sweeps on Ray Tune + Optuna" in text
    assert "budgets (not part of all): learning curves of the learned rows" in text
    assert "memory (not part of all): RecurrentPPO against PPO" in text


# ------------------------------------------------------------------ the report writer
def old_report(directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"a.md": "old a\n", "b.json": "old b\n"}
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return files


def contents(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in directory.iterdir()}


NEW = {"a.md": "new a\n", "b.json": "new b\n", "c.png": b"\x89PNG new c"}


def test_write_files_atomic_replaces_every_file(tmp_path: Path) -> None:
    old_report(tmp_path)
    paths = files.write_files_atomic(tmp_path, NEW)
    assert paths == [tmp_path / name for name in NEW]
    assert (tmp_path / "a.md").read_text(encoding="utf-8") == "new a\n"
    assert (tmp_path / "c.png").read_bytes() == b"\x89PNG new c"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NEW)  # nothing hidden left
    for path in paths:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"),
                                     KeyboardInterrupt()])
def test_a_rename_failing_midway_leaves_every_old_file(tmp_path: Path, monkeypatch,
                                                       failure: BaseException) -> None:
    before = old_report(tmp_path)
    real = os.replace
    renamed = []

    def flaky(src, dst):
        # the first report file goes in, then the second rename fails
        if Path(dst).name == "b.json" and not Path(src).name.startswith(".b.json.old-"):
            raise failure
        renamed.append(Path(dst).name)
        return real(src, dst)

    monkeypatch.setattr(files.os, "replace", flaky)
    with pytest.raises(type(failure)):
        files.write_files_atomic(tmp_path, NEW)
    assert renamed[0] == "a.md"  # a new file really was in place before the failure ...
    assert contents(tmp_path) == before  # ... and the old one is back, c.png never appears


def test_a_file_failing_to_write_leaves_every_old_file(tmp_path: Path, monkeypatch) -> None:
    before = old_report(tmp_path)
    real = files._stage

    def full_disk(directory, name, content):
        if name == "c.png":
            raise OSError(28, "No space left on device")
        return real(directory, name, content)

    monkeypatch.setattr(files, "_stage", full_disk)
    with pytest.raises(OSError, match="No space left"):
        files.write_files_atomic(tmp_path, NEW)
    assert contents(tmp_path) == before  # no new file, no temporary


def test_write_files_atomic_rejects_paths_as_names(tmp_path: Path) -> None:
    for bad in ("../escape.md", "sub/file.md", "", ".."):
        with pytest.raises(ValueError, match="plain file names"):
            files.write_files_atomic(tmp_path, {bad: "x"})
    assert list(tmp_path.iterdir()) == []


def test_check_writable_creates_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    assert common.check_writable(out) == out
    assert out.is_dir() and list(out.iterdir()) == []  # the probe is gone


# ------------------------------------------------------------------ the layout
def test_experiment_modules_are_small_and_documented() -> None:
    paths = sorted((REPO / "experiments").rglob("*.py"))
    assert len(paths) > 40  # every package's modules, not only the top level's
    for path in paths:
        source = path.read_text(encoding="utf-8")
        name = str(path.relative_to(REPO))
        assert code_lines(source) <= 500, name  # documentation does not count
        assert ast.get_docstring(ast.parse(source)), name


def _packages() -> list[Path]:
    return sorted(path.parent for path in (REPO / "experiments").glob("*/__init__.py"))


def test_each_experiment_package_has_a_runner_a_report_and_says_its_command() -> None:
    # issue #36: one package per paper or study, its runner (whose ``report`` the command
    # calls) apart from its rendering, and its __init__ naming what it writes and how
    packages = [path for path in _packages() if path.name != "shared"]
    assert {path.name for path in packages} >= {*command.EXPERIMENTS, *command.ON_REQUEST}
    for package in packages:
        runner = ast.parse((package / "runner.py").read_text(encoding="utf-8"))
        assert "report" in {node.name for node in runner.body
                            if isinstance(node, ast.FunctionDef)}, package.name
        assert (package / "report.py").is_file(), package.name
        docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert docstring and "python -m experiments" in docstring, package.name
        assert "Writes" in docstring or "writes" in docstring, package.name


def test_the_experiments_readme_has_one_line_per_package() -> None:
    lines = [line for line in (REPO / "experiments" / "README.md").read_text().splitlines()
             if line.startswith("- `")]
    named = sorted(line[3:].split("/", 1)[0] for line in lines)
    assert named == sorted(path.name for path in _packages())  # each once, none missing
    for line in lines:
        if not line.startswith("- `shared/`"):
            assert "`python -m experiments" in line, line


def test_the_installed_packages_never_import_the_experiments() -> None:
    code = ("import sys, agents.learners.corl, agents.learners.bopo, agents.learners.bopo_sft, "
            "agents.routers, agents.learners.training, agents.files; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'experiments'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_full_scale_results_go_apart_from_the_default_ones() -> None:
    assert command.default_out("lora_ppo", "default") == command.DEFAULT_OUT
    assert command.default_out("lora_ppo", "full") == command.DEFAULT_OUT / "full"
    assert command.default_out("all", "full") == command.DEFAULT_OUT / "full"
    assert command.default_out("tune", "full") == command.TUNED_DIR


def test_traces_json_names_its_data_from_the_data_root(tmp_path: Path) -> None:
    # a committed JSON must not hold this machine's absolute path (CI clones elsewhere)
    from experiments.traces.report import portable_sources

    root = tmp_path / "data"
    payload = {"source": f"{root}/routellm/a.csv + {root}/routellm/b.csv + 1 more file",
               "mmlu": [{"source": f"{root}/routellm/mmlu/x.csv", "note": f"{root}/kept"}],
               "heldout": {"arena": {"source": f"{root}/routerarena"}}}
    assert portable_sources(payload, root) == {
        "source": "routellm/a.csv + routellm/b.csv + 1 more file",
        "mmlu": [{"source": "routellm/mmlu/x.csv", "note": f"{root}/kept"}],
        "heldout": {"arena": {"source": "routerarena"}}}
