"""ToolBench-v0's dynamics as arrays over a block of tasks, for the single and batched envs.

:class:`~cost_envs.envs.toolbench.ToolBenchEnv` builds each task's tables with them and
:class:`~cost_envs.vector.toolbench.ToolBenchVectorEnv` calls them on the tasks its
sub-envs start (one home for each mechanism): the tasks' spurious tokens, the chance that a
tool clears a stage, and the observation rows of every stage.
"""

from __future__ import annotations

import numpy as np

SKILLS = ("retrieval", "math", "web", "code", "reasoning", "writing")
MAX_STAGES = 4
MAX_ANSWER_TOKENS = 20

#: ``_REAL[k, s]``: stage s is one of a task of k stages' own (not padding).
_REAL = np.arange(MAX_STAGES + 1)[:, None] > np.arange(MAX_STAGES)


def stage_codes(skill: np.ndarray, n_stages: np.ndarray) -> np.ndarray:
    """Each stage's skill, 6 on a padded stage (past ``n_stages``): the tables' row index.

    Shapes: ``skill`` ``(n, 4)`` (padded), ``n_stages`` ``(n,)``. A negative skill wraps
    (``% 6``), as indexing by it does.
    """
    return np.where(_REAL.take(n_stages, axis=0), skill % len(SKILLS), len(SKILLS))


def topic_columns(pick: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Each topic position's column of ``[reference | distractors]`` (20 + 40 columns).

    The topic of a task is its ``L`` reference tokens followed by ``2 L`` distractors:
    position ``p`` is column ``p`` when ``p < L``, else ``p + 20 - L`` (distractor
    ``p - L``). Shapes: ``pick`` ``(n, ...)``, ``length`` ``(n,)``; out ``pick``'s shape
    and dtype (columns below 60).
    """
    flat = pick.reshape(len(pick), -1)  # rows of positions: no short inner loops
    short = length[:, None].astype(pick.dtype)
    # p + (p >= L) (20 - L): many times faster than np.where on small integers
    return (flat + (flat >= short) * (MAX_ANSWER_TOKENS - short)).reshape(pick.shape)


def spurious_tokens(reference: np.ndarray, distractors: np.ndarray, pick: np.ndarray,
                    length: np.ndarray) -> np.ndarray:
    """The spurious tokens ``topic[pick]`` of a block of tasks, shape ``pick.shape``.

    Column :func:`topic_columns` of ``[reference | distractors]``: one ``take`` on that
    flat table.
    """
    n = len(pick)
    flat = pick.reshape(n, -1).astype(np.int64, copy=False)  # one dtype: no mixed casts
    table = np.concatenate((reference, distractors), axis=1)
    row = np.arange(0, table.size, table.shape[1])[:, None]
    return table.reshape(-1).take(row + topic_columns(flat, length)).reshape(pick.shape)


def capabilities_by_code(capabilities: np.ndarray) -> np.ndarray:
    """``(7, m)``: each skill's capabilities of the ``m`` tools, then zeros (padding's code)."""
    return np.concatenate((capabilities.T, np.zeros((1, len(capabilities)))))


def clear_probability(by_code: np.ndarray, codes: np.ndarray,
                      difficulty: np.ndarray) -> np.ndarray:
    """``p[b, s, i] = cap[i, skill] ** (1 + 3 d)``, the chance tool i clears stage s of task b.

    The tool clears it when its luck at that turn is below ``p``. Shapes: ``by_code`` (of
    :func:`capabilities_by_code`) ``(7, m)``; ``codes`` (of :func:`stage_codes`),
    ``difficulty`` ``(n, S)`` (padded); out ``(n, S, m)``. The power (most of the cost) is
    taken only where it matters: on a task's own stages (padding, never reached, gets 0)
    and for nonzero capabilities (``0 ** y = 0`` for ``y > 0``, as every difficulty in
    [0, 1] gives): about a third of the entries for the preset pools.
    """
    n, n_cols = codes.shape
    m = by_code.shape[1]
    caps = by_code.take(codes.reshape(-1), axis=0)  # (n S, m)
    exponent = 1.0 + 3.0 * difficulty.reshape(-1)
    need = caps > 0
    if np.fmin.reduce(exponent) <= 0:  # a task built by hand may have any difficulty
        need |= ((exponent <= 0) & (codes.reshape(-1) < len(SKILLS)))[:, None]
    at = np.flatnonzero(need)
    p = np.zeros(n * n_cols * m)
    p[at] = caps.reshape(-1).take(at) ** exponent.take(at // m)
    return p.reshape(n, n_cols, m)


def hit_table(by_code: np.ndarray, codes: np.ndarray, difficulty: np.ndarray,
              luck: np.ndarray) -> np.ndarray:
    """``hits[b, t, s, i]``: tool i clears stage s of task b if called at turn t.

    Its luck at that turn below its :func:`clear_probability`. Shapes: ``luck``
    ``(n, T, m)``, the rest as :func:`clear_probability`'s; out ``(n, T, S, m)`` bool.
    ``luck[:, :, None] < p[:, None]``, with each turn's luck repeated once per stage first:
    the comparison then runs over rows of ``S m`` contiguous entries rather than ``m``
    (several times faster; the same booleans).
    """
    n, turns, m = luck.shape
    p = clear_probability(by_code, codes, difficulty)
    return np.repeat(luck, p.shape[1], axis=1).reshape(n, turns, -1, m) < p[:, None]


def _row_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A task's ``(5, 17)`` rows (flattened) for ``observation_rows``: by count, by skills.

    ``[k]``: columns 1 (stages left / 4) and 2 (fraction cleared) of a task of ``k`` stages.
    Stage s needing skill j adds its one-hot in row s and a quarter in the
    ``remaining_skills`` count of rows 0..s (code 6, padding, adds nothing); ``[7 c + c']``
    of the next two tables: what stages 0 and 1 (2 and 3) of codes c and c' add together.
    """
    stages, n_skills = np.arange(MAX_STAGES + 1), len(SKILLS)
    by_count = np.zeros((MAX_STAGES + 1, MAX_STAGES + 1, 17), dtype=np.float32)
    by_count[:, :, 1] = np.maximum(stages[:, None] - stages, 0) / MAX_STAGES
    with np.errstate(invalid="ignore", divide="ignore"):  # k = 0: no drawn task has it
        by_count[:, :, 2] = np.minimum(stages / stages[:, None], 1.0)
    by_skill = np.zeros((MAX_STAGES, n_skills + 1, (MAX_STAGES + 1) * 17), dtype=np.float32)
    view = by_skill.reshape(MAX_STAGES, n_skills + 1, MAX_STAGES + 1, 17)
    for s, j in np.ndindex(MAX_STAGES, n_skills):
        view[s, j, s, 5 + j] = 1.0
        view[s, j, : s + 1, 11 + j] = 1.0 / MAX_STAGES
    first, last = ((by_skill[s][:, None] + by_skill[s + 1][None]).reshape(
        (n_skills + 1) ** 2, -1) for s in (0, 2))
    return by_count.reshape(MAX_STAGES + 1, -1), first, last


#: (exact sums: a column adds at most four quarters, or holds one 1 or one count entry)
_BY_COUNT, _BY_FIRST_PAIR, _BY_LAST_PAIR = _row_tables()
_PAIR = np.array([len(SKILLS) + 1, 1, len(SKILLS) + 1, 1])  # codes (c, c') -> 7 c + c'


def observation_rows(codes: np.ndarray, difficulty: np.ndarray,
                     n_stages: np.ndarray) -> np.ndarray:
    """``rows[b, s]``: task b's observation at stage s but for the turn and failure entries.

    Shapes: ``codes`` (of :func:`stage_codes`), ``difficulty`` ``(n, 4)`` (padded),
    ``n_stages`` ``(n,)``; out ``(n, 5, 17)`` float32 (stage 4: all stages cleared).

    The rows are sums of table rows: what stages 0 and 1, and 2 and 3, add (their skills'
    one-hots and quarters of the remaining-skill counts) and the columns that depend on
    the stage count alone.
    """
    n = len(codes)
    pair = codes * _PAIR
    rows = _BY_FIRST_PAIR.take(pair[:, 0] + pair[:, 1], axis=0)
    rows += _BY_LAST_PAIR.take(pair[:, 2] + pair[:, 3], axis=0)
    rows += _BY_COUNT.take(n_stages, axis=0)
    rows = rows.reshape(n, MAX_STAGES + 1, 17)
    rows[:, :MAX_STAGES, 4] = difficulty * (codes < len(SKILLS))
    return rows
