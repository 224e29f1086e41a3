"""The best fixed rule (agents/rules.py): the family is searched as documented, the winner
is frozen and scores on its training tasks what the search said, and it finds the rules
issue #10's audit found by hand."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401
from agents import cli
from agents.baselines import FixedSequence, OneTurnPlanSearch
from agents.evaluation import evaluate
from agents.rules import (
    BestFixedRule,
    RuleSearch,
    ThresholdRule,
    candidate_actions,
    feature_names,
    fitted,
    training_tasks,
)
from agents.seeds import RULE_TASK_SEED

AGENTIC = "cost_envs/AgenticRouting-v0"
FLIGHT = "cost_envs/FlightPlanner-v0"
SMALL = {"beam": 2, "max_turns": 2, "cuts": 3}


@pytest.fixture(scope="module")
def agentic_rule() -> BestFixedRule:
    return BestFixedRule(gym.make(AGENTIC), n_tasks=200)


def test_candidate_actions_cover_small_pools_exhaustively_and_large_ones_by_pairs() -> None:
    assert len({a.tobytes() for a in candidate_actions(3)}) == 8
    large = candidate_actions(8)  # nothing, 8 singles, 28 pairs, everyone
    assert len({a.tobytes() for a in large}) == 1 + 8 + 28 + 1
    assert max(int(a.sum()) for a in large) == 8


def test_threshold_rule_plays_above_or_below_and_rejects_bad_arguments() -> None:
    env = gym.make(AGENTIC)
    index = env.unwrapped.observation_layout["difficulty"].start
    rule = ThresholdRule(env, index, 0.4, above=[1], below=[0])
    obs = np.zeros(env.observation_space.shape, dtype=np.float32)
    obs[index] = 0.41
    assert rule.act(obs).tolist() == [1]
    obs[index] = 0.4
    assert rule.act(obs).tolist() == [0]
    with pytest.raises(ValueError, match="feature"):
        ThresholdRule(env, 99, 0.4, [1], [0])
    with pytest.raises(ValueError, match="finite"):
        ThresholdRule(env, index, float("nan"), [1], [0])


def test_feature_names_follow_the_layout() -> None:
    names = feature_names(gym.make(FLIGHT))
    assert names[gym.make(FLIGHT).unwrapped.observation_layout["within_budget"].start] == \
        "within_budget"
    assert "task_embedding[0]" in names


def test_agentic_routing_best_rule_is_the_audits_difficulty_threshold(agentic_rule) -> None:
    # Issue #10: "large model when the observed difficulty is above ~0.35" is the rule to
    # beat on AgenticRouting; the search must find that structure on its own.
    rule = agentic_rule.rule
    assert isinstance(rule, ThresholdRule)
    assert feature_names(gym.make(AGENTIC))[rule.feature] == "difficulty"
    assert rule.above.tolist() == [1] and rule.below.tolist() == [0]
    assert 0.2 < rule.threshold < 0.6
    assert agentic_rule.description.startswith("threshold: large if difficulty > ")


def test_ranking_is_sorted_and_the_frozen_rule_scores_what_the_search_said(agentic_rule) -> None:
    keys = [candidate.key() for candidate in agentic_rule.ranking]
    assert keys == sorted(keys)
    env = gym.make(AGENTIC)
    rescored, _ = RuleSearch(env, training_tasks(env, 200)).score(agentic_rule.rule, "again")
    best = agentic_rule.ranking[0]
    assert (rescored.mean_return, rescored.success, rescored.cost) == \
        (best.mean_return, best.success, best.cost)
    # It beats every open-loop rule it was compared with, and strictly: reading the
    # difficulty pays on this env.
    open_loop = [c for c in agentic_rule.ranking if isinstance(c.rule, FixedSequence)]
    assert open_loop and best.mean_return > max(c.mean_return for c in open_loop)


def test_flight_planner_search_finds_the_one_turn_rule_on_evaluation_tasks() -> None:
    # The audit's hand-written rule (plan and search until a good quote, then commit) is
    # matched by a single threshold of the family, found on training tasks only.
    # The hand-written one-turn rule is in the family too: take the best threshold rule.
    env = gym.make(FLIGHT)
    best = BestFixedRule(env, n_tasks=100, beam=2, max_turns=2)
    assert best.ranking[0].mean_return == max(c.mean_return for c in best.ranking)
    threshold = next(c for c in best.ranking if isinstance(c.rule, ThresholdRule))
    assert threshold.mean_return >= best.ranking[0].mean_return - 1e-9
    mine = evaluate(threshold.rule, FLIGHT, episodes=150, seed=0).summary(n_resamples=1)
    hand = evaluate(OneTurnPlanSearch(gym.make(FLIGHT)), FLIGHT, episodes=150,
                    seed=0).summary(n_resamples=1)
    assert mine["success_rate"] >= hand["success_rate"] - 0.02
    assert mine["cps"] <= hand["cps"] * 1.05


def test_open_loop_stops_growing_when_no_episode_outlives_the_sequence() -> None:
    env = gym.make("cost_envs/TraceRouting-v0")  # one decision per query
    ranking = RuleSearch(env, training_tasks(env, 30)).open_loop(beam=3, max_turns=3)
    assert {len(c.rule.actions) for c in ranking} == {1}
    assert len(ranking) == len(candidate_actions(env.unwrapped.n_agents))


def test_the_search_is_deterministic_and_leaves_evaluation_tasks_alone() -> None:
    first = BestFixedRule(gym.make(AGENTIC), n_tasks=40, **SMALL)
    again = BestFixedRule(gym.make(AGENTIC), n_tasks=40, **SMALL)
    assert [c.description for c in first.ranking] == [c.description for c in again.ranking]
    # Fitting draws from its own seed range on the env it is given; evaluation re-seeds,
    # so scoring on that env or a fresh one sees the same tasks.
    searched = gym.make(AGENTIC)
    rule = fitted(BestFixedRule, 40)(searched)
    on_searched = evaluate(rule, searched, episodes=50, seed=0).records
    on_fresh = evaluate(rule, gym.make(AGENTIC), episodes=50, seed=0).records
    assert [(r.success, r.cost) for r in on_searched] == [(r.success, r.cost) for r in on_fresh]
    assert RULE_TASK_SEED >= 40_000  # far from the evaluation seeds (0 and up)


def test_cli_evaluates_the_best_rule_fitted_on_training_tasks(capsys) -> None:
    assert cli.main(["evaluate", "--env", AGENTIC, "--methods", "best-rule,always-small",
                     "--episodes", "60", "--fit-tasks", "40", "--resamples", "10",
                     "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    # The fitted threshold sends some steps to the large model and some to the small one.
    assert 0.0 < results["best-rule"]["call_ratio"]["large"] < 1.0
    assert results["best-rule"]["success_rate"] > results["always-small"]["success_rate"]


def test_on_toolbench_the_hand_written_rules_are_in_the_family() -> None:
    # No open-loop pattern or single threshold comes near ToolBench's skill-to-tool table;
    # a "best fixed rule" that lost to RuleBased would overstate what learning buys.
    env = gym.make("cost_envs/ToolBench-v0")
    best = BestFixedRule(env, n_tasks=60, beam=2, max_turns=2, cuts=2)
    assert best.description.startswith("hand-written: ")
    search = RuleSearch(env, training_tasks(env, 60))
    scored = {c.description: c.mean_return for c in search.hand_written()}
    assert {"hand-written: rule", "hand-written: greedy (coverage 0.7)"} <= set(scored)
    assert "hand-written: one-turn" not in scored  # FlightPlanner's rule refuses ToolBench
    assert best.ranking[0].mean_return == max(scored.values())


def test_budget_tier_slots_are_named() -> None:
    from cost_envs.wrappers import BudgetTier

    env = BudgetTier(gym.make("cost_envs/ExpertRouting-v0"), tier="low")
    names = feature_names(env)
    assert names[-4:] == ["tier[0]", "tier[1]", "tier[2]", "budget_left"]
    assert "obs[" not in " ".join(names)
