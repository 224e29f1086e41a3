"""BoPO (agents.learners.bopo, bopo_sft; experiments.bopo.runner): boundaries, taxonomy, normalised
cost, SFT data, rewards, masks, task replay, the experiment's report."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import cost_envs  # noqa: F401
from agents import seeds
from agents.baselines import AlwaysLarge, AlwaysSmall, DifficultyThreshold, RandomMix
from agents.learners import bopo, bopo_sft
from agents.rules import BestFixedRule
from cost_envs.wrappers import HardBudget, TaskReplay
from experiments.bopo import runner as bopo_experiment
from experiments.shared import gaps

torch.set_num_threads(1)
PROFILE = "sciworld"


def replaying(actions: np.ndarray):
    """An ``act`` that plays ``actions`` in order, whatever it observes."""
    remaining = iter(actions)
    return lambda _obs: next(remaining)


@pytest.fixture(scope="module")
def tasks() -> list:
    return bopo.draw_tasks(PROFILE, 40, seed=seeds.BOPO_TRAIN_TASK_SEED)


@pytest.fixture(scope="module")
def boundaries(tasks) -> list[bopo.Boundary]:
    return bopo.boundary_rollouts(bopo.make_env(PROFILE), tasks)


@pytest.fixture(scope="module")
def sft_data(tasks, boundaries) -> bopo_sft.SFTData:
    return bopo_sft.synthesize_sft_data(bopo.make_env(PROFILE), tasks, boundaries,
                                    mix_probs=(0.25, 0.5), samples=2, seed=0)


def test_replayed_rollouts_are_identical(tasks) -> None:
    env = bopo.make_env(PROFILE)
    mix = RandomMix(env, p=0.4, seed=3)
    first = bopo.rollout(env, tasks[0], mix.act)
    again = bopo.rollout(env, tasks[0], replaying(first.actions))
    np.testing.assert_array_equal(first.observations, again.observations)
    np.testing.assert_array_equal(first.actions, again.actions)
    assert (first.success, first.cost) == (again.success, again.cost)


def test_stratum_labels_agree_with_the_boundary_rollouts(tasks, boundaries) -> None:
    env = bopo.make_env(PROFILE)
    seen = set()
    for task, boundary in zip(tasks, boundaries, strict=True):
        small = bopo.rollout(env, task, AlwaysSmall(env).act)
        large = bopo.rollout(env, task, AlwaysLarge(env).act)
        assert (small.success, small.cost) == (boundary.small_success, boundary.small_cost)
        assert (large.success, large.cost) == (boundary.large_success, boundary.large_cost)
        expected = ("easy" if small.success else "hard" if large.success else "intractable")
        assert boundary.stratum == expected
        seen.add(expected)
    assert seen == {"easy", "hard", "intractable"}
    shares = bopo.strata_distribution(boundaries)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_normalised_cost_is_0_for_always_small_and_1_for_always_large(boundaries) -> None:
    for b in boundaries:
        assert b.normalised(b.small_cost) == 0.0
        assert b.normalised(b.large_cost) == pytest.approx(1.0, abs=1e-12)
        assert bopo.normalised_cost(b.small_cost, b.small_cost, b.large_cost) == 0.0
        # the reward's position: 0 at the cheaper boundary, 1 at the dearer one
        cheap, dear = sorted((b.small_cost, b.large_cost))
        assert b.position(cheap) == 0.0 and b.position(dear) == 1.0
        assert b.position(cheap / 2) == 0.0 and b.position(2 * dear) == 1.0
    with pytest.raises(ValueError, match="the same"):
        bopo.normalised_cost(1.0, 0.5, 0.5)


def test_cost_inversions_exist_and_are_boundary_facts(boundaries) -> None:
    inverted = [b for b in boundaries if b.inverted]
    assert inverted and bopo.inversion_share(boundaries) == len(inverted) / len(boundaries)
    for b in inverted:
        assert b.small_cost > b.large_cost and b.small_steps > b.large_steps


def test_sft_data_holds_only_successful_trajectories_balanced_by_stratum(
    tasks, boundaries, sft_data
) -> None:
    counts = sft_data.counts()
    assert counts["intractable"] == 0
    assert counts["easy"] == counts["hard"] > 0
    env = bopo.make_env(PROFILE)
    for index, trajectory, stratum in zip(sft_data.task_indices, sft_data.trajectories,
                                          sft_data.strata, strict=True):
        assert boundaries[index].stratum == stratum
        replay = bopo.rollout(env, tasks[index], replaying(trajectory.actions))
        assert replay.success and replay.cost == trajectory.cost
        # the cheapest success found: never dearer than a successful boundary policy
        b = boundaries[index]
        for ok, cost in ((b.small_success, b.small_cost), (b.large_success, b.large_cost)):
            if ok:
                assert trajectory.cost <= cost
    assert len(sft_data.observations) == len(sft_data.actions) == sum(
        t.length for t in sft_data.trajectories)


def test_handing_in_the_boundary_trajectories_gives_the_same_sft_data(tasks, sft_data
                                                                       ) -> None:
    env = bopo.make_env(PROFILE)
    paths = bopo.boundary_trajectories(env, tasks)
    boundaries = [bopo.Boundary.from_trajectories(lo, hi) for lo, hi in paths]
    assert boundaries == bopo.boundary_rollouts(env, tasks)
    again = bopo_sft.synthesize_sft_data(env, tasks, boundaries, mix_probs=(0.25, 0.5), samples=2,
                                     seed=0, boundary_paths=paths)
    np.testing.assert_array_equal(again.observations, sft_data.observations)
    np.testing.assert_array_equal(again.actions, sft_data.actions)
    assert (again.task_indices, again.strata) == (sft_data.task_indices, sft_data.strata)
    assert [(t.success, t.cost) for t in again.trajectories] == [
        (t.success, t.cost) for t in sft_data.trajectories]
    with pytest.raises(ValueError, match="boundary trajectories"):
        bopo_sft.synthesize_sft_data(env, tasks, boundaries, boundary_paths=paths[:-1])


def test_sft_raises_the_probability_of_the_demonstrated_actions(sft_data) -> None:
    env = bopo.make_env(PROFILE)
    from stable_baselines3.common.vec_env import DummyVecEnv

    model = bopo_sft.build_model(DummyVecEnv([lambda: env]), seed=0)
    before = bopo_sft.demonstration_log_likelihood(model.policy, sft_data)
    losses = bopo_sft.sft_warm_start(model.policy, sft_data, epochs=10, seed=0)
    after = bopo_sft.demonstration_log_likelihood(model.policy, sft_data)
    assert after > before + 0.03
    assert losses[-1] < losses[0]


def test_reference_guided_reward_punishes_a_cheap_failure_the_reference_avoids(
    boundaries,
) -> None:
    solvable = [b for b in boundaries if b.stratum != "intractable"]
    for lam in (0.0, 0.5, 0.95):
        for b in solvable:
            cheapest = min(b.small_cost, b.large_cost)
            assert bopo.guided_reward(False, 0.0, b, lam) < 0
            assert bopo.guided_reward(False, cheapest, b, lam) <= lam - 1 < 0
            # matching the better boundary policy scores exactly zero
            ref_cost = b.small_cost if b.small_success else b.large_cost
            assert bopo.guided_reward(True, ref_cost, b, lam) == pytest.approx(0.0, abs=1e-12)
    intractable = [b for b in boundaries if b.stratum == "intractable"]
    for b in intractable:  # only cost matters there: the cheaper failure is the reference
        assert bopo.guided_reward(False, min(b.small_cost, b.large_cost), b, 0.5) == 0.0
    with pytest.raises(ValueError, match="lam"):
        bopo.bopo_reward(True, 0.0, boundaries[0], 1.0)
    with pytest.raises(ValueError, match="lam"):
        bopo.bopo_reward(True, 0.0, boundaries[0], True)
    # numpy numbers are numbers
    assert bopo.bopo_reward(False, boundaries[0].large_cost, boundaries[0], np.float32(0.5)) \
        == bopo.bopo_reward(False, boundaries[0].large_cost, boundaries[0], 0.5)


def test_reward_wrappers_pay_what_they_say(tasks, boundaries) -> None:
    lam = 0.6
    env = bopo.BoPOReward(TaskReplay(bopo.make_env(PROFILE), tasks[:5]), boundaries[:5],
                          lam)
    for index in range(5):
        env.reset()
        assert env.get_wrapper_attr("task_index") == index
        rewards, cost, done = [], 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(np.array([0], np.int8))
            rewards.append(reward)
            cost += info["cost"]
            done = terminated or truncated
        assert rewards[:-1] == [0.0] * (len(rewards) - 1)
        assert rewards[-1] == pytest.approx(
            bopo.guided_reward(info["success"], cost, boundaries[index], lam))
    plain = bopo.CostPenaltyReward(bopo.make_env(PROFILE), lam=0.5, scale=0.1)
    plain.reset(seed=0)
    total, cost, done = 0.0, 0.0, False
    while not done:
        _, reward, terminated, truncated, info = plain.step(np.array([1], np.int8))
        total += reward
        cost += info["cost"]
        done = terminated or truncated
    assert total == pytest.approx(float(info["success"]) - 0.5 * cost / 0.1)


def test_bopo_reward_pays_the_spend_of_episodes_the_budget_cuts_short(tasks, boundaries
                                                                      ) -> None:
    lam, budget = 0.6, float(np.quantile([b.small_cost for b in boundaries], 0.3))
    env = bopo.BoPOReward(TaskReplay(bopo.make_env(PROFILE, budget), tasks), boundaries,
                          lam)
    cut = 0
    for index in range(len(tasks)):
        env.reset()
        cost, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(np.array([1], np.int8))
            cost += info["cost"]
            done = terminated or truncated
        assert terminated and not truncated  # a budget cut is final for the learner
        assert cost == info["episode_cost"] <= budget
        cut += info.get("budget_exceeded", False)
        assert reward == bopo.guided_reward(info["success"], cost, boundaries[index], lam)
    assert cut > 0


def test_maskable_ppo_never_takes_a_masked_action_under_hard_budget(tasks) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    probe = bopo.make_env(PROFILE)
    probe.reset(options={"task": tasks[0]})
    _, large = probe.unwrapped.step_prices()
    budget = 4 * large  # a few large steps fit, then only small ones
    env = TaskReplay(bopo.make_env(PROFILE, budget=budget), tasks)
    model = bopo_sft.build_model(DummyVecEnv([lambda: env]), seed=0, n_steps=64, batch_size=64)
    model.learn(128)
    torch.manual_seed(0)
    with torch.no_grad():  # make the policy eager to call the large model
        model.policy.action_net.bias[1] += 5.0
    router = bopo_sft.MaskedRouter(bopo_sft.policy_weights(model.policy), env)
    masked_steps = 0
    for _ in range(6):
        obs, _ = env.reset()
        done = False
        while not done:
            mask = env.get_wrapper_attr("action_masks")()
            action, _ = model.predict(obs, action_masks=mask, deterministic=False)
            fast, _ = router.predict(obs)
            slow, _ = model.predict(obs, action_masks=mask, deterministic=True)
            np.testing.assert_array_equal(fast, slow)
            if not mask[1]:
                masked_steps += 1
                assert action.tolist() == [0]
            obs, _, terminated, truncated, info = env.step(action)
            np.testing.assert_array_equal(info["calls"], action)  # nothing had to be dropped
            assert env.get_wrapper_attr("remaining_budget") >= 0
            done = terminated or truncated
    assert masked_steps > 0  # the budget really masked the large model


def test_hard_budget_is_what_the_allocators_see() -> None:
    env = HardBudget(gym.make(bopo.ENV_ID), budget=0.0)
    env.reset(seed=0)
    router = bopo_sft.MaskedRouter([(np.zeros((2, 13)), np.array([0.0, 9.0]))], env)
    assert router.predict(env.observation_space.sample())[0].tolist() == [0]


def test_report_smoke_writes_everything(smoke_all) -> None:
    call = smoke_all.reports["bopo"]  # what the session's `experiments all` ran (conftest)
    (tmp_path, scale), text = call["args"], call["returned"]
    assert scale == "smoke" and call["kwargs"]["jobs"] is None
    for profile in ("alfworld", "sciworld", "appworld"):
        assert (tmp_path / f"pareto_bopo_{profile}.png").read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / f"pareto_bopo_{profile}.svg").read_bytes().startswith(b"<?xml")
        assert f"## {profile}" in text
        assert f"{profile}: BoPO's frontier" in text
    assert (tmp_path / "bopo.md").read_text(encoding="utf-8") == text
    data = json.loads((tmp_path / "bopo.json").read_text(encoding="utf-8"))
    rep = data["profiles"]["appworld"]
    assert set(rep["strata_eval"]) == {"easy", "hard", "intractable"}
    methods = rep["methods"]
    # vanilla PPO's sweep (on appworld) chose other than the paper's point: a tuned row
    # there; BoPO's chose the paper's point itself: no second copy of its row
    assert set(methods) == {"always-small", "always-large", "oracle", "planner", "sft",
                            "bopo/0.5", "ppo/0.5", "ppo/tuned", "cascade/1",
                            "random-mix/0.5", "difficulty-threshold", "best-rule"}
    assert "ppo/tuned" not in data["profiles"]["alfworld"]["methods"]
    assert rep["tuned"]["bopo"]["same_as_paper"] and not rep["tuned"]["ppo"]["same_as_paper"]
    assert "BoPO's sweep chose the paper's configuration itself" in text
    assert methods["ppo/tuned"]["label"] == "PPO (vanilla), tuned"
    assert "ppo/tuned" in data["gap_closed"]["tasks"]["appworld"]["methods"]
    assert methods["bopo/0.5"]["label"] == "BoPO, as in the paper (λ=0.5)"
    seeds_used = data["seeds"]
    assert seeds_used == [0, 1]
    for key in ("sft", "bopo/0.5", "ppo/0.5", "ppo/tuned"):  # learned rows pool the seeds
        assert methods[key]["seeds"] == seeds_used
        per_seed = methods[key]["per_seed"]
        assert len(per_seed["success_rate"]) == 2
        assert methods[key]["success_rate"] == pytest.approx(np.mean(per_seed["success_rate"]))
        assert methods[key]["episode_return"] == pytest.approx(
            np.mean(per_seed["episode_return"]))
    scan = data["lambda_scan"]
    assert scan["profile"] == "appworld" and scan["seeds"] == seeds_used
    assert list(scan["rows"]) == ["bopo/0.5", "bopo/0.9", "bopo-linear/2", "bopo-linear/8"]
    # a scan row that is also a table row is the same runs
    assert scan["rows"]["bopo/0.5"]["success_rate"][0] == pytest.approx(
        methods["bopo/0.5"]["success_rate"])
    assert set(scan["spread"]) == {"clipped", "linear"}
    assert "## λ scan (appworld)" in text and "| linear | 8 |" in text
    assert methods["always-small"]["call_ratio"]["large"] == 0.0
    assert methods["always-large"]["call_ratio"]["large"] > 0.5  # unless the budget masks it
    for profile_report in data["profiles"].values():
        for m in profile_report["methods"].values():
            assert m["episodes"] == data["scale"]["n_eval"]
            assert f"| {m['label']} |" in text
    for profile, profile_report in data["profiles"].items():
        # Fitted on the profile's training tasks under its budget (the same stack the
        # evaluation uses), then frozen: the threshold a fit there gives, shown in the label.
        rule = profile_report["methods"]["difficulty-threshold"]
        threshold = rule["fitted_threshold"]
        assert 0.0 <= threshold <= 1.0 and threshold in DifficultyThreshold.GRID
        train = bopo.draw_tasks(profile, data["scale"]["n_train"], data["train_task_seed"])
        scored_env = bopo.make_env(profile, profile_report["budget"])
        refit = DifficultyThreshold.fit(scored_env, train)
        assert refit.threshold == threshold, profile
        assert rule["label"] == f"Difficulty threshold (fitted, t={threshold:g})"
        assert 0.0 <= rule["call_ratio"]["large"] <= 1.0
        # The best fixed rule: searched the same way, on the same tasks and budget.
        best = profile_report["methods"]["best-rule"]
        assert best["rule"] == BestFixedRule.fit(scored_env, train).description, profile
        assert best["label"] == f"Best fixed rule (searched on training tasks): {best['rule']}"
        assert f"| {best['label']} |" in text
    assert set(rep["frontiers"]) == {"ppo", "cascade"}
    curve = rep["learning_curves"]["bopo/0.5"]
    assert [p["timesteps"] for p in curve["mean"]] == [0, data["scale"]["timesteps"]]
    # step 0 is the SFT, seed by seed
    assert [c[0]["success_rate"] for c in curve["per_seed"]] \
        == methods["sft"]["per_seed"]["success_rate"]
    _check_gap_block(data, text)
    with pytest.raises(ValueError, match="scale"):
        bopo_experiment.report(tmp_path, "huge")


def _check_gap_block(data: dict, text: str) -> None:
    """The gap_closed block: the better rule, the planner, every learned router's share."""
    from experiments.aggregates import runner as aggregates
    from experiments.bopo.gaps import RULES

    block = data["gap_closed"]
    assert list(block["tasks"]) == list(data["profiles"])
    assert aggregates.score_matrices([{**block, "file": "bopo.json"}])  # the reader takes it
    for profile, entry in block["tasks"].items():
        methods = data["profiles"][profile]["methods"]
        means = {k: methods[k]["episode_return"] for k in RULES}
        assert entry["rule_method"] == max(RULES, key=means.get)
        assert entry["rule"] == pytest.approx(max(means.values()))
        assert entry["reference"] == pytest.approx(methods["planner"]["episode_return"])
        tuned = {"ppo/tuned"} if profile == "appworld" else set()  # appworld's sweep
        assert set(entry["methods"]) == {"sft", "bopo/0.5", "ppo/0.5"} | tuned
        for key, share in entry["methods"].items():
            assert len(share["per_seed"]) == len(data["seeds"])
            gap = entry["reference"] - entry["rule"]
            if gap > 0:
                expected = (methods[key]["episode_return"] - entry["rule"]) / gap
                assert share["share"][0] == pytest.approx(expected)
                assert share["per_seed"] == pytest.approx(
                    [(g - entry["rule"]) / gap
                     for g in methods[key]["per_seed"]["episode_return"]])
                assert f"| {gaps.share_cell(share)} |" in text
            else:
                assert share["share"][0] is None
    assert "| Return | Gap closed |" in text


def test_gap_block_starts_from_the_better_rule_and_scores_learned_routers_only() -> None:
    from experiments.bopo.gaps import gap_block

    rng = np.random.default_rng(0)
    rule = rng.normal(0.5, 0.2, 50)
    returns = {k: [v] for k, v in {
        "difficulty-threshold": rule, "best-rule": rule - 0.1, "planner": rule + 0.4,
        "oracle": rule + 1.0, "always-small": rule - 0.5, "sft": rule + 0.1,
        "ppo/1": rule - 0.2}.items()}
    returns["bopo/0.4"] = [rule + 0.2, rule + 0.4]  # two seeds: shares 0.5 and 1.0
    flat = {**returns, "planner": [rule - 0.05]}  # the planner below the rule: no gap
    block = gap_block({"alfworld": returns, "appworld": flat})
    entry = block["tasks"]["alfworld"]
    assert entry["rule_method"] == "difficulty-threshold"
    assert set(entry["methods"]) == {"sft", "bopo/0.4", "ppo/1"}  # no fixed row
    shares = {k: v["share"][0] for k, v in entry["methods"].items()}
    assert shares == pytest.approx({"sft": 0.25, "bopo/0.4": 0.75, "ppo/1": -0.5})
    assert entry["methods"]["bopo/0.4"]["per_seed"] == pytest.approx([0.5, 1.0])
    low, high = entry["methods"]["bopo/0.4"]["share"][1:]
    assert low < 0.75 < high
    assert all(v["share"][0] is None for v in block["tasks"]["appworld"]["methods"].values())
    swapped = gap_block({"alfworld": {**returns, "best-rule": [rule + 0.2]}})
    assert swapped["tasks"]["alfworld"]["rule_method"] == "best-rule"
    with pytest.raises(ValueError, match="planner"):
        gap_block({"alfworld": {k: v for k, v in returns.items() if k != "planner"}})


def test_paired_success_difference_is_the_shared_bootstrap_of_the_mean() -> None:
    from cost_envs.metrics import EpisodeRecord, bootstrap_mean_ci
    from experiments.bopo.report import paired_success_difference

    rng = np.random.default_rng(0)

    def records(p: float) -> list[EpisodeRecord]:
        return [EpisodeRecord(bool(rng.random() < p), 0.0, 0.1, 0.0, np.zeros(2, int), 3)
                for _ in range(120)]

    a, b = records(0.7), records(0.5)
    diff = np.array([x.success for x in a], float) - np.array([y.success for y in b], float)
    point, low, high = paired_success_difference([a], [b], resamples=400, seed=5)
    assert (point, low, high) == bootstrap_mean_ci(diff, n_resamples=400, confidence=0.95, seed=5)
    # the same numbers as the former hand-written bootstrap (one block of draws)
    means = diff[np.random.default_rng(5).integers(0, 120, (400, 120))].mean(axis=1)
    np.testing.assert_allclose((low, high), np.quantile(means, [0.025, 0.975]), atol=1e-12)
    narrow = paired_success_difference([a], [b], resamples=400, seed=5, confidence=0.5)
    assert low <= narrow[1] <= narrow[2] <= high
    for bad in (0, -3):
        with pytest.raises(ValueError):
            paired_success_difference([a], [b], resamples=bad)
    with pytest.raises(ValueError, match="equally long"):
        paired_success_difference([a], [b[:-1]])
    # Two seeds of a against one run of b: b is compared with each seed, two-level.
    c = records(0.7)
    two = (np.array([[x.success for x in run] for run in (a, c)], float)
           - np.array([y.success for y in b], float))  # a - b and c - b, seed by seed
    assert paired_success_difference([a, c], [b], resamples=400, seed=5) \
        == bootstrap_mean_ci(two, n_resamples=400, seed=5)
    with pytest.raises(ValueError, match="one run of b"):
        paired_success_difference([a, c], [b, b, b])


def test_the_method_module_holds_no_experiment() -> None:
    import subprocess
    import sys

    # In a fresh process: importing the method must not import the experiments.
    code = ("import sys, agents.learners.bopo, agents.learners.bopo_sft; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'experiments'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    for name in ("report", "run_all", "SCALES", "BopoScale", "TaskReplay", "markdown"):
        assert not hasattr(bopo, name), name


def test_task_replay_visits_the_list_in_order_or_shuffled(tasks) -> None:
    env = TaskReplay(bopo.make_env(PROFILE), tasks[:3])
    assert env.task_index == -1
    order = []
    for _ in range(7):
        env.reset()
        order.append(env.task_index)
        assert env.unwrapped.task is tasks[env.task_index]
    assert order == [0, 1, 2, 0, 1, 2, 0]
    shuffled = TaskReplay(bopo.make_env(PROFILE), tasks[:5], shuffle=True, seed=1)
    passes = []
    for _ in range(2):
        one = []
        for _ in range(5):
            shuffled.reset()
            one.append(shuffled.task_index)
        passes.append(one)
    assert all(sorted(p) == [0, 1, 2, 3, 4] for p in passes)  # each pass visits every task
    assert passes[0] != [0, 1, 2, 3, 4] or passes[1] != [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="at least one task"):
        TaskReplay(bopo.make_env(PROFILE), [])


def test_results_are_reported_in_job_order_whatever_order_workers_finish() -> None:
    # Two workers finish in an order the machine's load decides; the report must not.
    from experiments.bopo.jobs import WarmStart

    sc = bopo_experiment.BopoScale("order", n_train=8, n_eval=4, timesteps=16,
                                   bopo_lams=(0.1, 0.4), ppo_lams=(0.5, 2.0), seeds=2,
                                   scan_profile="alfworld", linear_lams=(3.0,), scan_seeds=1)
    profiles = ("sciworld", "alfworld")

    def warm(profile: str, seed: int) -> WarmStart:
        return WarmStart(profile, seed, 1.0, [], {}, 0, [], (0.0, 0.0), {}, (), ())

    warms = {p: {s: warm(p, s) for s in (1, 0)} for p in reversed(profiles)}
    keys = ["bopo/0.1", "bopo/0.4", "ppo/0.5", "ppo/2"]
    finished = {p: {(key, s): f"{p} {key} {s}" for key in reversed([*keys, "bopo-linear/3"])
                    for s in (1, 0)} for p in profiles}
    prepared = {p: p for p in reversed(profiles)}
    results = bopo_experiment.in_job_order(prepared, warms, finished, profiles, sc, 0)
    assert list(results.prepared) == list(profiles) and list(results.learned) == list(profiles)
    assert list(results.learned["sciworld"]) == keys
    assert list(results.learned["alfworld"]) == [*keys, "bopo-linear/3"]  # the scan's
    assert results.learned["alfworld"]["ppo/2"] == ["alfworld ppo/2 0", "alfworld ppo/2 1"]
    assert results.learned["alfworld"]["bopo-linear/3"] == ["alfworld bopo-linear/3 0"]
    assert [w.seed for w in results.warm["sciworld"]] == [0, 1]


def test_the_report_counts_the_tasks_where_the_cost_weight_cannot_act() -> None:
    # BoPO's cost term is lam * clip((C - C_lo) / (C_hi - C_lo), 0, 1): zero at or below
    # the cheaper boundary's cost, where no lam changes the reward (issue #11).
    from cost_envs.metrics import EpisodeRecord
    from experiments.bopo.report import method_summary

    boundary = bopo.Boundary(True, 1.0, 5, True, 3.0, 4)  # C_lo = 1, C_hi = 3
    costs = [0.5, 1.0, 2.0, 3.5]  # below, at, between, above the boundaries
    records = [EpisodeRecord(True, 10.0, c, 1.0, np.array([1]), 4) for c in costs]
    summary = method_summary([records], [boundary] * 4, resamples=10, seed=0)
    assert summary["cost_term_zero"] == pytest.approx(0.5)
    assert [boundary.position(c) for c in costs] == [0.0, 0.0, 0.5, 1.0]

