"""Several trace files as one dataset: :func:`combine_datasets`.

Used by :func:`cost_envs.traces.load_traces` for a list of files (RouteLLM's MMLU
subjects, one file each) and by :func:`cost_envs.traces.routerarena.load_routerarena`'s
callers alike. The queries are stacked in file order; every file must log the same
models (the first file's column order is kept). Each query keeps its file's group (or,
for a file without groups, the file's label) so that ``split_by="group"`` can hold out
whole files, and its id becomes ``"<label>:<id>"`` (RouteLLM's ids are row positions,
equal across files).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cost_envs.traces.dataset import TraceDataset

#: How many file names a combined dataset's ``source`` lists before abbreviating.
SHOWN_SOURCES = 3


def _source(parts: Sequence[TraceDataset]) -> str:
    names = [p.source for p in parts]
    if len(names) <= SHOWN_SOURCES:
        return " + ".join(names)
    rest = len(names) - SHOWN_SOURCES
    return f"{' + '.join(names[:SHOWN_SOURCES])} + {rest} more file{'s' if rest > 1 else ''}"


def combine_datasets(parts: Sequence[TraceDataset], labels: Sequence[str]) -> TraceDataset:
    """One dataset of the queries of ``parts``, in order.

    Args:
        parts: The datasets (one per file), all with the same set of models.
        labels: One distinct non-empty label per part (the file's group name): the
            prefix of its query ids, and the group of its queries when it has none.

    Returns:
        The combined :class:`TraceDataset`; a single part is returned unchanged.

    Raises:
        ValueError: Naming the part (file) whose models differ from the first's, or on
            labels that are not distinct.
    """
    parts, labels = list(parts), [str(x) for x in labels]
    if not parts or len(labels) != len(parts):
        raise ValueError(f"combine_datasets: expected one label per dataset, got {len(parts)} "
                         f"datasets and {len(labels)} labels")
    if len(parts) == 1:
        return parts[0]
    if not all(labels) or len(set(labels)) != len(labels):
        dup = sorted({x for x in labels if labels.count(x) > 1 or not x})
        raise ValueError(f"combine_datasets: files need distinct names (their labels "
                         f"{dup} repeat): each file's label prefixes its query ids")
    models = parts[0].models
    for part in parts[1:]:
        if set(part.models) != set(models):
            raise ValueError(f"{part.source}: models {list(part.models)} differ from "
                             f"{list(models)} of {parts[0].source}; combined files must log "
                             "the same models")
    parts = [p if p.models == models else p.select_models(models) for p in parts]
    ids = tuple(f"{label}:{q}" for part, label in zip(parts, labels, strict=True)
                for q in part.query_ids)
    groups = tuple(g for part, label in zip(parts, labels, strict=True)
                   for g in (part.groups or (label,) * part.n_queries))
    costs = None
    if any(p.cost is not None for p in parts):
        costs = np.vstack([p.cost if p.cost is not None else np.full(p.scores.shape, np.nan)
                           for p in parts])
    responses = None
    if any(p.responses is not None for p in parts):
        responses = tuple(row for p in parts for row in (
            p.responses or ((None,) * p.n_models,) * p.n_queries))
    counters = sorted({p.token_counter for p in parts})
    return TraceDataset(
        models=models,
        query_ids=ids,
        prompts=tuple(t for p in parts for t in p.prompts),
        scores=np.vstack([p.scores for p in parts]),
        correct=np.vstack([p.correct for p in parts]),
        input_tokens=np.vstack([p.input_tokens for p in parts]),
        output_tokens=np.vstack([p.output_tokens for p in parts]),
        cost=costs,
        responses=responses,
        source=_source(parts),
        token_counter="; ".join(counters),
        groups=groups,
    )
