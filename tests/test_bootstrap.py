"""The one bootstrap engine: block sizes, the percentile step, the interval type, and the
same keyword-only arguments for every bootstrap (episodes, runs, means, routing)."""

from __future__ import annotations

import numpy as np
import pytest

from cost_envs.metrics import EpisodeRecord
from cost_envs.metrics.bootstrap import (
    Interval,
    bootstrap_ci,
    bootstrap_cis,
    bootstrap_cis_over_runs,
    bootstrap_mean_ci,
    check_bootstrap_args,
    percentile_interval,
    resample_blocks,
)
from cost_envs.metrics.routing import bootstrap_routing


def _records(n: int, seed: int) -> list[EpisodeRecord]:
    rng = np.random.default_rng(seed)
    return [EpisodeRecord(success=bool(rng.random() < 0.6), quality=float(rng.random() * 10),
                          cost=float(rng.random()), flops=float(rng.random() * 1e12),
                          calls=np.array([1, 0]), length=1) for _ in range(n)]


def test_blocks_cover_every_resample_within_the_memory_bound() -> None:
    assert list(resample_blocks(10, 3, block_cells=7)) == [2, 2, 2, 2, 2]
    assert list(resample_blocks(5, 100, block_cells=7)) == [1] * 5  # at least one resample
    assert list(resample_blocks(1000, 400)) == [1000]
    sizes = list(resample_blocks(12_345, 1000, block_cells=1 << 16))
    assert sum(sizes) == 12_345 and max(sizes) * 1000 <= 1 << 16


def test_block_size_does_not_change_what_is_resampled_when_one_block_fits() -> None:
    # The engine's blocks are the only place a stream is cut: with one block, the draws
    # are exactly rng.integers(0, n, (n_resamples, n)).
    values = np.random.default_rng(0).random(50)
    mean, low, high = bootstrap_mean_ci(values, n_resamples=300, seed=4)
    rng = np.random.default_rng(4)
    means = values[rng.integers(0, 50, size=(300, 50))].mean(axis=1)
    expected = np.quantile(means, [0.025, 0.975])
    assert (low, high) == (min(float(expected[0]), mean), max(float(expected[1]), mean))


def test_percentile_interval_is_an_interval_over_concatenated_blocks() -> None:
    blocks = [np.arange(0.0, 50.0), np.arange(50.0, 101.0)]
    interval = percentile_interval(blocks, 0.9)
    assert isinstance(interval, Interval)
    assert interval == pytest.approx((5.0, 95.0)) and interval.high == 95.0
    assert percentile_interval(np.arange(0.0, 101.0), 0.9) == interval


def test_every_episode_bootstrap_returns_intervals() -> None:
    records = _records(60, 1)
    assert all(isinstance(i, Interval) for i in bootstrap_cis(records, n_resamples=50))
    assert isinstance(bootstrap_ci(records, "cps", n_resamples=50), Interval)
    runs = [_records(20, s) for s in range(3)]
    assert all(isinstance(i, Interval)
               for i in bootstrap_cis_over_runs(runs, ("cps",), n_resamples=50))


@pytest.mark.parametrize("call", [
    lambda: bootstrap_cis(_records(5, 0), ("cps",), 100),
    lambda: bootstrap_ci(_records(5, 0), "cps", 100),
    lambda: bootstrap_mean_ci([1.0, 2.0], 100),
    lambda: bootstrap_cis_over_runs([_records(5, 0)], ("cps",), 100),
    lambda: bootstrap_routing({"r": [0.1, 0.2]}, [0, 1], [1, 1], (0.5,), 100),
])
def test_resampling_arguments_are_keyword_only_everywhere(call) -> None:
    # One argument order for every bootstrap: data first, then n_resamples, confidence and
    # seed by name (routing used to take seed before confidence).
    with pytest.raises(TypeError):
        call()


@pytest.mark.parametrize("n_resamples, confidence, match", [
    (0, 0.95, "n_resamples"), (True, 0.95, "n_resamples"), (2.0, 0.95, "n_resamples"),
    (10, 1.0, "confidence"), (10, 0.0, "confidence"), (10, "0.9", "confidence"),
    (10, float("nan"), "confidence"),
])
def test_arguments_are_checked_in_one_place(n_resamples, confidence, match) -> None:
    with pytest.raises(ValueError, match=match):
        check_bootstrap_args(n_resamples, confidence)
    with pytest.raises(ValueError, match=match):
        bootstrap_mean_ci([1.0, 2.0], n_resamples=n_resamples, confidence=confidence)
    with pytest.raises(ValueError, match=match):
        bootstrap_routing({"r": [0.1, 0.2]}, [0, 1], [1, 1], n_resamples=n_resamples,
                          confidence=confidence)


def test_cutting_the_stream_into_blocks_changes_nothing(monkeypatch) -> None:
    # numpy draws the same stream in one call or several, so for the one-draw bootstraps
    # the memory bound never changes an interval: with blocks of a few resamples the
    # results are bit-identical. (The two-level bootstrap draws runs and tasks in turn per
    # block, so its block size is part of its definition: see its docstring.)
    import cost_envs.metrics.bootstrap as engine
    import cost_envs.metrics.routing as routing

    records = _records(40, 2)
    values = np.random.default_rng(1).random(25)
    rng = np.random.default_rng(5)
    weak, strong = rng.random(60) < 0.5, rng.random(60) < 0.7
    routers = {"r": rng.random(60), "random": None}

    def everything():
        return (bootstrap_cis(records, n_resamples=300, seed=3),
                bootstrap_mean_ci(values, n_resamples=300, seed=3),
                bootstrap_routing(routers, weak, strong, n_resamples=300, seed=3))

    whole = everything()
    monkeypatch.setattr(engine, "BLOCK_CELLS", 7 * 40)
    monkeypatch.setattr(routing, "_BLOCK", 7 * 60)
    sizes: list[int] = []
    real = engine.resample_blocks

    def spy(*args, **kwargs):
        for size in real(*args, **kwargs):
            sizes.append(size)
            yield size

    monkeypatch.setattr(engine, "resample_blocks", spy)
    monkeypatch.setattr(routing, "resample_blocks", spy)
    assert everything() == whole
    assert max(sizes) < 300 and sum(sizes) == 3 * 300  # every bootstrap really was cut
