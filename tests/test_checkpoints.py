"""Checkpoints: pickle-free save/load of allocators and adapters, merging, and safety.

Crafted and corrupt files are in ``test_safe_loading.py``, concurrent and interrupted
saves in ``test_safe_saving.py``.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from stable_baselines3 import PPO

import agents.learners.checkpoints
from agents.learners.checkpoints import (
    UnsafeCheckpointError,
    base_fingerprint,
    load_adapter,
    load_allocator,
    merge_adapter,
    save_adapter,
    save_allocator,
)
from agents.learners.common.adapters import has_lora
from agents.learners.common.policies import AllocatorPolicy, load_base
from agents.learners.pretrain import pretrained_base_path, save_base
from agents.learners.supervised import SupervisedConfig, greedy_traces, policy_for
from agents.learners.training import TrainedAllocator, train
from cost_envs.envs.toolbench import toolbench_pool

torch.set_num_threads(1)

FLIGHT = "cost_envs/FlightPlanner-v0"
TOOLBENCH = "cost_envs/ToolBench-v0"
SMALL = SupervisedConfig(episodes=30, epochs=2)


@pytest.fixture(scope="module")
def allocator(tmp_path_factory) -> TrainedAllocator:
    # SB3 would otherwise leave an empty logger directory in the system temp dir
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
        return train(FLIGHT, "lora-ppo", 256, seed=3, supervised=SMALL)


@pytest.fixture(scope="module")
def pool_allocator() -> TrainedAllocator:
    # a non-default pool, so that loading must rebuild the env from the saved env_kwargs
    return train(TOOLBENCH, "lora", 1, seed=1, env_kwargs={"pool": toolbench_pool(5)},
                 supervised=SMALL)


@pytest.fixture(scope="module")
def saved(allocator, tmp_path_factory) -> Path:
    return save_allocator(allocator, tmp_path_factory.mktemp("saved") / "model")


def _observations(env_id: str, env_kwargs: dict | None = None, n: int = 500) -> np.ndarray:
    """Sampled observations plus real ones from greedy episodes."""
    env = gym.make(env_id, **(env_kwargs or {}))
    env.observation_space.seed(0)
    sampled = np.stack([env.observation_space.sample() for _ in range(n)])
    real = greedy_traces(env, 40, seed=99).observations
    env.close()
    return np.concatenate([sampled, real]).astype(np.float32)


def _probs(policy: AllocatorPolicy, obs: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        return policy.action_probabilities(torch.as_tensor(obs))


def _copy(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(saved, target)
    return target


# ------------------------------------------------------------------ round trip
def test_save_allocator_writes_safetensors_and_json(allocator, saved):
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((saved / "config.json").read_text())
    assert config["format"] == "cost-envs-allocator"
    assert config["version"] == 1
    assert config["architecture"] == {"hidden_sizes": [64, 64], "lora_rank": 8,
                                      "lora_alpha": 16.0}
    tensors = load_file(saved / "model.safetensors")
    # The shared encoder is stored once, not under SB3's pi_/vf_ aliases as well.
    own = {name for name in allocator.policy.state_dict()
           if not name.startswith(("pi_features_extractor.", "vf_features_extractor."))}
    assert set(tensors) == own
    assert any(name.startswith("features_extractor.") for name in tensors)


def test_load_allocator_round_trip(allocator, saved):
    loaded = load_allocator(saved)
    assert isinstance(loaded, TrainedAllocator)
    assert loaded.env_id == allocator.env_id == FLIGHT
    assert loaded.env_kwargs == allocator.env_kwargs
    assert loaded.method == "lora-ppo"
    assert loaded.seed == 3
    assert loaded.timesteps == allocator.timesteps == 512  # 256 asked, one whole rollout run
    assert loaded.base == "pretrained"
    assert loaded.policy.architecture() == allocator.policy.architecture()
    assert loaded.history == allocator.history
    assert loaded.history  # lora-ppo records a learning curve
    assert not loaded.policy.training

    own, other = allocator.policy.state_dict(), loaded.policy.state_dict()
    assert set(own) == set(other)
    for name, tensor in own.items():
        assert torch.equal(tensor, other[name]), name

    obs = _observations(FLIGHT)
    expected, _ = allocator.predict(obs, deterministic=True)
    actions, _ = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    assert torch.equal(_probs(loaded.policy, obs), _probs(allocator.policy, obs))


def test_load_allocator_rebuilds_the_saved_pool(pool_allocator, tmp_path):
    path = save_allocator(pool_allocator, tmp_path / "toolbench")
    loaded = load_allocator(str(path))  # a str path works too
    assert loaded.method == "lora"
    assert loaded.timesteps == 0
    assert loaded.env_kwargs == pool_allocator.env_kwargs
    assert loaded.env_kwargs["pool"] == toolbench_pool(5).to_dict()
    assert loaded.policy.action_space.n == 5
    obs = _observations(TOOLBENCH, {"pool": toolbench_pool(5)}, n=200)
    np.testing.assert_array_equal(loaded.predict(obs)[0], pool_allocator.predict(obs)[0])


def test_save_allocator_overwrites_cleanly(allocator, pool_allocator, tmp_path):
    path = save_allocator(pool_allocator, tmp_path / "model")
    save_allocator(allocator, path)
    assert load_allocator(path).env_id == FLIGHT
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


# ---------------------------------------------------------------------- merging
def test_merge_adapter_computes_the_same_function(allocator):
    policy = allocator.policy
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    assert any(p.abs().max() > 0 for p in lora_b)  # the adapter is not a no-op
    merged = merge_adapter(policy)
    obs = _observations(FLIGHT, n=2000)
    np.testing.assert_array_equal(merged.predict(obs, deterministic=True)[0],
                                  policy.predict(obs, deterministic=True)[0])
    torch.testing.assert_close(_probs(merged, obs), _probs(policy, obs), rtol=0.0, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(merged.predict_values(torch.as_tensor(obs)),
                                   policy.predict_values(torch.as_tensor(obs)),
                                   rtol=0.0, atol=1e-5)


def test_merge_adapter_removes_lora_and_leaves_the_original(allocator):
    from peft.tuners.lora import LoraLayer

    policy = allocator.policy
    before = {name: tensor.clone() for name, tensor in policy.state_dict().items()}
    merged = merge_adapter(policy)

    assert merged is not policy
    assert merged.lora_rank is None
    assert not has_lora(merged)
    assert not any(isinstance(m, LoraLayer) for m in merged.features_extractor.modules())
    assert all(type(layer) is torch.nn.Linear for layer in merged.features_extractor.net[::2])
    assert not any(".lora_" in name for name in merged.state_dict())
    # the merged weight is W + (alpha / r) B A
    layer = policy.features_extractor.net[0]
    delta = layer.lora_B["default"].weight @ layer.lora_A["default"].weight * (16.0 / 8)
    torch.testing.assert_close(merged.features_extractor.net[0].weight,
                               layer.get_base_layer().weight + delta)

    assert policy.lora_rank == 8
    assert has_lora(policy)
    lora_layers = [m for m in policy.features_extractor.modules() if isinstance(m, LoraLayer)]
    assert lora_layers and not any(m.merged for m in lora_layers)
    after = policy.state_dict()
    assert set(after) == set(before)
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())


def test_merged_policy_saves_and_loads_as_a_plain_network(allocator, tmp_path):
    merged = merge_adapter(allocator.policy)
    deployable = TrainedAllocator(merged, FLIGHT, {}, "lora-ppo", 3, 256, "pretrained")
    loaded = load_allocator(save_allocator(deployable, tmp_path / "merged"))
    assert loaded.policy.lora_rank is None
    obs = _observations(FLIGHT, n=200)
    np.testing.assert_array_equal(loaded.predict(obs)[0], allocator.predict(obs)[0])


# ------------------------------------------------------------------- no pickle
def _forbid_unpickling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(cloudpickle, "loads", refuse)
    monkeypatch.setattr(cloudpickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)


def test_load_allocator_never_unpickles(allocator, saved, monkeypatch):
    _forbid_unpickling(monkeypatch)
    with pytest.raises(AssertionError):  # the guard is live
        pickle.loads(pickle.dumps(1))
    loaded = load_allocator(saved)
    obs = _observations(FLIGHT, n=100)
    np.testing.assert_array_equal(loaded.predict(obs)[0], allocator.predict(obs)[0])


def test_load_adapter_never_unpickles(allocator, tmp_path, monkeypatch):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    fresh = policy_for(gym.make(FLIGHT), base=str(pretrained_base_path(FLIGHT)))
    _forbid_unpickling(monkeypatch)
    load_adapter(fresh, directory)


# ------------------------------------------------------------------ SB3 .zip
@pytest.fixture(scope="module")
def sb3_zip(tmp_path_factory):
    env = gym.make(FLIGHT)
    model = PPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, n_steps=64,
                batch_size=64, device="cpu", seed=0)
    path = tmp_path_factory.mktemp("sb3") / "ppo_model"
    model.save(path)
    env.close()
    return model, path.with_suffix(".zip")


def test_sb3_zip_is_refused_without_trust_pickle(sb3_zip, monkeypatch):
    _, path = sb3_zip
    assert path.is_file()
    # refused before anything is opened: no unpickling happens on the way to the error
    _forbid_unpickling(monkeypatch)
    with pytest.raises(UnsafeCheckpointError) as info:
        load_allocator(path)
    message = str(info.value)
    assert str(path) in message
    assert "trust_pickle=True" in message
    assert "--trust-pickle" in message
    assert "cloudpickle" in message
    assert "run any code" in message
    assert isinstance(info.value, ValueError)


def test_sb3_zip_without_suffix_is_refused_too(sb3_zip, tmp_path):
    _, path = sb3_zip
    renamed = tmp_path / "model.bin"
    shutil.copy(path, renamed)
    with pytest.raises(UnsafeCheckpointError, match="trust_pickle"):
        load_allocator(renamed)


def test_sb3_zip_loads_with_trust_pickle(sb3_zip):
    model, path = sb3_zip
    loaded = load_allocator(path, trust_pickle=True)
    assert isinstance(loaded, PPO)
    obs = _observations(FLIGHT, n=100)
    actions, _ = loaded.predict(obs, deterministic=True)
    assert actions.shape == (len(obs), 6)
    np.testing.assert_array_equal(actions, model.predict(obs, deterministic=True)[0])


# ---------------------------------------------------------------------- adapters
def test_adapter_round_trip_into_a_fresh_policy(allocator, tmp_path):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    assert sorted(p.name for p in directory.iterdir()) == ["adapter.safetensors",
                                                           "adapter_config.json"]
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["format"] == "cost-envs-adapter"
    assert config["n_agents"] == 6
    assert config["base_sha256"] == base_fingerprint(allocator.policy)
    tensors = load_file(directory / "adapter.safetensors")
    # everything but the frozen base
    assert tensors
    assert not any("base_layer" in name for name in tensors)
    assert {"action_net.weight", "value_net.weight"} <= set(tensors)

    env = gym.make(FLIGHT)
    fresh = policy_for(env, base=str(pretrained_base_path(FLIGHT)))
    obs = _observations(FLIGHT)
    assert not torch.equal(_probs(fresh, obs), _probs(allocator.policy, obs))
    assert load_adapter(fresh, directory) is fresh
    assert torch.equal(_probs(fresh, obs), _probs(allocator.policy, obs))
    fresh.set_training_mode(False)
    np.testing.assert_array_equal(fresh.predict(obs, deterministic=True)[0],
                                  allocator.predict(obs, deterministic=True)[0])
    own = allocator.policy.state_dict()
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, own[name]), name


def test_adapter_refuses_a_different_random_base(allocator, tmp_path):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    other = policy_for(gym.make(FLIGHT), base=None)
    with pytest.raises(ValueError, match="base_sha256"):
        load_adapter(other, directory)


def test_adapter_refuses_a_slightly_different_base(allocator, tmp_path):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    state, config = load_base(pretrained_base_path(FLIGHT))
    state["2.bias"] = state["2.bias"].clone()
    state["2.bias"][0] += 1e-4
    nudged = save_base(state, config, tmp_path / "nudged")
    other = policy_for(gym.make(FLIGHT), base=str(nudged))
    before = {name: tensor.clone() for name, tensor in other.state_dict().items()}
    with pytest.raises(ValueError, match="base_sha256") as info:
        load_adapter(other, directory)
    assert base_fingerprint(allocator.policy) in str(info.value)
    # nothing was loaded
    assert all(torch.equal(other.state_dict()[n], t) for n, t in before.items())


def test_adapter_refuses_another_architecture_or_pool(allocator, tmp_path):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    base = str(pretrained_base_path(FLIGHT))
    with pytest.raises(ValueError, match="architecture"):
        load_adapter(policy_for(gym.make(FLIGHT), base=base, lora_rank=4), directory)
    smaller = gym.make(FLIGHT, pool={
        "skills": ["planning", "search", "validation"],
        "agents": [{"name": "p", "role": "planner", "cost": 0.01, "flops": 1.0,
                    "capability": [0.8, 0.0, 0.0]},
                   {"name": "s", "role": "search", "cost": 0.01, "flops": 1.0,
                    "capability": [0.0, 0.8, 0.0]}]})
    with pytest.raises(ValueError, match="n_agents"):
        load_adapter(policy_for(smaller, base=base), directory)


def test_policy_without_lora_cannot_save_an_adapter(tmp_path):
    plain = policy_for(gym.make(FLIGHT), lora_rank=None)
    with pytest.raises(ValueError, match="no LoRA adapter"):
        save_adapter(plain, tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------- atomicity
def _half_written(tensors, filename, *args, **kwargs):
    """Stand-in for safetensors' save_file that dies after writing some bytes."""
    Path(filename).write_bytes(b"\x00" * 16)
    raise OSError("disk full")


def test_failed_save_keeps_the_old_model(allocator, pool_allocator, tmp_path, monkeypatch):
    path = save_allocator(allocator, tmp_path / "model")
    contents = {p.name: p.read_bytes() for p in path.iterdir()}
    monkeypatch.setattr(agents.learners.checkpoints, "save_file", _half_written)
    with pytest.raises(OSError, match="disk full"):
        save_allocator(pool_allocator, path)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == contents
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporaries left
    monkeypatch.undo()
    loaded = load_allocator(path)
    assert loaded.env_id == FLIGHT


def test_failed_first_save_leaves_nothing(allocator, tmp_path, monkeypatch):
    monkeypatch.setattr(agents.learners.checkpoints, "save_file", _half_written)
    with pytest.raises(OSError, match="disk full"):
        save_allocator(allocator, tmp_path / "model")
    assert list(tmp_path.iterdir()) == []


def test_failed_adapter_save_keeps_the_old_adapter(allocator, tmp_path, monkeypatch):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    contents = {p.name: p.read_bytes() for p in directory.iterdir()}
    monkeypatch.setattr(agents.learners.checkpoints, "save_file", _half_written)
    with pytest.raises(OSError, match="disk full"):
        save_adapter(allocator.policy, directory)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == contents
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"]


def test_save_over_a_file_is_refused(allocator, tmp_path):
    target = tmp_path / "model"
    target.write_text("not a directory")
    with pytest.raises(ValueError, match="not a directory"):
        save_allocator(allocator, target)
    assert target.read_text() == "not a directory"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


# ------------------------------------------------------------- what a save may replace
def test_save_refuses_a_directory_that_is_not_a_checkpoint(allocator, tmp_path):
    (tmp_path / "other_model").mkdir()
    (tmp_path / "notes.txt").write_text("precious")
    with pytest.raises(ValueError, match="not empty and is not a cost-envs-allocator"):
        save_allocator(allocator, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "precious"
    assert (tmp_path / "other_model").is_dir()


def test_save_into_an_empty_directory(allocator, tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    save_allocator(allocator, target)
    assert (target / "model.safetensors").is_file()


def test_adapter_save_refuses_a_model_directory(allocator, saved, tmp_path):
    # a model checkpoint is not an adapter checkpoint: replacing it would lose the model
    target = _copy(saved, tmp_path)
    with pytest.raises(ValueError, match="cost-envs-adapter"):
        save_adapter(allocator.policy, target)
    assert (target / "model.safetensors").is_file()


def test_model_directory_named_zip_loads_without_unpickling(allocator, tmp_path):
    path = save_allocator(allocator, tmp_path / "model.zip")
    loaded = load_allocator(path)
    obs = _observations(FLIGHT, n=50)
    assert np.array_equal(loaded.predict(obs)[0], allocator.predict(obs)[0])
