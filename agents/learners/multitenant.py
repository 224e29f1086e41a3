"""Shared-parameter PPO on a multi-tenant env: SuperSuit's vector envs into Stable-Baselines3.

Every tenant is one sub-environment of an SB3 ``VecEnv`` (SuperSuit's
``pettingzoo_env_to_vec_env_v1``, then ``concat_vec_envs_v1`` for ``n_envs`` copies of the
multi-tenant env), so one policy, the project's
:class:`agents.learners.common.policies.AllocatorPolicy`
(the plain network of the PPO baseline, ``lora_rank=None``), learns from all tenants at
once and acts for each on its own observation, shared state included (the budget left,
whether it waited, each model's load): it can learn to ask for less when the pool is full.
The PPO settings are the project's (:data:`agents.learners.training.PPO_SETTINGS`).

Two gaps between SuperSuit 3.11 and SB3 2.9 are closed by :class:`TenantVecEnv`: SB3's
``VecEnv.seed`` reaches SuperSuit's concatenated env, which has no ``seed`` (here the seed
is kept for the next reset, SB3's own semantics: copy ``i`` gets ``seed + i``, then every
multi-tenant env continues its seeded task streams); and SB3 hands MultiBinary actions
over as float32 0.0/1.0, which SuperSuit's concatenation once refused to cast to the
space's int8 (the tenants' space, ``TenantActions``, now takes them, so SuperSuit's own
recipe works too; the cast here is kept so that any other 0/1 float reaches the env as
int8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from agents.learners.common.policies import AllocatorPolicy
from agents.learners.ppo import FastPPO
from agents.learners.training import ppo_settings, quiet_logger, threads
from agents.seeds import TRAIN_TASK_SEED
from cost_envs.config import integer
from cost_envs.extras import import_extra
from cost_envs.multiagent import MultiTenantEnv, parallel_env


class TenantVecEnv(VecEnvWrapper):
    """SuperSuit's SB3 vector env of tenants, seedable by SB3 and fed int8 actions.

    Args:
        venv: SuperSuit's ``concat_vec_envs_v1(..., base_class="stable_baselines3")``.
    """

    # SuperSuit's SB3 wrapper (untyped): its own .venv, a ConcatVecEnv, holds the copies
    venv: Any

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self._seed: int | None = None

    @property
    def tenant_envs(self) -> list[MultiTenantEnv]:
        """The multi-tenant envs inside, one per copy."""
        return [markov.par_env for markov in self.venv.venv.vec_envs]

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Keep ``seed`` for the next :meth:`reset` (copy ``i`` gets ``seed + i``)."""
        self._seed = seed
        return [seed] * self.num_envs

    def reset(self) -> np.ndarray:
        """Reset every copy; with a kept seed, seeded."""
        if self._seed is None:
            return self.venv.reset()
        observations, infos = self.venv.venv.reset(seed=self._seed)
        self.venv.reset_infos = infos
        self._seed = None
        return observations

    def step_async(self, actions: np.ndarray) -> None:
        """Forward SB3's 0.0/1.0 actions as the int8 of the space."""
        self.venv.step_async(np.asarray(actions).astype(np.int8))

    def step_wait(self) -> Any:
        """SuperSuit's step results, unchanged."""
        return self.venv.step_wait()


def tenant_vec_env(env_id: str, n_envs: int = 1, **env_kwargs: Any) -> TenantVecEnv:
    """``n_envs`` copies of the multi-tenant env ``env_id`` as one SB3 ``VecEnv``.

    Its ``num_envs`` is ``n_envs * n_tenants``: one sub-environment per tenant.

    Raises:
        ImportError: Without SuperSuit, naming ``pip install 'cost-envs[multiagent]'``.
    """
    integer(n_envs, "n_envs", minimum=1, where="tenant_vec_env")
    supersuit = import_extra("supersuit", "multiagent", "shared-parameter PPO on tenants")
    vec = supersuit.pettingzoo_env_to_vec_env_v1(parallel_env(env_id, **env_kwargs))
    return TenantVecEnv(supersuit.concat_vec_envs_v1(vec, n_envs, num_cpus=0,
                                                     base_class="stable_baselines3"))


@dataclass
class SharedPolicy:
    """A policy every tenant runs on its own observation: a joint policy for the env.

    Attributes:
        policy: The trained network.
        env_id: The multi-tenant id it was trained on.
        seed: Training seed.
        timesteps: Tenant-steps of RL taken (SB3 completes its last rollout).
    """

    policy: AllocatorPolicy
    env_id: str
    seed: int
    timesteps: int
    name = "shared-ppo"

    def __call__(self, observations: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every live tenant's action (deterministic: call model i iff ``p_i > 0.5``)."""
        if not observations:
            return {}
        agents = list(observations)
        batch = np.stack([observations[a] for a in agents])
        actions, _ = self.policy.predict(batch, deterministic=True)
        return {a: np.asarray(actions[k], dtype=np.int8) for k, a in enumerate(agents)}


def train_shared(env_id: str, timesteps: int, seed: int = 0, n_envs: int = 1,
                 env_kwargs: Mapping[str, Any] | None = None,
                 ppo: Mapping[str, Any] | None = None, verbose: int = 0,
                 torch_threads: int | None = 1) -> SharedPolicy:
    """Train one PPO policy shared by every tenant of ``env_id``.

    Args:
        env_id: A key of :data:`cost_envs.multiagent.MULTIAGENT_ENV_IDS`.
        timesteps: Tenant-steps of RL (each env step of N tenants is N of them), >= 1.
        seed: Training seed, >= 0; the tasks come from ``TRAIN_TASK_SEED + seed``.
        n_envs: Copies of the multi-tenant env stepped side by side.
        env_kwargs: :class:`~cost_envs.multiagent.MultiTenantEnv`'s arguments.
        ppo: Overrides of the project's PPO settings (as ``agents.learners.training.train``).
        verbose: SB3 verbosity.
        torch_threads: Torch's intra-op threads while training (``None``: unchanged).

    Raises:
        ValueError: Bad numbers or PPO overrides; ImportError without SuperSuit.
    """
    integer(timesteps, "timesteps", minimum=1, where="train_shared")
    integer(seed, "seed", minimum=0, where="train_shared")
    settings = ppo_settings(ppo, "ppo")
    with threads(torch_threads):
        vec = tenant_vec_env(env_id, n_envs, **dict(env_kwargs or {}))
        # FastPPO: SB3's PPO updates bit for bit, in fewer Python calls
        model = FastPPO(AllocatorPolicy, vec, policy_kwargs={"lora_rank": None}, device="cpu",
                    verbose=verbose, seed=seed, **settings)
        quiet_logger(model, verbose)
        vec.seed(TRAIN_TASK_SEED + seed)  # the tasks' seed, apart from the network's
        model.learn(timesteps)
        vec.close()
    policy = cast(AllocatorPolicy, model.policy)  # the class it was built with
    return SharedPolicy(policy, env_id, seed, model.num_timesteps)
