"""Shared fixtures: every test that takes ``env_id`` runs once per registered environment.

Tests are generated from ``cost_envs.ENV_IDS`` (as Minigrid generates its tests from its
registry), so an environment is covered the moment it is registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import cost_envs

ENV_IDS = sorted(cost_envs.ENV_IDS)


@pytest.fixture(params=ENV_IDS)
def env_id(request: pytest.FixtureRequest) -> str:
    return request.param


@dataclass
class SmokeAll:
    """What ``python -m experiments all --scale smoke`` did: its files, progress and reports.

    ``reports`` maps an experiment (``corl``, ``bopo``, ``traces``, ``rules``) to how its
    ``report`` was called (``args``, ``kwargs``) and what it ``returned``; ``lora_ppo`` to
    the same of ``experiments.lora_ppo.runner.reproduce`` (the computed reports, before writing).
    """

    status: int
    out: Path
    progress: str
    reports: dict[str, dict[str, Any]]


@pytest.fixture(scope="session")
def smoke_all(tmp_path_factory: pytest.TempPathFactory) -> SmokeAll:
    """One ``python -m experiments all --scale smoke`` (its ``main``, in this process).

    Shared by the session: tests/test_experiments.py checks the command, and the lora_ppo,
    corl, bopo, traces and rules tests check the reports it wrote rather than computing the
    same smoke reports again. A spy on each experiment's ``report`` (lora_ppo's
    ``reproduce``) keeps its arguments and return.
    """
    import contextlib
    import io

    from experiments.__main__ import main
    from experiments.bopo import runner as bopo
    from experiments.corl import runner as corl
    from experiments.lora_ppo import runner as lora_ppo
    from experiments.rules import runner as rules
    from experiments.traces import runner as traces

    out = tmp_path_factory.mktemp("experiments") / "results"
    reports: dict[str, dict[str, Any]] = {}

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def report(*args: Any, **kwargs: Any) -> Any:
            returned = real(*args, **kwargs)
            reports[name] = {"args": args, "kwargs": kwargs, "returned": returned}
            return returned
        return report

    progress = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(progress):
        for name, module in (("corl", corl), ("bopo", bopo), ("traces", traces),
                             ("rules", rules)):
            patch.setattr(module, "report", spy(name, module.report))
        patch.setattr(lora_ppo, "reproduce", spy("lora_ppo", lora_ppo.reproduce))
        status = main(["all", "--scale", "smoke", "--out", str(out)])
    assert status == 0, progress.getvalue()
    return SmokeAll(status, out, progress.getvalue(), reports)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` as users call it (wrappers included)."""
    return gym.make(env_id, **kwargs)


def random_actions(m: int, seed: int, dtype: type = np.int8) -> Iterator[np.ndarray]:
    """An endless stream of random MultiBinary(m) actions, reproducible from ``seed``.

    Drawn from our own generator rather than ``action_space.sample()`` so that two envs
    compared step by step get the same actions without sharing a space's RNG.
    """
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, 2, m).astype(dtype)


@dataclass
class Trajectory:
    """What an env returned over some episodes, copied so later mutation cannot alter it."""

    resets: list[tuple[np.ndarray, dict[str, Any]]] = field(default_factory=list)
    steps: list[tuple[np.ndarray, float, bool, bool, dict[str, Any]]] = field(
        default_factory=list
    )

    def record_reset(self, obs: np.ndarray, info: dict[str, Any]) -> None:
        self.resets.append(_snapshot((obs, info)))

    def record_step(self, result: tuple) -> None:
        self.steps.append(_snapshot(result))


def _snapshot(data: Any) -> Any:
    if isinstance(data, np.ndarray):
        return data.copy()
    if isinstance(data, dict):
        return {k: _snapshot(v) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(_snapshot(v) for v in data)
    return data


def play_episode(
    env: gym.Env,
    actions: Iterator[Any],
    traj: Trajectory | None = None,
    before_step: Callable[[gym.Env, np.ndarray], None] | None = None,
    **reset_kwargs: Any,
) -> tuple[Trajectory, list[Any]]:
    """Reset with ``reset_kwargs`` and step until the episode ends, recording everything.

    ``before_step(env, obs)`` runs before every step (e.g. to call privileged hooks).
    Returns the trajectory and the actions taken, so an episode can be replayed.
    """
    traj = Trajectory() if traj is None else traj
    obs, info = env.reset(**reset_kwargs)
    traj.record_reset(obs, info)
    return traj, finish_episode(env, actions, traj, obs, before_step)


def finish_episode(
    env: gym.Env,
    actions: Iterator[Any],
    traj: Trajectory,
    obs: np.ndarray,
    before_step: Callable[[gym.Env, np.ndarray], None] | None = None,
) -> list[Any]:
    """Step the current episode to its end, recording every step; returns the actions."""
    taken = []
    done = False
    while not done:
        if before_step is not None:
            before_step(env, obs)
        action = next(actions)
        taken.append(action)
        result = env.step(action)
        traj.record_step(result)
        obs, done = result[0], result[2] or result[3]
    return taken


def run_episodes(
    env: gym.Env,
    actions: Iterator[Any],
    episodes: int,
    seed: int | None = None,
    before_step: Callable[[gym.Env, np.ndarray], None] | None = None,
    traj: Trajectory | None = None,
) -> Trajectory:
    """Play ``episodes`` episodes; ``seed`` goes to the first reset only.

    Later resets take no seed, so the env's own task stream is exercised too.
    """
    traj = Trajectory() if traj is None else traj
    for episode in range(episodes):
        play_episode(env, actions, traj, before_step, seed=seed if episode == 0 else None)
    return traj


def assert_same_trajectory(a: Trajectory, b: Trajectory) -> None:
    """Exact equality of everything returned, types included (1.0 is not np.float64(1.0))."""
    assert len(a.resets) == len(b.resets)
    assert len(a.steps) == len(b.steps), "episodes of different lengths"
    for i, (x, y) in enumerate(zip(a.resets, b.resets, strict=True)):
        assert data_equivalence(x, y, exact=True), f"reset {i} differs: {x} != {y}"
    for i, (x, y) in enumerate(zip(a.steps, b.steps, strict=True)):
        assert data_equivalence(x, y, exact=True), f"step {i} differs:\n{x}\n!=\n{y}"


def diverges_only_on_what_it_sees(agent: Any, env: gym.Env, task: Any, fresh: Any) -> bool:
    """Play ``task`` and ``fresh`` (the same task, its luck redrawn) with a planner.

    Asserts that the planner acts alike while the two episodes look alike (it cannot read
    the luck) and returns whether the episodes came apart at all (the luck mattered).
    """
    from agents.evaluation import rollout

    runs = [rollout(agent, env, options={"task": t}, record_steps=True) for t in (task, fresh)]
    same = 0
    while (same < min(len(r.actions) for r in runs)
           and np.array_equal(runs[0].observations[same], runs[1].observations[same])):
        np.testing.assert_array_equal(runs[0].actions[same], runs[1].actions[same])
        same += 1
    return same < max(len(r.actions) for r in runs)


def code_lines(source: str) -> int:
    """Lines of a module that are code: not blank, not comments, not docstrings.

    The size guideline (issue #25) is about cohesion, so documentation never counts
    against it: a module is not made to fit by trimming what explains it.
    """
    import ast
    import io
    import tokenize

    documentation: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                documentation.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                              tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - documentation)


# ---------------------------------------------------------------- the fast tier
#: Tests that train, search or start processes: `make test` leaves them out (``-m "not
#: slow"``), `make test-all` and CI run them (issue #25). Chosen from a full run's
#: ``--durations`` (every test of 0.5 s or more of call time on the 2-core reference
#: machine), and every test that uses one of :data:`SLOW_FIXTURES`. A new slow test is
#: marked with ``@pytest.mark.slow`` where it is written.
SLOW_TESTS: dict[str, set[str]] = {
    "test_adaptivity": {"test_no_baseline_reaches_the_oracle_cps"},
    "test_aggregates": {"test_without_task_noise_the_intervals_are_rliables_stratified_bootstrap"},
    "test_bopo": {"test_report_smoke_writes_everything"},
    "test_bopo_curve": {
        "test_every_row_and_seed_is_scored_at_every_checkpoint_with_its_gradient_steps",
        "test_the_tuned_curve_trains_the_sweeps_choice_into_its_own_files",
        "test_runs_advanced_in_turn_train_what_each_trains_alone",
    },
    "test_bopo_seeds": {"test_results_do_not_depend_on_the_number_of_workers"},
    "test_cli_errors": {
        "test_evaluate_a_truncated_model_in_a_real_process",
        "test_pretrain_with_a_bad_out_fails_in_a_real_process",
    },
    "test_cli_route": {"test_gsm8k_round_trip_and_the_router_beats_random"},
    "test_corl": {
        "test_fixed_rows_score_the_planner_in_every_table_under_the_oracle",
        "test_the_report_does_not_depend_on_the_number_of_workers",
    },
    "test_dagger": {
        "test_dagger_adds_the_students_states_and_is_deterministic",
        "test_dagger_with_the_bayes_teacher_runs_on_toolbench",
    },
    "test_distributions": {"test_supervision_fits_a_joint_that_independent_bits_cannot"},
    "test_docs_site": {"test_the_site_builds_strictly"},
    "test_envs": {"test_oracle_hooks_have_no_side_effects"},
    "test_examples": {"test_example_runs"},
    "test_experiments": {
        "test_experiment_modules_are_small_and_documented",
        "test_the_installed_packages_never_import_the_experiments",
    },
    "test_expert_routing_decisions": {"test_oracle_plan_equals_brute_force"},
    "test_expert_routing_v1": {
        "test_agreement_is_weaker_evidence_on_hard_questions",
        "test_agreement_raises_the_chance_of_being_right_but_is_no_proof",
        "test_oracle_is_the_cheapest_successful_sequence_of_all",
        "test_wrong_answers_coincide_at_the_documented_rate",
    },
    "test_family_baselines": {"test_the_cli_runs_consult_all_and_the_threshold"},
    "test_figures": {
        "test_corl_draws_a_panel_per_profile_and_tier_with_its_budget_line",
        "test_every_figure_is_png_and_svg_and_a_rerun_is_byte_identical",
    },
    "test_imports": {"test_every_module_imports_in_a_fresh_process", "test_imports_flow_one_way",
                     "test_no_module_loads_the_tune_extra"},
    "test_input_files": {"test_deeply_nested_pool"},
    "test_learning_curves": {
        "test_the_curve_scores_the_policy_of_its_step_without_changing_training",
    },
    "test_lora_ppo": {"test_cost_term_lowers_expected_cost_of_calls"},
    "test_minari_export": {
        "test_real_routellm_outcomes_round_trip",
        "test_the_cli_exports_a_trained_model_the_supervised_data_and_logged_traces",
        "test_the_cli_writes_a_dataset_and_rejects_bad_input_in_one_line",
        "test_the_packaged_traces_round_trip_their_logged_outcomes",
    },
    "test_multiagent": {
        "test_a_copy_mid_episode_continues_exactly_like_the_original",
        "test_capacity_and_the_org_budget_are_never_exceeded",
    },
    "test_multiagent_baselines": {"test_the_rule_is_fitted_on_the_tenants_own_pool"},
    "test_multiagent_experiment": {
        "test_the_full_scale_adds_the_shared_policy",
        "test_the_smoke_sweep_writes_its_table_json_and_figure",
    },
    "test_mutations": {"test_the_tests_of_a_mechanism_fail_when_it_is_broken"},
    "test_oracle": {
        "test_flight_planner_two_agents_exhaustive", "test_toolbench_oracle_matches_brute_force",
        "test_toolbench_preset_pool_size_3",
    },
    "test_packaging": {"test_the_wheel_installs_the_envs_without_torch_into_a_fresh_venv"},
    "test_planning": {
        "test_expected_return_equals_the_monte_carlo_mean_of_its_own_policy",
        "test_planner_beats_every_baseline_and_the_best_rule_and_not_the_oracle",
        "test_planner_beats_the_rule_on_other_pools",
    },
    "test_planning_agentic": {
        "test_expected_return_equals_the_monte_carlo_mean_of_its_own_policy",
        "test_planner_beats_the_boundaries_and_the_threshold_rule_and_not_the_oracle",
    },
    "test_planning_bayes": {
        "test_a_prior_concentrated_on_the_task_plays_the_full_planner",
        "test_it_never_reads_the_task_nor_its_luck",
        "test_its_return_lies_between_the_rule_and_the_full_planner",
        "test_other_hidden_parameters_and_luck_change_its_actions_only_through_what_it_sees",
        "test_the_same_seed_gives_the_same_policy_and_the_env_stream_is_untouched",
    },
    "test_planning_expert": {
        "test_expected_score_equals_the_monte_carlo_mean_over_fresh_luck",
        "test_planner_beats_or_ties_every_rule_per_tier_and_stays_under_the_oracle",
        "test_planner_is_deterministic_and_its_value_does_not_depend_on_its_history",
        "test_the_plan_is_computed_without_the_luck",
    },
    "test_planning_flight": {
        "test_on_v1_it_plays_as_on_v0",
        "test_other_luck_changes_its_actions_only_through_observed_outcomes",
        "test_planner_beats_the_rules_and_not_the_oracle",
        "test_scores_after_a_proposal_are_unbiased_over_what_the_proposal_shows",
        "test_scores_at_the_start_are_unbiased_estimates_of_the_returns_they_score",
        "test_the_planner_cannot_see_which_route_the_plan_is",
        "test_the_planner_is_a_deterministic_policy_of_each_task",
    },
    "test_planning_flight_bayes": {
        "test_blind_to_v1s_history_it_plays_v1_as_v0",
        "test_it_is_below_the_planner_and_not_resolved_from_the_one_turn_rule",
        "test_on_a_prior_concentrated_on_the_task_it_plays_as_the_planner",
        "test_tasks_it_cannot_tell_apart_get_the_same_actions",
        "test_the_level_posterior_is_calibrated_and_in_units_of_the_budget",
        "test_the_same_seed_gives_the_same_policy_and_the_env_stream_is_untouched",
        "test_without_clear_evidence_it_plays_a_one_turn_rules_action",
    },
    "test_pretrain": {"test_shipped_base_is_reproducible"},
    "test_readme": {"test_python_block_runs"},
    "test_reproduce": {
        "test_a_failed_run_leaves_previous_results_untouched",
        "test_a_scale_sets_each_envs_steps_its_rows_and_its_sub_envs",
        "test_every_table_has_the_best_fixed_rule_searched_on_training_tasks",
        "test_learning_curves_have_the_timesteps",
        "test_tuned_rows_train_with_the_committed_configuration",
        "test_worker_processes_give_the_same_results_as_one_process",
        "test_write_reports_writes_what_the_command_wrote",
    },
    "test_rl_moves_decisions": {
        "test_a_trained_corl_controller_consults_more_as_only_the_tier_rises",
        "test_bopo_changes_decisions_of_its_sft_warm_start",
        "test_corl_tier_adapters_change_decisions_of_the_shared_policy",
        "test_lora_guided_ppo_changes_decisions_of_its_warm_start",
        "test_ppo_changes_decisions_of_its_initial_policy",
    },
    "test_route_kmodel": {"test_a_k_model_router_on_routerarenas_two_models"},
    "test_router_cv": {"test_the_report_chooses_inside_each_training_fold"},
    "test_router_figures": {
        "test_gsm8k_cross_validated_routers_are_reproduced",
        "test_gsm8k_other_splits_are_reproduced", "test_held_out_rows_are_reproduced",
        "test_k_model_halfway_points_are_reproduced",
    },
    "test_routers": {"test_heldout_evaluation_by_group_resamples_groups"},
    "test_routing_bootstrap": {
        "test_the_held_out_table_compares_at_the_same_share_and_the_same_cost",
    },
    "test_rules": {
        "test_cli_evaluates_the_best_rule_fitted_on_training_tasks",
        "test_flight_planner_search_finds_the_one_turn_rule_on_evaluation_tasks",
        "test_on_toolbench_the_hand_written_rules_are_in_the_family",
        "test_the_search_is_deterministic_and_leaves_evaluation_tasks_alone",
    },
    "test_safe_saving": {
        "test_concurrent_savers_leave_one_complete_directory",
        "test_two_processes_saving_models_leave_one_of_them",
        "test_two_processes_saving_one_set_of_files_never_mix_them",
    },
    "test_trace_evaluate_real": {
        "test_evaluate_runs_on_the_real_logs_and_agrees_with_the_exact_scorer",
    },
    "test_trace_router": {
        "test_a_rendering_failure_writes_nothing",
        "test_cascade_beats_the_prompt_router_on_every_split_seed",
        "test_cascade_router_is_fitted_on_train_only",
        "test_report_pins_the_approximate_token_counter",
    },
    "test_trace_routing": {"test_costs_and_outcomes_replay_the_log"},
    "test_traces_multi": {
        "test_held_out_decisions_never_read_the_held_out_outcomes",
        "test_on_three_models_the_router_beats_the_frontier_on_unseen_groups",
        "test_the_block_says_the_logs_have_two_models_and_reports_skips",
    },
    "test_tune": {"test_the_sweep_leaves_no_files_in_the_repository_or_out",
                  "test_an_interrupted_sweep_resumes_keeping_its_finished_trials"},
    "test_vector": {
        "test_disabled_autoreset_resets_by_mask", "test_same_trajectories_as_sync_vector_env",
        "test_same_trajectories_with_other_arguments", "test_trace_routing_cascade_in_every_mode",
    },
    "test_vector_expert_routing": {"test_pools_too_large_to_tabulate_vote_each_step"},
    "test_vector_large_pool": {"test_flight_planner_above_the_code_limit"},
    "test_vector_sb3": {"test_steps_like_a_dummy_vec_env_of_single_envs"},
    "test_vector_throughput": {"test_quick_run_reports_every_id_ppo_and_scaling"},
    "test_wrappers": {"test_spend_never_exceeds_budget"},
    "test_zoo": {
        "test_zoo_continues_lora_guided_ppo_from_its_warm_start",
        "test_zoo_trains_ppo_with_the_shipped_file_and_a_budget",
    },
    "test_serve_allocator": {"test_served_allocator_decides_as_in_the_env"},
}
#: Fixtures that run a whole experiment or sweep once for their module or the session.
SLOW_FIXTURES = frozenset({"smoke_all", "sweeps", "agentic_rule"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark :data:`SLOW_TESTS` and every test using :data:`SLOW_FIXTURES` as slow."""
    for item in items:
        name = getattr(item, "originalname", item.name)
        if (name in SLOW_TESTS.get(item.path.stem, ())
                or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)
