"""Sets of files (a router's pair, a report's files) after ``kill -9``: one whole version.

Issue #36: a saver killed between the renames of a set left, rarely, a mix (1 router pair
of 100 unloadable, 1 report set of 100 mixed). A set is now committed by one rename of a
record (:mod:`agents.files`), and its readers finish a killed save first.

The fuzz loops start one helper process that imports what saving needs once, then forks a
saver per kill: the saver writes two distinct versions in turn until it is SIGKILLed at
a random moment, and the test checks that the set on disk is loadable and entirely one of
the two versions, byte for byte, through the reader and then at the plain names. The
code before the record failed it: a mixed report set at kill 137 of 300 (and at 392 of
1,000 with another seed), an unloadable router pair at kill 405 of 1,000.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from agents import files

REPORT = ("r.md", "r.json", "r.csv", "r.png")
ROUTER = ("r.json", "r.safetensors")

#: Two routers' training data, for the helper and the tests (kNN: fitted in milliseconds,
#: with no scipy to import).
DATA = textwrap.dedent('''
    import numpy as np
    from cost_envs.traces import TraceDataset

    def data(seed, n=60):
        rng = np.random.default_rng(seed)
        correct = rng.random((n, 2)) < np.array([0.5, 0.9])
        return TraceDataset(("weak", "strong"), tuple(f"q{i}" for i in range(n)),
                            tuple(f"question {i} about {rng.integers(9)}" for i in range(n)),
                            correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                            cost=np.column_stack([np.ones(n), np.full(n, 10.0)]))
''')

#: The helper: saves a reference copy of both versions and version 0, times a save,
#: prints ``ready <seconds per save>``, then per ``fork`` line forks a saver (printing
#: its pid) and prints ``dead`` once it is reaped. Imports are paid once, not per kill.
HELPER = DATA + textwrap.dedent('''
    import os, sys, time
    from pathlib import Path

    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "report":
        from agents.files import write_files_atomic

        def version(v):
            rows = "".join(f"{v},{i},{v * 1000 + i}\\n" for i in range(200))
            return {"r.md": f"# version {v}\\n" + "| a | b |\\n" * (50 + v),
                    "r.json": '{"version": %d}\\n' % v, "r.csv": rows,
                    "r.png": bytes([137, 80, 78, 71, v]) * (3000 + 7 * v)}

        versions = [version(0), version(1)]

        def save(v, where):
            write_files_atomic(where, versions[v])
    else:
        from agents.routers import make_router, save_router

        routers = [make_router("knn", "weak", "strong").fit(data(seed)) for seed in (0, 1)]

        def save(v, where):
            save_router(where / "r", routers[v], (0.3, 0.7)[v], {"fuzz": v})

    for v in (0, 1):
        save(v, out / f"ref{v}")
    start = time.perf_counter()
    for v in (0, 1, 0, 1):
        save(v, out / "timing")
    save(0, out / "set")
    print("ready", (time.perf_counter() - start) / 5, flush=True)
    for count, line in enumerate(sys.stdin):
        if line.strip() != "fork":
            break
        pid = os.fork()
        if pid == 0:
            v = count % 2
            try:
                while True:
                    save(v, out / "set")
                    v = 1 - v
            finally:
                os._exit(0)
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("dead", flush=True)
''')


def _plain_files(directory: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in names}


def _version(mode: str, directory: Path, refs: list[dict[str, bytes]]) -> int | None:
    """Read the set as its library reader does: which version it is (``None``: a mix).

    A router is loaded (its loader checks the weights against the JSON's digest) and its
    whole JSON document compared with each version's.
    """
    if mode == "report":
        read = files.read_files(directory, REPORT)
        return refs.index(read) if read in refs else None
    from agents.routers import load_router

    saved = load_router(directory / "r")  # raises on a mix (arrays_sha256 differs)
    docs = [json.loads(ref["r.json"]) for ref in refs]
    return docs.index(saved.meta) if saved.meta in docs else None


class Helper(NamedTuple):
    """A started :data:`HELPER`."""

    fork: Callable[[], int]  # starts a saver, returns its pid
    kill: Callable[[int], None]  # SIGKILLs a saver, returns once it is reaped
    seconds: float  # one save's duration
    refs: list[dict[str, bytes]]  # the two versions' files, bytes by name


@contextlib.contextmanager
def _helper(tmp_path: Path, mode: str) -> Iterator[Helper]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    helper = subprocess.Popen([sys.executable, "-c", HELPER, mode, str(tmp_path)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    stdin, stdout = helper.stdin, helper.stdout
    assert stdin is not None and stdout is not None

    def fork() -> int:
        stdin.write("fork\n")
        stdin.flush()
        return int(stdout.readline())

    def kill(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        assert stdout.readline() == "dead\n"  # reaped: it runs no more instructions

    try:
        ready, seconds = stdout.readline().split()
        assert ready == "ready"
        names = REPORT if mode == "report" else ROUTER
        refs = [_plain_files(tmp_path / f"ref{v}", names) for v in (0, 1)]
        assert refs[0] != refs[1] and all(refs[0][n] != refs[1][n] for n in names)
        yield Helper(fork, kill, float(seconds), refs)
    finally:
        stdin.close()
        helper.wait(timeout=60)


def fuzz(tmp_path: Path, mode: str, kills: int, seed: int = 0) -> dict[str, int]:
    """SIGKILL ``kills`` savers of ``mode`` (``report``, ``router``) at random moments.

    Returns:
        How many kills left version 0, version 1, and a save to finish (killed after its
        commit point: before the record, a mix of the two).

    Raises:
        AssertionError: A set on disk was not loadable, or not one whole version.
    """
    names = REPORT if mode == "report" else ROUTER
    counts = {"version 0": 0, "version 1": 0, "finished by the reader": 0}
    rng = random.Random(seed)
    out = tmp_path / "set"
    with _helper(tmp_path, mode) as helper:
        refs = helper.refs
        for kill in range(kills):
            pid = helper.fork()
            time.sleep(rng.uniform(0.0, 3 * helper.seconds))  # 1.5 saves on average
            helper.kill(pid)
            counts["finished by the reader"] += bool(files._records(out))
            try:
                version = _version(mode, out, refs)
            except (OSError, ValueError) as error:
                raise AssertionError(f"kill {kill}: the set is not loadable: {error}") from None
            assert version is not None, f"kill {kill}: the set read is not one whole version"
            assert _plain_files(out, names) == refs[version], f"kill {kill}: the files differ"
            counts[f"version {version}"] += 1
    return counts


def _clean_after(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One more save removes everything the killed savers left (their grace period 0)."""
    monkeypatch.setattr(files, "STALE_AFTER_SECONDS", 0.0)
    out = tmp_path / "set"
    if mode == "report":
        files.write_files_atomic(out, files.read_files(tmp_path / "ref1", REPORT))
    else:
        from agents.routers import load_router, save_router

        saved = load_router(tmp_path / "ref1" / "r")
        save_router(out / "r", saved.router, saved.point, {"fuzz": 1})
    names = REPORT if mode == "report" else ROUTER
    assert sorted(path.name for path in out.iterdir()) == sorted(names)
    assert _plain_files(out, names) == _plain_files(tmp_path / "ref1", names)


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzz loop forks savers")


@needs_fork
@pytest.mark.parametrize("mode", ["router", "report"])
def test_50_kills_never_leave_a_mixed_set(tmp_path, monkeypatch, mode):
    counts = fuzz(tmp_path, mode, 50, seed=36)
    print(mode, counts)
    assert counts["version 0"] + counts["version 1"] == 50
    _clean_after(tmp_path, mode, monkeypatch)


@pytest.mark.slow
@needs_fork
@pytest.mark.parametrize("mode", ["router", "report"])
def test_1000_kills_never_leave_a_mixed_set(tmp_path, monkeypatch, mode):
    counts = fuzz(tmp_path, mode, 1000, seed=1036)
    print(mode, counts)
    # the kills really hit every phase: both versions, and saves past their commit point
    assert min(counts.values()) > 0, counts
    _clean_after(tmp_path, mode, monkeypatch)


@needs_fork
@pytest.mark.parametrize("mode", ["router", "report"])
def test_a_reader_never_meets_a_live_savers_half(tmp_path, mode):
    # Readers and savers take turns (flock): without the reader's turn, 2 s of reads met
    # a half-renamed set (5 of 4,316 report reads, 13 of 297 router loads).
    with _helper(tmp_path, mode) as helper:
        pid = helper.fork()
        reads, deadline = 0, time.monotonic() + 2.0
        try:
            while time.monotonic() < deadline:
                version = _version(mode, tmp_path / "set", helper.refs)
                assert version is not None, f"read {reads}: a mix"
                reads += 1
        finally:
            helper.kill(pid)
    assert reads > 10


# ------------------------------------------------ a kill after each rename, in process
class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, not even the save's own undo."""


def _killed_after(monkeypatch: pytest.MonkeyPatch, renames: int) -> None:
    """Make the save stop dead after ``renames`` renames over its targets."""
    real = os.replace
    done: list[str] = []

    def replace(source, destination):
        if len(done) == renames:
            raise Killed
        done.append(destination)
        real(source, destination)

    monkeypatch.setattr(files.os, "replace", replace)
    monkeypatch.setattr(files, "_undo", lambda *args: None)


OLD = {"a.md": b"old a\n", "b.json": b"old b\n"}
NEW = {"a.md": b"new a\n", "b.json": b"new b\n", "c.png": b"new c"}


@pytest.mark.parametrize("renames", [0, 1, 2])
def test_a_save_killed_after_its_commit_is_finished_by_the_reader(tmp_path, monkeypatch,
                                                                  renames):
    files.write_files_atomic(tmp_path, OLD)
    with monkeypatch.context() as patch:
        _killed_after(patch, renames)
        with pytest.raises(Killed):
            files.write_files_atomic(tmp_path, NEW)
    assert len(files._records(tmp_path)) == 1  # committed: the new set, half renamed
    assert files.read_files(tmp_path, NEW) == NEW
    assert {name: (tmp_path / name).read_bytes() for name in NEW} == NEW
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(NEW)


def test_a_save_killed_before_its_commit_leaves_the_old_set(tmp_path, monkeypatch):
    files.write_files_atomic(tmp_path, OLD)
    monkeypatch.setattr(files, "_undo", lambda *args: None)
    monkeypatch.setattr(files.os, "rename", lambda *args: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        files.write_files_atomic(tmp_path, NEW)  # killed at the record's rename
    assert files._records(tmp_path) == []
    assert files.read_files(tmp_path, OLD) == OLD
    with pytest.raises(FileNotFoundError):
        files.read_files(tmp_path, ["c.png"])


def test_the_next_save_finishes_a_killed_one_first(tmp_path, monkeypatch):
    files.write_files_atomic(tmp_path, OLD)
    with monkeypatch.context() as patch:
        _killed_after(patch, 1)
        with pytest.raises(Killed):
            files.write_files_atomic(tmp_path, NEW)
    files.write_files_atomic(tmp_path, {"other.txt": "x"})  # any save of the directory
    assert files._records(tmp_path) == []
    assert {name: (tmp_path / name).read_bytes() for name in NEW} == NEW


def test_a_read_only_reader_reads_through_the_record(tmp_path, monkeypatch):
    files.write_files_atomic(tmp_path, OLD)
    with monkeypatch.context() as patch:
        _killed_after(patch, 1)
        with pytest.raises(Killed):
            files.write_files_atomic(tmp_path, NEW)
    before = sorted(path.name for path in tmp_path.iterdir())

    def refused(source, destination):  # chmod does not stop root: refuse the renames
        raise PermissionError(errno.EACCES, "Permission denied", str(source))

    monkeypatch.setattr(files.os, "replace", refused)
    assert files.read_files(tmp_path, NEW) == NEW
    assert sorted(path.name for path in tmp_path.iterdir()) == before  # nothing changed


# ---------------------------------------------------------------- mixed sets refused
def test_a_router_pair_of_two_saves_is_refused_naming_the_weights(tmp_path):
    from agents.routers import load_router, make_router, save_router

    namespace: dict = {}
    exec(DATA, namespace)
    for name, seed in (("a", 0), ("b", 1)):
        router = make_router("knn", "weak", "strong").fit(namespace["data"](seed))
        save_router(tmp_path / name, router, 0.3)
    weights = [(tmp_path / f"{name}.safetensors").read_bytes() for name in "ab"]
    assert weights[0] != weights[1] and len(weights[0]) == len(weights[1])
    (tmp_path / "a.safetensors").write_bytes((tmp_path / "b.safetensors").read_bytes())
    with pytest.raises(ValueError) as error:
        load_router(tmp_path / "a")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'a.safetensors'}: does not match its JSON file "
                              "(arrays_sha256 differs)")


def test_a_target_changed_behind_a_killed_save_is_refused_naming_it(tmp_path, monkeypatch):
    files.write_files_atomic(tmp_path, OLD)
    with monkeypatch.context() as patch:
        _killed_after(patch, 1)
        with pytest.raises(Killed):
            files.write_files_atomic(tmp_path, NEW)
    (tmp_path / "a.md").write_bytes(b"someone else's a\n")  # renamed already, then changed
    with pytest.raises(ValueError) as error:
        files.read_files(tmp_path, NEW)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'a.md'}: neither the new")


def test_a_corrupted_record_is_refused_naming_it(tmp_path, monkeypatch):
    files.write_files_atomic(tmp_path, OLD)
    with monkeypatch.context() as patch:
        _killed_after(patch, 1)
        with pytest.raises(Killed):
            files.write_files_atomic(tmp_path, NEW)
    [record] = files._records(tmp_path)
    doc = json.loads(record.read_text())
    for broken in ("{not json", json.dumps({**doc, "files": [{"name": "../x"}]}),
                   json.dumps({**doc, "files": [{**doc["files"][0], "staged": "/etc/passwd"}]})):
        record.write_text(broken)
        with pytest.raises(ValueError) as error:
            files.read_files(tmp_path, NEW)
        message = str(error.value)
        assert "\n" not in message and message.startswith(
            f"{record}: not a commit record of a cost-envs save"), message
        with pytest.raises(ValueError, match="not a commit record"):
            files.write_files_atomic(tmp_path, NEW)  # a save does not go over it either


def test_an_exception_after_the_commit_puts_the_old_set_back(tmp_path, monkeypatch):
    files.write_files_atomic(tmp_path, OLD)
    real = os.replace
    done: list[str] = []

    def full(source, destination):
        if Path(destination).name == "c.png":  # after b.json and a.md are in
            raise OSError(errno.ENOSPC, "No space left on device")
        done.append(Path(destination).name)
        real(source, destination)

    monkeypatch.setattr(files.os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        files.write_files_atomic(tmp_path, {"b.json": "new b\n", "a.md": "new a\n",
                                            "c.png": b"c"})
    assert done[:2] == ["b.json", "a.md"]  # both were new before the failure
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == OLD


def test_a_base_pair_killed_after_its_commit_loads_as_saved(tmp_path, monkeypatch):
    # load_base reads its weights and config through the reader: never new weights with
    # an old config (the rename of the config had not happened when the save died)
    import torch

    from agents.learners.common.policies import load_base
    from agents.learners.pretrain import save_base

    shipped = Path(__file__).resolve().parents[1] / "agents/learners/pretrained"
    old_state, old_config = load_base(shipped / "FlightPlanner-v0.safetensors")
    new_state = {name: tensor + 1.0 for name, tensor in old_state.items()}
    new_config = {**old_config, "final_loss": 0.125}  # another save of the same layout
    save_base(old_state, old_config, tmp_path / "base")
    with monkeypatch.context() as patch:
        _killed_after(patch, 1)  # the weights renamed, the config not yet
        with pytest.raises(Killed):
            save_base(new_state, new_config, tmp_path / "base")
    assert json.loads((tmp_path / "base.json").read_text()) == old_config  # mixed on disk
    state, config = load_base(tmp_path / "base.safetensors")
    assert config == new_config
    assert all(torch.equal(state[name], new_state[name]) for name in new_state)
