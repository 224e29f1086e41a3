"""ToolBench-v0 batched: every sub-env's turn as array operations.

The single env's dynamics (:class:`~cost_envs.envs.toolbench.ToolBenchEnv`), over the rows
of the sub-envs that step, with the single env's own helpers (``clear_probability``,
``observation_rows``, ``spurious_tokens``): a called tool clears the current stage when
its luck at this turn is below its clear probability; clearing the last stage composes the
answer with the strongest tool that cleared it, and the answer's multiset token F1 is
counted with array comparisons (the reference's r-th copy of a token is matched when the
answer holds more than r copies, which is ``token_f1``'s ``Counter`` intersection). The
tasks' draws stay in the queue (``self.blocks``) and are read at the turn they are needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_envs.envs.toolbench import (
    MAX_ANSWER_TOKENS,
    MAX_STAGES,
    MAX_TURNS,
    ToolBenchEnv,
    ToolBlock,
    clear_probability,
    observation_rows,
    spurious_tokens,
)
from cost_envs.vector.array_ops import any_per_row, pick
from cost_envs.vector.base import BatchedOrchestrationEnv

#: The queue stores tokens in 16 bits and topic positions in 8 (vocabulary 5000, 60
#: positions): a sub-env's block of 64 tasks then takes about 95 kB instead of 160.
_TOKEN = np.int16
_PICK = np.int8
#: ``_EARLIER[l, l']``: position l' comes before l.
_EARLIER = np.tri(MAX_ANSWER_TOKENS, k=-1, dtype=np.float32)


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
        n_stages, skill, difficulty = blocks.n_stages[rows], blocks.skill.take(rows, axis=0), (
            blocks.difficulty.take(rows, axis=0))
        self._p_clear[idx] = clear_probability(self._capabilities, skill, difficulty)
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
        length = blocks.length[task]
        # q = cap ** (1 + d) on the answer stage, as ToolBenchEnv.composer_strength (here,
        # for the answered tasks alone), of the strongest clearing tool (the first of equals:
        # the same value)
        last = blocks.n_stages[task] - 1
        caps = self._capabilities[:, pick(blocks.skill, task, last)].T
        strength = caps ** (1.0 + pick(blocks.difficulty, task, last))[:, None]
        q = np.where(cleared_by, strength, -np.inf).max(axis=1)
        positions = np.arange(MAX_ANSWER_TOKENS)
        reference = blocks.reference.take(task, axis=0)
        in_reference = positions < length[:, None]
        recalled = in_reference & (pick(blocks.recall_luck, task, turn) < 0.3 + 0.7 * q[:, None])
        n_spurious = np.rint(length * (1.0 - q) * pick(blocks.hallucination_rate, task, turn))
        spurious = spurious_tokens(reference, blocks.distractors.take(task, axis=0),
                                   pick(blocks.pick, task, turn).astype(np.int64), length)
        in_spurious = positions < n_spurious[:, None]
        # Counter(pred) & Counter(ref): the reference's r-th copy of a token (r counted
        # from 0 along the reference) is matched when the answer holds more than r copies.
        # Counts in float32 (exact: at most 40), much faster than boolean sums.
        same = (reference[:, :, None] == reference[:, None, :]).astype(np.float32)
        rank = np.einsum("bij,ij->bi", same, _EARLIER)  # earlier copies of each token
        copies = (same @ recalled[:, :, None].astype(np.float32)
                  + (reference[:, :, None] == spurious[:, None, :]).astype(np.float32)
                  @ in_spurious[:, :, None].astype(np.float32))[:, :, 0]
        overlap = (in_reference & (rank < copies)).sum(axis=1)
        n_predicted = recalled.sum(axis=1) + n_spurious.astype(np.int64)
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
