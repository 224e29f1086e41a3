"""Many tenants on one pool: PettingZoo environments (the ``multiagent`` extra).

``import cost_envs`` never loads this package. The ``ParallelEnv`` itself needs nothing
beyond the envs' own dependencies; with PettingZoo installed (``pip install
'cost-envs[multiagent]'``) it is a ``pettingzoo.ParallelEnv``, and :func:`env` (the AEC
form) and SuperSuit's vector envs work.

    >>> from cost_envs import multiagent
    >>> env = multiagent.parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=2)
    >>> observations, infos = env.reset(seed=0)
    >>> sorted(observations)
    ['tenant_0', 'tenant_1']
"""

from cost_envs.multiagent.metrics import TenantRun, jain_index, run_episode
from cost_envs.multiagent.registry import MULTIAGENT_ENV_IDS, env, parallel_env
from cost_envs.multiagent.shared import Ledger, SharedLimits
from cost_envs.multiagent.tenants import BASE_IDS, MultiTenantEnv, TenantActions

__all__ = ["BASE_IDS", "MULTIAGENT_ENV_IDS", "Ledger", "MultiTenantEnv", "SharedLimits",
           "TenantActions", "TenantRun", "env", "jain_index", "parallel_env", "run_episode"]
