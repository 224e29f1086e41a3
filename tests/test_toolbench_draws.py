"""ToolBench-v0's task draw (issue #37): rows of float32 uniforms, turned into tasks exactly.

A block of tasks is one generator call (``draw_calls``: a row of ``K`` uniforms a task) and
``derive_block`` turns each row into its task elementwise. These tests hold each transform
to the law it stands for on grids of uniforms (so they are exact, not statistical): the
integers ``floor(k u)`` in range and uniform, the median of three uniforms Beta(2, 2)'s
CDF, Box-Muller pairs the normal's quantiles; and the composer's draws the task's (the
same at every turn) while a tool's luck is each turn's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils import seeding

import cost_envs  # noqa: F401  (registers the ids)
from cost_envs.envs.toolbench import (
    MAX_ANSWER_TOKENS,
    MAX_TURNS,
    STAGE_COUNTS,
    STAGE_DIFFICULTY_NOISE,
    box_muller,
    derive_block,
    floor_times,
    median_of_three,
    uniform_columns,
    uniform_count,
    with_fresh_luck,
)

#: Every float32 uniform numpy draws: ``j / 2**24``, ``j = 0 .. 2**24 - 1``.
_GRID = np.arange(2**24, dtype=np.float32) / np.float32(2**24)


def _rows(n: int, m: int = 8, fill: float = 0.5) -> np.ndarray:
    return np.full((n, uniform_count(m)), fill, dtype=np.float32)


def test_a_task_is_a_row_of_k_uniforms_one_call_a_block() -> None:
    env = gym.make("cost_envs/ToolBench-v0").unwrapped
    columns = uniform_columns(8)
    assert uniform_count(8) == 155 and uniform_count(12) == 175
    widths = [c.stop - c.start for c in columns.values()]
    assert sum(widths) == 155 and columns["luck"] == slice(115, 155)
    assert [c.start for c in columns.values()] == list(np.cumsum([0, *widths[:-1]]))
    calls = []

    class Counting(np.random.Generator):
        def random(self, *args, **kwargs):
            calls.append((args, kwargs.get("dtype")))
            return super().random(*args, **kwargs)

    block = env.draw_block(Counting(np.random.PCG64(0)), 64)
    assert calls == [(((64, 155),), np.float32)]
    assert block.luck.shape == (64, MAX_TURNS, 8) and block.luck.dtype == np.float32
    assert block.recall_luck.shape == (64, MAX_ANSWER_TOKENS)
    assert block.hallucination_rate.shape == (64,) and block.pick.shape == (64, 20)


@pytest.mark.parametrize("k", [2, 5, 13, 24, 57, 60, 5000])
def test_floor_integers_are_in_range_and_uniform_over_every_float32_uniform(k: int) -> None:
    # Over the whole grid of float32 uniforms j / 2**24, floor(k u) is exactly the integer
    # floor(j k / 2**24) and takes each of 0..k-1 within one count of 2**24 / k times
    # (uniform but for the grid's granularity). Breaks if the product is taken in float32
    # (it rounds up across an integer for some j: 1,860 of them for k = 5000), rounded
    # instead of floored (the ends get half their share, and k appears) or scaled wrong.
    got = floor_times(_GRID, k, np.int16)
    assert (got == (np.arange(2**24, dtype=np.int64) * k) >> 24).all()
    assert got.min() == 0 and got.max() == k - 1
    counts = np.bincount(got, minlength=k)
    assert len(counts) == k and counts.max() - counts.min() <= 1


def test_derive_block_floors_its_integers_at_the_top_of_the_grid() -> None:
    # the largest float32 uniform gives the largest integer of each range, never k
    rows = _rows(3)
    columns = uniform_columns(8)
    top = np.float32(1 - 2**-24)
    for name in ("stage_skill", "answer_skill", "reference", "distractors", "topic_pick"):
        rows[:, columns[name]] = top
    rows[:, columns["length"]] = np.array([[0.0], [0.5], [top]], np.float32)
    rows[:, columns["n_stages"]] = top
    block = derive_block(rows, 8)
    assert (block.reference == 4999).all() and (block.distractors == 4999).all()
    assert block.length.tolist() == [8, 14, 20] and block.n_stages.tolist() == [4, 4, 4]
    assert block.skill.tolist() == [[4, 4, 4, 5]] * 3  # stage skill 4, answer skill 5
    assert (block.pick == 3 * block.length[:, None] - 1).all()


def test_the_stage_count_takes_each_share_of_the_uniforms() -> None:
    rows = _rows(2**16)
    rows[:, uniform_columns(8)["n_stages"]] = (np.arange(2**16) / 2**16)[:, None]
    shares = np.bincount(derive_block(rows, 8).n_stages, minlength=5)[2:] / 2**16
    assert np.abs(shares - STAGE_COUNTS).max() <= 2**-16


def test_the_median_of_three_uniforms_has_beta_2_2s_cdf_on_a_grid() -> None:
    # Every triple of a grid of G uniforms: the median is below the grid's j-th point in
    # exactly G**3 (3 p**2 - 2 p**3) triples, p = j / G, Beta(2, 2)'s CDF. Breaks for the
    # mean (or any other mix) of the three, a min or max, the median of two.
    size = 48
    points = ((np.arange(size) + 0.5) / size).astype(np.float32)
    a, b, c = (x.reshape(-1) for x in np.meshgrid(points, points, points, indexing="ij"))
    median = median_of_three(a, b, c)
    for j in range(size + 1):
        below = int((median < j / size).sum())
        assert below == 3 * j**2 * (size - j) + j**3, j
    # derive_block's delta is that median (the noise's pairs at u = 0: radius 0)
    rows = _rows(len(a))
    columns = uniform_columns(8)
    rows[:, columns["delta"]] = np.stack((a, b, c), axis=1)
    rows[:, columns["noise"]] = 0.0
    difficulty = derive_block(rows, 8).difficulty
    assert (difficulty == median.astype(np.float64)[:, None]).all()


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def test_box_muller_pairs_give_the_normals_quantiles_on_a_grid() -> None:
    # The midpoints of a G x G grid of (u, v): each output column's CDF is the normal's,
    # and the pair's joint CDF the product (independent), to the grid's quadrature error
    # (below 1e-4 here).
    # Breaks for sqrt(-ln) instead of sqrt(-2 ln) (std 0.71), cos for both columns (equal,
    # not independent), a missing 2 pi.
    size = 256
    points = ((np.arange(size) + 0.5) / size).astype(np.float32)
    u, v = (x.reshape(-1) for x in np.meshgrid(points, points, indexing="ij"))
    z = box_muller(np.stack((u, v, v, u), axis=1))
    assert z.shape == (size * size, 4) and z.dtype == np.float64
    for x in (-2.5, -1.5, -1.0, -0.5, 0.0, 0.3, 1.0, 2.0):
        for column in range(4):
            assert abs(np.mean(z[:, column] <= x) - _phi(x)) < 5e-4, (x, column)
    for x, y in ((-1.0, 0.5), (0.0, 0.0), (1.0, -0.3)):
        joint = np.mean((z[:, 0] <= x) & (z[:, 1] <= y))
        assert abs(joint - _phi(x) * _phi(y)) < 5e-4, (x, y)
    assert box_muller(np.zeros((1, 2), np.float32)).tolist() == [[0.0, 0.0]]  # u = 0: finite
    # derive_block scales them by the noise and adds them to delta (0.5 here)
    rows = _rows(size * size)
    columns = uniform_columns(8)
    rows[:, columns["noise"]] = np.stack((u, v, v, u), axis=1)
    difficulty = derive_block(rows, 8).difficulty
    inner = (difficulty > 0) & (difficulty < 1)
    assert np.allclose((difficulty - 0.5)[inner], STAGE_DIFFICULTY_NOISE * z[inner])


def test_the_composer_draws_are_the_tasks_and_a_tools_luck_each_turns() -> None:
    # An answer is composed once per episode: its recall luck, hallucination rate and
    # spurious tokens are drawn once for the task (every turn's row the same), while
    # each tool's luck is drawn turn by turn. Breaks if the composer's draws go back to
    # one per turn, in the env or in with_fresh_luck.
    env = gym.make("cost_envs/ToolBench-v0")
    env.reset(seed=4)
    tasks = env.unwrapped.sample_tasks(200)
    rng = np.random.default_rng(5)
    for task in [*tasks[:100], *(with_fresh_luck(t, rng) for t in tasks[100:])]:
        turns = task.horizon
        assert task.recall_luck.shape == (turns, len(task.reference))
        assert task.hallucination_rate.shape == (turns,)
        assert task.hallucination_tokens.shape == (turns, MAX_ANSWER_TOKENS)
        for name in ("recall_luck", "hallucination_rate", "hallucination_tokens"):
            rows = getattr(task, name)
            assert (rows == rows[:1]).all(), name
        assert len(np.unique(task.luck, axis=0)) == turns  # a new row every turn
    # so the answer's F1 is the same whichever turn clears the last stage
    task = tasks[0]
    base = env.unwrapped
    qualities = set()
    for late in range(2):  # clear at turn k - 1, or fail one turn first (the spare turn)
        base.reset(options={"task": replace(task, luck=np.zeros_like(task.luck))})
        cheap = int(np.argmin(base.pool.capabilities[:, task.stage_skill[0]]))
        if late:
            assert base.pool.capabilities[cheap, task.stage_skill[0]] == 0
            env.step(np.eye(8, dtype=np.int8)[cheap])
        for _ in range(task.n_stages):
            *_, terminated, _, info = env.step(np.ones(8, dtype=np.int8))
        assert terminated
        qualities.add(info["quality"])
    assert len(qualities) == 1


def test_the_batched_queue_keeps_the_composers_uniforms_as_drawn() -> None:
    # one row of the queue per task (not per turn), the float32 values the single env
    # draws for sub-env 0 under the same seed
    vec = gym.make_vec("cost_envs/ToolBench-v0", 3, vectorization_mode="vector_entry_point")
    vec.reset(seed=9)
    queue = vec.unwrapped.blocks
    rng, _ = seeding.np_random(9)  # sub-env 0's generator, as reset(seed=9) seeds it
    tasks = [task for task, _ in gym.make("cost_envs/ToolBench-v0").unwrapped._generate_block(
        rng, 64)]
    assert queue.recall_luck.dtype == queue.hallucination_rate.dtype == np.float32
    assert queue.recall_luck.shape == (3 * 64, MAX_ANSWER_TOKENS)
    for b, task in enumerate(tasks):
        size = len(task.reference)
        assert queue.recall_luck[b, :size].tobytes() == task.recall_luck[0].tobytes()
        assert queue.hallucination_rate[b] == task.hallucination_rate[0]


def test_a_blocks_derive_is_its_rows_of_the_refilled_queue() -> None:
    # _derive (one sub-env's block, the benchmark's per-block path) and _refill (every
    # refilling sub-env's rows in one derive_block) queue the same values and dtypes
    vec = gym.make_vec("cost_envs/ToolBench-v0", 20, vectorization_mode="vector_entry_point")
    vec.reset(seed=[3 * i for i in range(20)])  # two passes: 16 sub-envs, then 4
    batched = vec.unwrapped
    for i in (0, 7, 17):
        rng, _ = seeding.np_random(3 * i)
        alone = batched._derive(batched._draw(rng, 64))
        rows = slice(64 * i, 64 * (i + 1))
        for name, queued, derived in zip(alone._fields, batched.blocks, alone, strict=True):
            assert queued.dtype == derived.dtype, name
            assert queued[rows].tobytes() == np.ascontiguousarray(derived).tobytes(), name
