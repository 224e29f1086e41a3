"""CORL (agents.learners.corl, experiments.corl.runner): tier routing by layout names, per-tier
adapters, per-tier scoring, the experiment's report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import cost_envs
from agents.baselines import FixedConsultation
from agents.evaluation import EvaluationResult, run_episode
from agents.learners.corl import (
    TierAdapters,
    make_tier_env,
    score_tier,
    tier_layout,
    tier_scores,
    train_shared_ppo,
    train_tier_adapters,
)
from agents.rules import BestFixedRule
from cost_envs.envs.expert_routing import CONTROLLER
from cost_envs.metrics import EpisodeRecord, bootstrap_mean_ci
from cost_envs.wrappers import TIERS
from experiments.corl import runner as corl
from experiments.corl.runner import (
    BEST_RULE,
    CONSULT_ALL,
    CORL_ENVS,
    CORL_SCALES,
    LEARNED,
    LEARNED_KEYS,
    ORACLE,
    PAPER_LEARNED,
    PLANNER,
    assemble,
    best_fixed_row,
    corl_markdown,
    file_names,
    learned_in,
    read_result,
    run_corl,
    run_envs,
)
from experiments.shared.gaps import decode_scores, share_cell


class Constant:
    def __init__(self, action):
        self.action = np.asarray(action, dtype=np.int8)

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        return self.action.copy(), state


def _tier_obs(tier: str, dim: int = 20) -> np.ndarray:
    obs = np.zeros(dim, dtype=np.float32)
    obs[-4 + TIERS.index(tier)] = 1.0
    obs[-1] = 0.5
    return obs


CONSTANTS = {"low": Constant([1, 0, 0]), "medium": Constant([0, 1, 0]),
             "high": Constant([0, 0, 1])}


def test_tier_layout_names_the_budget_tier_observation() -> None:
    env = make_tier_env()
    layout = tier_layout(env)
    base = env.unwrapped.observation_layout
    assert {k: layout[k] for k in base} == base  # the env's slots keep their positions
    for tier in TIERS:
        obs, info = env.reset(seed=4, options={"tier": tier})
        assert info["tier"] == tier
        np.testing.assert_array_equal(obs[layout["tier"]], np.eye(3)[TIERS.index(tier)])
        assert obs[layout["budget_left"]].tolist() == [1.0]
        assert obs[layout["rounds_left"]].tolist() == [1.0]
    assert layout["budget_left"].stop == env.observation_space.shape[0]
    with pytest.raises(ValueError, match="BudgetTier observation"):
        tier_layout(gym.make("cost_envs/ExpertRouting-v0"))


def test_tier_adapters_route_each_observation_to_its_tier() -> None:
    router = TierAdapters(CONSTANTS, tier_layout(make_tier_env()))
    for tier, expected in zip(TIERS, np.eye(3, dtype=np.int8), strict=True):
        action, _ = router.predict(_tier_obs(tier))
        np.testing.assert_array_equal(action, expected)
    batch = np.stack([_tier_obs("high"), _tier_obs("low")])
    actions, _ = router.predict(batch)
    np.testing.assert_array_equal(actions, [[0, 0, 1], [1, 0, 0]])


def test_tier_adapters_read_the_tier_by_name_not_by_position() -> None:
    # The tier one-hot moved to the front: the router follows the layout.
    router = TierAdapters(CONSTANTS, {"tier": slice(0, 3)})
    obs = np.zeros(20, dtype=np.float32)
    obs[2] = 1.0  # high at the front ...
    obs[-4] = 1.0  # ... and "low" where a BudgetTier would put it
    action, _ = router.predict(obs)
    np.testing.assert_array_equal(action, [0, 0, 1])


#: One short rollout and two epochs per training: what these tests check (the spaces, the
#: frozen base, adapters that moved) needs updates, not learning (issue #36: the default
#: 512-step rollouts and 10 epochs cost 1.4 s of the fast tier for the same checks).
SHORT = {"n_steps": 128, "batch_size": 64, "n_epochs": 2}


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    shared, history = train_shared_ppo(128, seed=0, ppo=SHORT)
    snapshot = {k: v.detach().clone() for k, v in shared.state_dict().items()}
    adapters = train_tier_adapters(shared, 128, seed=0, ppo=SHORT)
    return shared, snapshot, adapters, history


def test_shared_ppo_learns_on_budget_tier_observations(trained) -> None:
    shared, _, _, history = trained
    env = make_tier_env()
    assert shared.observation_space == env.observation_space
    assert history and history[-1]["timesteps"] >= 128


def test_tier_adapters_keep_the_shared_base_and_action_head(trained) -> None:
    shared, snapshot, adapters, _ = trained
    assert adapters.layout == tier_layout(make_tier_env())
    # Training the adapters must not touch the shared policy itself.
    for name, tensor in shared.state_dict().items():
        assert torch.equal(tensor, snapshot[name]), name
    shared_layers = [m for m in shared.features_extractor.net if isinstance(m, torch.nn.Linear)]
    for tier, policy in adapters.policies.items():
        assert policy.lora_rank == 8
        groups = policy.parameter_groups()
        assert groups["adapter"], tier
        assert all(not p.requires_grad for _, p in groups["base"] + groups["action"])
        # The frozen base is the shared encoder, weight for weight.
        bases = [layer.base_layer for layer in policy.features_extractor.net
                 if hasattr(layer, "base_layer")]
        assert len(bases) == len(shared_layers)
        for base, layer in zip(bases, shared_layers, strict=True):
            assert torch.equal(base.weight, layer.weight)
            assert torch.equal(base.bias, layer.bias)
        assert torch.equal(policy.action_net.weight, shared.action_net.weight)
        # ... and the adapter did train (B starts at zero).
        lora_b = [p for n, p in groups["adapter"] if "lora_B" in n]
        assert any(p.abs().sum() > 0 for p in lora_b), tier


def test_tier_adapters_need_the_plain_shared_policy(trained) -> None:
    _, _, adapters, _ = trained
    with pytest.raises(ValueError, match="lora_rank=None"):
        train_tier_adapters(adapters.policies["low"], 128, ppo=SHORT)


def test_fixed_consultation_asks_once_then_answers() -> None:
    env = make_tier_env(tier="high")
    record = run_episode(FixedConsultation(env, [0, 2]), env, seed=3)
    assert record.length == 2
    np.testing.assert_array_equal(record.calls, [1, 0, 1])
    alone = run_episode(FixedConsultation(env, []), env, seed=3)
    assert alone.length == 1 and alone.calls.sum() == 0
    # The first round is read from the env layout's "rounds_left" slot, by name.
    asker = FixedConsultation(env, [1])
    slot = env.unwrapped.observation_layout["rounds_left"].start
    first, later = np.zeros(20, np.float32), np.ones(20, np.float32)
    first[slot], later[slot] = 1.0, 0.0
    np.testing.assert_array_equal(asker.predict(first)[0], [0, 1, 0])
    np.testing.assert_array_equal(asker.predict(later)[0], [0, 0, 0])


def test_score_tier_controller_alone_matches_the_tasks() -> None:
    episodes = 60
    scores = score_tier(lambda env: FixedConsultation(env, []), "low", episodes, seed=5,
                        n_resamples=50)
    # Recompute from the same task stream: the controller is right iff its luck is below
    # its accuracy, and it pays exactly one round.
    env = gym.make("cost_envs/ExpertRouting-v0")
    right, cost = [], []
    for i in range(episodes):
        env.reset(seed=5 if i == 0 else None)
        task = env.unwrapped.task
        right.append(task.controller_luck < float(CONTROLLER.accuracy(task.difficulty)))
        cost.append(env.unwrapped.step_cost)
    assert scores.accuracy[0] == pytest.approx(np.mean(right))
    assert scores.avg_cost[0] == pytest.approx(np.mean(cost))
    assert scores.expert_call_ratio == (0.0, 0.0, 0.0)
    assert scores.accuracy[1] <= scores.accuracy[0] <= scores.accuracy[2]
    budget = cost_envs.envs.expert_routing.TIER_BUDGETS["low"]
    assert scores.budget_exceeded == pytest.approx(np.mean(np.array(cost) > budget))


def test_score_tier_gates_accuracy_by_the_budget() -> None:
    # o3 alone costs far more than the low tier's budget: right answers do not count.
    scores = score_tier(lambda env: FixedConsultation(env, [2]), "low", 40, seed=1,
                        n_resamples=50)
    assert scores.accuracy[0] > 0.5
    assert scores.budget_exceeded == 1.0
    assert scores.accuracy_within_budget == (0.0, 0.0, 0.0)
    assert scores.expert_call_ratio[0] == 1.0
    assert scores.calls_per_query == {"gpt-4.1-nano": 0.0, "gpt-4.1": 0.0, "o3": 1.0}


def test_a_two_level_interval_covers_the_spread_between_seeds() -> None:
    rng = np.random.default_rng(0)
    same = (rng.random(300) < 0.7).astype(float)
    spread = np.stack([(rng.random(300) < p).astype(float) for p in (0.5, 0.7, 0.9)])
    point, low, high = bootstrap_mean_ci(spread, n_resamples=500)
    assert point == pytest.approx(spread.mean())
    _, low_one, high_one = bootstrap_mean_ci(spread.reshape(-1), n_resamples=500)
    assert high - low > 2 * (high_one - low_one)  # seeds disagree: the interval says so
    _, low_same, high_same = bootstrap_mean_ci(np.stack([same] * 3), n_resamples=500)
    _, low_flat, high_flat = bootstrap_mean_ci(same, n_resamples=500)
    assert high_same - low_same == pytest.approx(high_flat - low_flat, abs=0.02)
    with pytest.raises(ValueError, match="2-D"):
        bootstrap_mean_ci(np.zeros((2, 2, 2)))


@pytest.fixture(scope="module")
def smoke_report(smoke_all) -> tuple[Path, dict[str, str]]:
    """The smoke ``report`` (v0 and v1) that ``experiments all`` ran: out and the pages.

    The session's ``all --scale smoke`` (tests/conftest.py) called ``report(out, "smoke")``
    with the scale's own jobs; computing the same report again here would only repeat it.
    """
    call = smoke_all.reports["corl"]
    out, scale = call["args"]
    assert scale == "smoke" and call["kwargs"]["jobs"] is None
    return out, call["returned"]


def test_the_report_does_not_depend_on_the_number_of_workers(smoke_report) -> None:
    torch.set_num_threads(1)
    env_id = "cost_envs/ExpertRouting-v0"
    # the smoke report ran run_corl in this process (the smoke scale's one job); its JSON
    # is that result, so the one-process run is not repeated here
    out, _ = smoke_report
    assert CORL_SCALES["smoke"].jobs == 1
    alone = read_result(out / file_names(env_id)[1])
    spread = run_envs("smoke", envs=(env_id,), jobs=2)[env_id]
    assert json.dumps(alone, sort_keys=True) == json.dumps(spread, sort_keys=True)


def test_run_corl_rejects_an_unknown_scale() -> None:
    with pytest.raises(ValueError, match="scale"):
        run_corl("huge")


V1 = "cost_envs/ExpertRouting-v1"


def test_report_writes_tables_json_and_figure_for_v0_and_v1(smoke_report) -> None:
    tmp_path, pages = smoke_report
    assert list(pages) == list(CORL_ENVS) == ["cost_envs/ExpertRouting-v0", V1]
    assert (tmp_path / "corl_tiers.md").read_text() == pages["cost_envs/ExpertRouting-v0"]
    assert (tmp_path / "corl_tiers_ExpertRouting-v1.md").read_text() == pages[V1]
    data = {env_id: read_result(tmp_path / file_names(env_id)[1]) for env_id in CORL_ENVS}
    for env_id, result in data.items():
        assert result["env_id"] == env_id
        assert pages[env_id].startswith(f"# CORL on {env_id}: one controller for three "
                                        "budget tiers\n")
        assert set(result["results"]) == {"mixed", "gsm8k", "math500", "aime"}
        assert result["settings"]["episodes"] == CORL_SCALES["smoke"].episodes
        for profile, table in result["results"].items():
            assert list(table) == list(TIERS)
            for tier, rows in table.items():
                assert "LoRA-PPO, one adapter per tier" in rows
                assert "Controller alone" in rows
                # Every expert once, on every query, whatever the tier: its ratio is 1.
                everyone = rows[CONSULT_ALL]
                assert everyone["expert_call_ratio"] == [1.0, 1.0, 1.0], (profile, tier)
                assert set(everyone["calls_per_query"].values()) == {1.0}
                assert f"| {tier} | {CONSULT_ALL} |" in pages[env_id]  # every profile's table
                searched = rows[BEST_RULE]["rule"]
                assert f"| {tier} | {BEST_RULE}: {searched} |" in pages[env_id]
        assert "Does the expert-call ratio rise with the tier?" in pages[env_id]
        # the planner in every table, under the oracle; one gap_closed task per table
        name = env_id.split("/")[-1]
        tasks = result["gap_closed"]["tasks"]
        assert sorted(tasks) == sorted(f"{name}/{p}/{t}" for p in result["results"]
                                       for t in TIERS)
        for profile, table in result["results"].items():
            for tier, rows in table.items():
                assert f"| {tier} | {PLANNER} |" in pages[env_id]
                assert (rows[PLANNER]["accuracy_within_budget"][0]
                        <= rows[ORACLE]["accuracy_within_budget"][0])
                entry = tasks[f"{name}/{profile}/{tier}"]
                assert entry["rule_label"] == best_fixed_row(rows)
                assert entry["reference"] == rows[PLANNER]["accuracy_within_budget"][0]
                # tuned rows where a sweep is committed (v0), not on v1
                tuned = {"ppo/tuned", "lora-ppo/tuned"} if env_id != V1 else set()
                assert set(entry["methods"]) == {"ppo", "lora-ppo"} | tuned
                assert all(len(m["per_seed"]) == 2 for m in entry["methods"].values())
        # The learned rows pool the scale's training seeds (issue #11: intervals over
        # seeds and queries); their value is the mean of the seeds' values.
        assert result["seeds"] == list(range(CORL_SCALES["smoke"].seeds)) == [0, 1]
        assert len(result["training_curves"]) == 2
        for table in result["results"].values():
            for rows in table.values():
                assert learned_in(rows) == list(LEARNED if env_id != V1 else PAPER_LEARNED)
                for method in learned_in(rows):
                    entry = rows[method]
                    assert entry["seeds"] == 2
                    assert entry["accuracy_within_budget"][0] == pytest.approx(
                        np.mean(entry["accuracy_within_budget_per_run"]))
                    assert len(entry["accuracy_within_budget_per_run"]) == 2
    # Same questions and luck on v0 and v1: one model's answer scores the same; with every
    # expert's vote, v1's coinciding wrong answers can only outvote the right one.
    v0, v1 = (data[env_id]["results"] for env_id in CORL_ENVS)
    for profile, table in v0.items():
        for tier, rows in table.items():
            for method in ("Controller alone", "Single expert: o3"):
                assert v1[profile][tier][method]["accuracy"] == rows[method]["accuracy"]
            ours, theirs = v1[profile][tier][CONSULT_ALL], rows[CONSULT_ALL]
            assert ours["avg_cost"] == theirs["avg_cost"]
            assert ours["accuracy"][0] <= theirs["accuracy"][0]
    # The best fixed rule is searched per tier, on that tier's env (gated reward) and the
    # profile's training tasks: the rule each tier froze is that tier's own search.
    for tier in TIERS:
        env = make_tier_env({"profile": "math500"}, tier=tier, env_id=V1)
        search = BestFixedRule(env, n_tasks=CORL_SCALES["smoke"].rule_tasks)
        assert data[V1]["results"]["math500"][tier][BEST_RULE]["rule"] == search.description
    # the other experiments' files share the directory (test_experiments checks that no
    # temporary is left in it); these are every file whose name says corl
    assert sorted(p.name for p in tmp_path.iterdir() if "corl" in p.name) == [
        "corl_tiers.json", "corl_tiers.md", "corl_tiers_ExpertRouting-v1.json",
        "corl_tiers_ExpertRouting-v1.md", "corl_tiers_ExpertRouting-v1_curves.csv",
        "corl_tiers_curves.csv", "pareto_corl.png", "pareto_corl.svg",
        "pareto_corl_ExpertRouting-v1.png", "pareto_corl_ExpertRouting-v1.svg"]  # no temporaries
    for env_id in CORL_ENVS:
        stem = tmp_path / file_names(env_id)[2]
        assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert stem.with_suffix(".svg").read_bytes().startswith(b"<?xml")


def test_fixed_consultation_acts_on_a_batch_like_on_single_observations() -> None:
    env = gym.make("cost_envs/ExpertRouting-v0")
    first, _ = env.reset(seed=0)
    consult = FixedConsultation(env, [1])
    later, *_ = env.step(np.array([1, 0, 0], dtype=np.int8))
    batch, _ = consult.predict(np.stack([first, later]))
    single = [consult.predict(first)[0], consult.predict(later)[0]]
    np.testing.assert_array_equal(batch, np.stack(single))
    np.testing.assert_array_equal(single[0], [0, 1, 0])  # first round: the fixed experts
    np.testing.assert_array_equal(single[1], [0, 0, 0])  # then answer


# ------------------------------------------------------------ the gap closed (issue #11)
def _run(within: list[int], over: list[int] | None = None) -> EvaluationResult:
    """Synthetic episodes: right where ``within`` is 1; ``over`` marks right but too dear."""
    over = over or [0] * len(within)
    records = tuple(EpisodeRecord(success=bool(w or o), quality=10.0 * bool(w or o),
                                  cost=1.0 if o else 0.001, flops=0.0,
                                  calls=np.array([1, 0, 0]), length=2)
                    for w, o in zip(within, over, strict=True))
    return EvaluationResult(records, ("gpt-4.1-nano", "gpt-4.1", "o3"), 0)


def _row(within: list[int], cost: float = 0.001) -> dict:
    run = _run(within)
    run = EvaluationResult(tuple(replace(r, cost=cost) for r in run.records),
                           run.agent_names, 0)
    return tier_scores([run], 0.0015, n_resamples=50).as_dict()


def test_best_fixed_row_is_the_best_non_privileged_row_and_the_cheaper_on_ties() -> None:
    rows = {"Controller alone": _row([1, 0, 0, 0]),
            "Single expert: o3": _row([1, 1, 0, 0], 0.0012),
            CONSULT_ALL: _row([1, 1, 0, 0]), ORACLE: _row([1, 1, 1, 1]),
            PLANNER: _row([1, 1, 1, 0]), LEARNED[0]: _row([1, 1, 1, 1])}
    assert best_fixed_row(rows) == CONSULT_ALL  # as good as o3 alone, cheaper


def test_gap_closed_block_puts_learned_rows_between_the_best_fixed_row_and_the_planner(
        tmp_path) -> None:
    from experiments.aggregates import runner as aggregates

    n = 8
    rule, planner_scores = [1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]
    fixed_run = {"Controller alone": _row(rule), "Single expert: o3": _row([0] * n),
                 PLANNER: _row(planner_scores), ORACLE: _row([1] * n)}
    tables = {"mixed": {tier: dict(fixed_run) for tier in TIERS}}
    gap = {"mixed": {tier: {"rule": "Controller alone", "rule_scores": rule,
                            "reference_scores": rule if tier == "high" else planner_scores}
                     for tier in TIERS}}
    # seed 0 closes half the gap; seed 1 matches the planner's accuracy but two of its
    # right answers cost more than the budget, so it closes none
    seeds = [_run([1, 1, 1, 0, 0, 0, 0, 0]), _run([1, 1, 0, 0, 0, 0, 0, 0],
                                                 over=[0, 0, 1, 1, 0, 0, 0, 0])]
    learned = [{"seed": s, "curve": [], "runs": {("mixed", tier, method): run
                                                 for tier in TIERS for method in LEARNED}}
               for s, run in enumerate(seeds)]
    result = assemble("cost_envs/ExpertRouting-v0", "smoke", {"tables": tables, "gap": gap},
                      learned)
    block = result["gap_closed"]
    assert block["experiment"] == "corl" and block["reference"] == PLANNER
    low = block["tasks"]["ExpertRouting-v0/mixed/low"]
    assert (low["rule"], low["reference"], low["rule_label"]) == (0.25, 0.5, "Controller alone")
    for label, key in LEARNED_KEYS.items():
        entry = low["methods"][key]
        assert entry["label"] == label
        assert entry["per_seed"] == pytest.approx([0.5, 0.0])
        assert entry["share"][0] == pytest.approx(0.25)
    high = block["tasks"]["ExpertRouting-v0/mixed/high"]
    assert high["methods"]["ppo"]["share"][0] is None  # the planner is not above the rule
    page = corl_markdown(result)
    assert "| low | Controller alone | " in page and page.count("| 0 (rule) |") == 3
    assert page.count("| 1 (reference) |") == 3
    assert f"| {share_cell(low['methods']['ppo'])} |" in page
    assert "| n/a |" in page
    # the block carries each row's per-query scores, for the aggregates to resample
    assert low["rule_scores"] == " ".join(map(str, rule))
    assert low["reference_scores"] == " ".join(map(str, planner_scores))
    assert [decode_scores(s).mean() for s in low["methods"]["ppo"]["seed_scores"]] \
        == [0.375, 0.25]  # the per-seed shares 0.5 and 0
    # the aggregates read the block: the tier without a gap is left out, and two queries
    # of eight are too few to resolve the planner's lead in the others
    (tmp_path / "corl_tiers.json").write_text(json.dumps(result))
    matrices = aggregates.score_matrices(aggregates.read_blocks(tmp_path))["corl"]
    assert matrices["without_gap"] == ["ExpertRouting-v0/mixed/high"]
    assert matrices["unresolved_gap"] == ["ExpertRouting-v0/mixed/low",
                                          "ExpertRouting-v0/mixed/medium"]
    assert matrices["matrices"] == {}


def test_fixed_rows_score_the_planner_in_every_table_under_the_oracle(monkeypatch) -> None:
    monkeypatch.setattr(corl, "PROFILES_EVALUATED", ("math500",))
    monkeypatch.setitem(corl.CORL_SCALES, "tiny",
                        corl.CorlScale(ppo_timesteps=0, adapter_timesteps=0, episodes=12,
                                       n_resamples=20, seeds=1, rule_tasks=3))
    fixed = corl.fixed_rows("tiny", V1)
    for tier in TIERS:
        rows, gap = fixed["tables"]["math500"][tier], fixed["gap"]["math500"][tier]
        assert gap["rule"] == best_fixed_row(rows) and gap["rule"] not in (PLANNER, ORACLE)
        assert np.mean(gap["rule_scores"]) == rows[gap["rule"]]["accuracy_within_budget"][0]
        assert np.mean(gap["reference_scores"]) == rows[PLANNER]["accuracy_within_budget"][0]
        assert len(gap["reference_scores"]) == 12
        planner_score = rows[PLANNER]["accuracy_within_budget"][0]
        assert planner_score <= rows[ORACLE]["accuracy_within_budget"][0]
        assert rows[PLANNER]["budget_exceeded"] == 0.0  # it never plans past the budget


def test_tuned_rows_train_the_committed_choice_on_the_untuned_rows_steps(monkeypatch) -> None:
    from experiments.tune import corl as tune_corl
    from experiments.tune import runner as tune

    calls = []

    def fake(name):
        def fit(env_id, config, timesteps, seed):
            calls.append((name, env_id, dict(config), timesteps, seed))
            return Constant([0, 0, 0]), timesteps
        return fit

    monkeypatch.setattr(tune_corl, "fit_corl_ppo", fake("ppo"))
    monkeypatch.setattr(tune_corl, "fit_corl_adapters", fake("adapters"))
    settings = CORL_SCALES["default"]
    v0 = "cost_envs/ExpertRouting-v0"
    rows = corl._tuned_rows(settings, 3, v0)
    assert list(rows) == list(LEARNED[len(PAPER_LEARNED):])
    assert calls == [
        ("ppo", v0, tune.chosen("corl-ppo", v0), settings.ppo_timesteps, 3),
        ("adapters", v0, tune.chosen("corl-adapters", v0),
         settings.ppo_timesteps + len(TIERS) * settings.adapter_timesteps, 3)]
    # the tuned configurations differ from the paper's (else the rows would repeat them)
    assert calls[0][2]["learning_rate"] != 3e-4
    # v1 has no sweep: no tuned rows, nothing trained
    calls.clear()
    assert corl._tuned_rows(settings, 0, V1) == {} and calls == []
