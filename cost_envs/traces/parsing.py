"""Field parsing shared by the trace readers: located errors, values, CSV records.

Every error names the file, the line (1-based, as an editor shows it) and the column; the
value checks themselves are :mod:`cost_envs.config`'s.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from cost_envs.config import _shown, number
from cost_envs.limits import MAX_TRACE_BYTES, check_memory, check_regular_file

#: Longest shown value in an error message; a longer one is cut to its start.
SHOWN_CHARS = 80
_TRUE = {"true": True, "false": False, "1": True, "0": False}


class Where:
    """Error locations: ``file: line N: column 'c': ...``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, line: int | None, column: str | None, message: str) -> ValueError:
        """A ``ValueError`` ``<file>: line <line>: column '<column>': <message>``."""
        parts = [self.source]
        if line is not None:
            parts.append(f"line {line}")
        if column is not None:
            parts.append(f"column {shown(column)}")
        return ValueError(": ".join(parts) + ": " + message)


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut to :data:`SHOWN_CHARS` characters."""
    text = _shown(value)
    if len(text) <= SHOWN_CHARS:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:SHOWN_CHARS - 20]}... ({size} characters)"


def as_bool(value: Any, where: Where, line: int, column: str) -> bool:
    """A bool from JSON (``true``, ``1``) or CSV text (``True``, ``false``, ``1``, ``0``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return _TRUE[value.strip().lower()]
    raise where.error(line, column, f"expected True or False, got {shown(value)}")


def as_number(value: Any, where: Where, line: int, column: str, what: str,
               maximum: float | None = None) -> float:
    """A number >= 0 (and <= ``maximum``) from a JSON value or a CSV field's text."""
    parsed = value
    if isinstance(value, str):
        try:
            parsed = float(value.strip())  # "inf" and "1e999" parse: number() refuses them
        except ValueError:
            raise where.error(line, column, f"expected {what}, got {shown(value)}") from None
    try:
        return number(parsed, None, minimum=0, maximum=maximum)
    except ValueError:  # reworded: the field as the file has it, and its line and column
        raise where.error(line, column, f"expected {what}, got {shown(value)}") from None


def as_tokens(value: Any, where: Where, line: int, column: str) -> int:
    """A token count: an integer >= 0 (``12.0`` and ``"12"`` included)."""
    count = as_number(value, where, line, column, "an integer >= 0")
    if count != int(count):
        raise where.error(line, column, f"expected an integer >= 0, got {shown(value)}")
    return int(count)


def missing(value: Any) -> bool:
    """Whether a field is absent: ``null`` in JSON, an empty CSV field."""
    return value is None or (isinstance(value, str) and value == "")


def open_trace_file(path: Path) -> TextIO:
    """``path`` opened for reading its lines, after the file checks of :mod:`cost_envs.limits`.

    A regular file of at most :data:`~cost_envs.limits.MAX_TRACE_BYTES` (never
    ``/dev/zero`` or a FIFO) whose size fits in the memory available (the dataset holds
    up to about its size); a byte-order mark is dropped; ``newline=""`` as the csv module
    needs (lines keep their ends).

    Raises:
        ValueError: One line naming the file and the limit it exceeds.
        FileNotFoundError: If it does not exist.
    """
    size = check_regular_file(path, "trace file", MAX_TRACE_BYTES)
    check_memory(size, f"trace file {path} ({size} bytes)", "split the log into smaller files")
    return open(path, encoding="utf-8-sig", newline="")


def csv_records(text: str | Iterable[str], where: Where
                ) -> tuple[list[str], int, list[tuple[int, list[str]]]]:
    """Header, its line and ``(first line, fields)`` of every non-blank record of a CSV.

    ``text`` is the CSV's text or its lines (a file opened with ``newline=""``).
    """
    # strict: a quoted field the file ends inside (a truncated file) or text after a closing
    # quote is an error, where the default reader would read on silently
    lines = io.StringIO(text, newline="") if isinstance(text, str) else text
    reader = csv.reader(lines, strict=True)
    try:
        header: list[str] | None = None
        header_line = 1
        records = []
        end = 0  # last physical line read so far
        for fields in reader:
            start, end = end + 1, reader.line_num
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue  # blank line
            if header is None:
                header = [f.strip() for f in fields]
                header_line = start
                continue
            records.append((start, fields))
    except csv.Error as err:
        raise where.error(reader.line_num, None, f"not valid CSV: {err}") from None
    if header is None:
        raise where.error(None, None, "the file is empty (expected a header line)")
    blank = [i for i, name in enumerate(header) if not name]
    if blank:
        raise where.error(header_line, None, f"header: column {blank[0] + 1} has no name")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise where.error(header_line, dup[0], "duplicate column in the header")
    for line, fields in records:
        if len(fields) != len(header):
            raise where.error(line, None, f"expected {len(header)} fields (as the header), "
                              f"got {len(fields)}")
    return header, header_line, records
