"""Baseline allocators of the LoRA-Guided PPO paper, each with SB3's ``predict`` signature.

Every baseline is built from the environment it will act in (wrapped or not) and reads
only the observation, except :class:`CostOptOracle`, which is privileged: it asks the
environment for the hindsight-optimal action and exists to bound what any policy can do.

Observation-only baselines accept a single observation or a batch ``(n, obs_dim)``
(:class:`agents.allocator.Allocator`).

:data:`ROUTING_BASELINES` holds BoPO's small/large routing baselines (AlwaysSmall,
AlwaysLarge, RandomMix, Cascade) for envs whose all-zero action runs a default small model
(``zero_action_fallback``, e.g. AgenticRouting-v0); they are kept out of
:data:`BASELINES`, whose members run on every env.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import ArrayLike

from agents.allocator import Allocator
from agents.routers.random_router import RandomRouter
from cost_envs.config import integer, number, probability
from cost_envs.core import OrchestrationEnv


def _orchestration_env(env: gym.Env) -> OrchestrationEnv:
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise ValueError(f"expected a cost_envs environment, got {type(base).__name__}")
    return base


class Baseline(Allocator):
    """A baseline built from the environment it will act in (wrapped or not)."""

    #: Short name used by the CLI and in tables.
    name = "baseline"

    def __init__(self, env: gym.Env) -> None:
        self.env = _orchestration_env(env)
        self.n_agents = self.env.n_agents
        self.embedding = self.env.observation_layout.get("task_embedding")


class RandomAllocator(Baseline):
    """Uniform over subsets: each agent called with probability 1/2, independently.

    On TraceRouting-v0 the routing literature's random router (exactly one model per
    query) is ``random-router`` (:class:`agents.routers.random_router.RandomRouter`).
    """

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
        self.threshold = number(threshold, "threshold", minimum=0, maximum=1,
                                inclusive=(False, True), where="GreedyHeuristic")
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


class PrivilegedBaseline(Baseline):
    """A baseline that reads its env's hidden state, so it follows that one env.

    The hindsight oracle and the planners of :mod:`agents.planning`: each reads the
    current task of the env it was built on, so its ``predict`` takes one observation at
    a time (a batch would be read against that one env's task).
    """

    privileged = True

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """Single observations only: it follows one environment."""
        if np.ndim(observation) != 1:
            raise ValueError(f"{type(self).__name__} follows a single environment; pass one "
                             "observation")
        return self.act(observation), state


class CostOptOracle(PrivilegedBaseline):
    """Privileged: replays the minimum-cost successful action sequence of the current task.

    It knows each agent's fixed luck, so it succeeds whenever any sequence can, at the
    lowest cost any sequence can; when none can, it spends nothing.
    """

    name = "oracle"

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The env's ``oracle_action`` (the observation is ignored)."""
        return self.env.oracle_action()


class FixedSequence(Baseline):
    """An open-loop rule: the same per-turn call pattern on every task, then nothing.

    Step ``k`` of every episode plays ``actions[k]``; after the last pattern it plays the
    all-zero action (commit, answer, or the small model). It reads nothing but its own
    step count, kept in SB3's recurrent ``state`` and reset by ``episode_start``, so it
    is the family of "fixed per-turn call patterns" that issue #10 searches.

    Args:
        env: The environment.
        actions: The patterns, one MultiBinary action per step (at least one).
    """

    name = "fixed-sequence"

    def __init__(self, env: gym.Env, actions: Sequence[ArrayLike]) -> None:
        super().__init__(env)
        patterns = [self.env.validate_action(np.asarray(a)) for a in actions]
        if not patterns:
            raise ValueError("FixedSequence: expected at least one per-turn pattern")
        self.actions = patterns

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The first pattern (a single observation carries no step count: use predict)."""
        return self.actions[0].copy()

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """The pattern of this step; ``state`` is the step count (one environment)."""
        if np.ndim(observation) != 1:
            raise ValueError("FixedSequence counts one episode's steps; pass one observation")
        step = 0 if state is None or (episode_start is not None and bool(episode_start[0])) \
            else int(state)
        action = (self.actions[step].copy() if step < len(self.actions)
                  else np.zeros(self.n_agents, dtype=np.int8))
        return action, step + 1


class OneTurnPlanSearch(Baseline):
    """FlightPlanner's one-turn rule: the strongest planner and searcher together, then commit.

    Until a quoted plan within the budget and the hop limit stands, it calls the strongest
    planner and the strongest searcher in one turn (again after a drop, a detour or an
    over-budget quote); then it commits. It reads three observed flags, ``has_quote``,
    ``within_budget`` and ``within_hop_limit``, and never validates. Issue #10 found it
    beats PPO and LoRA-guided PPO on FlightPlanner-v0 on both success and cost per success
    (0.978 at CPS 0.0402 on the 400 evaluation tasks of seed 0).

    Args:
        env: A FlightPlanner env.
        planner: The planner to call instead of the strongest one (the FlightPlanner
            planner plays this rule with every (planner, searcher) pair as its
            continuation).
        searcher: The searcher to call instead of the strongest one.
    """

    name = "one-turn"

    def __init__(self, env: gym.Env, planner: int | None = None,
                 searcher: int | None = None) -> None:
        super().__init__(env)
        layout = self.env.observation_layout
        flags = ("has_quote", "within_budget", "within_hop_limit")
        strongest = getattr(self.env, "strongest", None)  # FlightPlanner's role -> agent
        picks = ([strongest(role) for role in ("planner", "search")]
                 if callable(strongest) and set(flags) <= set(layout) else [None])
        if None in picks:
            raise ValueError(f"OneTurnPlanSearch: {self.env.env_name} has no planner and "
                             "searcher roles to call and no quote to commit; it applies to "
                             "cost_envs/FlightPlanner-v0 and -v1")
        for k, (role, pick) in enumerate(zip(("planner", "search"), (planner, searcher),
                                             strict=True)):
            if pick is not None:
                if not (0 <= pick < self.n_agents and self.env.pool.roles[pick] == role):
                    raise ValueError(f"OneTurnPlanSearch: agent {pick!r} is not a {role!r} "
                                     f"agent of {self.env.env_name}")
                picks[k] = pick
        self._plan_and_search = np.zeros(self.n_agents, dtype=np.int8)
        self._plan_and_search[[p for p in picks if p is not None]] = 1  # none is (see above)
        self._flags = [layout[flag].start for flag in flags]

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Plan and search until a good quote stands, then commit (all zeros)."""
        if all(observation[index] > 0.5 for index in self._flags):
            return np.zeros(self.n_agents, dtype=np.int8)
        return self._plan_and_search.copy()


#: CLI names -> baseline classes, each constructed as ``cls(env)``.
BASELINES: dict[str, type[Baseline]] = {
    cls.name: cls
    for cls in (RandomAllocator, CapabilityMatch, RuleBased, CostOptOracle, GreedyHeuristic,
                CallAll)
}


# ------------------------------------------------------------------ small/large routing
class RoutingBaseline(Baseline):
    """A baseline for small/large model routing (BoPO's setting, AgenticRouting-v0).

    In these environments the all-zero action runs the step with the small (default)
    model and bit ``i`` replaces it by model ``i`` (``zero_action_fallback``), so "never
    call" is a policy that still works rather than an early stop.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not getattr(self.env, "zero_action_fallback", False):
            raise ValueError(
                f"{type(self).__name__}: expected a small/large routing environment whose "
                "all-zero action runs the small model (zero_action_fallback, e.g. "
                f"cost_envs/AgenticRouting-v0), got {self.env.env_name}"
            )


class AlwaysSmall(RoutingBaseline):
    """BoPO's lower boundary policy: the small model runs every step."""

    name = "always-small"

    def act(self, observation: np.ndarray) -> np.ndarray:
        """All zeros."""
        return np.zeros(self.n_agents, dtype=np.int8)


class AlwaysLarge(RoutingBaseline):
    """BoPO's upper boundary policy: the large model runs every step."""

    name = "always-large"

    #: :meth:`CallAll.act` (all ones): the one bit, set, runs the step on the large model.
    act = CallAll.act


class RandomMix(RoutingBaseline):
    """The large model with probability ``p`` at each step, independently.

    Args:
        env: The environment.
        p: Probability of the large model, in ``[0, 1]``.
        seed: Seed of the baseline's own generator (it never touches the env's).
    """

    name = "random-mix"

    def __init__(self, env: gym.Env, p: float = 0.5, seed: int | None = 0) -> None:
        super().__init__(env)
        self.p = probability(p, "p", where="RandomMix")
        self.rng = np.random.default_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Each bit 1 with probability ``p``."""
        return (self.rng.random(self.n_agents) < self.p).astype(np.int8)


class Cascade(RoutingBaseline):
    """Small model first; escalate to the large model after ``patience`` failed steps.

    At each step the large model runs iff the last ``patience`` steps all failed (read
    from the observation through the env's ``consecutive_failures``); after a step that
    succeeds the cascade goes back to the small model.

    Args:
        env: The environment (it must decode consecutive failures from an observation).
        patience: Consecutive failed steps before escalating, from 1 to the env's
            ``failure_cap``.
    """

    name = "cascade"

    def __init__(self, env: gym.Env, patience: int = 1) -> None:
        super().__init__(env)
        decode = getattr(self.env, "consecutive_failures", None)
        cap = getattr(self.env, "failure_cap", None)
        if decode is None or cap is None:
            raise ValueError(f"Cascade: {self.env.env_name} does not report consecutive "
                             "failures in its observation (consecutive_failures, failure_cap)")
        self.patience = integer(patience, "patience", minimum=1, maximum=cap, where="Cascade")
        self._failures = decode

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Large (all ones) iff at least ``patience`` consecutive failures are observed."""
        escalate = self._failures(observation) >= self.patience
        return np.full(self.n_agents, int(escalate), dtype=np.int8)


class DifficultyThreshold(RoutingBaseline):
    """The large model whenever the observed difficulty is above a threshold.

    The one-parameter rule of issue #10: on AgenticRouting-v0 "large when the observed
    difficulty exceeds about 0.35" matched or beat BoPO on every profile, so it is the
    simple baseline a learned router must beat. :meth:`fit` picks the threshold on
    training tasks; the rule is then frozen.

    Args:
        env: A routing env whose ``observation_layout`` has a ``difficulty`` slot.
        threshold: Difficulty above which the large model runs, in ``[0, 1]``.
    """

    name = "difficulty-threshold"
    #: The thresholds :meth:`fit` tries by default: every 0.05 from 0 to 1.
    GRID = tuple(round(0.05 * k, 2) for k in range(21))

    def __init__(self, env: gym.Env, threshold: float = 0.35) -> None:
        super().__init__(env)
        layout = self.env.observation_layout
        if "difficulty" not in layout:
            raise ValueError(f"DifficultyThreshold: {self.env.env_name} observes no "
                             f"difficulty (its observation slots: {sorted(layout)})")
        self.threshold = probability(threshold, "threshold", where="DifficultyThreshold")
        self._difficulty = layout["difficulty"].start

    def act(self, observation: np.ndarray) -> np.ndarray:
        """All ones (the large model) iff the observed difficulty exceeds the threshold."""
        large = float(observation[self._difficulty]) > self.threshold
        return np.full(self.n_agents, int(large), dtype=np.int8)

    @classmethod
    def fit(cls, env: gym.Env, tasks: Sequence[Any],
            thresholds: Sequence[float] = GRID) -> DifficultyThreshold:
        """The rule whose threshold gives the lowest cost per success on ``tasks``.

        Every threshold is scored on the same training tasks, replayed in order on
        ``env`` (wrapped as it will be scored, e.g. under a budget); ties go to the
        higher success rate, then to the lower threshold.

        Args:
            env: The environment, possibly wrapped.
            tasks: Training tasks (disjoint from the evaluation tasks).
            thresholds: Candidate thresholds.

        Returns:
            The fitted, frozen baseline (built on ``env``).
        """
        from agents.evaluation import evaluate  # evaluation does not import baselines
        from cost_envs.metrics import cps, success_rate
        from cost_envs.wrappers import TaskReplay

        if not thresholds:
            raise ValueError("DifficultyThreshold.fit: expected at least one threshold")
        replay = TaskReplay(env, tasks)
        scores = []
        for threshold in thresholds:
            records = evaluate(cls(env, threshold), replay, episodes=len(tasks)).records
            scores.append((cps(records), -success_rate(records), float(threshold)))
        return cls(env, min(scores)[2])


class FixedConsultation(Baseline):
    """Consult a fixed set of experts in the first round, then answer (``[]``: alone).

    CORL's reference points: the controller alone and each single expert. The first round
    is the one whose ``rounds_left`` slot is still full; a ``BudgetTier`` observation keeps
    the env's positions, so the env's layout serves it too.

    Args:
        env: An expert-routing env whose ``observation_layout`` has ``rounds_left``.
        experts: Indices of the experts to consult.
    """

    name = "fixed-consultation"

    def __init__(self, env: gym.Env, experts: Sequence[int]) -> None:
        super().__init__(env)
        layout = self.env.observation_layout
        if "rounds_left" not in layout:
            raise ValueError(f"{type(self).__name__}: {self.env.env_name} has no consultation "
                             f"rounds (its observation slots: {sorted(layout)}); it applies "
                             "to cost_envs/ExpertRouting-v0 and -v1")
        self.action = np.zeros(self.n_agents, dtype=np.int8)
        self.action[list(experts)] = 1
        self._rounds_left = layout["rounds_left"].start

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The fixed experts while no round has passed, then answer (all zeros)."""
        first_round = float(observation[self._rounds_left]) >= 1.0 - 1e-6
        return self.action.copy() if first_round else np.zeros_like(self.action)


class ConsultAll(FixedConsultation):
    """CORL's "consult every expert": all of them in the first round, then answer.

    On ExpertRouting-v0's MATH500 high tier it equals the learned controllers' only win over
    the best single expert (issue #10), so tier tables show it beside them.
    """

    name = "consult-all"

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, range(_orchestration_env(env).n_agents))


#: Small/large routing baselines (BoPO), each constructed as ``cls(env)``; kept apart
#: from :data:`BASELINES` because they need a routing env (``zero_action_fallback``).
ROUTING_BASELINES: dict[str, type[RoutingBaseline]] = {
    cls.name: cls for cls in (AlwaysSmall, AlwaysLarge, RandomMix, Cascade, DifficultyThreshold)
}
#: Baselines that apply to one env family only, each constructed as ``cls(env)`` (it
#: raises ``ValueError`` naming what it needs on any other env). TraceRouting-v0's
#: random router (one model per query) is :mod:`agents.routers.random_router`'s.
FAMILY_BASELINES: dict[str, type[Allocator]] = {
    cls.name: cls for cls in (ConsultAll, OneTurnPlanSearch, RandomRouter)}
