"""ToolBench-v0 batched: every sub-env's turn as array operations.

The single env's dynamics (:class:`~cost_envs.envs.toolbench.ToolBenchEnv`), over the rows
of the sub-envs that step: a called tool clears the current stage when its precomputed hit
(``_block_tables``, the single env's own) is set; clearing the last stage composes the
answer with the strongest tool that cleared it, and the answer's multiset token F1 is
counted with array comparisons (each predicted token counts when its rank among equal
predicted tokens is below its count in the reference, which is ``token_f1``'s
``Counter`` intersection).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_envs.envs.toolbench import (
    MAX_ANSWER_TOKENS,
    MAX_STAGES,
    MAX_TURNS,
    ToolBenchEnv,
    spurious_tokens,
)
from cost_envs.vector.base import BatchedOrchestrationEnv

#: The queue stores tokens in 16 bits and topic positions in 8 (vocabulary 5000, 60
#: positions): a sub-env's block of 64 tasks then takes about 95 kB instead of 160.
_TOKEN = np.int16
_PICK = np.int8


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

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n, m = self.num_envs, self.n_agents
        self.f1_threshold = self.single_env.f1_threshold
        self._capabilities = self.single_env.pool.capabilities  # (m, skills)
        self._stage = np.zeros(n, dtype=np.int64)
        self._failed = np.zeros(n, dtype=np.int64)
        self._n_stages = np.zeros(n, dtype=np.int64)
        self._hits = np.zeros((n, MAX_TURNS, MAX_STAGES, m), dtype=np.bool_)
        self._rows = np.zeros((n, MAX_STAGES + 1, 17), dtype=np.float32)
        self._strength = np.zeros((n, m))  # composer strength q of each tool
        self._length = np.zeros(n, dtype=np.int64)
        self._reference = np.zeros((n, MAX_ANSWER_TOKENS), dtype=_TOKEN)
        self._recall_luck = np.zeros((n, MAX_TURNS, MAX_ANSWER_TOKENS))
        self._hallucination = np.zeros((n, MAX_TURNS))
        self._spurious = np.zeros((n, MAX_TURNS, MAX_ANSWER_TOKENS), dtype=_TOKEN)

    def _draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        block = self.single_env.draw_block(rng, n)
        return block._replace(reference=block.reference.astype(_TOKEN),
                              distractors=block.distractors.astype(_TOKEN),
                              pick=block.pick.astype(_PICK))

    def _start(self, idx: np.ndarray, fields: tuple[np.ndarray, ...]) -> None:
        (n_stages, skill, difficulty, luck, length, reference, distractors, pick,
         recall_luck, hallucination) = fields
        hits, rows = self.single_env._block_tables(skill, difficulty, luck, n_stages)
        self._hits[idx], self._rows[idx] = hits[:, :, :MAX_STAGES], rows
        last = np.arange(len(idx)), n_stages - 1
        # q = cap ** (1 + d) on the answer stage, as ToolBenchEnv.composer_strength
        caps = self._capabilities[:, skill[last]].T
        self._strength[idx] = caps ** (1.0 + difficulty[last])[:, None]
        self._stage[idx] = 0
        self._failed[idx] = 0
        self._n_stages[idx] = n_stages
        self._length[idx] = length
        self._reference[idx] = reference
        self._recall_luck[idx] = recall_luck
        self._hallucination[idx] = hallucination
        self._spurious[idx] = spurious_tokens(reference, distractors, pick.astype(np.int64),
                                              length)

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = len(idx)
        turn, stage, n_stages = self._turn[idx], self._stage[idx], self._n_stages[idx]
        rows = np.arange(k)
        called = calls != 0
        answered = ~called.any(axis=1)  # all-zero action: answer now, a failure
        cleared_by = called & self._hits[idx, turn, np.minimum(stage, MAX_STAGES - 1)]
        cleared = cleared_by.any(axis=1)
        stage = stage + cleared
        complete = cleared & (stage == n_stages)
        out_of_turns = ~answered & ~complete & (turn + 1 >= n_stages + 1)
        self._stage[idx] = stage
        self._failed[idx] = np.where(answered | cleared, 0, 1)
        success = np.zeros(k, dtype=np.bool_)
        quality = np.zeros(k)
        if complete.any():
            at = rows[complete]
            f1 = self._answer_f1(idx[at], turn[at], cleared_by[at])
            success[at] = f1 >= self.f1_threshold
            quality[at] = 10.0 * f1
        return answered | complete | out_of_turns, success, quality

    def _answer_f1(self, idx: np.ndarray, turn: np.ndarray,
                   cleared_by: np.ndarray) -> np.ndarray:
        """Token F1 of the answers the strongest clearing tools compose (``token_f1``)."""
        k = len(idx)
        rows = np.arange(k)
        strength = np.where(cleared_by, self._strength[idx], -np.inf)
        q = strength[rows, np.argmax(strength, axis=1)]  # argmax: the first strongest, as max
        length = self._length[idx]
        positions = np.arange(MAX_ANSWER_TOKENS)
        reference = self._reference[idx]
        in_reference = positions < length[:, None]
        recalled = in_reference & (self._recall_luck[idx, turn] < 0.3 + 0.7 * q[:, None])
        n_spurious = np.rint(length * (1.0 - q) * self._hallucination[idx, turn])
        spurious = positions < n_spurious[:, None]
        predicted = np.concatenate((reference, self._spurious[idx, turn]), axis=1)
        in_prediction = np.concatenate((recalled, spurious), axis=1)
        # a predicted token counts when fewer equal tokens precede it in the prediction
        # than the reference holds: the multiset intersection of Counter(pred) & Counter(ref)
        same = (predicted[:, :, None] == predicted[:, None, :]) & in_prediction[:, None, :]
        rank = np.tril(same, k=-1).sum(axis=2)
        in_ref = ((predicted[:, :, None] == reference[:, None, :])
                  & in_reference[:, None, :]).sum(axis=2)
        overlap = (in_prediction & (rank < in_ref)).sum(axis=1)
        n_predicted = in_prediction.sum(axis=1)
        precision = overlap / np.maximum(n_predicted, 1)
        recall = overlap / length
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = 2 * precision * recall / (precision + recall)
        return np.where(overlap == 0, 0.0, f1)

    def _observe(self, idx: np.ndarray) -> np.ndarray:
        obs = self._rows[idx, self._stage[idx]]
        obs[:, 0] = (self._n_stages[idx] + 1 - self._turn[idx]) / MAX_TURNS
        obs[:, 3] = self._failed[idx]
        return obs
