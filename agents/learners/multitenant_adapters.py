"""One LoRA adapter per tenant on a shared frozen base (adapter-per-tenant deployment).

Start from a shared-parameter PPO policy (:func:`agents.learners.multitenant.train_shared`):
its encoder becomes the frozen base of every tenant, and each tenant gets its own
rank-``r`` LoRA adapters plus its own copy of the action and value heads, initialised
from the shared ones (LoRA's B = 0, so every tenant starts exactly at the shared policy).
Each tenant's adapter is then trained with PPO on :class:`TenantView`, the multi-tenant
env seen by that tenant alone while the others keep acting with the shared policy.
Only the adapters and the heads train (:class:`agents.learners.common.policies.AllocatorPolicy`'s
groups ``adapter``, ``action``, ``value``); the base is the same frozen tensors'
values for every tenant (each policy holds its own copy of them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np

from agents.learners.common.policies import AllocatorPolicy
from agents.learners.multitenant import SharedPolicy
from agents.learners.ppo import FastPPO
from agents.learners.training import ppo_settings, quiet_logger, threads
from agents.seeds import TRAIN_TASK_SEED
from cost_envs.config import integer
from cost_envs.multiagent import MultiTenantEnv, parallel_env


class TenantView(gym.Env[np.ndarray, np.ndarray]):
    """The multi-tenant env as one tenant sees it, the others acting with ``others``.

    Args:
        env: The multi-tenant env.
        tenant: The tenant this view controls.
        others: The joint policy of every other tenant (e.g. a :class:`SharedPolicy`).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, env: MultiTenantEnv, tenant: str, others: Any) -> None:
        env.observation_space(tenant)  # checks the name
        self.env, self.tenant, self.others = env, tenant, others
        self.observation_space = env.observation_space(tenant)
        self.action_space = env.action_space(tenant)
        self._observations: dict[str, np.ndarray] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset the multi-tenant env (``seed`` seeds every tenant's stream)."""
        super().reset(seed=seed)
        self._observations, infos = self.env.reset(seed=seed)
        return self._observations[self.tenant], infos[self.tenant]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One step of every tenant: ``action`` for this one, ``others`` for the rest."""
        rest = {a: o for a, o in self._observations.items() if a != self.tenant}
        joint = dict(self.others(rest)) if rest else {}
        joint[self.tenant] = np.asarray(action).astype(np.int8)
        self._observations, rewards, terms, truncs, infos = self.env.step(joint)
        t = self.tenant
        return self._observations[t], rewards[t], terms[t], truncs[t], infos[t]


@dataclass
class TenantAdapters:
    """Every tenant's adapted policy: a joint policy for the env it was trained on.

    Attributes:
        policies: Tenant -> its policy (shared frozen base + its own adapters and heads).
        shared: The shared policy the base and the other tenants came from.
    """

    policies: dict[str, AllocatorPolicy]
    shared: SharedPolicy
    name = "adapter-per-tenant"

    def __call__(self, observations: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each live tenant's action from its own adapter (deterministic)."""
        return {a: np.asarray(self.policies[a].predict(obs, deterministic=True)[0],
                              dtype=np.int8) for a, obs in observations.items()}


def shared_base(shared: SharedPolicy) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shared policy's encoder as a frozen base: ``(state dict, config)``."""
    encoder = shared.policy.features_extractor
    state = {k: v.detach().clone() for k, v in encoder.net.state_dict().items()}
    shape = shared.policy.observation_space.shape
    assert shape is not None  # a flat Box: MlpEncoder refuses any other space
    return state, {"obs_dim": int(shape[0]),
                   "hidden_sizes": list(shared.policy.hidden_sizes)}


def train_adapters(shared: SharedPolicy, timesteps: int, seed: int = 0,
                   env_kwargs: Mapping[str, Any] | None = None, lora_rank: int = 8,
                   ppo: Mapping[str, Any] | None = None,
                   torch_threads: int | None = 1) -> TenantAdapters:
    """Train one adapter per tenant of ``shared.env_id`` on the shared policy's frozen base.

    Args:
        shared: The shared policy (its encoder is the base, its heads the start).
        timesteps: Steps of PPO per tenant, >= 1.
        seed: Training seed; tenant ``k``'s tasks come from ``TRAIN_TASK_SEED + seed + k``.
        env_kwargs: :class:`~cost_envs.multiagent.MultiTenantEnv`'s arguments.
        lora_rank: Adapter rank.
        ppo: Overrides of the project's PPO settings.
        torch_threads: Torch's intra-op threads while training.
    """
    integer(timesteps, "timesteps", minimum=1, where="train_adapters")
    integer(seed, "seed", minimum=0, where="train_adapters")
    settings = ppo_settings(ppo, "ppo")
    base = shared_base(shared)
    env = parallel_env(shared.env_id, **dict(env_kwargs or {}))
    policies: dict[str, AllocatorPolicy] = {}
    with threads(torch_threads):
        for k, tenant in enumerate(env.possible_agents):
            view = TenantView(env, tenant, shared)
            model = FastPPO(AllocatorPolicy, view, device="cpu", seed=seed + k,
                        policy_kwargs={"lora_rank": lora_rank, "base": base}, **settings)
            for head in ("action_net", "value_net"):  # start at the shared policy
                getattr(model.policy, head).load_state_dict(
                    getattr(shared.policy, head).state_dict())
            quiet_logger(model)
            venv = model.get_env()
            assert venv is not None  # SB3 wrapped view in one
            venv.seed(TRAIN_TASK_SEED + seed + k)
            model.learn(timesteps)
            policies[tenant] = cast(AllocatorPolicy, model.policy)  # the class it was built with
    return TenantAdapters(policies, shared)
