"""What a newcomer copies from elsewhere works here (issue #36, point 6).

SuperSuit's own SB3 recipe trains PPO on a multi-tenant env as written in its docs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

ENV = "cost_envs/MultiTenantToolBench-v0"


def supersuit_recipe(n_copies: int = 2, num_cpus: int = 0, **env_kwargs: Any) -> Any:
    """SuperSuit's recipe, as its README and PettingZoo's SB3 tutorial write it."""
    ss = pytest.importorskip("supersuit")
    from cost_envs.multiagent import parallel_env

    env = ss.pettingzoo_env_to_vec_env_v1(parallel_env(ENV, **env_kwargs))
    return ss.concat_vec_envs_v1(env, n_copies, num_cpus=num_cpus,
                                 base_class="stable_baselines3")


def weights(model: Any) -> np.ndarray:
    return np.concatenate([p.detach().cpu().numpy().ravel()
                           for p in model.policy.parameters()])


def test_supersuits_recipe_trains_ppo_on_the_tenants() -> None:
    from stable_baselines3 import PPO

    venv = supersuit_recipe(n_tenants=2)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, device="cpu")
    model.learn(128)  # SB3's float32 0.0/1.0 actions reach the tenants
    assert model.num_timesteps >= 128
    actions, _ = model.predict(venv.reset(), deterministic=True)
    assert actions.shape == (4, venv.action_space.n)
    venv.close()


def test_the_documented_seed_workaround_makes_supersuits_recipe_reproducible() -> None:
    # SuperSuit's SB3 wrapper forwards SB3's venv.seed to its ConcatVecEnv, which has no
    # seed (SuperSuit 3.11, SB3 2.x): PPO(seed=0) fails without the line in
    # docs/multitenant.md. If a SuperSuit release fixes it, the first check fails and the
    # page can drop the workaround.
    from stable_baselines3 import PPO

    venv = supersuit_recipe(n_tenants=2)
    with pytest.raises(AttributeError, match="'ConcatVecEnv' object has no attribute 'seed'"):
        PPO("MlpPolicy", venv, seed=0)
    venv.close()

    def train() -> np.ndarray:
        venv = supersuit_recipe(n_tenants=2)
        venv.seed = lambda seed=None: venv.venv.reset(seed=seed)  # docs/multitenant.md
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, seed=0, device="cpu")
        model.learn(128)
        venv.close()
        return weights(model)

    assert np.array_equal(train(), train())


def test_a_float_action_that_is_not_0_or_1_is_refused_by_the_vector_env() -> None:
    venv = supersuit_recipe(n_copies=1, n_tenants=2)
    venv.reset()
    with pytest.raises(ValueError, match=r"invalid action .* expected an element of "
                                         r"MultiBinary\(8\)"):
        venv.step(np.full((2, 8), 0.5, dtype=np.float32))
    venv.close()


@pytest.mark.slow
@pytest.mark.parametrize("num_cpus", [0, 2])
def test_supersuits_recipe_with_ppos_defaults(num_cpus: int) -> None:
    # the tester's run, word for word (about 20 s): 2 copies of 4 tenants, PPO's defaults
    from stable_baselines3 import PPO

    venv = supersuit_recipe(2, num_cpus=num_cpus)
    model = PPO("MlpPolicy", venv, device="cpu")
    model.learn(2048)
    assert model.num_timesteps >= 2048
    venv.close()
