"""ToolBench's array helpers (envs/toolbench_tables) and the batched F1's overlap, bit for bit.

Each fast path is checked against the plain formula it replaces, on random blocks and on
cases built to stress it: repeated tokens, padded stages, every stage count, difficulties
that make the clear exponent non-positive.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cost_envs.envs.toolbench import (
    MAX_ANSWER_TOKENS,
    MAX_STAGES,
    SKILLS,
    ToolBenchEnv,
    toolbench_pool,
    uniform_count,
)
from cost_envs.envs.toolbench_tables import (
    capabilities_by_code,
    clear_probability,
    hit_table,
    observation_rows,
    spurious_tokens,
    stage_codes,
)
from cost_envs.vector import toolbench as toolbench_vector
from cost_envs.vector.toolbench import ToolBenchVectorEnv


def _stages(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_stages = rng.integers(0, MAX_STAGES + 1, n)
    skill = rng.integers(0, len(SKILLS), (n, MAX_STAGES))
    difficulty = rng.random((n, MAX_STAGES))
    return skill, difficulty, n_stages


@pytest.mark.parametrize("pool_size", [3, 8, 12])
def test_clear_probability_is_the_power_on_real_stages(pool_size: int) -> None:
    rng = np.random.default_rng(pool_size)
    capabilities = toolbench_pool(pool_size).capabilities
    skill, difficulty, n_stages = _stages(rng, 500)
    difficulty[:5] = -0.5  # built by hand: exponent < 0, so 0 ** y is inf, not 0
    with np.errstate(divide="ignore"):  # as the single env's own power warns
        got = clear_probability(capabilities_by_code(capabilities),
                                stage_codes(skill, n_stages), difficulty)
        want = np.moveaxis(capabilities[:, skill], 0, -1) ** (1.0 + 3.0 * difficulty[:, :, None])
    real = np.arange(MAX_STAGES) < n_stages[:, None]
    assert got[real].tobytes() == want[real].tobytes()
    assert not got[~real].any()  # padding, never read


def test_observation_rows_match_their_definition() -> None:
    rng = np.random.default_rng(1)
    skill, difficulty, n_stages = _stages(rng, 400)
    got = observation_rows(stage_codes(skill, n_stages), difficulty, n_stages)
    want = np.zeros((len(skill), MAX_STAGES + 1, 17), dtype=np.float32)
    for b in range(len(skill)):
        k = n_stages[b]
        for s in range(MAX_STAGES + 1):
            want[b, s, 1] = max(k - s, 0) / MAX_STAGES
            with np.errstate(invalid="ignore", divide="ignore"):
                want[b, s, 2] = np.minimum(np.float64(s) / k, 1.0)
            if s < k:
                want[b, s, 4] = difficulty[b, s]
                want[b, s, 5 + skill[b, s]] = 1.0
                for later in range(s, k):
                    want[b, s, 11 + skill[b, later]] += 1.0 / MAX_STAGES
    assert got.tobytes() == want.tobytes()


def test_spurious_tokens_index_the_topic() -> None:
    rng = np.random.default_rng(2)
    n = 300
    length = rng.integers(8, MAX_ANSWER_TOKENS + 1, n)
    reference = rng.integers(0, 5000, (n, MAX_ANSWER_TOKENS)).astype(np.int16)
    distractors = rng.integers(0, 5000, (n, 2 * MAX_ANSWER_TOKENS)).astype(np.int16)
    pick = (rng.random((n, 5, MAX_ANSWER_TOKENS)) * (3 * length)[:, None, None]).astype(np.int8)
    got = spurious_tokens(reference, distractors, pick, length)
    assert got.shape == pick.shape and got.dtype == np.int16
    for b in range(n):
        topic = np.concatenate((reference[b, :length[b]], distractors[b, :2 * length[b]]))
        assert (got[b] == topic[pick[b]]).all()


@pytest.mark.parametrize("chunk", [None, 5])
@pytest.mark.parametrize("vocabulary", [2, 5, 40, 5000])
def test_overlap_is_the_multiset_intersection(vocabulary: int, chunk: int | None,
                                              monkeypatch) -> None:
    if chunk is not None:  # more tasks than a table holds: counted a chunk at a time
        monkeypatch.setattr(toolbench_vector, "_OVERLAP_CHUNK", chunk)
    env = ToolBenchVectorEnv(32)
    assert len(env._labels) == (32 if chunk is None else chunk)
    rng = np.random.default_rng(vocabulary)
    for _ in range(40):
        k = int(rng.integers(1, 33))
        reference = rng.integers(0, vocabulary, (k, MAX_ANSWER_TOKENS)).astype(np.int16)
        spurious = rng.integers(0, vocabulary, (k, MAX_ANSWER_TOKENS)).astype(np.int16)
        length = rng.integers(8, MAX_ANSWER_TOKENS + 1, k)
        n_spurious = rng.integers(0, MAX_ANSWER_TOKENS + 1, k)
        in_reference = np.arange(MAX_ANSWER_TOKENS) < length[:, None]
        recalled = in_reference & (rng.random((k, MAX_ANSWER_TOKENS)) < rng.random())
        in_spurious = np.arange(MAX_ANSWER_TOKENS) < n_spurious[:, None]
        got = env._overlap(reference, in_reference, recalled, spurious, in_spurious)
        for b in range(k):
            answer = reference[b][recalled[b]].tolist() + spurious[b, :n_spurious[b]].tolist()
            common = Counter(answer) & Counter(reference[b, :length[b]].tolist())
            assert got[b] == sum(common.values())
        assert not env._classes.any()  # the table is left clean for the next call


@pytest.mark.parametrize("pool_size", [3, 8, 12])
def test_hit_table_is_the_luck_below_the_clear_probability(pool_size: int) -> None:
    # the batched queue keeps this table instead of the luck (issue #37)
    rng = np.random.default_rng(pool_size)
    by_code = capabilities_by_code(toolbench_pool(pool_size).capabilities)
    skill, difficulty, n_stages = _stages(rng, 300)
    codes = stage_codes(skill, n_stages)
    luck = rng.random((300, MAX_STAGES + 1, pool_size))
    got = hit_table(by_code, codes, difficulty, luck)
    p = clear_probability(by_code, codes, difficulty)
    want = luck[:, :, None, :] < p[:, None, :, :]
    assert got.shape == want.shape and (got == want).all()


@pytest.mark.parametrize("m", [1, 3, 8, 12, 16, 24])
def test_pack_tools_is_packbits_along_the_tools(m: int) -> None:
    rng = np.random.default_rng(m)
    hits = rng.random((50, 5, 4, m)) < 0.5
    want = np.packbits(hits, axis=-1, bitorder="little")
    for array in (hits, hits[::2]):  # contiguous, and not
        got = toolbench_vector.pack_tools(array)
        assert got.dtype == np.uint8 and got.tobytes() == np.ascontiguousarray(
            want[:: 1 if array is hits else 2]).tobytes()
    unpacked = np.unpackbits(toolbench_vector.pack_tools(hits), axis=-1, count=m,
                             bitorder="little")
    assert (unpacked.view(np.bool_) == hits).all()  # what _transition reads back


def test_draws_into_given_arrays_are_the_same_draws() -> None:
    # draw_calls(out=...) (the batched refill's uniforms, drawn into its scratch) consumes
    # the generator as draw_calls() does and returns the same values
    env = ToolBenchEnv(pool_size=5)
    plain, into = np.random.default_rng(3), np.random.default_rng(3)
    want = env.draw_calls(plain, 7)
    assert want.shape == (7, uniform_count(5)) == (7, 140) and want.dtype == np.float32
    out = np.empty((7, uniform_count(5)), np.float32)
    got = env.draw_calls(into, 7, out)
    assert got is out and got.tobytes() == want.tobytes()
    assert plain.random() == into.random()
    with pytest.raises(ValueError, match="size must match"):  # numpy refuses another shape
        env.draw_calls(into, 6, out)
