"""A learned prior for ToolBench's Bayes reference: the family's form, parameters fitted.

:class:`~agents.planning.toolbench_bayes.BayesToolBenchPlanner` knows ToolBench-v0's
generative model and its parameters (the pool's capabilities and prices, the task prior).
A user whose pool fits the family knows the *form* (the env's code) but not the numbers.
This module estimates the numbers from logged episodes, using only what an episode shows
(the observations, the ``terminated`` flag and the ``info`` contract's ``cost``, ``flops``
and ``calls``; never the task), and builds the Bayes reference on them (issue #38
point 2). The fits use SciPy (installed with scikit-learn, the ``agents`` extra),
imported when a fit runs.

**The log** (:class:`ToolBenchLog`): each real step's observation before it, the tools it
called, its cost and FLOPs, and whether it ended the episode, episode by episode in order.
:func:`log_random` plays the uniform random allocator (each tool called with probability
1/2, :class:`~agents.baselines.RandomAllocator`'s law) on the batched env for a number of
steps; :func:`log_single` plays it on a single env (the tests replay tasks with it).

**What is fitted** (:func:`fit`), each by maximum likelihood:

* *the stage count* (2, 3, 4): its frequencies among the episodes (each shows ``k`` at
  reset);
* *the skills*: the first observation holds the multiset of every stage's skill; the last
  stage's (an answer skill) is writing if writing is there, else reasoning (the family's
  form leaves no other choice), the rest are the intermediate stages'; their frequencies;
* *the difficulty law* ``delta ~ Beta(a, b)``, ``d = clip(delta + N(0, sigma), 0, 1)``:
  each episode shows the difficulties of the stages it reached, a prefix; the likelihood
  of the prefix integrates ``delta`` out (a 256-point midpoint grid, the clipped normal's
  atoms at 0 and 1 as masses). Whether a stage is reached depends on the difficulties
  already shown and on luck, never on the unseen ones, so the unseen ones are missing at
  random and the likelihood of what was seen is the right one (a mean of the seen
  difficulties would be biased towards the easy stages that are reached more often);
* *the capabilities* ``cap[i, skill]``: a step at a stage of skill ``s`` and difficulty
  ``d`` (observed) clears it with probability ``1 - prod_{i called} (1 - cap[i, s] **
  (1 + 3 d))``; whether it cleared is seen in the next observation (the stage advanced)
  or, at the last stage, in the episode ending; a step at an episode's last turn is left
  out (it ends the episode cleared or not) and so is a step the log cut short. Steps
  that call no tool carry nothing. Bounded in ``[0, 1]``;
* *prices and FLOPs*: ``info["cost"]`` and ``info["flops"]`` are the called tools' sums,
  so least squares on ``calls`` recovers them exactly (to rounding).

**Not fitted: taken as the family's form.** The answer's law (the answer length 8-20,
the vocabulary, the recall ``0.3 + 0.7 q`` with ``q = cap ** (1 + d)``, the
hallucination rate ``U(0, 1)``): an episode shows it only through the F1 of its answer
(``info["quality"]``) at its end, a mixture over unseen answers and tokens that this
module does not fit. The F1 threshold and the Eq. 1 weights are the user's objective,
not the pool's, and are taken as set. The tools' names and roles are the user's.

**The teacher** (:meth:`FittedToolBench.teacher`): a :class:`BayesToolBenchPlanner` on a
twin env with the fitted pool (capabilities, prices, FLOPs), whose particles are drawn
from the fitted prior (:meth:`FittedToolBench.draw`: the fitted stage counts, skills and
difficulty law, the answer's law of the form) and whose posterior weighs them with the
fitted difficulty law (:class:`~agents.planning.toolbench_bayes.DifficultyLaw`). It reads
the real env's observations only, so it labels the student's states as the true-prior
teacher does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np

from agents.planning.toolbench_bayes import BayesToolBenchPlanner, DifficultyLaw, draw_prior
from agents.seeds import PRIOR_TASK_SEED
from cost_envs.envs.toolbench import (
    ANSWER_SKILLS,
    MAX_STAGES,
    MAX_TURNS,
    SKILLS,
    STAGE_COUNTS,
    STAGE_DIFFICULTY_NOISE,
    STAGE_SKILLS,
    TASK_DIFFICULTY,
    ToolBenchEnv,
    ToolTask,
)
from cost_envs.pool import AgentPool, AgentSpec

#: ``ToolBenchEnv.observation_layout``'s slots, read from the observation.
_LAYOUT = ToolBenchEnv.observation_layout
#: Midpoints of the grid the difficulty likelihood integrates ``delta`` on.
FIT_GRID = (np.arange(256) + 0.5) / 256
_LOG_GRID, _LOG_ONE_MINUS = np.log(FIT_GRID), np.log1p(-FIT_GRID)
_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)
#: Episodes whose likelihood is summed at once (bounds the ``(chunk, grid)`` temporaries).
_EPISODE_CHUNK = 16_384
#: Capabilities are fitted in ``[0, 1 - _EDGE]`` (a capability of 1 makes a miss impossible).
_EDGE = 1e-9


@dataclass(frozen=True)
class EpisodeLog:
    """Logged steps of episodes of any env: what an episode shows, nothing hidden.

    Steps of one episode are contiguous and in order. Attributes (``n`` steps, ``m``
    agents): ``obs`` ``(n, width)`` float32, the observation before the step; ``calls``
    ``(n, m)`` int8, ``info["calls"]``; ``cost``, ``flops`` ``(n,)``, ``info``'s;
    ``terminated`` ``(n,)`` bool; ``episode`` ``(n,)`` int64, the episode's index.
    A family's log (:class:`ToolBenchLog`, ``learned_prior_flight.FlightLog``) sets
    :attr:`width`, its observation's.
    """

    obs: np.ndarray
    calls: np.ndarray
    cost: np.ndarray
    flops: np.ndarray
    terminated: np.ndarray
    episode: np.ndarray
    #: The observation's width (each family's log sets its env's).
    width: ClassVar[int] = 1

    def __post_init__(self) -> None:
        n, label = len(self.obs), type(self).__name__
        if self.obs.ndim != 2 or self.obs.shape[1] < self.width:
            raise ValueError(f"{label}: obs: expected (n, {self.width}), got {self.obs.shape}")
        for name in ("calls", "cost", "flops", "terminated", "episode"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{label}: {name}: expected {n} rows, got "
                                 f"{len(getattr(self, name))}")
        if n and np.any(np.diff(self.episode) < 0):
            raise ValueError(f"{label}: episode: expected the steps of each episode "
                             "together and in order")

    @property
    def steps(self) -> int:
        """Logged steps."""
        return len(self.obs)

    def head(self: _Log, steps: int) -> _Log:
        """The first ``steps`` steps (a smaller log of the same episodes)."""
        return type(self)(*(getattr(self, name)[:steps] for name in
                            ("obs", "calls", "cost", "flops", "terminated", "episode")))


_Log = TypeVar("_Log", bound=EpisodeLog)


@dataclass(frozen=True)
class ToolBenchLog(EpisodeLog):
    """Logged steps of ToolBench episodes (:class:`EpisodeLog`, observations of 17 slots)."""

    width: ClassVar[int] = 17


def log_random(env_kwargs: dict[str, Any] | None, steps: int, seed: int,
               n_envs: int = 64, env_id: str = "cost_envs/ToolBench-v0",
               log_type: type[EpisodeLog] = ToolBenchLog) -> Any:
    """``steps`` steps of the uniform random allocator on ``env_id``'s batched env.

    The env is ``gym.make_vec(env_id, n_envs, vectorization_mode="vector_entry_point",
    **env_kwargs)`` (ToolBench-v0 by default), reset with ``seed``; the actions come from
    ``np.random.default_rng(seed)`` (each agent with probability 1/2). Returns a
    ``log_type`` (:class:`ToolBenchLog` by default). Autoreset steps
    (``NEXT_STEP``: they ignore the action) are not steps. Each sub-env's steps are kept
    in order, sub-env after sub-env; the log stops after ``steps`` steps in all (the last
    episodes cut short).
    """
    venv = gym.make_vec(env_id, num_envs=n_envs,
                        vectorization_mode="vector_entry_point", **(env_kwargs or {}))
    rng = np.random.default_rng(seed)
    obs, _ = venv.reset(seed=seed)
    m = int(venv.single_action_space.shape[0])  # type: ignore[index]
    rows: list[tuple[np.ndarray, ...]] = []
    done = 0
    while done < steps:
        action = rng.integers(0, 2, (n_envs, m), dtype=np.int8)
        following, _, terminated, truncated, info = venv.step(action)
        # autoreset steps have no info (none at all when every sub-env resets)
        real = np.asarray(info.get("_cost", np.zeros(n_envs, dtype=bool)), dtype=bool)
        rows.append((obs, info.get("calls", np.zeros((n_envs, m), dtype=np.int8)),
                     info.get("cost", np.zeros(n_envs)), info.get("flops", np.zeros(n_envs)),
                     np.asarray(terminated, dtype=bool),
                     np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool),
                     real))
        done += int(real.sum())
        obs = following
    venv.close()
    stacked = [np.stack(column, axis=1) for column in zip(*rows, strict=True)]  # (E, T, ...)
    obs_all, calls, cost, flops, terminated, ended, real = stacked
    # episode index per sub-env: a new episode starts after each step that ended one
    starts = np.concatenate([np.zeros((n_envs, 1), dtype=np.int64),
                             np.cumsum(ended[:, :-1] & real[:, :-1], axis=1)], axis=1)
    episode = starts + (np.arange(n_envs) * (terminated.shape[1] + 1))[:, None]
    keep = real.reshape(-1)
    # the first `steps` real steps in time order decide what is kept: cut at the step count
    order = np.argsort(np.tile(np.arange(real.shape[1]), n_envs), kind="stable")
    in_time = keep[order]
    cut = order[in_time][:steps]
    mask = np.zeros(keep.shape, dtype=bool)
    mask[cut] = True
    log = log_type(obs_all.reshape(-1, obs_all.shape[-1])[mask].astype(np.float32),
                       calls.reshape(-1, m)[mask].astype(np.int8),
                       cost.reshape(-1)[mask].astype(np.float64),
                       flops.reshape(-1)[mask].astype(np.float64),
                       terminated.reshape(-1)[mask], episode.reshape(-1)[mask])
    return log


def log_single(env: gym.Env, episodes: int, seed: int,
               tasks: list[ToolTask] | None = None) -> ToolBenchLog:
    """``episodes`` episodes of the uniform random allocator on a single ToolBench env.

    The env's task stream starts at ``seed`` (or plays ``tasks``, replayed with
    ``reset(options={"task": ...})``); the actions come from
    ``np.random.default_rng(seed)``, one draw per step. Only ``reset``'s and ``step``'s
    returns are read.
    """
    rng = np.random.default_rng(seed)
    m = int(env.action_space.shape[0])  # type: ignore[index]
    columns: list[list[Any]] = [[], [], [], [], [], []]
    for index in range(episodes):
        if tasks is not None:
            obs, _ = env.reset(seed=seed if index == 0 else None,
                               options={"task": tasks[index]})
        else:
            obs, _ = env.reset(seed=seed if index == 0 else None)
        ended = False
        while not ended:
            action = rng.integers(0, 2, m, dtype=np.int8)
            following, _, terminated, truncated, info = env.step(action)
            for column, value in zip(columns, (obs, info["calls"], info["cost"],
                                               info["flops"], terminated, index), strict=True):
                column.append(value)
            ended = bool(terminated or truncated)
            obs = following
    return ToolBenchLog(np.array(columns[0], dtype=np.float32),
                        np.array(columns[1], dtype=np.int8), np.array(columns[2], dtype=float),
                        np.array(columns[3], dtype=float), np.array(columns[4], dtype=bool),
                        np.array(columns[5], dtype=np.int64))


@dataclass(frozen=True, eq=False)
class FittedToolBench:
    """ToolBench's parameters: fitted (:func:`fit`) or the env's own (:func:`true_parameters`).

    Compared by identity (it holds arrays); compare the attributes.

    Attributes:
        stage_counts: ``P(k = 2, 3, 4)``.
        stage_skills: Each intermediate stage's skill law over ``STAGE_SKILLS``.
        answer_skills: The last stage's skill law over ``ANSWER_SKILLS``.
        difficulty: ``(a, b, sigma)``: ``delta ~ Beta(a, b)``, ``d = clip(delta +
            N(0, sigma), 0, 1)``.
        capabilities: ``(m, 6)``: each tool's capability per skill.
        costs: ``(m,)`` price per call.
        flops: ``(m,)`` FLOPs per call.
        names: The tools' names (the user's).
        roles: The tools' roles (the user's).
        episodes: Episodes the fit saw (0 for the true parameters).
        steps: Steps the fit saw.
        clears: Steps whose outcome (cleared or not) the capabilities were fitted on.
    """

    stage_counts: tuple[float, ...]
    stage_skills: tuple[float, ...]
    answer_skills: tuple[float, ...]
    difficulty: tuple[float, float, float]
    capabilities: np.ndarray
    costs: np.ndarray
    flops: np.ndarray
    names: tuple[str, ...]
    roles: tuple[str, ...]
    episodes: int = 0
    steps: int = 0
    clears: int = 0

    def pool(self) -> AgentPool:
        """The fitted pool: the tools' names and roles with the fitted numbers."""
        return AgentPool(tuple(
            AgentSpec(name, role, float(cost), float(flops), tuple(float(c) for c in caps))
            for name, role, cost, flops, caps in zip(
                self.names, self.roles, self.costs, self.flops, self.capabilities,
                strict=True)), SKILLS)

    def env(self, like: gym.Env) -> ToolBenchEnv:
        """A ToolBench env with the fitted pool and ``like``'s F1 threshold and weights."""
        base = like.unwrapped
        assert isinstance(base, ToolBenchEnv)
        return ToolBenchEnv(pool=self.pool(), f1_threshold=base.f1_threshold,
                            reward_weights=base.reward_weights)

    def law(self) -> DifficultyLaw:
        """The difficulty law as the Bayes reference weighs with it."""
        return DifficultyLaw(*self.difficulty)

    def draw(self, env: ToolBenchEnv, n: int, seed: int = 0) -> list[ToolTask]:
        """``n`` tasks of the fitted prior: the particles of :meth:`teacher`.

        Stage counts, skills and difficulties from the fitted laws
        (``np.random.default_rng(PRIOR_TASK_SEED + seed)``); the answer (reference, topic)
        and the luck from ``env``'s own sampler on the same seed (:func:`draw_prior`: the
        answer's law is the family's form, not fitted).
        """
        rng = np.random.default_rng(PRIOR_TASK_SEED + seed)
        base = draw_prior(env, n, seed)
        counts = 2 + rng.choice(len(self.stage_counts), size=n, p=_normal(self.stage_counts))
        skills = np.asarray(STAGE_SKILLS).take(rng.choice(
            len(STAGE_SKILLS), size=(n, MAX_STAGES), p=_normal(self.stage_skills)))
        answers = np.asarray(ANSWER_SKILLS).take(rng.choice(
            len(ANSWER_SKILLS), size=n, p=_normal(self.answer_skills)))
        a, b, sigma = self.difficulty
        delta = rng.beta(a, b, size=n)
        difficulty = np.clip(delta[:, None] + sigma * rng.standard_normal((n, MAX_STAGES)),
                             0.0, 1.0)
        tasks = []
        for j, task in enumerate(base):
            k = int(counts[j])
            skill = skills[j, :k].copy()
            skill[-1] = answers[j]
            turns = k + 1
            tasks.append(replace(
                task, stage_skill=skill, stage_difficulty=difficulty[j, :k].copy(),
                luck=rng.random((turns, env.n_agents), dtype=np.float32),
                recall_luck=np.broadcast_to(task.recall_luck[0], (turns, len(task.reference))),
                hallucination_rate=np.broadcast_to(task.hallucination_rate[0], (turns,)),
                hallucination_tokens=np.broadcast_to(task.hallucination_tokens[0],
                                                     (turns, task.hallucination_tokens.shape[1]))))
        return tasks

    def teacher(self, env: gym.Env, n_particles: int = 1000, seed: int = 0
                ) -> BayesToolBenchPlanner:
        """The Bayes reference of the fitted parameters, to label ``env``'s observations.

        Built on :meth:`env` (the fitted pool; ``env``'s threshold and weights) with
        ``n_particles`` particles of :meth:`draw` and the fitted :meth:`law`; it reads
        observations only, so it follows episodes of ``env`` itself.
        """
        twin = self.env(env)
        return BayesToolBenchPlanner(twin, prior=self.draw(twin, n_particles, seed),
                                     difficulty=self.law())


def _normal(p: tuple[float, ...]) -> np.ndarray:
    array = np.asarray(p, dtype=np.float64)
    return array / array.sum()


def true_parameters(env: gym.Env) -> FittedToolBench:
    """The parameters ``env`` draws its tasks with (the env's constants and pool)."""
    base = env.unwrapped
    assert isinstance(base, ToolBenchEnv)
    pool = base.pool
    return FittedToolBench(
        tuple(STAGE_COUNTS), tuple([1.0 / len(STAGE_SKILLS)] * len(STAGE_SKILLS)),
        tuple([1.0 / len(ANSWER_SKILLS)] * len(ANSWER_SKILLS)),
        (TASK_DIFFICULTY[0], TASK_DIFFICULTY[1], STAGE_DIFFICULTY_NOISE),
        np.array(pool.capabilities), np.array(pool.costs), np.array(pool.flops),
        tuple(a.name for a in pool.agents), tuple(a.role for a in pool.agents))


# ------------------------------------------------------------------ reading the log
@dataclass(frozen=True)
class _Positions:
    """What each logged step's observation says: turn, stage, stage count, skill, difficulty."""

    turn: np.ndarray
    stage: np.ndarray
    n_stages: np.ndarray
    skill: np.ndarray
    difficulty: np.ndarray


def positions(obs: np.ndarray) -> _Positions:
    """Read ``(turn, stage, k, skill, difficulty)`` off observations ``(n, 17)``.

    As :meth:`BayesToolBenchPlanner.position` reads them, for many at once.
    """
    stages_left = np.rint(obs[:, _LAYOUT["stages_left"]][:, 0].astype(np.float64) * MAX_STAGES)
    progress = obs[:, _LAYOUT["progress"]][:, 0].astype(np.float64)
    n_stages = np.rint(stages_left / np.maximum(1.0 - progress, 1e-9)).astype(np.int64)
    turns_left = np.rint(obs[:, _LAYOUT["turns_left"]][:, 0].astype(np.float64) * MAX_TURNS)
    turn = (n_stages + 1 - turns_left).astype(np.int64)
    stage = (n_stages - stages_left).astype(np.int64)
    skill = np.argmax(obs[:, _LAYOUT["task_embedding"]], axis=1)
    difficulty = obs[:, _LAYOUT["difficulty"]][:, 0].astype(np.float64)
    return _Positions(turn, stage, n_stages, skill, difficulty)


def clear_outcomes(log: ToolBenchLog, at: _Positions) -> tuple[np.ndarray, np.ndarray]:
    """Which steps' outcome the log shows, and whether each of them cleared its stage.

    A step that calls a tool, before its episode's last turn: it cleared iff the next
    step of the episode is at a later stage, or (the last stage) the episode ended with
    it. A step at the last turn ends the episode either way, so it is left out; so is a
    step whose episode the log cut right after it.
    """
    n = log.steps
    same_next = np.zeros(n, dtype=bool)
    same_next[:-1] = log.episode[1:] == log.episode[:-1]
    next_stage = np.full(n, -1)
    next_stage[:-1] = at.stage[1:]
    called = log.calls.any(axis=1)
    before_last = at.turn < at.n_stages
    known = called & before_last & (log.terminated | same_next)
    cleared = np.where(log.terminated, at.stage == at.n_stages - 1,
                       same_next & (next_stage > at.stage))
    return known, cleared & known


# ------------------------------------------------------------------ the fits
def fit_stage_counts(log: ToolBenchLog, at: _Positions, first: np.ndarray) -> tuple[float, ...]:
    """``P(k)`` for k = 2, 3, 4: the frequencies of the episodes' stage counts."""
    counts = np.bincount(at.n_stages[first] - 2, minlength=MAX_STAGES - 1)
    return tuple((counts / counts.sum()).tolist())


def fit_skills(log: ToolBenchLog, at: _Positions, first: np.ndarray
               ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The intermediate and last stages' skill laws, from each episode's first observation."""
    remaining = np.rint(log.obs[first][:, _LAYOUT["remaining_skills"]].astype(np.float64)
                        * MAX_STAGES).astype(np.int64)
    writing = ANSWER_SKILLS[1]
    answer = np.where(remaining[:, writing] > 0, writing, ANSWER_SKILLS[0])
    middle = remaining.copy()
    middle[np.arange(len(answer)), answer] -= 1
    stage = middle[:, list(STAGE_SKILLS)].sum(axis=0).astype(np.float64)
    answers = np.array([(answer == s).sum() for s in ANSWER_SKILLS], dtype=np.float64)
    return tuple((stage / stage.sum()).tolist()), tuple((answers / answers.sum()).tolist())


def seen_difficulties(log: ToolBenchLog, at: _Positions) -> tuple[np.ndarray, np.ndarray]:
    """The difficulties of the stages each episode reached: ``(values, episode)``.

    One entry per (episode, stage reached), in the log's order; ``episode`` numbers the
    log's episodes 0, 1, ... (each one's entries are a prefix of its stages).
    """
    new_stage = np.ones(log.steps, dtype=bool)
    new_stage[1:] = (log.episode[1:] != log.episode[:-1]) | (at.stage[1:] != at.stage[:-1])
    _, episode = np.unique(log.episode[new_stage], return_inverse=True)
    return at.difficulty[new_stage], episode.reshape(-1)


def _episode_stats(values: np.ndarray, episode: np.ndarray) -> np.ndarray:
    """Per episode: interior count, sum, sum of squares, atoms at 0 and at 1: ``(E, 5)``."""
    inside = (values > 0.0) & (values < 1.0)
    n = int(episode.max()) + 1 if len(episode) else 0
    kept = np.where(inside, values, 0.0)
    return np.stack([np.bincount(episode, weights=w, minlength=n) for w in (
        inside.astype(np.float64), kept, kept ** 2, (values <= 0.0).astype(np.float64),
        (values >= 1.0).astype(np.float64))], axis=1)


def difficulty_log_likelihood(params: np.ndarray, stats: np.ndarray
                              ) -> tuple[float, np.ndarray]:
    """The log likelihood of the episodes' seen difficulties and its gradient.

    ``params``: ``(log a, log b, log sigma)``; ``stats``: :func:`_episode_stats`. ``delta``
    is integrated on :data:`FIT_GRID` with the Beta density normalised on it. An episode's
    log joint density at each grid point is linear in its statistics ``(1, r, s2, s1, n0,
    n1)`` (interior count, sum of squares, sum, atoms at 0 and 1), so it is one matrix
    product, and so is the gradient (the posterior-weighted derivatives).
    """
    from scipy.special import log_ndtr  # type: ignore[import-untyped]  # no stubs

    a, b, sigma = np.exp(params)
    grid = FIT_GRID
    log_prior = (a - 1) * _LOG_GRID + (b - 1) * _LOG_ONE_MINUS
    top = log_prior.max()
    log_prior = log_prior - (top + np.log(np.exp(log_prior - top).sum()))
    prior = np.exp(log_prior)
    low, high = -grid / sigma, (grid - 1.0) / sigma  # the atoms: Phi(low) at 0, Phi(high) at 1
    log_low, log_high = log_ndtr(low), log_ndtr(high)
    y = np.stack([log_prior, -(np.log(sigma) + _HALF_LOG_2PI) - grid ** 2 / (2 * sigma ** 2),
                  np.full_like(grid, -1.0 / (2 * sigma ** 2)), grid / sigma ** 2,
                  log_low, log_high])  # (6, G)
    zeros = np.zeros_like(grid)
    # d y / d (log a, log b, log sigma); d log Phi(x) / d log sigma = -x phi(x) / Phi(x)
    dy = np.stack([
        [a * (_LOG_GRID - prior @ _LOG_GRID), zeros, zeros, zeros, zeros, zeros],
        [b * (_LOG_ONE_MINUS - prior @ _LOG_ONE_MINUS), zeros, zeros, zeros, zeros, zeros],
        [zeros, -1.0 + grid ** 2 / sigma ** 2, np.full_like(grid, 1.0 / sigma ** 2),
         -2.0 * grid / sigma ** 2,
         -low * np.exp(-0.5 * low ** 2 - _HALF_LOG_2PI - log_low),
         -high * np.exp(-0.5 * high ** 2 - _HALF_LOG_2PI - log_high)]])  # (3, 6, G)
    total, grad = 0.0, np.zeros(3)
    for lo in range(0, len(stats), _EPISODE_CHUNK):
        r, s1, s2, n0, n1 = stats[lo:lo + _EPISODE_CHUNK].T
        x = np.stack([np.ones_like(r), r, s2, s1, n0, n1], axis=1)  # (E, 6)
        joint = x @ y  # (E, G)
        top_e = joint.max(axis=1, keepdims=True)
        post = np.exp(joint - top_e)
        mass = post.sum(axis=1, keepdims=True)
        total += float((top_e + np.log(mass)).sum())
        post /= mass  # each episode's posterior over delta
        weighted = (post @ dy.reshape(-1, len(grid)).T).reshape(len(x), 3, 6)
        grad += np.einsum("ef,ekf->k", x, weighted)
    return total, grad


def fit_difficulty(values: np.ndarray, episode: np.ndarray) -> tuple[float, float, float]:
    """``(a, b, sigma)`` maximising :func:`difficulty_log_likelihood` (L-BFGS-B).

    ``values``, ``episode``: :func:`seen_difficulties`.
    """
    from scipy.optimize import minimize  # type: ignore[import-untyped]  # no stubs

    stats = _episode_stats(values, episode)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = difficulty_log_likelihood(x, stats)
        return -value / len(stats), -grad / len(stats)

    result = minimize(objective, np.log([1.0, 1.0, 0.2]), jac=True, method="L-BFGS-B",
                      bounds=[(np.log(0.05), np.log(50.0))] * 2 + [(np.log(0.005), np.log(2.0))])
    a, b, sigma = np.exp(result.x)
    return float(a), float(b), float(sigma)


def clear_log_likelihood(caps: np.ndarray, calls: np.ndarray, exponent: np.ndarray,
                         cleared: np.ndarray) -> tuple[float, np.ndarray]:
    """Log likelihood of the steps' clears at one skill, and its gradient in ``caps``.

    A step clears with probability ``1 - prod_{i called} (1 - caps[i] ** exponent)``.
    """
    power = caps[None, :] ** exponent[:, None]  # (n, m)
    miss = np.clip(1.0 - power, 1e-300, 1.0)
    log_miss = (calls * np.log(miss)).sum(axis=1)  # log P(no clear)
    log_hit = np.log(np.clip(-np.expm1(log_miss), 1e-300, 1.0))
    total = float(np.where(cleared, log_hit, log_miss).sum())
    # d log_miss / d caps_i = -calls_i * e * caps_i^(e-1) / miss_i
    safe = np.where(caps > 0, caps, 1.0)[None, :]
    dpower = exponent[:, None] * np.where(caps[None, :] > 0, power / safe,
                                          (exponent[:, None] == 1.0).astype(float))
    dlog_miss = -calls * dpower / miss
    odds = np.exp(log_miss - log_hit)  # M / (1 - M)
    weight = np.where(cleared, -odds, 1.0)
    return total, (weight[:, None] * dlog_miss).sum(axis=0)


def fit_capabilities(calls: np.ndarray, skill: np.ndarray, difficulty: np.ndarray,
                     cleared: np.ndarray, n_skills: int = len(SKILLS)) -> np.ndarray:
    """``(m, n_skills)`` capabilities maximising :func:`clear_log_likelihood`, skill by skill.

    A skill no logged step needed keeps capabilities of 0 (nothing to fit them on).
    """
    from scipy.optimize import minimize

    m = calls.shape[1]
    caps = np.zeros((m, n_skills))
    exponent = 1.0 + 3.0 * difficulty
    for s in range(n_skills):
        rows = skill == s
        if not rows.any():
            continue
        x, e, y = calls[rows].astype(np.float64), exponent[rows], cleared[rows]

        def objective(c: np.ndarray, x: np.ndarray = x, e: np.ndarray = e,
                      y: np.ndarray = y) -> tuple[float, np.ndarray]:
            value, grad = clear_log_likelihood(c, x, e, y)
            return -value / len(y), -grad / len(y)

        result = minimize(objective, np.full(m, 0.5), jac=True, method="L-BFGS-B",
                          bounds=[(0.0, 1.0 - _EDGE)] * m)
        caps[:, s] = result.x
    return caps


def fit_prices(calls: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-tool prices (or FLOPs) from each step's sum over the called tools: least squares."""
    unique, inverse = np.unique(calls, axis=0, return_inverse=True)
    means = np.bincount(inverse.reshape(-1), weights=values) / np.bincount(inverse.reshape(-1))
    solution, *_ = np.linalg.lstsq(unique.astype(np.float64), means, rcond=None)
    return np.asarray(solution)


def fit(log: ToolBenchLog, like: gym.Env) -> FittedToolBench:
    """Every parameter of the module docstring's list, from ``log`` alone.

    ``like``: the env the log was played on, for what is the user's (the tools' names and
    roles, the action space's size); nothing of its pool's numbers is read.
    """
    base = like.unwrapped
    assert isinstance(base, ToolBenchEnv)
    at = positions(log.obs)
    first = np.ones(log.steps, dtype=bool)
    first[1:] = log.episode[1:] != log.episode[:-1]
    known, cleared = clear_outcomes(log, at)
    stage_skills, answer_skills = fit_skills(log, at, first)
    caps = fit_capabilities(log.calls[known], at.skill[known], at.difficulty[known],
                            cleared[known])
    costs = np.clip(fit_prices(log.calls, log.cost), 0.0, None)
    flops = np.clip(fit_prices(log.calls, log.flops), 0.0, None)
    return FittedToolBench(
        fit_stage_counts(log, at, first), stage_skills, answer_skills,
        fit_difficulty(*seen_difficulties(log, at)), caps, costs, flops,
        tuple(a.name for a in base.pool.agents), tuple(a.role for a in base.pool.agents),
        episodes=int(first.sum()), steps=log.steps, clears=int(known.sum()))
