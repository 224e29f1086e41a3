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
evaluations answered with one letter). A ``group`` or ``subject`` column (at most one) is
read as each row's group; without one, every row's group is the file's name
(:func:`file_group`: ``mmlu_anatomy.csv`` gives ``mmlu_anatomy``, ``gsm8k_responses.csv``
gives ``gsm8k``). Every other column is a model: a column of anything but True/False
(``dataset``, ``difficulty`` ...) is an error naming the line and the column and saying
it was read as a model.

**Several files** (a list): combined into one dataset (:mod:`cost_envs.traces.combine`);
every file must log the same models; each query keeps its group (a generic file without
groups gets its :func:`file_group`) and its id becomes ``"<file_group>:<id>"``.

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
``group``                 no        the query's group (subject, domain, dataset;
                                    identical on all of its rows; every query or none)
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

**RouterArena** (one JSONL file per model, logged dollar costs) is read by
:func:`cost_envs.traces.routerarena.load_routerarena`.

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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from cost_envs.config import integer, one_of
from cost_envs.traces.combine import combine_datasets
from cost_envs.traces.dataset import TraceDataset
from cost_envs.traces.generic import (
    _GENERIC_ONLY,
    _REQUIRED_COLUMNS,
    GENERIC_COLUMNS,
    SCORE_THRESHOLD,
    dataset_from_records,
    read_generic_csv,
    read_jsonl,
    records_from_dataset,
)
from cost_envs.traces.parsing import Where, as_bool, csv_records, open_trace_file, shown
from cost_envs.traces.routerarena import load_routerarena

#: Formats :func:`load_traces` reads.
FORMATS = ("routellm", "csv", "jsonl")
#: Suffixes of the trace files a folder stands for.
TRACE_SUFFIXES = (".csv", ".jsonl", ".ndjson")
#: Suffix of RouteLLM's response columns.
RESPONSE_SUFFIX = "_response"
#: Columns of a RouteLLM CSV read as the query's group rather than as a model.
GROUP_COLUMNS = ("group", "subject")
#: Suffix dropped from a file's name to make its group (``gsm8k_responses.csv``: gsm8k).
FILE_SUFFIX = "_responses"
_ROUTELLM_COLUMNS = ("a 'prompt' column, an optional 'group' or 'subject' column, one True/False "
                     "column per model and optional '<model>_response' columns")
__all__ = ["APPROX_COUNTER", "FORMATS", "GENERIC_COLUMNS", "SCORE_THRESHOLD",
           "count_tokens", "dataset_from_records", "detect_format", "example_traces",
           "file_group", "load_traces", "records_from_dataset", "token_counter_name"]
#: The approximation used when tiktoken is unavailable: characters per token.
CHARS_PER_TOKEN = 4
APPROX_COUNTER = f"approx: ceil(characters / {CHARS_PER_TOKEN})"
TIKTOKEN_ENCODING = "cl100k_base"
#: Output tokens of a RouteLLM model without a response column (a one-letter answer).
DEFAULT_OUTPUT_TOKENS = 1


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


def file_group(path: str | Path) -> str:
    """The group a file's queries get from its name: the stem, without ``_responses``.

    ``mmlu/mmlu_anatomy.csv``: ``mmlu_anatomy``; ``gsm8k_responses.csv``: ``gsm8k``.
    """
    stem = Path(path).stem
    return stem.removesuffix(FILE_SUFFIX) or stem


def _routellm_columns(header: list[str], header_line: int, where: Where
                      ) -> tuple[list[str], str | None]:
    """(model columns, the group column or None) of a RouteLLM header."""
    if "prompt" not in header:
        raise where.error(header_line, "prompt", "missing column in the header (RouteLLM format: "
                          f"{_ROUTELLM_COLUMNS})")
    groups = [h for h in header if h in GROUP_COLUMNS]
    if len(groups) > 1:
        raise where.error(header_line, groups[1], f"a second group column besides "
                          f"{groups[0]!r}; a RouteLLM CSV has at most one of "
                          f"{list(GROUP_COLUMNS)}")
    models = [h for h in header if h != "prompt" and h not in GROUP_COLUMNS
              and not h.endswith(RESPONSE_SUFFIX)]
    if not models:
        raise where.error(header_line, None, "no model columns (expected one True/False column per "
                          "model besides 'prompt')")
    for h in header:
        if h.endswith(RESPONSE_SUFFIX) and h[: -len(RESPONSE_SUFFIX)] not in models:
            raise where.error(header_line, h, f"response column without its model column "
                              f"{h[: -len(RESPONSE_SUFFIX)]!r}")
    return models, groups[0] if groups else None


def _correctness(value: str, where: Where, line: int, model: str) -> bool:
    """A model column's True/False; the error says every other column is read as a model."""
    try:
        return as_bool(value, where, line, model)
    except ValueError as err:
        raise ValueError(f"{err} (read as a model: not prompt, group, subject or "
                         "*_response)") from None


def _read_routellm(text: str | Iterable[str], where: Where, token_counter: str,
                   default_output_tokens: int, group: str) -> TraceDataset:
    header, header_line, records = csv_records(text, where)
    models, group_column = _routellm_columns(header, header_line, where)
    if not records:
        raise where.error(None, None, "no data rows (only a header)")
    col = {h: i for i, h in enumerate(header)}
    prompts, correct, groups = [], [], []
    # MMLU repeats a few questions: rows, not texts, are queries (and split_indices keeps
    # repeats of one prompt on one side)
    for line, fields in records:
        prompts.append(fields[col["prompt"]])
        correct.append([_correctness(fields[col[m]], where, line, m) for m in models])
        if group_column is not None:
            groups.append(fields[col[group_column]].strip())
            if not groups[-1]:
                raise where.error(line, group_column, "missing value (a group column needs "
                                  "a group on every row)")
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
        groups=tuple(groups) if group_column is not None else (group,) * n,
    )


@contextmanager
def _utf8(path: Path) -> Iterator[None]:
    """Text that is not UTF-8, found while streaming ``path``, as a one-line ``ValueError``."""
    try:
        yield
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text: {err}") from None


def _is_blank(handle: TextIO) -> bool:
    """Whether the rest of ``handle`` is whitespace only (read in chunks, then rewound)."""
    start = handle.tell()
    while chunk := handle.read(1 << 16):
        if chunk.strip():
            handle.seek(start)
            return False
    return True


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
    if text is None:  # the header alone: the file is read once, by the reader
        with _utf8(path), open_trace_file(path) as handle:
            first = next(csv.reader(handle), [])
    else:
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
        f"required) nor a RouteLLM CSV ({_ROUTELLM_COLUMNS}); pass format= to choose"
    )


def load_traces(
    path: str | Path | Sequence[str | Path],
    format: str | None = None,
    *,
    token_counter: str = "auto",
    default_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> TraceDataset:
    """Read logged outcomes from RouteLLM CSVs, generic CSV or JSONL files.

    A list of files is combined into one dataset (:func:`combine_datasets`): every file
    must log the same models; each query keeps its file's groups (a generic file without
    a ``group`` column gets :func:`file_group` of its name) and its id becomes
    ``"<file_group>:<id>"``.

    Args:
        path: The file, a non-empty list of files, or a folder: its trace files
            (:func:`folder_files`), or with ``format=None`` RouterArena's cached results
            when it holds them (:func:`is_routerarena_folder`:
            :func:`~cost_envs.traces.routerarena.load_routerarena`, logged costs).
        format: ``"routellm"``, ``"csv"``, ``"jsonl"`` or ``None`` to detect it per file
            (:func:`detect_format`).
        token_counter: For RouteLLM CSVs (whose tokens are not logged): ``"auto"``,
            ``"tiktoken"`` or ``"approx"`` (see :func:`count_tokens`).
        default_output_tokens: For RouteLLM models without a response column.

    Returns:
        The :class:`TraceDataset`; a RouteLLM file's queries have the group of their
        ``group``/``subject`` column, else :func:`file_group` of the file's name.

    Raises:
        ValueError: Naming the file, the line and the column of the first malformed value;
            for a list, naming the file whose models differ from the first file's.
        FileNotFoundError: If a file does not exist.
    """
    if format is not None:
        one_of(format, "format", FORMATS)
    integer(default_output_tokens, "default_output_tokens", minimum=0)
    token_counter_name(token_counter)  # validate early
    if isinstance(path, (str, Path)) and Path(path).is_dir():
        if format is None and is_routerarena_folder(path):
            return load_routerarena(path)
        path = folder_files(path)
    if isinstance(path, (str, Path)):
        return _load_one(Path(path), format, token_counter, default_output_tokens)
    paths = [Path(p) for p in path]
    if not paths:
        raise ValueError("path: expected a file or a non-empty list of files, got []")
    parts = [_load_one(p, format, token_counter, default_output_tokens) for p in paths]
    return combine_datasets(parts, [file_group(p) for p in paths])


def folder_files(folder: str | Path,
                 suffixes: tuple[str, ...] = TRACE_SUFFIXES) -> list[Path]:
    """A folder's trace files (``suffixes``, :data:`TRACE_SUFFIXES` by default), by name.

    Raises:
        ValueError: If it has none.
    """
    found = sorted(p for p in Path(folder).iterdir()
                   if p.is_file() and p.suffix.lower() in suffixes)
    if not found:
        raise ValueError(f"{folder}: a folder without {'/'.join(suffixes)} files")
    return found


#: Characters of a line read to tell RouterArena's folder from a generic one.
_SNIFF_CHARS = 1 << 20


def is_routerarena_folder(folder: str | Path) -> bool:
    """Whether a folder holds RouterArena's cached results.

    Read from its first ``.jsonl`` file's first record: RouterArena's has a
    ``global_index`` field, which the generic schema does not have.
    """
    for file in sorted(f for f in Path(folder).glob("*.jsonl") if f.is_file()):  # no FIFO
        with file.open(encoding="utf-8-sig", errors="replace") as handle:
            # Bounded reads: a first "line" of gigabytes (no newline) is not held whole; cut
            # short it does not parse, and the loader then names the file's real problem.
            lines = iter(lambda: handle.readline(_SNIFF_CHARS), "")
            first = next((line for line in lines if line.strip()), "")
        try:
            record = json.loads(first)
        except ValueError:
            return False
        return isinstance(record, dict) and "global_index" in record
    return False


def _load_one(path: Path, format: str | None, token_counter: str,
              default_output_tokens: int) -> TraceDataset:
    where = Where(str(path))
    # streamed: the lines are parsed as they are read, never all held as text (a log of
    # long prompts took 3 times its size while loading, and the features 40 times)
    with _utf8(path), open_trace_file(path) as handle:
        if _is_blank(handle):
            raise where.error(None, None, "the file is empty")
        fmt = format or detect_format(path)
        if fmt == "jsonl":
            return read_jsonl(handle, where)
        if fmt == "csv":
            return read_generic_csv(handle, where)
        return _read_routellm(handle, where, token_counter, default_output_tokens,
                              file_group(path))


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
    return read_jsonl(text, Where(f"cost_envs/{EXAMPLE_TRACES}"))
