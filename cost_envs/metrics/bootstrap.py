"""Percentile-bootstrap intervals: over episodes, over training runs and tasks, of a mean.

Every interval in the project comes from here (the routing metrics of
:mod:`cost_envs.metrics.routing` share the argument checks and the percentile step):

* :func:`bootstrap_cis` / :func:`bootstrap_ci`: episodes resampled with replacement, the
  headline metrics recomputed on each resample (ratio statistics such as CPS as ratios of
  resampled sums, never as means of per-episode ratios);
* :func:`bootstrap_cis_over_runs`: a two-level bootstrap over training seeds and tasks;
* :func:`bootstrap_mean_ci`: the mean of per-item values.

Only numpy is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cost_envs.config import integer, number
from cost_envs.metrics.episodes import HEADLINE_METRICS, EpisodeRecord, _records

#: Largest resample block (resamples x episodes) held in memory at once by the bootstrap.
_BOOTSTRAP_BLOCK = 1 << 22

Statistic = str | Callable[[Sequence[EpisodeRecord]], float]


@dataclass(frozen=True)
class _Columns:
    """Records as parallel arrays, the form the vectorised bootstrap works on."""

    success: np.ndarray
    quality: np.ndarray
    cost: np.ndarray
    flops: np.ndarray

    @classmethod
    def of(cls, records: Sequence[EpisodeRecord]) -> _Columns:
        return cls(
            success=np.fromiter((r.success for r in records), np.float64, len(records)),
            quality=np.fromiter((r.quality for r in records), np.float64, len(records)),
            cost=np.fromiter((r.cost for r in records), np.float64, len(records)),
            flops=np.fromiter((r.flops for r in records), np.float64, len(records)),
        )


# ------------------------------------------------------------------------ bootstrap
def _resampled_statistic(name: str, columns: _Columns, index: np.ndarray) -> np.ndarray:
    """``name`` on each row of the resample index matrix ``index`` (resamples x episodes)."""
    if name == "success_rate":
        return columns.success[index].mean(axis=1)
    if name == "avg_quality":
        return columns.quality[index].mean(axis=1)
    if name == "avg_cost":
        return columns.cost[index].mean(axis=1)
    # Ratio statistics: recompute numerator and denominator sums on each resample; a
    # mean of per-episode ratios would be a different (and undefined) quantity.
    successes = np.maximum(1.0, columns.success[index].sum(axis=1))
    if name == "cps":
        return columns.cost[index].sum(axis=1) / successes
    if name == "flops_per_success":
        return columns.flops[index].sum(axis=1) / successes
    raise AssertionError(f"unhandled statistic {name!r}")  # pragma: no cover


def _check_bootstrap_args(n_resamples: int, confidence: float) -> None:
    integer(n_resamples, "n_resamples", minimum=1)
    number(confidence, "confidence", minimum=0, maximum=1, inclusive=False)


def _check_statistic(statistic: Statistic) -> None:
    if isinstance(statistic, str):
        if statistic not in HEADLINE_METRICS:
            raise ValueError(
                f"statistic: unknown metric {statistic!r}; expected one of "
                f"{list(HEADLINE_METRICS)} or a callable on a sequence of records"
            )
    elif not callable(statistic):
        raise ValueError(f"statistic: expected a metric name or a callable, got {statistic!r}")


def interval_around(point: float, interval: Sequence[float]) -> list[float]:
    """``interval`` widened, if need be, to contain ``point``.

    When every episode has the same value, the bootstrap's numpy sums and the point
    value's exact ``math.fsum`` can differ in the last bit, leaving the point a rounding
    step outside its own interval; plots with error bars reject that.
    """
    low, high = interval
    return [min(float(low), point), max(float(high), point)]


def _percentile_intervals(
    values: Sequence[Sequence[np.ndarray]], confidence: float
) -> list[tuple[float, float]]:
    """The central ``confidence`` interval of each statistic's resampled values."""
    tail = (1.0 - confidence) / 2.0
    intervals = []
    for out in values:
        low, high = np.quantile(np.concatenate(out), [tail, 1.0 - tail])
        intervals.append((float(low), float(high)))
    return intervals


def bootstrap_cis(
    records: Iterable[EpisodeRecord],
    statistics: Sequence[Statistic] = HEADLINE_METRICS,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """Percentile-bootstrap intervals of several statistics on the *same* resamples.

    Sharing one resample index matrix keeps the intervals mutually consistent and costs
    one draw instead of one per statistic. See :func:`bootstrap_ci` for the arguments.

    Returns:
        One ``(low, high)`` per entry of ``statistics``, in order.
    """
    records = _records(records, "bootstrap_ci")
    _check_bootstrap_args(n_resamples, confidence)
    for statistic in statistics:
        _check_statistic(statistic)
    n = len(records)
    columns = _Columns.of(records)
    rng = np.random.default_rng(seed)
    values: list[list[np.ndarray]] = [[] for _ in statistics]
    # Draw the index matrix in blocks so memory stays bounded for very long evaluations.
    block = max(1, _BOOTSTRAP_BLOCK // n)
    for start in range(0, n_resamples, block):
        index = rng.integers(0, n, size=(min(block, n_resamples - start), n))
        for out, statistic in zip(values, statistics, strict=True):
            if isinstance(statistic, str):
                out.append(_resampled_statistic(statistic, columns, index))
            else:  # arbitrary callables cannot be vectorised: one call per resample
                out.append(np.array([statistic([records[i] for i in row]) for row in index]))
    return _percentile_intervals(values, confidence)


def bootstrap_ci(
    records: Iterable[EpisodeRecord],
    statistic: Statistic,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of ``statistic`` over episodes.

    Episodes are resampled with replacement ``n_resamples`` times and the statistic is
    recomputed on each resample; ratio statistics (CPS, FLOPs/success) are recomputed as
    ratios of resampled sums, never averaged per episode.

    Args:
        records: The episodes, at least one.
        statistic: A metric name from :data:`HEADLINE_METRICS` (computed vectorised over
            a resample index matrix) or any callable mapping a sequence of records to a
            float (called once per resample, so slower).
        n_resamples: Number of bootstrap resamples, >= 1.
        confidence: Coverage of the interval, in ``(0, 1)``.
        seed: Seed of the resampling generator, so intervals are reproducible.

    Returns:
        ``(low, high)``: the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
        quantiles of the resampled statistic.

    Raises:
        ValueError: On empty ``records``, an unknown metric name or invalid arguments.
    """
    return bootstrap_cis(records, [statistic], n_resamples, confidence, seed)[0]


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The mean of per-item ``values`` with its percentile-bootstrap interval.

    For per-query quantities outside :class:`EpisodeRecord` (accuracy within a budget,
    whether an expert was consulted ...). Returns ``(mean, low, high)`` with the interval
    widened, if need be, to contain the mean (see :func:`interval_around`).

    Raises:
        ValueError: On no values, non-finite values or invalid arguments.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0 or not np.isfinite(array).all():
        raise ValueError(f"bootstrap_mean_ci: expected a non-empty 1-D array of finite "
                         f"numbers, got shape {array.shape}")
    _check_bootstrap_args(n_resamples, confidence)
    rng = np.random.default_rng(seed)
    n = array.size
    block = max(1, _BOOTSTRAP_BLOCK // n)
    means = [array[rng.integers(0, n, size=(min(block, n_resamples - start), n))].mean(axis=1)
             for start in range(0, n_resamples, block)]
    ((low, high),) = _percentile_intervals([means], confidence)
    point = float(array.mean())
    low, high = interval_around(point, (low, high))
    return point, low, high


def bootstrap_cis_over_runs(
    runs: Sequence[Sequence[EpisodeRecord]],
    statistics: Sequence[str] = HEADLINE_METRICS,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """Two-level percentile bootstrap for several training runs scored on the same tasks.

    ``runs[s][j]`` is run (training seed) ``s`` on task ``j``. Each resample draws runs
    with replacement and, independently, tasks with replacement; the same task draw is
    used for every drawn run, which keeps the pairing of the shared task set. The
    statistic is computed on the pooled episodes of the resample. The interval therefore
    covers both the spread between training seeds and the sampling of tasks.

    Args:
        runs: At least one run; every run has the same number of episodes (>= 1).
        statistics: Metric names from :data:`HEADLINE_METRICS`.
        n_resamples: Number of bootstrap resamples, >= 1.
        confidence: Coverage of the interval, in ``(0, 1)``.
        seed: Seed of the resampling generator.

    Returns:
        One ``(low, high)`` per entry of ``statistics``, in order.
    """
    runs = [_records(run, "bootstrap_cis_over_runs") for run in runs]
    if not runs:
        raise ValueError("bootstrap_cis_over_runs: expected at least one run, got none")
    lengths = sorted({len(run) for run in runs})
    if len(lengths) != 1:
        raise ValueError(f"bootstrap_cis_over_runs: runs must be scored on the same tasks, "
                         f"got runs of {lengths} episodes")
    _check_bootstrap_args(n_resamples, confidence)
    for statistic in statistics:
        if not isinstance(statistic, str):
            raise ValueError(f"statistic: expected a metric name, got {statistic!r}")
        _check_statistic(statistic)
    n_runs, n = len(runs), lengths[0]
    columns = _Columns.of([record for run in runs for record in run])
    rng = np.random.default_rng(seed)
    values: list[list[np.ndarray]] = [[] for _ in statistics]
    block = max(1, _BOOTSTRAP_BLOCK // (n * n_runs))
    for start in range(0, n_resamples, block):
        size = min(block, n_resamples - start)
        chosen_runs = rng.integers(0, n_runs, size=(size, n_runs))
        tasks = rng.integers(0, n, size=(size, n))
        index = (chosen_runs[:, :, None] * n + tasks[:, None, :]).reshape(size, n_runs * n)
        for out, statistic in zip(values, statistics, strict=True):
            out.append(_resampled_statistic(statistic, columns, index))
    return _percentile_intervals(values, confidence)
