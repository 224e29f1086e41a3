import contextlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml
from stable_baselines3 import PPO

import cost_envs
from agents import cli, files
from agents.baselines import BASELINES
from agents.evaluation import evaluate
from agents.learners.checkpoints import load_allocator
from agents.learners.common.policies import AllocatorPolicy

FLIGHT = "cost_envs/FlightPlanner-v0"
HEADLINE = ("success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost")


def test_list_prints_the_registered_ids(capsys):
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out.splitlines() == list(cost_envs.ENV_IDS)


def test_evaluate_json(capsys):
    argv = ["evaluate", "--env", FLIGHT, "--methods", "rule,oracle", "--episodes", "50",
            "--resamples", "100", "--json"]
    assert cli.main(argv) == 0
    results = json.loads(capsys.readouterr().out)
    assert list(results) == ["rule", "oracle"]
    for summary in results.values():
        for key in HEADLINE:
            low, high = summary[f"{key}_ci"]
            assert low <= summary[key] <= high
        assert summary["episodes"] == 50
        assert set(summary["call_ratio"]) == set(cost_envs.flight_planner_pool().names)
    assert results["oracle"]["success_rate"] >= results["rule"]["success_rate"]


def test_evaluate_table_uses_default_methods_and_short_env_name(capsys):
    assert cli.main(["evaluate", "--env", "ToolBench-v0", "--episodes", "20",
                     "--resamples", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| Method | Success | CPS |")
    assert [line.split("|")[1].strip() for line in lines[2:]] == list(cli.evaluate.DEFAULT_METHODS)


def test_evaluate_is_deterministic(capsys):
    argv = ["evaluate", "--env", FLIGHT, "--methods", "random", "--episodes", "30", "--json"]
    cli.main(argv)
    first = capsys.readouterr().out
    cli.main(argv)
    assert capsys.readouterr().out == first


@pytest.mark.parametrize(
    ("argv", "valid"),
    [
        (["evaluate", "--env", "cost_envs/Nope-v0"], list(cost_envs.ENV_IDS)),
        (["evaluate", "--env", FLIGHT, "--methods", "rule,bogus"], list(BASELINES)),
    ],
)
def test_unknown_names_exit_2_listing_the_valid_ones(argv, valid, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for name in valid:
        assert name in err


@pytest.mark.parametrize("episodes", ["0", "-3", "ten"])
def test_episodes_must_be_a_positive_int(episodes, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "--env", FLIGHT, "--episodes", episodes])
    assert exc.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_a_subcommand_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2


def test_write_atomic_cleans_up_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x.md"
    target.write_text("old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        files.write_files_atomic(tmp_path, {"x.md": "new"})
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.md"]


def test_installed_console_script():
    script = shutil.which("cost-envs", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("cost-envs console script not installed in this environment")
    done = subprocess.run([script, "list"], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == list(cost_envs.ENV_IDS)


# ------------------------------------------------------------------ train / evaluate --model
def evaluate_json(capsys, *argv):
    capsys.readouterr()
    assert cli.main(["evaluate", "--json", "--resamples", "50", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    """A supervised LoRA allocator trained through the CLI (a few seconds, once)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("lora") / "model"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert cli.main(["train", "--env", "FlightPlanner-v0", "--method", "lora",
                         "--timesteps", "1", "--seed", "0", "--out", str(out),
                         "--no-progress"]) == 0
    assert f"saved lora model to {out}" in stdout.getvalue()
    return out


def train_ppo(out, *flags):
    # --timesteps 1 still runs one PPO rollout (512 steps): about a second.
    torch.set_num_threads(1)
    assert cli.main(["train", "--env", "FlightPlanner-v0", "--method", "ppo", "--timesteps",
                     "1", "--seed", "0", "--out", str(out), "--no-progress", *flags]) == 0


def test_train_writes_safetensors_and_config(lora_model):
    assert {path.name for path in lora_model.iterdir()} == {"model.safetensors",
                                                            "config.json"}
    config = json.loads((lora_model / "config.json").read_text())
    assert config["format"] == "cost-envs-allocator"
    assert config["env_id"] == FLIGHT
    assert config["env_kwargs"] == {}
    assert (config["method"], config["seed"], config["base"]) == ("lora", 0, "pretrained")
    assert config["timesteps"] == 0  # supervised only: no RL steps


def test_evaluate_model_prints_its_row(lora_model, capsys):
    results = evaluate_json(capsys, "--env", "FlightPlanner-v0", "--model", str(lora_model),
                            "--episodes", "20")
    assert list(results) == ["lora"]
    assert list(results["lora"]) == list(cli.evaluate.JSON_KEYS)
    assert results["lora"]["episodes"] == 20
    # The row is the saved network's: the same as evaluating the loaded model directly.
    expected = evaluate(load_allocator(lora_model), FLIGHT, episodes=20, seed=0).summary(
        n_resamples=50)
    for key in HEADLINE:
        assert results["lora"][key] == pytest.approx(expected[key])
    assert results["lora"]["call_ratio"] == pytest.approx(expected["call_ratio"])


def test_evaluate_model_beside_baselines(lora_model, capsys):
    results = evaluate_json(capsys, "--env", FLIGHT, "--model", str(lora_model),
                            "--episodes", "20", "--methods", "oracle")
    assert list(results) == ["oracle", "lora"]
    for summary in results.values():
        assert list(summary) == list(cli.evaluate.JSON_KEYS)
        assert summary["episodes"] == 20
    assert results["oracle"]["success_rate"] >= results["lora"]["success_rate"]


def _steps(err: str) -> list[str]:
    """The progress lines of ``evaluate`` on stderr, without their prefix and time."""
    lines = err.splitlines()
    assert all(re.match(r"cost-envs evaluate: \[ *\d+ s\] ", line) for line in lines), lines
    return [line.split("] ", 1)[1] for line in lines]


def test_evaluate_says_on_stderr_what_takes_long(capsys):
    # Issue #26: fitting best-rule and playing the planner took ~30 s with nothing said.
    argv = ["evaluate", "--env", "ToolBench-v0", "--methods", "best-rule,planner",
            "--episodes", "6", "--fit-tasks", "5", "--resamples", "20", "--json"]
    capsys.readouterr()
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert list(json.loads(captured.out)) == ["best-rule", "planner"]  # stdout: the result
    assert _steps(captured.err) == ["best-rule: fitting on 5 training tasks",
                                    "best-rule: evaluating on 6 episodes",
                                    "planner: evaluating on 6 episodes"]
    assert cli.main([*argv, "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and list(json.loads(captured.out)) == ["best-rule", "planner"]


def test_evaluate_says_when_it_loads_and_plays_a_model(lora_model, capsys):
    capsys.readouterr()
    assert cli.main(["evaluate", "--env", FLIGHT, "--model", str(lora_model), "--methods",
                     "rule", "--episodes", "4", "--resamples", "20", "--json"]) == 0
    assert _steps(capsys.readouterr().err) == [f"loading the model {lora_model}",
                                               "rule: evaluating on 4 episodes",
                                               "lora: evaluating on 4 episodes"]


def test_evaluate_model_of_another_env_names_both(lora_model):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "--env", "ToolBench-v0", "--model", str(lora_model)])
    message = str(exc.value.code)
    assert "cost_envs/FlightPlanner-v0" in message
    assert "cost_envs/ToolBench-v0" in message


def test_evaluate_missing_model_exits_with_a_message(tmp_path):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "--env", FLIGHT, "--model", str(tmp_path / "nope")])
    assert "no such model directory" in str(exc.value.code)


@pytest.fixture(scope="module")
def sb3_zip(tmp_path_factory):
    torch.set_num_threads(1)
    model = PPO(AllocatorPolicy, gym.make(FLIGHT), policy_kwargs={"lora_rank": None},
                n_steps=64, batch_size=64, n_epochs=1, device="cpu", seed=0)
    model.learn(64)
    path = tmp_path_factory.mktemp("sb3") / "ppo.zip"
    model.save(path)
    return path


def test_evaluate_sb3_zip_needs_trust_pickle(sb3_zip, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "--env", FLIGHT, "--model", str(sb3_zip), "--episodes", "5"])
    message = str(exc.value.code)
    assert "--trust-pickle" in message
    assert "refusing to load" in message
    assert capsys.readouterr().out == ""


def test_evaluate_sb3_zip_with_trust_pickle(sb3_zip, capsys):
    assert cli.main(["evaluate", "--env", FLIGHT, "--model", str(sb3_zip), "--trust-pickle",
                     "--episodes", "10", "--resamples", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| Method | Success | CPS |")
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["model"]


def test_train_unknown_method_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", "--env", FLIGHT, "--method", "unknown", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for method in ("lora", "ppo", "lora-ppo"):
        assert method in err
    assert list(tmp_path.iterdir()) == []


def test_train_tensorboard_writes_event_files(tmp_path):
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard is not installed (pip install 'cost-envs[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train_ppo(tmp_path / "model", "--tensorboard", str(tmp_path / "tb"))
    events = list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert len(events) == 1
    assert events[0].parent.name.startswith("ppo")  # tb_log_name is the method
    accumulator = EventAccumulator(str(events[0].parent)).Reload()
    assert {"cost/cps", "rollout/success_rate"} <= set(accumulator.Tags()["scalars"])


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_train_with_a_pool_file_keeps_the_pool(suffix, tmp_path, capsys):
    pool = cost_envs.flight_planner_pool().to_dict()
    for agent in pool["agents"]:
        agent["cost"] *= 10
    pool_file = tmp_path / f"pool{suffix}"
    pool_file.write_text(json.dumps(pool) if suffix == ".json" else yaml.safe_dump(pool))
    train_ppo(tmp_path / "model", "--pool", str(pool_file))
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["env_kwargs"] == {"pool": pool}

    argv = ["--env", FLIGHT, "--episodes", "20", "--methods", "rule"]
    default = evaluate_json(capsys, *argv)
    results = evaluate_json(capsys, *argv, "--model", str(tmp_path / "model"))
    assert list(results) == ["rule", "ppo"]
    # The baseline runs on the model's pool: same calls, ten times the price.
    assert results["rule"]["call_ratio"] == default["rule"]["call_ratio"]
    assert results["rule"]["avg_cost"] == pytest.approx(10 * default["rule"]["avg_cost"])
    expected = evaluate(load_allocator(tmp_path / "model"), FLIGHT, episodes=20, seed=0,
                        env_kwargs={"pool": pool}).summary(n_resamples=50)
    assert results["ppo"]["avg_cost"] == pytest.approx(expected["avg_cost"])
    assert results["ppo"]["cps"] == pytest.approx(expected["cps"])


def test_evaluate_trusted_zip_of_another_env_names_the_spaces(sb3_zip):
    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "--env", "ToolBench-v0", "--model", str(sb3_zip),
                  "--trust-pickle", "--episodes", "5"])
    message = str(info.value.code)
    assert "cost_envs/ToolBench-v0" in message and "MultiBinary(6)" in message


def test_trust_pickle_without_a_model_is_refused():
    with pytest.raises(SystemExit, match="--trust-pickle only applies with --model"):
        cli.main(["evaluate", "--env", "FlightPlanner-v0", "--trust-pickle"])


def test_train_refuses_base_for_ppo(tmp_path):
    with pytest.raises(SystemExit, match="--base applies to the LoRA methods"):
        cli.main(["train", "--env", "FlightPlanner-v0", "--method", "ppo", "--base", "random",
                  "--timesteps", "1", "--out", str(tmp_path / "m")])


def test_train_refuses_a_non_checkpoint_out_before_training(tmp_path, monkeypatch):
    def must_not_train(*args, **kwargs):
        raise AssertionError("trained although --out cannot be written")

    import agents.learners.training

    monkeypatch.setattr(agents.learners.training, "train", must_not_train)
    (tmp_path / "notes.txt").write_text("precious")
    with pytest.raises(SystemExit, match=r"--out: .*not empty"):
        cli.main(["train", "--env", "FlightPlanner-v0", "--method", "lora",
                  "--out", str(tmp_path), "--no-progress"])
    assert (tmp_path / "notes.txt").read_text() == "precious"


def test_evaluate_runs_the_routing_baselines_on_agentic_routing(capsys):
    cli.main(["evaluate", "--env", "cost_envs/AgenticRouting-v0", "--methods",
              "always-small,always-large,cascade,oracle", "--episodes", "20", "--json"])
    results = json.loads(capsys.readouterr().out)
    assert list(results) == ["always-small", "always-large", "cascade", "oracle"]
    # the boundary policies bracket the cascade's use of the large model
    assert results["always-small"]["call_ratio"] == {"large": 0.0}
    assert results["always-large"]["call_ratio"]["large"] == 1.0
    assert 0.0 < results["cascade"]["call_ratio"]["large"] < 1.0


def test_routing_baselines_on_an_env_without_a_small_model_exit_cleanly(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "--env", FLIGHT, "--methods", "rule,cascade"])
    assert "cascade" in str(exc.value) and "AgenticRouting" in str(exc.value)


def test_evaluate_leaves_the_oracle_out_of_a_pool_too_large_for_it(tmp_path, capsys):
    # Issue #26: the exact oracle (and the greedy heuristic) enumerate 2**m joint actions
    # (m <= 16). By default the other methods still run and a note says why; asked for by
    # name, a one-line refusal.
    pool = cost_envs.flight_planner_pool().to_dict()
    agents = pool["agents"]
    pool["agents"] = [{**agents[i % len(agents)], "name": f"agent_{i}"} for i in range(17)]
    pool_file = tmp_path / "pool.json"
    pool_file.write_text(json.dumps(pool))
    argv = ["--env", FLIGHT, "--episodes", "5", "--pool", str(pool_file)]
    capsys.readouterr()
    assert cli.main(["evaluate", "--json", "--resamples", "50", *argv]) == 0
    captured = capsys.readouterr()
    assert "oracle" not in json.loads(captured.out)
    assert {"random", "rule"} <= set(json.loads(captured.out))
    assert "greedy" not in json.loads(captured.out)  # it enumerates them too
    assert ("oracle, greedy left out: they enumerate every joint action and take pools of "
            "at most 16 agents, this one has 17") in captured.err
    with pytest.raises(SystemExit, match=r"^cost-envs evaluate: oracle cannot run on "
                                         r"cost_envs/FlightPlanner-v0 with this pool: .* "
                                         r"this one has 17 \(leave them out of --methods\)"):
        cli.main(["evaluate", *argv, "--methods", "rule,oracle"])


def test_evaluate_says_which_env_arguments_come_from_the_model(tmp_path, capsys):
    # Issue #26: a model saved with budget 1e-9 scored success 0.000 and nothing was said.
    train_ppo(tmp_path / "model", "--env-kwargs", '{"budget": 1e-9}')
    argv = ["evaluate", "--env", FLIGHT, "--episodes", "5", "--resamples", "20", "--json",
            "--model", str(tmp_path / "model")]
    with pytest.raises(SystemExit, match=r"was trained with env arguments that change what is "
                                         r"measured \(budget=1e-09\); pass --model-env-kwargs"):
        cli.main(argv)
    capsys.readouterr()
    assert cli.main([*argv, "--model-env-kwargs"]) == 0
    captured = capsys.readouterr()
    assert f"env arguments from {tmp_path / 'model'}: budget=1e-09" in captured.err
    assert json.loads(captured.out)["ppo"]["success_rate"] == 0.0  # under the model's budget
    # Set on the command line, the model's value is not taken: nothing to refuse.
    assert cli.main([*argv, "--env-kwargs", '{"budget": 100.0}']) == 0
    captured = capsys.readouterr()
    assert "ppo" in json.loads(captured.out) and "budget=1e-09" not in captured.err
    with pytest.raises(SystemExit, match="--model-env-kwargs only applies with --model"):
        cli.main(["evaluate", "--env", FLIGHT, "--model-env-kwargs"])


def test_bad_env_arguments_are_one_line_before_anything_is_built(capsys):
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["evaluate", "--env", FLIGHT, "--env-kwargs", '{"nope": 1}'])
    assert "nope" in str(excinfo.value) and "\n" not in str(excinfo.value)
