"""A native batched env (``cost_envs.vector``) as Stable-Baselines3's ``VecEnv``.

SB3 resets a finished sub-env within the step that ended it and keeps the last
observation in ``info["terminal_observation"]``: Gymnasium's ``SAME_STEP`` autoreset, so
:class:`BatchedVecEnv` needs a batched env in that mode (:func:`make_batched_vec_env`
builds one). Each step's vector ``info`` (``_key`` masks) is split into SB3's list of one
dict per sub-env, the same keys a ``DummyVecEnv`` of single envs reports, so
``agents.callbacks.CostMetricsCallback`` and ``MaskablePPO`` (through ``env_method(
"action_masks")`` under a budget) work unchanged:

    >>> from stable_baselines3 import PPO
    >>> from agents.vec_env import make_batched_vec_env
    >>> venv = make_batched_vec_env("cost_envs/ToolBench-v0", n_envs=16, seed=0)
    >>> model = PPO("MlpPolicy", venv, n_steps=8, batch_size=64, seed=0)
    >>> _ = model.learn(256)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv, VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

#: Attributes :meth:`BatchedVecEnv.get_attr` reads from the single env a batched env is
#: built from (``single_env``) when the batched env has none: fixed at construction and
#: the same for every sub-env.
SHARED_ATTRIBUTES = ("pool", "profile")


class BatchedVecEnv(VecEnv):
    """SB3's ``VecEnv`` over a ``gymnasium.vector.VectorEnv`` that autoresets in ``SAME_STEP``.

    ``env_method(name)`` calls the batched env's method once and hands each sub-env its
    row (``action_masks`` gives ``(num_envs, 2m)``, so sub-env ``i`` gets row ``i``);
    ``get_attr`` does the same for attributes with one row per sub-env, and repeats
    others. Seeds set with ``seed`` reach the batched env at the next ``reset``.

    Args:
        env: The batched env, e.g. ``gym.make_vec(id, n, vectorization_mode=
            "vector_entry_point", autoreset_mode=AutoresetMode.SAME_STEP)``.

    Raises:
        ValueError: If ``env`` does not autoreset in ``SAME_STEP`` mode.
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        mode = env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"BatchedVecEnv: expected a VectorEnv with autoreset_mode "
                             f"{AutoresetMode.SAME_STEP}, got {mode!r} (SB3 resets in the step "
                             "that ends an episode)")
        self.env = env
        self._actions: np.ndarray | None = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    def reset(self) -> np.ndarray:
        """Reset every sub-env (with the seeds given to :meth:`seed`, once)."""
        seeds = self._seeds if any(s is not None for s in self._seeds) else None
        if any(self._options):
            raise ValueError(f"BatchedVecEnv: reset options are not supported by a batched "
                             f"env, got {self._options!r}")
        # VectorEnv.reset types seed as one int; the vector envs take one per sub-env too
        obs, _ = self.env.reset(seed=seeds)  # type: ignore[arg-type]  # see above
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def seed_each(self, seeds: Sequence[int | None]) -> None:
        """One seed per sub-env for the next :meth:`reset` (``seed(s)`` gives ``s + i``).

        Raises:
            ValueError: If ``seeds`` does not hold one entry per sub-env.
        """
        if len(seeds) != self.num_envs:
            raise ValueError(f"BatchedVecEnv.seed_each: expected {self.num_envs} seeds, "
                             f"got {len(seeds)}")
        self._seeds = list(seeds)

    def step_async(self, actions: np.ndarray) -> None:
        """Remember the actions; :meth:`step_wait` runs them."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every sub-env; SB3's ``(obs, rewards, dones, infos)``."""
        obs, rewards, terminated, truncated, info = self.env.step(self._actions)
        dones = terminated | truncated
        infos = split_info(info, self.num_envs)
        if dones.any():
            finals = split_info(info["final_info"], self.num_envs)
            for i in dones.nonzero()[0].tolist():
                infos[i] = finals[i]
                infos[i]["terminal_observation"] = info["final_obs"][i]
        for i, cut in enumerate((truncated & ~terminated).tolist()):
            infos[i]["TimeLimit.truncated"] = cut
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Close the batched env."""
        self.env.close()

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def _every_sub_env(self, what: str, indices: VecEnvIndices) -> None:
        if self._indices(indices) != list(range(self.num_envs)):
            raise ValueError(f"BatchedVecEnv: {what} acts on the batched env, for every "
                             f"sub-env at once; got indices={indices!r}, expected None")

    def _rows(self, value: Any, indices: VecEnvIndices) -> list[Any]:
        rows = self._indices(indices)
        if isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == self.num_envs:
            return [value[i] for i in rows]
        return [value for _ in rows]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The batched env's attribute: sub-env ``i``'s row, or the same value for each.

        Looked up on each wrapper down to the batched env (Gymnasium's vector wrappers do
        not forward attributes), then for :data:`SHARED_ATTRIBUTES` on the single env the
        batched env was built from: ``get_attr("pool")`` is what a ``DummyVecEnv`` of single
        envs answers, which ``CostMetricsCallback`` and ``LoraGuidedPPO`` read.

        Raises:
            AttributeError: If no layer has ``attr_name`` (as ``DummyVecEnv`` would).
        """
        return self._rows(self._attribute(attr_name), indices)

    def _attribute(self, name: str) -> Any:
        layer: Any = self.env
        while True:
            try:
                return getattr(layer, name)
            except AttributeError:
                pass
            if not hasattr(layer, "env") or layer is layer.unwrapped:
                break
            layer = layer.env
        # Only configuration every sub-env shares: the template is never stepped, so its
        # per-task state (``task``, ``call_flops`` under drawn prices ...) is no sub-env's.
        template = getattr(self.env.unwrapped, "single_env", None)
        if name in SHARED_ATTRIBUTES and template is not None:
            return getattr(template, name)
        raise AttributeError(f"BatchedVecEnv: {type(self.env.unwrapped).__name__} has no "
                             f"attribute {name!r} (a sub-env's configuration is read from its "
                             f"single env only for {list(SHARED_ATTRIBUTES)})")

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute of the batched env (all sub-envs at once only).

        Raises:
            ValueError: If ``indices`` selects fewer than every sub-env.
        """
        self._every_sub_env(f"set_attr({attr_name!r})", indices)
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call the batched env's method once; each sub-env gets its row of the result.

        Raises:
            ValueError: If ``indices`` selects fewer than every sub-env: the method runs
                once on the batched env, so it would act on the others too (a
                ``set_budget`` meant for sub-env 0 would set every budget).
        """
        self._every_sub_env(f"env_method({method_name!r})", indices)
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return self._rows(result, indices)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None,
                       ) -> list[bool]:
        """False: sub-envs of a batched env have no single-env wrappers."""
        return [False for _ in self._indices(indices)]


def split_info(info: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """A vector info (``key`` and ``_key`` mask) as one dict per sub-env, plain Python values.

    ``final_obs``, ``final_info`` and their masks are left out (the caller unpacks them).
    A scalar column becomes its Python values (``tolist``, what ``.item()`` gives); an
    array column is copied once and each sub-env gets its row of the copy. Keys keep
    their order; the leading keys every sub-env reported build each dict in one call.
    """
    full_keys: list[str] = []
    full_columns: list[list[Any]] = []
    partial: list[tuple[str, list[Any], list[int]]] = []
    for key, values in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = info[f"_{key}"]
        column = values.tolist() if values.ndim == 1 else list(values.copy())
        if not partial and mask.all():
            full_keys.append(key)
            full_columns.append(column)
        else:
            partial.append((key, column, mask.nonzero()[0].tolist()))
    if full_keys:
        out = [dict(zip(full_keys, row, strict=True)) for row in zip(*full_columns, strict=True)]
    else:
        out = [{} for _ in range(num_envs)]
    for key, column, rows in partial:
        for i in rows:
            out[i][key] = column[i]
    return out


def make_batched_vec_env(env_id: str, n_envs: int, seed: int | None = None,
                         monitor: bool = True, **kwargs: Any) -> VecEnv:
    """SB3's ``make_vec_env`` for a batched env: ``n_envs`` sub-envs in one numpy env.

    Args:
        env_id: A registered id with a batched implementation
            (``cost_envs.registration.VECTOR_IDS``).
        n_envs: Number of sub-envs.
        seed: Sub-env ``i`` is seeded with ``seed + i`` at the first reset (as SB3 does).
        monitor: Wrap in ``VecMonitor`` (episode returns and lengths in ``info["episode"]``,
            as ``make_vec_env``'s ``Monitor``).
        **kwargs: The env's arguments, ``budget`` and ``on_exceed`` included.

    Raises:
        ValueError: If ``env_id`` has no batched implementation.
    """
    from cost_envs.registration import VECTOR_IDS

    if env_id not in VECTOR_IDS:
        raise ValueError(f"make_batched_vec_env: {env_id!r} has no batched implementation; "
                         f"expected one of {sorted(VECTOR_IDS)}")
    env = gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="vector_entry_point",
                       autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
    venv: VecEnv = BatchedVecEnv(env)
    if seed is not None:
        venv.seed(seed)
    return VecMonitor(venv) if monitor else venv


__all__ = ["SHARED_ATTRIBUTES", "BatchedVecEnv", "make_batched_vec_env", "split_info"]
