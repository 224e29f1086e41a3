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
* ``budget_exceeded``: number of episodes that exceeded their budget.

:func:`pareto_front` keeps the non-dominated (success, cost) points; :func:`oracle_gap`
is CPS relative to the oracle's. Intervals live in :mod:`cost_envs.metrics.bootstrap`.

Only numpy is used: this package never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import numpy as np

from cost_envs.config import integer, number

#: The headline metrics, by name (the bootstrap computes these vectorised).
HEADLINE_METRICS = ("success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost")

Point = tuple[float, float]
K = TypeVar("K")


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
        budget_exceeded: Whether the episode exceeded its budget.
    """

    success: bool
    quality: float
    cost: float
    flops: float
    calls: np.ndarray
    length: int
    budget_exceeded: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the fields in place once
        set_(self, "success", bool(self.success))
        set_(self, "budget_exceeded", bool(self.budget_exceeded))
        set_(self, "quality", number(self.quality, "EpisodeRecord.quality"))
        set_(self, "cost", number(self.cost, "EpisodeRecord.cost", minimum=0))
        set_(self, "flops", number(self.flops, "EpisodeRecord.flops", minimum=0))
        set_(self, "length", integer(self.length, "EpisodeRecord.length", minimum=0))
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
            and self.budget_exceeded == other.budget_exceeded
            and np.array_equal(self.calls, other.calls)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking array field: unhashable


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
    total = np.asarray(np.sum([r.calls for r in records], axis=0, dtype=np.float64))
    return total / steps if steps else np.zeros_like(total)


def budget_exceeded(records: Iterable[EpisodeRecord]) -> int:
    """Number of episodes that exceeded their budget."""
    records = _records(records, "budget_exceeded")
    return sum(r.budget_exceeded for r in records)


def summarize(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """All point metrics of ``records`` as plain Python values (JSON-serialisable).

    Returns:
        A dict with ``success_rate``, ``cps``, ``flops_per_success``, ``avg_quality``,
        ``avg_cost`` (floats), ``call_ratio`` (list of floats, one per agent),
        ``budget_exceeded`` and ``episodes`` (ints).
    """
    records = _records(records, "summarize")
    return {
        "success_rate": success_rate(records),
        "cps": cps(records),
        "flops_per_success": flops_per_success(records),
        "avg_quality": avg_quality(records),
        "avg_cost": avg_cost(records),
        "call_ratio": [float(x) for x in call_ratio(records)],
        "budget_exceeded": budget_exceeded(records),
        "episodes": len(records),
    }


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


@overload
def pareto_front(points: Mapping[K, Point]) -> dict[K, Point]: ...
@overload
def pareto_front(points: Sequence[Point]) -> list[Point]: ...
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
        number(value, name, minimum=0, where="oracle_gap")
    if oracle_cps == 0:
        return 1.0 if cps == 0 else math.inf
    return cps / oracle_cps


def gap_closed(value: float, rule: float, reference: float) -> float:
    """The share of the gap from a fixed rule up to a reference that ``value`` closes.

    ``(value - rule) / (reference - rule)`` on one score where higher is better (the
    mean episode return): 0 is no better than the rule, 1 as good as the reference (the
    planner, which knows the task but not its luck), below 0 worse than the rule, above
    1 better than the reference. ``nan`` when the reference does not beat the rule (no
    gap to close).

    Raises:
        ValueError: If a value is not finite.
    """
    for name, given in (("value", value), ("rule", rule), ("reference", reference)):
        number(given, name, where="gap_closed")
    if reference <= rule:
        return math.nan
    return (value - rule) / (reference - rule)
