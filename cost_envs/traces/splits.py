"""The one split mechanism of logged outcomes: clusters, train/test splits, folds.

Every split of a :class:`~cost_envs.traces.TraceDataset` (train/test, cross-validation
folds, the clusters a bootstrap resamples) works on *clusters* of queries that always
stay together:

* ``split_by="query"``: a cluster is a prompt (:meth:`TraceDataset.prompt_groups`):
  identical prompts (RouteLLM's MMLU files repeat a few questions) share a side, so a
  test question is never also a training question; with all prompts distinct, each
  query is its own cluster and this is the plain split by query.
* ``split_by="group"``: a cluster is a value of the dataset's ``groups`` (an MMLU
  subject, a RouterArena domain, a source file): a test group is never seen in
  training, which is what "generalises to unseen subjects" asks.

Clusters are put in a seeded random order (``default_rng(seed).permutation``); a
train/test split gives the test side the leading clusters whose query count comes closest
to ``round(n * test_fraction)``, and k folds deal the clusters round-robin in that order.
Only numpy is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cost_envs.config import integer, number, one_of

if TYPE_CHECKING:  # the dataset calls these; only its type is needed here
    from cost_envs.traces.dataset import TraceDataset

#: What a split keeps together: a prompt ("query") or a group.
SPLIT_BY = ("query", "group")


def check_split_args(seed: Any, test_fraction: Any, split_by: Any = "query") -> None:
    """Raise ``ValueError`` on a bad seed, test fraction or ``split_by``.

    ``seed`` must be an int >= 0, ``test_fraction`` in (0, 1) and ``split_by`` one of
    :data:`SPLIT_BY`.
    """
    integer(seed, "split_seed", minimum=0)
    number(test_fraction, "test_fraction", minimum=0, maximum=1, inclusive=False)
    one_of(split_by, "split_by", SPLIT_BY)


def codes(labels: Any) -> np.ndarray:
    """Integer codes of ``labels`` (``(n,)`` int64), numbered by first appearance."""
    ids: dict[Any, int] = {}
    return np.fromiter((ids.setdefault(label, len(ids)) for label in labels), np.int64,
                       count=len(labels))


def clusters(data: TraceDataset, split_by: str = "query") -> np.ndarray:
    """The cluster of each query, ``(n,)`` int64 numbered by first appearance.

    Raises:
        ValueError: For ``split_by="group"`` on a dataset without groups.
    """
    one_of(split_by, "split_by", SPLIT_BY)
    if split_by == "query":
        return data.prompt_groups()
    if data.groups is None:
        raise ValueError(f"{data.source}: split_by='group' needs per-query groups (a 'group' "
                         "column, RouteLLM file names or RouterArena domains); this data has "
                         "none")
    return codes(data.groups)


def split_clusters(cluster: np.ndarray, seed: int, test_fraction: float,
                   what: str = "one cluster") -> tuple[np.ndarray, np.ndarray]:
    """Disjoint ascending (train, test) indices keeping each cluster on one side.

    The test side takes the leading clusters of ``default_rng(seed).permutation`` whose
    query count is closest to ``round(n * test_fraction)`` (the first such prefix; both
    sides non-empty).

    Raises:
        ValueError: When a side would be empty (one cluster, or a fraction too small).
    """
    n = len(cluster)
    n_test = round(n * test_fraction)
    if not 0 < n_test < n:
        raise ValueError(f"test_fraction={test_fraction!r} leaves an empty split of "
                         f"{n} queries")
    n_clusters = int(cluster.max()) + 1
    if n_clusters < 2:
        raise ValueError(f"all {n} queries share {what}; a split keeping it whole would "
                         "leave one side empty")
    order = np.random.default_rng(seed).permutation(n_clusters)
    sizes = np.bincount(cluster, minlength=n_clusters)[order]
    taken = np.cumsum(sizes)[:-1]  # queries in the first 1 .. n_clusters-1 clusters
    # every cluster one query: taken is 1 .. n-1, so this is order[:n_test]
    test_clusters = order[: int(np.argmin(np.abs(taken - n_test))) + 1]
    test = np.isin(cluster, test_clusters)
    return np.flatnonzero(~test), np.flatnonzero(test)


def fold_ids(cluster: np.ndarray, folds: int, seed: int = 0) -> np.ndarray:
    """The fold (0 .. folds-1) of each query: clusters dealt round-robin in a seeded order.

    Raises:
        ValueError: If ``folds`` < 2 or there are fewer clusters than folds.
    """
    integer(folds, "folds", minimum=2)
    n_clusters = int(cluster.max()) + 1
    if n_clusters < folds:
        raise ValueError(f"folds={folds}: only {n_clusters} clusters to deal into folds")
    return (np.random.default_rng(seed).permutation(n_clusters) % folds)[cluster]
