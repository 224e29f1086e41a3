"""Issue #38's learners from interaction alone: episodes across rollouts, SIL, GRPO."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch

import cost_envs  # noqa: F401  # registers the ids
from agents.learners.common.episodes import EpisodeTracker, Segment
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.grpo import GroupRelativePPO, group_advantages, group_task_seeds
from agents.learners.sil import SelfImitationPPO
from agents.learners.supervised import discounted_returns
from agents.learners.training import quiet_logger, train
from agents.vec_env import make_batched_vec_env

torch.set_num_threads(1)
ENV_ID = "cost_envs/ToolBench-v0"


# ------------------------------------------------------------------ episodes
def test_episode_tracker_carries_an_episode_across_rollouts() -> None:
    tracker = EpisodeTracker(2)
    # env 0: an episode of rows 0-1, one from row 2 that goes on; env 1: one whole episode
    rewards = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]])
    starts = np.array([[1, 1], [0, 0], [1, 0]])
    first = tracker.segments(rewards, starts, np.array([0, 1]))
    assert first == [Segment(0, 0, 2, 0, True, True, 3.0), Segment(0, 2, 3, 1, True, False, 3.0),
                     Segment(1, 0, 3, 0, True, True, 18.0)]
    second = tracker.segments(np.array([[4.0, 1.0]]), np.array([[0, 1]]), np.array([1, 1]))
    # env 0's second episode ends here: its return holds the row of the first rollout
    assert second == [Segment(0, 0, 1, 1, False, True, 7.0), Segment(1, 0, 1, 1, True, True, 1.0)]
    with pytest.raises(ValueError, match=r"EpisodeTracker\.segments"):
        tracker.segments(np.zeros((3, 3)), np.zeros((3, 3)), np.zeros(3))


def test_returns_to_go_discounts_from_each_step() -> None:
    assert discounted_returns(np.array([1.0, 0.0, 2.0]), 0.5).tolist() == [1.5, 1.0, 2.0]


# ------------------------------------------------------------------ SIL
def _snapshot(cls: type) -> type:
    """``cls`` keeping a copy of each rollout (training flattens the buffer in place)."""

    class Snapshot(cls):  # type: ignore[misc, valid-type]
        def collect_rollouts(self, env, callback, rollout_buffer, n_rollout_steps):  # type: ignore[no-untyped-def]
            going = super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
            self.rollouts = [*getattr(self, "rollouts", []), {
                name: getattr(rollout_buffer, name).copy() for name in
                ("observations", "actions", "rewards", "episode_starts", "advantages")}]
            return going

    return Snapshot


def _sil_model(cls: type = SelfImitationPPO, **kwargs: object) -> SelfImitationPPO:
    model = cls(AllocatorPolicy, make_batched_vec_env(ENV_ID, 2), n_steps=32,
                batch_size=32, n_epochs=1, seed=0, device="cpu",
                policy_kwargs={"lora_rank": None}, **kwargs)
    quiet_logger(model)
    return model


def test_sil_replays_only_whole_episodes_with_their_returns_to_go() -> None:
    model = _sil_model(_snapshot(SelfImitationPPO), gamma=1.0, sil_updates=0)
    model.learn(128)  # two rollouts: an episode that spans them is not replayed
    expected_obs, expected_returns = [], []
    for index, rollout in enumerate(model.rollouts):
        after = (model.rollouts[index + 1]["episode_starts"][0] if index + 1 < len(
            model.rollouts) else model._last_episode_starts)
        for env in range(2):
            starts = list(np.flatnonzero(rollout["episode_starts"][:, env]))
            ends = [*starts[1:], 32] if after[env] else starts[1:]
            for a, b in zip(starts, ends, strict=False):
                expected_obs.append(rollout["observations"][a:b, env])
                rewards = rollout["rewards"][a:b, env]
                expected_returns.append(np.cumsum(rewards[::-1])[::-1])
    assert model._size == sum(len(r) for r in expected_returns) > 0
    np.testing.assert_array_equal(np.sort(model._obs[:model._size], axis=0),
                                  np.sort(np.concatenate(expected_obs), axis=0))
    np.testing.assert_allclose(np.sort(model._returns[:model._size]),
                               np.sort(np.concatenate(expected_returns)), rtol=1e-6)


def test_sil_step_raises_the_probability_of_an_action_better_than_its_value() -> None:
    model = _sil_model()
    obs = np.zeros((1, model.observation_space.shape[0]), dtype=np.float32)
    action = np.ones((1, model.action_space.shape[0]), dtype=np.float32)
    with torch.no_grad():
        value = float(model.policy.predict_values(torch.as_tensor(obs)).item())
    model.remember(obs, action, np.array([value + 5.0]))
    candidates = model.better_than_value()
    assert candidates.tolist() == [0]

    def log_prob() -> float:
        with torch.no_grad():
            _, lp, _ = model.policy.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(action))
        return float(lp.item())

    before = log_prob()
    for _ in range(20):
        model.self_imitation_step(candidates)
    assert log_prob() > before + 0.02  # Adam's steps of about the learning rate, 3e-4


def test_sil_ignores_episodes_worse_than_their_value() -> None:
    model = _sil_model()
    obs = np.zeros((4, model.observation_space.shape[0]), dtype=np.float32)
    with torch.no_grad():
        values = model.policy.predict_values(torch.as_tensor(obs)).numpy().ravel()
    model.remember(obs, np.ones((4, model.action_space.shape[0])), values - 1.0)
    assert model.better_than_value().size == 0
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.sil_updates = 3
    model.self_imitate()
    assert all(torch.equal(v, before[k]) for k, v in model.policy.state_dict().items())


# ------------------------------------------------------------------ GRPO
def test_sub_envs_seeded_alike_replay_the_same_tasks_whatever_the_actions() -> None:
    venv = make_batched_vec_env(ENV_ID, 2)
    venv.unwrapped.seed_each(group_task_seeds(3, 2, group_size=2))
    venv.reset()
    episode = np.zeros(2, dtype=int)
    second: list[list[float]] = [[], []]
    while (episode < 2).any():
        # episode 0: sub-env 0 answers at once, sub-env 1 calls every tool (other lengths,
        # other outcomes); episode 1: both call tools 0 and 5 at every step
        actions = np.zeros((2, 8))
        actions[1] = 1.0 if episode[1] == 0 else 0.0
        for env in range(2):
            if episode[env] == 1:
                actions[env, [0, 5]] = 1.0
        _, rewards, dones, _ = venv.step(actions)
        for env in range(2):
            if episode[env] == 1:
                second[env].append(float(rewards[env]))
        episode += dones
    assert second[0] == second[1] and len(second[0]) >= 1  # the same task, the same luck


def test_group_advantages_compare_each_play_with_its_group() -> None:
    kept: dict[tuple[int, int], dict[int, float]] = {}
    segments = [Segment(0, 0, 2, 0, True, True, 1.0), Segment(1, 0, 1, 0, True, True, 0.0),
                Segment(0, 2, 3, 1, True, False, 0.0), Segment(1, 1, 3, 1, True, True, 2.0),
                # another group: its member 3 has not finished episode 0 yet
                Segment(2, 0, 3, 0, True, True, 5.0), Segment(3, 0, 3, 0, True, False, 1.0)]
    advantages = group_advantages(segments, kept, (3, 4), group_size=2)
    # group 0, episode 0: returns 1 and 0 -> +0.5 and -0.5, scaled by the std of the
    # rollout's nonzero advantages over its steps (+0.5 twice, -0.5 once)
    scale = float(np.std([0.5, 0.5, -0.5]))
    np.testing.assert_allclose(advantages[:, 0], [0.5 / scale, 0.5 / scale, 0.0], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 1], [-0.5 / scale, 0.0, 0.0], rtol=1e-6)
    assert advantages[:, 2:].tolist() == [[0.0, 0.0]] * 3
    assert kept == {(0, 1): {1: 2.0}, (1, 0): {0: 5.0}}  # incomplete groups wait
    # the next rollout completes group 0's episode 1 and group 1's episode 0
    later = group_advantages([Segment(0, 0, 1, 1, False, True, 1.0),
                              Segment(3, 0, 2, 0, False, True, 3.0),
                              Segment(3, 2, 3, 1, True, True, 4.0)], kept, (3, 4), 2)
    assert not later.any()  # none of them lies wholly in this rollout
    assert kept == {(1, 1): {1: 4.0}}


def test_grpo_gives_each_play_its_return_minus_its_groups_mean() -> None:
    model = _snapshot(GroupRelativePPO)(
        AllocatorPolicy, make_batched_vec_env(ENV_ID, 4), group_size=2, n_steps=64,
        batch_size=64, n_epochs=1, seed=0, device="cpu", vf_coef=0.0,
        normalize_advantage=False, policy_kwargs={"lora_rank": None})
    quiet_logger(model)
    model.get_env().unwrapped.seed_each(model.task_seeds(0))
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(256)
    rollout = model.rollouts[0]  # the first: no group is carried into it
    ended_last = np.asarray(model._last_episode_starts)  # the rollout's last step's dones
    returns: dict[tuple[int, int], float] = {}
    rows: dict[tuple[int, int], tuple[int, int]] = {}
    for env in range(4):
        starts = [*np.flatnonzero(rollout["episode_starts"][:, env]), 64]
        for k, (a, b) in enumerate(pairwise(starts)):
            if b < 64 or ended_last[env]:  # whole and finished in the rollout (at its
                # last step too: the next start is then the next rollout's first)
                returns[(env, k)] = float(rollout["rewards"][a:b, env].sum())
                rows[(env, k)] = (a, b)
    raw = {}
    for env, k in rows:
        mate = (env ^ 1, k)  # groups are sub-envs (0, 1) and (2, 3)
        if mate in returns:
            raw[(env, k)] = returns[(env, k)] - (returns[(env, k)] + returns[mate]) / 2
    assert len(raw) > 20
    # the scale: the standard deviation of the nonzero advantages over the rollout's steps
    scale = np.std(np.concatenate([[v] * (rows[key][1] - rows[key][0])
                                   for key, v in raw.items() if v != 0]))
    for (env, k), value in raw.items():
        a, b = rows[(env, k)]
        np.testing.assert_allclose(rollout["advantages"][a:b, env], value / scale, rtol=1e-5)
    assert 0.3 < model.scored_share <= 1.0
    assert any(not torch.equal(v, before[k]) for k, v in model.policy.state_dict().items())


def test_group_task_seeds_pair_sub_envs_and_train_takes_the_methods() -> None:
    assert group_task_seeds(0, 4, group_size=2)[0::2] == group_task_seeds(0, 4, 2)[1::2]
    assert len(set(group_task_seeds(0, 4, group_size=2))) == 2
    with pytest.raises(ValueError, match="n_envs: expected a multiple of the group size 8"):
        group_task_seeds(0, 12)
    for method in ("ppo-sil", "ppo-grpo"):
        trained = train(ENV_ID, method, 512, n_envs=8,
                        ppo={"n_steps": 64, "batch_size": 64, "n_epochs": 1})
        assert trained.method == method and trained.timesteps == 512
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        train(ENV_ID, "ppo", 64, ppo={"sil_updates": 3})


@pytest.mark.parametrize("method", ["ppo-sil", "ppo-grpo"])
def test_the_cli_knows_the_methods_hyperparameters_without_sb3(method: str) -> None:
    from agents.learners.common.ppo_args import accepted
    from agents.learners.hyperparameter_names import accepted_names

    assert accepted_names(method) == frozenset(accepted(method))


def test_the_screening_baseline_is_ppos_committed_curve_at_whole_rollouts(tmp_path) -> None:
    from experiments.teacherless.report import baseline
    from experiments.teacherless.settings import SCREEN

    returns = baseline(SCREEN)  # 500k requested steps: 507,904 taken
    assert returns.shape == (2, 400)
    # the committed CSV's mean_return column of those rows, to its printed digits
    assert np.round(returns.mean(axis=1), 4).tolist() == [0.8969, 0.8897]
    short = tmp_path / "curve.csv"
    short.write_text("row,seed,timesteps,gradient_steps,mean_return,returns\n"
                     "ppo,0,507904,1,0.5,0.5 0.5\n")
    with pytest.raises(ValueError, match="expected PPO's returns at 507904 steps for seeds 0-1"):
        baseline(SCREEN, short)


def test_the_committed_baseline_is_known_only_where_the_curve_reaches(tmp_path,
                                                                     monkeypatch) -> None:
    """ToolBench's curve ends at 1,007,616 steps; past it and on another env, PPO trained
    again is the baseline, and a screen without it is refused before any run."""
    from dataclasses import replace

    from experiments.teacherless import runner
    from experiments.teacherless.report import has_baseline
    from experiments.teacherless.settings import SCREEN

    assert has_baseline(SCREEN) and has_baseline(replace(SCREEN, timesteps=1_000_000, seeds=5))
    assert not has_baseline(replace(SCREEN, timesteps=2_000_000))
    assert not has_baseline(replace(SCREEN, seeds=6))
    assert not has_baseline(SCREEN, "cost_envs/FlightPlanner-v1")
    monkeypatch.setattr(runner, "run_job", lambda job: pytest.fail(f"trained {job}"))
    with pytest.raises(ValueError, match="no committed PPO screen at 2,000,000 steps"):
        runner.report(tmp_path, ["sac"], replace(SCREEN, timesteps=2_000_000))
    assert not list(tmp_path.iterdir())


def test_the_screening_trains_only_the_runs_it_has_not_kept(tmp_path, monkeypatch) -> None:
    """Its runs go through the experiments' one scheduler and keeper (JSON run files)."""
    from dataclasses import replace

    from experiments.teacherless import runner
    from experiments.teacherless.settings import SCREEN

    scale = replace(SCREEN, seeds=2, timesteps=64, checkpoints=())
    kept = {"key": "ppo", "seed": 0, "seconds": 1.5, "validation": [0.5, 1.0],
            "curve": [{"timesteps": 64, "returns": [0.25, 0.75]}]}
    runner._runs(tmp_path, scale).write("ppo seed 0", kept)
    trained: list[str] = []

    def run_job(job):
        trained.append(str(job))
        return {**kept, "seed": job.seed}

    monkeypatch.setattr(runner, "run_job", run_job)
    results = runner.train_missing(["ppo"], tmp_path, scale, log=lambda _line: None)
    assert trained == ["ppo seed 1"]
    assert [r["seed"] for r in results] == [0, 1]
    assert (tmp_path / "runs" / "ppo_seed1.json").exists()
    assert runner.train_missing(["ppo"], tmp_path, scale, log=lambda _line: None)[1]["seed"] == 1
    assert trained == ["ppo seed 1"]  # the second call trains nothing


def test_the_held_out_table_scores_the_test_tasks_against_ppo_trained_again(monkeypatch) -> None:
    """The test rows: their gap is the test tasks' (rule end chosen on validation), and each
    row's difference to PPO is paired by seed and task."""
    from agents.seeds import TEST_TASK_SEED
    from experiments.teacherless import report
    from experiments.teacherless.settings import SCREEN

    asked: list[tuple[int, int]] = []

    def reference_returns(env_id, episodes, eval_seed):
        asked.append((episodes, eval_seed))
        return [0.0] * episodes, [1.0] * episodes

    monkeypatch.setattr(report, "reference_returns", reference_returns)

    def run(key, seed, test):
        return {"key": key, "seed": seed, "test": None if test is None else list(test)}

    runs = {"sac": [run("sac", 0, [0.8, 0.6]), run("sac", 1, [1.0, 0.8])],
            "ppo": [run("ppo", 0, [0.5, 0.5]), run("ppo", 1, [0.7, 0.3])],
            "bdq": [run("bdq", 0, None)]}
    entries = {key: {} for key in runs}
    labels = {key: key.upper() for key in runs}
    lines = report.held_out_table(runs, labels, entries, SCREEN)
    assert asked == [(2, TEST_TASK_SEED)]
    assert "bdq" not in "".join(lines) and "test" not in entries["bdq"]
    # shares of a 0-to-1 gap are the returns themselves: sac 0.7 and 0.9 a seed, 0.8 pooled
    assert np.allclose(entries["sac"]["test"]["per_seed"], [0.7, 0.9])
    assert np.isclose(entries["sac"]["test"]["share"][0], 0.8)
    # paired by seed: (0.8 - 0.5, 0.6 - 0.5, 1.0 - 0.7, 0.8 - 0.3) -> mean 0.3
    assert np.isclose(entries["sac"]["test_minus_ppo"][0], 0.3)
    assert "test_minus_ppo" not in entries["ppo"]
    assert any(line.startswith("| SAC | 0.800 [") and "+0.300 [" in line for line in lines)
    assert report.held_out_table({"bdq": runs["bdq"]}, labels, {"bdq": {}}, SCREEN) == []
    runs["ppo"] = [run("ppo", 0, [0.5]), run("ppo", 1, [0.7])]
    with pytest.raises(ValueError, match=r"test tasks: expected one count for every row, "
                                         r"got \[1, 2\]"):
        report.held_out_table(runs, labels, entries, SCREEN)


def test_another_env_is_paired_with_ppo_trained_again_beside_it(monkeypatch) -> None:
    """No committed PPO screen outside ToolBench-v0: the ppo row is the baseline, required."""
    from dataclasses import replace

    from experiments.teacherless import report
    from experiments.teacherless.settings import SCREEN

    flight = "cost_envs/FlightPlanner-v1"
    asked: list[str] = []

    def reference_returns(env_id, episodes, eval_seed=0):
        asked.append(env_id)
        return [0.0] * episodes, [1.0] * episodes

    monkeypatch.setattr(report, "reference_returns", reference_returns)
    monkeypatch.setattr(report, "baseline", lambda *_: pytest.fail("read ToolBench's curve"))
    scale = replace(SCREEN, timesteps=64, checkpoints=(), episodes=2)

    def run(key, seed, returns):
        return {"key": key, "seed": seed, "seconds": 60.0, "validation": list(returns),
                "curve": [{"timesteps": 64, "gradient_steps": 1, "returns": list(returns)}]}

    sac = [run("sac", 0, [0.8, 0.6]), run("sac", 1, [1.0, 0.8])]
    ppo = [run("ppo", 0, [0.5, 0.5]), run("ppo", 1, [0.7, 0.3])]
    with pytest.raises(ValueError,
                       match="FlightPlanner-v1 has no committed PPO screen at 64 steps"):
        report.render(sac, scale, flight)
    markdown, payload = report.render(sac + ppo, scale, flight)
    assert set(asked) == {flight} and payload["env"] == flight
    assert "ppo/committed" not in payload["rows"] and "minus_ppo" not in payload["rows"]["ppo"]
    assert np.isclose(payload["rows"]["sac"]["minus_ppo"][0], 0.3)
    assert markdown.startswith(f"# Teacherless learners on {flight}")


# ------------------------------------------------------------------ settings of other experiments
class _Trained:
    """What a stubbed ``train`` returns: its arguments, and a one-point curve."""

    def __init__(self, env_id, method, timesteps, **kwargs):
        self.env_id, self.kwargs = env_id, kwargs
        self.curve = [{"timesteps": timesteps, "gradient_steps": 1, "returns": [9.0]}]


def _stub_train(monkeypatch, trained: list) -> None:
    import agents.learners.training as training

    def train(env_id, method, timesteps, **kwargs):
        trained.append(_Trained(env_id, method, timesteps, **kwargs))
        return trained[-1]

    monkeypatch.setattr(training, "train", train)


def test_appworld_trains_and_scores_on_bopos_env_and_tasks(monkeypatch) -> None:
    """The profile and its budget reach training; every score is bopo.curve's, on its tasks."""
    from dataclasses import replace

    from agents.seeds import EVAL_TASK_SEED, TEST_TASK_SEED, VALIDATION_TASK_SEED
    from experiments.bopo import curve
    from experiments.teacherless import runner
    from experiments.teacherless.settings import APPWORLD, SCREEN

    kwargs = {"profile": "appworld", "budget": 0.5, "on_exceed": "mask"}
    monkeypatch.setattr(curve, "env_kwargs", lambda *_: dict(kwargs))
    scored: list[tuple] = []

    class Result:
        def __init__(self, n):
            self.returns = tuple(float(i) for i in range(n))

    def evaluate_on(allocator_for, profile, tasks, budget, seed):
        scored.append((allocator_for(None), profile, len(tasks), budget, seed))
        return Result(len(tasks))

    monkeypatch.setattr(curve, "evaluate_on", evaluate_on)
    monkeypatch.setattr(curve, "draw_tasks", lambda profile, n, seed: [seed] * n)
    monkeypatch.setattr(curve, "profile_budget", lambda *_: pytest.fail("budget drawn again"))
    trained: list = []
    _stub_train(monkeypatch, trained)
    scale = replace(SCREEN, timesteps=64, checkpoints=(), episodes=4)
    result = runner.run_job(runner.Job("ppo", 1, scale, 3, 2, APPWORLD))
    (run,) = trained
    assert run.env_id == "cost_envs/AgenticRouting-v0" and run.kwargs["env_kwargs"] == kwargs
    assert run.kwargs["seed"] == 1 and run.kwargs["n_envs"] == scale.n_envs
    assert [(p, n, b, s) for _, p, n, b, s in scored] == [
        ("appworld", 4, 0.5, EVAL_TASK_SEED), ("appworld", 3, 0.5, VALIDATION_TASK_SEED),
        ("appworld", 2, 0.5, TEST_TASK_SEED)]
    assert all(allocator is run for allocator, *_ in scored)
    # the curve's point: train's steps, bopo's scores of the evaluation tasks
    assert result["curve"] == [{"timesteps": 64, "gradient_steps": 1,
                                "returns": [0.0, 1.0, 2.0, 3.0]}]
    assert result["validation"] == [0.0, 1.0, 2.0] and result["test"] == [0.0, 1.0]


def test_mixed_low_trains_under_the_low_tiers_budget_and_scores_corls_metric(
        monkeypatch) -> None:
    from dataclasses import replace

    import agents.evaluation
    from agents.seeds import VALIDATION_TASK_SEED
    from cost_envs.metrics import EpisodeRecord  # noqa: F401  (the records' fields)
    from experiments.corl import budgets
    from experiments.teacherless import runner
    from experiments.teacherless.settings import MIXED_LOW, SCREEN

    monkeypatch.setattr(budgets, "tier_budget", lambda tier, env_id=budgets.ENV_ID: 0.25)
    asked: list[tuple] = []

    class Record:
        def __init__(self, success, cost):
            self.success, self.cost = success, cost

    class Result:
        records = (Record(True, 0.2), Record(True, 0.3), Record(False, 0.1))

    def evaluate(allocator, env, episodes, seed, env_kwargs=None, **_):
        asked.append((env, episodes, seed, env_kwargs))
        return Result()

    monkeypatch.setattr(agents.evaluation, "evaluate", evaluate)
    trained: list = []
    _stub_train(monkeypatch, trained)
    scale = replace(SCREEN, timesteps=64, checkpoints=(), episodes=3)
    result = runner.run_job(runner.Job("ppo", 0, scale, 3, 0, MIXED_LOW))
    kwargs = {"profile": "mixed", "budget": 0.25, "on_exceed": "mask"}
    assert trained[0].env_id == "cost_envs/ExpertRouting-v1"
    assert trained[0].kwargs["env_kwargs"] == kwargs
    assert asked[1] == ("cost_envs/ExpertRouting-v1", 3, VALIDATION_TASK_SEED, kwargs)
    # accuracy within the budget: right and at most 0.25
    assert result["validation"] == [1.0, 0.0, 0.0] and result["test"] is None


def test_a_settings_gap_ends_are_its_owners_on_the_same_tasks(monkeypatch) -> None:
    from types import SimpleNamespace

    from agents.seeds import TEST_TASK_SEED, VALIDATION_TASK_SEED
    from experiments.bopo import curve
    from experiments.corl import runner as corl_runner
    from experiments.teacherless import report
    from experiments.teacherless.settings import APPWORLD, MIXED_LOW

    monkeypatch.setattr(report, "reference_returns", lambda *_: pytest.fail("budgets' ends"))
    prepared: list[tuple] = []

    def prepare_profile(profile, scale, seed, tasks):
        prepared.append((profile, scale.n_eval, scale.n_train, seed, tasks))
        return SimpleNamespace(rule="best-rule", returns={
            "best-rule": (0.1,) * scale.n_eval, "difficulty-threshold": (0.9,) * scale.n_eval,
            "planner": (0.7,) * scale.n_eval})

    monkeypatch.setattr(curve, "prepare_profile", prepare_profile)
    # the rule end chosen on the validation tasks (prepare_profile's choice), not the best here
    assert report.gap_ends(APPWORLD, 3, TEST_TASK_SEED) == ([0.1] * 3, [0.7] * 3)
    assert prepared == [("appworld", 3, 400, 0, TEST_TASK_SEED)]
    fixed: list[tuple] = []

    def fixed_rows(scale, env_id, profiles, tasks, tiers):
        fixed.append((scale.episodes, scale.rule_tasks, env_id, profiles, tasks, tiers))
        return {"gap": {"mixed": {"low": {"rule": "r", "rule_scores": [1.0, 0.0],
                                          "reference_scores": [1.0, 1.0]}}}}

    monkeypatch.setattr(corl_runner, "fixed_rows", fixed_rows)
    assert report.gap_ends(MIXED_LOW, 2, VALIDATION_TASK_SEED) == ([1.0, 0.0], [1.0, 1.0])
    # the fixed rows of the curves' (full) scale, on the same queries
    assert fixed == [(2, 200, "cost_envs/ExpertRouting-v1", ("mixed",), VALIDATION_TASK_SEED,
                      ("low",))]


def test_run_files_name_a_setting_and_toolbenchs_are_as_they_were(tmp_path) -> None:
    from dataclasses import replace

    from experiments.teacherless import runner
    from experiments.teacherless.settings import APPWORLD, MIXED_LOW, SCREEN

    scale = replace(SCREEN, timesteps=64, checkpoints=())
    assert runner._runs(tmp_path, scale).settings("ppo seed 0") == {
        "key": "ppo", "seed": 0, "timesteps": 64, "checkpoints": [], "episodes": 400,
        "n_envs": 16, "validation_seed": 50_000, "method": "ppo", "arguments": "{}"}
    for env in (APPWORLD, MIXED_LOW):
        assert runner._runs(tmp_path, scale, env_id=env).settings("ppo seed 0")["env"] == env


def test_bad_envs_and_rows_are_refused_before_any_run(tmp_path, monkeypatch, capsys) -> None:
    from dataclasses import replace

    import gymnasium
    from gymnasium import spaces

    from experiments.teacherless import envs, runner
    from experiments.teacherless.settings import APPWORLD, MIXED_LOW, SCREEN

    monkeypatch.setattr(runner, "run_job", lambda job: pytest.fail(f"trained {job}"))
    with pytest.raises(SystemExit):
        runner.main(["--env", "cost_envs/AgenticRouting-v0:alfworld", "--out", str(tmp_path)])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "invalid choice: 'cost_envs/AgenticRouting-v0:alfworld'" in error
    assert APPWORLD in error and MIXED_LOW in error
    scale = replace(SCREEN, timesteps=64, checkpoints=())
    for env in (APPWORLD, MIXED_LOW):  # no committed PPO there: the ppo row is required
        with pytest.raises(ValueError, match=f"{env} has no committed PPO screen at 64"):
            runner.report(tmp_path, ["sac"], scale, env_id=env)
        envs.check_rows(["bdq", "sac", "dyna", "ppo"], env)  # MultiBinary: every row runs
    real = gymnasium.make
    monkeypatch.setattr(gymnasium, "make", lambda *a, **k: type(
        "Probe", (), {"action_space": spaces.Discrete(3), "close": lambda self: None})())
    with pytest.raises(ValueError, match=rf"^rows: bdq needs a MultiBinary action, "
                                         rf"{APPWORLD} has Discrete\(3\)$"):
        runner.report(tmp_path, ["ppo", "bdq"], scale, env_id=APPWORLD)
    monkeypatch.setattr(gymnasium, "make", real)
    assert not list(tmp_path.iterdir())
