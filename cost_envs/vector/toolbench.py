"""ToolBench-v0 batched: every sub-env's turn as array operations.

The single env's dynamics (:class:`~cost_envs.envs.toolbench.ToolBenchEnv`), over the rows
of the sub-envs that step, with the single env's own helpers (``clear_probability``,
``observation_rows``, ``spurious_tokens`` of :mod:`cost_envs.envs.toolbench_tables`): a
called tool clears the current stage when its luck at this turn is below its clear
probability; clearing the last stage composes the answer with the strongest tool that
cleared it, and the answer's multiset token F1 is counted with array comparisons (the
reference's r-th copy of a token is matched when the answer holds more than r copies,
which is ``token_f1``'s ``Counter`` intersection). The tasks' draws stay in the queue
(``self.blocks``) and are read at the turn they are needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_envs.envs.toolbench import MAX_TURNS, ToolBenchEnv, ToolBlock
from cost_envs.envs.toolbench_tables import (
    MAX_ANSWER_TOKENS,
    MAX_STAGES,
    clear_probability,
    observation_rows,
    spurious_tokens,
)
from cost_envs.vector.base import BatchedOrchestrationEnv, any_per_row, pick

#: The queue stores tokens in 16 bits and topic positions in 8 (vocabulary 5000, 60
#: positions): a sub-env's block of 64 tasks then takes about 95 kB instead of 160.
_TOKEN = np.int16
_PICK = np.int8
_POSITIONS = np.arange(MAX_ANSWER_TOKENS)
#: Columns of the answer comparison (``_answer_f1``): the answer's 20 recalled-reference
#: and 20 spurious slots, then the reference itself and 4 pad columns (64 bytes a row).
#: ``_COMPARE[i, j]`` keeps a column for reference token i: every answer slot, and the
#: reference's positions before i (its earlier copies); ``_WEIGHT`` counts the answer's
#: copies minus the earlier ones.
_COMPARE = np.concatenate([np.ones((MAX_ANSWER_TOKENS, 2 * MAX_ANSWER_TOKENS), np.bool_),
                           np.tri(MAX_ANSWER_TOKENS, k=-1, dtype=np.bool_),
                           np.zeros((MAX_ANSWER_TOKENS, 4), np.bool_)], axis=1)
_WEIGHT = np.concatenate([np.ones(2 * MAX_ANSWER_TOKENS), -np.ones(MAX_ANSWER_TOKENS),
                          np.zeros(4)]).astype(np.float32)
_ONES = np.ones(MAX_ANSWER_TOKENS, dtype=np.float32)


class ToolBenchVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` ToolBench-v0 envs stepped together with numpy.

    Same spaces per sub-env, same arguments, same trajectories as
    ``gym.make("cost_envs/ToolBench-v0", **kwargs)`` seeded alike (see
    :mod:`cost_envs.vector.base` for seeding, autoreset and ``info``).

    Args:
        num_envs: Number of sub-envs.
        autoreset_mode: ``gymnasium.vector.AutoresetMode`` (default ``NEXT_STEP``).
        **env_kwargs: ``ToolBenchEnv``'s arguments (``pool``, ``pool_size``,
            ``f1_threshold``, ``reward_weights``).
    """

    env_class = ToolBenchEnv
    single_env: ToolBenchEnv
    observe_all = True

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n, m = self.num_envs, self.n_agents
        self.f1_threshold = self.single_env.f1_threshold
        self._capabilities = self.single_env.pool.capabilities  # (m, skills)
        self._capabilities_by_skill = np.ascontiguousarray(self._capabilities.T)
        self._stage = np.zeros(n, dtype=np.int64)
        self._failed = np.zeros(n, dtype=np.int64)
        self._n_stages = np.zeros(n, dtype=np.int64)
        self._p_clear = np.zeros((n, MAX_STAGES, m))
        self._rows = np.zeros((n, MAX_STAGES + 1, 17), dtype=np.float32)
        # the task's luck, (turn, tool) rows of each sub-env: read a row a step from here
        # (small, cache-resident) rather than from the queue
        self._luck = np.zeros((n * MAX_TURNS, m))
        self._all = np.arange(n)

    def _draw(self, rng: np.random.Generator, n: int) -> ToolBlock:
        block = self.single_env.draw_block(rng, n)
        return block._replace(reference=block.reference.astype(_TOKEN),
                              distractors=block.distractors.astype(_TOKEN),
                              pick=block.pick.astype(_PICK))

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        blocks = self.blocks
        n_stages, skill, difficulty = blocks.n_stages.take(rows), blocks.skill.take(rows, axis=0), (
            blocks.difficulty.take(rows, axis=0))
        self._p_clear[idx] = clear_probability(self._capabilities, skill, difficulty, n_stages)
        self._rows[idx] = observation_rows(skill, difficulty, n_stages)
        self._stage[idx] = 0
        self._failed[idx] = 0
        self._n_stages[idx] = n_stages
        self._luck.reshape(-1, MAX_TURNS, self.n_agents)[idx] = blocks.luck.take(rows, axis=0)

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = len(idx)
        turn, stage, n_stages = self._turn[idx], self._stage[idx], self._n_stages[idx]
        called = calls != 0
        # all-zero action: answer now, a failure
        answered = ~any_per_row(called) if self._step_codes is None else self._step_codes == 0
        # the single env's hit table (_block_tables), row (turn, stage) alone
        hits = (self._luck.take(idx * MAX_TURNS + turn, axis=0)
                < pick(self._p_clear, idx, np.minimum(stage, MAX_STAGES - 1)))
        cleared_by = called & hits
        cleared = any_per_row(cleared_by)
        stage = stage + cleared
        complete = cleared & (stage == n_stages)
        out_of_turns = ~answered & ~complete & (turn + 1 >= n_stages + 1)
        self._stage[idx] = stage
        self._failed[idx] = np.where(answered | cleared, 0, 1)
        success = np.zeros(k, dtype=np.bool_)
        quality = np.zeros(k)
        if complete.any():
            at = complete.nonzero()[0]
            f1 = self._answer_f1(idx[at], turn[at], cleared_by[at])
            success[at] = f1 >= self.f1_threshold
            quality[at] = 10.0 * f1
        return answered | complete | out_of_turns, success, quality

    def _answer_f1(self, idx: np.ndarray, turn: np.ndarray,
                   cleared_by: np.ndarray) -> np.ndarray:
        """Token F1 of the answers the strongest clearing tools compose (``token_f1``)."""
        blocks, task = self.blocks, self._task[idx]
        k = len(task)
        length = blocks.length.take(task)
        # q = cap ** (1 + d) on the answer stage, as ToolBenchEnv.composer_strength (here,
        # for the answered tasks alone), of the strongest clearing tool (the first of equals:
        # the same value)
        last = task * MAX_STAGES + blocks.n_stages.take(task) - 1
        caps = self._capabilities_by_skill.take(blocks.skill.reshape(-1).take(last), axis=0)
        strength = caps ** (1.0 + blocks.difficulty.reshape(-1).take(last))[:, None]
        q = np.where(cleared_by, strength, -np.inf).max(axis=1)
        at = task * MAX_TURNS + turn  # the (task, turn) row of the per-turn draws
        reference = blocks.reference.take(task, axis=0)
        in_reference = length[:, None] > _POSITIONS
        recall_luck = blocks.recall_luck.reshape(-1, MAX_ANSWER_TOKENS).take(at, axis=0)
        recalled = in_reference & (recall_luck < 0.3 + 0.7 * q[:, None])
        n_spurious = np.rint(length * (1.0 - q) * blocks.hallucination_rate.reshape(-1).take(at))
        spurious = spurious_tokens(reference, blocks.distractors.take(task, axis=0),
                                   blocks.pick.reshape(-1, MAX_ANSWER_TOKENS).take(at, axis=0),
                                   length)
        # Counter(pred) & Counter(ref): the reference's r-th copy of a token (r counted
        # from 0 along the reference) is matched when the answer holds more than r copies.
        # One comparison of each reference token with the answer (tokens left out of it
        # are -1, no token) and with the reference; the counts in float32 (exact).
        compared = np.full((k, 64), -1, dtype=reference.dtype)
        compared[:, :MAX_ANSWER_TOKENS] = np.where(recalled, reference, -1)
        compared[:, MAX_ANSWER_TOKENS:2 * MAX_ANSWER_TOKENS] = np.where(
            n_spurious[:, None] > _POSITIONS, spurious, -1)
        compared[:, 2 * MAX_ANSWER_TOKENS:3 * MAX_ANSWER_TOKENS] = reference
        same = reference[:, :, None] == compared[:, None, :]
        same &= _COMPARE
        copies_over_rank = (same.astype(np.float32).reshape(-1, 64) @ _WEIGHT).reshape(k, -1)
        matched = in_reference & (copies_over_rank > 0)
        overlap = (matched.astype(np.float32) @ _ONES).astype(np.int64)
        n_predicted = (recalled.astype(np.float32) @ _ONES).astype(np.int64) + (
            n_spurious.astype(np.int64))
        precision = overlap / np.maximum(n_predicted, 1)
        recall = overlap / length
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = 2 * precision * recall / (precision + recall)
        return np.where(overlap == 0, 0.0, f1)

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        obs = pick(self._rows, self._all if isinstance(idx, slice) else idx, self._stage[idx])
        obs[:, 0] = (self._n_stages[idx] + 1 - self._turn[idx]) / MAX_TURNS
        obs[:, 3] = self._failed[idx]
        return obs
