"""ToolBench-v0 batched: every sub-env's turn as array operations.

The single env's dynamics (:class:`~cost_envs.envs.toolbench.ToolBenchEnv`), over the rows
of the sub-envs that step, with the single env's own helpers (``hit_table`` and
``topic_columns`` of :mod:`cost_envs.envs.toolbench_tables`, ``observation_table`` of its
module, with the ``cleared_difficulties`` option's slots if asked): a
called tool clears the current stage when its luck at this turn is below its clear
probability; clearing the last stage composes the answer with the strongest tool that
cleared it, and the answer's multiset token F1 counts ``token_f1``'s ``Counter``
intersection with a table of token classes and ``bincount`` (``_overlap``). The tasks
stay in the queue (``self.blocks``, a :class:`ToolQueue`: the draws, or what the single
env derives from them once per task, such as the hit table) and are read at the turn
they are needed. Each sub-env's block of tasks is one call of its own generator (the single
env's ``draw_calls``: a row of float32 uniforms per task); one ``derive_block`` turns the
rows of every sub-env refilling in a pass into tasks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cost_envs.envs.toolbench import (
    MAX_TURNS,
    VOCAB,
    ToolBenchEnv,
    ToolBlock,
    derive_block,
    observation_table,
    uniform_count,
)
from cost_envs.envs.toolbench_tables import (
    MAX_ANSWER_TOKENS,
    MAX_STAGES,
    capabilities_by_code,
    hit_table,
    stage_codes,
    topic_columns,
)
from cost_envs.vector.array_ops import any_per_row
from cost_envs.vector.base import REFILL_CHUNK, BatchedOrchestrationEnv

#: The queue stores tokens in 16 bits and topic columns, stage counts, stage codes and
#: answer lengths in 8 (vocabulary 5000, 60 columns, 4 stages, 7 codes, 20 tokens), the hit
#: table in bits; the composer's uniforms as drawn (float32, compared in float64), the
#: difficulties as derived (float64). A sub-env's block of 64 tasks then takes 18 kB (8
#: tools; 72 kB before the composer's draws were the task's float32 uniforms, 160 before
#: that).
_TOKEN = np.int16
_SMALL = np.int8
_POSITIONS = np.arange(MAX_ANSWER_TOKENS)
#: ``_FIRST[r]``: the first r of 20 positions (a task's answer length, its spurious count)
_FIRST = np.arange(MAX_ANSWER_TOKENS + 1)[:, None] > _POSITIONS
_TOPIC = 3 * MAX_ANSWER_TOKENS  # a task's reference and distractors
_ONES = np.ones(MAX_ANSWER_TOKENS, dtype=np.float32)
_ONES64 = np.ones(MAX_ANSWER_TOKENS)  # counts summed by a matmul (exact: at most 20)
#: Tasks whose answer overlap one table holds at once (2 bytes x 5000 tokens each: 20 MB)
_OVERLAP_CHUNK = 2048


def pack_tools(hits: np.ndarray) -> np.ndarray:
    """``np.packbits(hits, axis=-1, bitorder="little")``: the last axis's bits in bytes.

    When that axis fills whole bytes (8 or 16 tools), one pass over the flat array (the
    same bytes, several times faster than packing along an axis).
    """
    m = hits.shape[-1]
    if m % 8 == 0 and hits.flags.c_contiguous:
        return np.packbits(hits.reshape(-1), bitorder="little").reshape(*hits.shape[:-1], m // 8)
    return np.packbits(hits, axis=-1, bitorder="little")


class ToolQueue(NamedTuple):
    """What the batched env queues of each task: its :class:`ToolBlock` as a step reads it.

    ``ToolBlock``'s fields but these: ``codes``, the stages' :func:`stage_codes` (the
    skill, 6 on a padded stage) instead of ``skill``; ``hits``, the single env's hit table
    (``hit_table``: tool i clears stage s if called at turn t), its tools' bits packed
    little-endian (``np.packbits(..., bitorder="little")``: bit i of byte i // 8), instead
    of the ``luck`` it is computed from; ``topic``, ``[reference | distractors]``, and
    ``topic_column``, each spurious token's column of it (:func:`topic_columns` of
    ``pick``), instead of ``reference``, ``distractors`` and ``pick``. Shapes: ``hits``
    ``(n, 5, 4, ceil(m / 8))`` uint8, ``topic`` ``(n, 60)``, ``topic_column``
    ``(n, 20)``, the rest as ``ToolBlock``'s (``recall_luck`` ``(n, 20)`` and
    ``hallucination_rate`` ``(n,)``: the task's float32 uniforms).
    """

    n_stages: np.ndarray
    codes: np.ndarray
    difficulty: np.ndarray
    hits: np.ndarray
    length: np.ndarray
    topic: np.ndarray
    topic_column: np.ndarray
    recall_luck: np.ndarray
    hallucination_rate: np.ndarray


class ToolBenchVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` ToolBench-v0 envs stepped together with numpy.

    A :class:`~cost_envs.vector.base.BatchedOrchestrationEnv` of ``ToolBenchEnv``: its
    keywords are that env's arguments (``pool``, ``pool_size``, ``f1_threshold``,
    ``reward_weights``, ``cleared_difficulties``).
    """

    env_class = ToolBenchEnv
    single_env: ToolBenchEnv
    observe_all = True

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n = self.num_envs
        self.f1_threshold = self.single_env.f1_threshold
        # row j: skill j's capabilities of the tools
        self._by_code = capabilities_by_code(self.single_env.pool.capabilities)
        # _overlap's table of token classes (grown to the tasks of a chunk), and each
        # task's class labels: 1 + its row in the chunk * 20 + a position (0: no class)
        chunk = min(n, _OVERLAP_CHUNK)
        self._classes = np.zeros(0, dtype=np.min_scalar_type(chunk * MAX_ANSWER_TOKENS))
        self._labels = (1 + np.arange(chunk * MAX_ANSWER_TOKENS)).reshape(chunk, -1).astype(
            self._classes.dtype)
        self._token_rows = np.arange(chunk)[:, None] * VOCAB
        self._topic_rows = np.arange(n)[:, None] * _TOPIC  # of _answer_f1's topics
        self._stage = np.zeros(n, dtype=np.int64)
        self._failed = np.zeros(n, dtype=np.int64)
        self._n_stages = np.zeros(n, dtype=np.int64)
        self._rows = np.zeros((n, MAX_STAGES + 1, *self.single_observation_space.shape),
                              dtype=np.float32)
        self._first_row = np.arange(n) * (MAX_STAGES + 1)  # of each sub-env's rows
        self._scratch: np.ndarray | None = None  # _refill's uniforms

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.single_env.draw_calls(rng, n)

    def _draw_many(self, rngs: list[np.random.Generator], n: int) -> np.ndarray:
        return np.concatenate([self._draw(rng, n) for rng in rngs])

    def _derive(self, draws: np.ndarray) -> ToolQueue:
        block = derive_block(draws, self.n_agents)
        return self._queued_fields(block)

    def _queued_fields(self, block: ToolBlock) -> ToolQueue:
        """What the queue holds of a derived block, in its dtypes (the one home of that).

        The stage codes, the hit table packed, the topic and the topic columns of the
        spurious picks, the block's own counts, difficulties and lengths, and the
        composer's uniforms as drawn: what :meth:`_derive` and :meth:`_refill` both queue.
        """
        codes = stage_codes(block.skill, block.n_stages)
        hits = pack_tools(hit_table(self._by_code, codes, block.difficulty, block.luck))
        topic = np.concatenate((block.reference, block.distractors), axis=1)
        return ToolQueue(
            n_stages=block.n_stages.astype(_SMALL), codes=codes.astype(_SMALL),
            difficulty=block.difficulty, hits=hits, length=block.length.astype(_SMALL),
            topic=topic.astype(_TOKEN, copy=False),
            topic_column=topic_columns(block.pick, block.length.astype(_SMALL)),
            recall_luck=block.recall_luck, hallucination_rate=block.hallucination_rate)

    def _queue(self) -> ToolQueue:
        """The empty queue: ``_derive``'s arrays, ``task_block`` rows per sub-env, zeros."""
        rows, m = self.num_envs * self.task_block, self.n_agents
        return ToolQueue(
            n_stages=np.zeros(rows, _SMALL), codes=np.zeros((rows, MAX_STAGES), _SMALL),
            difficulty=np.zeros((rows, MAX_STAGES)),
            hits=np.zeros((rows, MAX_TURNS, MAX_STAGES, (m + 7) // 8), np.uint8),
            length=np.zeros(rows, _SMALL), topic=np.zeros((rows, _TOPIC), _TOKEN),
            topic_column=np.zeros((rows, MAX_ANSWER_TOKENS), _SMALL),
            recall_luck=np.zeros((rows, MAX_ANSWER_TOKENS), np.float32),
            hallucination_rate=np.zeros(rows, np.float32))

    def _refill(self, ids: list[int]) -> None:
        """The base's refill (the same generator calls, the same queue), without copies.

        Each sub-env's block is one call of its generator (``draw_calls``), drawn into a
        scratch array kept between refills; the rows of a pass's sub-envs are derived
        together by one ``derive_block`` and written with one assignment per queued array.
        """
        size, m = self.task_block, self.n_agents
        if self.blocks is None:  # zeros: pages are committed as the queues fill
            self.blocks = self._queue()
        chunk_size = min(REFILL_CHUNK, self.num_envs)
        if self._scratch is None:
            self._scratch = np.empty((chunk_size, size, uniform_count(m)), np.float32)
        scratch = self._scratch
        draw_calls = self.single_env.draw_calls
        for start in range(0, len(ids), chunk_size):
            chunk = ids[start:start + chunk_size]
            k = len(chunk)
            for j, i in enumerate(chunk):
                draw_calls(self._generator(i), size, scratch[j])
            queued = self._queued_fields(derive_block(scratch[:k].reshape(k * size, -1), m))
            at = (np.asarray(chunk)[:, None] * size + np.arange(size)).reshape(-1)
            for block, value in zip(self.blocks, queued, strict=True):
                block[at] = value
            self._queued[chunk] = 0

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        blocks = self.blocks
        # the small integers as queued: indices, and promoted to int64 or float64 by what
        # they meet (the values of the single env's int64)
        n_stages = blocks.n_stages.take(rows)
        self._rows[idx] = observation_table(blocks.codes.take(rows, axis=0),
                                            blocks.difficulty.take(rows, axis=0), n_stages,
                                            self.single_env.cleared_difficulties)
        self._stage[idx] = 0
        self._failed[idx] = 0
        self._n_stages[idx] = n_stages

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = len(idx)
        turn, stage, n_stages = self._turn[idx], self._stage[idx], self._n_stages[idx]
        called = calls != 0
        # all-zero action: answer now, a failure
        answered = ~any_per_row(called) if self._step_codes is None else self._step_codes == 0
        # the single env's hit table, row (turn, stage) alone (stage < n_stages while it
        # steps), its bits unpacked
        hits = self.blocks.hits
        at = (self._task[idx] * MAX_TURNS + turn) * MAX_STAGES + stage
        hits = np.unpackbits(hits.reshape(-1, hits.shape[-1]).take(at, axis=0), axis=1,
                             count=self.n_agents, bitorder="little").view(np.bool_)
        cleared_by = called & hits
        cleared = any_per_row(cleared_by)
        stage = stage + cleared
        complete = cleared & (stage == n_stages)
        out_of_turns = ~answered & ~complete & (turn >= n_stages)  # turn + 1 >= horizon
        self._stage[idx] = stage
        self._failed[idx] = ~(answered | cleared)
        success = np.zeros(k, dtype=np.bool_)
        quality = np.zeros(k)
        if complete.any():
            at = complete.nonzero()[0]
            f1 = self._answer_f1(idx[at], cleared_by[at])
            success[at] = f1 >= self.f1_threshold
            quality[at] = 10.0 * f1
        return answered | complete | out_of_turns, success, quality

    def _answer_f1(self, idx: np.ndarray, cleared_by: np.ndarray) -> np.ndarray:
        """Token F1 of the answers the strongest clearing tools compose (``token_f1``)."""
        blocks, task = self.blocks, self._task[idx]
        length = blocks.length.take(task)  # int8: promoted exactly where it meets others
        # q = cap ** (1 + d) on the answer stage, as ToolBenchEnv.composer_strength (here,
        # for the answered tasks alone), of the strongest clearing tool (the first of equals:
        # the same value)
        last = task * MAX_STAGES + self._n_stages[idx] - 1
        caps = self._by_code.take(blocks.codes.reshape(-1).take(last), axis=0)
        strength = caps ** (1.0 + blocks.difficulty.reshape(-1).take(last))[:, None]
        q = np.where(cleared_by, strength, -np.inf).max(axis=1)
        topic = blocks.topic.take(task, axis=0)
        reference = topic[:, :MAX_ANSWER_TOKENS]
        in_reference = _FIRST.take(length, axis=0)
        # the composer's draws are the task's (whatever the turn), float32 compared in
        # float64 as the single env does
        recall_luck = blocks.recall_luck.take(task, axis=0)
        recalled = in_reference & (recall_luck < 0.3 + 0.7 * q[:, None])
        n_spurious = np.rint(length * (1.0 - q) * blocks.hallucination_rate.take(task))
        n_spurious = n_spurious.astype(np.int64)
        # the spurious tokens up to the most any answer holds (about 7 of 20)
        width = int(n_spurious.max())
        # spurious_tokens, the columns of the topic known from the queue
        columns = blocks.topic_column.take(task, axis=0)
        spurious = topic.reshape(-1).take(self._topic_rows[:len(task)] + columns[:, :width])
        overlap = self._overlap(reference, in_reference, recalled, spurious,
                                _FIRST.take(n_spurious, axis=0)[:, :width])
        n_predicted = (recalled.astype(np.float32) @ _ONES).astype(np.int64) + n_spurious
        precision = overlap / np.maximum(n_predicted, 1)
        recall = overlap / length
        # 2PR / (P + R) where the overlap is not 0 (P + R = 0 exactly where it is); else
        # 2PR, which is 0 there
        f1 = 2 * precision * recall
        return np.divide(f1, precision + recall, out=f1, where=overlap != 0)

    def _overlap(self, reference: np.ndarray, in_reference: np.ndarray, recalled: np.ndarray,
                 spurious: np.ndarray, in_spurious: np.ndarray) -> np.ndarray:
        """``|Counter(answer) & Counter(reference)|`` of each task, as ``token_f1`` counts.

        The answer is the recalled reference tokens and the spurious ones. The sum over
        the reference's distinct tokens of min(copies in the reference, copies in the
        answer): a table maps (task, token) to a class label, written at the reference's
        tokens (one of the positions that hold the token: the same label for all of them),
        read for the reference's and the spurious tokens (0 for a token not in the
        reference), then reset; ``bincount`` counts each class's copies (a label written
        only by a position past the answer length counts no reference copy: min 0).
        """
        k, width = reference.shape
        if k > _OVERLAP_CHUNK:  # the table takes 5000 entries a task: bound it
            return np.concatenate([self._overlap(
                *(a[at:at + _OVERLAP_CHUNK] for a in (reference, in_reference, recalled,
                                                       spurious, in_spurious)))
                for at in range(0, k, _OVERLAP_CHUNK)])
        if len(self._classes) < k * VOCAB:
            self._classes = np.zeros(k * VOCAB, dtype=self._classes.dtype)
        table = self._classes
        keys = self._token_rows[:k] + reference
        table[keys] = self._labels[:k]
        classes = table.take(keys)
        spurious_classes = table.take(self._token_rows[:k] + spurious)
        table[keys] = 0
        size = k * width + 1
        n_reference = np.bincount(classes.reshape(-1), in_reference.reshape(-1), size)
        n_answer = np.bincount(
            np.concatenate((classes, spurious_classes), axis=1).reshape(-1),
            np.concatenate((recalled, in_spurious), axis=1).reshape(-1), size)
        common = np.minimum(n_reference, n_answer)[1:].reshape(k, width)
        return (common @ _ONES64).astype(np.int64)

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        first = self._first_row[idx]
        obs = self._rows.reshape(-1, self._rows.shape[-1]).take(first + self._stage[idx], axis=0)
        obs[:, 0] = (self._n_stages[idx] + 1 - self._turn[idx]) / MAX_TURNS
        obs[:, 3] = self._failed[idx]
        return obs

