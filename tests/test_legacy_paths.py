"""Files saved before issue #25 moved the learners still load.

``tests/data/ppo_saved_before_issue25.zip`` is an SB3 ``.zip`` written by the tree of
commit 25dcfd6 (before the move): ``PPO(AllocatorPolicy, gym.make(FlightPlanner-v0),
policy_kwargs={"lora_rank": None, "action_distribution": "autoregressive"}, n_steps=64,
batch_size=64, n_epochs=1, seed=0)``, ``learn(64)``, ``save``. Its pickled policy class is
named ``agents.lora.policies.AllocatorPolicy``, a path that no longer exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import cost_envs  # noqa: F401  (registers the envs)
from agents.learners.checkpoints import UnsafeCheckpointError, load_allocator
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.legacy import OLD_MODULES, old_module_paths

OLD_ZIP = Path(__file__).parent / "data" / "ppo_saved_before_issue25.zip"


def test_the_fixture_names_the_old_module_path() -> None:
    import base64
    import json
    import zipfile

    data = json.loads(zipfile.ZipFile(OLD_ZIP).read("data"))
    pickled = base64.b64decode(data["policy_class"][":serialized:"])
    assert b"agents.lora.policies" in pickled and b"agents.learners" not in pickled


def test_an_sb3_zip_saved_before_the_move_loads_as_the_new_policy_class() -> None:
    torch.set_num_threads(1)
    model = load_allocator(OLD_ZIP, trust_pickle=True)
    # the class the move made, not a copy of the old one found elsewhere on the path
    assert type(model.policy) is AllocatorPolicy
    assert model.policy.action_distribution == "autoregressive"
    env = gym.make("cost_envs/FlightPlanner-v0")
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(action.astype(env.action_space.dtype))
    env.close()


def test_the_old_zip_still_needs_trust_pickle() -> None:
    with pytest.raises(UnsafeCheckpointError):
        load_allocator(OLD_ZIP)


def test_old_paths_are_the_new_modules_only_inside_the_context() -> None:
    import importlib

    import agents.learners.common.policies as policies

    before = {name: sys.modules.get(name) for name in OLD_MODULES}
    with old_module_paths():
        # what unpickling does: __import__ the path, then look it up in sys.modules
        assert importlib.import_module("agents.lora.policies") is policies
        assert sys.modules["agents.routing.corl"] is sys.modules["agents.learners.corl"]
    assert {name: sys.modules.get(name) for name in OLD_MODULES} == before


def test_every_old_path_names_a_module_that_exists() -> None:
    import importlib.util

    missing = [new for new in OLD_MODULES.values() if importlib.util.find_spec(new) is None]
    assert missing == []
    # and no old path is still a module of the tree (else the map would shadow it)
    root = Path(__file__).resolve().parents[1]
    still_there = [old for old in OLD_MODULES
                   if (root / old.replace(".", "/")).with_suffix(".py").exists()
                   or (root / old.replace(".", "/") / "__init__.py").exists()]
    assert still_there == []
