import csv
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor

from agents.callbacks import CostMetricsCallback
from agents.learners.common.policies import AllocatorPolicy

N_STEPS = 128


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class EpisodeLog(gym.Wrapper):
    """Records every finished episode from the raw per-step infos, with the step it ended at."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0
        self.finished = []
        self._new()

    def _new(self):
        self._cost = self._flops = 0.0
        self._calls = None
        self._length = 0

    def reset(self, **kwargs):
        self._new()
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        self._length += 1
        self._cost += float(info["cost"])
        self._flops += float(info["flops"])
        calls = np.asarray(info["calls"], dtype=np.int64)
        self._calls = calls if self._calls is None else self._calls + calls
        if terminated or truncated:
            self.finished.append({
                "end_step": self.steps, "success": bool(info.get("success", False)),
                "cost": self._cost, "flops": self._flops, "calls": self._calls,
                "length": self._length,
            })
            self._new()
        return obs, reward, terminated, truncated, info


def ppo(env, seed=0, **kwargs):
    return PPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, n_steps=N_STEPS,
               batch_size=64, n_epochs=2, device="cpu", seed=seed, **kwargs)


def pool_names(env_id):
    env = gym.make(env_id)
    names = env.unwrapped.pool.names
    env.close()
    return names


def test_metrics_reach_the_sb3_csv_logger(env_id, tmp_path):
    # SB3 logs rollout/success_rate itself from info["is_success"] over its own window: at
    # the callback's window, the two agree episode for episode.
    model = ppo(gym.make(env_id), stats_window_size=20)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    callback = CostMetricsCallback(window=20)
    model.learn(3 * N_STEPS, callback=callback)
    # Close the CSV file: left open, its ResourceWarning fires at a later garbage collection,
    # inside whichever test runs then (it failed test_envs' warning-free checker runs).
    model.logger.close()
    with (tmp_path / "progress.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 == len(callback.history)
    columns = ["cost/cps", "cost/flops_per_success", "cost/episode_cost",
               "rollout/success_rate",
               *(f"cost/call_ratio/{name}" for name in pool_names(env_id))]
    for column in columns:
        assert column in rows[0], column
        values = [float(row[column]) for row in rows]
        assert all(math.isfinite(value) for value in values), (column, values)
        # The CSV holds what the callback computed, rollout by rollout (SB3's success rate
        # included).
        assert values == pytest.approx([point[column] for point in callback.history])
    assert [point["timesteps"] for point in callback.history] == [128, 256, 384]


def expected_metrics(episodes, names):
    successes = max(1, sum(e["success"] for e in episodes))
    steps = sum(e["length"] for e in episodes)
    calls = np.sum([e["calls"] for e in episodes], axis=0)
    out = {
        "cost/cps": sum(e["cost"] for e in episodes) / successes,
        "cost/flops_per_success": sum(e["flops"] for e in episodes) / successes,
        "cost/episode_cost": sum(e["cost"] for e in episodes) / len(episodes),
        "rollout/success_rate": sum(e["success"] for e in episodes) / len(episodes),
    }
    out.update({f"cost/call_ratio/{name}": calls[i] / steps for i, name in enumerate(names)})
    return out


def test_metrics_match_a_recount_of_the_episodes(env_id):
    # both windows beside each other on one training run (issue #36: one run, not two)
    log = EpisodeLog(gym.make(env_id))
    callbacks = {window: CostMetricsCallback(window=window) for window in (5, 1000)}
    ppo(log).learn(2 * N_STEPS, callback=list(callbacks.values()))
    names = pool_names(env_id)
    for window, callback in callbacks.items():
        for point, end in zip(callback.history, (N_STEPS, 2 * N_STEPS), strict=True):
            finished = [e for e in log.finished if e["end_step"] <= end]
            assert len(finished) > 5  # so window=5 really drops episodes
            expected = expected_metrics(finished[-window:], names)
            assert point["timesteps"] == end
            assert {k: point[k] for k in expected} == pytest.approx(expected, rel=1e-12)
            ratios = [point[f"cost/call_ratio/{name}"] for name in names]
            assert all(0.0 <= ratio <= 1.0 for ratio in ratios)
        assert len(callback.episodes) == min(window, len(log.finished))


def test_counts_episodes_under_an_explicit_monitor(env_id):
    monitor = Monitor(gym.make(env_id))
    callback = CostMetricsCallback(window=1000)
    ppo(monitor).learn(N_STEPS, callback=callback)
    assert len(callback.history) == 1
    # Monitor replaced info["episode"]; the per-step keys still give every episode.
    assert [e.length for e in callback.episodes] == monitor.get_episode_lengths()
    assert len(callback.episodes) > 0


def vec_env_of(env_id, **kwargs):
    return make_vec_env(env_id, n_envs=2, seed=0, env_kwargs={"render_mode": None}, **kwargs)


@pytest.mark.filterwarnings("error::UserWarning")  # and no render_mode warning on the way
def test_make_vec_env_with_its_default_render_mode(env_id):
    # SB3 asks for render_mode="rgb_array" and falls back on TypeError: the envs' error
    # for an unsupported mode is both a ValueError and a TypeError.
    vec_env = make_vec_env(env_id, n_envs=2, seed=0)
    assert vec_env.render_mode is None
    vec_env.close()


def test_two_env_vec_env_counts_episodes_of_both(env_id):
    vec_env = vec_env_of(env_id, wrapper_class=EpisodeLog)
    callback = CostMetricsCallback(window=1000)
    ppo(vec_env).learn(N_STEPS, callback=callback)
    logs = list(vec_env.envs)
    assert all(log.finished for log in logs)
    finished = [e for log in logs for e in log.finished]
    assert len(callback.episodes) == len(finished)
    # Each env has its own running totals: the episodes match one for one.
    got = sorted((e.length, round(e.cost, 9), e.calls.tolist()) for e in callback.episodes)
    want = sorted((e["length"], round(e["cost"], 9), e["calls"].tolist()) for e in finished)
    assert got == want
    assert callback.history[0]["timesteps"] == 2 * N_STEPS


def test_window_caps_the_episodes_of_both_envs(env_id):
    vec_env = vec_env_of(env_id)
    callback = CostMetricsCallback(window=7)
    ppo(vec_env).learn(N_STEPS, callback=callback)
    assert len(callback.episodes) == 7


@pytest.mark.parametrize("window", [0, -1, True, False, 2.0, "10", None])
def test_window_must_be_a_positive_int(window):
    with pytest.raises(ValueError, match="window"):
        CostMetricsCallback(window=window)


def test_window_default_is_sb3s_100():
    assert CostMetricsCallback().window == 100
    assert CostMetricsCallback(window=1).window == 1
