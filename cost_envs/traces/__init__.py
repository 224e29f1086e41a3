"""Logged outcomes of real models: the dataset, its readers and query features.

* :mod:`cost_envs.traces.dataset`: :class:`TraceDataset`, the arrays an env replays;
* :mod:`cost_envs.traces.readers`: :func:`load_traces` (RouteLLM CSVs, generic CSV and
  JSONL), token counting, the packaged synthetic example;
* :mod:`cost_envs.traces.parsing`: the readers' located field parsing and CSV records;
* :mod:`cost_envs.traces.features`: hashed n-grams, MiniLM embeddings, answer markers.
"""

from cost_envs.traces.dataset import TraceDataset, check_split_args
from cost_envs.traces.readers import (
    APPROX_COUNTER,
    FORMATS,
    GENERIC_COLUMNS,
    count_tokens,
    dataset_from_records,
    detect_format,
    example_traces,
    load_traces,
    records_from_dataset,
    token_counter_name,
)

__all__ = [
    "APPROX_COUNTER",
    "FORMATS",
    "GENERIC_COLUMNS",
    "TraceDataset",
    "check_split_args",
    "count_tokens",
    "dataset_from_records",
    "detect_format",
    "example_traces",
    "load_traces",
    "records_from_dataset",
    "token_counter_name",
]
