"""``python -m experiments tune``: a real two-trial sweep on Ray Tune + Optuna, --address."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.seeds import (
    BOPO_TRAIN_TASK_SEED,
    EVAL_TASK_SEED,
    TRAIN_TASK_SEED,
    VALIDATION_TASK_SEED,
)
from experiments import __main__ as command
from experiments.shared import cluster
from experiments.tune import methods
from experiments.tune import runner as tune

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "ray://HOST:10001"

@pytest.fixture(scope="module", autouse=True)
def _tune_extra() -> None:
    """Skip the module without the tune extra; CI installs it (make install): never there.

    At the module's first test, not at its import: collecting it (every pytest-xdist
    worker collects every module) then costs no import of Ray Tune.
    """
    if not os.environ.get("CI"):
        pytest.importorskip("ray.tune.search.optuna", reason="needs the tune extra")
        pytest.importorskip("optuna", reason="needs the tune extra")


FILES = {method: tune.file_name(method, env_id) for method, env_id in methods.SWEEPS}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """One ``python -m experiments tune --scale smoke`` in its own process (47 s quiet).

    Returns every sweep's record by method, the progress and the output directory.
    """
    out = tmp_path_factory.mktemp("tuned")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "experiments", "tune", "--scale", "smoke",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # the results files, and Ray Tune's own (kept to resume from, not thrown away)
    assert sorted(path.name for path in out.iterdir()) == sorted([*FILES.values(),
                                                                  tune.RAY_DIR])
    assert sorted(path.name for path in (out / tune.RAY_DIR / "smoke").iterdir()) == sorted(
        tune.experiment_name(method, env_id) for method, env_id in methods.SWEEPS)
    records = {method: yaml.safe_load((out / name).read_text(encoding="utf-8"))
               for method, name in FILES.items()}
    return records, done.stderr, out


@pytest.fixture(scope="module", params=sorted(FILES))
def smoke(request: pytest.FixtureRequest, sweeps) -> tuple[dict[str, Any], str, Path, str]:
    """One method's sweep of the smoke run: its record, the progress, out, the method."""
    records, progress, out = sweeps
    return records[request.param], progress, out, request.param


def test_the_smoke_sweep_records_every_trial_within_the_budget(smoke) -> None:
    record, progress, _, method = smoke
    assert record["score"] == methods.METHODS[method].score_label
    budget = tune.BUDGETS["smoke"]
    assert record["budget"] == {"trials": 2, "timesteps": budget.timesteps, "seeds": 1,
                                "episodes": budget.episodes,
                                "env_steps_total": 2 * budget.timesteps}
    trials = record["trials"]
    assert [trial["trial"] for trial in trials] == [0, 1]
    assert trials[0]["config"] == record["paper"] == dict(methods.METHODS[method].paper)
    # equal budget: every RL trial takes the budget's steps; supervised LoRA takes none
    steps = 0 if method == "lora" else budget.timesteps
    assert all(trial["timesteps"] == steps for trial in trials)
    assert all(-10 < trial["score"] < 10 and 0 <= trial["success_rate"] <= 1
               for trial in trials)
    if method.startswith("corl"):  # accuracy within budget: never above the accuracy
        assert all(0 <= trial["score"] <= trial["success_rate"] + 1e-9 for trial in trials)
    best = max(trials, key=lambda trial: trial["score"])
    assert record["chosen"] == best["config"] and record["chosen_trial"] == best["trial"]
    assert record["wall_time_seconds"] > 0 and record["where"] == "local"
    assert "tune: wrote" in progress and progress.rstrip().endswith("tune: finished")


def test_every_trial_lies_in_the_documented_space(smoke) -> None:
    record, _, _, method = smoke
    space = {param.name: param for param in methods.METHODS[method].space}
    assert set(record["search_space"]) == set(space)
    assert all(param["why"] for param in record["search_space"].values())
    for trial in record["trials"]:
        assert set(trial["config"]) == set(space)
        assert all(space[name].contains(value) for name, value in trial["config"].items())


def test_validation_seeds_are_disjoint_from_training_and_evaluation(smoke) -> None:
    record, _, _, method = smoke
    seeds = record["task_seeds"]
    assert seeds == methods.METHODS[method].seeds(1)
    assert seeds["validation"] == VALIDATION_TASK_SEED
    assert seeds["evaluation"] == EVAL_TASK_SEED
    training = [seed for key, value in seeds.items() if key.startswith("training")
                for seed in value]
    first = {"bopo": BOPO_TRAIN_TASK_SEED, "bopo-ppo": BOPO_TRAIN_TASK_SEED}
    assert training[0] == first.get(method, TRAIN_TASK_SEED)
    assert VALIDATION_TASK_SEED not in (*training, EVAL_TASK_SEED)


def test_the_sweep_leaves_no_files_in_the_repository_or_out(sweeps) -> None:
    _, _, out = sweeps
    assert not [path for path in out.iterdir() if path.name.startswith(".")]
    assert not (REPO / "ray_results").exists()
    assert not list(REPO.glob("**/run_trial_*"))


def test_address_defaults_to_local_and_parses_both_cluster_forms() -> None:
    parser = command.build_parser()
    assert parser.parse_args(["tune"]).address is None
    for address in ("auto", CLUSTER):
        assert parser.parse_args(["tune", "--address", address]).address == address


def test_address_is_refused_where_nothing_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        command.main(["aggregates", "--address", "auto"])
    assert exit_info.value.code == 2
    assert "--address: aggregates reads files and runs nothing on Ray" in capsys.readouterr().err


class _ConnectedError(Exception):
    """Raised by the fake ``ray.init``: the test stops at the connection."""


class _Closable:
    """What the fake ``socket.create_connection`` returns: a connection to close."""

    def close(self) -> None:
        """Nothing to close."""


@pytest.mark.parametrize("address", [None, "auto", CLUSTER])
def test_the_address_reaches_ray_init_unchanged(address: str | None, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    calls: list[dict[str, Any]] = []

    def fake_init(**kwargs: Any) -> None:
        calls.append(kwargs)
        raise _ConnectedError

    monkeypatch.setattr(ray, "init", fake_init)
    # the checkout first, once, then the caller's own path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), "/elsewhere"]))
    probed: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cluster.socket, "create_connection",  # the probe passes
                        lambda *args, **kwargs: probed.append(args) or _Closable())
    argv = ["tune", "--out", str(tmp_path)] + ([] if address is None else
                                              ["--address", address])
    with pytest.raises(_ConnectedError):
        command.main(argv)
    # the GCS or client address probed (by the command and by connect), auto never
    assert probed == ([(("host", 10001),)] * 2 if address == CLUSTER else [])
    [kwargs] = calls
    if address is None:  # a one-machine cluster sized by --jobs, no dashboard
        assert kwargs == {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False,
                          "runtime_env": {"env_vars": {
                              "PYTHONPATH": os.pathsep.join([str(REPO), "/elsewhere"])}}}
    else:  # the address as given; only this package is shipped along
        assert kwargs == {"address": address, "runtime_env": {
            "py_modules": [str(REPO / "experiments")], "env_vars": cluster.WORKER_ENV}}
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_bad_search_space_or_paper_point_is_refused() -> None:
    with pytest.raises(ValueError, match="low < high"):
        methods.Param("lr", "log", 0.0, 1.0)
    with pytest.raises(ValueError, match="outside the space"):
        methods.Method("PPO", methods.PPO_SPACE, {**methods.METHODS["ppo"].paper, "n_steps": 3},
                    methods.fit_ppo)


def test_lora_ppo_configurations_reach_training_as_given(monkeypatch) -> None:
    calls: list[dict[str, Any]] = []

    class Trained:
        timesteps = 7

    def fake_train(env_id: str, method: str, timesteps: int, **kwargs: Any) -> Trained:
        calls.append({"method": method, **kwargs})
        return Trained()

    monkeypatch.setattr(methods, "train", fake_train)
    paper = dict(methods.METHODS["lora-ppo"].paper)
    methods.fit_lora_ppo("cost_envs/ToolBench-v0", paper, 100, 3)
    moved = {**paper, "supervised_epochs": 2, "action_head": "trained", "learning_rate": 1e-3}
    methods.fit_lora_ppo("cost_envs/ToolBench-v0", moved, 100, 3)
    first, second = calls
    assert first["method"] == "lora-ppo" and first["seed"] == 3
    assert first["supervised"] == methods.SupervisedConfig()  # the paper's warm start
    assert "action_lr_scale" not in first["ppo"]
    assert first["ppo"] == {"learning_rate": 5e-5, "cost_coef": 0.05, "ent_coef": 0.01}
    assert second["supervised"].epochs == 2 and second["ppo"]["action_lr_scale"] == 1.0
    assert second["ppo"]["learning_rate"] == 1e-3


def test_chosen_reads_the_committed_configuration_and_refuses_a_wrong_file(tmp_path) -> None:
    assert tune.chosen("lora-ppo", "cost_envs/Nowhere-v0", tmp_path) is None
    config = dict(methods.METHODS["ppo"].paper)
    path = tmp_path / tune.file_name("ppo", "cost_envs/ToolBench-v0")
    path.write_text(yaml.safe_dump({"method": "ppo", "env_id": "cost_envs/ToolBench-v0",
                                    "chosen": config}))
    assert tune.chosen("ppo", "cost_envs/ToolBench-v0", tmp_path) == config
    path.write_text(yaml.safe_dump({"method": "ppo", "env_id": "cost_envs/ToolBench-v0",
                                    "chosen": {"learning_rate": 1e-3}}))
    with pytest.raises(ValueError, match="expected the tuned ppo on cost_envs/ToolBench-v0"):
        tune.chosen("ppo", "cost_envs/ToolBench-v0", tmp_path)
    for method, env_id in methods.SWEEPS:  # the committed files are readable
        committed = tune.chosen(method, env_id)
        assert committed is None or set(committed) == {p.name for p in
                                                        methods.METHODS[method].space}


# ------------------------------------------------------------- an unreachable --address
@pytest.mark.parametrize("address", ["ray://127.0.0.1:1", "127.0.0.1:1"])
def test_an_unreachable_cluster_is_one_line_at_once_and_leaves_nothing(address: str,
                                                                       tmp_path: Path) -> None:
    # Issue #26: a 45-line traceback after 56 s (ray://), a hang past 240 s (HOST:PORT),
    # and an empty --out left behind each time.
    out = tmp_path / "tuned"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "experiments", "tune", "--address", address,
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    seconds = time.perf_counter() - start
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"python -m experiments: error: --address {address}: no Ray cluster answers at "
        "127.0.0.1:1 (connection refused); start one with `ray start --head` or check the "
        "address"]
    assert seconds < 30  # about a second here; the probe's own bound is 5 s
    assert not out.exists()


@pytest.mark.parametrize(("address", "endpoint"), [
    ("auto", None), ("local", None), ("ray://HOST:10001", ("host", 10001)),
    ("ray://head", ("head", cluster.CLIENT_PORT)), ("10.0.0.5:6379", ("10.0.0.5", 6379)),
    ("ray://[::1]:10001", ("::1", 10001))])
def test_the_address_forms_ray_takes_name_their_endpoint(address: str, endpoint) -> None:
    assert cluster.endpoint(address) == endpoint


@pytest.mark.parametrize("address", ["http://HOST:8265", "HOST", "HOST:port", "ray://HOST:",
                                     "HOST:99999", "ray://HOST:10001/path", ""])
def test_a_malformed_address_is_one_line_naming_the_forms(address: str, tmp_path: Path,
                                                          capsys) -> None:
    with pytest.raises(ValueError, match="expected auto, local, HOST:PORT or ray://HOST"):
        cluster.endpoint(address)
    out = tmp_path / "tuned"
    assert command.main(["tune", "--address", address, "--out", str(out)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1 and not out.exists()


def test_the_probe_is_bounded_even_when_connecting_hangs(monkeypatch) -> None:
    def hang(*args: Any, **kwargs: Any) -> None:  # a host whose name never resolves
        time.sleep(3)
        raise OSError("too late")

    monkeypatch.setattr(cluster.socket, "create_connection", hang)
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"no Ray cluster answers at host:10001 \(no "
                                              r"answer within 0.3 s\)"):
        cluster.probe("ray://HOST:10001", timeout=0.3)
    assert time.perf_counter() - start < 5


def test_a_port_that_answers_but_is_not_ray_is_given_up_after_the_deadline(monkeypatch
                                                                           ) -> None:
    import ray

    stopped = []

    def slow_init(**kwargs: Any) -> None:  # Ray retrying a GCS that never answers
        time.sleep(30)

    monkeypatch.setattr(ray, "init", slow_init)
    monkeypatch.setattr(ray, "shutdown", lambda: stopped.append(True))
    monkeypatch.setattr(cluster.socket, "create_connection",
                        lambda *args, **kwargs: _Closable())
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 0.3)
    import signal

    # a library that ignored SIGINT before (the full suite met one) must not stop the deadline
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        start = time.perf_counter()
        with pytest.raises(ConnectionError, match=re.escape(
                "127.0.0.1:6379: accepts connections but did not answer as a Ray cluster "
                "within 0.3 s")):
            cluster.connect("127.0.0.1:6379", jobs=1)
        assert time.perf_counter() - start < 5 and stopped == [True]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # restored afterwards
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_deadline_leaves_a_quick_block_and_the_users_ctrl_c_alone() -> None:
    with cluster.deadline(5) as expired:
        pass
    assert not expired()
    time.sleep(0.1)  # no interrupt arrives after the block
    with pytest.raises(KeyboardInterrupt), cluster.deadline(5) as expired:
        raise KeyboardInterrupt  # the user's
    assert not expired()


# --------------------------------------------------------------------------- --methods
def test_methods_choose_the_sweeps_in_their_order() -> None:
    assert tune.chosen_sweeps(None) == list(methods.SWEEPS)
    assert tune.chosen_sweeps(("lora", "ppo")) == [("ppo", "cost_envs/ToolBench-v0"),
                                                   ("lora", "cost_envs/ToolBench-v0")]
    with pytest.raises(ValueError, match=r"unknown method\(s\) pop; expected some of "
                                         "ppo, lora-ppo, lora"):
        tune.chosen_sweeps(("pop",))


def test_methods_reach_the_sweeps_and_a_bad_one_is_refused_first(tmp_path: Path, monkeypatch,
                                                                 capsys) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(tune, "report", lambda out, scale, **kwargs: calls.append(kwargs)
                        or [])
    out = tmp_path / "tuned"
    assert command.main(["tune", "--methods", "lora,ppo", "--out", str(out)]) == 0
    assert calls[0]["methods"] == ("lora", "ppo")
    capsys.readouterr()
    assert command.main(["tune", "--methods", "lora,pop", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m experiments: error: --methods: unknown method(s) pop; expected some of "
        + ", ".join(dict.fromkeys(method for method, _ in methods.SWEEPS))
        + "; did you mean 'ppo'?"]
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit) as exit_info:
        command.main(["corl", "--methods", "ppo"])
    assert exit_info.value.code == 2
    assert "--methods: only tune takes it" in capsys.readouterr().err


# --------------------------------------------------------------- kept and resumed sweeps
def test_an_interrupted_sweep_resumes_keeping_its_finished_trials(tmp_path: Path) -> None:
    """Ctrl-C during the second trial, then the same command: only that trial runs again."""
    out, gate = tmp_path / "tuned", tmp_path / "gate"
    gate.mkdir()
    experiment = out / tune.RAY_DIR / "smoke" / tune.experiment_name(
        "lora", "cost_envs/ToolBench-v0")
    argv = [sys.executable, "-m", "experiments", "tune", "--scale", "smoke", "--methods",
            "lora", "--jobs", "1", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # The second trial waits at the gate (never released), so it is running at the Ctrl-C
    # however fast or slow this machine is.
    gated = {**env, tune.TRIAL_GATE_VARIABLE: str(gate)}
    running = subprocess.Popen(argv, cwd=REPO, env=gated, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)

    def results() -> dict[str, int]:
        """Trial directory -> results it holds (lines of result.json)."""
        return {path.parent.name: len(path.read_text().splitlines())
                for path in experiment.glob("run_trial_*/result.json")}

    try:  # one trial at a time: the second starts once the first has finished
        limit = time.monotonic() + 300
        while not (any(results().values()) and len(list(gate.glob("started-*"))) == 2):
            assert running.poll() is None and time.monotonic() < limit
            time.sleep(0.1)
        running.send_signal(signal.SIGINT)
        _, stderr = running.communicate(timeout=120)
    finally:
        running.kill()
    assert running.returncode == 130, stderr
    assert "interrupted" in stderr.splitlines()[-1] and "resume" in stderr.splitlines()[-1]
    finished = {name for name, lines in results().items() if lines}
    assert len(finished) == 1 and not (out / FILES["lora"]).exists()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"resuming {experiment} (1 of 2 trials finished)" in done.stderr
    record = yaml.safe_load((out / FILES["lora"]).read_text(encoding="utf-8"))
    assert record["resumed_trials"] == 1
    assert [trial["trial"] for trial in record["trials"]] == [0, 1]
    assert record["trials"][0]["config"] == dict(methods.METHODS["lora"].paper)
    after = results()
    assert all(after[name] == 1 for name in finished)  # not run again
    assert sum(after.values()) == 2


def test_the_trial_gate_lets_the_first_trial_through_and_holds_the_next(tmp_path: Path) -> None:
    """The gate the interruption test relies on: first in passes, the second waits."""
    tune.wait_at_gate(None)  # no gate: nothing to wait for
    tune.wait_at_gate(str(tmp_path))  # the first trial passes at once
    second = threading.Thread(target=tune.wait_at_gate, args=(str(tmp_path),), daemon=True)
    second.start()
    second.join(0.5)
    assert second.is_alive() and len(list(tmp_path.glob("started-*"))) == 2
    (tmp_path / "release").touch()
    second.join(5)
    assert not second.is_alive()


class _Result:
    """A trial's result as Ray Tune's ResultGrid holds it."""

    def __init__(self, metrics: dict[str, Any], error: Exception | None = None) -> None:
        self.metrics, self.error, self.config = metrics, error, {}


class _Grid(list):
    """Ray Tune's ResultGrid: the results, and the errors of the failed trials."""

    def __init__(self, results: list[_Result]) -> None:
        super().__init__(results)
        self.errors = [result.error for result in results if result.error is not None]


@pytest.mark.parametrize(("results", "raised", "message"), [
    ([_Result({}, RuntimeError("Traceback (most recent call last):\n  ...\nValueError: bad"))],
     RuntimeError, "1 trial(s) failed, the first with ValueError: bad (tracebacks: error.txt"),
    ([_Result({"score": 1.0}), _Result({})], tune.SweepInterrupted, "interrupted; the "
     "finished trials are kept in"),
])
def test_a_failed_or_interrupted_sweep_says_so_in_one_line_and_keeps_its_trials(
        results, raised, message: str, tmp_path: Path, monkeypatch) -> None:
    from ray import tune as ray_tune

    class Tuner:
        """Ray Tune's Tuner, returning the results of the case."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.storage = kwargs["run_config"].storage_path

        @staticmethod
        def can_restore(path: Path) -> bool:
            return False

        def fit(self) -> _Grid:
            return _Grid(results)

    monkeypatch.setattr(ray_tune, "Tuner", Tuner)
    monkeypatch.setattr(ray_tune, "with_parameters", lambda trainable, **kwargs: trainable)
    monkeypatch.setattr(ray_tune, "with_resources", lambda trainable, resources: trainable)
    with pytest.raises(raised) as error:
        tune.sweep("cost_envs/ToolBench-v0", "lora", tune.BUDGETS["smoke"], tmp_path)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(tmp_path / "lora-ToolBench-v0") in str(error.value)


def test_a_failed_tune_ends_in_one_line_but_other_bugs_keep_their_traceback(
        tmp_path: Path, monkeypatch, capsys) -> None:
    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("tune lora on cost_envs/ToolBench-v0: 1 trial(s) failed")

    monkeypatch.setattr(tune, "report", failing)
    assert command.main(["tune", "--out", str(tmp_path / "tuned")]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m experiments: error: tune lora on cost_envs/ToolBench-v0: 1 trial(s) failed")
    monkeypatch.setattr(command, "run", failing)
    with pytest.raises(RuntimeError):
        command.main(["rules", "--out", str(tmp_path / "rules")])
    assert not (tmp_path / "rules").exists()
