"""train(n_envs=...): the RL stage on the native batched env (agents/learners/training.py).

With one sub-env the batched env must train bit for bit what a ``gym.make`` env under SB3's
own ``DummyVecEnv`` trains (the path ``train`` took before it stepped batched envs); with
more, every sub-env plays its own tasks (``agents.seeds.train_task_seeds``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

import agents.learners.training as training
from agents import cli
from agents.learners.checkpoints import load_allocator, save_allocator
from agents.learners.supervised import SupervisedConfig
from agents.seeds import SUB_ENV_TASK_SEED, TRAIN_TASK_SEED, train_task_seeds
from agents.vec_env import make_batched_vec_env

TOOLBENCH = "cost_envs/ToolBench-v0"
EXPERT = "cost_envs/ExpertRouting-v0"
SMALL = SupervisedConfig(episodes=60, epochs=1)
ROLLOUT = {"n_steps": 64, "batch_size": 64, "n_epochs": 2}


def run(env_id: str, method: str, timesteps: int, **kwargs: Any) -> training.TrainedAllocator:
    return training.train(env_id, method, timesteps, base="random", supervised=SMALL,
                          ppo=ROLLOUT, **kwargs)


def same_weights(a: training.TrainedAllocator, b: training.TrainedAllocator) -> bool:
    ours, theirs = a.policy.state_dict(), b.policy.state_dict()
    assert ours.keys() == theirs.keys()
    return all(torch.equal(ours[key], theirs[key]) for key in ours)


# ------------------------------------------------------- one sub-env: the single-env path
@pytest.mark.parametrize(("env_id", "method", "env_kwargs"), [
    (TOOLBENCH, "ppo", {}),
    (TOOLBENCH, "lora-ppo", {}),
    (EXPERT, "ppo", {}),
    (TOOLBENCH, "ppo", {"budget": 0.01, "on_exceed": "truncate"}),
])
def test_one_sub_env_trains_what_a_single_gym_make_env_trains(
        monkeypatch: pytest.MonkeyPatch, env_id: str, method: str,
        env_kwargs: dict[str, Any]) -> None:
    # three rollouts of 64 steps: the callback's history has its three points
    batched = run(env_id, method, 192, seed=2, env_kwargs=env_kwargs)
    # The reference: the RL stage on one gym.make env, which SB3 wraps in Monitor and
    # DummyVecEnv itself (train's path before the batched env).
    made: list[Any] = []

    def single(env_id: str, n_envs: int, **kwargs: Any) -> gym.Env:
        assert n_envs == 1
        made.append(gym.make(env_id, **kwargs))
        return made[-1]

    monkeypatch.setattr(training, "make_batched_vec_env", single)
    reference = run(env_id, method, 192, seed=2, env_kwargs=env_kwargs)
    assert len(made) == 1
    assert batched.timesteps == reference.timesteps == 192
    assert same_weights(batched, reference)
    assert batched.history == reference.history
    assert len(batched.history) >= 3 and batched.history[-1]["cost/episode_cost"] > 0


# ------------------------------------------------------------------- several sub-envs
class Recorder(VecEnvWrapper):
    """Keeps every observation the model saw (reset and steps)."""

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self.observations: list[np.ndarray] = []

    def reset(self) -> np.ndarray:
        obs = self.venv.reset()
        self.observations.append(obs.copy())
        return obs

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.observations.append(obs.copy())
        return obs, rewards, dones, infos


@pytest.mark.parametrize("method", ["ppo", "lora-ppo"])
def test_four_sub_envs_each_play_their_own_tasks(monkeypatch: pytest.MonkeyPatch,
                                                 method: str) -> None:
    recorders: list[Recorder] = []

    def recorded(env_id: str, n_envs: int, **kwargs: Any) -> VecEnv:
        recorders.append(Recorder(make_batched_vec_env(env_id, n_envs, **kwargs)))
        return recorders[-1]

    monkeypatch.setattr(training, "make_batched_vec_env", recorded)
    trained = run(TOOLBENCH, method, 300, seed=5, n_envs=4)
    assert trained.timesteps == 512 and trained.n_envs == 4  # two rollouts of 4 * 64
    (recorder,) = recorders
    observations = np.stack(recorder.observations)  # (1 + steps, sub-env, features)
    assert observations.shape[:2] == (1 + 128, 4)
    single = gym.make(TOOLBENCH)
    seeds = train_task_seeds(5, 4)
    assert seeds[0] == TRAIN_TASK_SEED + 5  # sub-env 0 plays a one-env run's stream
    for i in range(4):  # sub-env i starts on the task of its reset seed
        first, _ = single.reset(seed=seeds[i])
        np.testing.assert_array_equal(observations[0, i], first)
    for i in range(1, 4):  # and plays its own stream, never a copy of sub-env 0's
        assert not np.array_equal(observations[:, i], observations[:, 0])


def test_same_seed_same_weights_other_n_envs_other_weights() -> None:
    first = run(TOOLBENCH, "ppo", 256, seed=1, n_envs=4)
    again = run(TOOLBENCH, "ppo", 256, seed=1, n_envs=4)
    assert first.timesteps == again.timesteps == 256
    assert same_weights(first, again) and first.history == again.history
    # Two sub-envs over two rollouts take the same number of steps, on other tasks.
    two = run(TOOLBENCH, "ppo", 256, seed=1, n_envs=2)
    assert two.timesteps == 256 and two.n_envs == 2
    assert not same_weights(first, two)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "x", True])
def test_bad_n_envs_is_one_line_naming_it(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"n_envs") as info:
        training.train(TOOLBENCH, "ppo", 64, n_envs=bad)
    assert repr(bad) in str(info.value) and "\n" not in str(info.value)


def test_gym_make_option_is_refused_before_training() -> None:
    with pytest.raises(ValueError, match=r"'max_episode_steps' is a gym\.make option") as info:
        training.train(TOOLBENCH, "ppo", 64, env_kwargs={"max_episode_steps": 3})
    assert "\n" not in str(info.value)


# --------------------------------------------------------------- saved with the model
def test_n_envs_is_saved_and_old_models_load_as_one(tmp_path: Path) -> None:
    trained = run(TOOLBENCH, "ppo", 64, seed=0, n_envs=3)
    assert trained.timesteps == 192
    path = save_allocator(trained, tmp_path / "model")
    config = json.loads((path / "config.json").read_text())
    assert config["n_envs"] == 3
    assert load_allocator(path).n_envs == 3
    del config["n_envs"]  # a model saved before n_envs was recorded
    (path / "config.json").write_text(json.dumps(config))
    assert load_allocator(path).n_envs == 1
    config["n_envs"] = 0
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"n_envs.*got 0"):
        load_allocator(path)


def test_get_attr_pool_under_a_budget_and_no_template_state() -> None:
    venv = make_batched_vec_env(TOOLBENCH, 3, budget=0.01)
    pools = venv.get_attr("pool")
    assert len(pools) == 3 and pools[0].names == gym.make(TOOLBENCH).unwrapped.pool.names
    with pytest.raises(AttributeError, match="'task'"):  # a sub-env's state: not the template's
        venv.get_attr("task")


# ------------------------------------------------------------------------------- CLI
def train_cli(tmp_path: Path, *flags: str, config: dict[str, Any] | None = None) -> Path:
    out = tmp_path / "model"
    argv = ["train", "--env", "ToolBench-v0", "--method", "ppo", "--timesteps", "1",
            "--out", str(out), "--no-progress", *flags]
    if config is not None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        (tmp_path / "train.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        argv += ["--config", str(tmp_path / "train.yaml")]
    assert cli.main(argv) == 0
    return out


def test_cli_n_envs_flag_and_config_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch.set_num_threads(1)
    model = load_allocator(train_cli(tmp_path / "file", config={"n_envs": 3, **ROLLOUT}))
    assert (model.n_envs, model.timesteps) == (3, 192)
    model = load_allocator(train_cli(tmp_path / "flag", "--n-envs", "2",
                                     config={"n_envs": 3, **ROLLOUT}))
    assert (model.n_envs, model.timesteps) == (2, 128)  # the flag over the file
    capsys.readouterr()


@pytest.mark.parametrize("bad", ["0", "-1", "x", "1.5"])
def test_cli_bad_n_envs_flag(tmp_path: Path, capsys: pytest.CaptureFixture, bad: str) -> None:
    with pytest.raises(SystemExit) as info:
        train_cli(tmp_path, "--n-envs", bad)
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"argument --n-envs: expected a positive integer, got {bad!r}")
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("bad", [0, -1, "x", 1.5])
def test_cli_bad_n_envs_key(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(SystemExit) as info:
        train_cli(tmp_path, config={"n_envs": bad})
    message = info.value.code
    assert isinstance(message, str) and "\n" not in message
    assert message.startswith("cost-envs train: ") and "train.yaml" in message
    assert f"n_envs: expected an int >= 1, got {bad!r}" in message
    assert not (tmp_path / "model").exists()


def test_cli_gym_make_option_fails_before_training(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        train_cli(tmp_path, "--env-kwargs", "{max_episode_steps: 3}")
    message = info.value.code
    assert isinstance(message, str) and "\n" not in message
    assert message.startswith("cost-envs train: env_kwargs: 'max_episode_steps'")
    assert not (tmp_path / "model").exists()


def test_runs_with_other_seeds_share_no_sub_env_stream() -> None:
    """SB3's ``seed + i`` would give seed 1's sub-env 1 the stream of seed 2's sub-env 0."""
    runs = [train_task_seeds(seed, 16) for seed in range(50)]
    every = [s for run in runs for s in run]
    assert len(set(every)) == len(every)
    assert all(run[0] == TRAIN_TASK_SEED + seed for seed, run in enumerate(runs))
    assert all(s >= SUB_ENV_TASK_SEED for run in runs for s in run[1:])
    assert train_task_seeds(3, 1) == [TRAIN_TASK_SEED + 3]
