"""ToolBench's planner: exact expectimax over (turn, stage), blind to the luck.

On ToolBench-v0 the luck is independent per (turn, tool) and every turn advances only the
current stage, so the expected return from a point depends on (turn, stage) alone and an
exact expectimax over those few states (at most 5 x 4) and all ``2**m`` joint actions
gives the optimal policy under that knowledge. The answer's F1, random given the tool
that composes it, enters through its exact distribution (:class:`AnswerModel`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from agents.planning.common import TaskPlanner
from cost_envs.core import MAX_ORACLE_AGENTS
from cost_envs.envs.toolbench import MAX_STAGES, MAX_TURNS, ToolBenchEnv, ToolTask


class AnswerModel:
    """The exact distribution of a ToolBench answer's F1, given its composer's strength.

    The env composes the answer once per episode, with composer strength ``q``: each of
    the ``L`` reference positions is recalled independently with probability
    ``p = 0.3 + 0.7 q`` (``recall_luck[t, j] < p``, the task's draw, the same at every
    turn ``t``); ``n_s = round(L (1 - q) h)`` spurious
    tokens are added, ``h ~ U(0, 1)``, each uniform over the ``3 L`` positions of the
    task's topic (the reference, then ``2 L`` distractors, which may repeat reference
    tokens). F1 is the multiset token F1 against the reference.

    Everything but ``p`` and the law of ``n_s`` is a parameter of the task, so this
    precomputes, once per task, a table independent of ``q``: for every ``n_s``, the
    weight of each (number recalled ``n_r``, overlap) pair over recall patterns and
    spurious draws, by a dynamic programme over the distinct reference tokens (a token
    that occurs ``c`` times in the reference and ``a`` times in the topic contributes
    ``min(r + k, c)`` to the overlap when ``r`` of its positions are recalled and ``k``
    spurious tokens hit it; the spurious counts are multinomial, handled through their
    exponential generating function). A recall pattern with ``n_r`` recalled positions
    has probability ``p**n_r (1 - p)**(L - n_r)`` whatever ``q``, so :meth:`outcome` is
    a weighted sum of the table. Nothing is sampled or approximated; the only differences
    from the env are the ``2**-24`` granularity of its float32 uniforms (a probability
    off by less than ``2**-24``) and the ties of ``round`` (as rare).

    Args:
        reference: The reference token ids (``L`` of them, repeats allowed).
        topic: The ``3 L`` topic tokens (``ToolTask.topic``).
        threshold: The F1 at or above which an answer succeeds.
    """

    def __init__(self, reference: np.ndarray, topic: np.ndarray, threshold: float) -> None:
        size = len(reference)
        if size == 0 or len(topic) != 3 * size:
            raise ValueError(f"AnswerModel: expected a non-empty reference and a topic of 3x "
                             f"its length, got {size} and {len(topic)} tokens")
        self.size = size
        self.threshold = float(threshold)
        values, counts = np.unique(np.asarray(reference), return_counts=True)
        topic_list = np.asarray(topic).tolist()
        in_topic = [topic_list.count(v) for v in values.tolist()]
        fact = [math.factorial(k) for k in range(size + 1)]
        # weights[n_r, overlap, u]: sum over recall patterns and spurious hits u on the
        # reference tokens of prod_v C(c_v, r_v) w_v**k_v / k_v!
        weights = np.zeros((size + 1, size + 1, size + 1))
        weights[0, 0, 0] = 1.0
        for c, a in zip(counts.tolist(), in_topic, strict=True):
            share = a / (3 * size)
            grown = np.zeros_like(weights)
            for r in range(c + 1):
                for k in range(size + 1):
                    g = min(r + k, c)
                    grown[r:, g:, k:] += (math.comb(c, r) * share**k / fact[k]) * (
                        weights[: size + 1 - r, : size + 1 - g, : size + 1 - k])
            weights = grown
        other = (3 * size - sum(in_topic)) / (3 * size)
        # table[n_s, n_r, overlap]: P(n_r, overlap | n_s) / (p**n_r (1-p)**(L-n_r))
        table = np.zeros((size + 1, size + 1, size + 1))
        for n in range(size + 1):
            for u in range(n + 1):
                table[n] += (fact[n] * other ** (n - u) / fact[n - u]) * weights[:, :, u]
        self._table = table
        f1 = np.zeros_like(table)
        for n in range(size + 1):
            for n_r in range(size + 1):
                for overlap in range(1, min(n + n_r, size) + 1):
                    # token_f1's own arithmetic, so ties at the threshold fall the same way
                    precision = overlap / (n + n_r)
                    recall = overlap / size
                    f1[n, n_r, overlap] = 2 * precision * recall / (precision + recall)
        self._f1 = f1
        self._succeeds = f1 >= self.threshold
        self._cache: dict[float, tuple[float, float]] = {}

    def spurious_counts(self, q: float | np.ndarray) -> np.ndarray:
        """``P(n_s = k)`` for ``k = 0..L`` (last axis): ``n_s = round(X h)``, ``X = L (1 - q)``.

        ``q`` may be an array; the result then has its shape plus the last axis.
        """
        span = self.size * (1.0 - np.asarray(q, dtype=np.float64))[..., None]
        k = np.arange(self.size + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            probs = (np.clip(k + 0.5, 0, span) - np.clip(k - 0.5, 0, span)) / span
        return np.where(span > 0, probs, k == 0)

    def recall_weights(self, q: float | np.ndarray) -> np.ndarray:
        """``p**n_r (1 - p)**(L - n_r)`` for ``n_r = 0..L`` (last axis), ``p = 0.3 + 0.7 q``."""
        p = np.minimum(1.0, 0.3 + 0.7 * np.asarray(q, dtype=np.float64))[..., None]
        n_r = np.arange(self.size + 1)
        return p**n_r * (1.0 - p) ** (self.size - n_r)

    def by_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """``(success, f1)``, each ``(L+1, L+1)`` over ``(n_s, n_r)``, summed over the overlap.

        ``P(success) = sum spurious_counts(q)[n_s] recall_weights(q)[n_r] success[n_s, n_r]``
        and likewise ``E[F1]`` with ``f1``: tables of the task alone, whatever ``q``, so
        tasks of one length can be averaged before ``q`` is known.
        """
        return ((self._table * self._succeeds).sum(axis=2),
                (self._table * self._f1).sum(axis=2))

    def distribution(self, q: float) -> np.ndarray:
        """``P(n_s, n_r, overlap)`` for composer strength ``q``, shape ``(L+1,)*3``."""
        return (self.spurious_counts(q)[:, None, None] * self.recall_weights(q)[None, :, None]
                * self._table)

    def outcome(self, q: float) -> tuple[float, float]:
        """``(P(success), E[F1])`` of an answer composed with strength ``q``."""
        q = float(q)
        if q not in self._cache:
            joint = self.distribution(q)
            self._cache[q] = (float(joint[self._succeeds].sum()), float((joint * self._f1).sum()))
        return self._cache[q]


@dataclass(frozen=True)
class ToolBenchPlan:
    """The expectimax solution of one ToolBench task's parameters.

    Attributes:
        values: ``values[t, s]``, the expected return (Eq. 1, the env's weights) from turn
            ``t`` at stage ``s`` under the optimal policy; row ``horizon`` is 0.
        actions: ``actions[t, s]``, the optimal action there (int8, ``(m,)``); ties go to
            the cheapest action.
        answer: ``answer[i]`` = ``(P(success), E[F1])`` of an answer composed by tool ``i``.
    """

    values: np.ndarray
    actions: np.ndarray
    answer: tuple[tuple[float, float], ...]

    @property
    def expected_return(self) -> float:
        """The expected return of an episode from its start."""
        return float(self.values[0, 0])


def plan_toolbench(env: ToolBenchEnv, task: ToolTask) -> ToolBenchPlan:
    """Exact expectimax over (turn, stage) for ``task``'s parameters on ``env``'s pool.

    Reads ``task.stage_skill``, ``task.stage_difficulty``, ``task.reference`` and
    ``task.topic``, and the env's pool, prices, reward weights and F1 threshold; never
    the task's luck.
    """
    if task.topic is None:
        raise ValueError("plan_toolbench: the task has no topic vocabulary (built without "
                         "one), so its answer's F1 law is unknown")
    skills, difficulty = task.stage_skill, task.stage_difficulty
    strength = env.pool.capabilities[:, skills[-1]] ** (1.0 + difficulty[-1])
    model = AnswerModel(task.reference, task.topic, env.f1_threshold)
    answer = tuple(model.outcome(q) if q > 0 else (0.0, 0.0) for q in strength.tolist())
    weights = env.reward_weights
    payoff = np.array([weights.alpha * s + weights.beta * 10.0 * f for s, f in answer])
    joint = JointActions.of(env)
    values, best = solve_batch(joint, env.pool.capabilities, skills[None], difficulty[None],
                               payoff[None])
    return ToolBenchPlan(values[0], joint.table[best[0]], answer)


@dataclass(frozen=True)
class JointActions:
    """An env's ``2**m`` joint actions, cheapest first, and what each costs in Eq. 1.

    Attributes:
        table: ``(A, m)`` int8, :meth:`~cost_envs.core.OrchestrationEnv.joint_actions_by_cost`.
        calls: ``table`` as booleans.
        penalty: ``lam * cost + gamma * calls`` of each action.
        answer_now: The row of the all-zero action (answering now ends the episode).
    """

    table: np.ndarray
    calls: np.ndarray
    penalty: np.ndarray
    answer_now: int
    codes: np.ndarray  # each row's code sum_i bit_i 2**i, where misses finds it

    @classmethod
    def of(cls, env: ToolBenchEnv) -> JointActions:
        """The joint actions of ``env``'s pool under its prices and reward weights."""
        weights = env.reward_weights
        table, costs = env.joint_actions_by_cost()
        penalty = weights.lam * costs + weights.gamma * table.sum(axis=1)
        codes = table.astype(np.int64) @ (1 << np.arange(table.shape[1], dtype=np.int64))
        return cls(table, table.astype(bool), penalty,
                   int(np.flatnonzero(table.sum(axis=1) == 0)[0]), codes)

    def misses(self, p_clear: np.ndarray) -> np.ndarray:
        """``P(no called tool clears)`` of every action, for clearing probabilities ``(..., m)``.

        The product over the called tools in index order, built code by code (the codes
        holding tool ``i`` are those below it times ``1 - p_i``): ``2**m`` products where a
        product over every (action, tool) would take ``m 2**m``, and the same floats
        (factors of 1 are exact, so it equals the product over all tools in index order).
        """
        miss = 1.0 - p_clear
        by_code = np.ones((*p_clear.shape[:-1], 1 << miss.shape[-1]))
        for i in range(miss.shape[-1]):
            np.multiply(by_code[..., : 1 << i], miss[..., i, None],
                        out=by_code[..., 1 << i: 2 << i])
        return by_code[..., self.codes]

    def q_values(self, cleared: np.ndarray, miss: np.ndarray, stay: np.ndarray,
                 out: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """Expected return of each action at one (turn, stage), batched over a leading axis.

        ``cleared``: the expected return of the actions' clearing branch (``(N, A)``);
        ``miss``: their ``P(no clear)`` (``(N, A)``, or ``(A,)`` for all); ``stay``: the
        value of the same stage a turn later (``(N,)``). The all-zero action answers now
        and gets only its (zero) penalty. ``out``: two ``(N, A)`` arrays to compute in
        instead of new ones, the result and a scratch (the result may be ``cleared``
        itself); the same floats.
        """
        if out is None:
            q_values = cleared + miss * stay[:, None] - self.penalty
        else:
            q_values, scratch = out
            np.add(cleared, np.multiply(miss, stay[:, None], out=scratch), out=q_values)
            np.subtract(q_values, self.penalty, out=q_values)
        q_values[:, self.answer_now] = -self.penalty[self.answer_now]
        return q_values


def solve_batch(joint: JointActions, caps: np.ndarray, skills: np.ndarray,
                difficulty: np.ndarray, payoff: np.ndarray, first_stage: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """Expectimax over (turn, stage) for ``N`` sets of task parameters at once.

    Args:
        joint: The env's joint actions (:meth:`JointActions.of`).
        caps: The pool's ``(m, skills)`` capabilities.
        skills: ``(N, k)`` skill of each stage; every row has the same ``k`` stages and
            ``k + 1`` turns.
        difficulty: ``(N, k)`` difficulty of each stage.
        payoff: ``(N, m)``: ``alpha P(success) + beta 10 E[F1]`` of an answer composed by
            each tool.
        first_stage: Solve the stages from this one on only (a player already there needs
            no more: a stage's values depend on the later stages alone); the earlier
            stages' values and actions are left at 0.

    Returns:
        ``values`` ``(N, k + 2, k)``, the expected return from (turn, stage) (row ``k + 1``
        is 0), and ``best`` ``(N, k + 1, k)``, the row of ``joint.table`` to play there
        (the first of equals: the cheapest).
    """
    n, n_stages = skills.shape
    horizon = n_stages + 1
    p_clear = np.moveaxis(caps[:, skills], 0, -1) ** (1.0 + 3.0 * difficulty[:, :, None])
    # (N, stages, A): P(no called tool clears stage s), from first_stage on
    misses = np.zeros((n, n_stages, len(joint.table)))
    misses[:, first_stage:] = joint.misses(p_clear[:, first_stage:])
    clears = 1.0 - misses
    # The last stage: the strongest tool that clears it composes the answer.
    strength = np.moveaxis(caps[:, skills[:, -1]], 0, -1) ** (1.0 + difficulty[:, -1:])
    order = np.argsort(-strength, axis=1, kind="stable")  # ties: the lower index, like max()
    # first[j]: tool order[j] is called and clears; before[j]: no stronger called tool did
    first = np.moveaxis(joint.calls.T[order], 1, 0) * np.take_along_axis(
        p_clear[:, -1], order, axis=1).T[:, :, None]  # (m, N, A), the tools in order
    before = np.empty_like(first)
    before[0] = 1.0
    for j in range(1, len(first)):  # cumprod of 1 - first over the tools, in order
        np.multiply(before[j - 1], 1.0 - first[j - 1], out=before[j])
    # E[alpha S + beta Q; cleared]: each row's (A, m) matrix column-major times its payoffs,
    # the BLAS product (and so the floats) of a loop over rows of
    # `(calls[:, order] * p) @ payoff`, whose fancy index gives a column-major matrix
    weighted = np.ascontiguousarray(np.moveaxis(first * before, 1, 0))  # (N, m, A)
    ordered_payoff = np.take_along_axis(payoff, order, axis=1)[:, :, None]
    answered = np.matmul(weighted.transpose(0, 2, 1), ordered_payoff)[:, :, 0]
    values = np.zeros((n, horizon + 1, n_stages))
    best = np.zeros((n, horizon, n_stages), dtype=np.int64)
    rows = np.arange(n)
    for t in reversed(range(horizon)):
        for s in range(first_stage, n_stages):
            cleared = answered if s == n_stages - 1 else (
                clears[:, s] * values[:, t + 1, s + 1, None])
            q_values = joint.q_values(cleared, misses[:, s], values[:, t + 1, s])
            best[:, t, s] = np.argmax(q_values, axis=1)
            values[:, t, s] = q_values[rows, best[:, t, s]]
    return values, best


class ExpectimaxPlanner(TaskPlanner[ToolBenchPlan]):
    """Privileged: the best policy for a player who knows the task but not its luck.

    **What it knows.** The env's generative model (its docstring's, in code: clearing
    probabilities ``cap ** (1 + 3 d)``, the strongest clearing tool composes the answer,
    the answer's recall and spurious-token law), the env's pool, prices, reward weights and
    F1 threshold, and the current task's hidden parameters: each stage's skill and
    difficulty, the reference answer (its length and which tokens repeat) and the topic
    vocabulary. It reads the current turn and stage from the observation.

    **What it does not know.** The task's luck: each tool's draw ``u[t, i]`` at each turn,
    and the composer's draws (each reference token's recall draw, the hallucination rate
    and the spurious tokens).
    It never reads ``ToolTask.luck``, ``recall_luck``, ``hallucination_rate`` or
    ``hallucination_tokens``; changing them changes its actions only through the outcomes
    it observes.

    **What it does.** At the first step of each task it solves, by exact expectimax over
    (turn, stage) and all ``2**m`` joint actions (:func:`plan_toolbench`), the policy that
    maximises the expected episode return under the env's reward weights (Eq. 1: the
    learners' objective, not cost per success), and then plays it. The luck is independent
    per (turn, tool) and each turn moves only the current stage, so (turn, stage) is a
    sufficient state and the plan is exactly optimal for what it knows; whether the last
    turn failed changes nothing ahead. It answers early (the all-zero action) when no call
    is worth its price. It ignores budgets set by wrappers.

    On the 400 evaluation tasks of task seed 0 (default weights) it succeeds on 347 of
    400 (0.8675) at CPS 0.0599 with a mean return of 0.965, against RuleBased's 0.787, 0.0769
    and 0.836 and the hindsight oracle's 0.932, 0.0205 and 1.196; its mean expected return
    over those tasks, 0.9454, equals the mean over 50 fresh draws of each task's luck,
    0.9483 (the difference's standard error 0.0032).

    Args:
        env: A ToolBench env (``cost_envs/ToolBench-v0``, any pool of at most 16 tools),
            possibly wrapped; the planner reads the task of this env.
    """

    env: ToolBenchEnv  # checked by TaskPlanner.__init__
    family = (ToolBenchEnv, "ToolBench's generative model (luck independent per turn and "
              "tool)", "cost_envs/ToolBench-v0")

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if self.env.n_agents > MAX_ORACLE_AGENTS:
            raise ValueError(f"ExpectimaxPlanner: enumerates all 2**m joint actions, so pools "
                             f"of at most {MAX_ORACLE_AGENTS} tools; got m={self.env.n_agents}")
        layout = self.env.observation_layout
        self._turns_left = layout["turns_left"].start
        self._stages_left = layout["stages_left"].start

    def _plan_key(self, task: ToolTask) -> bytes:
        # solved once per set of parameters
        return b"|".join(np.ascontiguousarray(getattr(task, name)).tobytes() for name in
                         ("stage_skill", "stage_difficulty", "reference", "topic")
                         if getattr(task, name) is not None)

    def _solve(self, task: ToolTask) -> ToolBenchPlan:
        return plan_toolbench(self.env, task)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The plan's action at the observed (turn, stage)."""
        plan = self.plan()
        horizon, n_stages = plan.actions.shape[:2]
        turn = horizon - round(float(observation[self._turns_left]) * MAX_TURNS)
        stage = n_stages - round(float(observation[self._stages_left]) * MAX_STAGES)
        if not (0 <= turn < horizon and 0 <= stage < n_stages):
            raise ValueError(f"ExpectimaxPlanner: the observation (turn {turn}, stage {stage})"
                             " is not a decision point of the env's current task")
        return plan.actions[turn, stage].copy()


