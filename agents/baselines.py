"""Baseline allocators of the LoRA-Guided PPO paper, each with SB3's ``predict`` signature.

Every baseline is built from the environment it will act in (wrapped or not) and reads
only the observation, except :class:`CostOptOracle`, which is privileged: it asks the
environment for the hindsight-optimal action and exists to bound what any policy can do.

Observation-only baselines accept a single observation or a batch ``(n, obs_dim)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cost_envs.core import OrchestrationEnv


def _orchestration_env(env: gym.Env) -> OrchestrationEnv:
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise ValueError(f"expected a cost_envs environment, got {type(base).__name__}")
    return base


class Baseline:
    """Shared plumbing: batching and the SB3 ``predict`` signature."""

    #: Short name used by the CLI and in tables.
    name = "baseline"
    #: True when the baseline reads privileged env state rather than the observation.
    privileged = False

    def __init__(self, env: gym.Env) -> None:
        self.env = _orchestration_env(env)
        self.n_agents = self.env.n_agents
        self.embedding = self.env.observation_layout.get("task_embedding")

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Action for one observation."""
        raise NotImplementedError

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """SB3-compatible ``predict``: one observation or a batch of them."""
        obs = np.asarray(observation, dtype=np.float32)
        if obs.ndim == 1:
            return self.act(obs), state
        return np.stack([self.act(row) for row in obs]), state


class RandomAllocator(Baseline):
    """Uniform over subsets: each agent called with probability 1/2, independently."""

    name = "random"

    def __init__(self, env: gym.Env, seed: int | None = 0) -> None:
        super().__init__(env)
        self.rng = np.random.default_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Random subset (the policy's own generator; it never touches the env's)."""
        return self.rng.integers(0, 2, self.n_agents, dtype=np.int8)


class CallAll(Baseline):
    """Calls every agent at every turn: the success ceiling of brute force, at full price."""

    name = "all"

    def act(self, observation: np.ndarray) -> np.ndarray:
        """All ones."""
        return np.ones(self.n_agents, dtype=np.int8)


class CapabilityMatch(Baseline):
    """Calls the one agent whose capability vector is most similar to the task embedding.

    Cosine similarity, ties broken by the larger dot product (the stronger agent). Cost is
    ignored, as in the paper. An all-zero embedding (nothing needed) gives the all-zero
    action.
    """

    name = "capability"

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        caps = self.env.pool.capabilities
        self._caps = caps
        self._unit = caps / np.maximum(np.linalg.norm(caps, axis=1, keepdims=True), 1e-12)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """One-hot on the best-matching agent."""
        need = observation[self.embedding].astype(np.float64)
        action = np.zeros(self.n_agents, dtype=np.int8)
        norm = np.linalg.norm(need)
        if norm == 0:
            return action
        cosine = self._unit @ (need / norm)
        best = np.flatnonzero(np.isclose(cosine, cosine.max()))
        action[best[np.argmax(self._caps[best] @ need)]] = 1
        return action


class RuleBased(Baseline):
    """The environment's fixed rule, read from the observation only.

    FlightPlanner: planner -> search -> validator -> commit; ToolBench: a fixed
    skill -> tool routing table.
    """

    name = "rule"

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The env's ``rule_based_action``."""
        return self.env.rule_based_action(observation)


class GreedyHeuristic(Baseline):
    """The cheapest set of agents whose joint capability covers the task embedding.

    Coverage of a set S is ``sum_k e_k * max_{i in S} cap[i, k] / sum_k e_k``. The
    heuristic returns the minimum-cost set with coverage >= ``threshold`` (exact, over
    all subsets in cost order), or the cheapest set of maximal coverage when none reaches
    it. These sets are the supervised labels of the LoRA allocator.

    Args:
        env: The environment.
        threshold: Coverage to reach, in ``(0, 1]``.
    """

    name = "greedy"

    def __init__(self, env: gym.Env, threshold: float = 0.7) -> None:
        super().__init__(env)
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold: expected a number in (0, 1], got {threshold!r}")
        self.threshold = threshold
        table, _ = self.env.joint_actions_by_cost()
        self._subsets = table
        caps = self.env.pool.capabilities
        self._subset_caps = np.max(table[:, :, None] * caps[None, :, :], axis=1)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Cheapest covering subset."""
        need = observation[self.embedding].astype(np.float64)
        total = need.sum()
        if total <= 0:
            return np.zeros(self.n_agents, dtype=np.int8)
        coverage = self._subset_caps @ need / total
        meets = np.flatnonzero(coverage >= self.threshold - 1e-9)
        index = meets[0] if meets.size else int(np.argmax(coverage))
        return self._subsets[index].copy()


class CostOptOracle(Baseline):
    """Privileged: replays the minimum-cost successful action sequence of the current task.

    It knows each agent's fixed luck, so it succeeds whenever any sequence can, at the
    lowest cost any sequence can; when none can, it spends nothing.
    """

    name = "oracle"
    privileged = True

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The env's ``oracle_action`` (the observation is ignored)."""
        return self.env.oracle_action()

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """Single observations only: the oracle follows one environment."""
        if np.ndim(observation) != 1:
            raise ValueError("CostOptOracle follows a single environment; pass one observation")
        return self.act(observation), state


#: CLI names -> baseline classes, each constructed as ``cls(env)``.
BASELINES: dict[str, type[Baseline]] = {
    cls.name: cls
    for cls in (RandomAllocator, CapabilityMatch, RuleBased, CostOptOracle, GreedyHeuristic,
                CallAll)
}
