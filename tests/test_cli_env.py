"""``cost-envs evaluate``/``train`` env arguments and ``train --config`` (agents/cli/env.py,
agents/cli/config.py): the arguments reach the env, flags override the file, and every bad
key or value is one line naming it, before any training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agents import cli
from agents.learners.checkpoints import load_allocator
from cost_envs.envs.toolbench import toolbench_pool
from cost_envs.prices import default_price_table

TOOLBENCH = "cost_envs/ToolBench-v0"
EXPERT = "cost_envs/ExpertRouting-v0"


def evaluate_json(capsys, *argv: str) -> dict:
    assert cli.main(["evaluate", "--episodes", "8", "--resamples", "20", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def fails(capsys, argv: list[str], *fragments: str) -> str:
    """Run ``argv``; it must exit non-zero with one stderr line holding every fragment."""
    with pytest.raises(SystemExit) as excinfo:
        status = cli.main(argv)
        raise SystemExit(status)
    message = str(excinfo.value.code) if isinstance(excinfo.value.code, str) else (
        capsys.readouterr().err.strip().splitlines()[-1])
    assert excinfo.value.code != 0
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# ------------------------------------------------------------------ evaluate's env arguments
def test_evaluate_takes_a_pool_file_and_inline_env_kwargs(tmp_path: Path, capsys) -> None:
    pool = toolbench_pool(3)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(pool.to_dict()), encoding="utf-8")
    result = evaluate_json(capsys, "--env", TOOLBENCH, "--methods", "rule", "--pool", str(path))
    assert list(result["rule"]["call_ratio"]) == list(pool.names)
    result = evaluate_json(capsys, "--env", TOOLBENCH, "--methods", "rule",
                           "--env-kwargs", "{pool_size: 4}")
    assert list(result["rule"]["call_ratio"]) == list(toolbench_pool(4).names)


def test_evaluate_takes_a_partial_price_table(tmp_path: Path, capsys) -> None:
    o3 = default_price_table()["o3"]
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump({"models": [
        {"name": "o3", "input": 10 * o3.input, "output": 10 * o3.output, "source": "mine",
         "date": "2026-01-01"}]}), encoding="utf-8")
    argv = ("--env", EXPERT, "--methods", "random")
    shipped = evaluate_json(capsys, *argv)["random"]
    dearer = evaluate_json(capsys, *argv, "--prices", str(path))["random"]
    assert dearer["call_ratio"] == shipped["call_ratio"]  # the same calls, on the same tasks
    assert dearer["avg_cost"] > shipped["avg_cost"]


def test_env_kwargs_from_a_file_and_flags_over_it(tmp_path: Path, capsys) -> None:
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"pool_size": 4}), encoding="utf-8")
    result = evaluate_json(capsys, "--env", TOOLBENCH, "--methods", "rule",
                           "--env-kwargs", str(path))
    assert len(result["rule"]["call_ratio"]) == 4
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump(toolbench_pool(2).to_dict()), encoding="utf-8")
    result = evaluate_json(capsys, "--env", TOOLBENCH, "--methods", "rule",
                           "--env-kwargs", "{pool: other.yaml}", "--pool", str(pool))
    assert len(result["rule"]["call_ratio"]) == 2  # --pool replaces the mapping's pool


@pytest.mark.parametrize(("extra", "fragments"), [
    (["--env-kwargs", "{pool_sise: 4}"], ("['pool_sise']", "'pool_size'", "did you mean")),
    (["--env-kwargs", "{pool_size: -4}"], ("pool_size", "-4")),
    (["--prices", "p.yaml"], ("ToolBench-v0 takes no argument(s) ['prices']",)),
    (["--pool", "missing.yaml"], ("no such file", "missing.yaml")),
])
def test_bad_env_arguments_are_one_line_naming_them(capsys, extra, fragments) -> None:
    fails(capsys, ["evaluate", "--env", TOOLBENCH, "--methods", "rule", *extra], *fragments)


@pytest.mark.parametrize(("text", "fragment"), [
    ("{a: [1", "not valid YAML"), ("[1, 2]", "expected a mapping"),
    ("missing.yaml", "missing.yaml: no such file")])
def test_unreadable_env_kwargs_are_a_usage_error(capsys, text: str, fragment: str) -> None:
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["evaluate", "--env", TOOLBENCH, "--env-kwargs", text])
    assert excinfo.value.code == 2
    assert fragment in capsys.readouterr().err.splitlines()[-1]


# ------------------------------------------------------------------------ train --config
def write_config(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("method", "data", "fragments"), [
    ("ppo", {"n_step": 64}, ("unknown key(s) ['n_step'] for ppo", "'n_steps'", "'timesteps'")),
    ("ppo", {"cost_coef": 0.1}, ("['cost_coef']",)),  # lora-ppo's, not plain PPO's
    ("ppo", {"n_steps": 0}, ("n_steps", "got 0")),
    ("ppo", {"learning_rate": "fast"}, ("learning_rate", "'fast'")),
    ("ppo", {"timesteps": -1}, ("timesteps", "-1")),
    ("ppo", {"env_kwargs": {"pool_size": 0}}, ("ToolBench-v0: pool_size", "got 0")),
    ("ppo", {"env_kwargs": [1]}, ("env_kwargs", "mapping")),
    ("lora", {"n_steps": 64}, ("['n_steps']", "supervised")),
    ("lora", {"supervised": {"epoch": 1}}, ("supervised", "['epoch']", "'epochs'")),
    ("lora-ppo", {"base": "pretrained!"}, ("base", "'pretrained!'")),
])
def test_bad_config_fails_at_once_naming_the_key(tmp_path: Path, capsys, method, data,
                                                 fragments) -> None:
    out = tmp_path / "model"
    argv = ["train", "--env", TOOLBENCH, "--method", method, "--out", str(out),
            "--config", write_config(tmp_path, data)]
    message = fails(capsys, argv, *fragments)
    assert "env_kwargs" in data or "train.yaml" in message  # env values are the env's errors
    assert message.startswith("cost-envs train: ")
    assert not out.exists()


def test_config_hyperparameters_apply_and_flags_override_the_file(tmp_path: Path,
                                                                  capsys) -> None:
    config = write_config(tmp_path, {"n_steps": 64, "batch_size": 32, "timesteps": 5000,
                                     "seed": 3, "env_kwargs": {"pool_size": 4}})
    out = tmp_path / "model"
    assert cli.main(["train", "--env", TOOLBENCH, "--method", "ppo", "--out", str(out),
                     "--config", config, "--timesteps", "1", "--env-kwargs", "{pool_size: 5}",
                     "--no-progress"]) == 0
    capsys.readouterr()
    model = load_allocator(out)
    assert model.timesteps == 64  # one rollout of the file's n_steps; --timesteps 1 won
    assert model.seed == 3  # from the file
    assert model.env_kwargs == {"pool_size": 5}  # the flag's mapping over the file's
    # the model is then evaluated on its own env, and refused on one of other spaces
    result = evaluate_json(capsys, "--env", TOOLBENCH, "--model", str(out))
    assert len(result["ppo"]["call_ratio"]) == 5
    fails(capsys, ["evaluate", "--env", TOOLBENCH, "--model", str(out),
                   "--env-kwargs", "{pool_size: 4}"], "MultiBinary(5)", "MultiBinary(4)")


# --------------------------------------------------------- train --config, rl-zoo3 files
ZOO = Path(__file__).resolve().parents[1] / "agents" / "zoo"


def test_train_reads_the_shipped_rl_zoo3_file_taking_the_envs_entry(tmp_path: Path,
                                                                    capsys) -> None:
    # Issue #26: agents/zoo/ppo.yml was refused ("unknown key(s) ['cost_envs/...']").
    out = tmp_path / "model"
    assert cli.main(["train", "--env", "ToolBench-v0", "--method", "ppo", "--out", str(out),
                     "--config", str(ZOO / "ppo.yml"), "--timesteps", "1",
                     "--no-progress"]) == 0
    capsys.readouterr()
    assert load_allocator(out).timesteps == 256  # one rollout of ToolBench's entry (not 512)


@pytest.mark.parametrize(("method", "name", "ppo"), [
    ("ppo", "ppo.yml", {"n_steps": 256, "batch_size": 32}),
    ("lora-ppo", "lora_ppo.yml", {"n_steps": 512, "action_lr_scale": 1.0,
                                  "value_lr_scale": 6.0}),
])
def test_an_rl_zoo3_entry_becomes_the_settings(method: str, name: str, ppo: dict) -> None:
    from agents.cli.config import read_train_config

    settings = read_train_config(ZOO / name, method, TOOLBENCH)
    assert settings.timesteps == 20480  # n_timesteps
    assert ppo.items() <= settings.ppo.items()
    assert not {"policy", "policy_kwargs", "callback", "n_timesteps"} & set(settings.ppo)
    entry = yaml.safe_load((ZOO / name).read_text())[EXPERT]  # another id, another entry
    assert read_train_config(ZOO / name, method, EXPERT).ppo["learning_rate"] == (
        entry["learning_rate"])


ZOO_ENTRY = {"n_timesteps": 1000, "n_envs": 2, "n_steps": 64,
             "policy": "agents.learners.common.policies.AllocatorPolicy",
             "policy_kwargs": "dict(lora_rank=None, action_distribution='autoregressive')",
             "callback": "agents.callbacks.CostMetricsCallback",
             "env_kwargs": {"pool_size": 4}}


def test_a_zoo_entry_is_found_by_bare_name_and_its_policy_kwargs_are_read(tmp_path) -> None:
    from agents.cli.config import read_train_config

    path = tmp_path / "zoo.yml"
    path.write_text(yaml.safe_dump({"ToolBench-v0": ZOO_ENTRY, EXPERT: {"n_steps": 32}}))
    settings = read_train_config(path, "ppo", TOOLBENCH)
    assert (settings.timesteps, settings.n_envs, settings.ppo) == (1000, 2, {"n_steps": 64})
    assert settings.action_distribution == "autoregressive"
    assert settings.env_kwargs == {"pool_size": 4}


@pytest.mark.parametrize(("method", "entry", "fragments"), [
    ("ppo", None, ("no entry for cost_envs/ToolBench-v0", "cost_envs/ExpertRouting-v0")),
    ("lora-ppo", {}, ("lora_rank=None is not the network lora-ppo trains",)),
    ("ppo", {"policy": "MlpPolicy"}, ("policy", "AllocatorPolicy", "'MlpPolicy'")),
    ("ppo", {"callback": "my.Callback"}, ("callback", "'my.Callback'")),
    ("ppo", {"policy_kwargs": "dict(net_arch=[64])"}, ("policy_kwargs", "['net_arch']")),
    ("ppo", {"policy_kwargs": "__import__('os').getcwd()"}, ("policy_kwargs", "dict(")),
    ("ppo", {"normalize": True}, ("unknown key(s) ['normalize']", "n_timesteps")),
    ("ppo", {"timesteps": 5}, ("n_timesteps and timesteps",)),
])
def test_a_bad_zoo_entry_fails_at_once_naming_the_key(tmp_path: Path, capsys, method, entry,
                                                      fragments) -> None:
    data = {EXPERT: dict(ZOO_ENTRY)}
    if entry is not None:
        data[TOOLBENCH] = {**ZOO_ENTRY, **entry}
    out = tmp_path / "model"
    path = tmp_path / "zoo.yml"
    path.write_text(yaml.safe_dump(data))
    message = fails(capsys, ["train", "--env", TOOLBENCH, "--method", method, "--out",
                             str(out), "--config", str(path)], *fragments)
    assert message.startswith(f"cost-envs train: {path}: ")
    assert not out.exists()
