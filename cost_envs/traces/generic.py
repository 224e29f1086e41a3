"""The generic trace schema: one row per (query, model), as CSV, JSONL or dicts.

The schema is documented in :mod:`cost_envs.traces.readers` (which dispatches to the
readers here by format). Every error names the file, the line and the column.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from cost_envs.config import suggestion
from cost_envs.config_files import json_loads
from cost_envs.traces.dataset import TraceDataset
from cost_envs.traces.parsing import (
    Where,
    as_bool,
    as_number,
    as_tokens,
    csv_records,
    missing,
    shown,
)

#: Columns of the generic schema, in the order they are documented.
GENERIC_COLUMNS = ("query_id", "model", "correct", "score", "input_tokens", "output_tokens",
                   "cost", "prompt", "response", "group")
#: The generic columns that make a CSV generic (a RouteLLM CSV has ``prompt``, may have
#: a ``group`` column and a model called ``response``).
_GENERIC_ONLY = tuple(c for c in GENERIC_COLUMNS if c not in ("prompt", "response", "group"))
_REQUIRED_COLUMNS = ("query_id", "model", "input_tokens", "output_tokens")
#: Score at or above which a query counts as correct when only ``score`` is logged.
SCORE_THRESHOLD = 0.5
_LINE = re.compile(r"^line \d+: ")

def _build_generic(rows: Iterable[tuple[int, Mapping[str, Any]]], where: Where
                   ) -> TraceDataset:
    """A dataset from ``(line, row)`` pairs of the generic schema."""
    models: dict[str, int] = {}
    queries: dict[str, dict[str, Any]] = {}  # query id -> {"line", "prompt", "rows"}
    have_cost = have_response = False
    for line, row in rows:
        unknown = [k for k in row if k not in GENERIC_COLUMNS]
        if unknown:
            raise _unknown_column(where, line, str(unknown[0]))
        for column in _REQUIRED_COLUMNS:
            if column not in row or missing(row[column]):
                raise where.error(line, column, "missing value (a required column)")
        if missing(row.get("correct")) and missing(row.get("score")):
            raise where.error(line, "correct", "missing value: each row needs 'correct' or "
                              "'score'")
        qid, model = row["query_id"], row["model"]
        if isinstance(qid, bool) or not isinstance(qid, (str, int)):
            raise where.error(line, "query_id", "expected a string or an integer, got "
                              f"{shown(qid)}")
        if not isinstance(model, str):
            raise where.error(line, "model", f"expected a string, got {shown(model)}")
        qid = str(qid)
        correct = None if missing(row.get("correct")) else as_bool(
            row["correct"], where, line, "correct")
        score = None
        if not missing(row.get("score")):
            score = as_number(row["score"], where, line, "score", "a number in [0, 1]",
                               maximum=1.0)
        if score is None:
            assert correct is not None  # a row without both was refused above
            score = float(correct)
        if correct is None:
            correct = score >= SCORE_THRESHOLD
        cost = math.nan
        if not missing(row.get("cost")):
            cost = as_number(row["cost"], where, line, "cost", "a number >= 0")
            have_cost = True
        texts = {}
        for column in ("prompt", "response", "group"):
            value = row.get(column)
            if not missing(value) and not isinstance(value, str):
                raise where.error(line, column, f"expected a string, got {shown(value)}")
            texts[column] = None if missing(value) else value
        have_response = have_response or texts["response"] is not None
        entry = queries.setdefault(qid, {"line": line, "prompt": None, "group": None,
                                         "rows": {}})
        if model in entry["rows"]:
            raise where.error(line, "model", f"duplicate row for query {shown(qid)} and model "
                              f"{shown(model)} (first on line {entry['rows'][model]['line']})")
        if texts["prompt"] is not None:
            if entry["prompt"] is not None and entry["prompt"] != texts["prompt"]:
                raise where.error(line, "prompt", f"query {shown(qid)} has another prompt on line "
                                  f"{entry['line']}; a query's rows must share one prompt")
            entry["prompt"] = texts["prompt"]
        _set_group(entry, texts["group"], qid, where, line)
        models.setdefault(model, len(models))
        entry["rows"][model] = {
            "line": line, "correct": correct, "score": score, "cost": cost,
            "input": as_tokens(row["input_tokens"], where, line, "input_tokens"),
            "output": as_tokens(row["output_tokens"], where, line, "output_tokens"),
            "response": texts["response"],
        }
    if not queries:
        raise where.error(None, None, "no data rows (the file is empty)")
    names = list(models)
    groups = _groups(queries, where)
    for qid, entry in queries.items():
        absent = [m for m in names if m not in entry["rows"]]
        if absent:
            raise where.error(entry["line"], "model", f"query {shown(qid)} (first seen here) has "
                              f"no row for model(s) {absent}; every query needs one row per "
                              f"model {names}")
    table = [[entry["rows"][m] for m in names] for entry in queries.values()]

    def grid(key: str) -> list[list[Any]]:
        return [[cell[key] for cell in row] for row in table]

    def array(key: str, dtype: Any) -> np.ndarray:
        return np.array(grid(key), dtype=dtype)  # TraceDataset's dtype; it keeps a copy

    return TraceDataset(
        models=tuple(names),
        query_ids=tuple(queries),
        prompts=tuple(entry["prompt"] or "" for entry in queries.values()),
        scores=array("score", np.float64),
        correct=array("correct", bool),
        input_tokens=array("input", np.float64),
        output_tokens=array("output", np.float64),
        cost=array("cost", np.float64) if have_cost else None,
        responses=tuple(tuple(r) for r in grid("response")) if have_response else None,
        source=where.source,
        token_counter="logged",
        groups=groups,
    )


def _set_group(entry: dict[str, Any], group: str | None, qid: str, where: Where,
               line: int) -> None:
    """Record a row's group on its query; a query's rows must agree on it."""
    if group is None:
        return
    if not group.strip():
        raise where.error(line, "group", "expected a non-empty string, got " + shown(group))
    if entry["group"] is not None and entry["group"] != group:
        raise where.error(line, "group", f"query {shown(qid)} has group {shown(entry['group'])} "
                          f"on line {entry['group_line']}; a query's rows must share one group")
    entry["group"], entry["group_line"] = group, line


def _groups(queries: dict[str, dict[str, Any]], where: Where) -> tuple[str, ...] | None:
    """Every query's group, or None when no row has one (some but not all is an error)."""
    if all(entry["group"] is None for entry in queries.values()):
        return None
    for qid, entry in queries.items():
        if entry["group"] is None:
            raise where.error(entry["line"], "group", f"query {shown(qid)} (first seen here) has "
                              "no group, but other queries do: give every query a group or none")
    return tuple(entry["group"] for entry in queries.values())


def _unknown_column(where: Where, line: int, column: str) -> ValueError:
    return where.error(line, column, f"unknown column{suggestion(column, GENERIC_COLUMNS)} "
                       f"(the generic schema's columns are {list(GENERIC_COLUMNS)})")


def read_generic_csv(text: str | Iterable[str], where: Where) -> TraceDataset:
    """A dataset from a generic CSV's text or lines (errors located by ``where``)."""
    header, header_line, records = csv_records(text, where)
    unknown = [h for h in header if h not in GENERIC_COLUMNS]
    if unknown:  # first: a misspelt column is also a missing one, and this names both
        raise _unknown_column(where, header_line, unknown[0])
    for column in _REQUIRED_COLUMNS:
        if column not in header:
            raise where.error(header_line, column, f"missing column in the header; the generic "
                              f"schema needs {list(_REQUIRED_COLUMNS)} and 'correct' or "
                              "'score'")
    if "correct" not in header and "score" not in header:
        raise where.error(header_line, "correct", "missing column in the header: the generic "
                          "schema needs 'correct' or 'score'")
    return _build_generic(((line, dict(zip(header, fields, strict=True)))
                           for line, fields in records), where)


def read_jsonl(text: str | Iterable[str], where: Where) -> TraceDataset:
    """A dataset from a JSONL text or its lines (an open file), one object per line.

    Lines are parsed one at a time: from an open file, only the dataset is held.
    """
    lines = text.splitlines() if isinstance(text, str) else text

    def rows() -> Iterable[tuple[int, Mapping[str, Any]]]:
        for line_no, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                row = json_loads(raw)  # strict: a repeated key is an error, not the last
            except json.JSONDecodeError as err:
                raise where.error(line_no, None, f"not valid JSON: {err.msg} (character "
                                  f"{err.colno})") from None
            except ValueError as err:  # "line 1: key: ..." of the one-line document
                raise where.error(line_no, None, _LINE.sub("", str(err))) from None
            if not isinstance(row, dict):
                raise where.error(line_no, None, f"expected a JSON object, got "
                                  f"{type(row).__name__}")
            yield line_no, row

    return _build_generic(rows(), where)


def records_from_dataset(data: TraceDataset) -> list[dict[str, Any]]:
    """The dataset as generic-schema rows (query-major), e.g. to write a JSONL file."""
    out = []
    for i, qid in enumerate(data.query_ids):
        for j, model in enumerate(data.models):
            row: dict[str, Any] = {
                "query_id": qid, "model": model, "correct": bool(data.correct[i, j]),
                "score": float(data.scores[i, j]),
                "input_tokens": int(data.input_tokens[i, j]),
                "output_tokens": int(data.output_tokens[i, j]),
            }
            if data.cost is not None and not np.isnan(data.cost[i, j]):
                row["cost"] = float(data.cost[i, j])
            if data.prompts[i]:
                row["prompt"] = data.prompts[i]
            if data.responses is not None and data.responses[i][j] is not None:
                row["response"] = data.responses[i][j]
            if data.groups is not None:
                row["group"] = data.groups[i]
            out.append(row)
    return out


def dataset_from_records(records: Iterable[Mapping[str, Any]], source: str = "<records>"
                         ) -> TraceDataset:
    """A dataset from generic-schema rows (dicts), validated as a JSONL file's would be.

    Errors name ``source`` and the row's 1-based position as its line.
    """
    return _build_generic(((i, r) for i, r in enumerate(records, start=1)), Where(source))
