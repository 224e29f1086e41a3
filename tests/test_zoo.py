"""rl-zoo3: the shipped hyperparameter files and training smoke runs (issue #13).

The smoke runs need rl-zoo3 (``pip install -c constraints.txt '.[zoo]'``) and are skipped
without it; the files are checked either way.
"""

from __future__ import annotations

import csv
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import cost_envs
from agents.callbacks import CostMetricsCallback
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.training import PPO_SETTINGS
from agents.zoo import config_path

ROOT = Path(__file__).resolve().parents[1]
TUNED = ROOT / "experiments" / "tuned"
TOOLBENCH = "cost_envs/ToolBench-v0"
HAS_ZOO = importlib.util.find_spec("rl_zoo3") is not None
needs_zoo = pytest.mark.skipif(
    not HAS_ZOO, reason="rl_zoo3 is not installed (pip install -c constraints.txt '.[zoo]')")


def _entries(algo: str) -> dict[str, dict[str, Any]]:
    """The file as rl-zoo3 reads it (``yaml.safe_load``: YAML 1.1 numbers)."""
    return yaml.safe_load(config_path(algo).read_text())


def _import(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _chosen(name: str) -> dict[str, Any]:
    return yaml.safe_load((TUNED / f"{name}_ToolBench-v0.yaml").read_text())["chosen"]


@pytest.mark.parametrize("algo", ["ppo", "lora_ppo"])
def test_every_env_id_has_an_entry_rl_zoo3_can_use(algo: str) -> None:
    entries = _entries(algo)
    assert set(entries) == set(cost_envs.ENV_IDS)
    for entry in entries.values():
        assert _import(entry["policy"]) is AllocatorPolicy
        assert _import(entry["callback"]) is CostMetricsCallback
        policy_kwargs = eval(entry["policy_kwargs"])  # what rl-zoo3 does with the string
        assert set(policy_kwargs) == {"lora_rank"}
        assert type(entry["n_timesteps"]) is int and entry["n_timesteps"] > 0
        numbers = {k: v for k, v in entry.items() if k not in ("policy", "policy_kwargs",
                                                                 "callback")}
        assert all(type(v) in (int, float) for v in numbers.values()), numbers


def test_ppo_settings_are_the_projects() -> None:
    entries = _entries("ppo")
    paper = {**PPO_SETTINGS, "learning_rate": 3e-4}  # SB3's default rate, as train() uses
    tuned = {**PPO_SETTINGS, **_chosen("ppo")}
    for env_id, entry in entries.items():
        expected = tuned if env_id == TOOLBENCH else paper
        assert {k: entry[k] for k in expected} == expected, env_id
        assert eval(entry["policy_kwargs"]) == {"lora_rank": None}  # the `ppo` method's network


def test_lora_ppo_settings_are_the_projects() -> None:
    defaults = {name: p.default for name, p in
                inspect.signature(LoraGuidedPPO.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
    chosen = _chosen("lora-ppo")
    tuned_keys = {"learning_rate": chosen["learning_rate"], "cost_coef": chosen["cost_coef"],
                  "ent_coef": chosen["ent_coef"]}
    for env_id, entry in _entries("lora_ppo").items():
        expected = {k: defaults[k] for k in ("learning_rate", "cost_coef", "value_lr_scale",
                                             "n_steps", "batch_size", "gae_lambda",
                                             "clip_range", "ent_coef", "vf_coef")}
        trained_head = env_id == TOOLBENCH and chosen["action_head"] == "trained"
        if env_id == TOOLBENCH:
            expected.update(tuned_keys)
        assert {k: entry[k] for k in expected} == expected, env_id
        assert entry.get("action_lr_scale") == (1.0 if trained_head else None), env_id
        assert eval(entry["policy_kwargs"])["lora_rank"] is not None


def test_config_path_rejects_an_unknown_algo() -> None:
    with pytest.raises(ValueError, match="'sac'"):
        config_path("sac")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-W", "ignore", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _zoo_args(algo: str, logs: Path) -> list[str]:
    return ["--algo", algo, "--env", TOOLBENCH, "--gym-packages", "cost_envs",
            "-conf", str(config_path(algo)), "-n", "512", "-f", str(logs), "--seed", "0",
            "--eval-freq", "-1"]


@needs_zoo
def test_zoo_trains_ppo_with_the_shipped_file_and_a_budget(tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    _run("-m", "rl_zoo3.train", *_zoo_args("ppo", tmp_path), "--env-kwargs", "budget:0.05",
         "on_exceed:'truncate'", cwd=tmp_path)
    run = tmp_path / "ppo" / "cost_envs-ToolBench-v0_1"
    model = PPO.load(run / "cost_envs-ToolBench-v0.zip", device="cpu")
    assert isinstance(model.policy, AllocatorPolicy) and model.policy.lora_rank is None
    assert model.n_steps == _entries("ppo")[TOOLBENCH]["n_steps"]
    # The budget is inside the env, beneath the zoo's Monitor: the monitor counts every
    # step of every finished episode, the budget-cut ones too (ToolBench ends by turn 5).
    with (run / "0.monitor.csv").open() as handle:
        next(handle)  # the JSON header line
        lengths = [int(row["l"]) for row in csv.DictReader(handle)]
    assert 512 - 5 <= sum(lengths) <= 512


@needs_zoo
def test_zoo_continues_lora_guided_ppo_from_its_warm_start(tmp_path: Path) -> None:
    import gymnasium as gym
    import torch

    warm = tmp_path / "warm.zip"
    _run("-m", "agents.zoo", "warm-start", "--env", TOOLBENCH, "--out", str(warm),
         "--episodes", "20", "--epochs", "1", cwd=tmp_path)
    _run("-m", "agents.zoo", "train", *_zoo_args("lora_ppo", tmp_path), "-i", str(warm),
         cwd=tmp_path)
    env = gym.make(TOOLBENCH)
    start = LoraGuidedPPO.load(warm, env=env, device="cpu").policy.state_dict()
    final = LoraGuidedPPO.load(tmp_path / "lora_ppo" / "cost_envs-ToolBench-v0_1" /
                               "cost_envs-ToolBench-v0.zip", env=env, device="cpu")
    state = final.policy.state_dict()
    assert final.cost_coef == _entries("lora_ppo")[TOOLBENCH]["cost_coef"]
    for name, tensor in start.items():
        moved = not torch.equal(tensor, state[name])
        # the frozen base is the warm start's; RL moved the adapters and the heads
        assert moved == ("base_layer" not in name), name
