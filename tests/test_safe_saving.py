"""Saving under concurrency and after crashes: a directory is always one complete version.

The workers run in real processes (``spawn``), several saving to one directory at once.
This module imports only :mod:`agents.files` at the top, so that workers start quickly.
"""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from agents import files

N_FILES = 8


def _use_exchange(enabled: bool) -> None:
    """Take the portable path (rename aside, retry) instead of Linux's atomic exchange."""
    if not enabled:
        files._exchange = lambda a, b: False


def _wait_for_each_other(barrier: Path, writer: int, writers: int) -> None:
    """A file barrier: spawned workers start saving together, whatever their import time."""
    (barrier / f"ready-{writer}").touch()
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < writers:
        if time.monotonic() > deadline:
            raise TimeoutError("the other writer never started")
        time.sleep(0.01)


def _write_many(target: str, barrier: str, writer: int, writers: int, rounds: int,
                exchange: bool) -> int:
    """Save ``rounds`` versions of ``target``, every file stamped with writer and round."""
    _use_exchange(exchange)
    _wait_for_each_other(Path(barrier), writer, writers)
    for round_ in range(rounds):
        def write(tmp: Path, stamp: str = f"{writer}:{round_}") -> None:
            for index in range(N_FILES):
                (tmp / f"part{index}.txt").write_text(stamp)

        files.write_directory_atomic(target, write)
    return rounds


def _run_writers(worker, tmp_path: Path, writers: int, *args) -> list:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(writers, mp_context=context) as pool:
        futures = [pool.submit(worker, str(tmp_path / "out" / "model"), str(barrier), writer,
                               writers, *args) for writer in range(writers)]
        return [future.result() for future in futures]  # re-raises a saver's error


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "move-aside"])
def test_concurrent_savers_leave_one_complete_directory(tmp_path, exchange):
    _run_writers(_write_many, tmp_path, 3, 150, exchange)
    target = tmp_path / "out" / "model"
    stamps = {path.read_text() for path in target.iterdir()}
    assert sorted(path.name for path in target.iterdir()) == [
        f"part{index}.txt" for index in range(N_FILES)]
    assert len(stamps) == 1, f"files of different saves were mixed: {stamps}"
    # no temporary or backup directory is left behind
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["model"]


def _save_models(target: str, barrier: str, writer: int, writers: int, rounds: int) -> str:
    """Save model ``writer`` (initialised with seed ``writer``) ``rounds`` times.

    Returns the fingerprint of what it saved, so the test compares the survivor with what
    its writer really held rather than with a model rebuilt in another process.
    """
    from agents.learners.checkpoints import save_allocator

    allocator = _model(writer)
    _wait_for_each_other(Path(barrier), writer, writers)
    for _ in range(rounds):
        save_allocator(allocator, target)
    return _fingerprint(allocator.policy)


def _fingerprint(policy) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(policy.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _model(seed: int):
    import gymnasium as gym
    import torch

    from agents.learners.supervised import policy_for
    from agents.learners.training import TrainedAllocator

    torch.manual_seed(seed)
    policy = policy_for(gym.make("cost_envs/FlightPlanner-v0"), lora_rank=None)
    return TrainedAllocator(policy, "cost_envs/FlightPlanner-v0", {}, "ppo", seed, 0, None)


def test_two_processes_saving_models_leave_one_of_them(tmp_path):
    from agents.learners.checkpoints import load_allocator

    saved = _run_writers(_save_models, tmp_path, 2, 200)
    assert saved[0] != saved[1]  # two different models, so a mix would show
    loaded = load_allocator(tmp_path / "out" / "model")
    # the config and the tensors come from the same save: seed names the writer
    assert loaded.seed in (0, 1)
    assert _fingerprint(loaded.policy) == saved[loaded.seed]
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["model"]


# ----------------------------------------------------------- leftovers of crashed saves
def _write_stamp(stamp: str):
    def write(tmp: Path) -> None:
        (tmp / "stamp.txt").write_text(stamp)

    return write


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "move-aside"])
def test_a_leftover_backup_never_blocks_a_save(tmp_path, monkeypatch, exchange):
    target = tmp_path / "model"
    files.write_directory_atomic(target, _write_stamp("first"))
    # what a save that crashed between its two renames used to leave behind
    for name in (f".model.old-{os.getpid()}", ".model.old-12345", ".model.abc123"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stale.txt").write_text("stale")
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    for stamp in ("second", "third"):
        files.write_directory_atomic(target, _write_stamp(stamp))
        assert (target / "stamp.txt").read_text() == stamp
    assert [p.name for p in target.iterdir()] == ["stamp.txt"]
    # the leftovers are someone else's to clean up: a save never deletes what it did not make
    assert (tmp_path / f".model.old-{os.getpid()}" / "stale.txt").is_file()


def test_a_save_over_an_empty_directory_replaces_it(tmp_path):
    (tmp_path / "model").mkdir()
    files.write_directory_atomic(tmp_path / "model", _write_stamp("new"))
    assert (tmp_path / "model" / "stamp.txt").read_text() == "new"


def test_a_failed_swap_puts_the_previous_version_back(tmp_path, monkeypatch):
    target = tmp_path / "model"
    files.write_directory_atomic(target, _write_stamp("old"))
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    real_rename = os.rename

    def failing_rename(source, destination):
        # moving the old version aside works; moving the new one in hits an I/O error
        if Path(destination) == target and ".old-" not in Path(source).name:
            raise OSError(errno.EIO, "I/O error")
        real_rename(source, destination)

    monkeypatch.setattr(files.os, "rename", failing_rename)
    with pytest.raises(OSError, match="I/O error"):
        files.write_directory_atomic(target, _write_stamp("new"))
    assert (target / "stamp.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_an_exchange_failure_other_than_unsupported_is_raised(tmp_path, monkeypatch):
    target = tmp_path / "model"
    files.write_directory_atomic(target, _write_stamp("old"))

    def refuse(a, b):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(files, "_exchange", refuse)
    with pytest.raises(OSError, match="Permission denied"):
        files.write_directory_atomic(target, _write_stamp("new"))
    assert (target / "stamp.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


# ---------------------------------------------------------------- writable before work
def test_check_creatable_refuses_a_path_under_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"notes\.txt is a file, not a directory"):
        files.check_creatable(tmp_path / "notes.txt" / "sub" / "model")
    assert files.check_creatable(tmp_path / "new" / "sub" / "model") == (
        tmp_path / "new" / "sub" / "model")
    assert not (tmp_path / "new").exists()  # checking creates nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_check_creatable_refuses_a_directory_it_cannot_write():
    # /proc cannot take new files, even for root (chmod would not stop root)
    with pytest.raises(ValueError, match="cannot write in /proc"):
        files.check_creatable("/proc/cost-envs-model")


def test_check_writable_refuses_unwritable_checkpoint_paths(tmp_path):
    from agents.learners.checkpoints import check_writable

    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        check_writable(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_writable(tmp_path / "notes.txt" / "model")
    assert check_writable(tmp_path / "model") == tmp_path / "model"


# ------------------------------------------- sets of files: turns, and dead savers' copies
def _save_set(directory: str, barrier: str, writer: int, round_: int) -> None:
    """Wait for the round's other saver, then save one stamped set of files."""
    _wait_for_each_other(Path(barrier) / str(round_), writer, 2)
    stamp = f"{writer}:{round_}"
    files.write_files_atomic(directory, {f"part{index}.txt": stamp for index in range(N_FILES)})


def test_two_processes_saving_one_set_of_files_never_mix_them(tmp_path):
    # Issue #26: report writes and router saves (a .json and its .safetensors) mixed two
    # savers' files in 3-5 rounds of 60. Writers of one directory now take turns.
    out, barrier = tmp_path / "out", tmp_path / "barrier"
    mixed = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        for round_ in range(40):
            (barrier / str(round_)).mkdir(parents=True)
            for future in [pool.submit(_save_set, str(out), str(barrier), writer, round_)
                           for writer in range(2)]:
                future.result()
            stamps = {path.read_text() for path in out.glob("part*.txt")}
            if len(stamps) != 1:
                mixed.append((round_, stamps))
    assert not mixed, f"files of two saves were mixed in {len(mixed)} of 40 rounds: {mixed[:3]}"
    assert sorted(path.name for path in out.iterdir()) == [f"part{index}.txt"
                                                           for index in range(N_FILES)]


def _dead_pid() -> int:
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _aged(path: Path) -> Path:
    """Make ``path`` look older than the stale-file grace period."""
    old = time.time() - 2 * files.STALE_AFTER_SECONDS
    os.utime(path, (old, old))
    return path


def test_the_next_save_removes_what_a_killed_saver_left(tmp_path):
    # Issue #26: kill -9 during saves left hidden full copies (14 models after 20 kills).
    host, dead, alive = files._host(), _dead_pid(), os.getppid()
    left = [tmp_path / f".model.{host}-{dead}-abcd1234", tmp_path / f".model.old-{host}-{dead}-"
            "efgh5678", tmp_path / f".a.txt.{host}-{dead}-ijkl9012.tmp",
            tmp_path / f".a.txt.old-{host}-{dead}-0123456789ab"]
    kept = [tmp_path / f".model.{host}-{alive}-mnop3456",  # a live saver's
            tmp_path / f".a.txt.{host}-{alive}-qrst7890.tmp",
            tmp_path / f".other.txt.{host}-{dead}-uvwx1234.tmp",  # another file's
            tmp_path / f".a.txt.ffffffff-{dead}-yzab5678.tmp",  # another host's
            tmp_path / f".a.txt.{host}-{dead}-mine",  # a name saves never make
            tmp_path / f".a.txt.old-{host}-{dead}-fedcba987654"]  # too recent to judge
    for path in left[:2]:
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"a full copy")
    for path in [*left[2:], *kept]:
        path.write_text("partial")
    for path in [*left, *kept[:-1]]:
        _aged(path)
    files.write_files_atomic(tmp_path, {"a.txt": "new"})
    assert [path.exists() for path in left] == [True, True, False, False]
    (tmp_path / "model").mkdir()
    files.write_directory_atomic(tmp_path / "model", lambda tmp: (tmp / "x").write_text("1"))
    assert not any(path.exists() for path in left)
    assert all(path.exists() for path in kept)


def test_a_save_killed_mid_swap_leaves_its_backup_to_be_put_back(tmp_path):
    # Killed between moving the old version aside and moving the new one in: the target is
    # gone and the backup is the last complete version. The next save puts it back first,
    # so that a failure of that save still leaves it.
    backup = tmp_path / f".model.old-{files._host()}-{_dead_pid()}-abcd1234"
    backup.mkdir()
    (backup / "config.json").write_text("the last good one")
    _aged(backup)

    def fail(tmp: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.write_directory_atomic(tmp_path / "model", fail)
    assert (tmp_path / "model" / "config.json").read_text() == "the last good one"
    assert [path.name for path in tmp_path.iterdir()] == ["model"]
