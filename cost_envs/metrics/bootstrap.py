"""Percentile-bootstrap intervals: over episodes, over training runs and tasks, of a mean.

One engine serves every interval in the project, the routing metrics of
:mod:`cost_envs.metrics.routing` included: :func:`resample_blocks` splits the resamples
into blocks of bounded memory, each bootstrap draws its block from one generator seeded
by ``seed``, and :func:`percentile_interval` turns the resampled values into an
:class:`Interval`. Every bootstrap takes its data first and then the keyword-only
``n_resamples``, ``confidence`` and ``seed``, checked by :func:`check_bootstrap_args`.

* :func:`bootstrap_cis` / :func:`bootstrap_ci`: episodes resampled with replacement, the
  headline metrics recomputed on each resample (ratio statistics such as CPS as ratios of
  resampled sums, never as means of per-episode ratios);
* :func:`bootstrap_cis_over_runs`: a two-level bootstrap over training seeds and tasks;
* :func:`bootstrap_mean_ci`: the mean of per-item values;
* :func:`bootstrap_means`: means of several per-item columns on the same resamples, by
  item or by cluster (:func:`resample_weights`: the cluster bootstrap draws whole
  clusters, for evaluations that held out whole groups);
* :func:`bootstrap_gap_closed`: the share of the gap between a fixed rule and a reference
  that a method closes, paired over tasks: Fieller's interval of a ratio on the exact
  moments of the same two-level bootstrap (:func:`gap_closed_moments`), since the
  percentile interval of a ratio whose denominator can near 0 depends on the seed.

Only numpy is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from cost_envs.config import integer, number
from cost_envs.limits import MAX_RESAMPLES
from cost_envs.metrics.episodes import HEADLINE_METRICS, EpisodeRecord, _records, gap_closed

#: Largest resample block (resamples x items) held in memory at once by the bootstrap.
BLOCK_CELLS = 1 << 22

Statistic = str | Callable[[Sequence[EpisodeRecord]], float]


class Interval(NamedTuple):
    """A confidence interval: the one interval type of the metrics (a ``(low, high)`` tuple)."""

    low: float
    high: float


# ------------------------------------------------------------------------ the engine
def check_bootstrap_args(n_resamples: Any, confidence: Any) -> None:
    """Raise ``ValueError`` unless ``n_resamples`` is in [1, 10**6] and ``confidence`` in (0, 1).

    The cap (:data:`cost_envs.limits.MAX_RESAMPLES`, a million) is checked before any
    draw: a billion resamples ran for minutes and held 8 GB per statistic.
    """
    integer(n_resamples, "n_resamples", minimum=1, maximum=MAX_RESAMPLES)
    number(confidence, "confidence", minimum=0, maximum=1, inclusive=False)


def resample_blocks(n_resamples: int, cells_per_resample: int,
                    block_cells: int | None = None) -> Iterator[int]:
    """Sizes of the blocks the ``n_resamples`` resamples are drawn in, in order.

    A block holds at most ``block_cells`` cells (default :data:`BLOCK_CELLS`; resamples x
    cells per resample, at least one resample), so memory stays bounded for very long
    evaluations. The sizes fix how a generator's stream is cut, so every bootstrap draws
    its blocks through here.
    """
    cells = BLOCK_CELLS if block_cells is None else block_cells
    block = max(1, cells // max(1, cells_per_resample))
    for start in range(0, n_resamples, block):
        yield min(block, n_resamples - start)


def cluster_codes(clusters: Any, n: int) -> np.ndarray | None:
    """Integer codes ``0 .. g-1`` of per-item cluster labels (``None``: every item its own).

    Labels may be any hashable values (a group's name, a prompt's index); codes follow
    first appearance.

    Raises:
        ValueError: If ``clusters`` does not have one label per item.
    """
    if clusters is None:
        return None
    labels = list(clusters)
    if len(labels) != n:
        raise ValueError(f"clusters: expected one label per item ({n}), got {len(labels)}")
    ids: dict[Any, int] = {}
    return np.fromiter((ids.setdefault(x, len(ids)) for x in labels), np.int64, count=n)


def resample_weights(rng: np.random.Generator, size: int, n: int,
                     clusters: np.ndarray | None = None) -> np.ndarray:
    """How often each item is drawn in ``size`` resamples: a ``(size, n)`` float array.

    Without ``clusters``, ``n`` items are drawn with replacement (multinomial counts per
    item). With cluster codes (:func:`cluster_codes`), the *clusters* are drawn with
    replacement, as many as there are, and each item counts as often as its cluster was
    drawn: the cluster bootstrap, whose resamples vary in size. It is the right interval
    when whole clusters (subjects, domains) were held out, because queries of one cluster
    are not independent draws; resampling them one by one gives intervals too narrow.
    """
    if clusters is None:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=size).astype(np.float64)
    g = int(clusters.max()) + 1
    return rng.multinomial(g, np.full(g, 1.0 / g), size=size).astype(np.float64)[:, clusters]


def resample_counts(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    """:func:`resample_weights` without clusters, drawn ten times faster: ``(size, n)`` floats.

    The same distribution (multinomial counts of ``n`` draws with replacement), drawn as
    ``n`` uniform indices per resample and counted, where numpy's multinomial draws one
    binomial per item: what a bootstrap of a hundred thousand resamples needs. Another
    stream than :func:`resample_weights` for the same seed, so the bootstraps whose
    committed results were drawn with that one keep it.
    """
    return _counts(rng.integers(0, n, size=(size, n)), n).astype(np.float64)


def _counts(draws: np.ndarray, n: int) -> np.ndarray:
    """How often each of ``n`` indices is drawn in each row of ``draws``: ``(rows, n)``."""
    rows = len(draws)
    offsets = (np.arange(rows) * n)[:, None]
    return np.bincount((draws + offsets).ravel(), minlength=rows * n).reshape(rows, n)


def bootstrap_means(
    columns: Mapping[str, Any],
    *,
    clusters: Any = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Means of several per-item columns, with intervals on the *same* resamples.

    Args:
        columns: Name -> one finite value per item (all of one length).
        clusters: Optional per-item cluster labels: resample clusters, not items
            (:func:`resample_weights`).
        n_resamples: Number of bootstrap resamples, >= 1.
        confidence: Coverage of the interval, in ``(0, 1)``.
        seed: Seed of the resampling generator.

    Returns:
        Name -> ``{"value": mean, "ci": [low, high]}``; the interval is widened, if need
        be, to contain the mean (:func:`interval_around`).

    Raises:
        ValueError: On no columns, columns of different lengths or non-finite values.
    """
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
    lengths = {a.shape for a in arrays.values()}
    if not arrays or len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise ValueError(f"bootstrap_means: expected 1-D columns of one length, got shapes "
                         f"{sorted(lengths)}")
    n = next(iter(lengths))[0]
    for name, a in arrays.items():
        if n == 0 or not np.isfinite(a).all():
            raise ValueError(f"bootstrap_means: column {name!r}: expected finite values")
    check_bootstrap_args(n_resamples, confidence)
    codes = cluster_codes(clusters, n)
    means = ResampledMeans(arrays)
    rng = np.random.default_rng(seed)
    for size in resample_blocks(n_resamples, n):
        means.add(resample_weights(rng, size, n, codes))
    return means.result(confidence)


class ResampledMeans:
    """The resampled means of per-item columns, block by block of resample weights.

    What :func:`bootstrap_means` computes; also an accumulator of
    :func:`agents.routers.bootstrap.run`, which feeds the blocks of a draw that other
    statistics read too.

    Args:
        columns: Key -> one finite value per item (all of one length).
    """

    def __init__(self, columns: Mapping[Any, Any]) -> None:
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
        self.points = {k: float(a.mean()) for k, a in arrays.items()}
        self.stacked = np.stack(list(arrays.values()), axis=1)  # (n, k)
        self.means: list[np.ndarray] = []

    def add(self, weights: np.ndarray) -> None:
        """Read one ``(resamples, items)`` block of resample counts."""
        self.means.append((weights @ self.stacked) / weights.sum(axis=1, keepdims=True))

    def result(self, confidence: float) -> dict[Any, dict[str, Any]]:
        """Key -> ``{"value": mean, "ci"}`` at coverage ``confidence``.

        The percentile interval, widened if need be to contain the mean
        (:func:`interval_around`); ``None`` without resamples.
        """
        if not self.means:
            return {k: {"value": v, "ci": None} for k, v in self.points.items()}
        drawn = np.concatenate(self.means)
        return {k: {"value": point,
                    "ci": interval_around(point, percentile_interval(drawn[:, j], confidence))}
                for j, (k, point) in enumerate(self.points.items())}


def percentile_interval(values: np.ndarray | Sequence[np.ndarray],
                        confidence: float) -> Interval:
    """The central ``confidence`` interval of resampled values (blocks are concatenated)."""
    array = np.concatenate(values) if isinstance(values, (list, tuple)) else values
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(array, [tail, 1.0 - tail])
    return Interval(float(low), float(high))


def mid_quantile_interval(values: np.ndarray, confidence: float) -> Interval:
    """The central ``confidence`` interval of resampled values by mid-distribution quantiles.

    The empirical distribution's mid-CDF (each distinct value at the share below it plus
    half its own) interpolated linearly: on continuous values the usual quantile (Hazen's
    plotting positions), but on a statistic with few possible values (a probability of
    improvement over a handful of seeds moves in steps of 1/50) the end moves smoothly
    with the drawn shares instead of jumping a whole step when the tail's share crosses
    a step's edge, which a percentile interval's end did between bootstrap seeds.
    """
    distinct, counts = np.unique(np.asarray(values, dtype=np.float64), return_counts=True)
    mid = (np.cumsum(counts) - counts / 2) / counts.sum()
    tail = (1.0 - confidence) / 2.0
    low, high = np.interp([tail, 1.0 - tail], mid, distinct)
    return Interval(float(low), float(high))


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


def bootstrap_cis(
    records: Iterable[EpisodeRecord],
    statistics: Sequence[Statistic] = HEADLINE_METRICS,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[Interval]:
    """Percentile-bootstrap intervals of several statistics on the *same* resamples.

    Sharing one resample index matrix keeps the intervals mutually consistent and costs
    one draw instead of one per statistic. See :func:`bootstrap_ci` for the arguments.

    Returns:
        One ``(low, high)`` per entry of ``statistics``, in order.
    """
    records = _records(records, "bootstrap_ci")
    check_bootstrap_args(n_resamples, confidence)
    for statistic in statistics:
        _check_statistic(statistic)
    n = len(records)
    columns = _Columns.of(records)
    rng = np.random.default_rng(seed)
    values: list[list[np.ndarray]] = [[] for _ in statistics]
    for size in resample_blocks(n_resamples, n):
        index = rng.integers(0, n, size=(size, n))
        for out, statistic in zip(values, statistics, strict=True):
            if isinstance(statistic, str):
                out.append(_resampled_statistic(statistic, columns, index))
            else:  # arbitrary callables cannot be vectorised: one call per resample
                out.append(np.array([statistic([records[i] for i in row]) for row in index]))
    return [percentile_interval(out, confidence) for out in values]


def bootstrap_ci(
    records: Iterable[EpisodeRecord],
    statistic: Statistic,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
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
    return bootstrap_cis(records, [statistic], n_resamples=n_resamples, confidence=confidence,
                         seed=seed)[0]


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The mean of per-item ``values`` with its percentile-bootstrap interval.

    For per-query quantities outside :class:`EpisodeRecord` (accuracy within a budget,
    whether an expert was consulted ...). A 1-D array is one run's items: the items are
    resampled. A 2-D array ``values[s, j]`` is run (training seed) ``s`` on item ``j``, every
    run on the same items: each resample draws runs and, independently, items with
    replacement (the same item draw for every drawn run), as
    :func:`bootstrap_cis_over_runs` does, so the interval covers the spread between seeds
    and the sampling of items; the value is the mean over all runs and items. Returns
    ``(mean, low, high)`` with the interval widened, if need be, to contain the mean (see
    :func:`interval_around`).

    Raises:
        ValueError: On no values, non-finite values, more than 2 dimensions or invalid
            arguments.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.ndim not in (1, 2) or array.size == 0 or not np.isfinite(array).all():
        raise ValueError(f"bootstrap_mean_ci: expected a non-empty 1-D (items) or 2-D (runs "
                         f"x items) array of finite numbers, got shape {array.shape}")
    check_bootstrap_args(n_resamples, confidence)
    rng = np.random.default_rng(seed)
    if array.ndim == 1:
        n = array.size
        means = [array[rng.integers(0, n, size=(size, n))].mean(axis=1)
                 for size in resample_blocks(n_resamples, n)]
    else:
        n_runs, n = array.shape
        means = []
        for size in resample_blocks(n_resamples, n_runs * n):
            runs = rng.integers(0, n_runs, size=(size, n_runs))
            items = rng.integers(0, n, size=(size, n))
            means.append(_crossed_means(array, runs, items))
    low, high = percentile_interval(means, confidence)
    point = float(array.mean())
    low, high = interval_around(point, (low, high))
    return point, low, high


def _crossed_means(array: np.ndarray, runs: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``array[runs[b][:, None], items[b][None, :]].mean()`` for every resample ``b``.

    From how often each run and each item is drawn: the sum over the crossed draw is
    ``run_counts[b] @ array @ item_counts[b]``, one matrix product instead of gathering
    the ``runs x items`` cells of every resample (3.7 times faster on 5 x 10,000). Equal
    to the gather's mean up to the order of the float additions.
    """
    n_runs, n = array.shape
    run_counts = _counts(runs, n_runs)
    item_counts = _counts(items, n).astype(np.float64)
    sums = np.einsum("bs,bs->b", run_counts, item_counts @ array.T)
    return sums / (n_runs * n)


def bootstrap_cis_over_runs(
    runs: Sequence[Sequence[EpisodeRecord]],
    statistics: Sequence[str] = HEADLINE_METRICS,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[Interval]:
    """Two-level percentile bootstrap for several training runs scored on the same tasks.

    ``runs[s][j]`` is run (training seed) ``s`` on task ``j``. Each resample draws runs
    with replacement and, independently, tasks with replacement; the same task draw is
    used for every drawn run, which keeps the pairing of the shared task set. The
    statistic is computed on the pooled episodes of the resample. The interval therefore
    covers both the spread between training seeds and the sampling of tasks. Runs and
    tasks are drawn in turn block by block (:func:`resample_blocks`), so unlike the
    one-draw bootstraps its values depend on :data:`BLOCK_CELLS` once a draw needs more
    than one block (above about 4 million resampled episodes).

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
    check_bootstrap_args(n_resamples, confidence)
    for statistic in statistics:
        if not isinstance(statistic, str):
            raise ValueError(f"statistic: expected a metric name, got {statistic!r}")
        _check_statistic(statistic)
    n_runs, n = len(runs), lengths[0]
    columns = _Columns.of([record for run in runs for record in run])
    rng = np.random.default_rng(seed)
    values: list[list[np.ndarray]] = [[] for _ in statistics]
    for size in resample_blocks(n_resamples, n * n_runs):
        chosen_runs = rng.integers(0, n_runs, size=(size, n_runs))
        tasks = rng.integers(0, n, size=(size, n))
        index = (chosen_runs[:, :, None] * n + tasks[:, None, :]).reshape(size, n_runs * n)
        for out, statistic in zip(values, statistics, strict=True):
            out.append(_resampled_statistic(statistic, columns, index))
    return [percentile_interval(out, confidence) for out in values]


def _per_task_returns(values: Any, what: str, n_tasks: int | None = None) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if (array.ndim != 2 or array.size == 0 or not np.isfinite(array).all()
            or (n_tasks is not None and array.shape[1] != n_tasks)):
        expected = "tasks" if n_tasks is None else f"{n_tasks} tasks"
        raise ValueError(f"bootstrap_gap_closed: {what} must be finite per-task values (runs "
                         f"x {expected}), got shape {np.shape(values)}")
    return array


def gap_closed_moments(method: Any, rule: Any, reference: Any
                       ) -> tuple[float, float, float, float, float]:
    """The share's numerator and denominator and their exact bootstrap (co)variances.

    For :func:`bootstrap_gap_closed`'s resampling, seeds with replacement and, independently,
    tasks with replacement (one task draw for every row), the variances that infinitely many
    resamples would estimate, in closed form: no draws, so no seed moves them. With ``S``
    seeds of ``n`` tasks, ``a[s]`` seed ``s``'s scores, ``m_s`` its mean and ``x = mean_s
    a[s] - rule``, ``y = reference - rule`` (population variances, ``ddof=0``):

    * ``Var(N) = ((1 - 1/n) var_s(m_s) + sum_j var_s(a[s, j]) / n^2) / S + var(x) / n``
      (the seed draw given a task draw, averaged over task draws, plus the task draw);
    * ``Var(D) = var(y) / n`` and ``Cov(N, D) = cov(x, y) / n``.

    Returns:
        ``(N, D, Var(N), Var(D), Cov(N, D))``, ``N`` the method's mean minus the rule's,
        ``D`` the reference's minus the rule's.
    """
    runs = _per_task_returns(method, "method")
    n_runs, n_tasks = runs.shape
    rule_values = _per_task_returns(rule, "rule", n_tasks)[0]
    reference_values = _per_task_returns(reference, "reference", n_tasks)[0]
    x = runs.mean(axis=0) - rule_values
    y = reference_values - rule_values
    within = ((1 - 1 / n_tasks) * runs.mean(axis=1).var()
              + runs.var(axis=0).sum() / n_tasks**2) / n_runs
    covariance = float(((x - x.mean()) * (y - y.mean())).mean()) / n_tasks
    return (float(x.mean()), float(y.mean()), within + float(x.var()) / n_tasks,
            float(y.var()) / n_tasks, covariance)


def fieller_interval(numerator: float, denominator: float, var_numerator: float,
                     var_denominator: float, covariance: float,
                     confidence: float = 0.95) -> Interval:
    """Fieller's interval of the ratio ``numerator / denominator`` (normal estimates).

    The ratios ``t`` that ``numerator - t * denominator = 0`` does not reject at
    ``confidence``. Bounded only when the denominator is itself resolved above or below 0
    at that level; otherwise ``(nan, nan)``: no interval of the ratio exists (a percentile
    bootstrap of the ratio then has ends set by the draws where the denominator nears 0,
    which move by whole units with the bootstrap's seed).
    """
    number(confidence, "confidence", minimum=0, maximum=1, inclusive=False)
    z2 = NormalDist().inv_cdf((1 + confidence) / 2) ** 2
    a = denominator**2 - z2 * var_denominator
    if a <= 0:
        return Interval(math.nan, math.nan)
    b = numerator * denominator - z2 * covariance
    # b^2 - a c, with the N^2 D^2 both hold cancelled by hand (no rounding left of them):
    # >= 0, as the ratio itself is inside the interval
    discriminant = z2 * (var_numerator * denominator**2 - 2 * covariance * numerator
                         * denominator + var_denominator * numerator**2) \
        + z2**2 * (covariance**2 - var_numerator * var_denominator)
    root = math.sqrt(max(0.0, discriminant))
    return Interval((b - root) / a, (b + root) / a)


def bootstrap_gap_closed(
    method: Sequence[float] | np.ndarray,
    rule: Sequence[float] | np.ndarray,
    reference: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """The share of the rule-to-reference gap a method closes, with its interval.

    ``method[s, j]`` (or a 1-D ``method[j]`` for one run) is run ``s``'s score on task
    ``j``; ``rule[j]`` and ``reference[j]`` are the fixed rule's and the reference's (the
    planner's) scores on the same tasks. The point is :func:`gap_closed` of the three
    means. The interval is Fieller's (:func:`fieller_interval`) for the share ``N / D``,
    ``N`` the method's mean minus the rule's and ``D`` the reference's minus the rule's,
    with the variances of a bootstrap that draws runs and, independently, tasks with
    replacement, one task draw for all three rows (:func:`gap_closed_moments`, exact):
    it keeps the pairing of the shared tasks and covers the spread between seeds.

    Why not the percentile bootstrap of the share: where the gap is small against its
    noise, the draws in which it nears 0 make the share's tails heavy, and the percentile
    ends moved by up to 2.7 with the bootstrap's seed on the committed tables (BoPO's
    ALFWorld, a gap of 0.018). Fieller's interval is the one a ratio of normal estimates
    has, and with exact moments it has no seed: the same data give the same ends.

    Returns:
        ``(share, low, high)``; ``share`` is ``nan`` when the reference does not beat the
        rule on the means, ``low`` and ``high`` are ``nan`` when the gap is not resolved
        at ``confidence`` (the data cannot tell the reference from the rule).

    Raises:
        ValueError: On non-finite values, tasks of different lengths or invalid arguments.
    """
    numerator, denominator, v_n, v_d, c_nd = gap_closed_moments(method, rule, reference)
    number(confidence, "confidence", minimum=0, maximum=1, inclusive=False)
    runs = np.asarray(method, dtype=np.float64)
    point = gap_closed(float(runs.mean()), float(np.mean(rule)), float(np.mean(reference)))
    if math.isnan(point):
        return point, math.nan, math.nan
    low, high = fieller_interval(numerator, denominator, v_n, v_d, c_nd, confidence)
    return point, low, high
