"""RouterArena's ``cached_results``: one JSONL file per model, logged tokens and dollars.

RouterArena (RouteWorks/RouterArena) caches every model's answers to its evaluation set
as ``cached_results/<model>.jsonl``, one line per query. :func:`load_routerarena` reads
a folder of them (or a list of files) into one
:class:`~cost_envs.traces.TraceDataset`, reading from each line:

=====================================  ==============================================
field                                  becomes
=====================================  ==============================================
``global_index``                       the query id; the part before its last ``_``
                                       is the query's group, its domain
                                       (``MMLUPro_history_12``: ``MMLUPro_history``)
``question``                           the prompt (identical in every file)
``llm_selected``                       the model (one per file)
``token_usage.input_tokens``           input tokens, as the provider reported them
``token_usage.output_tokens``          output tokens
``evaluation_result.score``            the score, a number <= 1; correct when >= 0.5
                                       (as the generic schema's ``score``); a
                                       negative score counts as 0 (RouterArena's
                                       METEOR scored one answer -0.033)
``evaluation_result.inference_cost``   the call's logged cost in US dollars, used as
                                       it is: no price table is needed
``generated_answer``                   the answer text (optional)
=====================================  ==============================================

Other fields are ignored. A line that is not a JSON object, a missing or ill-typed field,
a second model in one file, a repeated ``global_index``, and files that disagree on
the queries or their questions are ``ValueError`` s naming the file, the line (1-based)
and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cost_envs.config_files import json_loads
from cost_envs.traces.dataset import TraceDataset
from cost_envs.traces.generic import SCORE_THRESHOLD
from cost_envs.traces.parsing import (
    Where,
    as_number,
    as_tokens,
    missing,
    open_trace_file,
    shown,
)

#: Glob of the per-model files in a RouterArena folder.
PATTERN = "*.jsonl"


def domain_of(global_index: str) -> str:
    """The domain of a RouterArena query id: the part before its last ``_``."""
    return global_index.rpartition("_")[0]


def _field(row: dict[str, Any], dotted: str, where: Where, line: int) -> Any:
    """``row["a"]["b"]`` for ``"a.b"``; a missing or null value names the field."""
    value: Any = row
    for key in dotted.split("."):
        if not isinstance(value, dict):
            raise where.error(line, dotted, f"expected an object at {key!r}, got "
                              f"{shown(value)}")
        value = value.get(key)
        if missing(value):
            raise where.error(line, dotted, "missing value (a required field)")
    return value


def _string(row: dict[str, Any], dotted: str, where: Where, line: int) -> str:
    value = _field(row, dotted, where, line)
    if not isinstance(value, str):
        raise where.error(line, dotted, f"expected a string, got {shown(value)}")
    return value


def _score(value: Any, where: Where, line: int, field: str) -> float:
    """A score <= 1; a negative one (a METEOR quirk) counts as 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        value = 0.0
    return as_number(value, where, line, field, "a number <= 1", maximum=1.0)


def _parse_line(raw: str, where: Where, line: int) -> dict[str, Any]:
    """One RouterArena line as the fields the dataset keeps."""
    try:
        row = json_loads(raw)
    except json.JSONDecodeError as err:
        raise where.error(line, None, f"not valid JSON: {err.msg} (character {err.colno})"
                          ) from None
    except ValueError as err:  # a repeated key, a huge integer
        raise where.error(line, None, str(err).split(": ", 1)[-1]) from None
    if not isinstance(row, dict):
        raise where.error(line, None, f"expected a JSON object, got {type(row).__name__}")
    qid = _string(row, "global_index", where, line)
    if not domain_of(qid):
        raise where.error(line, "global_index", f"expected '<domain>_<number>', got "
                          f"{shown(qid)}")
    answer = row.get("generated_answer")
    if not missing(answer) and not isinstance(answer, str):
        raise where.error(line, "generated_answer", f"expected a string, got {shown(answer)}")
    score_field, cost_field = "evaluation_result.score", "evaluation_result.inference_cost"
    return {
        "id": qid, "line": line,
        "question": _string(row, "question", where, line),
        "model": _string(row, "llm_selected", where, line),
        "input": as_tokens(_field(row, "token_usage.input_tokens", where, line), where, line,
                           "token_usage.input_tokens"),
        "output": as_tokens(_field(row, "token_usage.output_tokens", where, line), where,
                            line, "token_usage.output_tokens"),
        "score": _score(_field(row, score_field, where, line), where, line, score_field),
        "cost": as_number(_field(row, cost_field, where, line), where, line, cost_field,
                          "a number >= 0"),
        "answer": None if missing(answer) else answer,
    }


def _read_model(path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """(model, global_index -> parsed line) of one model's file, in file order."""
    where = Where(str(path))
    try:
        with open_trace_file(path) as handle:  # streamed, line by line
            return _model_rows(handle, where)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text: {err}") from None


def _model_rows(lines: Iterable[str], where: Where) -> tuple[str, dict[str, dict[str, Any]]]:
    rows: dict[str, dict[str, Any]] = {}
    model = None
    for line, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        row = _parse_line(raw, where, line)
        if model is None:
            model, model_line = row["model"], line
        elif row["model"] != model:
            raise where.error(line, "llm_selected", f"expected one model per file: "
                              f"{shown(row['model'])} here, {shown(model)} on line {model_line}")
        if row["id"] in rows:
            raise where.error(line, "global_index", f"duplicate query {shown(row['id'])} (first "
                              f"on line {rows[row['id']]['line']})")
        rows[row["id"]] = row
    if model is None:
        raise where.error(None, None, "the file is empty")
    return model, rows


def _check_same_queries(path: Path, rows: dict[str, dict[str, Any]], first: Path,
                        reference: dict[str, dict[str, Any]]) -> None:
    where = Where(str(path))
    missing_ids = [q for q in reference if q not in rows]
    if missing_ids:
        raise where.error(None, "global_index", f"no line for query {shown(missing_ids[0])} "
                          f"of {first} ({len(missing_ids)} missing): every model file must "
                          "answer the same queries")
    for qid, row in rows.items():
        if qid not in reference:
            raise where.error(row["line"], "global_index", f"query {shown(qid)} is not in "
                              f"{first}: every model file must answer the same queries")
        if row["question"] != reference[qid]["question"]:
            raise where.error(row["line"], "question", f"query {shown(qid)} has another "
                              f"question on line {reference[qid]['line']} of {first}")


def _paths(path: str | Path | Sequence[str | Path]) -> list[Path]:
    if isinstance(path, (str, Path)) and Path(path).is_dir():
        found = sorted(Path(path).glob(PATTERN))
        if not found:
            raise ValueError(f"{path}: no {PATTERN} files (expected RouterArena's "
                             "cached_results, one file per model)")
        return found
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if not paths:
        raise ValueError("path: expected a folder, a file or a non-empty list of files, got []")
    return paths


def load_routerarena(path: str | Path | Sequence[str | Path]) -> TraceDataset:
    """RouterArena's cached results as one dataset (see the module doc for the fields).

    Args:
        path: A folder (its ``*.jsonl`` files, sorted by name, one per model), one file,
            or a list of files.

    Returns:
        The :class:`TraceDataset`: models in file order, queries in the first file's
        order, the logged costs as ``cost`` (so ``call_costs(None)`` works), domains as
        ``groups``, token counts ``"logged"``.

    Raises:
        ValueError: Naming the file, the line and the field of the first malformed value,
            or the file whose queries differ from the first file's.
        FileNotFoundError: If a file does not exist.
    """
    paths = _paths(path)
    models: list[str] = []
    tables: list[dict[str, dict[str, Any]]] = []
    for file in paths:
        model, rows = _read_model(file)
        if model in models:
            raise Where(str(file)).error(None, "llm_selected", f"model {shown(model)} is also "
                                         f"the model of {paths[models.index(model)]}")
        if tables:
            _check_same_queries(file, rows, paths[0], tables[0])
        models.append(model)
        tables.append(rows)
    ids = list(tables[0])
    cells = [[table[q] for table in tables] for q in ids]

    def grid(key: str) -> np.ndarray:
        return np.array([[cell[key] for cell in row] for row in cells], dtype=np.float64)

    scores = grid("score")
    answers = tuple(tuple(cell["answer"] for cell in row) for row in cells)
    return TraceDataset(
        models=tuple(models),
        query_ids=tuple(ids),
        prompts=tuple(tables[0][q]["question"] for q in ids),
        scores=scores,
        correct=scores >= SCORE_THRESHOLD,
        input_tokens=grid("input"),
        output_tokens=grid("output"),
        cost=grid("cost"),
        responses=answers if any(a is not None for row in answers for a in row) else None,
        source=str(path) if isinstance(path, (str, Path)) else " + ".join(map(str, paths)),
        token_counter="logged",
        groups=tuple(domain_of(q) for q in ids),
    )
