"""The teacher-memory study (issue #38 point 4): its arms are trained as the table's row."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from agents.learners.common.policies import load_base
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import SupervisedConfig
from agents.learners.training import train
from experiments.teacher_memory import runner
from experiments.teacher_memory.settings import ENV_ID, SMOKE

#: A few seconds of the row's procedure: the Bayes teacher, one DAgger round.
TINY = SupervisedConfig(episodes=12, epochs=1, teacher="bayes", dagger_rounds=1,
                        dagger_episodes=4)


@pytest.mark.slow
def test_the_memoryless_arm_is_trains_lora_bit_for_bit() -> None:
    """``train_lora`` on the default env is ``train(..., "lora")``: the row itself."""
    ours = runner.train_lora(1, TINY, {}).policy.state_dict()
    theirs = train(ENV_ID, "lora", 1, seed=1, supervised=TINY).policy.state_dict()
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key


def test_the_widened_base_is_the_shipped_one_blind_to_the_added_slots() -> None:
    state, config = load_base(pretrained_base_path(ENV_ID))
    wide, wide_config = runner.widened_base(4)
    assert wide_config["obs_dim"] == 21 and config["obs_dim"] == 17
    assert torch.equal(wide["0.weight"][:, :17], state["0.weight"])
    assert not wide["0.weight"][:, 17:].any()
    assert all(torch.equal(wide[key], state[key]) for key in state if key != "0.weight")


@pytest.mark.slow
def test_the_history_arm_trains_on_the_option() -> None:
    trained = runner.train_lora(0, TINY, {"cleared_difficulties": True})
    layer = trained.policy.features_extractor.net[0]
    assert layer.in_features == 21
    assert trained.env_kwargs == {"cleared_difficulties": True}


def test_the_row_config_is_the_tables() -> None:
    config = runner.row_config(replace(SMOKE, supervised=SupervisedConfig()))
    assert (config.teacher, config.dagger_rounds, config.dagger_episodes) == ("bayes", 2, 500)


@pytest.mark.slow
def test_smoke_report_writes_the_table(tmp_path) -> None:
    written = runner.report(tmp_path, jobs=1, scale=SMOKE, log=lambda _: None,
                            command="smoke")
    text = written[0].read_text()
    assert written[0].name == "teacher_memory.md"
    assert "## Paired: with the history minus memoryless" in text
    assert text.count("| student, ") == 2 and "Machine:" in text
    assert np.isfinite(float(text.split("Over the same 2 seeds and tasks: ")[1].split()[0]))


def test_the_report_pairs_the_tables_seeds_apart() -> None:
    """Past the tables' 5 seeds, the first 5 are paired alone too; the differences are paired."""
    from experiments.teacher_memory.report import render

    rng = np.random.default_rng(0)
    rule, planner = rng.random(50), rng.random(50) + 0.5
    fixed = {"rule": rule.tolist(), "planner": planner.tolist(),
             "bayes": (planner + 0.01).tolist(), "rule_label": "RuleBased"}
    base = rng.random((6, 50)) + 0.3
    runs = [{"arm": arm, "seed": seed, "returns": (base[seed] + shift).tolist(),
             "success": 0.5} for arm, shift in (("memoryless", 0.0), ("history", 0.02))
            for seed in range(6)]
    scale = replace(SMOKE, seeds=6, episodes=50)
    text = render(fixed, runs, scale, runner.row_config(scale), "cmd")
    assert "### Seeds 0-4 alone (the tables' 5)" in text
    # a constant +0.02 per task: the paired difference has no spread at all
    assert "Over the same 6 seeds and tasks: +0.020 [+0.020, +0.020]" in text
    assert "Over the same 5 seeds and tasks: +0.020 [+0.020, +0.020]" in text
    assert "Command: `cmd`." in text
