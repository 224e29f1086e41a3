"""The best fixed rule: a documented family of rules, searched on training tasks, frozen.

Issue #10 asks of every environment whether learning pays: a learned allocator is worth
its training only if it beats the best rule a careful engineer would write without any.
This module defines that family, searches it on training tasks and freezes the winner as
an allocator, :class:`BestFixedRule` (``best-rule`` in the CLI and the tables).

**The family.** Three kinds of rule, none of which learns:

1. *Open-loop call patterns* (:class:`agents.baselines.FixedSequence`): the same action at
   turn ``k`` of every task, for the first ``len(patterns)`` turns, then the all-zero
   action (commit, answer or the small model). A turn's candidate actions are the all-zero
   action, every agent alone, every pair of agents and the whole pool (every subset when
   the pool has at most :data:`EXHAUSTIVE_POOL` agents). Sequences are grown by beam
   search: every one-turn pattern is scored, then each of the ``beam`` best sequences is
   extended by every candidate action but the all-zero one, up to ``max_turns`` turns
   (so where the all-zero action runs a default model, AgenticRouting's, a sequence has
   no default turn before its last pattern).
2. *Single thresholds on one observed feature* (:class:`ThresholdRule`): action ``above``
   when ``observation[i] > t``, else action ``below``. The two actions are distinct members
   of {all-zero} and the first actions of the ``top`` best open-loop sequences (both
   actions of a one-agent pool); ``i`` runs over every observation slot that varies on
   the training tasks (visited under those sequences) and ``t`` over up to ``cuts``
   cut points: the midpoints between its values when it takes at most ``cuts + 1``, else
   its interior quantiles ``k / (cuts + 1)``.
3. *The project's hand-written rules* (:func:`hand_written_rules`): RuleBased, the greedy
   covering set at coverages 0.5 to 1.0, CapabilityMatch, calling everyone, and the
   family baselines that fit the env (FlightPlanner's one-turn rule, CORL's consult-all,
   BoPO's always-small, always-large and cascades). They read the observation in ways
   one threshold cannot (ToolBench's skill-to-tool table), so a row named "best fixed
   rule" is never beaten by a rule the project already ships. Randomised and privileged
   baselines are not rules and are left out.

**The objective** is the mean episode return on the training tasks: the env's reward as
it is scored (a ``BudgetTier``'s gated reward included), which PPO and the tier adapters
maximise (BoPO learns on its own shaped reward). Every candidate meets the same training
tasks, in the same order, on the environment as it will be scored (budget wrappers
included), and each pass starts from the same seed, so a wrapper's own draws (a tier per
query) are the same for every candidate.

**Selection.** Ranking ~200 candidates on a few hundred tasks rewards luck: the top rule
is often a threshold on a noisy feature that beats a plain rule by less than the noise.
So the frozen rule is the *simplest* candidate whose mean return is within one standard
error of the best one's (Breiman's one-standard-error rule): open-loop rules by length
first, then the hand-written rules, then thresholds; among equals, the better score.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import ArrayLike

from agents.allocator import Allocator
from agents.baselines import (
    FAMILY_BASELINES,
    ROUTING_BASELINES,
    Baseline,
    CallAll,
    CapabilityMatch,
    Cascade,
    DifficultyThreshold,
    FixedSequence,
    GreedyHeuristic,
    RandomMix,
    RuleBased,
    _orchestration_env,
)
from agents.routers.random_router import RandomRouter
from agents.seeds import RULE_TASK_SEED
from cost_envs.config import integer

#: Pools up to this size try every subset of agents at every turn.
EXHAUSTIVE_POOL = 6


def _observation_size(env: gym.Env, who: str) -> int:
    """The number of values in one of ``env``'s observations."""
    shape = env.observation_space.shape
    if shape is None:
        raise ValueError(f"{who}: expected an observation space with a shape, got "
                         f"{env.observation_space}")
    return int(np.prod(shape))


class ThresholdRule(Baseline):
    """One observed feature against one threshold: ``above`` if it exceeds ``t``, else ``below``.

    Args:
        env: The environment.
        feature: Index into the observation (as the wrapped env emits it).
        threshold: The cut point.
        above: Action played when ``observation[feature] > threshold``.
        below: Action played otherwise.
    """

    name = "threshold-rule"

    def __init__(self, env: gym.Env, feature: int, threshold: float,
                 above: ArrayLike, below: ArrayLike) -> None:
        super().__init__(env)
        size = _observation_size(env, "ThresholdRule")
        self.feature = integer(feature, "feature", minimum=0, maximum=size - 1,
                               where="ThresholdRule")
        self.threshold = float(threshold)
        if not np.isfinite(self.threshold):
            raise ValueError(f"ThresholdRule: threshold must be finite, got {threshold!r}")
        self.above = self.env.validate_action(np.asarray(above))
        self.below = self.env.validate_action(np.asarray(below))

    def act(self, observation: np.ndarray) -> np.ndarray:
        """``above`` when the feature exceeds the threshold, else ``below``."""
        return (self.above if observation[self.feature] > self.threshold
                else self.below).copy()


@dataclass(frozen=True)
class ScoredRule:
    """A candidate rule and what it did on the training tasks."""

    rule: Baseline
    description: str
    mean_return: float
    success: float
    cost: float
    #: Standard error of the mean return over the training tasks.
    stderr: float
    #: The longest episode the rule played (open-loop rules grow only past shorter ones).
    max_length: int
    #: Simplicity rank for the one-standard-error choice: an open-loop rule's length,
    #: then :data:`HAND_WRITTEN`, then :data:`THRESHOLD`.
    complexity: int = 0

    def key(self) -> tuple[float, float, float]:
        """Sort key, best first: higher return, then higher success, then lower cost."""
        return (-self.mean_return, -self.success, self.cost)


#: Complexity ranks of the non-open-loop kinds (open-loop rules rank by their length).
HAND_WRITTEN, THRESHOLD = 100, 101


def feature_names(env: gym.Env) -> list[str]:
    """A name per observation slot: the env's layout, then the slots wrappers append.

    A wrapper that appends slots names them in ``added_observation_layout`` (BudgetTier's
    ``tier`` and ``budget_left``); any other slot is ``obs[i]``.
    """
    size = _observation_size(env, "feature_names")
    names = [f"obs[{i}]" for i in range(size)]
    layouts = [_orchestration_env(env).observation_layout]
    layer = env
    while isinstance(layer, gym.Wrapper):
        if hasattr(type(layer), "added_observation_layout"):  # its own, not forwarded
            layouts.append(layer.added_observation_layout)  # type: ignore[attr-defined]  # hasattr
        layer = layer.env
    for layout in layouts:
        for slot, span in layout.items():
            width = span.stop - span.start
            for offset, index in enumerate(range(span.start, min(span.stop, size))):
                names[index] = slot if width == 1 else f"{slot}[{offset}]"
    return names


def action_name(env: gym.Env, action: np.ndarray) -> str:
    """``a+b`` for the agents an action calls, ``none`` for the all-zero action.

    Where the all-zero action runs the env's default model (``zero_action_fallback``) it
    is ``default`` instead.
    """
    from agents.evaluation import agent_names

    names = agent_names(env)
    called = [names[i] for i in np.flatnonzero(action)]
    if called:
        return "+".join(called)
    return "default" if _orchestration_env(env).zero_action_fallback else "none"


def candidate_actions(n_agents: int) -> list[np.ndarray]:
    """One turn's candidate actions: nothing, each agent, each pair, everyone.

    Pools of at most :data:`EXHAUSTIVE_POOL` agents get every subset instead.
    """
    if n_agents <= EXHAUSTIVE_POOL:
        subsets = itertools.product((0, 1), repeat=n_agents)
        return [np.array(s, dtype=np.int8) for s in subsets]
    actions = []
    for size in (0, 1, 2):
        for chosen in itertools.combinations(range(n_agents), size):
            action = np.zeros(n_agents, dtype=np.int8)
            action[list(chosen)] = 1
            actions.append(action)
    actions.append(np.ones(n_agents, dtype=np.int8))
    return actions


def hand_written_rules(env: gym.Env) -> list[tuple[str, Baseline]]:
    """The project's deterministic, observation-only baselines that fit ``env``, named."""
    family: list[tuple[str, Any]] = [("rule", RuleBased), ("capability", CapabilityMatch),
                                      ("all", CallAll)]
    family += [(f"greedy (coverage {c})", lambda e, c=c: GreedyHeuristic(e, c))
               for c in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)]
    family += [(name, cls) for name, cls in FAMILY_BASELINES.items()
               if cls is not RandomRouter]  # random, not a fixed rule
    family += [(name, cls) for name, cls in ROUTING_BASELINES.items()
               if cls not in (RandomMix, DifficultyThreshold, Cascade)]
    family += [(f"cascade (patience {k})", lambda e, k=k: Cascade(e, k)) for k in (1, 2, 3)]
    rules: list[tuple[str, Baseline]] = []
    for name, build in family:
        try:
            rules.append((name, build(env)))
        except ValueError:  # it does not fit (a family baseline elsewhere, greedy's 2**m)
            continue
    return rules


def training_tasks(env: gym.Env, n: int = 200, seed: int = RULE_TASK_SEED) -> list[Any]:
    """``n`` tasks from the seed range kept for fitting rules (:data:`RULE_TASK_SEED`).

    Drawing re-seeds ``env``; evaluation re-seeds it again, so the tasks it scores on are
    unaffected.
    """
    integer(n, "n", minimum=1, where="training_tasks")
    base = _orchestration_env(env)
    split = getattr(base, "split", None)  # logged queries: evaluation draws from them too
    if split is not None and split != "train":
        raise ValueError(f"training_tasks: {base.env_name} replays the logged queries of "
                         f"split {split!r}, which evaluation draws from too; fit on the env "
                         "made with split='train'")
    env.reset(seed=seed)
    return base.sample_tasks(n)


class RuleSearch:
    """Score rules of the family on a fixed list of training tasks.

    Args:
        env: The environment, wrapped as it will be scored.
        tasks: Training tasks (disjoint from evaluation tasks), replayed in order.
    """

    def __init__(self, env: gym.Env, tasks: Sequence[Any]) -> None:
        from cost_envs.wrappers import TaskReplay

        if not tasks:
            raise ValueError("RuleSearch: expected at least one training task, got none")
        self.env = env
        self.tasks = list(tasks)
        self.replay = TaskReplay(env, self.tasks)
        self.n_agents = _orchestration_env(env).n_agents
        self.names = feature_names(env)

    def score(self, rule: Baseline, description: str, keep_observations: bool = False,
              complexity: int = 0) -> tuple[ScoredRule, np.ndarray | None]:
        """Play ``rule`` once on every training task; the visited observations if asked."""
        from agents.evaluation import rollout

        returns, successes, costs, lengths = [], [], [], []
        seen: list[np.ndarray] = []
        for index in range(len(self.tasks)):
            # Re-seed at the start of each pass: wrappers' own draws repeat per candidate.
            played = rollout(rule, self.replay, seed=0 if index == 0 else None,
                             record_steps=keep_observations)
            returns.append(played.episode_return)
            successes.append(played.record.success)
            costs.append(played.record.cost)
            lengths.append(played.record.length)
            if keep_observations:
                assert played.observations is not None  # record_steps keeps them
                seen.append(played.observations)
        stderr = float(np.std(returns, ddof=1) / np.sqrt(len(returns))) if len(returns) > 1 \
            else 0.0
        scored = ScoredRule(rule, description, float(np.mean(returns)),
                            float(np.mean(successes)), float(np.mean(costs)), stderr,
                            max(lengths), complexity)
        return scored, (np.concatenate(seen) if keep_observations else None)

    def open_loop(self, beam: int = 3, max_turns: int = 4) -> list[ScoredRule]:
        """Beam search over fixed per-turn call patterns; every scored sequence, best first."""
        actions = candidate_actions(self.n_agents)
        scored: list[ScoredRule] = []
        frontier: list[tuple[np.ndarray, ...]] = [()]
        for _ in range(max_turns):
            grown = []
            for prefix in frontier:
                for action in actions:
                    if prefix and not action.any():
                        continue  # a trailing all-zero turn repeats the shorter sequence
                    sequence = (*prefix, action)
                    rule = FixedSequence(self.env, sequence)
                    grown.append((sequence, self.score(rule, self._describe(sequence),
                                                       complexity=len(sequence))[0]))
            grown.sort(key=lambda pair: pair[1].key())
            scored.extend(candidate for _, candidate in grown)
            # Extending pays only if some episode outlived the sequence.
            frontier = [sequence for sequence, candidate in grown[:beam]
                        if sequence[-1].any()  # the rule's last pattern
                        and candidate.max_length > len(sequence)]
            if not frontier:
                break
        return sorted(scored, key=ScoredRule.key)

    def _describe(self, sequence: Sequence[np.ndarray]) -> str:
        """``open loop: a, then b, then none``; a lone all-zero turn is ``open loop: none``."""
        turns = [action_name(self.env, action) for action in sequence]
        if sequence[-1].any():  # after its last pattern the rule plays the all-zero action
            turns.append(action_name(self.env, np.zeros(self.n_agents, dtype=np.int8)))
        return "open loop: " + ", then ".join(turns)

    def thresholds(self, open_loop: Sequence[ScoredRule], top: int = 2,
                   cuts: int = 8) -> list[ScoredRule]:
        """Every single-feature threshold rule over the best open-loop rules' actions."""
        leaders = list(open_loop[:top])
        seen = np.concatenate([self.score(r.rule, r.description, True)[1] for r in leaders])
        if self.n_agents == 1:
            actions = [np.zeros(1, np.int8), np.ones(1, np.int8)]
        else:
            actions = [np.zeros(self.n_agents, dtype=np.int8)]
            for leader in leaders:
                if not isinstance(leader.rule, FixedSequence):
                    raise TypeError(f"thresholds: expected open-loop rules (FixedSequence), "
                                    f"got {type(leader.rule).__name__}")
                first = leader.rule.actions[0]
                if not any(np.array_equal(first, a) for a in actions):
                    actions.append(first)
        scored = []
        for feature in range(seen.shape[1]):
            for threshold in _cut_points(seen[:, feature], cuts):
                for above, below in itertools.permutations(actions, 2):
                    rule = ThresholdRule(self.env, feature, threshold, above, below)
                    text = (f"threshold: {action_name(self.env, above)} if "
                            f"{self.names[feature]} > {threshold:.4g}, else "
                            f"{action_name(self.env, below)}")
                    scored.append(self.score(rule, text, complexity=THRESHOLD)[0])
        return sorted(scored, key=ScoredRule.key)

    def hand_written(self) -> list[ScoredRule]:
        """The project's hand-written rules that fit the env (:func:`hand_written_rules`)."""
        return sorted((self.score(rule, f"hand-written: {name}", complexity=HAND_WRITTEN)[0]
                       for name, rule in hand_written_rules(self.env)), key=ScoredRule.key)

    def search(self, beam: int = 3, max_turns: int = 4, top: int = 2,
               cuts: int = 8) -> list[ScoredRule]:
        """All three kinds, best first; ties go to open-loop, then hand-written rules."""
        integer(beam, "beam", minimum=1, where="RuleSearch")
        integer(max_turns, "max_turns", minimum=1, where="RuleSearch")
        integer(top, "top", minimum=1, where="RuleSearch")
        integer(cuts, "cuts", minimum=1, where="RuleSearch")
        open_loop = self.open_loop(beam, max_turns)
        candidates = open_loop + self.hand_written() + self.thresholds(open_loop, top, cuts)
        return sorted(candidates, key=ScoredRule.key)


def _cut_points(values: np.ndarray, cuts: int) -> list[float]:
    """Up to ``cuts`` thresholds: midpoints between a feature's values, or its quantiles."""
    distinct = np.unique(values)
    if distinct.size < 2:
        return []
    if distinct.size > cuts + 1:  # many values: the interior quantiles k / (cuts + 1)
        interior = np.quantile(values, np.linspace(0, 1, cuts + 2)[1:-1])
        return [float(t) for t in np.unique(interior)]
    return [float(t) for t in (distinct[:-1] + distinct[1:]) / 2]


def one_standard_error(ranking: Sequence[ScoredRule]) -> ScoredRule:
    """The simplest candidate within one standard error of the best mean return.

    ``ranking`` is best first; simplicity is ``complexity`` (module docstring), and among
    equally simple candidates the better score wins.
    """
    if not ranking:
        raise ValueError("one_standard_error: expected at least one scored rule, got none")
    floor = ranking[0].mean_return - ranking[0].stderr
    eligible = [c for c in ranking if c.mean_return >= floor]
    return min(eligible, key=lambda c: (c.complexity, c.key()))


class BestFixedRule(Allocator):
    """The best rule of the family on training tasks, frozen.

    The choice follows the module docstring's one-standard-error rule.

    Building it runs the search on ``env`` as wrapped; then it acts as the winning rule.

    Args:
        env: The environment the rule will act in (wrapped as it will be scored).
        tasks: Training tasks; by default ``n_tasks`` tasks drawn by
            :func:`training_tasks` from ``seed``, a range no evaluation uses.
        n_tasks: How many training tasks to draw when ``tasks`` is not given.
        seed: First reset seed of the drawn training tasks (default :data:`RULE_TASK_SEED`).
        beam: The search's beam width (:meth:`RuleSearch.search`).
        max_turns: The longest call pattern it grows (:meth:`RuleSearch.search`).
        top: How many of the best open-loop patterns give the threshold rules their
            actions (:meth:`RuleSearch.search`).
        cuts: At most how many thresholds it tries per feature (:meth:`RuleSearch.search`).

    Attributes:
        rule: The frozen winner (:class:`FixedSequence` or :class:`ThresholdRule`).
        description: One line naming it, e.g. ``"threshold: large if difficulty > 0.35,
            else none"``.
        ranking: Every scored candidate, best first (their training-task scores).
        chosen: The frozen candidate (:func:`one_standard_error` of ``ranking``).
    """

    name = "best-rule"

    def __init__(self, env: gym.Env, tasks: Sequence[Any] | None = None, *,
                 n_tasks: int = 200, seed: int | None = None, beam: int = 3,
                 max_turns: int = 4, top: int = 2, cuts: int = 8) -> None:
        if tasks is None:
            tasks = training_tasks(env, n_tasks, RULE_TASK_SEED if seed is None else seed)
        self.ranking = RuleSearch(env, tasks).search(beam, max_turns, top, cuts)
        self.chosen = one_standard_error(self.ranking)
        self.rule = self.chosen.rule
        self.description = self.chosen.description

    @classmethod
    def fit(cls, env: gym.Env, tasks: Sequence[Any]) -> BestFixedRule:
        """The best rule on ``tasks`` (as :class:`agents.baselines.DifficultyThreshold.fit`)."""
        return cls(env, tasks)

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """The frozen rule's action (open-loop rules count steps in ``state``)."""
        return self.rule.predict(observation, state, episode_start, deterministic)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The frozen rule's action for one observation (no step count: use predict)."""
        return self.rule.act(observation)


def fitted(cls: Any, n_tasks: int = 200, seed: int = RULE_TASK_SEED) -> Any:
    """A factory ``env -> cls.fit(env, training_tasks(env, n_tasks, seed))``.

    What the CLI and the tables use for baselines fitted on training tasks (those with a
    ``fit(env, tasks)`` classmethod: :class:`BestFixedRule`, ``DifficultyThreshold``), so
    that each is fitted on the env it will be scored on, wrappers and all.
    """
    integer(n_tasks, "n_tasks", minimum=1, where="fitted")

    def build(env: gym.Env) -> Any:
        return cls.fit(env, training_tasks(env, n_tasks, seed))

    return build
