"""Issue #38 point 6: sb3-contrib's plain ``RecurrentPPO`` recipe on a cost_envs env.

The recipe as a user writes it fails inside sb3-contrib (its ``RecurrentRolloutBuffer``
keeps ``MultiBinary`` actions in the space's dtype, int8, and feeds them to
``Bernoulli.log_prob``). The env keeps Gymnasium's int8 ``MultiBinary`` (its samples,
vector batches and Minari exports are int8), so the documented fix is one line on the
model: ``use_float_actions``. The first test pins the upstream bug: when sb3-contrib fixes
it, the test fails and docs/learners.md's line can go.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import cost_envs  # noqa: F401  # registers the ids

sb3_contrib = pytest.importorskip("sb3_contrib")

from agents.learners.common.recurrent import use_float_actions  # noqa: E402

torch.set_num_threads(1)


def test_plain_recipe_as_written_still_fails_upstream() -> None:
    model = sb3_contrib.RecurrentPPO("MlpLstmPolicy", gym.make("cost_envs/ToolBench-v0"),
                                     n_steps=64, batch_size=64)
    assert model.rollout_buffer.actions.dtype == np.int8  # the cause: the space's dtype
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Char"):
        model.learn(128)


def test_plain_recipe_with_the_documented_line_trains() -> None:
    # The recipe of the issue, word for word, plus the one line docs/learners.md gives.
    model = sb3_contrib.RecurrentPPO("MlpLstmPolicy", gym.make("cost_envs/ToolBench-v0"),
                                     n_steps=64, batch_size=64)
    model = use_float_actions(model)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(128)
    assert model.num_timesteps == 128
    moved = [k for k, v in model.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert any("lstm_actor" in k for k in moved) and any("action_net" in k for k in moved)
    assert model.rollout_buffer.actions.dtype == np.float32
