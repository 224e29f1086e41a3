"""ToolBench's Bayes reference: a planner that knows the prior over tasks, not the task.

:class:`~agents.planning.toolbench.ExpectimaxPlanner` knows the current task's hidden
parameters. :class:`BayesToolBenchPlanner` knows only what a policy could know: the env's
generative model, its pool, prices, reward weights and F1 threshold, the *prior* over
tasks, and the observations of the episode so far. It keeps a posterior over the hidden
parameters and acts on it.

**What the observation reveals.** At every step: the number of stages ``k``, the turn,
the current stage (its skill and its difficulty, exactly, as a float32), whether the last
turn failed, and the multiset of the skills still to clear. Its recurrent state adds the
difficulties of the stages already cleared. Hidden: the order of the remaining skills,
the difficulties of the stages not reached yet, and the reference answer and topic (its
length ``L``, its repeats, the topic's hits). A call's outcome (cleared or not) and its
cost carry *no* information about them: clearing depends only on the current stage's
skill and difficulty, which are observed, and on luck that is independent of everything;
costs are fixed by the action. So the posterior is the prior conditioned on the observed
parameters alone, and factorises as the prior does:

* *order of the remaining skills*: intermediate skills are i.i.d. uniform over
  ``STAGE_SKILLS`` and the answer skill uniform over ``ANSWER_SKILLS``, so every skill
  sequence consistent with the observation has the same prior probability; the posterior
  is uniform over the distinct orders of the remaining skills whose intermediate stages
  take stage skills and whose last stage takes an answer skill (:func:`skill_orders`).
* *future difficulties*: ``d = clip(delta + N(0, sigma), 0, 1)`` with a shared
  ``delta ~ Beta(2, 2)`` (the env's ``TASK_DIFFICULTY``, ``STAGE_DIFFICULTY_NOISE``), so
  the observed difficulties tell about ``delta`` and so about the rest. Particles are
  tasks drawn by the env's own sampler (``sample_tasks`` of a twin env seeded with
  ``PRIOR_TASK_SEED + seed``); those with ``k`` stages contribute their own difficulties
  of the stages not reached, weighted by ``p(observed | particle's future difficulties)``,
  an integral over ``delta`` computed on a 512-point midpoint grid with the Beta density
  and the clipped normal's density (its atoms at 0 and 1 are masses)
  (:func:`difficulty_weights`). This is importance sampling from the prior: exact as the
  particles grow, apart from the grid.
* *the answer*: nothing about it is observed before the episode ends, so its posterior
  is its prior, the particles' references and topics. The expected Eq. 1 payoff is linear
  in ``(P(success), E[F1])``, so the answer's law is averaged over all particles
  (:class:`AnswerPrior`, exact for the particles: each particle's
  :class:`~agents.planning.toolbench.AnswerModel` tables averaged within each ``L``).

**How it acts (the approximation).** Each hypothesis (a particle's future difficulties
with one skill order) is solved exactly by expectimax over (turn, stage)
(:func:`~agents.planning.toolbench.solve_batch`), with the averaged answer law. The
action is the one of the best *posterior-averaged* action value at the current (turn,
stage), QMDP-style: ``Q(a) = -penalty(a) + (1 - miss(a)) V(t+1, s+1) + miss(a) V(t+1, s)``
with ``V`` the posterior mean of the hypotheses' values; ``miss(a)`` is exact (the
current stage is observed). QMDP assumes the hidden parameters are revealed after this
step, so it ignores the value of information and overrates the future (each hypothesis'
value is that of a player who knows it). Here the ignored information is small: it is
revealed stage by stage whatever the policy does (an action cannot buy it, only reach it
sooner), and at the last stage nothing is hidden but the answer, whose law enters
linearly, so there the policy is the exact Bayes-optimal one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.baselines import Baseline
from agents.planning.toolbench import AnswerModel, JointActions, solve_batch
from agents.seeds import PRIOR_TASK_SEED
from cost_envs.core import MAX_ORACLE_AGENTS
from cost_envs.envs.toolbench import (
    ANSWER_SKILLS,
    MAX_STAGES,
    MAX_TURNS,
    SKILLS,
    STAGE_DIFFICULTY_NOISE,
    STAGE_SKILLS,
    TASK_DIFFICULTY,
    ToolBenchEnv,
    ToolTask,
)

#: Midpoints of the grid over the task difficulty ``delta`` the posterior integrates on.
DELTA_GRID = (np.arange(512) + 0.5) / 512
_PRIOR = DELTA_GRID ** (TASK_DIFFICULTY[0] - 1) * (1 - DELTA_GRID) ** (TASK_DIFFICULTY[1] - 1)
_PRIOR = _PRIOR / _PRIOR.sum()
_SQRT2 = math.sqrt(2.0)
#: ``P(d = 0 | delta)`` and ``P(d = 1 | delta)``: the clipped normal's atoms.
_AT_ZERO = np.array([0.5 * math.erfc(x / (STAGE_DIFFICULTY_NOISE * _SQRT2))
                     for x in DELTA_GRID])
_AT_ONE = np.array([0.5 * math.erfc((1 - x) / (STAGE_DIFFICULTY_NOISE * _SQRT2))
                    for x in DELTA_GRID])
#: Hypotheses solved at once (bounds the ``(chunk, k, 2**m, m)`` temporary).
_CHUNK = 128


class DifficultyLaw:
    """A difficulty law of the family's form with other parameters, on :data:`DELTA_GRID`.

    ``delta ~ Beta(a, b)``, ``d = clip(delta + N(0, noise), 0, 1)``: what a teacher that
    knows the family's form but estimated its parameters believes (issue #38 point 2,
    :mod:`agents.planning.learned_prior`). A planner given none uses the env's own
    (:data:`TASK_DIFFICULTY`, :data:`STAGE_DIFFICULTY_NOISE`, the module's tables, as
    before); this class computes its tables with the same expressions.

    Args:
        a: Beta's first shape, > 0.
        b: Beta's second shape, > 0.
        noise: The stages' normal noise's standard deviation, > 0.
    """

    def __init__(self, a: float, b: float, noise: float) -> None:
        for name, value in (("a", a), ("b", b), ("noise", noise)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"DifficultyLaw: {name} must be finite and > 0, got {value}")
        self.a, self.b, self.noise = float(a), float(b), float(noise)
        prior = DELTA_GRID ** (self.a - 1) * (1 - DELTA_GRID) ** (self.b - 1)
        self.prior = prior / prior.sum()
        self.at_zero = np.array([0.5 * math.erfc(x / (self.noise * _SQRT2))
                                 for x in DELTA_GRID])
        self.at_one = np.array([0.5 * math.erfc((1 - x) / (self.noise * _SQRT2))
                                for x in DELTA_GRID])

    def __repr__(self) -> str:
        return f"DifficultyLaw(a={self.a!r}, b={self.b!r}, noise={self.noise!r})"


def difficulty_likelihood(values: np.ndarray, law: DifficultyLaw | None = None) -> np.ndarray:
    """``p(d | delta)`` on :data:`DELTA_GRID` for each ``d`` in ``values``: shape ``(..., G)``.

    A density inside ``(0, 1)`` (its constant dropped: it cancels wherever it is used),
    the clipped normal's mass at 0 and at 1. ``law``: another :class:`DifficultyLaw` than
    the env's.
    """
    d = np.asarray(values, dtype=np.float64)[..., None]
    if law is not None:
        density = np.exp(-0.5 * ((d - DELTA_GRID) / law.noise) ** 2)
        return np.where(d <= 0.0, law.at_zero, np.where(d >= 1.0, law.at_one, density))
    density = np.exp(-0.5 * ((d - DELTA_GRID) / STAGE_DIFFICULTY_NOISE) ** 2)
    return np.where(d <= 0.0, _AT_ZERO, np.where(d >= 1.0, _AT_ONE, density))


def difficulty_weights(observed: Sequence[float] | np.ndarray, futures: np.ndarray) -> np.ndarray:
    """Posterior weights of prior draws of the unseen difficulties, given the seen ones.

    Args:
        observed: The difficulties observed so far (at least one), ``(s,)``; or a batch of
            such observations, ``(B, s)``.
        futures: ``(N, f)`` prior draws of the ``f`` unseen stages' difficulties.

    Returns:
        ``(N,)`` (or ``(B, N)``) weights summing to 1, proportional to
        ``p(observed | futures[j]) = int p(observed | delta) p(futures[j] | delta) p(delta)
        d delta / p(futures[j])``.
    """
    unseen = np.prod(difficulty_likelihood(futures), axis=1)  # (N, G)
    return _weights(observed, unseen, unseen @ _PRIOR)


def _weights(observed: Sequence[float] | np.ndarray, unseen: np.ndarray,
             evidence: np.ndarray, law: DifficultyLaw | None = None) -> np.ndarray:
    """:func:`difficulty_weights` given what ``observed`` does not change.

    ``unseen``: ``(N, G)``, the draws' likelihoods on the grid; ``evidence``: ``unseen @ _PRIOR``
    (``law.prior`` under another ``law``).
    """
    seen = np.prod(difficulty_likelihood(np.asarray(observed), law), axis=-2)  # (..., G)
    weights = ((seen * (_PRIOR if law is None else law.prior)) @ unseen.T) / evidence
    return weights / weights.sum(axis=-1, keepdims=True)


def skill_orders(remaining: Sequence[int]) -> list[tuple[int, ...]]:
    """The distinct orders of the skills ``remaining`` that a task can have.

    Every stage but the last takes a skill of ``STAGE_SKILLS``, the last one of
    ``ANSWER_SKILLS``; under the prior all such orders are equally likely.
    """
    orders = {order for order in itertools.permutations(sorted(remaining))
              if order[-1] in ANSWER_SKILLS and all(s in STAGE_SKILLS for s in order[:-1])}
    return sorted(orders)


class AnswerPrior:
    """The prior law of a ToolBench answer's outcome, averaged over tasks.

    The outcome of an answer composed with strength ``q`` depends on the task through
    its :class:`~agents.planning.toolbench.AnswerModel`; the Eq. 1 payoff is linear in
    ``(P(success), E[F1])``, so a belief over tasks needs only their average. Tasks of one
    answer length ``L`` share ``spurious_counts`` and ``recall_weights``, so their
    count tables are averaged first; the result is exact for the given tasks.

    Args:
        tasks: Tasks drawn from the prior (their reference and topic only are read).
        threshold: The env's F1 threshold.
    """

    def __init__(self, tasks: Sequence[ToolTask], threshold: float) -> None:
        if not tasks:
            raise ValueError("AnswerPrior: expected at least one task, got none")
        models: dict[tuple, AnswerModel] = {}
        sums: dict[int, list] = {}
        for task in tasks:
            if task.topic is None:
                raise ValueError("AnswerPrior: a task has no topic vocabulary (built "
                                 "without one), so its answer's F1 law is unknown")
            values, counts = np.unique(task.reference, return_counts=True)
            topic = np.asarray(task.topic).tolist()
            key = (len(task.reference),
                   tuple(sorted((c, topic.count(v)) for v, c in zip(
                       values.tolist(), counts.tolist(), strict=True))))
            if key not in models:  # tasks differ in which tokens, rarely in this shape
                models[key] = AnswerModel(task.reference, task.topic, threshold)
            success, f1 = models[key].by_counts()
            total = sums.setdefault(len(task.reference), [0, 0.0, 0.0, models[key]])
            total[0] += 1
            total[1] = total[1] + success
            total[2] = total[2] + f1
        self._groups = [(n / len(tasks), success / n, f1 / n, model)
                        for n, success, f1, model in sums.values()]

    def outcomes(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(P(success), E[F1])`` of answers composed with strengths ``q`` (any shape).

        A strength of 0 (a tool without the skill, which never clears) gives ``(0, 0)``.
        """
        q = np.asarray(q, dtype=np.float64)
        unique, inverse = np.unique(q, return_inverse=True)  # hypotheses share strengths
        success, f1 = np.zeros(unique.shape), np.zeros(unique.shape)
        for share, success_table, f1_table, model in self._groups:
            spurious, recall = model.spurious_counts(unique), model.recall_weights(unique)
            success += share * ((spurious @ success_table) * recall).sum(axis=-1)
            f1 += share * ((spurious @ f1_table) * recall).sum(axis=-1)
        known = unique > 0
        success, f1 = np.where(known, success, 0.0), np.where(known, f1, 0.0)
        return success[inverse].reshape(q.shape), f1[inverse].reshape(q.shape)


@dataclass(frozen=True)
class Hypotheses:
    """What the posterior at a stage before the last needs and no observation changes.

    The hypotheses at ``stage`` of a ``k``-stage task with the skills ``future`` still to
    come after it: each particle's difficulties of the stages after ``stage``, with each
    of the ``orders`` orders of ``future`` (:func:`skill_orders`), particle-major. Their
    weights change with the difficulties seen, and their values at ``stage`` with the
    current stage's; their values after ``stage`` depend on themselves alone.

    Attributes:
        orders: Orders of ``future`` per particle.
        unseen: ``(N, G)``: ``p(d | delta)`` of each particle's unseen difficulties on
            :data:`DELTA_GRID`, multiplied over the stages.
        evidence: ``(N,)``: ``unseen @ _PRIOR``.
        values: ``(N * orders, k + 2, k)``: each hypothesis' expected return from every
            (turn, stage) after ``stage`` (:func:`~agents.planning.toolbench.solve_batch`);
            0 at ``stage`` and before.
    """

    orders: int
    unseen: np.ndarray
    evidence: np.ndarray
    values: np.ndarray


def draw_prior(env: ToolBenchEnv, n: int, seed: int = 0) -> list[ToolTask]:
    """``n`` tasks from ``env``'s own sampler, on a twin env seeded ``PRIOR_TASK_SEED + seed``.

    The twin shares ``env``'s pool, so the tasks are those ``env`` would draw from that
    seed; ``env``'s own task stream is untouched.
    """
    twin = ToolBenchEnv(pool=env.pool, f1_threshold=env.f1_threshold)
    twin.reset(seed=PRIOR_TASK_SEED + seed)
    return twin.sample_tasks(n)


class BayesToolBenchPlanner(Baseline):
    """Not privileged: acts on a posterior over the task given what it has observed.

    See the module docstring for what it knows, the posterior and the approximation
    (QMDP over exactly solved hypotheses). It reads the env's pool, prices, reward weights
    and F1 threshold, never its task. It remembers the difficulties of the stages cleared
    in SB3's recurrent ``state`` (reset by ``episode_start``), so call :meth:`predict`
    and pass its ``state`` back, as :func:`agents.evaluation.rollout` does.

    On the 400 evaluation tasks of task seed 0 (default weights, 1000 particles) it
    succeeds on 0.873 at CPS 0.0604 with a mean return of 0.969, against the full
    planner's 0.868, 0.0599 and 0.965 and RuleBased's 0.787, 0.0769 and 0.836. It cannot
    beat the full planner in expectation; on those tasks' own luck it is 0.004 ahead (paired
    95% interval [-0.003, 0.014], not resolved), and over 4 fresh draws of the luck of each
    of 500 tasks 0.001 behind (standard error 0.002): what the hidden parameters decide, the
    observation nearly all shows. 3000 particles change the mean return on 500 tasks by
    0.00004.

    What no observation moves is solved once per (stages, stage, skills to come) and kept
    (:meth:`hypotheses`: about 1 s for the few dozen that occur), so a step solves the
    current stage alone, with the same floats: 0.86 ms a step over 1,500 episodes on a
    2-core AMD EPYC, against 5.5 solving every hypothesis at every step
    (``benchmarks/results/toolbench_bayes.md``, on the task stream before 2026-12-07),
    which took about 15 ms on a 2-core Intel Xeon (0.5 s to build), where the Python loop
    over hypotheses it replaced took 25.

    Args:
        env: A ToolBench-v0 env (any pool of at most 16 tools), possibly wrapped.
        n_particles: Tasks drawn from the prior (:func:`draw_prior`).
        seed: Seed of that draw (``PRIOR_TASK_SEED + seed``): a fixed seed, a fixed policy.
        prior: The prior's tasks themselves instead of a draw (e.g. a prior concentrated
            on one task); ``n_particles`` and ``seed`` are then unused.
        difficulty: The difficulty law the posterior weighs the particles with, if not the
            env's (:class:`DifficultyLaw`; a learned prior's, with ``prior`` drawn from it).
    """

    name = "bayes-planner"
    env: ToolBenchEnv  # checked by __init__

    def __init__(self, env: gym.Env, n_particles: int = 1000, seed: int = 0,
                 prior: Sequence[ToolTask] | None = None,
                 difficulty: DifficultyLaw | None = None) -> None:
        super().__init__(env)
        if type(self.env) is not ToolBenchEnv:
            raise ValueError(f"BayesToolBenchPlanner: needs ToolBench-v0's generative model "
                             f"and task prior; it applies to cost_envs/ToolBench-v0, not "
                             f"{self.env.env_name}")
        if self.env.n_agents > MAX_ORACLE_AGENTS:
            raise ValueError(f"BayesToolBenchPlanner: enumerates all 2**m joint actions, so "
                             f"pools of at most {MAX_ORACLE_AGENTS} tools; got "
                             f"m={self.env.n_agents}")
        if prior is None:
            if n_particles < 1:
                raise ValueError(f"BayesToolBenchPlanner: n_particles must be >= 1, got "
                                 f"{n_particles}")
            prior = draw_prior(self.env, n_particles, seed)
        self.prior = list(prior)
        self.difficulty = difficulty
        self.answer = AnswerPrior(self.prior, self.env.f1_threshold)
        self._futures = {k: np.array([t.stage_difficulty for t in self.prior if t.n_stages == k])
                         for k in range(2, MAX_STAGES + 1)}
        self._joint = JointActions.of(self.env)
        self._caps = self.env.pool.capabilities
        self._layout = self.env.observation_layout
        self._cache: tuple[Any, tuple[np.ndarray, np.ndarray | None]] | None = None
        self._hypotheses: dict[tuple[int, int, tuple[int, ...]], Hypotheses] = {}
        self._unseen: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Refused: the belief needs the episode's history; use :meth:`predict`."""
        raise ValueError("BayesToolBenchPlanner remembers the difficulties of cleared stages: "
                         "call predict and pass its state back")

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """The action for one observation; ``state``: the difficulties seen, stage by stage."""
        if np.ndim(observation) != 1:
            raise ValueError("BayesToolBenchPlanner follows a single environment; pass one "
                             "observation")
        obs = np.asarray(observation, dtype=np.float32)
        seen = () if state is None or (episode_start is not None and bool(episode_start[0])) \
            else tuple(state)
        _, stage, _ = self.position(obs)
        difficulty = float(obs[self._layout["difficulty"]][0])
        if len(seen) == stage:
            seen = (*seen, difficulty)
        elif len(seen) != stage + 1:
            raise ValueError(f"BayesToolBenchPlanner: at stage {stage} with {len(seen)} stages "
                             "remembered; pass predict's state back at every step")
        return self.decide(obs, seen), seen

    def position(self, obs: np.ndarray) -> tuple[int, int, int]:
        """``(turn, stage, k)`` read from an observation."""
        stages_left = round(float(obs[self._layout["stages_left"]][0]) * MAX_STAGES)
        progress = float(obs[self._layout["progress"]][0])
        n_stages = round(stages_left / (1.0 - progress)) if progress < 1 else 0
        turn = n_stages + 1 - round(float(obs[self._layout["turns_left"]][0]) * MAX_TURNS)
        stage = n_stages - stages_left
        if not (2 <= n_stages <= MAX_STAGES and 0 <= stage < n_stages and
                0 <= turn <= n_stages):
            raise ValueError(f"BayesToolBenchPlanner: the observation (turn {turn}, stage "
                             f"{stage} of {n_stages}) is not a ToolBench decision point")
        return turn, stage, n_stages

    def decide(self, obs: np.ndarray, seen: tuple[float, ...]) -> np.ndarray:
        """The QMDP action at ``obs`` given the difficulties ``seen`` (this stage's last)."""
        turn, stage, n_stages = self.position(obs)
        skill = int(np.argmax(obs[self._layout["task_embedding"]]))
        remaining = np.rint(obs[self._layout["remaining_skills"]] * MAX_STAGES).astype(int)
        remaining[skill] -= 1
        if remaining.min() < 0:
            raise ValueError(f"BayesToolBenchPlanner: the current skill {SKILLS[skill]} is not "
                             "among the remaining skills of the observation")
        future = tuple(np.repeat(np.arange(len(SKILLS)), remaining).tolist())
        key = (n_stages, stage, skill, future, seen)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self.posterior_values(n_stages, stage, skill, future, seen))
        values, best = self._cache[1]
        if best is not None:  # the last stage: nothing hidden but the answer, solved exactly
            return self._joint.table[int(best[turn])].copy()
        miss = self._joint.misses(self._caps[:, skill] ** (1.0 + 3.0 * seen[-1]))
        cleared = (1.0 - miss) * values[turn + 1, stage + 1]
        q_values = self._joint.q_values(cleared[None], miss[None], values[turn + 1, None, stage])
        return self._joint.table[int(np.argmax(q_values[0]))].copy()

    def posterior_values(self, n_stages: int, stage: int, skill: int,
                         future: tuple[int, ...], seen: tuple[float, ...]
                         ) -> tuple[np.ndarray, np.ndarray | None]:
        """Posterior mean of the hypotheses' values ``(k + 2, k)`` from ``stage`` on (0 before).

        At the last stage (nothing hidden but the answer) the values are exact and come
        with the best action's row of the joint-action table at each turn; else ``None``.

        Before the last stage, what the observation does not move is solved once per
        ``(k, stage, future)`` (:meth:`hypotheses`); a call weighs the particles by
        ``seen`` and solves the current stage alone, with the floats of a solve of every
        stage from ``stage`` on (each of the values depends only on later ones, elementwise).
        """
        if len(future) != n_stages - 1 - stage:
            raise ValueError(f"BayesToolBenchPlanner: {len(future)} skills remain after stage "
                             f"{stage} of a {n_stages}-stage task")
        if not future:
            skills = np.zeros((1, n_stages), dtype=np.int64)
            skills[:, stage] = skill
            difficulty = np.zeros((1, n_stages))
            difficulty[:, stage] = seen[-1]
            payoff = self._payoff(skills, difficulty)
            values, best = solve_batch(self._joint, self._caps, skills, difficulty, payoff,
                                       first_stage=stage)
            return values[0], best[0, :, stage]
        hypotheses = self.hypotheses(n_stages, stage, future)
        weights = _weights(seen, hypotheses.unseen, hypotheses.evidence, self.difficulty)
        # The current stage: the same skill and difficulty in every hypothesis, so one row
        # of P(no clear), broadcast (solve_batch's products, float for float).
        exponent = 1.0 + 3.0 * np.array([seen[-1]])
        miss = self._joint.misses(self._caps[:, skill] ** exponent)
        clears = 1.0 - miss
        values = hypotheses.values.copy()
        q_values, scratch = np.empty((2, len(values), len(miss)))
        for t in reversed(range(n_stages + 1)):
            cleared = np.multiply(clears, values[:, t + 1, stage + 1, None], out=q_values)
            values[:, t, stage] = self._joint.q_values(
                cleared, miss, values[:, t + 1, stage], out=(q_values, scratch)).max(axis=1)
        mean = np.zeros((n_stages + 2, n_stages))
        share = np.repeat(weights, hypotheses.orders) / hypotheses.orders
        for lo in range(0, len(values), _CHUNK):  # the sums of the solve's chunks
            mean += np.tensordot(share[lo:lo + _CHUNK], values[lo:lo + _CHUNK], axes=1)
        return mean, None

    def hypotheses(self, n_stages: int, stage: int, future: tuple[int, ...]) -> Hypotheses:
        """The :class:`Hypotheses` at ``stage`` of a ``k``-stage task with ``future`` to come.

        Computed at the first call, then kept: a few dozen keys occur, each at many steps.
        """
        key = (n_stages, stage, future)
        if key not in self._hypotheses:
            self._hypotheses[key] = self._solve_hypotheses(n_stages, stage, future)
        return self._hypotheses[key]

    def _solve_hypotheses(self, n_stages: int, stage: int, future: tuple[int, ...]
                          ) -> Hypotheses:
        orders = skill_orders(future)
        if not orders:
            raise ValueError(f"BayesToolBenchPlanner: no task has the remaining skills "
                             f"{[SKILLS[s] for s in future]} (the last must be an answer skill)")
        particles = self._futures[n_stages]
        if len(particles) == 0:
            raise ValueError(f"BayesToolBenchPlanner: the prior has no {n_stages}-stage "
                             "task to draw the unseen difficulties from")
        futures = particles[:, stage + 1:]
        if (n_stages, stage) not in self._unseen:
            unseen = np.prod(difficulty_likelihood(futures, self.difficulty), axis=1)  # (N, G)
            prior = _PRIOR if self.difficulty is None else self.difficulty.prior
            self._unseen[n_stages, stage] = unseen, unseen @ prior
        unseen, evidence = self._unseen[n_stages, stage]
        n, m = len(futures), len(orders)
        skills = np.zeros((n * m, n_stages), dtype=np.int64)  # the current stage's: unread
        skills[:, stage + 1:] = np.tile(np.array(orders, dtype=np.int64).reshape(m, -1), (n, 1))
        difficulty = np.zeros((n * m, n_stages))
        difficulty[:, stage + 1:] = np.repeat(futures, m, axis=0)
        payoff = self._payoff(skills, difficulty)
        values = np.concatenate([
            solve_batch(self._joint, self._caps, skills[lo:lo + _CHUNK],
                        difficulty[lo:lo + _CHUNK], payoff[lo:lo + _CHUNK],
                        first_stage=stage + 1)[0]
            for lo in range(0, n * m, _CHUNK)])
        return Hypotheses(m, unseen, evidence, values)

    def _payoff(self, skills: np.ndarray, difficulty: np.ndarray) -> np.ndarray:
        """``alpha P(success) + beta 10 E[F1]`` of an answer by each tool, per hypothesis."""
        strength = self._caps[:, skills[:, -1]].T ** (1.0 + difficulty[:, -1:])
        success, f1 = self.answer.outcomes(strength)
        rw = self.env.reward_weights
        return rw.alpha * success + rw.beta * 10.0 * f1
