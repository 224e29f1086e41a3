"""Real experiments through the one scheduler: on Ray the files of ``--jobs``, and a resume.

* ``budgets`` and ``converged`` at the smoke scale as Ray tasks on a one-machine cluster
  (``address="local"``, 2 CPUs) write the same files as in 2 local processes, byte for
  byte but for the wall times;
* a Ray worker killed in the middle of a unit: Ray runs the unit again, and the files
  are the same;
* a ``budgets`` run whose worker is killed mid-run, and then the run itself, keeps what
  finished: the same command runs only the missing units, and writes the same files;
* a real two-node cluster on 127.0.0.1: ``ray start --head`` and a second ``ray start
  --address`` (its own temp dir), each of one CPU and kept in the foreground (``--block``:
  stopping that process stops its node, so the test stops only what it started), runs
  the same ``budgets`` and ``converged`` from a driver process through ``HOST:PORT`` and
  writes the files of the local run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.budgets import runner as budgets
from experiments.converged import runner as converged
from experiments.shared.kept import units_folder

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
#: A smoke budgets of 4 units (two rows x two seeds): half a minute on 2 cores.
ENVS = {"cost_envs/ToolBench-v0": ("ppo", "lora-ppo")}
#: The wall times, the only thing that differs between two runs (``0.1 min``).
TIMING = re.compile(r"\d+\.\d+ min")


def _files(folder: Path) -> dict[str, str]:
    """The reports in ``folder`` (not the kept runs), their wall times blanked."""
    return {path.name: TIMING.sub("X min", path.read_text(encoding="utf-8"))
            for path in sorted(folder.iterdir()) if path.is_file()}


@pytest.fixture(scope="module")
def local_budgets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The smoke budgets of :data:`ENVS` in 2 local processes."""
    out = tmp_path_factory.mktemp("local")
    budgets.report(out, "smoke", jobs=2, envs=ENVS, log=lambda _: None)
    return _files(out)


def test_on_ray_budgets_and_converged_write_the_files_of_local_processes(
        local_budgets: dict[str, str], tmp_path: Path) -> None:
    import ray

    lines: list[str] = []
    try:
        budgets.report(tmp_path / "ray", "smoke", jobs=2, envs=ENVS, address="local",
                       log=lines.append)
        assert lines[0] == "budgets: 0 of 4 units kept, 4 to run on the Ray cluster at local"
        assert _files(tmp_path / "ray") == local_budgets
        assert len(local_budgets) == 2 and "| 2,048 | 320 |" in local_budgets[
            "budgets_ToolBench-v0.md"]
        converged.report(tmp_path / "converged_ray", "smoke", rows=("ppo",), address="local",
                         log=lambda _: None)
    finally:
        ray.shutdown()
    converged.report(tmp_path / "converged_local", "smoke", jobs=2, rows=("ppo",),
                     log=lambda _: None)
    on_ray = _files(tmp_path / "converged_ray")
    assert sorted(on_ray) == ["converged_FlightPlanner-v1.csv", "converged_FlightPlanner-v1.md"]
    assert on_ray == _files(tmp_path / "converged_local")
    # the kept runs too: the same per-task returns
    for name in ("fixed.json", "ppo_seed0.json", "ppo_seed1.json"):
        kept = [re.sub(r'"(cpu_)?seconds": [0-9.e-]+', "", (tmp_path / run / converged.RUNS / name)
                       .read_text()) for run in ("converged_ray", "converged_local")]
        assert kept[0] == kept[1]



def _descendants(pid: int) -> dict[int, bytes]:
    """This process tree's processes below ``pid``: pid -> command line."""
    parents, commands = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            commands[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError):  # gone meanwhile
            continue
    below, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in below:
                below[child] = commands.get(child, b"")
                frontier.append(child)
    return below


def test_a_ray_worker_killed_mid_task_has_its_unit_run_again(local_budgets: dict[str, str],
                                                            tmp_path: Path) -> None:
    import threading

    import ray

    killed: list[int] = []
    stop = threading.Event()

    def kill_one_worker() -> None:  # a worker of this test's own cluster, running a unit
        while not stop.is_set() and not killed:
            running = [pid for pid, command in _descendants(os.getpid()).items()
                       if command.startswith(b"ray::run_unit")]
            if running:
                os.kill(running[0], signal.SIGKILL)
                killed.append(running[0])
            time.sleep(0.5)

    killer = threading.Thread(target=kill_one_worker, daemon=True)
    lines: list[str] = []
    try:
        killer.start()
        budgets.report(tmp_path, "smoke", jobs=2, envs=ENVS, address="local", log=lines.append)
    finally:
        stop.set()
        killer.join(10)
        ray.shutdown()
    assert len(killed) == 1  # Ray ran the lost unit again (max_retries), nothing failed
    assert sum(" done (" in line for line in lines) == 4
    assert _files(tmp_path) == local_budgets


_DRIVER = """
import sys
from pathlib import Path
from experiments.budgets import runner
runner.report(Path(sys.argv[1]), "smoke", jobs=2, envs={envs!r}, log=print)
"""


def _workers(driver: int) -> list[int]:
    """The driver's spawned worker processes (not its resource tracker)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == driver and b"spawn_main" in command:
            children.append(int(stat.parent.name))
    return children


def _wait(condition: Callable[[], bool], what: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def test_a_killed_worker_and_driver_lose_only_the_unfinished_units(
        local_budgets: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    kept = units_folder(out, "budgets", "smoke")
    command = [sys.executable, "-c", _DRIVER.format(envs=ENVS), str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = tmp_path / "first.log"
    with open(log, "w") as first_log:
        driver = subprocess.Popen(command, cwd=REPO, env=env, stdout=first_log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait(lambda: kept.is_dir() and any(kept.glob("*.pickle")), "a first kept unit")
            [victim, *_] = _workers(driver.pid)
            os.kill(victim, signal.SIGKILL)  # a worker lost mid-run
            _wait(lambda: "a worker process died" in log.read_text(), "the pool restarted")
            os.killpg(driver.pid, signal.SIGKILL)  # and then the whole run
            driver.wait(30)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(30)
    finished = len(list(kept.glob("*.pickle")))
    assert 1 <= finished < 4 and not (out / "budgets_ToolBench-v0.md").exists()
    # the same command: only the missing units run, and the files are those of one run
    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=600, check=True)
    assert f"budgets: {finished} of 4 units kept, {4 - finished} to run" in again.stdout
    assert again.stdout.count(" done (") == 4 - finished
    assert _files(out) == local_budgets
    assert not (out / "kept_units").exists()  # forgotten once the files are written


# ------------------------------------------------------------ a two-node cluster
RAY = Path(sys.executable).with_name("ray")
#: The nodes and the driver: this checkout importable; no token authentication (Ray's
#: default for ``ray start --head``, whose token the second node would not have), the
#: cluster being on 127.0.0.1 for the test's lifetime.
_CLUSTER_ENV = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
_CLUSTER_DRIVER = """
import sys
from pathlib import Path
from experiments.budgets import runner as budgets
from experiments.converged import runner as converged
out, address = Path(sys.argv[1]), sys.argv[2]
budgets.report(out / "budgets", "smoke", envs={envs!r}, address=address, log=print)
converged.report(out / "converged", "smoke", rows=("ppo",), address=address, log=print)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node(arguments: list[str], temp: Path, log: Path) -> subprocess.Popen[bytes]:
    """One ``ray start --block`` node of one CPU, in a session of its own."""
    command = [str(RAY), "start", "--block", "--num-cpus", "1", "--temp-dir", str(temp),
               "--disable-usage-stats", "--node-ip-address", "127.0.0.1", *arguments]
    with open(log, "wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                env=_CLUSTER_ENV)


def _stop(node: subprocess.Popen[bytes]) -> None:
    """Stop a node this test started: its ``ray start``, which stops the node's processes."""
    if node.poll() is None:
        os.killpg(node.pid, signal.SIGTERM)
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait(30)


def _wait_for(log: Path, text: str, node: subprocess.Popen[bytes], seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while text not in log.read_text(errors="replace"):
        assert node.poll() is None, log.read_text(errors="replace")[-2000:]
        assert time.monotonic() < deadline, f"{log.name}: no {text!r} within {seconds} s"
        time.sleep(0.5)


@pytest.mark.skipif(not RAY.exists(), reason="no ray command (the tune extra)")
def test_a_two_node_cluster_writes_the_files_of_a_local_run(tmp_path: Path) -> None:
    # short temp dirs: Ray's sockets live there, and a socket's path is at most 107 bytes
    temp = Path(f"/tmp/ray40-{os.getpid()}")
    port = _free_port()
    head = _node(["--head", "--port", str(port), "--include-dashboard", "false",
                  "--ray-client-server-port", str(_free_port())], temp / "head",
                 tmp_path / "head.log")
    second = None
    try:
        _wait_for(tmp_path / "head.log", "Ray runtime started", head)
        second = _node(["--address", f"127.0.0.1:{port}"], temp / "second",
                       tmp_path / "second.log")
        _wait_for(tmp_path / "second.log", "Ray runtime started", second)
        done = subprocess.run([sys.executable, "-c", _CLUSTER_DRIVER.format(envs=ENVS),
                               str(tmp_path / "cluster"), f"127.0.0.1:{port}"], cwd=tmp_path,
                              env=_CLUSTER_ENV, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        # the second node ran units too: its own workers' logs, in its own temp dir
        assert list((temp / "second").glob("session_*/logs/python-core-worker-*.log"))
    finally:
        for node in (second, head):
            if node is not None:
                _stop(node)
        shutil.rmtree(temp, ignore_errors=True)
    assert "budgets: 0 of 4 units kept, 4 to run on the Ray cluster at 127.0.0.1" in done.stdout
    budgets.report(tmp_path / "local" / "budgets", "smoke", jobs=2, envs=ENVS,
                   log=lambda _: None)
    converged.report(tmp_path / "local" / "converged", "smoke", jobs=2, rows=("ppo",),
                     log=lambda _: None)
    for experiment, count in (("budgets", 2), ("converged", 2)):
        local = _files(tmp_path / "local" / experiment)
        assert len(local) == count
        assert _files(tmp_path / "cluster" / experiment) == local
