"""The experiments' one scheduler (:mod:`experiments.shared.scheduler`) on local processes.

Order, progress, failures and kept units, with units of a few milliseconds; the Ray
backend and real experiments are in the slow tests of ``tests/test_scheduler_ray.py``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from experiments.shared.kept import Kept, units_folder
from experiments.shared.scheduler import (
    UnitsFailedError,
    UnitsLeftError,
    UnknownUnitsError,
    add_scheduling_arguments,
    rerun_command,
    run_units,
    scheduling,
    selected_units,
)


def _slow_square(unit: tuple[int, float]) -> int:
    value, pause = unit
    time.sleep(pause)
    return value * value


def _square_or_fail(value: int) -> int:
    if value == 2:
        raise ArithmeticError(f"unit {value} cannot be squared")
    return value * value


def _counted_square(unit: tuple[int, str]) -> int:
    """``value``'s square, leaving a file per run in ``folder`` (to count the runs)."""
    value, folder = unit
    Path(folder, f"ran-{value}-{os.getpid()}-{time.monotonic_ns()}").touch()
    return value * value


def _counted_square_but_2(unit: tuple[int, str]) -> int:
    """As :func:`_counted_square`, but unit 2 raises until ``folder``/fixed exists."""
    value, folder = unit
    if value == 2 and not Path(folder, "fixed").exists():
        raise ArithmeticError("unit 2 cannot be squared yet")
    return _counted_square(unit)


def _square_name(unit: tuple[int, str]) -> str:
    return f"square {unit[0]}"


def _runs(folder: Path) -> list[str]:
    """The values of the units run so far (:func:`_counted_square`'s files), sorted."""
    return sorted(path.name.split("-")[1] for path in folder.glob("ran-*"))


def _dies_once(unit: tuple[int, str]) -> int:
    """Kill its own worker the first time unit 1 runs: a worker lost mid-run."""
    value, folder = unit
    if value == 1 and not Path(folder, "died").exists():
        Path(folder, "died").touch()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    return value * value


def test_results_come_in_the_units_order_whatever_order_they_finish_in() -> None:
    units = [(value, 0.4 if value == 0 else 0.0) for value in range(4)]  # the first ends last
    finished: list[int] = []
    lines: list[str] = []
    results = run_units(_slow_square, units, jobs=2, done=lambda i, _: finished.append(i),
                        describe=lambda unit: f"square {unit[0]}", label="t", log=lines.append)
    assert results == [0, 1, 4, 9]
    assert sorted(finished) == [0, 1, 2, 3] and finished[-1] == 0
    assert lines[0] == "t: 0 of 4 units kept, 4 to run in 2 process(es)"
    # progress: units done / to run, the time so far and the time left
    assert lines[-1].startswith("t: square 0 done (4/4, ") and lines[-1].endswith(" s left)")


def test_one_process_gives_the_same_results_in_this_process() -> None:
    units = [(value, 0.0) for value in range(3)]
    lines: list[str] = []
    assert run_units(_slow_square, units, jobs=1, log=lines.append) == [0, 1, 4]
    assert lines[0] == "units: 0 of 3 units kept, 3 to run in this process"


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failed_unit_is_reported_with_its_traceback_and_the_others_finish(jobs: int) -> None:
    finished: list[int] = []
    with pytest.raises(UnitsFailedError) as raised:
        run_units(_square_or_fail, list(range(5)), jobs=jobs, label="squares",
                  done=lambda index, result: finished.append(result))
    assert sorted(finished) == [0, 1, 9, 16]  # every other unit finished
    message = str(raised.value)
    assert "--- squares: unit 2 failed:\nTraceback (most recent call last):" in message
    assert "ArithmeticError: unit 2 cannot be squared" in message
    assert "in _square_or_fail" in message  # the worker's own frames
    assert "squares: 1 of 5 units failed (2); the others finished. Nothing was kept; to run " \
           "them all again: python " in message
    assert [failure.name for failure in raised.value.failures] == ["2"]


def test_finished_units_are_kept_and_a_second_run_runs_only_the_missing(tmp_path: Path
                                                                        ) -> None:
    keeper = Kept(units_folder(tmp_path, "squares", "smoke"), {"scale": "smoke"})
    units = [(value, str(tmp_path)) for value in range(4)]
    assert run_units(_counted_square, units, jobs=2, keeper=keeper,
                     describe=lambda unit: f"square {unit[0]}") == [0, 1, 4, 9]
    assert len(list(tmp_path.glob("ran-*"))) == 4
    assert sorted(path.name for path in keeper.folder.iterdir()) == [
        f"square_{value}.pickle" for value in range(4)]
    keeper.path("square 2").unlink()  # as if the run had stopped before unit 2 finished
    with pytest.raises(UnitsFailedError, match=r"1 of 1 units failed \(square 2\); the others "
                       r"finished\. To run the failed ones alone \(the others are kept\): "):
        run_units(_square_or_fail, [2], keeper=keeper, describe=lambda unit: f"square {unit}")
    lines: list[str] = []
    assert run_units(_counted_square, units, jobs=2, keeper=keeper, log=lines.append,
                     describe=lambda unit: f"square {unit[0]}") == [0, 1, 4, 9]
    assert lines[0] == "units: 3 of 4 units kept, 1 to run in this process"
    assert sorted(path.name.split("-")[1] for path in tmp_path.glob("ran-*")) == [
        "0", "1", "2", "2", "3"]
    keeper.clear()
    assert not (tmp_path / "kept_units").exists()


def test_a_unit_kept_with_other_settings_is_refused_naming_its_file(tmp_path: Path) -> None:
    folder = units_folder(tmp_path, "squares", "smoke")
    Kept(folder, {"steps": 1}).write("square 1", 1)
    with pytest.raises(ValueError, match=r"square_1\.pickle: was run as 'square 1' with "
                                         r"\{'steps': 1\}, this run needs \{'steps': 2\}"):
        run_units(_counted_square, [(1, str(tmp_path))], keeper=Kept(folder, {"steps": 2}),
                  describe=lambda unit: f"square {unit[0]}")
    (folder / "square_1.pickle").write_text("not a pickle")
    with pytest.raises(ValueError, match=r"square_1\.pickle: expected a kept unit"):
        Kept(folder, {"steps": 2}).read("square 1")


def test_units_lost_with_a_killed_worker_run_again(tmp_path: Path) -> None:
    lines: list[str] = []
    units = [(value, str(tmp_path)) for value in range(4)]
    assert run_units(_dies_once, units, jobs=2, log=lines.append) == [0, 1, 4, 9]
    assert (tmp_path / "died").exists()
    assert sum(" done (" in line for line in lines) == 4


@pytest.mark.parametrize(("address", "status", "says"), [
    ("http://head:10001", 2, "--address 'http://head:10001': expected auto, local, HOST:PORT or "
                             "ray://HOST[:PORT]"),
    ("ray://127.0.0.1:1", 1, "--address ray://127.0.0.1:1: no Ray cluster answers at "
                             "127.0.0.1:1 (connection refused)")])
def test_every_experiment_refuses_a_bad_address_in_one_line_before_any_work(
        address: str, status: int, says: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from experiments import __main__ as command

    for experiment in ("budgets", "converged", "lora_ppo"):
        out = tmp_path / experiment
        assert command.main([experiment, "--scale", "smoke", "--address", address,
                             "--out", str(out)]) == status
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"python -m experiments: error: {says}")
        assert not out.exists()  # nothing created


def test_a_kept_unit_that_names_a_function_is_refused_not_run(tmp_path: Path) -> None:
    """A pickle may call any function it names; a kept unit is read with classes only."""
    import pickle

    folder = units_folder(tmp_path, "squares", "smoke")
    Kept(folder, {"steps": 1}).write("square 1", np.arange(3.0))  # numpy's rebuilders pass
    assert np.array_equal(Kept(folder, {"steps": 1}).read("square 1")[1], np.arange(3.0))

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(tmp_path / "ran"),))

    record = {"name": "square 1", "settings": {"steps": 1}, "result": Payload()}
    (folder / "square_1.pickle").write_bytes(pickle.dumps(record))
    with pytest.raises(ValueError, match=r"square_1\.pickle: a kept unit may not load "
                                         r"os\.makedirs; delete it to run it again"):
        Kept(folder, {"steps": 1}).read("square 1")
    assert not (tmp_path / "ran").exists()


def test_a_kept_units_tensors_come_back_bit_for_bit_without_torchs_unpickler(tmp_path) -> None:
    import torch

    folder = units_folder(tmp_path, "warm", "smoke")
    state = {"w": torch.randn(3, 2, generator=torch.Generator().manual_seed(0)),
             "p": torch.nn.Parameter(torch.ones(2))}
    Kept(folder, 1).write("warm start", state)
    assert b"torch._utils" not in (folder / "warm_start.pickle").read_bytes()
    back = Kept(folder, 1).read("warm start")[1]
    assert torch.equal(back["w"], state["w"]) and back["w"].dtype == torch.float32
    assert isinstance(back["p"], torch.nn.Parameter) and back["p"].requires_grad


def test_a_failed_units_command_reruns_it_alone_and_then_every_result_comes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["runner.py", "squares", "--scale", "smoke"])
    keeper = Kept(units_folder(tmp_path, "squares", "smoke"), {"scale": "smoke"})
    units = [(value, str(tmp_path)) for value in range(4)]
    with pytest.raises(UnitsFailedError) as raised:
        run_units(_counted_square_but_2, units, jobs=2, keeper=keeper, describe=_square_name,
                  label="squares")
    message = str(raised.value)
    alone = f"{rerun_command()} --unit 'square 2'"  # shell-quoted: the name has a space
    assert alone.endswith(" squares --scale smoke --unit 'square 2'")
    assert ("ArithmeticError: unit 2 cannot be squared yet\nTo rerun it alone: "
            f"{alone}\nsquares: 1 of 4 units failed (square 2)") in message
    assert message.endswith("To run the failed ones alone (the others are kept): "
                            f"{rerun_command()}")  # the line that runs what is missing
    assert _runs(tmp_path) == ["0", "1", "3"]

    parser = argparse.ArgumentParser()  # the command, parsed as an experiment parses it
    parser.add_argument("experiment")
    parser.add_argument("--scale")
    add_scheduling_arguments(parser)
    args = parser.parse_args(shlex.split(alone.removeprefix(rerun_command(arguments=[]))))
    assert args.unit == ["square 2"]
    (tmp_path / "fixed").touch()
    lines: list[str] = []
    with selected_units(args.unit):
        assert run_units(_counted_square_but_2, units, jobs=2, keeper=keeper,
                         describe=_square_name, label="squares", log=lines.append
                         ) == [0, 1, 4, 9]  # every result: the report goes on
    assert lines[0] == ("squares: 3 of 4 units kept, 1 to run in this process (--unit; 0 "
                        "other(s) not run)")
    assert _runs(tmp_path) == ["0", "1", "2", "3"]  # unit 2 alone ran again


def test_the_command_to_rerun_a_unit_alone_replaces_the_units_it_named() -> None:
    arguments = ["budgets", "--unit", "square 2", "--scale", "smoke", "--unit=square 3"]
    assert rerun_command("square 2", arguments).endswith(
        " budgets --scale smoke --unit 'square 2'")
    assert rerun_command(arguments=arguments).endswith(
        " budgets --unit 'square 2' --scale smoke '--unit=square 3'")  # the same command


def test_units_left_missing_by_unit_stop_in_one_line_once_the_named_ones_are_kept(
        tmp_path: Path) -> None:
    keeper = Kept(units_folder(tmp_path, "squares", "smoke"), {"scale": "smoke"})
    units = [(value, str(tmp_path)) for value in range(4)]
    run = {"keeper": keeper, "describe": _square_name, "label": "squares"}
    with selected_units(["square 1"]), pytest.raises(UnitsLeftError) as raised:
        run_units(_counted_square, units, jobs=2, **run)
    [line] = str(raised.value).splitlines()
    assert line.startswith("squares: --unit ran square 1; 3 of 4 units are still to run, "
                           "which the command without --unit runs: python ")
    assert _runs(tmp_path) == ["1"] and keeper.read("square 1") == (True, 1)
    # the same selection again: its unit is kept, the others are still missing
    with selected_units(["square 1", "square 3"]), pytest.raises(
            UnitsLeftError, match=r"^squares: --unit ran square 3; square 1 already kept; 2 of 4 "):
        run_units(_counted_square, units, **run)
    # a second call (bopo's second round): the named units ran in the first
    with selected_units(["square 0"]):
        assert run_units(_counted_square, units[:1], **run) == [0]
        with pytest.raises(UnitsLeftError, match=r"^second: --unit ran square 0; 1 of 1 "):
            run_units(_counted_square, [(5, str(tmp_path))], keeper=keeper,
                      describe=_square_name, label="second")
    assert _runs(tmp_path) == ["0", "1", "3"]
    assert run_units(_counted_square, units, **run) == [0, 1, 4, 9]  # without --unit
    assert _runs(tmp_path) == ["0", "1", "2", "3"]


def test_a_unit_name_that_is_not_to_run_is_refused_naming_those_that_are(tmp_path: Path
                                                                          ) -> None:
    units = [(value, str(tmp_path)) for value in range(8)]
    with selected_units(["square 0", "sqare 1"]), pytest.raises(UnknownUnitsError) as raised:
        run_units(_counted_square, units, describe=_square_name, label="squares")
    assert str(raised.value) == (
        "--unit 'sqare 1': not among the 8 units squares has still to run ('square 0', "
        "'square 1', 'square 2', 'square 3', 'square 4' and 3 more); did you mean 'square 1'?")
    assert _runs(tmp_path) == []  # refused before anything ran


def test_an_experiments_own_parser_says_a_units_error_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised, scheduling(argparse.Namespace(unit=["a"]),
                                                         "python -m experiments.x"):
        run_units(_square_or_fail, [1, 2], describe=lambda unit: f"square {unit}")
    assert raised.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m experiments.x: error: --unit 'a': not among the 2 units")


def test_all_reruns_a_failed_unit_alone_by_its_own_experiments_command() -> None:
    from experiments.__main__ import experiment_arguments

    assert experiment_arguments(["all", "--out", "all", "--unit", "x"], "bopo") == [
        "bopo", "--out", "all", "--unit", "x"]
    assert experiment_arguments(["--scale", "smoke", "all"], "corl") == [
        "--scale", "smoke", "corl"]
    assert experiment_arguments(["--scale=smoke", "all"], "corl") == ["--scale=smoke", "corl"]


def test_the_command_line_refuses_an_unknown_unit_in_one_line_before_training(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "experiments", "budgets", "--scale", "smoke",
                           "--unit", "ToolBench-v0 ppo seed 7", "--out", str(out)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert last.startswith("python -m experiments: error: --unit 'ToolBench-v0 ppo seed 7': "
                           "not among the 10 units budgets has still to run "
                           "('ToolBench-v0 ppo seed 0', ")
    assert "Traceback" not in done.stderr and " done (" not in done.stderr
    assert not out.exists()


def test_all_keeps_every_experiments_units_until_the_last_one_is_done(tmp_path) -> None:
    """``all`` failing in its third experiment: running it again reads the first two back."""
    from experiments.shared.kept import clears_deferred

    first, second = (Kept(units_folder(tmp_path, name, "smoke"), 1) for name in ("a", "b"))
    first.write("unit", 1)
    with pytest.raises(RuntimeError), clears_deferred():
        first.clear()  # its report is written
        second.write("unit", 2)
        second.clear()
        raise RuntimeError("the third experiment failed")
    assert first.read("unit") == (True, 1) and second.read("unit") == (True, 2)
    with clears_deferred():
        first.clear()
        assert first.read("unit") == (True, 1)  # until the whole command is done
    assert first.read("unit") == (False, None)
    first.write("unit", 1)
    first.clear()  # a single experiment forgets its units once its files are written
    assert first.read("unit") == (False, None) and not first.folder.exists()
