"""Readers of logged per-query outcomes: RouteLLM CSVs, generic CSV and JSONL; token counting.

:func:`load_traces` reads the logs ``cost_envs/TraceRouting-v0`` replays into a
:class:`~cost_envs.traces.dataset.TraceDataset`. It reads three formats, detects which one
a file is in from its suffix and header (:func:`detect_format`), and accepts a UTF-8
byte-order mark:

**RouteLLM evaluation CSVs** (``format="routellm"``): a ``prompt`` column, one
``True``/``False`` column per model (the column name is the model's name) and optional
``<model>_response`` columns with each model's answer text. Input tokens are the prompt's
tokens, output tokens the response's; without a response column a model's output tokens
are ``default_output_tokens`` (1: the RouteLLM CSVs without responses are multiple-choice
evaluations answered with one letter).

**Generic CSV or JSONL** (``format="csv"`` or ``"jsonl"``), one row per (query, model)::

    {"query_id": "q17", "model": "gpt-4.1", "correct": true, "score": 1.0,
     "input_tokens": 143, "output_tokens": 210, "cost": 0.00197,
     "prompt": "Ann has 12 apples ...", "response": "... #### 19"}

========================  ========  ===================================================
column                    required  meaning
========================  ========  ===================================================
``query_id``              yes       the query (a string or an integer)
``model``                 yes       the model's name (as in the price table)
``correct``               one of    ``true``/``false`` (also ``True``/``False``/``1``/``0``)
``score``                 the two   a number in ``[0, 1]``; without ``correct``, a query
                                    counts as correct when ``score >= 0.5``; without
                                    ``score``, the score is ``1.0`` or ``0.0``
``input_tokens``          yes       an integer >= 0
``output_tokens``         yes       an integer >= 0 (reasoning tokens included)
``cost``                  no        the call's logged cost (>= 0); used instead of
                                    tokens x price where present (empty/null: absent)
``prompt``                no        the query's text (identical on all of its rows);
                                    without it the query's text features are zero
``response``              no        the model's answer text
========================  ========  ===================================================

Every query needs exactly one row per model. Unknown columns (with the closest known
name), a missing column, a value of the wrong type, a negative token count, a line that
is not JSON (or repeats a key), a duplicate (query, model) row, a query without a row for
some model and an empty file are ``ValueError`` s naming the file, the line (1-based, as
an editor shows it; a CSV header is line 1, a record spanning several lines is reported
at its first line) and the column.

**Tokens.** Where token counts are not logged (RouteLLM CSVs), they are counted with
``tiktoken``'s ``cl100k_base`` encoding if ``tiktoken`` is installed *and* its encoding
loads (it downloads its BPE file on first use, so offline it may not), otherwise with the
approximation ``ceil(characters / 4)`` (OpenAI's rule of thumb of ~4 characters per
token). Every model's tokens are counted with that one counter, whatever the model's own
tokenizer. :attr:`TraceDataset.token_counter` records which counter was used.

**Costs and splits** are :class:`TraceDataset`'s (see :mod:`cost_envs.traces.dataset`).

**Features.** The text features (hashed n-grams, MiniLM embeddings, final-answer markers)
live in :mod:`cost_envs.traces.features`.
"""

from __future__ import annotations

import csv
import difflib
import functools
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from cost_envs.config import integer, one_of, suggestion
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

#: Formats :func:`load_traces` reads.
FORMATS = ("routellm", "csv", "jsonl")
#: Columns of the generic schema, in the order they are documented.
GENERIC_COLUMNS = ("query_id", "model", "correct", "score", "input_tokens", "output_tokens",
                   "cost", "prompt", "response")
#: The generic columns that make a CSV generic (a RouteLLM CSV has ``prompt``, and may
#: have a model called ``response``).
_GENERIC_ONLY = tuple(c for c in GENERIC_COLUMNS if c not in ("prompt", "response"))
_REQUIRED_COLUMNS = ("query_id", "model", "input_tokens", "output_tokens")
#: Suffix of RouteLLM's response columns.
RESPONSE_SUFFIX = "_response"
#: The approximation used when tiktoken is unavailable: characters per token.
CHARS_PER_TOKEN = 4
APPROX_COUNTER = f"approx: ceil(characters / {CHARS_PER_TOKEN})"
TIKTOKEN_ENCODING = "cl100k_base"
#: Output tokens of a RouteLLM model without a response column (a one-letter answer).
DEFAULT_OUTPUT_TOKENS = 1
#: Score at or above which a query counts as correct when only ``score`` is logged.
SCORE_THRESHOLD = 0.5
_LINE = re.compile(r"^line \d+: ")



# ------------------------------------------------------------------------------ tokens
@functools.cache
def _tiktoken_encoding() -> Any:
    try:
        import tiktoken

        return tiktoken.get_encoding(TIKTOKEN_ENCODING)
    except Exception:  # not installed, or its BPE file cannot be fetched (offline)
        return None


def token_counter_name(counter: str = "auto") -> str:
    """The counter :func:`count_tokens` uses for ``counter`` ("auto", "tiktoken", "approx")."""
    one_of(counter, "token_counter", ("auto", "tiktoken", "approx"))
    if counter == "approx":
        return APPROX_COUNTER
    if _tiktoken_encoding() is not None:
        return f"tiktoken {TIKTOKEN_ENCODING}"
    if counter == "tiktoken":
        raise ValueError("token_counter='tiktoken': tiktoken is not installed or its "
                         f"{TIKTOKEN_ENCODING} encoding cannot be loaded (it is downloaded on "
                         "first use); use 'auto' or 'approx'")
    return APPROX_COUNTER


def count_tokens(texts: Sequence[str], counter: str = "auto") -> tuple[np.ndarray, str]:
    """Token counts of ``texts`` and the name of the counter used (see the module doc).

    Args:
        texts: The texts.
        counter: ``"auto"`` (tiktoken if it loads, else the approximation), ``"tiktoken"``
            (an error if it does not load) or ``"approx"`` (``ceil(characters / 4)``).

    Returns:
        ``(counts, name)``: int64 counts, one per text, and the counter's name.
    """
    name = token_counter_name(counter)
    if name == APPROX_COUNTER:
        chars = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        return -(-chars // CHARS_PER_TOKEN), name
    encoding = _tiktoken_encoding()
    batch = encoding.encode_ordinary_batch(list(texts))
    return np.array([len(t) for t in batch], dtype=np.int64), name


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
            score = float(correct)
        if correct is None:
            correct = score >= SCORE_THRESHOLD
        cost = math.nan
        if not missing(row.get("cost")):
            cost = as_number(row["cost"], where, line, "cost", "a number >= 0")
            have_cost = True
        texts = {}
        for column in ("prompt", "response"):
            value = row.get(column)
            if not missing(value) and not isinstance(value, str):
                raise where.error(line, column, f"expected a string, got {shown(value)}")
            texts[column] = None if missing(value) else value
        have_response = have_response or texts["response"] is not None
        entry = queries.setdefault(qid, {"line": line, "prompt": None, "rows": {}})
        if model in entry["rows"]:
            raise where.error(line, "model", f"duplicate row for query {shown(qid)} and model "
                              f"{shown(model)} (first on line {entry['rows'][model]['line']})")
        if texts["prompt"] is not None:
            if entry["prompt"] is not None and entry["prompt"] != texts["prompt"]:
                raise where.error(line, "prompt", f"query {shown(qid)} has another prompt on line "
                                  f"{entry['line']}; a query's rows must share one prompt")
            entry["prompt"] = texts["prompt"]
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
    for qid, entry in queries.items():
        absent = [m for m in names if m not in entry["rows"]]
        if absent:
            raise where.error(entry["line"], "model", f"query {shown(qid)} (first seen here) has "
                              f"no row for model(s) {absent}; every query needs one row per "
                              f"model {names}")
    table = [[entry["rows"][m] for m in names] for entry in queries.values()]

    def grid(key: str) -> list[list[Any]]:
        return [[cell[key] for cell in row] for row in table]

    return TraceDataset(
        models=tuple(names),
        query_ids=tuple(queries),
        prompts=tuple(entry["prompt"] or "" for entry in queries.values()),
        scores=grid("score"),
        correct=grid("correct"),
        input_tokens=grid("input"),
        output_tokens=grid("output"),
        cost=grid("cost") if have_cost else None,
        responses=tuple(tuple(r) for r in grid("response")) if have_response else None,
        source=where.source,
        token_counter="logged",
    )


def _unknown_column(where: Where, line: int, column: str) -> ValueError:
    return where.error(line, column, f"unknown column{suggestion(column, GENERIC_COLUMNS)} "
                       f"(the generic schema's columns are {list(GENERIC_COLUMNS)})")


def _read_generic_csv(text: str, where: Where) -> TraceDataset:
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


def _read_jsonl(text: str, where: Where) -> TraceDataset:
    def rows() -> Iterable[tuple[int, Mapping[str, Any]]]:
        for line_no, raw in enumerate(text.splitlines(), start=1):
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


def _read_routellm(text: str, where: Where, token_counter: str,
                   default_output_tokens: int) -> TraceDataset:
    header, header_line, records = csv_records(text, where)
    if "prompt" not in header:
        raise where.error(header_line, "prompt", "missing column in the header (RouteLLM format: "
                          "'prompt', one True/False column per model, optional "
                          "'<model>_response')")
    models = [h for h in header if h != "prompt" and not h.endswith(RESPONSE_SUFFIX)]
    if not models:
        raise where.error(header_line, None, "no model columns (expected one True/False column per "
                          "model besides 'prompt')")
    for h in header:
        if h.endswith(RESPONSE_SUFFIX) and h[: -len(RESPONSE_SUFFIX)] not in models:
            raise where.error(header_line, h, f"response column without its model column "
                              f"{h[: -len(RESPONSE_SUFFIX)]!r}")
    if not records:
        raise where.error(None, None, "no data rows (only a header)")
    col = {h: i for i, h in enumerate(header)}
    prompts, correct = [], []
    # MMLU repeats a few questions: rows, not texts, are queries (and split_indices keeps
    # repeats of one prompt on one side)
    for line, fields in records:
        prompts.append(fields[col["prompt"]])
        correct.append([as_bool(fields[col[m]], where, line, m) for m in models])
    n = len(records)
    input_tokens, counter = count_tokens(prompts, token_counter)
    output = np.full((n, len(models)), default_output_tokens, dtype=np.int64)
    responses: list[list[str | None]] = [[None] * len(models) for _ in range(n)]
    have_response = False
    for j, m in enumerate(models):
        column = m + RESPONSE_SUFFIX
        if column in col:
            have_response = True
            texts = [fields[col[column]] for _, fields in records]
            output[:, j] = count_tokens(texts, token_counter)[0]
            for i, t in enumerate(texts):
                responses[i][j] = t
    correct_array = np.array(correct, dtype=bool)
    return TraceDataset(
        models=tuple(models),
        query_ids=tuple(f"{i + 1}" for i in range(n)),  # the record's position in the file
        prompts=tuple(prompts),
        scores=correct_array.astype(np.float64),
        correct=correct_array,
        input_tokens=np.repeat(input_tokens[:, None], len(models), axis=1),
        output_tokens=output,
        responses=tuple(tuple(r) for r in responses) if have_response else None,
        source=where.source,
        token_counter=counter,
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # tolerate a byte-order mark
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text: {err}") from None


def detect_format(path: str | Path, text: str | None = None) -> str:
    """The format of a trace file, from its suffix and, for a ``.csv``, its header.

    ``"jsonl"`` for ``.jsonl`` (and ``.ndjson``) files. A ``.csv`` is ``"csv"`` (generic)
    when its header has a generic column other than ``prompt`` and ``response``, else
    ``"routellm"`` when it has a ``prompt`` column (whatever its model columns are called:
    ``model_a`` or ``Score`` are models there). A header with neither is ``"csv"`` when a
    column is a near miss of a generic one (``modle``: the generic reader then names the
    misspelling).

    Raises:
        ValueError: On another suffix, or a ``.csv`` header of neither kind (naming the
            columns each format expects).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix != ".csv":
        raise ValueError(f"{path}: cannot tell the format from the suffix {suffix!r}; "
                         f"expected .csv or .jsonl, or pass format= one of {list(FORMATS)}")
    text = _read_text(path) if text is None else text
    first = next(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")), [])
    names = {f.strip() for f in first}
    if names & set(_GENERIC_ONLY):  # model columns may look like them: the rest decide
        return "csv"
    if "prompt" in names:
        return "routellm"
    if any(not n.endswith(RESPONSE_SUFFIX)  # RouteLLM's answer columns
           and difflib.get_close_matches(n, (*_GENERIC_ONLY, "response"), n=1, cutoff=0.75)
           for n in names):
        return "csv"  # a misspelt generic header: the generic reader names the misspelling
    raise ValueError(
        f"{path}: line 1: the header {shown(first)} is neither a generic trace CSV (columns "
        f"{list(GENERIC_COLUMNS)}: {list(_REQUIRED_COLUMNS)} and 'correct' or 'score' "
        "required) nor a RouteLLM CSV (a 'prompt' column, one True/False column per model, "
        "optional '<model>_response' columns); pass format= to choose"
    )


def load_traces(
    path: str | Path,
    format: str | None = None,
    *,
    token_counter: str = "auto",
    default_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> TraceDataset:
    """Read logged outcomes from a RouteLLM CSV, a generic CSV or a JSONL file.

    Args:
        path: The file.
        format: ``"routellm"``, ``"csv"``, ``"jsonl"`` or ``None`` to detect it
            (:func:`detect_format`).
        token_counter: For RouteLLM CSVs (whose tokens are not logged): ``"auto"``,
            ``"tiktoken"`` or ``"approx"`` (see :func:`count_tokens`).
        default_output_tokens: For RouteLLM models without a response column.

    Returns:
        The :class:`TraceDataset`.

    Raises:
        ValueError: Naming the file, the line and the column of the first malformed value.
        FileNotFoundError: If ``path`` does not exist.
    """
    path = Path(path)
    if format is not None:
        one_of(format, "format", FORMATS)
    integer(default_output_tokens, "default_output_tokens", minimum=0)
    token_counter_name(token_counter)  # validate early
    text = _read_text(path)
    where = Where(str(path))
    if not text.strip():
        raise where.error(None, None, "the file is empty")
    fmt = format or detect_format(path, text)
    if fmt == "jsonl":
        return _read_jsonl(text, where)
    if fmt == "csv":
        return _read_generic_csv(text, where)
    return _read_routellm(text, where, token_counter, default_output_tokens)


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
            out.append(row)
    return out


def dataset_from_records(records: Iterable[Mapping[str, Any]], source: str = "<records>"
                         ) -> TraceDataset:
    """A dataset from generic-schema rows (dicts), validated as a JSONL file's would be.

    Errors name ``source`` and the row's 1-based position as its line.
    """
    return _build_generic(((i, r) for i, r in enumerate(records, start=1)), Where(source))


EXAMPLE_TRACES = "data/example_traces.jsonl"


@functools.cache
def example_traces() -> TraceDataset:
    """The packaged *synthetic* example (``cost_envs/data/example_traces.jsonl``).

    Made by ``benchmarks/make_example_traces.py``: templated arithmetic word problems
    whose difficulty drives each model's correctness. The outcomes are simulated; the
    model names only select prices from the price table. Real logs are loaded with
    :func:`load_traces`.
    """
    ref = resources.files("cost_envs").joinpath(EXAMPLE_TRACES)
    text = ref.read_text(encoding="utf-8")
    return _read_jsonl(text, Where(f"cost_envs/{EXAMPLE_TRACES}"))
