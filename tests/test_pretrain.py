"""Pretrained frozen bases: randomised pools, the pretraining run, and the shipped files."""

from __future__ import annotations

import inspect
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.learners.common.policies import AllocatorPolicy, MlpEncoder, load_base, tanh_mlp
from agents.learners.pretrain import (
    PRETRAINED_DIR,
    pretrain_base,
    pretrained_base_path,
    randomized_pool,
    save_base,
)
from cost_envs.envs.flight_planner import flight_planner_pool
from cost_envs.envs.toolbench import TOOLBENCH_CATALOGUE
from cost_envs.pool import AgentPool

torch.set_num_threads(1)

FLIGHT = "cost_envs/FlightPlanner-v0"
TOOLBENCH = "cost_envs/ToolBench-v0"
FLIGHT_V1 = "cost_envs/FlightPlanner-v1"
#: Every env a base is shipped for (FlightPlanner-v1 pretrains on v0's pool family; its
#: observation is larger, so it has a base of its own).
FAMILIES = [FLIGHT, FLIGHT_V1, TOOLBENCH]
DEFAULTS = {name: p.default for name, p in inspect.signature(pretrain_base).parameters.items()
            if p.default is not inspect.Parameter.empty}


# -------------------------------------------------------------- random pools
@pytest.mark.parametrize("env_id", FAMILIES)
def test_randomized_pool_is_accepted_by_the_env(env_id):
    rng = np.random.default_rng(0)
    for _ in range(5):
        pool = randomized_pool(env_id, rng)
        assert isinstance(pool, AgentPool)
        assert np.all(pool.costs > 0)
        assert np.all((pool.capabilities >= 0) & (pool.capabilities <= 1))
        env = gym.make(env_id, pool=pool)
        assert env.action_space.n == len(pool)
        assert env.unwrapped.pool.names == pool.names
        obs, _ = env.reset(seed=1)
        assert env.observation_space.contains(obs)
        for _ in range(3):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
            assert np.isfinite(reward)
            if terminated or truncated:
                break
        env.close()


@pytest.mark.parametrize("env_id", FAMILIES)
def test_randomized_pool_differs_between_draws_and_repeats_with_the_seed(env_id):
    rng = np.random.default_rng(3)
    first, second = randomized_pool(env_id, rng), randomized_pool(env_id, rng)
    assert first.to_dict() != second.to_dict()
    again = randomized_pool(env_id, np.random.default_rng(3))
    assert again.to_dict() == first.to_dict()


def test_randomized_flight_planner_pools_keep_planners_and_searchers():
    preset = flight_planner_pool()
    rng = np.random.default_rng(0)
    sizes = []
    for _ in range(200):
        pool = randomized_pool(FLIGHT, rng)
        assert "planner" in pool.roles
        assert "search" in pool.roles
        # only validators are ever dropped, and the order of the preset is kept
        kept = [a.name for a in preset.agents if a.name in pool.names]
        assert list(pool.names) == kept
        assert {a.name for a in preset.agents if a.role != "validator"} <= set(pool.names)
        assert pool.skills == preset.skills
        sizes.append(len(pool))
    # each validator goes with chance 1/4: all three sizes occur, six the most often
    counts = {size: sizes.count(size) for size in set(sizes)}
    assert set(counts) == {4, 5, 6}
    assert counts[6] > counts[5] > counts[4]


def test_randomized_flight_planner_pool_scales_prices_and_capabilities():
    preset = {a.name: a for a in flight_planner_pool().agents}
    rng = np.random.default_rng(1)
    ratios = []
    for _ in range(50):
        for agent in randomized_pool(FLIGHT, rng).agents:
            original = preset[agent.name]
            ratios.append(agent.cost / original.cost)
            assert agent.role == original.role
            assert agent.flops == original.flops
            # one factor in [0.7, 1.15] per agent, clipped to 1
            for new, old in zip(agent.capability, original.capability, strict=True):
                assert min(old * 0.7, 1.0) - 1e-12 <= new <= min(old * 1.15, 1.0) + 1e-12
    log_ratios = np.log(ratios)
    assert abs(log_ratios.mean()) < 0.1
    assert 0.4 < log_ratios.std() < 0.6


def test_randomized_toolbench_pool_is_a_subset_of_the_catalogue():
    catalogue = {a.name: a for a in TOOLBENCH_CATALOGUE.agents}
    order = [a.name for a in TOOLBENCH_CATALOGUE.agents]
    rng = np.random.default_rng(2)
    sizes = set()
    for _ in range(100):
        pool = randomized_pool(TOOLBENCH, rng)
        assert 3 <= len(pool) <= len(catalogue)
        assert pool.skills == TOOLBENCH_CATALOGUE.skills
        assert list(pool.names) == sorted(pool.names, key=order.index)
        for agent in pool.agents:
            assert agent.capability == catalogue[agent.name].capability
            assert agent.cost != catalogue[agent.name].cost
        sizes.add(len(pool))
    assert len(sizes) > 5


@pytest.mark.parametrize("env_id", ["cost_envs/Nope-v0", "CartPole-v1", ""])
def test_randomized_pool_unknown_env_raises(env_id):
    with pytest.raises(ValueError, match="no randomised pool family"):
        randomized_pool(env_id, np.random.default_rng(0))


# --------------------------------------------------------------- pretraining
@pytest.fixture(scope="module")
def small_base():
    return pretrain_base(FLIGHT, n_pools=3, episodes=20, steps=200, hidden_sizes=(32, 16),
                         seed=4)


def test_pretrain_base_lowers_the_loss(small_base):
    _, config = small_base
    assert config["final_loss"] < config["first_loss"]
    assert config["final_loss"] < 0.8 * config["first_loss"]


def test_pretrain_base_config_records_sizes_and_recipe(small_base):
    state, config = small_base
    obs_dim = gym.make(FLIGHT).observation_space.shape[0]
    assert config["env_id"] == FLIGHT
    assert config["obs_dim"] == obs_dim
    assert config["hidden_sizes"] == [32, 16]
    assert config["recipe"]["n_pools"] == 3
    assert config["recipe"]["episodes"] == 20
    assert config["recipe"]["steps"] == 200
    assert config["recipe"]["seed"] == 4
    assert config["torch"] == torch.__version__
    json.dumps(config)  # JSON-ready
    # the state is a plain tanh MLP's
    shapes = {name: tuple(t.shape) for name, t in state.items()}
    assert shapes == {"0.weight": (32, obs_dim), "0.bias": (32,),
                      "2.weight": (16, 32), "2.bias": (16,)}
    tanh_mlp(obs_dim, (32, 16)).load_state_dict(state)


def test_pretrain_base_is_deterministic():
    first, _ = pretrain_base(TOOLBENCH, n_pools=2, episodes=5, steps=20, seed=1)
    second, _ = pretrain_base(TOOLBENCH, n_pools=2, episodes=5, steps=20, seed=1)
    other, _ = pretrain_base(TOOLBENCH, n_pools=2, episodes=5, steps=20, seed=2)
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert not all(torch.equal(first[name], other[name]) for name in first)


def test_save_base_round_trips_through_load_base(small_base, tmp_path):
    state, config = small_base
    weights = save_base(state, config, tmp_path / "sub" / "flight")
    assert weights == tmp_path / "sub" / "flight.safetensors"
    assert weights.is_file()
    assert weights.with_suffix(".json").is_file()
    assert sorted(p.name for p in weights.parent.iterdir()) == ["flight.json",
                                                                "flight.safetensors"]
    loaded, loaded_config = load_base(weights)
    assert loaded_config == config
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert loaded[name].dtype == tensor.dtype
        assert torch.equal(loaded[name], tensor), name
    # and a policy built on it starts from exactly these weights
    env = gym.make(FLIGHT)
    encoder = MlpEncoder(env.observation_space, hidden_sizes=(32, 16), lora_rank=None,
                         base=str(weights))
    for name, tensor in state.items():
        assert torch.equal(encoder.net.state_dict()[name], tensor), name


# ------------------------------------------------------------- shipped bases
@pytest.mark.parametrize("env_id", FAMILIES)
def test_shipped_base_exists_loads_and_fits_the_env(env_id):
    path = pretrained_base_path(env_id)
    assert path.parent == PRETRAINED_DIR
    assert path.is_file()
    assert path.with_suffix(".json").is_file()
    state, config = load_base(path)
    env = gym.make(env_id)
    obs_dim = env.observation_space.shape[0]
    assert config["env_id"] == env_id
    assert config["obs_dim"] == obs_dim
    assert state["0.weight"].shape[1] == obs_dim
    assert all(torch.isfinite(t).all() for t in state.values())
    # the default policy builds on it, with the base tensors as shipped
    policy = AllocatorPolicy(env.observation_space, env.action_space, lambda _: 3e-4,
                             base=str(path))
    net = policy.features_extractor.net
    assert torch.equal(net[0].get_base_layer().weight, state["0.weight"])
    assert torch.equal(net[2].get_base_layer().bias, state["2.bias"])


@pytest.mark.parametrize("env_id", FAMILIES)
def test_shipped_base_recipe_is_pretrain_defaults(env_id):
    _, config = load_base(pretrained_base_path(env_id))
    recipe = config["recipe"]
    for key in ("n_pools", "episodes", "steps", "seed"):
        assert recipe[key] == DEFAULTS[key], key
    assert config["hidden_sizes"] == list(DEFAULTS["hidden_sizes"])
    assert recipe["batch_size"] == 256
    assert recipe["labels"] == "GreedyHeuristic(threshold=0.7)"
    assert config["final_loss"] < config["first_loss"]


@pytest.mark.parametrize("env_id", FAMILIES)
def test_shipped_base_is_reproducible(env_id):
    shipped, config = load_base(pretrained_base_path(env_id))
    recipe = config["recipe"]
    state, rebuilt = pretrain_base(env_id, n_pools=recipe["n_pools"],
                                   episodes=recipe["episodes"], steps=recipe["steps"],
                                   hidden_sizes=config["hidden_sizes"], seed=recipe["seed"])
    assert set(state) == set(shipped)
    for name, tensor in shipped.items():
        torch.testing.assert_close(state[name], tensor, rtol=0.0, atol=1e-6)
    assert rebuilt["first_loss"] == pytest.approx(config["first_loss"], rel=1e-6)
    assert rebuilt["final_loss"] == pytest.approx(config["final_loss"], rel=1e-5)


def test_pretrained_base_path_unknown_env_says_how_to_make_one():
    with pytest.raises(FileNotFoundError) as info:
        pretrained_base_path("cost_envs/Missing-v3")
    message = str(info.value)
    assert "cost_envs/Missing-v3" in message
    assert "cost-envs pretrain --env cost_envs/Missing-v3" in message
    assert "base='random'" in message
    # it lists what is shipped
    assert "FlightPlanner-v0" in message and "ToolBench-v0" in message


# --------------------------------------------------------- mismatched bases
def _write_base(tmp_path, obs_dim, hidden_sizes, name="base"):
    state = {k: v.clone() for k, v in tanh_mlp(obs_dim, hidden_sizes).state_dict().items()}
    config = {"env_id": FLIGHT, "obs_dim": obs_dim, "hidden_sizes": list(hidden_sizes)}
    return str(save_base(state, config, tmp_path / name))


def test_base_with_wrong_obs_dim_is_refused(tmp_path):
    env = gym.make(FLIGHT)
    obs_dim = env.observation_space.shape[0]
    path = _write_base(tmp_path, obs_dim + 2, (64, 64))
    with pytest.raises(ValueError, match="base encoder") as info:
        MlpEncoder(env.observation_space, base=path)
    message = str(info.value)
    assert f"obs_dim={obs_dim + 2}" in message
    assert f"obs_dim={obs_dim}" in message
    with pytest.raises(ValueError, match=rf"obs_dim={obs_dim + 2}.*obs_dim={obs_dim}"):
        AllocatorPolicy(env.observation_space, env.action_space, lambda _: 3e-4, base=path)


def test_base_with_wrong_hidden_sizes_is_refused(tmp_path):
    env = gym.make(TOOLBENCH)
    obs_dim = env.observation_space.shape[0]
    path = _write_base(tmp_path, obs_dim, (32,))
    with pytest.raises(ValueError) as info:
        MlpEncoder(env.observation_space, hidden_sizes=(64, 64), base=path)
    message = str(info.value)
    assert "hidden_sizes=[32]" in message
    assert "hidden_sizes=[64, 64]" in message
    with pytest.raises(ValueError, match=r"hidden_sizes=\[32\].*hidden_sizes=\[64, 64\]"):
        AllocatorPolicy(env.observation_space, env.action_space, lambda _: 3e-4,
                        hidden_sizes=(64, 64), lora_rank=None, base=path)
    # the matching architecture accepts the same file
    MlpEncoder(env.observation_space, hidden_sizes=(32,), base=path)


def test_base_of_another_env_is_refused():
    # ToolBench's base (17 inputs) on FlightPlanner (15 observations)
    env = gym.make(FLIGHT)
    with pytest.raises(ValueError, match=r"obs_dim=17.*obs_dim=15"):
        AllocatorPolicy(env.observation_space, env.action_space, lambda _: 3e-4,
                        base=str(pretrained_base_path(TOOLBENCH)))


def test_missing_base_file_raises(tmp_path):
    env = gym.make(FLIGHT)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        MlpEncoder(env.observation_space, base=str(tmp_path / "nothing.safetensors"))


def test_pretraining_tasks_are_not_evaluation_or_training_tasks(monkeypatch):
    import agents.learners.pretrain as pretrain_module
    from agents.seeds import PRETRAIN_TASK_SEED, TRACE_TASK_SEED, TRAIN_TASK_SEED

    seeds = []
    real = pretrain_module.greedy_traces

    def recording(env, episodes, seed, **kwargs):
        seeds.append(seed)
        return real(env, episodes, seed, **kwargs)

    monkeypatch.setattr(pretrain_module, "greedy_traces", recording)
    for seed in (0, 3):
        pretrain_base(FLIGHT, n_pools=4, episodes=2, steps=1, seed=seed)
    assert len(seeds) == 8
    # evaluation uses small task seeds; training and supervised traces their own offsets
    assert min(seeds) >= PRETRAIN_TASK_SEED > 10_000
    assert not set(seeds) & {TRAIN_TASK_SEED + s for s in range(1000)}
    assert not set(seeds) & {TRACE_TASK_SEED + s for s in range(1000)}


# ------------------------------------------------------- what saves also loads
@pytest.mark.parametrize(("change", "pattern"), [
    ({"license": "MIT"}, r"unknown keys \['license'\]"),
    ({"first_loss": float("nan")}, "first_loss: expected a finite number, got nan"),
    ({"hidden_sizes": [64, 32]}, "tensors do not fit"),
])
def test_save_base_refuses_what_load_base_would_refuse(tmp_path, change, pattern):
    state, config = load_base(pretrained_base_path(FLIGHT))
    with pytest.raises(ValueError, match=pattern):
        save_base(state, {**config, **change}, tmp_path / "base")
    assert list(tmp_path.iterdir()) == []


def test_check_base_writable_names_both_files(tmp_path):
    from agents.learners.pretrain import check_base_writable

    assert check_base_writable(tmp_path / "b") == (tmp_path / "b.safetensors",
                                                   tmp_path / "b.json")
    (tmp_path / "b.json").mkdir()
    with pytest.raises(ValueError, match=r"b\.json exists and is not a file"):
        check_base_writable(tmp_path / "b")
