"""The test tasks are scored only by the reports: no choice reads them (issue #38 point 3).

A task set is the stream of one reset seed (:mod:`agents.seeds`), so the guard records every
seed an env is reset with (the single envs' ``reset``, which every env of the project
reaches through ``super().reset(seed=seed)``; the batched envs' base, whose sub-env ``i``
plays ``seed + i``; BoPO's :func:`~agents.learners.bopo.draw_tasks`, which draws a task
list from a seed) while each selection code path runs at its smallest scale, and checks
that none falls in the test range; the learned rows' training (a Bayes teacher with DAgger,
PPO on batched envs) is checked the same way. The positive controls run the headline runners with
``tasks="test"`` under the same recorder and find the test seed, so the guard is not
vacuous; the CLI passes ``--tasks`` through.

The switch (the last section): a report scored on the test set still makes its choices on
the validation set. For lora_ppo (and the converged table), CORL and BoPO, the pick of
each gap's rule end is watched: it is handed the candidates' validation scores (equal to
a validation run's, unequal to the test scores), the scoring of the candidates for it
resets only validation seeds, and the rule end so chosen is the one scored on test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agents.learners.bopo as bopo_learner
from agents.seeds import EVAL_TASK_SEED, TEST_TASK_SEED, TEST_TASK_SPAN
from cost_envs.vector.base import BatchedOrchestrationEnv
from experiments.bopo import jobs as bopo_jobs
from experiments.bopo import runner as bopo_runner
from experiments.shared.task_sets import TASK_SETS, set_of, tagged, task_seed

TEST_RANGE = range(TEST_TASK_SEED, TEST_TASK_SEED + TEST_TASK_SPAN)
TOOLBENCH = "cost_envs/ToolBench-v0"
FLIGHT = "cost_envs/FlightPlanner-v1"
EXPERT = "cost_envs/ExpertRouting-v0"
BOPO_PROFILE = "appworld"
#: BoPO's smallest scale: a handful of tasks, one seed, a few RL steps.
TINY_BOPO = replace(bopo_jobs.SCALES["smoke"], n_train=8, n_eval=4, timesteps=64, seeds=1,
                    scan_seeds=1, n_envs=2, checkpoints=(0,))


class Recorder:
    """Every reset seed seen since it started (``None`` resets continue a stream)."""

    def __init__(self) -> None:
        self.seeds: list[int] = []

    def add(self, seed: Any) -> None:
        if seed is not None:
            self.seeds.append(int(seed))

    def in_test_range(self) -> list[int]:
        return sorted({seed for seed in self.seeds if seed in TEST_RANGE})


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """Record every reset seed of the single and batched envs and of BoPO's task draws."""
    recorder = Recorder()
    single = gym.Env.reset

    def record_single(self: gym.Env, *, seed: int | None = None,
                      options: dict[str, Any] | None = None) -> Any:
        recorder.add(seed)
        return single(self, seed=seed, options=options)

    batched = BatchedOrchestrationEnv.reset

    def record_batched(self: BatchedOrchestrationEnv, *, seed: Any = None,
                       options: dict[str, Any] | None = None) -> Any:
        if isinstance(seed, int | np.integer):
            for i in range(self.num_envs):
                recorder.add(int(seed) + i)
        elif seed is not None:
            for one in seed:
                recorder.add(one)
        return batched(self, seed=seed, options=options)

    draw = bopo_learner.draw_tasks

    def record_draw(profile: str, n: int, seed: int, **kwargs: Any) -> Any:
        recorder.add(seed)
        return draw(profile, n, seed, **kwargs)

    monkeypatch.setattr(gym.Env, "reset", record_single)
    monkeypatch.setattr(BatchedOrchestrationEnv, "reset", record_batched)
    for module in (bopo_learner, bopo_jobs, bopo_runner):
        monkeypatch.setattr(module, "draw_tasks", record_draw)
    yield recorder


def assert_never_tested(seen: Recorder) -> None:
    assert seen.seeds, "the path reset no env: the guard saw nothing"
    assert not seen.in_test_range(), f"a selection path read test seeds {seen.in_test_range()}"


def test_the_test_range_meets_no_other_range() -> None:
    from agents import seeds

    others = {name: value for name, value in vars(seeds).items()
              if name.endswith("_SEED") and name not in ("TEST_TASK_SEED",)}
    assert all(value not in TEST_RANGE for value in others.values()), others
    # the training sub-envs' words start at SUB_ENV_TASK_SEED, past the test range
    assert TEST_RANGE.stop <= seeds.SUB_ENV_TASK_SEED
    assert min(seeds.train_task_seeds(4, 16)[1:]) >= seeds.SUB_ENV_TASK_SEED
    assert task_seed("validation") == EVAL_TASK_SEED and task_seed("test") == TEST_TASK_SEED
    assert task_seed(50_000) == 50_000  # another study's own set: its first seed as given
    assert {set_of(seed) for seed in TASK_SETS.values()} == set(TASK_SETS)
    assert tagged({"a": 1}, "validation") == {"a": 1}  # today's files stay as they are
    assert tagged({"a": 1}, "test") == {"a": 1, "tasks": "test"}
    with pytest.raises(ValueError, match="tasks: expected one of"):
        task_seed("train")


def test_the_learned_priors_logs_stay_out_of_the_test_range() -> None:
    # its logs are training data: every reset seed of the default study's logs (each
    # training seed's batched env, sub-env i at + i) lies below the test range
    from experiments.learned_prior.runner import log_seed
    from experiments.learned_prior.settings import DEFAULT, LOG_ENVS

    logged = {log_seed(seed) + i for seed in range(DEFAULT.seeds) for i in range(LOG_ENVS)}
    assert not logged & set(TEST_RANGE), sorted(logged & set(TEST_RANGE))[:3]


# ------------------------------------------------------------------ selection paths
def test_the_rule_search_never_meets_test_tasks(seen: Recorder) -> None:
    """Issue #10's search fits on RULE_TASK_SEED and scores on the validation tasks."""
    from experiments.rules import runner as rules

    tiny = rules.Scale("tiny", train_tasks=6, episodes=4, resamples=10, beam=1, max_turns=1,
                       cuts=1)
    for env_id in (TOOLBENCH, FLIGHT, EXPERT, "cost_envs/AgenticRouting-v0"):
        rules.search_env(env_id, tiny)
    assert_never_tested(seen)


def test_the_budget_curves_stop_marks_never_meet_test_tasks(seen: Recorder) -> None:
    """The curves whose stop marks set the full-scale budgets: their checkpoints and ends."""
    from experiments.budgets import runner as budgets
    from experiments.budgets.report import stops_improving
    from experiments.budgets.settings import Scale

    tiny = Scale("tiny", timesteps=64, seeds=1, checkpoints=(0, 32), episodes=4, n_envs=2,
                 resamples=10)
    result = budgets.run_job(budgets.Job(TOOLBENCH, "ppo", 0, tiny))
    assert [point["timesteps"] for point in result["curve"]][:1] == [0]
    stops_improving(np.array([[0.0, 0.1], [0.0, 0.2]]), 10)
    assert_never_tested(seen)


@pytest.mark.slow  # the best fixed rule's search on the tables' 200 training tasks: 12 s
def test_the_budget_curves_gap_ends_never_meet_test_tasks(seen: Recorder) -> None:
    """The rule and planner ends the curves' stop marks are measured against."""
    from experiments.budgets import runner as budgets

    rule, planner = budgets.reference_returns(TOOLBENCH, 4)
    assert len(rule) == len(planner) == 4
    assert_never_tested(seen)


@pytest.mark.slow  # two seeds of the shared PPO and its adapters: tens of seconds
def test_corl_budget_curves_never_meet_test_tasks(seen: Recorder) -> None:
    """CORL's curves (experiments/corl/budgets.py), whose stop marks read the same queries."""
    from experiments.corl import budgets as corl_budgets

    corl_budgets.run_seed(0, corl_budgets.SCALES["smoke"], EXPERT)
    assert_never_tested(seen)


def test_bopo_curves_never_meet_test_tasks(seen: Recorder) -> None:
    """BoPO's long curves (experiments/bopo/curve.py) score LearningRuns at checkpoints."""
    budget = bopo_jobs.profile_budget(BOPO_PROFILE, TINY_BOPO)
    warm = bopo_jobs.warm_start(BOPO_PROFILE, TINY_BOPO, 0, budget, scored=False)
    job = bopo_runner.learn_jobs(warm, TINY_BOPO, budget, 0)[0]
    run = bopo_jobs.LearningRun(job)
    run.advance(0)
    run.finish()
    assert_never_tested(seen)


def test_a_tuning_trial_never_meets_test_tasks(seen: Recorder) -> None:
    """A trial's objective (experiments.tune.runner.run_trial without Ray): fit, then score."""
    from experiments.tune.methods import METHODS

    spec = METHODS["ppo"]
    allocator, _ = spec.fit(TOOLBENCH, spec.paper, 64, 0)
    spec.score(allocator, TOOLBENCH, 4)
    assert_never_tested(seen)


def test_corl_fitted_rules_never_meet_test_tasks(seen: Recorder) -> None:
    """CORL's best fixed rule per tier (and the gap's rule end) on the validation queries."""
    from experiments.corl import runner as corl

    fixed = corl.fixed_rows("smoke", EXPERT, profiles=("gsm8k",))
    assert fixed["gap"]["gsm8k"]
    assert_never_tested(seen)


def test_bopo_fitted_rules_never_meet_test_tasks(seen: Recorder) -> None:
    """BoPO's difficulty threshold and best fixed rule, fitted on the training draw."""
    prepared = bopo_runner.prepare_profile(BOPO_PROFILE, TINY_BOPO)
    assert "fitted_threshold" in prepared.fitted["difficulty-threshold"]
    assert_never_tested(seen)


def test_training_and_teachers_never_meet_test_tasks(seen: Recorder) -> None:
    """The learned rows' training: Bayes-taught LoRA with DAgger; PPO on batched envs."""
    from agents.learners.supervised import SupervisedConfig
    from agents.learners.training import train

    taught = SupervisedConfig(episodes=8, epochs=1, teacher="bayes", dagger_rounds=1,
                              dagger_episodes=4)
    train(TOOLBENCH, "lora", 64, seed=0, supervised=taught)  # the teacher: the LoRA stage
    train(TOOLBENCH, "ppo", 64, seed=0, n_envs=2)
    assert_never_tested(seen)


# ------------------------------------------------------------------ positive controls
def test_the_headline_runners_read_the_test_tasks_when_told(seen: Recorder) -> None:
    """The same recorder sees the test seed when a headline runner scores on ``test``."""
    from experiments.corl import runner as corl
    from experiments.lora_ppo import runner as lora_ppo
    from experiments.rules import runner as rules

    tiny = lora_ppo.Scale("tiny", timesteps=64, seeds=1, episodes=4, resamples=10,
                          rule_tasks=4)
    reports = lora_ppo.reproduce(tiny, envs=(TOOLBENCH,), rows=(), jobs=1, log=lambda _: None,
                                 tasks="test")
    assert reports[TOOLBENCH]["tasks"] == "test"
    assert reports[TOOLBENCH]["eval_seed"] == TEST_TASK_SEED
    assert seen.in_test_range() == [TEST_TASK_SEED]
    seen.seeds.clear()
    rules.search_env(TOOLBENCH, rules.Scale("tiny", 6, 4, 10, 1, 1, 1), tasks="test")
    assert seen.in_test_range() == [TEST_TASK_SEED]
    seen.seeds.clear()
    corl.fixed_rows("smoke", EXPERT, profiles=("gsm8k",), tasks="test")
    assert seen.in_test_range() == [TEST_TASK_SEED]
    seen.seeds.clear()
    bopo_runner.prepare_profile(BOPO_PROFILE, TINY_BOPO, tasks="test")
    assert seen.in_test_range() == [TEST_TASK_SEED]


def test_the_command_line_passes_the_task_set() -> None:
    from experiments.__main__ import TASK_SETS as CLI_SETS
    from experiments.__main__ import build_parser, main, routing_record

    assert tuple(TASK_SETS) == CLI_SETS
    assert build_parser().parse_args(["rules"]).tasks == "validation"
    assert build_parser().parse_args(["bopo", "--tasks", "test"]).tasks == "test"
    assert "`python -m experiments all --scale smoke --tasks test`" in routing_record(
        "smoke", [], "test")
    assert "--tasks" not in routing_record("smoke", [])
    with pytest.raises(SystemExit) as exit_:
        main(["budgets", "--tasks", "test", "--scale", "smoke"])
    assert exit_.value.code == 2


# ------------------------------------------------------------------ the switch
# A report of the test set still makes every choice on the validation set: each gap's rule
# end is picked on the candidates' validation scores, then only it is scored on test.
class Picks:
    """A pick function that keeps every argument it was called with."""

    def __init__(self, pick: Any) -> None:
        self.pick = pick
        self.seen: list[Any] = []

    def __call__(self, scores: Any) -> Any:
        self.seen.append(scores)
        return self.pick(scores)


def seeds_while(seen: Recorder, function: Any) -> tuple[Any, list[list[int]]]:
    """``function`` wrapped to keep, per call, the reset seeds seen while it ran."""
    calls: list[list[int]] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start = len(seen.seeds)
        out = function(*args, **kwargs)
        calls.append(seen.seeds[start:])
        return out

    return wrapped, calls


def assert_validation_only(seeds: list[int]) -> None:
    assert EVAL_TASK_SEED in seeds, f"the choice did not score the validation tasks: {seeds}"
    assert not set(seeds) & set(TEST_RANGE), f"the choice read test seeds {seeds}"


def test_a_test_table_chooses_its_rule_end_on_the_validation_tasks(
        seen: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """lora_ppo (and the converged table, which reads score_baselines too)."""
    from experiments.lora_ppo import runner as lora_ppo
    from experiments.shared.gaps import encode_scores

    tiny = lora_ppo.Scale("tiny", timesteps=64, seeds=1, episodes=6, resamples=10,
                          rule_tasks=4)
    picks = Picks(lora_ppo.best_rule_row)
    monkeypatch.setattr(lora_ppo, "best_rule_row", picks)
    choice, calls = seeds_while(seen, lora_ppo.rule_returns_on_validation)
    monkeypatch.setattr(lora_ppo, "rule_returns_on_validation", choice)
    fixed = lora_ppo.score_baselines(TOOLBENCH, tiny, TEST_TASK_SEED)
    assert seen.in_test_range() == [TEST_TASK_SEED]  # the rows are scored on test
    [choice_seeds] = calls
    assert_validation_only(choice_seeds)
    [chosen_on] = picks.seen
    validation = lora_ppo.score_baselines(TOOLBENCH, tiny, EVAL_TASK_SEED)
    assert chosen_on == {key: validation.returns[key] for key in chosen_on}
    assert chosen_on != {key: fixed.returns[key] for key in chosen_on}  # the sets differ
    assert fixed.rule == lora_ppo.gap_ends(validation)[0]
    # the chosen row's test scores are the gap's rule end
    block = lora_ppo.gap_block(TOOLBENCH, fixed, {}, TEST_TASK_SEED)
    assert block is not None and "chosen on the validation tasks" in block["rule"]
    entry = block["tasks"]["ToolBench-v0"]
    assert entry["rule_scores"] == encode_scores(fixed.returns[fixed.rule])


def test_corl_test_tables_choose_their_rule_on_the_validation_queries(
        seen: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    from cost_envs.wrappers import TIERS
    from experiments.corl import runner as corl

    picks = Picks(corl.best_fixed_row)
    monkeypatch.setattr(corl, "best_fixed_row", picks)
    table, calls = seeds_while(seen, corl.tier_table)
    monkeypatch.setattr(corl, "tier_table", table)
    fixed = corl.fixed_rows("smoke", EXPERT, profiles=("gsm8k",), tasks="test")
    assert seen.in_test_range() == [TEST_TASK_SEED]
    # per tier: the table on test, then the candidates on validation
    assert len(calls) == 2 * len(TIERS)
    for choice_seeds in calls[1::2]:
        assert_validation_only(choice_seeds)
    chosen_on = picks.seen[:len(TIERS)]
    validation = corl.fixed_rows("smoke", EXPERT, profiles=("gsm8k",))
    for tier, rows in zip(TIERS, chosen_on, strict=True):
        expected = validation["tables"]["gsm8k"][tier]
        assert all(corl.is_rule_candidate(method) for method in rows)
        assert rows == {method: expected[method] for method in rows}
        assert fixed["gap"]["gsm8k"][tier]["rule"] == validation["gap"]["gsm8k"][tier]["rule"]
    scored = [fixed["tables"]["gsm8k"][tier] for tier in TIERS]
    assert chosen_on != [{m: table[m] for m in rows} for table, rows in zip(scored, chosen_on,
                                                                             strict=True)]
    assert "validation queries" in corl.gap_rule("test")
    assert corl.gap_rule("validation") == corl.GAP_RULE  # the committed block's words


def test_bopo_test_tables_choose_their_rule_on_the_validation_tasks(
        seen: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.bopo.gaps import gap_block

    picks = Picks(bopo_runner.best_rule)
    monkeypatch.setattr(bopo_runner, "best_rule", picks)
    choice, calls = seeds_while(seen, bopo_runner.rule_returns_on_validation)
    monkeypatch.setattr(bopo_runner, "rule_returns_on_validation", choice)
    prepared = bopo_runner.prepare_profile(BOPO_PROFILE, TINY_BOPO, tasks="test")
    assert TEST_TASK_SEED in seen.seeds
    [choice_seeds] = calls
    assert_validation_only(choice_seeds)
    [chosen_on] = picks.seen
    validation = bopo_runner.prepare_profile(BOPO_PROFILE, TINY_BOPO)
    rules = list(bopo_runner.TRAINED_RULES)
    assert chosen_on == {key: [validation.returns[key]] for key in rules}
    assert chosen_on != {key: [prepared.returns[key]] for key in rules}
    assert prepared.rule == validation.rule
    returns = {key: [prepared.returns[key]] for key in (*rules, "planner")}
    block = gap_block({BOPO_PROFILE: returns}, {BOPO_PROFILE: prepared.rule}, "test")
    assert block["tasks"][BOPO_PROFILE]["rule_method"] == prepared.rule
    assert "on the validation tasks" in block["rule"]


def test_the_gaps_use_the_rule_chosen_on_validation_not_the_best_on_their_tasks() -> None:
    """The rule end recorded at the choice is the one scored, even if another row is better."""
    from experiments.bopo.gaps import profile_entry
    from experiments.lora_ppo import runner as lora_ppo

    returns = {"rule": (0.1, 0.2), "best-rule": (0.9, 0.8), "planner": (1.0, 1.0)}
    entries = {key: {"label": key} for key in returns}
    assert lora_ppo.gap_ends(lora_ppo.FixedRows(entries, returns, rule="rule")) == (
        "rule", "planner")
    assert lora_ppo.gap_ends(lora_ppo.FixedRows(entries, returns)) == ("best-rule", "planner")
    bopo = {"difficulty-threshold": [[0.1, 0.2]], "best-rule": [[0.9, 0.8]],
            "planner": [[1.0, 1.0]]}
    assert profile_entry(bopo, "difficulty-threshold")["rule_method"] == "difficulty-threshold"
    assert profile_entry(bopo)["rule_method"] == "best-rule"
    with pytest.raises(ValueError, match="rule: expected one of"):
        profile_entry(bopo, "planner")


def test_a_converged_test_run_scores_its_end_on_test_with_the_validation_rule(
        seen: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The learned row's end on the test tasks; the fixed rows' rule end on validation."""
    from experiments.budgets import runner as budgets
    from experiments.budgets.settings import Scale as CurveScale
    from experiments.converged import runner as converged
    from experiments.converged.settings import Scale
    from experiments.lora_ppo import runner as lora_ppo

    tiny = CurveScale("tiny", timesteps=64, seeds=1, checkpoints=(64,), episodes=4, n_envs=2,
                      resamples=10)
    row = converged.train_row(budgets.Job(TOOLBENCH, "ppo", 0, tiny, TEST_TASK_SEED), "test")
    assert row["tasks"] == "test" and seen.in_test_range() == [TEST_TASK_SEED]
    seen.seeds.clear()
    choice, calls = seeds_while(seen, lora_ppo.rule_returns_on_validation)
    monkeypatch.setattr(lora_ppo, "rule_returns_on_validation", choice)
    monkeypatch.setattr(converged, "ENV_ID", TOOLBENCH)  # the cheaper env's fixed rows
    fixed = converged.score_fixed(Scale("tiny", 64, 1, 4, resamples=10, rule_tasks=4), "test")
    assert fixed["tasks"] == "test" and seen.in_test_range() == [TEST_TASK_SEED]
    [choice_seeds] = calls
    assert_validation_only(choice_seeds)
    assert converged.runs_folder("test") == "converged_runs_test"
    assert converged.runs_folder("validation") == converged.RUNS


def test_the_stop_mark_curves_refuse_the_test_tasks() -> None:
    """bopo.long's curves (where stop marks are read) take no --tasks; its table does."""
    from experiments.__main__ import build_parser
    from experiments.bopo import long

    with pytest.raises(SystemExit) as exit_:
        long.main(["--curve", "--tasks", "test", "--scale", "smoke"])
    assert exit_.value.code == 2
    assert build_parser().parse_args(["converged", "--tasks", "test"]).tasks == "test"


def test_a_test_table_searches_each_rule_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice on validation scores the searched rule as it froze, not searched again."""
    from agents import rules
    from experiments.corl import runner as corl
    from experiments.lora_ppo import runner as lora_ppo

    searches: list[int] = []
    search = rules.RuleSearch.search

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        searches.append(1)
        return search(self, *args, **kwargs)

    monkeypatch.setattr(rules.RuleSearch, "search", counted)
    tiny = lora_ppo.Scale("tiny", timesteps=64, seeds=1, episodes=6, resamples=10,
                          rule_tasks=4)
    lora_ppo.score_baselines(TOOLBENCH, tiny, TEST_TASK_SEED)
    assert len(searches) == 1, "lora_ppo searched its rule again to choose on validation"
    searches.clear()
    corl.fixed_rows("smoke", EXPERT, profiles=("gsm8k",), tasks="test")
    assert len(searches) == len(corl.TIERS), "CORL searched its tiers' rules again"
    searches.clear()
    bopo_runner.prepare_profile(BOPO_PROFILE, TINY_BOPO, tasks="test")
    assert len(searches) == 1, "BoPO fitted its best rule again to choose on validation"


def test_a_kept_test_run_is_refused_where_a_validation_run_is_read(tmp_path) -> None:
    """Only the folders keep a report's test runs apart; the file itself says so too."""
    from experiments.shared.kept import keep, read_kept

    settings = {"env": "cost_envs/FlightPlanner-v1", "timesteps": 2_000_000}
    test_file, validation_file = tmp_path / "test.json", tmp_path / "validation.json"
    keep(test_file, {**tagged(settings, "test"), "returns": "0.5"})
    keep(validation_file, {**tagged(settings, "validation"), "returns": "0.5"})
    assert read_kept(test_file, tagged(settings, "test")) is not None
    assert read_kept(validation_file, tagged(settings, "validation")) is not None
    with pytest.raises(ValueError, match=r"test\.json: was run with .*'tasks': 'test'"):
        read_kept(test_file, tagged(settings, "validation"))
    with pytest.raises(ValueError, match=r"validation\.json: expected a kept run"):
        read_kept(validation_file, tagged(settings, "test"))
