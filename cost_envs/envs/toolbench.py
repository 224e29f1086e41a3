"""ToolBench-v0: route multi-stage tasks through a pool of heterogeneous tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
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
#: How likely a task has 2, 3 or 4 stages, and the cumulative shares its stage count's
#: uniform is placed in (normalised as ``Generator.choice`` normalises them).
STAGE_COUNTS = (0.35, 0.40, 0.25)
_STAGE_CDF = np.asarray(STAGE_COUNTS, dtype=np.float64).cumsum()
_STAGE_CDF /= _STAGE_CDF[-1]
MAX_TURNS = MAX_STAGES + 1
VOCAB = 5000
#: Answer lengths ``L``: 8 to 20 tokens, uniform.
MIN_ANSWER_TOKENS = 8
#: Task difficulty ``delta ~ Beta(*TASK_DIFFICULTY)``; each stage's difficulty is
#: ``clip(delta + N(0, STAGE_DIFFICULTY_NOISE), 0, 1)`` (the Bayes reference's likelihood
#: reads both, so they have one home). ``derive_block`` draws ``delta`` as the median of
#: three uniforms, which is exactly Beta(2, 2).
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
            when ``luck[t, i] < capability ** (1 + 3 * difficulty)`` (float32 in a drawn
            task, compared in float64).
        reference: Reference answer token ids.
        recall_luck: Uniform draw per (turn, reference token) used by the composer: the
            answer's, so a drawn task has the same row at every turn (a hand-built one
            may vary it by turn).
        hallucination_rate: Per turn, the scale of the composer's spurious tokens (one
            value at every turn in a drawn task).
        hallucination_tokens: Per turn, the spurious tokens the composer would emit, drawn
            from the task's topic vocabulary (which contains the reference tokens); the
            same row at every turn in a drawn task.
        topic: The topic vocabulary, ``3 L`` tokens: the ``L`` reference tokens followed by
            ``2 L`` distractors; spurious token ``j`` is ``topic[floor(v * 3 L)]`` for a
            uniform ``v``. A parameter of the task, not luck; ``None`` for a task built by
            hand without it (it then cannot be re-drawn by :func:`with_fresh_luck` nor
            planned by ``agents.planning``).

    ``luck``, ``recall_luck``, ``hallucination_rate`` and ``hallucination_tokens`` are the
    task's luck; the rest (stage skills and difficulties, the reference, the topic) are
    its hidden parameters. The answer is composed once per episode, so the composer's
    draws are the task's, not each turn's: only a hindsight oracle could tell the
    difference. Drawn tasks keep the per-turn shapes (a row per turn, all alike, as
    read-only broadcast views).
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


def floor_times(uniforms: np.ndarray, k: Any, dtype: Any = np.int64) -> np.ndarray:
    """``floor(u * k)`` of float32 uniforms, the product in float64, as ``dtype``.

    Exact: a float32 uniform is ``j / 2**24`` and ``k`` below ``2**29`` (an int or an array
    broadcasting against ``uniforms``), so the product is a float64 without rounding and
    the truncation is its floor, in ``0 .. k - 1``. (In float32 the product may round up
    to ``k``.)
    """
    return np.multiply(uniforms, k, dtype=np.float64, casting="unsafe",
                       out=np.empty(np.broadcast_shapes(uniforms.shape, np.shape(k)), dtype))


def median_of_three(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The elementwise median of three arrays: of three U(0, 1), exactly Beta(2, 2).

    (The median's density is ``3! x (1 - x)``.) One of its inputs, not a new value.
    """
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def box_muller(pairs: np.ndarray) -> np.ndarray:
    """Standard normals from pairs of float32 uniforms, by Box-Muller, in float64.

    ``pairs`` ``(n, 2 p)``: columns ``2 j`` and ``2 j + 1`` are pair ``j``'s ``(u, v)``,
    which give ``r cos(2 pi v)`` and ``r sin(2 pi v)`` with ``r = sqrt(-2 ln(1 - u))``
    (``1 - u`` in ``(0, 1]``), columns ``2 j`` and ``2 j + 1`` of the ``(n, 2 p)`` result:
    two independent N(0, 1), exactly in law (the uniforms' ``2**-24`` grid bounds them at
    5.77).
    """
    n = len(pairs)
    u = pairs[:, 0::2].astype(np.float64)  # contiguous copies: one code path for all
    v = pairs[:, 1::2].astype(np.float64)
    radius = np.sqrt(-2.0 * np.log(1.0 - u))
    angle = (2.0 * np.pi) * v
    out = np.empty((n, pairs.shape[1]))
    out[:, 0::2] = radius * np.cos(angle)
    out[:, 1::2] = radius * np.sin(angle)
    return out


#: The fields of a task's row of uniforms (:func:`uniform_columns`), in order, and their
#: widths; the luck (``MAX_TURNS x m``) comes last, as its width follows the pool.
_FIELDS = (("n_stages", 1), ("stage_skill", MAX_STAGES), ("answer_skill", 1), ("delta", 3),
           ("noise", MAX_STAGES), ("length", 1), ("reference", MAX_ANSWER_TOKENS),
           ("distractors", 2 * MAX_ANSWER_TOKENS), ("recall_luck", MAX_ANSWER_TOKENS),
           ("hallucination_rate", 1), ("topic_pick", MAX_ANSWER_TOKENS))


@lru_cache(maxsize=16)
def uniform_columns(n_agents: int) -> dict[str, slice]:
    """Which columns of a task's row of uniforms feed which of its fields (``m`` tools).

    A task is ``K = 115 + 5 m`` float32 uniforms (155 with the 8 preset tools), one row
    of :meth:`ToolBenchEnv.draw_calls`; :func:`derive_block` turns a row into the task:

    * ``n_stages`` (1): the stage count, 2 + the number of :data:`STAGE_COUNTS`'s
      cumulative shares at or below it;
    * ``stage_skill`` (4): ``floor(5 u)``, a skill of :data:`STAGE_SKILLS` per stage;
      ``answer_skill`` (1): ``floor(2 u)``, of :data:`ANSWER_SKILLS`, for the last stage;
    * ``delta`` (3): the task's difficulty, their median (Beta(2, 2));
    * ``noise`` (4): two Box-Muller pairs, the stages' ``N(0, 0.15)`` noise;
    * ``length`` (1): ``L = 8 + floor(13 u)``;
    * ``reference`` (20) and ``distractors`` (40): tokens ``floor(5000 u)`` (the first
      ``L`` and ``2 L`` used);
    * ``recall_luck`` (20): each reference token's recall luck (the first ``L`` used);
    * ``hallucination_rate`` (1): ``h``;
    * ``topic_pick`` (20): each spurious token's topic position, ``floor(3 L u)``;
    * ``luck`` (``5 m``): ``luck[t, i]``, turn by turn (row-major).

    Columns past a task's stage count or answer length are drawn and unused.
    """
    columns, at = {}, 0
    for name, width in (*_FIELDS, ("luck", MAX_TURNS * n_agents)):
        columns[name] = slice(at, at + width)
        at += width
    return columns


def uniform_count(n_agents: int) -> int:
    """``K``: the uniforms a task of a pool of ``n_agents`` tools is drawn from."""
    return uniform_columns(n_agents)["luck"].stop


def with_fresh_luck(task: ToolTask, rng: np.random.Generator) -> ToolTask:
    """The same task with all of its luck drawn again from ``rng``, its parameters kept.

    Stage skills and difficulties, the reference and the topic are shared with ``task``;
    every tool's luck at every turn, the composer's recall luck of every reference token,
    its hallucination rate and its spurious tokens are drawn afresh as the env draws them:
    float32 uniforms, the composer's draws once for the task (the same row at every
    turn), spurious tokens ``topic[floor(3 L v)]``. Replay the result with
    ``reset(options={"task": ...})``: averaging over such draws is averaging over the
    luck for fixed hidden parameters, which is how ``agents.planning``'s expected returns
    are checked. The env never calls this, so its task stream and dynamics are unchanged.

    Raises:
        ValueError: If ``task`` has no topic (built by hand without one).
    """
    if task.topic is None:
        raise ValueError("with_fresh_luck: the task has no topic vocabulary (built without "
                         "one), so its spurious tokens cannot be drawn again")
    turns, m = task.luck.shape
    size = len(task.reference)
    luck = rng.random((turns, m), dtype=np.float32)
    recall_luck = rng.random(size, dtype=np.float32)
    hallucination_rate = rng.random(1, dtype=np.float32)
    pick = floor_times(rng.random(MAX_ANSWER_TOKENS, dtype=np.float32), 3 * size)
    luck.flags.writeable = False
    return replace(task, luck=luck,
                   recall_luck=np.broadcast_to(recall_luck, (turns, size)),
                   hallucination_rate=np.broadcast_to(hallucination_rate, (turns,)),
                   hallucination_tokens=np.broadcast_to(task.topic[pick],
                                                        (turns, MAX_ANSWER_TOKENS)))


class ToolBlock(NamedTuple):
    """A block of ``n`` ToolBench tasks, padded (:func:`derive_block` of their uniforms).

    Shapes: ``n_stages``, ``length`` ``(n,)``; ``skill``, ``difficulty`` ``(n, 4)``;
    ``luck`` ``(n, 5, m)`` (float32); ``reference`` ``(n, 20)``; ``distractors``
    ``(n, 40)`` (int16 tokens); ``pick``, each spurious token's position in the topic, and
    ``recall_luck`` (float32) ``(n, 20)``; ``hallucination_rate`` ``(n,)`` (float32). The
    composer's draws (``pick``, ``recall_luck``, ``hallucination_rate``) are the task's,
    used at whatever turn it answers. Entries past a task's stage count or answer length
    are drawn but unused.
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


def derive_block(uniforms: np.ndarray, n_agents: int) -> ToolBlock:
    """The block of tasks rows of uniforms make (of one generator or several, stacked).

    Elementwise, each field from its columns (:func:`uniform_columns`), exactly in law:
    integers as ``floor(u k)`` (:func:`floor_times`), the stage count by the cumulative
    shares' ``searchsorted``, ``delta`` the median of three (:func:`median_of_three`), the
    stages' noise by Box-Muller (:func:`box_muller`), every other uniform as drawn (the
    float32 values: comparisons with them run in float64, the value cast). A row's task
    does not depend on the other rows, so a batched env's stack of many sub-envs' rows
    gives each sub-env the tasks its own rows give alone.

    Args:
        uniforms: ``(n, K)`` float32, ``K`` = :func:`uniform_count` of ``n_agents``.
        n_agents: The pool's size ``m``.
    """
    columns = uniform_columns(n_agents)
    n, width = uniforms.shape
    if width != columns["luck"].stop:
        raise ValueError(f"derive_block: expected rows of {columns['luck'].stop} uniforms "
                         f"for {n_agents} tools, got {width}")

    def field(name: str) -> np.ndarray:
        return uniforms[:, columns[name]]

    n_stages = 2 + _STAGE_CDF.searchsorted(field("n_stages")[:, 0].astype(np.float64),
                                           side="right")
    skill = _STAGE_SKILLS.take(floor_times(field("stage_skill"), len(STAGE_SKILLS)))
    skill[np.arange(n), n_stages - 1] = _ANSWER_SKILLS.take(
        floor_times(field("answer_skill")[:, 0], len(ANSWER_SKILLS)))
    low, middle, high = field("delta").T
    delta = median_of_three(low, middle, high).astype(np.float64)
    noise = STAGE_DIFFICULTY_NOISE * box_muller(field("noise"))
    difficulty = np.clip(delta[:, None] + noise, 0.0, 1.0)
    length = MIN_ANSWER_TOKENS + floor_times(
        field("length")[:, 0], MAX_ANSWER_TOKENS + 1 - MIN_ANSWER_TOKENS)
    reference = floor_times(field("reference"), VOCAB, np.int16)
    # The topic vocabulary is the reference plus 2L other tokens; spurious tokens are
    # drawn from it, so some of them hit the reference by chance.
    distractors = floor_times(field("distractors"), VOCAB, np.int16)
    # Spurious token j is topic[floor(pick * 3L)], where the topic is the L reference
    # tokens followed by 2L distractors (positions below 60: int8).
    pick = floor_times(field("topic_pick"), (3 * length)[:, None], np.int8)
    luck = field("luck").reshape(n, MAX_TURNS, n_agents)
    return ToolBlock(n_stages, skill, difficulty, luck, length, reference, distractors,
                     pick, field("recall_luck"), field("hallucination_rate")[:, 0])


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
    .40, .25), the skill of each stage (uniform over retrieval, math, web, code and
    reasoning; the last stage's uniform over reasoning and writing), a task difficulty
    ``delta ~ Beta(2, 2)`` and per-stage difficulties ``d = clip(delta + N(0, .15), 0,
    1)``, an answer length ``L`` uniform over 8..20, and ``L`` reference tokens and ``2 L``
    distractors uniform over a vocabulary of 5000 (the topic: the reference, then the
    distractors). It also fixes all of its luck: ``u[t, i] ~ U(0, 1)`` of every tool at
    every turn, and the composer's draws, a recall luck ``r[j] ~ U(0, 1)`` of each
    reference token, a hallucination rate ``h ~ U(0, 1)`` and 20 spurious-token positions
    uniform over the topic's ``3 L``; everything is independent. At turn ``t`` only the
    current stage can advance: it is cleared if some called tool ``i`` has
    ``u[t, i] < cap[i, skill] ** (1 + 3 d)``, so hard stages punish weak tools far more
    than strong ones. Clearing the last stage composes the answer, once per episode, with
    the strongest tool that cleared it: reference token ``j`` is recalled when
    ``r[j] < 0.3 + 0.7 * q`` (``q = cap ** (1 + d)`` of the composer), and the tokens at
    the first ``round(L * (1 - q) * h)`` spurious positions are added (the topic contains
    the reference tokens, so a lucky spurious token can still count). F1 is the real
    multiset token F1 of that answer.

    **How it is drawn.** A task is one row of ``K = 115 + 5 m`` float32 uniforms (155 with
    the 8 preset tools), a block of 64 tasks one generator call (:meth:`draw_calls`),
    turned into tasks elementwise (:func:`derive_block`; :func:`uniform_columns` says
    which columns feed which field): each integer is ``floor(k u)`` computed in float64
    (exact), the stage count the cumulative shares' interval ``u`` falls in, ``delta`` the
    median of three uniforms (exactly Beta(2, 2)), the stage noise from Box-Muller pairs
    (exactly normal); the luck, recall luck and ``h`` are uniforms as drawn, compared in
    float64 (the float32 value cast). Uniforms lie on the ``2**-24`` grid: each
    probability above is exact to ``2**-24`` and the noise is bounded by 5.77 standard
    deviations.

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
    table (RuleBased), the best fixed rule of the family in ``agents/rules.py``: 0.787
    success at CPS 0.0769 and a mean Eq. 1 return of 0.836 on the 400 evaluation tasks.
    PPO (20k steps, 5 seeds) is more successful (0.891) but dearer per success (0.0966),
    and as good as the rule on return (its share of the rule-to-planner gap, -0.16
    [-0.70, 0.13], holds 0). ``agents.planning.ExpectimaxPlanner``, which knows each
    task's parameters but not its luck and maximises the expected Eq. 1 return exactly,
    reaches 0.868 at CPS 0.0599, return 0.965; a LoRA allocator trained to imitate it from
    the observation alone closes 0.81 of the rule-to-planner gap. The task's ``topic`` and
    :func:`with_fresh_luck` exist for the planner. The Bayes reference
    (``agents.planning.BayesToolBenchPlanner``), which knows only the task prior and what
    the episode showed, does as well (0.873 at CPS 0.0604, return 0.969): the observation
    shows nearly all that the hidden parameters decide. Taught by it with DAgger
    (issue #23), the memoryless LoRA allocator returns 0.960 and closes 0.96 [0.86, 1.06] of the
    rule-to-planner gap (5 seeds), and LoRA-guided PPO from it 1.00 [0.90, 1.11], where PPO
    from scratch stops at about half of the gap (0.54 [0.33, 0.73] at 1M steps, 5 seeds).

    ## Version History

    * v0: initial version. The ``cleared_difficulties`` option (issue #38) came later;
      off, the observation, the tasks and the trajectories are those of the first v0.
      Issue #37 draws the tasks from float32 uniforms, one generator call per block (How
      it is drawn, above), with the composer's draws the task's rather than each turn's:
      the law of the tasks and of every episode is the same, the seeded task stream and
      the hindsight oracle's view of the luck are not.
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
        """``n`` tasks from ``rng``, padded to the longest task.

        The one place ToolBench's tasks are drawn: ``reset`` (through
        :meth:`_generate_block`) and the batched env (:mod:`cost_envs.vector.toolbench`)
        both consume ``rng`` through :meth:`draw_calls` and derive the block with
        :func:`derive_block`, which is what makes their tasks the same.
        """
        return derive_block(self.draw_calls(rng, n), self.n_agents)

    def draw_calls(self, rng: np.random.Generator, n: int,
                   out: np.ndarray | None = None) -> np.ndarray:
        """The generator's one call of :meth:`draw_block`: ``n`` rows of float32 uniforms.

        ``rng.random((n, K), dtype=np.float32)``, ``K`` = :func:`uniform_count` of the pool
        (a row per task, its columns :func:`uniform_columns`).

        Args:
            rng: The generator.
            n: Number of tasks.
            out: An ``(n, K)`` float32 array to draw into instead of a new one (the batched
                env's scratch): ``rng.random(shape, dtype, out=a)`` consumes the generator
                and fills ``a`` exactly as without it (numpy refuses an ``a`` of another
                shape or dtype); it is returned.
        """
        return rng.random((n, uniform_count(self.n_agents)), dtype=np.float32, out=out)

    def _generate_block(self, rng: np.random.Generator, n: int) -> TaskBlock:
        (n_stages, skill, difficulty, luck, length, reference, distractors, pick,
         recall_luck, hallucination_rate) = self.draw_block(rng, n)
        hits, rows = self._block_tables(skill, difficulty, luck, n_stages)
        for array in (skill, difficulty, luck, reference, recall_luck, hallucination_rate):
            array.flags.writeable = False  # tasks are views into these blocks
        spurious = spurious_tokens(reference, distractors, pick, length)
        # the composer's draws are the task's: the same row at every turn (read-only views
        # repeating it, made once per block: a task's are slices of them)
        n_rows = (n, MAX_TURNS)
        per_turn = (np.broadcast_to(recall_luck[:, None], (*n_rows, MAX_ANSWER_TOKENS)),
                    np.broadcast_to(hallucination_rate[:, None], n_rows),
                    np.broadcast_to(spurious[:, None], (*n_rows, MAX_ANSWER_TOKENS)))
        recall_rows, rate_rows, spurious_rows = per_turn

        def task(b: int) -> tuple[ToolTask, _Tables]:
            k, size = int(n_stages[b]), int(length[b])
            topic = np.concatenate((reference[b, :size], distractors[b, : 2 * size]))
            topic.flags.writeable = False
            return ToolTask(
                stage_skill=skill[b, :k],
                stage_difficulty=difficulty[b, :k],
                luck=luck[b, : k + 1],
                reference=reference[b, :size],
                recall_luck=recall_rows[b, : k + 1, :size],
                hallucination_rate=rate_rows[b, : k + 1],
                hallucination_tokens=spurious_rows[b, : k + 1],
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
        # in float64, a drawn task's float32 uniforms cast (as the batched env compares)
        recall_luck = np.asarray(task.recall_luck[turn], dtype=np.float64)
        recalled = task.reference[recall_luck < 0.3 + 0.7 * q]
        rate = float(task.hallucination_rate[turn])
        n_spurious = round(len(task.reference) * (1.0 - q) * rate)
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
