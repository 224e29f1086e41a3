"""``python -m experiments tune``: a real two-trial sweep on Ray Tune + Optuna, --address."""

from __future__ import annotations

import os
import subprocess
import sys
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
from experiments import tune
from experiments import tune_methods as methods

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "ray://HOST:10001"

if not os.environ.get("CI"):  # CI installs the tune extra (make install): never skip there
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
    assert sorted(path.name for path in out.iterdir()) == sorted(FILES.values())
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


def test_address_is_refused_outside_tune(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        command.main(["corl", "--address", "auto"])
    assert exit_info.value.code == 2
    assert "--address: only tune runs on Ray" in capsys.readouterr().err


class _ConnectedError(Exception):
    """Raised by the fake ``ray.init``: the test stops at the connection."""


@pytest.mark.parametrize("address", [None, "auto", CLUSTER])
def test_the_address_reaches_ray_init_unchanged(address: str | None, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    calls: list[dict[str, Any]] = []

    def fake_init(**kwargs: Any) -> None:
        calls.append(kwargs)
        raise _ConnectedError

    monkeypatch.setattr(ray, "init", fake_init)
    argv = ["tune", "--out", str(tmp_path)] + ([] if address is None else
                                              ["--address", address])
    with pytest.raises(_ConnectedError):
        command.main(argv)
    [kwargs] = calls
    if address is None:  # a one-machine cluster sized by --jobs, no dashboard
        assert kwargs == {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}
    else:  # the address as given; only this package is shipped along
        assert kwargs == {"address": address, "runtime_env": {
            "py_modules": [str(REPO / "experiments")]}}
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
