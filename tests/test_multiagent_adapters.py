"""One LoRA adapter per tenant on the shared policy's frozen base."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("supersuit")

from agents.learners.multitenant import train_shared
from agents.learners.multitenant_adapters import TenantView, shared_base, train_adapters
from cost_envs.multiagent import parallel_env, run_episode

ENV = "cost_envs/MultiTenantAgenticRouting-v0"
KWARGS = {"n_tenants": 2, "capacity": 1, "max_steps": 16}


@pytest.fixture(scope="module")
def shared():
    return train_shared(ENV, 128, seed=0, env_kwargs=KWARGS, ppo={"n_steps": 32})


def test_the_view_steps_one_tenant_with_the_others_on_the_shared_policy(shared) -> None:
    env = parallel_env(ENV, **KWARGS)
    view = TenantView(env, "tenant_1", shared)
    obs, _ = view.reset(seed=3)
    assert obs.shape == view.observation_space.shape
    twin = parallel_env(ENV, **KWARGS)
    twin_obs, _ = twin.reset(seed=3)
    action = np.ones(1, dtype=np.int8)
    obs, reward, _, _, info = view.step(action)
    joint = {"tenant_0": shared({"tenant_0": twin_obs["tenant_0"]})["tenant_0"],
             "tenant_1": action}
    twin_obs, rewards, _, _, infos = twin.step(joint)
    assert np.array_equal(obs, twin_obs["tenant_1"]) and reward == rewards["tenant_1"]
    assert info["waited"] == infos["tenant_1"]["waited"]
    with pytest.raises(ValueError, match="unknown tenant 'tenant_7'"):
        TenantView(env, "tenant_7", shared)


def test_each_tenant_trains_its_adapter_and_heads_on_the_same_frozen_base(shared) -> None:
    adapters = train_adapters(shared, 64, seed=0, env_kwargs=KWARGS,
                              ppo={"n_steps": 32, "batch_size": 32})
    state, _ = shared_base(shared)
    first, second = (adapters.policies[a] for a in ("tenant_0", "tenant_1"))
    for policy in (first, second):
        for index in (0, 2):  # the encoder's Linear layers: frozen at the shared weights
            layer = policy.features_extractor.net[index]
            base = getattr(layer, "base_layer", layer)
            assert torch.equal(base.weight, state[f"{index}.weight"])
            assert not base.weight.requires_grad
    lora = [n for n, p in first.named_parameters() if "lora_" in n and p.requires_grad]
    assert lora  # the adapters train
    moved = any(not torch.equal(a, b) for a, b in zip(
        first.action_net.parameters(), shared.policy.action_net.parameters(), strict=True))
    assert moved  # the tenant's heads left the shared start
    metrics = run_episode(parallel_env(ENV, **KWARGS), adapters, seed=0).metrics()
    assert 0 <= metrics["wait_share"] <= 1
