"""Loading crafted or corrupt checkpoints: one-line ``ValueError`` naming the file and key.

Covers models (``config.json`` + ``model.safetensors``), adapters and frozen bases: a
config cannot change the env a model is scored on, a corrupt tensor file is a clean
error, and the strict JSON reader refuses duplicates, NaN, huge numbers and deep nesting.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from safetensors.torch import load_file, save_file

from agents.learners.checkpoints import (
    base_fingerprint,
    env_arguments,
    load_adapter,
    load_allocator,
    save_adapter,
    save_allocator,
)
from agents.learners.common.policies import load_base
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import SupervisedConfig, policy_for
from agents.learners.training import GYM_MAKE_OPTIONS, TrainedAllocator, train

torch.set_num_threads(1)

FLIGHT = "cost_envs/FlightPlanner-v0"
SMALL = SupervisedConfig(episodes=30, epochs=2)
#: Errors that must never escape a loader (they would be tracebacks on the CLI).
RAW = (OverflowError, RecursionError, TypeError, AssertionError, KeyError, RuntimeError)


@pytest.fixture(scope="module")
def allocator() -> TrainedAllocator:
    # the supervised LoRA allocator: a trained adapter in about a second
    return train(FLIGHT, "lora", 1, seed=3, supervised=SMALL)


@pytest.fixture(scope="module")
def saved(allocator, tmp_path_factory) -> Path:
    return save_allocator(allocator, tmp_path_factory.mktemp("saved") / "model")


@pytest.fixture(scope="module")
def adapter(allocator, tmp_path_factory) -> Path:
    return save_adapter(allocator.policy, tmp_path_factory.mktemp("adapter") / "adapter")


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def _fresh_policy():
    return policy_for(gym.make(FLIGHT), base=str(pretrained_base_path(FLIGHT)))


def _refused(load, *names: str) -> str:
    """Run ``load``; it must raise one ``ValueError`` of one line naming every ``names``."""
    try:
        load()
    except RAW as error:  # pragma: no cover - the failure being tested for
        pytest.fail(f"raw {type(error).__name__} escaped: {error}")
    except ValueError as error:
        message = str(error)
        assert "\n" not in message, message
        for name in names:
            assert name in message, (name, message)
        return message
    pytest.fail("no error raised")


# ------------------------------------------------------------------- bad files
def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        load_allocator(tmp_path / "absent")


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_missing_file(saved, tmp_path, name):
    path = _copy(saved, tmp_path)
    (path / name).unlink()
    with pytest.raises(FileNotFoundError, match=rf"missing {name}"):
        load_allocator(path)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"format": "cost-envs-adapter"},
         r"config\.json: expected format 'cost-envs-allocator', got 'cost-envs-adapter'"),
        ({"format": None}, r"config\.json: expected format 'cost-envs-allocator'"),
        ({"version": 2}, r"config\.json: format version 2 is not supported"),
        ({"version": "1"}, r"config\.json: format version '1' is not supported"),
        ({"method": "dqn"}, r"config\.json: method 'dqn' is not one of"),
    ],
)
def test_bad_config_is_refused(saved, tmp_path, changes, pattern):
    path = _copy(saved, tmp_path)
    _edit_config(path, **changes)
    with pytest.raises(ValueError, match=pattern):
        load_allocator(path)


def test_config_missing_a_required_key(saved, tmp_path):
    path = _copy(saved, tmp_path)
    config = json.loads((path / "config.json").read_text())
    del config["env_id"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json: missing keys \['env_id'\]"):
        load_allocator(path)


@pytest.mark.parametrize("text", ["{not json", "", '["a", "list"]', "42"])
def test_config_that_is_not_a_json_object(saved, tmp_path, text):
    path = _copy(saved, tmp_path)
    (path / "config.json").write_text(text)
    pattern = r"config\.json: (line \d+, column \d+: not valid JSON|expected format)"
    with pytest.raises(ValueError, match=pattern):
        load_allocator(path)


def test_invalid_json_names_the_problem(saved, tmp_path):
    path = _copy(saved, tmp_path)
    (path / "config.json").write_text('{"format": "cost-envs-allocator",')
    with pytest.raises(ValueError, match=r"config\.json: line 1, column \d+: not valid JSON"):
        load_allocator(path)


def test_tensor_with_wrong_shape(saved, tmp_path):
    path = _copy(saved, tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["action_net.weight"] = torch.zeros(7, 64)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors") as info:
        load_allocator(path)
    assert "wrong shape ['action_net.weight']" in str(info.value)


def test_missing_and_unexpected_tensors(saved, tmp_path):
    path = _copy(saved, tmp_path)
    tensors = load_file(path / "model.safetensors")
    del tensors["value_net.bias"]
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors") as info:
        load_allocator(path)
    assert "missing ['value_net.bias']" in str(info.value)
    assert "unexpected ['extra.weight']" in str(info.value)


def test_architecture_that_does_not_match_the_tensors(saved, tmp_path):
    path = _copy(saved, tmp_path)
    _edit_config(path, architecture={"hidden_sizes": [64, 64], "lora_rank": 4,
                                     "lora_alpha": 16.0})
    with pytest.raises(ValueError, match=r"model\.safetensors: tensors do not match"):
        load_allocator(path)


def test_missing_adapter_file(allocator, tmp_path):
    directory = save_adapter(allocator.policy, tmp_path / "adapter")
    (directory / "adapter.safetensors").unlink()
    fresh = policy_for(gym.make(FLIGHT), base=str(pretrained_base_path(FLIGHT)))
    with pytest.raises(FileNotFoundError, match=r"missing adapter\.safetensors"):
        load_adapter(fresh, directory)


def test_missing_zip_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model"):
        load_allocator(tmp_path / "absent.zip")


# ------------------------------------------------------- adapters load exactly what they hold
def _adapter_with(allocator, tmp_path, edit) -> Path:
    path = save_adapter(allocator.policy, tmp_path / "adapter")
    tensors = load_file(path / "adapter.safetensors")
    edit(tensors, allocator.policy)
    save_file(tensors, path / "adapter.safetensors")
    return path


def test_adapter_missing_lora_tensors_is_refused(allocator, tmp_path):
    def drop_b(tensors, policy):
        for name in [n for n in tensors if "lora_B" in n]:
            del tensors[name]

    path = _adapter_with(allocator, tmp_path, drop_b)
    fresh = policy_for(gym.make(FLIGHT), base=str(pretrained_base_path(FLIGHT)))
    with pytest.raises(ValueError, match=r"missing .*lora_B"):
        load_adapter(fresh, path)


def test_adapter_carrying_base_weights_is_refused(allocator, tmp_path):
    def add_base(tensors, policy):
        name, param = policy.parameter_groups()["base"][0]
        tensors[name] = torch.zeros_like(param).contiguous()

    path = _adapter_with(allocator, tmp_path, add_base)
    fresh = policy_for(gym.make(FLIGHT), base=str(pretrained_base_path(FLIGHT)))
    before = base_fingerprint(fresh)
    with pytest.raises(ValueError, match=r"unexpected .*base_layer"):
        load_adapter(fresh, path)
    assert base_fingerprint(fresh) == before


# ------------------------------------------- 1. a config cannot change the env it is scored on
@pytest.mark.parametrize(("key", "value"), [
    ("max_episode_steps", 1), ("disable_env_checker", True), ("autoreset", True),
    ("apply_api_compatibility", True), ("order_enforce", False), ("render_mode", "human"),
])
def test_env_kwargs_refuse_gym_make_options(saved, tmp_path, key, value):
    path = _copy(saved, tmp_path)
    _edit_config(path, env_kwargs={key: value})
    message = _refused(lambda: load_allocator(path), str(path / "config.json"), key)
    assert "gym.make option" in message


def test_a_time_limit_in_the_config_cannot_zero_the_score(saved, tmp_path):
    # gym.make would accept it and cut every episode after one step: success 0.93 -> 0
    env = gym.make(FLIGHT, max_episode_steps=1)
    env.close()
    path = _copy(saved, tmp_path)
    _edit_config(path, env_kwargs={"max_episode_steps": 1})
    _refused(lambda: load_allocator(path), "config.json", "max_episode_steps")


def test_env_kwargs_must_be_arguments_of_the_env(saved, tmp_path):
    path = _copy(saved, tmp_path)
    _edit_config(path, env_kwargs={"pool_size": 3})  # a ToolBench argument, not a flight one
    message = _refused(lambda: load_allocator(path), "config.json", "'pool_size'", FLIGHT)
    assert "'pool'" in message and "'reward_weights'" in message  # the valid names


def test_env_arguments_are_read_from_the_registered_constructor():
    # budget and on_exceed: the registered factory's (cost_envs.registration), env arguments
    # like the class's own, so a model trained under a budget records it
    assert env_arguments(FLIGHT) == {"pool", "reward_weights", "render_mode", "budget",
                                     "on_exceed"}
    assert "pool_size" in env_arguments("cost_envs/ToolBench-v0")
    assert "render_mode" in GYM_MAKE_OPTIONS  # an argument, but the viewer's, not a model's


def test_env_kwargs_the_env_rejects_name_the_config(saved, tmp_path):
    path = _copy(saved, tmp_path)
    _edit_config(path, env_kwargs={"pool": {"skills": ["planning"], "agents": "none"}})
    _refused(lambda: load_allocator(path), str(path / "config.json"), "env_kwargs")


def test_save_refuses_env_kwargs_that_would_not_load(allocator, tmp_path):
    crafted = TrainedAllocator(allocator.policy, FLIGHT, {"max_episode_steps": 1}, "lora", 0,
                               0, "pretrained")
    _refused(lambda: save_allocator(crafted, tmp_path / "model"), "max_episode_steps")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------- 2. corrupt tensor files
def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("data", "x")
    return buffer.getvalue()


def _duplicate_header_key(data: bytes) -> bytes:
    """The same tensors, the header naming its first tensor twice (safetensors keeps the last)."""
    (size,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + size].decode()
    first = next(key for key in json.loads(header) if key != "__metadata__")
    entry = json.dumps({first: json.loads(header)[first]})[1:-1]
    doubled = ("{" + entry + "," + header.strip()[1:]).encode()
    return struct.pack("<Q", len(doubled)) + doubled + data[8 + size:]


CORRUPTIONS = {
    "truncated": lambda data: data[: len(data) // 2],
    "bytes appended": lambda data: data + b"\0" * 7,
    "empty": lambda data: b"",
    "a zip": lambda data: _zip_bytes(),
    "a pickle": lambda data: pickle.dumps({"weight": [1.0, 2.0]}),
    "bad header": lambda data: struct.pack("<Q", 12) + b'{"a": [1, 2' + data[20:],
    "header length beyond the file": lambda data: struct.pack("<Q", 2**40) + data[8:],
    "a header that repeats a key": _duplicate_header_key,
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_model_tensors_are_a_value_error_naming_the_file(saved, tmp_path, corruption):
    path = _copy(saved, tmp_path)
    weights = path / "model.safetensors"
    weights.write_bytes(CORRUPTIONS[corruption](weights.read_bytes()))
    _refused(lambda: load_allocator(path), str(weights), "safetensors")


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_adapter_tensors_are_a_value_error_naming_the_file(adapter, tmp_path,
                                                                   corruption):
    path = _copy(adapter, tmp_path)
    weights = path / "adapter.safetensors"
    weights.write_bytes(CORRUPTIONS[corruption](weights.read_bytes()))
    _refused(lambda: load_adapter(_fresh_policy(), path), str(weights))


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_base_tensors_are_a_value_error_naming_the_file(tmp_path, corruption):
    shipped = pretrained_base_path(FLIGHT)
    weights = tmp_path / shipped.name
    weights.write_bytes(CORRUPTIONS[corruption](shipped.read_bytes()))
    shutil.copy(shipped.with_suffix(".json"), weights.with_suffix(".json"))
    _refused(lambda: load_base(weights), str(weights))
    _refused(lambda: policy_for(gym.make(FLIGHT), base=str(weights)), str(weights))


def test_a_directory_in_place_of_the_tensors(saved, tmp_path):
    path = _copy(saved, tmp_path)
    (path / "model.safetensors").unlink()
    (path / "model.safetensors").mkdir()
    _refused(lambda: load_allocator(path), str(path / "model.safetensors"), "is a directory",
             "expected a regular file")


# ---------------------------------------------------- 5. NaN and wrongly typed weights
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_model_weights_are_refused(saved, tmp_path, value):
    path = _copy(saved, tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["action_net.bias"][1] = value
    save_file(tensors, path / "model.safetensors")
    _refused(lambda: load_allocator(path), "model.safetensors", "'action_net.bias'",
             "NaN or infinite")


def test_non_finite_adapter_and_base_weights_are_refused(adapter, tmp_path):
    path = _copy(adapter, tmp_path)
    tensors = load_file(path / "adapter.safetensors")
    name = next(name for name in tensors if "lora_B" in name)
    tensors[name][0, 0] = float("nan")
    save_file(tensors, path / "adapter.safetensors")
    _refused(lambda: load_adapter(_fresh_policy(), path), "adapter.safetensors", name)

    state, config = load_base(pretrained_base_path(FLIGHT))
    state["0.weight"][3, 3] = float("inf")
    save_file(state, tmp_path / "base.safetensors")
    (tmp_path / "base.json").write_text(json.dumps(config))
    _refused(lambda: load_base(tmp_path / "base.safetensors"), "base.safetensors", "'0.weight'")


def test_integer_or_double_tensors_are_refused(saved, tmp_path):
    path = _copy(saved, tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["value_net.bias"] = torch.zeros(1, dtype=torch.int64)
    save_file(tensors, path / "model.safetensors")
    _refused(lambda: load_allocator(path), "model.safetensors", "'value_net.bias'", "int64")
    tensors["value_net.bias"] = torch.zeros(1, dtype=torch.float64)
    save_file(tensors, path / "model.safetensors")
    _refused(lambda: load_allocator(path), "model.safetensors", "value_net.bias", "float64")
    # a base in float64 too (issue #26: load_base took what the model loader refused)
    state, config = load_base(pretrained_base_path(FLIGHT))
    save_file({name: tensor.double() for name, tensor in state.items()},
              tmp_path / "base.safetensors")
    (tmp_path / "base.json").write_text(json.dumps(config))
    _refused(lambda: load_base(tmp_path / "base.safetensors"), "base.safetensors",
             "expected a float32 tensor, got float64")


# -------------------------------------------------------- 5. the strict JSON reader
def _config_text(saved: Path, replace: str, by: str) -> str:
    text = json.dumps(json.loads((saved / "config.json").read_text()))
    assert replace in text
    return text.replace(replace, by, 1)


@pytest.mark.parametrize(("replace", "by", "key"), [
    ('"seed": 3', '"seed": 1' + "0" * 400, "seed"),
    ('"lora_alpha": 16.0', '"lora_alpha": 1e999', "architecture.lora_alpha"),
    ('"lora_alpha": 16.0', '"lora_alpha": NaN', "architecture.lora_alpha"),
    ('"timesteps": 0', '"timesteps": -Infinity', "timesteps"),
    ('"seed": 3', '"seed": 3, "seed": 4', "top level: duplicate key 'seed'"),
    ('"hidden_sizes": [64, 64]', '"hidden_sizes": [64, 64], "hidden_sizes": [8]',
     "architecture: duplicate key 'hidden_sizes'"),
])
def test_config_numbers_and_duplicates_name_the_key(saved, tmp_path, replace, by, key):
    path = _copy(saved, tmp_path)
    (path / "config.json").write_text(_config_text(saved, replace, by))
    # the file, then the key's path in the document: "<file>: architecture.lora_alpha: ..."
    _refused(lambda: load_allocator(path), f"{path / 'config.json'}: {key}")


def test_deeply_nested_config_is_a_value_error(saved, tmp_path):
    path = _copy(saved, tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    (path / "config.json").write_text(_config_text(saved, '"history": []',
                                                   f'"history": {deep}'))
    _refused(lambda: load_allocator(path), "config.json", "nested deeper")


def test_config_with_a_byte_order_mark_loads(saved, tmp_path):
    path = _copy(saved, tmp_path)
    (path / "config.json").write_bytes(b"\xef\xbb\xbf" + (saved / "config.json").read_bytes())
    assert load_allocator(path).env_id == FLIGHT


@pytest.mark.parametrize(("changes", "names"), [
    ({"env_id": 42}, ["env_id", "42"]),
    ({"env_id": {"id": FLIGHT}}, ["env_id"]),
    ({"method": ["lora"]}, ["method"]),
    ({"architecture": {"hidden_sizes": [-64, 64]}}, ["hidden_sizes", "-64"]),
    ({"architecture": {"hidden_sizes": [64.5, 64]}}, ["hidden_sizes", "64.5"]),
    ({"architecture": {"hidden_sizes": []}}, ["hidden_sizes"]),
    ({"architecture": {"hidden_sizes": [10**9, 64]}}, ["hidden_sizes"]),
    ({"architecture": {"lora_rank": 0}}, ["lora_rank"]),
    ({"architecture": {"lora_rank": "8"}}, ["lora_rank"]),
    ({"architecture": {"lora_alpha": -1}}, ["lora_alpha"]),
    ({"architecture": {"dropout": 0.1}}, ["architecture", "dropout"]),
    ({"history": 5}, ["history"]),
    ({"history": [{"cost/cps": "low"}]}, ["history[0]"]),
    ({"seed": -1}, ["seed"]),
    ({"seed": "3"}, ["seed"]),
    ({"timesteps": True}, ["timesteps"]),
    ({"base": "imagenet"}, ["base", "imagenet"]),
    ({"cost_envs_version": 1}, ["cost_envs_version"]),
    ({"version": True}, ["version"]),
    ({"version": 1.0}, ["version"]),
    ({"learning_rate": 0.1}, ["unknown keys", "learning_rate"]),
])
def test_malformed_model_config_is_a_value_error(saved, tmp_path, changes, names):
    path = _copy(saved, tmp_path)
    _edit_config(path, **changes)
    _refused(lambda: load_allocator(path), str(path / "config.json"), *names)


def _edit_json(path: Path, **changes) -> None:
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(("changes", "names"), [
    ({"n_agents": 10**400}, ["n_agents"]),
    ({"n_agents": 0}, ["n_agents"]),
    ({"groups": "adapter"}, ["groups"]),
    ({"groups": [{"name": "adapter"}]}, ["groups"]),
    ({"architecture": {"hidden_sizes": "64"}}, ["hidden_sizes"]),
    ({"rank": 8}, ["unknown keys", "rank"]),
])
def test_malformed_adapter_config_is_a_value_error(adapter, tmp_path, changes, names):
    path = _copy(adapter, tmp_path)
    _edit_json(path / "adapter_config.json", **changes)
    _refused(lambda: load_adapter(_fresh_policy(), path), "adapter_config.json", *names)


def test_adapter_config_with_duplicate_keys(adapter, tmp_path):
    path = _copy(adapter, tmp_path)
    text = (path / "adapter_config.json").read_text()
    (path / "adapter_config.json").write_text(text.replace('"n_agents": 6',
                                                           '"n_agents": 6, "n_agents": 7'))
    _refused(lambda: load_adapter(_fresh_policy(), path), "adapter_config.json", "'n_agents'",
             "duplicate")


def _base_copy(tmp_path: Path) -> Path:
    shipped = pretrained_base_path(FLIGHT)
    weights = tmp_path / shipped.name
    shutil.copy(shipped, weights)
    shutil.copy(shipped.with_suffix(".json"), weights.with_suffix(".json"))
    return weights


@pytest.mark.parametrize(("changes", "names"), [
    ({"obs_dim": 10**400}, ["obs_dim"]),
    ({"obs_dim": "15"}, ["obs_dim"]),
    ({"hidden_sizes": [-64, 64]}, ["hidden_sizes"]),
    ({"hidden_sizes": 64}, ["hidden_sizes"]),
    ({"first_loss": "low"}, ["first_loss"]),
    ({"recipe": []}, ["recipe"]),
    ({"license": "MIT"}, ["unknown keys", "license"]),
    ({"hidden_sizes": [64, 32]}, ["tensors do not fit", "2.weight"]),
])
def test_malformed_base_config_is_a_value_error(tmp_path, changes, names):
    weights = _base_copy(tmp_path)
    _edit_json(weights.with_suffix(".json"), **changes)
    # the weights or the config file, whichever holds the fault
    _refused(lambda: load_base(weights), str(weights.with_suffix("")), *names)
    _refused(lambda: policy_for(gym.make(FLIGHT), base=str(weights)), *names)


def test_base_config_with_duplicate_keys_or_nan(tmp_path):
    weights = _base_copy(tmp_path)
    config = weights.with_suffix(".json")
    text = config.read_text()
    config.write_text(text.replace('"obs_dim": 15', '"obs_dim": 15, "obs_dim": 17'))
    _refused(lambda: load_base(weights), "FlightPlanner-v0.json", "duplicate key 'obs_dim'")
    config.write_text(text.replace('"final_loss": ', '"final_loss": NaN, "x": '))
    _refused(lambda: load_base(weights), "FlightPlanner-v0.json: final_loss:")
