"""Native batched environments: ``gym.make_vec(id, n, vectorization_mode="vector_entry_point")``.

A batched env steps all of its sub-envs with numpy array operations and returns, for the
same seeds and actions, what ``SyncVectorEnv`` over ``n`` single envs returns, bit for bit
(:mod:`cost_envs.vector.base`). Registered as each id's ``vector_entry_point``
(:mod:`cost_envs.registration`), so it is also ``gym.make_vec``'s default mode for those
ids; ``budget`` and ``on_exceed`` build :class:`VectorHardBudget` as ``gym.make`` builds
``HardBudget``. Ids without a batched implementation fall back to ``SyncVectorEnv``.
"""

from cost_envs.vector.base import BatchedOrchestrationEnv
from cost_envs.vector.budget import VectorHardBudget
from cost_envs.vector.info import VectorInfo

__all__ = ["BatchedOrchestrationEnv", "VectorHardBudget", "VectorInfo"]
