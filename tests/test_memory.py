"""The memory experiment (issue #23): its figures come from its per-task returns, and a
recurrent policy is evaluated with its LSTM state reset at every episode start."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the envs)
from agents.evaluation import evaluate, rollout
from agents.learners.common.recurrent import RecurrentPPO
from cost_envs.metrics import bootstrap_mean_ci
from experiments.memory import report as memory_report
from experiments.memory import runner as memory
from experiments.memory.settings import RULE_LABEL
from experiments.shared.common import machine

V0 = "cost_envs/FlightPlanner-v0"


# ------------------------------------------------------------------ paired_difference
def test_paired_difference_is_the_difference_of_the_means_and_pairs_the_tasks() -> None:
    rng = np.random.default_rng(1)
    tasks = rng.normal(size=50) * 3.0  # task difficulty, far larger than the effect
    control = tasks + rng.normal(scale=0.01, size=(4, 50))
    treated = tasks + 0.1 + rng.normal(scale=0.01, size=(5, 50))
    point, low, high = memory_report.paired_difference(treated, control, resamples=500)
    assert point == pytest.approx(treated.mean() - control.mean())
    # Paired over tasks, the task spread cancels: the interval is narrow around +0.1 ...
    assert 0.09 < low <= point <= high < 0.11
    # ... where the unpaired intervals of the two means overlap widely.
    assert bootstrap_mean_ci(treated, n_resamples=500)[1] < control.mean()


def test_paired_difference_covers_the_spread_between_seeds() -> None:
    control = np.zeros((5, 40))
    treated = np.array([[-1.0], [1.0], [-1.0], [1.0], [0.0]]) + np.zeros((5, 40))
    _, low, high = memory_report.paired_difference(treated, control, resamples=500)
    assert low < -0.3 and high > 0.3  # seeds disagree: no resolved difference


def test_paired_difference_refuses_different_tasks() -> None:
    with pytest.raises(ValueError, match=r"same tasks, got shapes \(2, 3\) and \(2, 4\)"):
        memory_report.paired_difference(np.zeros((2, 3)), np.zeros((2, 4)), resamples=10)


def test_a_scale_refuses_an_unknown_env() -> None:
    with pytest.raises(ValueError, match=r"Scale\.envs: expected some of"):
        memory.Scale("x", 1, 1, 1, 1, 1, ("cost_envs/Nope-v0",))


# ------------------------------------------------------------------ recurrent evaluation
class CarriesState:
    """The bug the evaluation must not have: the LSTM state carried into the next episode."""

    def __init__(self, model: RecurrentPPO) -> None:
        self.model = model
        self.state = None

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        action, self.state = self.model.predict(obs, state=self.state,
                                                episode_start=np.array([self.state is None]),
                                                deterministic=deterministic)
        return action, self.state


def test_a_recurrent_policy_meets_each_task_with_a_fresh_lstm_state() -> None:
    env = gym.make(V0)
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=64, batch_size=64, seed=0, device="cpu")
    n = 8
    in_order = evaluate(model, env, episodes=n, seed=0).returns
    tasks = []
    for i in range(n):  # the same task stream, without playing it
        env.reset(seed=0 if i == 0 else None)
        tasks.append(env.unwrapped.task)
    for j, task in enumerate(tasks):  # each task after another predecessor: the same return
        rollout(model, env, options={"task": tasks[(j + 3) % n]})
        assert rollout(model, env, options={"task": task}).episode_return == in_order[j]
    # The check can fail: this policy's actions depend on its memory, so carrying the state
    # over from the previous episode changes the returns.
    leaked = evaluate(CarriesState(model), env, episodes=n, seed=0).returns
    assert leaked[0] == in_order[0] and leaked != in_order


# ------------------------------------------------------------------ the experiment
@pytest.mark.slow
def test_the_report_is_computed_from_the_per_task_returns_it_holds(tmp_path: Path) -> None:
    scale = memory.Scale("test", 512, 2, 6, 1, 200, ("cost_envs/FlightPlanner-v1",))
    paths = memory.report(tmp_path, scale, jobs=1)
    assert sorted(path.name for path in paths) == ["memory_test.csv", "memory_test.md"]
    markdown = (tmp_path / "memory_test.md").read_text()
    runs = memory_report.read_csv((tmp_path / "memory_test.csv").read_text())
    assert sorted((r["learner"], r["seed"]) for r in runs) == [
        ("ppo", 0), ("ppo", 1), ("recurrent", 0), ("recurrent", 1), ("rule", 0)]
    assert all(len(r["returns"]) == 6 for r in runs)
    assert all(r["timesteps"] == 512 for r in runs if r["learner"] != "rule")
    # The table is a function of the CSV (and the machine) alone ...
    assert memory_report.render(runs, scale, machine()) == markdown
    # ... and its rows are the bootstrap of those returns.
    by = {key: np.array([r["returns"] for r in runs if r["learner"] == key])
          for key in ("ppo", "recurrent", "rule")}
    for key, label in (("ppo", "PPO (MlpPolicy)"), ("recurrent", "RecurrentPPO (MlpLstmPolicy)"),
                       ("rule", RULE_LABEL)):
        mean, low, high = bootstrap_mean_ci(by[key], n_resamples=200)
        assert f"| {label} | {mean:.3f} [{low:.3f}, {high:.3f}] |" in markdown
    point, low, high = memory_report.paired_difference(by["recurrent"], by["ppo"], 200)
    assert point == pytest.approx(by["recurrent"].mean() - by["ppo"].mean())
    assert low <= point <= high
    assert f"**{point:+.3f} [{low:+.3f}, {high:+.3f}]**" in markdown


# ------------------------------------------------------------------ the history learner
@pytest.mark.parametrize("env_id", ["cost_envs/ToolBench-v0", V0])
def test_the_history_learner_is_scored_on_what_it_was_trained_on(env_id: str) -> None:
    """The evaluation env shows the history policy SB3's VecFrameStack layout, step for step,
    across episode ends (zeros before an episode's first observation, oldest first)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    k = memory.MAX_DECISIONS[env_id]
    trained = VecFrameStack(DummyVecEnv([lambda: gym.make(env_id)]), k)
    scored = memory.evaluation_env(env_id, "history")
    trained.seed(7)
    stacked, (obs, _) = trained.reset(), scored.reset(seed=7)
    assert obs.shape == (k * gym.make(env_id).observation_space.shape[0],)
    rng = np.random.default_rng(0)
    episodes = 0
    while episodes < 4:
        np.testing.assert_array_equal(stacked[0], obs)
        action = rng.integers(0, 2, size=scored.action_space.shape).astype(np.int8)
        stacked, _, dones, _ = trained.step(action[None])
        obs, _, terminated, truncated, _ = scored.step(action)
        assert bool(dones[0]) == (terminated or truncated)
        if terminated or truncated:
            episodes += 1
            obs, _ = scored.reset()
    # The episode's first observation is alone in the window, after zeros.
    width = obs.size // k
    assert not obs[:-width].any() and obs[-width:].any()


def test_every_episode_fits_the_history_window() -> None:
    """The window holds a whole episode: no episode takes more decisions than it holds."""
    for env_id, k in memory.MAX_DECISIONS.items():
        env = gym.make(env_id)
        env.reset(seed=0)
        env.action_space.seed(0)
        longest = 0
        for episode in range(60):
            steps, done = 0, False
            while not done:  # nothing, or random calls: the longest episodes either way
                action = (np.zeros(env.action_space.shape, dtype=np.int8) if episode % 2
                          else env.action_space.sample())
                _, _, terminated, truncated, _ = env.step(action)
                steps, done = steps + 1, terminated or truncated
            longest = max(longest, steps)
            env.reset()
        assert longest <= k, (env_id, longest, k)


@pytest.mark.slow
def test_a_kept_scale_reuses_its_runs(tmp_path: Path, monkeypatch) -> None:
    scale = memory.Scale("kept", 256, 1, 4, 1, 100, ("cost_envs/ToolBench-v0",),
                         ("ppo", "history"), keep=True)
    memory.report(tmp_path, scale, jobs=1)
    first = (tmp_path / "memory_kept.md").read_text()
    kept = sorted(path.name for path in (tmp_path / "memory_runs" / "kept").iterdir())
    assert kept == ["ToolBench-v0+history_seed0.json", "ToolBench-v0+ppo_seed0.json"]
    ran = []
    monkeypatch.setattr(memory, "run_job", lambda job: ran.append(job))
    memory.report(tmp_path, scale, jobs=1)
    assert ran == [] and (tmp_path / "memory_kept.md").read_text() == first


def test_the_committed_converged_reports_are_their_csvs_rendered() -> None:
    """Each committed report of a kept scale is rendered from its committed CSV alone."""
    import re

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    for name, scale in memory.SCALES.items():
        report, columns = (results / file for file in scale.files)
        if not scale.keep or not report.exists():
            continue
        markdown = report.read_text(encoding="utf-8")
        where = re.search(r"` on (.*), one torch thread per run", markdown).group(1)
        runs = memory_report.read_csv(columns.read_text(encoding="utf-8"))
        assert memory_report.render(runs, scale, where) == markdown, name
        assert sorted((r["learner"], r["seed"]) for r in runs if r["learner"] != "rule") == sorted(
            (key, seed) for key in scale.learners for seed in range(scale.seeds))
