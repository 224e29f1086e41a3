"""CORL's and BoPO's sweeps: configurations reach training as given, steps, validation tasks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agents.learners.bopo import draw_tasks
from agents.learners.corl import ADAPTER_LEARNING_RATE
from agents.seeds import BOPO_TRAIN_TASK_SEED, EVAL_TASK_SEED, VALIDATION_TASK_SEED
from experiments.tune import bopo as tune_bopo
from experiments.tune import corl as tune_corl
from experiments.tune.methods import METHODS, PPO_SPACE
from experiments.tune.space import PPO_PAPER, validate

CORL_ENV = tune_corl.CORL_ENV
BOPO_ENV = "cost_envs/AgenticRouting-v0"


class _Policy:
    lora_rank = None


def _fake_corl(monkeypatch) -> list[dict[str, Any]]:
    """Record every CORL training call; each reports the steps it was asked for."""
    calls: list[dict[str, Any]] = []

    def shared(timesteps: int, seed: int, **kwargs: Any) -> tuple[_Policy, list[dict]]:
        calls.append({"stage": "shared", "timesteps": timesteps, "seed": seed, **kwargs})
        return _Policy(), [{"timesteps": timesteps}]

    def adapters(policy: Any, timesteps: int, seed: int, **kwargs: Any) -> SimpleNamespace:
        calls.append({"stage": "adapters", "timesteps": timesteps, "seed": seed, **kwargs})
        return SimpleNamespace(history={t: [{"timesteps": timesteps}]
                                        for t in ("low", "medium", "high")})

    monkeypatch.setattr(tune_corl, "train_shared_ppo", shared)
    monkeypatch.setattr(tune_corl, "train_tier_adapters", adapters)
    return calls


def test_corl_ppo_configurations_reach_training_as_given(monkeypatch) -> None:
    calls = _fake_corl(monkeypatch)
    assert METHODS["corl-ppo"].paper == PPO_PAPER and METHODS["corl-ppo"].space == PPO_SPACE
    moved = {**PPO_PAPER, "learning_rate": 2e-3, "n_steps": 256}
    _, steps = tune_corl.fit_corl_ppo(CORL_ENV, moved, 4096, 2)
    [call] = calls
    assert call == {"stage": "shared", "timesteps": 4096, "seed": 2, "env_id": CORL_ENV,
                    "ppo": moved}
    assert steps == 4096


def test_corl_adapters_split_the_budget_and_train_the_configuration(monkeypatch) -> None:
    calls = _fake_corl(monkeypatch)
    paper = dict(METHODS["corl-adapters"].paper)
    assert paper["learning_rate"] == ADAPTER_LEARNING_RATE
    assert paper["adapter_share"] == pytest.approx(3 * 10_240 / 71_680, abs=0.005)
    _, steps = tune_corl.fit_corl_adapters(CORL_ENV, paper, 20_480, 1)
    shared, adapters = calls
    assert shared == {"stage": "shared", "timesteps": 11_264, "seed": 1, "env_id": CORL_ENV}
    assert adapters["timesteps"] == 3072 and adapters["seed"] == 1
    assert adapters["learning_rate"] == ADAPTER_LEARNING_RATE
    assert adapters["ppo"] == {"ent_coef": 0.01}
    assert steps == 20_480  # the equal budget, exactly
    calls.clear()
    tune_corl.fit_corl_adapters(CORL_ENV, {**paper, "adapter_share": 0.75,
                                           "learning_rate": 3e-3}, 20_480, 1)
    assert [call["timesteps"] for call in calls] == [5120, 5120]
    assert calls[1]["learning_rate"] == 3e-3


@pytest.mark.parametrize("timesteps", [2048, 20_480, 61_440])
def test_every_adapter_share_spends_exactly_the_budget(timesteps: int) -> None:
    [share] = [p for p in tune_corl.ADAPTER_SPACE if p.name == "adapter_share"]
    splits = [tune_corl.split_steps(timesteps, value) for value in share.choices]
    assert all(shared + 3 * tier == timesteps and shared >= 512 and tier >= 512
               and tier % 512 == 0 for shared, tier in splits)
    if timesteps > 2048:  # a larger share of the budget gives the adapters more steps
        assert [tier for _, tier in splits] == sorted({tier for _, tier in splits})


def test_a_budget_the_stages_cannot_split_is_refused() -> None:
    for timesteps in (1000, 1536):
        with pytest.raises(ValueError, match="multiple of 512 of at least 2048"):
            tune_corl.split_steps(timesteps, 0.43)


def _fake_bopo(monkeypatch) -> list[Any]:
    """Record every BoPO job instead of training it; no SFT, no boundary rollouts."""
    jobs: list[Any] = []
    warm = SimpleNamespace(cost_scale=0.5, train_boundaries=["b"], sft_state={"w": 1})
    monkeypatch.setattr(tune_bopo, "budget", lambda: 3.0)
    monkeypatch.setattr(tune_bopo, "warm_start", lambda *a, **k: warm)
    monkeypatch.setattr(tune_bopo, "_train", lambda job: (jobs.append(job), (None, 7))[1])
    return jobs


def test_bopo_configurations_reach_training_as_given(monkeypatch) -> None:
    jobs = _fake_bopo(monkeypatch)
    paper = dict(METHODS["bopo"].paper)
    tune_bopo.fit_bopo(BOPO_ENV, paper, 20_480, 2)
    linear = {**paper, "cost_term": "linear", "linear_lam": 16.0, "lam": 0.9,
              "learning_rate": 3e-4, "ent_coef": 1e-3}
    tune_bopo.fit_bopo(BOPO_ENV, linear, 20_480, 2)
    first, second = jobs
    # trial 0 is the experiment's table row: BoPO, the paper's clipped term, lam 0.5
    assert (first.method, first.lam, first.profile, first.seed) == ("bopo", 0.5, "appworld", 2)
    assert first.ppo == {"learning_rate": 1e-3, "ent_coef": 0.01}
    assert first.sft_state == {"w": 1} and first.budget == 3.0 and not first.curve
    assert first.scale.timesteps == 20_480 and first.scale.n_envs == 8
    # the linear term reads its own weight
    assert (second.method, second.lam) == ("bopo-linear", 16.0)
    assert second.ppo == {"learning_rate": 3e-4, "ent_coef": 1e-3}


def test_bopo_ppo_trains_from_scratch_on_its_cost_weight(monkeypatch) -> None:
    jobs = _fake_bopo(monkeypatch)
    monkeypatch.setattr(tune_bopo, "training_draw", lambda *a: ([], []))
    monkeypatch.setattr(tune_bopo, "cost_scale", lambda boundaries: 0.25)
    tune_bopo.fit_bopo_ppo(BOPO_ENV, {"lam": 2.0, "learning_rate": 5e-4, "ent_coef": 0.02},
                           2048, 0)
    [job] = jobs
    assert (job.method, job.lam, job.sft_state, job.cost_scale) == ("ppo", 2.0, None, 0.25)
    assert job.ppo == {"learning_rate": 5e-4, "ent_coef": 0.02}
    with pytest.raises(ValueError, match="expected env cost_envs/AgenticRouting-v0"):
        tune_bopo.fit_bopo_ppo("cost_envs/ToolBench-v0", METHODS["bopo-ppo"].paper, 2048, 0)


def _lucks(tasks: list[Any]) -> set[bytes]:
    return {np.asarray(task.luck).tobytes() for task in tasks}


def test_bopo_validation_tasks_are_neither_training_nor_evaluation_tasks() -> None:
    profile = tune_bopo.PROFILE
    validation = _lucks(draw_tasks(profile, 200, VALIDATION_TASK_SEED))
    assert len(validation) == 200
    for seed in (*(BOPO_TRAIN_TASK_SEED + s for s in range(3)), EVAL_TASK_SEED):
        assert not validation & _lucks(draw_tasks(profile, 400, seed))
    assert tune_bopo.bopo_task_seeds(3)["training"] == [BOPO_TRAIN_TASK_SEED + s
                                                        for s in range(3)]


class _Always:
    """Every step the same call pattern (SB3's ``predict``)."""

    def __init__(self, action: list[int]) -> None:
        self.action = np.array(action, dtype=np.int8)

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, None]:
        return self.action, None


def test_corl_scores_accuracy_within_each_tiers_budget_averaged_over_tiers() -> None:
    assert METHODS["corl-ppo"].score is METHODS["corl-adapters"].score is tune_corl.score_tiers
    score, metrics = tune_corl.score_tiers(_Always([1, 1, 1]), CORL_ENV, 40)
    within = metrics["within_budget"]
    # consulting every expert is right most often, but only the high tier's budget pays it
    assert within["low"] == within["medium"] == 0 < within["high"] < metrics["success_rate"]
    assert score == pytest.approx(np.mean(list(within.values())))
    alone, metrics = tune_corl.score_tiers(_Always([0, 0, 0]), CORL_ENV, 40)
    # the controller alone costs nothing: within budget whenever right, in every tier
    assert set(metrics["within_budget"].values()) == {metrics["success_rate"]} == {alone}


def test_bopo_scores_the_eq1_return_under_the_experiments_budget(monkeypatch) -> None:
    assert METHODS["bopo"].score is METHODS["bopo-ppo"].score is tune_bopo.score_router
    assert METHODS["ppo"].score is validate  # the ToolBench sweeps keep the plain return
    budgets = []

    def replay(allocator_for, profile, tasks, budget):
        budgets.append((profile, len(tasks), budget, _lucks(tasks)))
        return SimpleNamespace(returns=(1.0, 0.0, 0.5), records=())

    monkeypatch.setattr(tune_bopo, "evaluate_on", replay)
    monkeypatch.setattr(tune_bopo, "summarize", lambda records: {"success_rate": 0.5})
    score, _ = tune_bopo.score_router(tune_bopo.Router(None, "appworld", 2.5), BOPO_ENV, 30)
    [(profile, n, budget, lucks)] = budgets
    assert (profile, n, budget, score) == ("appworld", 30, 2.5, 0.5)
    assert lucks == _lucks(draw_tasks("appworld", 30, VALIDATION_TASK_SEED))
