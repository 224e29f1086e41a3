"""Learning curves on the evaluation tasks: train(evaluate_at=...) and EvaluateAtSteps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.evaluation import evaluate
from agents.learners.training import train

ENV_ID = "cost_envs/ToolBench-v0"


@pytest.mark.parametrize("distribution", ["independent", "autoregressive"])
def test_the_curve_scores_the_policy_of_its_step_without_changing_training(distribution):
    plain = train(ENV_ID, "ppo", 1024, seed=2, n_envs=2, ppo={"n_steps": 128},
                  action_distribution=distribution)
    scored = train(ENV_ID, "ppo", 1024, seed=2, n_envs=2, ppo={"n_steps": 128},
                   evaluate_at=(0, 256, 700), action_distribution=distribution)
    # Scoring plays fresh envs: the trained weights are the same to the bit.
    for a, b in zip(plain.policy.parameters(), scored.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    # One entry per requested step (at the first rollout boundary at or after it), and the
    # end; a rollout is 2 x 128 steps, each trained on by 10 epochs of 4 minibatches of 64.
    assert [entry["timesteps"] for entry in scored.curve] == [0, 256, 768, 1024]
    assert [entry["gradient_steps"] for entry in scored.curve] == [0, 40, 120, 160]
    final = evaluate(scored, ENV_ID, episodes=400, seed=0)
    assert scored.curve[-1]["returns"] == pytest.approx(list(final.returns))
    untrained = train(ENV_ID, "ppo", 1, seed=2, n_envs=2, ppo={"n_steps": 128},
                      evaluate_at=(0,), action_distribution=distribution)
    assert scored.curve[0]["returns"] == pytest.approx(untrained.curve[0]["returns"])
    assert not np.allclose(scored.curve[0]["returns"], scored.curve[-1]["returns"])


def test_no_curve_unless_asked_and_none_for_lora():
    assert train(ENV_ID, "ppo", 64, seed=0, ppo={"n_steps": 64}).curve == []
    with pytest.raises(ValueError, match="evaluate_at: lora trains no RL stage"):
        train(ENV_ID, "lora", 1, evaluate_at=(0,))
