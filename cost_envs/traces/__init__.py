"""Logged outcomes of real models: the dataset, its readers and query features.

* :mod:`cost_envs.traces.dataset`: :class:`TraceDataset`, the arrays an env replays;
* :mod:`cost_envs.traces.readers`: :func:`load_traces` (RouteLLM CSVs, generic CSV and
  JSONL, one file or a list), token counting, the packaged synthetic example;
* :mod:`cost_envs.traces.generic`: the generic schema's reader (CSV, JSONL, dicts);
* :mod:`cost_envs.traces.routerarena`: :func:`load_routerarena` (RouterArena's
  ``cached_results``, one JSONL file per model, logged dollar costs, domains as groups);
* :mod:`cost_envs.traces.combine`: several files as one dataset;
* :mod:`cost_envs.traces.splits`: the one split mechanism (by prompt or by group, train
  and test, cross-validation folds);
* :mod:`cost_envs.traces.parsing`: the readers' located field parsing and CSV records;
* :mod:`cost_envs.traces.features`: hashed n-grams, MiniLM embeddings, answer markers.
"""

from cost_envs.traces.combine import combine_datasets
from cost_envs.traces.dataset import TraceDataset
from cost_envs.traces.readers import (
    APPROX_COUNTER,
    FORMATS,
    GENERIC_COLUMNS,
    count_tokens,
    dataset_from_records,
    detect_format,
    example_traces,
    file_group,
    load_traces,
    records_from_dataset,
    token_counter_name,
)
from cost_envs.traces.routerarena import load_routerarena
from cost_envs.traces.splits import SPLIT_BY, check_split_args

__all__ = [
    "APPROX_COUNTER",
    "FORMATS",
    "GENERIC_COLUMNS",
    "SPLIT_BY",
    "TraceDataset",
    "check_split_args",
    "combine_datasets",
    "count_tokens",
    "dataset_from_records",
    "detect_format",
    "example_traces",
    "file_group",
    "load_routerarena",
    "load_traces",
    "records_from_dataset",
    "token_counter_name",
]
