"""ToolBench-v0: route multi-stage tasks through a pool of heterogeneous tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from cost_envs.config import boolean, probability
from cost_envs.core import OrchestrationEnv, Outcome, State
from cost_envs.envs.toolbench_tables import (
    MAX_ANSWER_TOKENS,
    MAX_STAGES,
    SKILLS,
    capabilities_by_code,
    hit_table,
    observation_rows,
    spurious_tokens,
    stage_codes,
)
from cost_envs.pool import AgentPool, AgentSpec, coerce_pool
from cost_envs.reward import RewardWeights
from cost_envs.scoring import token_f1
from cost_envs.task_blocks import TaskBlock

#: Skills an intermediate stage can need; the last stage always needs an answer skill.
STAGE_SKILLS = (0, 1, 2, 3, 4)
ANSWER_SKILLS = (4, 5)
_STAGE_SKILLS, _ANSWER_SKILLS = np.asarray(STAGE_SKILLS), np.asarray(ANSWER_SKILLS)
#: How likely a task has 2, 3 or 4 stages, and the cumulative shares as ``Generator.choice``
#: normalises them.
STAGE_COUNTS = (0.35, 0.40, 0.25)
_STAGE_CDF = np.asarray(STAGE_COUNTS, dtype=np.float64).cumsum()
_STAGE_CDF /= _STAGE_CDF[-1]
MAX_TURNS = MAX_STAGES + 1
VOCAB = 5000
#: Task difficulty ``delta ~ Beta(*TASK_DIFFICULTY)``; each stage's difficulty is
#: ``clip(delta + N(0, STAGE_DIFFICULTY_NOISE), 0, 1)`` (the Bayes reference's likelihood
#: reads both, so they have one home).
TASK_DIFFICULTY = (2.0, 2.0)
STAGE_DIFFICULTY_NOISE = 0.15

# name, role, USD per call, FLOPs per call, capability over SKILLS. Prices are in the range
# of 2024-25 API list prices for ~1k tokens (LLMs) and per-request prices of search/compute
# APIs; FLOPs are 2 * parameters * tokens for models and rough counts for tools.
_CATALOGUE = (
    ("bm25_retriever", "retriever", 0.0004, 2e8, (0.60, 0.0, 0.10, 0.0, 0.0, 0.0)),
    ("dense_retriever", "retriever", 0.0020, 4e10, (0.88, 0.0, 0.20, 0.0, 0.0, 0.0)),
    ("calculator", "calculator", 0.0001, 1e5, (0.0, 0.90, 0.0, 0.05, 0.0, 0.0)),
    ("web_browser", "browser", 0.0030, 5e9, (0.40, 0.0, 0.88, 0.0, 0.0, 0.0)),
    ("code_runner", "code", 0.0025, 2e9, (0.0, 0.65, 0.0, 0.88, 0.0, 0.0)),
    ("llm_small", "llm", 0.0030, 1.4e13, (0.25, 0.35, 0.10, 0.40, 0.60, 0.65)),
    ("llm_large", "llm", 0.0400, 1.4e14, (0.45, 0.75, 0.25, 0.75, 0.92, 0.93)),
    ("llm_medium", "llm", 0.0120, 6e13, (0.35, 0.55, 0.15, 0.60, 0.78, 0.82)),
    ("summarizer", "llm", 0.0015, 2e12, (0.10, 0.0, 0.0, 0.0, 0.35, 0.75)),
    ("sql_engine", "code", 0.0015, 1e9, (0.35, 0.30, 0.0, 0.60, 0.0, 0.0)),
    ("news_api", "browser", 0.0010, 1e8, (0.30, 0.0, 0.65, 0.0, 0.0, 0.0)),
    ("theorem_prover", "math", 0.0060, 8e11, (0.0, 0.85, 0.0, 0.30, 0.50, 0.0)),
)

TOOLBENCH_CATALOGUE = AgentPool(tuple(AgentSpec(*row) for row in _CATALOGUE), SKILLS)


def toolbench_pool(size: int = 8) -> AgentPool:
    """The preset pool: the first ``size`` tools (1..12) of the catalogue; 8 by default."""
    return TOOLBENCH_CATALOGUE.subset(size)


@dataclass(frozen=True, eq=False)
class ToolTask:
    """One ToolBench task with all of its randomness (privileged).

    Attributes:
        stage_skill: Skill index needed by each stage, shape ``(n_stages,)``.
        stage_difficulty: Difficulty in ``[0, 1]`` of each stage.
        luck: Uniform draw per (turn, agent); agent i clears the current stage at turn t
            when ``luck[t, i] < capability ** (1 + 3 * difficulty)``.
        reference: Reference answer token ids.
        recall_luck: Uniform draw per (turn, reference token) used by the composer.
        hallucination_rate: Per turn, the scale of the composer's spurious tokens.
        hallucination_tokens: Per turn, the spurious tokens the composer would emit, drawn
            from the task's topic vocabulary (which contains the reference tokens).
        topic: The topic vocabulary, ``3 L`` tokens: the ``L`` reference tokens followed by
            ``2 L`` distractors; spurious token ``j`` of turn ``t`` is
            ``topic[floor(v * 3 L)]`` for a uniform ``v``. A parameter of the task, not
            luck; ``None`` for a task built by hand without it (it then cannot be
            re-drawn by :func:`with_fresh_luck` nor planned by ``agents.planning``).

    ``luck``, ``recall_luck``, ``hallucination_rate`` and ``hallucination_tokens`` are the
    task's luck; the rest (stage skills and difficulties, the reference, the topic) are
    its hidden parameters.
    """

    stage_skill: np.ndarray
    stage_difficulty: np.ndarray
    luck: np.ndarray
    reference: np.ndarray
    recall_luck: np.ndarray
    hallucination_rate: np.ndarray
    hallucination_tokens: np.ndarray
    topic: np.ndarray | None = None

    @property
    def n_stages(self) -> int:
        """Number of stages to clear."""
        return len(self.stage_skill)

    @property
    def horizon(self) -> int:
        """Turns available: one per stage plus one spare."""
        return len(self.stage_skill) + 1


def with_fresh_luck(task: ToolTask, rng: np.random.Generator) -> ToolTask:
    """The same task with all of its luck drawn again from ``rng``, its parameters kept.

    Stage skills and difficulties, the reference and the topic are shared with ``task``;
    every tool's luck at every turn, the recall luck of every reference token, the
    hallucination rate and the spurious tokens of every turn are drawn afresh from the
    distributions the env draws them from (uniforms; spurious tokens uniform over the
    topic's ``3 L`` positions). Replay the result with ``reset(options={"task": ...})``:
    averaging over such draws is averaging over the luck for fixed hidden parameters,
    which is how ``agents.planning``'s expected returns are checked. The env never calls
    this, so its task stream and dynamics are unchanged.

    Raises:
        ValueError: If ``task`` has no topic (built by hand without one).
    """
    if task.topic is None:
        raise ValueError("with_fresh_luck: the task has no topic vocabulary (built without "
                         "one), so its spurious tokens cannot be drawn again")
    turns, m = task.luck.shape
    size = len(task.reference)
    luck = rng.random((turns, m))
    recall_luck = rng.random((turns, size))
    hallucination_rate = rng.random((turns,))  # the draws of rng.random(turns)
    pick = (rng.random((turns, MAX_ANSWER_TOKENS)) * (3 * size)).astype(np.int64)
    spurious = task.topic[pick]
    for array in (luck, recall_luck, hallucination_rate, spurious):
        array.flags.writeable = False
    return replace(task, luck=luck, recall_luck=recall_luck,
                   hallucination_rate=hallucination_rate, hallucination_tokens=spurious)


class ToolBlock(NamedTuple):
    """The raw draws of a block of ``n`` ToolBench tasks, padded (see ``ToolBenchEnv.draw_block``).

    Shapes: ``n_stages``, ``length`` ``(n,)``; ``skill``, ``difficulty`` ``(n, 4)``;
    ``luck`` ``(n, 5, m)``; ``reference`` ``(n, 20)``; ``distractors`` ``(n, 40)``;
    ``pick``, ``recall_luck`` ``(n, 5, 20)`` (``pick``: each spurious token's position in
    the topic); ``hallucination_rate`` ``(n, 5)``. Entries past a task's stage count or
    answer length are drawn but unused.
    """

    n_stages: np.ndarray
    skill: np.ndarray
    difficulty: np.ndarray
    luck: np.ndarray
    length: np.ndarray
    reference: np.ndarray
    distractors: np.ndarray
    pick: np.ndarray
    recall_luck: np.ndarray
    hallucination_rate: np.ndarray


class ToolDraws(NamedTuple):
    """The generator's draws of a block of tasks (:meth:`ToolBenchEnv.draw_calls`)."""

    n_stages: np.ndarray
    stage_skill: np.ndarray  # indices into STAGE_SKILLS, (n, 4)
    answer_skill: np.ndarray  # indices into ANSWER_SKILLS, (n,)
    delta: np.ndarray  # the task's difficulty
    noise: np.ndarray  # each stage's, (n, 4)
    luck: np.ndarray
    length: np.ndarray
    reference: np.ndarray
    distractors: np.ndarray
    topic_pick: np.ndarray  # each spurious token's position in the topic, in [0, 1)
    recall_luck: np.ndarray
    hallucination_rate: np.ndarray


class ToolUniforms(NamedTuple):
    """Where :meth:`ToolBenchEnv.draw_calls` may draw a block's uniforms (each ``None``: new).

    float64 arrays of the shapes of the :class:`ToolDraws` fields of the same names.
    """

    luck: np.ndarray | None
    topic_pick: np.ndarray | None
    recall_luck: np.ndarray | None
    hallucination_rate: np.ndarray | None


def derive_block(draws: ToolDraws) -> ToolBlock:
    """The block of tasks ``draws`` make (of one generator or several, stacked)."""
    n_stages, length = draws.n_stages, draws.length
    n = len(n_stages)
    skill = _STAGE_SKILLS[draws.stage_skill]
    skill[np.arange(n), n_stages - 1] = _ANSWER_SKILLS[draws.answer_skill]
    difficulty = np.clip(draws.delta[:, None] + draws.noise, 0, 1)
    # Spurious token j of turn t is topic[floor(pick * 3L)], where the topic is the L
    # reference tokens followed by 2L distractors; vectorised over the block. The positions
    # (below 60) in int8, cast from the float64 products as they are computed: no float64
    # temporary of the block's size (whose fresh pages cost more than the product).
    pick = np.multiply(draws.topic_pick.reshape(n, -1), (3.0 * length)[:, None],
                       out=np.empty((n, MAX_TURNS * MAX_ANSWER_TOKENS), np.int8),
                       casting="unsafe").reshape(draws.topic_pick.shape)
    return ToolBlock(n_stages, skill, difficulty, draws.luck, length, draws.reference,
                     draws.distractors, pick, draws.recall_luck, draws.hallucination_rate)


#: ``cleared_difficulties=True``'s slots (:func:`cleared_difficulty_rows`), after the 17 of
#: ``ToolBenchEnv.observation_layout``.
CLEARED_DIFFICULTIES = slice(17, 17 + MAX_STAGES)


def cleared_difficulty_rows(difficulty: np.ndarray, n_stages: np.ndarray) -> np.ndarray:
    """``rows[b, s, j]``: task b's stage j difficulty once it is cleared (``j < s``), else 0.

    What ``cleared_difficulties=True`` adds to the observation at stage ``s`` (the
    difficulties of the stages already cleared, each the float32 the observation showed
    while it was the current stage), for a block of padded tasks: ``difficulty``
    ``(n, 4)``, ``n_stages`` ``(n,)``; out ``(n, 5, 4)`` float32 (stage 4: all cleared).
    """
    stage = np.arange(MAX_STAGES)
    shown = (difficulty * (stage < np.asarray(n_stages)[:, None])).astype(np.float32)
    cleared = stage < np.arange(MAX_STAGES + 1)[:, None]  # (stage s, slot j): j < s
    return np.where(cleared, shown[:, None, :], np.float32(0.0))


def observation_table(codes: np.ndarray, difficulty: np.ndarray, n_stages: np.ndarray,
                      cleared_difficulties: bool) -> np.ndarray:
    """``rows[b, s]``: the observation at stage s but for the turn and failure entries.

    ``observation_rows``'s 17 slots, followed with ``cleared_difficulties`` by
    :func:`cleared_difficulty_rows`'s 4: the one place both envs (single and batched)
    build the observation's per-stage rows.
    """
    rows = observation_rows(codes, difficulty, n_stages)
    if not cleared_difficulties:
        return rows
    return np.concatenate((rows, cleared_difficulty_rows(difficulty, n_stages)), axis=2)


class _Tables(NamedTuple):
    hits: list  # hits[t][s][i] as nested lists: indexing them is the hot path of step
    observation_rows: np.ndarray


class ToolBenchEnv(OrchestrationEnv[ToolTask]):
    """Answer multi-stage tool-use tasks by choosing which tools to call at each turn.

    ## Description

    A ToolBench-style setting from the LoRA-Guided PPO paper. A pool of ``m`` tools (8 by
    default: two retrievers, a calculator, a browser, a code runner and a small, a large
    and a medium LLM; ``pool_size`` up to 12 adds a summarizer, an SQL engine, a news API
    and a theorem prover) each has a price, a FLOP count and a capability vector over six
    skills (retrieval, math, web, code, reasoning, writing). A task is a chain of 2-4
    stages; each stage needs one skill, the last one an answer skill (reasoning or
    writing), and the composed answer is scored by token-level F1 against a reference.

    **Generative model.** A task draws its stage count (2, 3, 4 with probabilities .35,
    .40, .25), its stage skills, a task difficulty ``delta ~ Beta(2, 2)`` and per-stage
    difficulties ``d = clip(delta + N(0, .15), 0, 1)``. At reset it also fixes the luck
    ``u[t, i] ~ U(0, 1)`` of every tool at every turn. At turn ``t`` only the current
    stage can advance: it is cleared if some called tool ``i`` has
    ``u[t, i] < cap[i, skill] ** (1 + 3 d)``, so hard stages punish weak tools far more
    than strong ones. Clearing the last stage composes the answer with the strongest
    tool that cleared it: each of the L (8-20) reference tokens is recalled when its own
    luck is below ``0.3 + 0.7 * q`` (``q = cap ** (1 + d)`` of the composer), and
    ``round(L * (1 - q) * h_t)`` spurious tokens are added from the task's topic
    vocabulary (which contains the reference tokens, so a lucky spurious token can
    still count). F1 is the real multiset token F1 of that answer.

    Adaptivity pays because difficulty and the needed skill are observed: a cheap
    specialist suffices on easy stages, a strong tool is needed on hard ones, and a
    failed turn (observed) calls for escalation with only one spare turn.

    ## Action Space

    ``MultiBinary(m)``: bit ``i`` calls tool ``i`` this turn. The all-zero action means
    the controller answers now with what it has (the episode ends).

    ## Observation Space

    ``Box(0, 1, (17,), float32)``, see ``observation_layout``: turns left / 5, stages
    left / 4, fraction of stages cleared, whether the last turn failed, the current
    stage's difficulty, ``task_embedding`` (one-hot of the current stage's skill, zero
    once all stages are cleared) and ``remaining_skills`` (count of each skill over the
    remaining stages / 4). Luck and the reference answer are never observed.

    The observation is memoryless: the difficulty of a stage is shown while it is the
    current one, then gone. With ``cleared_difficulties=True`` it is
    ``Box(0, 1, (21,), float32)``: the same 17 slots, then ``cleared_difficulties``, the
    difficulty of each of stages 0-3 once it is cleared, as it was shown (0 before; how
    many are cleared is ``stages_left`` and ``progress``). That is the history the Bayes
    reference (``agents.planning.BayesToolBenchPlanner``) keeps in its recurrent state
    and conditions its posterior on: with it, the observation holds all the reference
    knows of the episode.

    ## Rewards

    Eq. 1 of the paper, ``alpha*S + beta*Q - lam*sum_i c_i z_i - gamma*||z||_0`` with
    ``S`` and ``Q`` (quality = 10 * F1) paid on the final step.

    ## Starting State

    Stage 0 of a task drawn from ``np_random`` (or ``options["task"]``), turn 0.

    ## Episode End

    Terminated when the last stage is cleared (success iff F1 >= ``f1_threshold``), when
    the controller answers early (all-zero action; failure unless complete) or after
    ``n_stages + 1`` turns (failure). The turn limit is part of the task and observed,
    so it terminates; budgets are wrappers and truncate.

    ## Arguments

    * ``pool``: an :class:`AgentPool` over ``SKILLS``, its dict form or a JSON/YAML path.
    * ``pool_size``: size of the preset pool (1-12, default 8); not with ``pool``.
    * ``f1_threshold``: answer F1 needed for success (default 0.6).
    * ``cleared_difficulties``: ``True`` appends the difficulties of the stages cleared
      (Observation Space; default ``False``: the tasks and dynamics are the same either way).
    * ``reward_weights``: :class:`RewardWeights` or a mapping.
    * ``render_mode``: ``None`` or ``"ansi"``.
    * ``budget``, ``on_exceed``: HardBudget built by ``gym.make`` (:mod:`cost_envs.registration`).

    ## Fixed rules

    Learning beats the rule here only when it is taught well (issues #10, #11). No
    open-loop call pattern or single threshold comes near the hand-written skill-to-tool
    table (RuleBased), the best fixed rule of the family in ``agents/rules.py``: 0.802
    success at CPS 0.0738 and a mean Eq. 1 return of 0.865 on the 400 evaluation tasks.
    PPO (20k steps, 5 seeds) is more successful (0.893) but dearer per success (0.0969),
    and below the rule on return. ``agents.planning.ExpectimaxPlanner``, which knows each
    task's parameters but not its luck and maximises the expected Eq. 1 return exactly,
    reaches 0.877 at CPS 0.0625, return 0.969; a LoRA allocator trained to imitate it from
    the observation alone closes 0.80 of the rule-to-planner gap. The task's ``topic`` and
    :func:`with_fresh_luck` exist for the planner. The Bayes reference
    (``agents.planning.BayesToolBenchPlanner``), which knows only the task prior and what
    the episode showed, does as well (0.880 at CPS 0.0618, return 0.974): the observation
    shows nearly all that the hidden parameters decide. Taught by it with DAgger
    (issue #23), the memoryless LoRA allocator returns 0.965 and closes 0.96 [0.86, 1.06] of the
    rule-to-planner gap (5 seeds), where PPO from scratch stops at about 0.6 (0.58
    [0.35, 0.80] at 1M steps, 5 seeds).

    ## Version History

    * v0: initial version. The ``cleared_difficulties`` option (issue #38) came later;
      off, the observation, the tasks and the trajectories are those of the first v0.
    """

    task_type = ToolTask
    observation_layout = {
        "turns_left": slice(0, 1),
        "stages_left": slice(1, 2),
        "progress": slice(2, 3),
        "failed_last_turn": slice(3, 4),
        "difficulty": slice(4, 5),
        "task_embedding": slice(5, 11),
        "remaining_skills": slice(11, 17),
    }

    def __init__(
        self,
        pool: AgentPool | Mapping[str, Any] | str | Path | None = None,
        pool_size: int | None = None,
        f1_threshold: float = 0.6,
        reward_weights: RewardWeights | Mapping[str, float] | None = None,
        render_mode: str | None = None,
        cleared_difficulties: bool = False,
    ) -> None:
        boolean(cleared_difficulties, "cleared_difficulties", where="ToolBench-v0")
        if pool is not None and pool_size is not None:
            raise ValueError("ToolBench-v0: pass either pool or pool_size, not both "
                             f"(got pool_size={pool_size!r} with a custom pool)")
        pool = toolbench_pool(8 if pool_size is None else pool_size) if pool is None else (
            coerce_pool(pool))
        if pool.skills != SKILLS:
            raise ValueError(
                f"ToolBench-v0: {pool.label}: skills must be {list(SKILLS)} in this order, "
                f"got {list(pool.skills)}"
            )
        probability(f1_threshold, "f1_threshold", where="ToolBench-v0")
        super().__init__(pool, reward_weights, render_mode)
        self.f1_threshold = float(f1_threshold)
        self.cleared_difficulties = bool(cleared_difficulties)
        size = 17
        if self.cleared_difficulties:
            self.observation_layout = {**self.observation_layout,
                                       "cleared_difficulties": CLEARED_DIFFICULTIES}
            size = CLEARED_DIFFICULTIES.stop
        self.observation_space = spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)

    # ------------------------------------------------------------------ tasks
    def draw_block(self, rng: np.random.Generator, n: int) -> ToolBlock:
        """The raw draws of ``n`` tasks from ``rng``, padded to the longest task.

        The one place ToolBench's tasks are drawn: ``reset`` (through
        :meth:`_generate_block`) and the batched env (:mod:`cost_envs.vector.toolbench`)
        both consume ``rng`` through :meth:`draw_calls` and derive the block with
        :func:`derive_block`, which is what makes their tasks the same.
        """
        return derive_block(self.draw_calls(rng, n))

    def draw_calls(self, rng: np.random.Generator, n: int,
                   out: ToolUniforms | None = None) -> ToolDraws:
        """The generator's calls of :meth:`draw_block`, in their one order, and nothing else.

        Args:
            rng: The generator.
            n: Number of tasks.
            out: Arrays to draw the block's uniforms into instead of new ones (the batched
                env's queue): ``rng.random(shape, out=a)`` consumes the generator and fills
                ``a`` exactly as ``rng.random(shape)`` would (numpy refuses an ``a`` of
                another shape or dtype); the returned draws hold these arrays.
        """
        m = self.n_agents
        luck, topic_pick, recall_luck, rate = (None, None, None, None) if out is None else out
        return ToolDraws(
            # rng.choice(np.arange(2, 5), p=STAGE_COUNTS, size=n) as choice computes it (the
            # same draws and values), without its checks: a fifth of the block's draw time
            2 + _STAGE_CDF.searchsorted(rng.random(n), side="right"),
            rng.integers(0, len(STAGE_SKILLS), (n, MAX_STAGES)),
            rng.integers(0, len(ANSWER_SKILLS), n),
            rng.beta(*TASK_DIFFICULTY, n),
            rng.normal(0.0, STAGE_DIFFICULTY_NOISE, (n, MAX_STAGES)),
            rng.random((n, MAX_TURNS, m), out=luck),
            rng.integers(8, MAX_ANSWER_TOKENS + 1, n),
            rng.integers(0, VOCAB, (n, MAX_ANSWER_TOKENS)),
            # The topic vocabulary is the reference plus 2L other tokens; spurious tokens
            # are drawn from it, so some of them hit the reference by chance.
            rng.integers(0, VOCAB, (n, 2 * MAX_ANSWER_TOKENS)),
            rng.random((n, MAX_TURNS, MAX_ANSWER_TOKENS), out=topic_pick),
            rng.random((n, MAX_TURNS, MAX_ANSWER_TOKENS), out=recall_luck),
            rng.random((n, MAX_TURNS), out=rate))

    def _generate_block(self, rng: np.random.Generator, n: int) -> TaskBlock:
        (n_stages, skill, difficulty, luck, length, reference, distractors, pick,
         recall_luck, hallucination_rate) = self.draw_block(rng, n)
        hits, rows = self._block_tables(skill, difficulty, luck, n_stages)
        for array in (skill, difficulty, luck, reference, recall_luck, hallucination_rate):
            array.flags.writeable = False  # tasks are views into these blocks
        spurious = spurious_tokens(reference, distractors, pick, length)
        spurious.flags.writeable = False

        def task(b: int) -> tuple[ToolTask, _Tables]:
            k, size = int(n_stages[b]), int(length[b])
            topic = np.concatenate((reference[b, :size], distractors[b, : 2 * size]))
            topic.flags.writeable = False
            return ToolTask(
                stage_skill=skill[b, :k],
                stage_difficulty=difficulty[b, :k],
                luck=luck[b, : k + 1],
                reference=reference[b, :size],
                recall_luck=recall_luck[b, : k + 1, :size],
                hallucination_rate=hallucination_rate[b, : k + 1],
                hallucination_tokens=spurious[b, : k + 1],
                topic=topic,
            ), _Tables(hits[b, : k + 1, :k].tolist(), rows[b, : k + 1])

        return TaskBlock(n, task)  # each task's objects built when reached (gc)

    def _tables(self, task: ToolTask) -> _Tables:
        k = task.n_stages
        skill = np.zeros((1, MAX_STAGES), dtype=np.int64)
        difficulty = np.zeros((1, MAX_STAGES))
        luck = np.ones((1, MAX_TURNS, self.n_agents))
        skill[0, :k], difficulty[0, :k], luck[0, : k + 1] = (
            task.stage_skill, task.stage_difficulty, task.luck)
        hits, rows = self._block_tables(skill, difficulty, luck, np.array([k]))
        return _Tables(hits[0, : k + 1, :k].tolist(), rows[0, : k + 1])

    def _block_tables(
        self, skill: np.ndarray, difficulty: np.ndarray, luck: np.ndarray, n_stages: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-pool dynamics of a block of (padded) tasks, vectorised.

        Returns ``hits[b, t, s, i]`` (tool i clears stage s if called at turn t) and
        ``rows[b, s]``, the observation at stage s but for the turn and failure entries
        (:func:`observation_table`).
        """
        codes = stage_codes(skill, n_stages)
        by_code = capabilities_by_code(self.pool.capabilities)
        hits = hit_table(by_code, codes, difficulty, luck)
        return hits, observation_table(codes, difficulty, n_stages, self.cleared_difficulties)

    # ------------------------------------------------------------- dynamics
    def _initial_state(self, task: ToolTask, tables: _Tables) -> State:
        self._hits, self._obs_rows = tables.hits, tables.observation_rows
        self._n_stages, self._horizon = task.n_stages, task.horizon
        return (0, 0)

    def _transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        stage, _ = state
        if not called:  # answer now: only a finished task succeeds, and that ended already
            return (stage, 0), Outcome(False, 0.0)
        hits = self._hits[turn][stage]
        cleared = [i for i in called if hits[i]]
        if cleared:
            stage += 1
            if stage == self._n_stages:
                f1 = self._answer_f1(turn, cleared)
                return (stage, 0), Outcome(f1 >= self.f1_threshold, 10.0 * f1)
            failed = 0
        else:
            failed = 1
        if turn + 1 >= self._horizon:
            return (stage, failed), Outcome(False, 0.0)
        return (stage, failed), None

    def composer_strength(self, agent: int) -> float:
        """Privileged: ``q = cap ** (1 + d)`` of ``agent`` on the current task's answer stage."""
        task = self._episode_task("composer_strength")
        cap = self.pool.capabilities[agent, task.stage_skill[-1]]
        return float(cap ** (1.0 + task.stage_difficulty[-1]))

    def answer_tokens(self, turn: int, agent: int) -> np.ndarray:
        """Privileged: the answer ``agent`` composes if it clears the last stage at ``turn``."""
        task = self._episode_task("answer_tokens")
        q = self.composer_strength(agent)
        recalled = task.reference[task.recall_luck[turn] < 0.3 + 0.7 * q]
        n_spurious = round(len(task.reference) * (1.0 - q) * task.hallucination_rate[turn])
        return np.concatenate([recalled, task.hallucination_tokens[turn, :n_spurious]])

    def _answer_f1(self, turn: int, cleared_by: list[int]) -> float:
        # The strongest tool that cleared the last stage writes the answer.
        composer = max(cleared_by, key=self.composer_strength)
        reference = self._episode_task("step").reference
        return token_f1(self.answer_tokens(turn, composer).tolist(), reference.tolist())

    def _observe(self, turn: int, state: State) -> np.ndarray:
        stage, failed = state
        obs = self._obs_rows[stage].copy()
        obs[0] = (self._horizon - turn) / MAX_TURNS
        obs[3] = failed
        return obs

    # ------------------------------------------------------------- helpers
    def rule_based_action(self, observation: np.ndarray) -> np.ndarray:
        """The fixed routing table: the most capable tool for the current stage's skill.

        Uses only the observation; the RuleBased baseline calls it.
        """
        need = observation[self.observation_layout["task_embedding"]]
        action = np.zeros(self.n_agents, dtype=np.int8)
        if need.max() > 0:
            skill = int(np.argmax(need))
            action[int(np.argmax(self.pool.capabilities[:, skill]))] = 1
        return action

    def _describe(self) -> str:
        task = self._task
        if task is None:
            return "no task"
        stage, failed = self._state
        skills = [SKILLS[s] for s in task.stage_skill]
        return f"stages {skills}, cleared {stage}, last turn failed: {bool(failed)}"
