"""Shared-parameter PPO through SuperSuit: the vector env of tenants and a short training."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("supersuit")

from agents.learners.multitenant import SharedPolicy, tenant_vec_env, train_shared
from cost_envs.multiagent import parallel_env, run_episode

ENV = "cost_envs/MultiTenantAgenticRouting-v0"
KWARGS = {"n_tenants": 3, "capacity": 1, "max_steps": 20}


def test_the_vector_env_has_one_sub_env_per_tenant_and_takes_sb3_float_actions() -> None:
    vec = tenant_vec_env(ENV, n_envs=2, **KWARGS)
    assert vec.num_envs == 6 and len(vec.tenant_envs) == 2
    vec.seed(5)
    first = vec.reset()
    vec.seed(5)
    again = vec.reset()
    assert np.array_equal(first, again)  # the kept seed reaches every copy
    assert not np.array_equal(first[:3], first[3:])  # copy i is seeded seed + i
    copy0 = vec.tenant_envs[0]
    obs, _, _, infos = vec.step(np.ones((6, 1), dtype=np.float32))
    assert obs.shape == (6, copy0.observation_space("tenant_0").shape[0])
    # capacity 1: in each copy one tenant ran the large model, the two others waited
    assert sorted(info["waited"] for info in infos) == [False, False, True, True, True, True]
    vec.close()


def test_a_short_training_gives_a_joint_policy_and_is_seeded() -> None:
    policy = train_shared(ENV, 256, seed=1, env_kwargs=KWARGS, ppo={"n_steps": 32})
    again = train_shared(ENV, 256, seed=1, env_kwargs=KWARGS, ppo={"n_steps": 32})
    assert isinstance(policy, SharedPolicy) and policy.timesteps >= 256
    for a, b in zip(policy.policy.parameters(), again.policy.parameters(), strict=True):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())
    env = parallel_env(ENV, **KWARGS)
    metrics = run_episode(env, policy, seed=0).metrics()
    assert 0 <= metrics["wait_share"] <= 1
    observations, _ = env.reset(seed=0)
    actions = policy(observations)
    assert set(actions) == set(env.agents) and all(a.dtype == np.int8 for a in actions.values())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_envs: expected an int >= 1, got 0"):
        tenant_vec_env(ENV, n_envs=0)
    with pytest.raises(ValueError, match="timesteps: expected an int >= 1, got 0"):
        train_shared(ENV, 0)


def test_the_plain_supersuit_recipe_takes_sb3_float_actions_as_the_helper_does() -> None:
    # The tenants' action space (TenantActions) lets SuperSuit's concatenation take SB3's
    # float32 0.0/1.0 actions; PPO on the plain recipe: tests/test_newcomer.py.
    import supersuit

    plain = supersuit.concat_vec_envs_v1(
        supersuit.pettingzoo_env_to_vec_env_v1(parallel_env(ENV, **KWARGS)), 1, num_cpus=0,
        base_class="stable_baselines3")
    plain.reset()
    actions = np.ones((3, 1), dtype=np.float32)  # what SB3's MultiBinary policy hands over
    helper = tenant_vec_env(ENV, **KWARGS)
    helper.reset()
    for venv in (plain, helper):
        obs, rewards, dones, infos = venv.step(actions)
        assert obs.shape[0] == rewards.shape[0] == dones.shape[0] == len(infos) == 3
    with pytest.raises(ValueError, match=r"invalid action .*expected an element of "
                                         r"MultiBinary\(1\)"):
        plain.step(np.full((3, 1), 0.5, dtype=np.float32))
    plain.close()
    helper.close()


def test_plain_sb3_ppo_trains_on_the_helpers_vector_env() -> None:
    from stable_baselines3 import PPO

    venv = tenant_vec_env(ENV, n_envs=2, **KWARGS)
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=32, seed=0, device="cpu")
    model.learn(total_timesteps=96)
    assert model.num_timesteps >= 96
    actions, _ = model.predict(venv.reset(), deterministic=True)
    assert actions.shape == (6, venv.action_space.n)
    venv.close()
