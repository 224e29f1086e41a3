"""Episode records and the metrics of the papers: success, CPS, FLOPs/success, quality, ...

An :class:`EpisodeRecord` is what one finished episode leaves behind. The functions here
turn a sequence of records into the headline numbers:

* ``success_rate``: fraction of episodes that succeeded.
* ``cps``: cost per success, *total* cost over ``max(1, successes)``. It is a ratio of
  sums, not a mean of per-episode ratios, so failed episodes still count their cost, and
  zero successes give the total cost rather than a division by zero.
* ``flops_per_success``: the same ratio for FLOPs.
* ``avg_quality`` and ``avg_cost``: per-episode means.
* ``call_ratio``: per agent, the fraction of all steps in which that agent was called.
* ``budget_violations``: number of episodes that exceeded their budget.

:func:`bootstrap_ci` gives percentile-bootstrap intervals over episodes, recomputing ratio
statistics such as CPS on every resample; :func:`pareto_front` keeps the non-dominated
(success, cost) points; :func:`oracle_gap` is CPS relative to the oracle's.

Only numpy is used: this package never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

#: Metrics :func:`bootstrap_ci` and :func:`bootstrap_cis` compute vectorised by name.
HEADLINE_METRICS = ("success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost")

#: Largest resample block (resamples x episodes) held in memory at once by the bootstrap.
_BOOTSTRAP_BLOCK = 1 << 22

Statistic = str | Callable[[Sequence["EpisodeRecord"]], float]
Point = tuple[float, float]
K = TypeVar("K")


def _check_number(name: str, value: Any, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"EpisodeRecord.{name}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise ValueError(f"EpisodeRecord.{name}: expected a finite number{bound}, got {value!r}")
    return value


@dataclass(frozen=True, eq=False)
class EpisodeRecord:
    """What one finished episode leaves behind.

    Args:
        success: Whether the episode succeeded.
        quality: Final quality (``[0, 10]`` in the bundled envs).
        cost: Money spent over the episode, >= 0.
        flops: FLOPs spent over the episode, >= 0.
        calls: Per-agent call counts over the episode, shape ``(m,)``, non-negative
            integers. Stored as a read-only int64 copy.
        length: Number of steps, >= 0.
        budget_violation: Whether the episode exceeded its budget.
    """

    success: bool
    quality: float
    cost: float
    flops: float
    calls: np.ndarray
    length: int
    budget_violation: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the fields in place once
        set_(self, "success", bool(self.success))
        set_(self, "budget_violation", bool(self.budget_violation))
        set_(self, "quality", _check_number("quality", self.quality))
        set_(self, "cost", _check_number("cost", self.cost, 0.0))
        set_(self, "flops", _check_number("flops", self.flops, 0.0))
        length = self.length
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"EpisodeRecord.length: expected an int >= 0, got {length!r}")
        set_(self, "length", int(length))
        calls = np.asarray(self.calls)
        if calls.ndim != 1 or calls.dtype.kind not in "biu" or (calls < 0).any():
            raise ValueError(
                "EpisodeRecord.calls: expected a 1-D array of non-negative integer call "
                f"counts, got {self.calls!r}"
            )
        calls = calls.astype(np.int64)  # always a copy: the caller's array stays theirs
        calls.flags.writeable = False
        set_(self, "calls", calls)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EpisodeRecord):
            return NotImplemented
        return (
            self.success == other.success
            and self.quality == other.quality
            and self.cost == other.cost
            and self.flops == other.flops
            and self.length == other.length
            and self.budget_violation == other.budget_violation
            and np.array_equal(self.calls, other.calls)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking array field: unhashable


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


def _records(records: Iterable[EpisodeRecord], what: str) -> Sequence[EpisodeRecord]:
    """Validate ``records`` as a non-empty sequence of :class:`EpisodeRecord`."""
    records = records if isinstance(records, Sequence) else tuple(records)
    if len(records) == 0:
        raise ValueError(f"{what}: expected at least one EpisodeRecord, got none")
    for record in records:
        if not isinstance(record, EpisodeRecord):
            raise ValueError(f"{what}: expected EpisodeRecord entries, got {record!r}")
    return records


def _successes(records: Sequence[EpisodeRecord]) -> int:
    return sum(r.success for r in records)


def success_rate(records: Iterable[EpisodeRecord]) -> float:
    """Fraction of episodes that succeeded."""
    records = _records(records, "success_rate")
    return _successes(records) / len(records)


def cps(records: Iterable[EpisodeRecord]) -> float:
    """Cost per success: total cost over ``max(1, successes)``."""
    records = _records(records, "cps")
    return math.fsum(r.cost for r in records) / max(1, _successes(records))


def flops_per_success(records: Iterable[EpisodeRecord]) -> float:
    """FLOPs per success: total FLOPs over ``max(1, successes)``."""
    records = _records(records, "flops_per_success")
    return math.fsum(r.flops for r in records) / max(1, _successes(records))


def avg_quality(records: Iterable[EpisodeRecord]) -> float:
    """Mean final quality per episode."""
    records = _records(records, "avg_quality")
    return math.fsum(r.quality for r in records) / len(records)


def avg_cost(records: Iterable[EpisodeRecord]) -> float:
    """Mean money spent per episode."""
    records = _records(records, "avg_cost")
    return math.fsum(r.cost for r in records) / len(records)


def call_ratio(records: Iterable[EpisodeRecord]) -> np.ndarray:
    """Per agent, the fraction of all steps (over all episodes) in which it was called.

    An agent is called at most once per step, so each entry is in ``[0, 1]``: ``0.25``
    means the agent ran in a quarter of the steps. This is CORL's expert-call ratio,
    per agent. With zero steps in total every ratio is 0.

    Raises:
        ValueError: If ``records`` is empty or the records disagree on the pool size.
    """
    records = _records(records, "call_ratio")
    sizes = {r.calls.shape[0] for r in records}
    if len(sizes) != 1:
        raise ValueError(f"call_ratio: records have different pool sizes {sorted(sizes)}")
    steps = sum(r.length for r in records)
    total = np.sum([r.calls for r in records], axis=0, dtype=np.float64)
    return total / steps if steps else np.zeros_like(total)


def budget_violations(records: Iterable[EpisodeRecord]) -> int:
    """Number of episodes that exceeded their budget."""
    records = _records(records, "budget_violations")
    return sum(r.budget_violation for r in records)


def summarize(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """All point metrics of ``records`` as plain Python values (JSON-serialisable).

    Returns:
        A dict with ``success_rate``, ``cps``, ``flops_per_success``, ``avg_quality``,
        ``avg_cost`` (floats), ``call_ratio`` (list of floats, one per agent),
        ``budget_violations`` and ``episodes`` (ints).
    """
    records = _records(records, "summarize")
    return {
        "success_rate": success_rate(records),
        "cps": cps(records),
        "flops_per_success": flops_per_success(records),
        "avg_quality": avg_quality(records),
        "avg_cost": avg_cost(records),
        "call_ratio": [float(x) for x in call_ratio(records)],
        "budget_violations": budget_violations(records),
        "episodes": len(records),
    }


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
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or (
        n_resamples < 1
    ):
        raise ValueError(f"n_resamples: expected an int >= 1, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a number in (0, 1), got {confidence!r}")


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


# ------------------------------------------------------------------ Pareto and gap
def _point(key: Any, value: Any) -> Point:
    try:
        success, cost = value
        point = (float(success), float(cost))
    except (TypeError, ValueError):
        raise ValueError(
            f"pareto_front: expected (success, cost) pairs, got {value!r} for {key!r}"
        ) from None
    if not all(math.isfinite(v) for v in point):
        raise ValueError(f"pareto_front: expected finite numbers, got {value!r} for {key!r}")
    return point


def _dominates(a: Point, b: Point) -> bool:
    """``a`` is at least as good on both axes and strictly better on one."""
    return a[0] >= b[0] and a[1] <= b[1] and a != b


def _front_keys(points: Mapping[K, Point]) -> list[K]:
    keys = [k for k, p in points.items() if not any(_dominates(q, p) for q in points.values())]
    return sorted(keys, key=lambda k: (points[k][1], -points[k][0]))


def pareto_front(
    points: Sequence[Point] | Mapping[K, Point],
) -> list[Point] | dict[K, Point]:
    """The non-dominated points: higher success and lower cost are better.

    A point is dominated when another has success >= and cost <= with at least one strict
    inequality; identical points do not dominate each other, so duplicates are all kept.

    Args:
        points: ``(success, cost)`` pairs, or a mapping from a name (a method) to its pair.

    Returns:
        The front sorted by increasing cost (then decreasing success): a list of pairs
        for a sequence input, a dict name -> pair for a mapping input.

    Raises:
        ValueError: If ``points`` is empty or holds something other than finite pairs.
    """
    if len(points) == 0:
        raise ValueError("pareto_front: expected at least one (success, cost) point, got none")
    if isinstance(points, Mapping):
        named = {k: _point(k, v) for k, v in points.items()}
        return {k: named[k] for k in _front_keys(named)}
    indexed = {i: _point(i, v) for i, v in enumerate(points)}
    return [indexed[i] for i in _front_keys(indexed)]


def oracle_gap(cps: float, oracle_cps: float) -> float:
    """CPS relative to the oracle's: ``cps / oracle_cps`` (1.0 = as cheap as the oracle).

    An oracle that spends nothing gives a gap of 1.0 when the method spends nothing too
    and ``inf`` otherwise.

    Raises:
        ValueError: If either value is negative or not finite.
    """
    for name, value in (("cps", cps), ("oracle_cps", oracle_cps)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"oracle_gap: {name}: expected a finite number >= 0, got {value!r}")
    if oracle_cps == 0:
        return 1.0 if cps == 0 else math.inf
    return cps / oracle_cps
