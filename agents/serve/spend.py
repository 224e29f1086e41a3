"""Spend reports over the ledger's requests: who spent what, on which model, which day.

As LiteLLM's proxy's spend reports (``/global/spend/report``), served by the gateway as
``GET /spend/report?group_by=key,model&start=...&end=...&format=csv|json``.
:func:`spend_report` sums the ledger's ``requests`` rows in SQL (portable: ``?``
placeholders, ``CASE`` and ``CAST``, no date functions, so SQLite and PostgreSQL answer
the same), grouped by any of :data:`GROUP_FIELDS`:

* ``key``: the API key's name (``requests.key_name``);
* ``user``: the end user (the request's ``user`` field, ``requests.user_name``; ``None``
  when the client sent none);
* ``model``: the upstream model that answered (``None`` for a refusal, or a call its dead
  server never settled);
* ``day``: the UTC date of the request's arrival (``created_at``), ``YYYY-MM-DD``.

Each row has the group's fields, then :data:`COLUMNS`:

* ``requests``: rows with an upstream call (a reservation or a cost above 0), whatever
  their outcome (ok, failed, unknown, ...);
* ``refused``: rows that reserved nothing (refused before any call: over budget, ...);
* ``cost_micros`` and ``spend`` (the same in dollars): what the budgets were charged;
* ``prompt_tokens``, ``completion_tokens``: as the upstreams reported them;
* ``over_reservation_micros``: money billed above the calls' reservations.

A row whose call is still in flight is not in the ledger's ``requests`` yet (it is a
reservation): a report counts settled money, the budgets' reserved money is elsewhere
(``Ledger.current_usage``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from agents.serve.ledger import Ledger

#: The fields a report may be grouped by, and their columns in the ``requests`` table.
GROUP_FIELDS = {"key": "key_name", "user": "user_name", "model": "model", "day": "day"}
#: A report row's money and counts, after its group fields (the CSV header's order).
COLUMNS = ("requests", "refused", "cost_micros", "spend", "prompt_tokens", "completion_tokens",
           "over_reservation_micros")

#: ``created_at``'s whole days since 1970-01-01 (UTC), in SQL that SQLite and PostgreSQL read
#: alike: ``CAST(x AS BIGINT)`` truncates on SQLite but rounds on PostgreSQL, so the
#: second's floor is taken by correcting the cast, then days by integer division.
_SECOND = ("(CAST(created_at AS BIGINT) - CASE WHEN CAST(created_at AS BIGINT) > created_at "
           "THEN 1 ELSE 0 END)")
_DAY = f"CASE WHEN {_SECOND} >= 0 THEN {_SECOND} / 86400 ELSE ({_SECOND} + 1) / 86400 - 1 END"
_CALL = "(cost_micros > 0 OR reserved_micros > 0)"
_SUMS = (f"SUM(CASE WHEN {_CALL} THEN 1 ELSE 0 END)",
         f"SUM(CASE WHEN {_CALL} THEN 0 ELSE 1 END)",
         "SUM(cost_micros)", "SUM(COALESCE(prompt_tokens, 0))",
         "SUM(COALESCE(completion_tokens, 0))", "SUM(over_reservation_micros)")
_EPOCH = date(1970, 1, 1)


def parse_group_by(group_by: str | Sequence[str]) -> tuple[str, ...]:
    """``group_by`` as a tuple of :data:`GROUP_FIELDS`, in the order given.

    Args:
        group_by: Field names, or one string of them separated by commas (a query
            parameter's ``key,model``); empty: no grouping (one row of totals).

    Raises:
        ValueError: On a field not in :data:`GROUP_FIELDS`, or one given twice.
    """
    if isinstance(group_by, str):
        group_by = [part.strip() for part in group_by.split(",") if part.strip()]
    fields = tuple(group_by)
    for field in fields:
        if field not in GROUP_FIELDS:
            raise ValueError(f"group_by: expected fields of {', '.join(GROUP_FIELDS)}, "
                             f"got {field!r}")
    repeated = sorted({field for field in fields if fields.count(field) > 1})
    if repeated:
        raise ValueError(f"group_by: {repeated[0]!r} is given twice")
    return fields


def spend_report(ledger: Ledger, group_by: str | Sequence[str] = (),
                 start: float | None = None, end: float | None = None,
                 key: str | None = None) -> list[dict[str, Any]]:
    """The ledger's spend, summed by ``group_by``, over ``[start, end)``.

    Args:
        ledger: The ledger whose ``requests`` are read.
        group_by: Fields of :data:`GROUP_FIELDS` (or ``"key,model"``: :func:`parse_group_by`);
            empty: one row of totals.
        start: Unix seconds: requests that arrived at or after it (``None``: from the first).
        end: Unix seconds: requests that arrived before it (``None``: to the last).
        key: Only this API key's requests (a key's report of its own spend).

    Returns:
        One dict per group that has requests (none: ``[]``), sorted by the group fields in
        ``group_by``'s order (``None`` first): the group fields, then :data:`COLUMNS`
        (``spend`` in dollars, a float; the rest integers).

    Raises:
        ValueError: On an unknown ``group_by`` field, a non-finite time, or ``start > end``.
    """
    fields = parse_group_by(group_by)
    for name, value in (("start", start), ("end", end)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name}: expected Unix seconds (a finite number), got {value!r}")
    if start is not None and end is not None and start > end:
        raise ValueError(f"start: expected at most end ({end!r}), got {start!r}")
    where: list[str] = []
    params: list[float | str] = []
    filters: list[tuple[str, float | str | None]] = [
        ("created_at >= ?", start), ("created_at < ?", end), ("key_name = ?", key)]
    for clause, param in filters:
        if param is not None:
            where.append(clause)
            params.append(param)
    columns = [GROUP_FIELDS[f] for f in fields]
    inner = ", ".join(["key_name", "user_name", "model", "cost_micros", "reserved_micros",
                       "prompt_tokens", "completion_tokens", "over_reservation_micros",
                       *([f"{_DAY} AS day"] if "day" in fields else [])])
    sql = (f"SELECT {', '.join([*columns, 'COUNT(*)', *_SUMS])} FROM (SELECT {inner} FROM "
           f"requests{' WHERE ' + ' AND '.join(where) if where else ''}) AS t")
    if columns:
        sql += f" GROUP BY {', '.join(columns)}"
    with ledger.storage.transaction() as cur:
        cur.execute(sql, tuple(params))
        found = cur.fetchall()
    rows = []
    for row in found:
        values, (count, *sums) = row[:len(fields)], row[len(fields):]
        if not count:  # no grouping and no requests: SQL's one row of NULLs
            continue
        requests, refused, cost, prompt, completion, over = (int(s) for s in sums)
        group = {f: (_day(v) if f == "day" and v is not None else v)
                 for f, v in zip(fields, values, strict=True)}
        rows.append({**group, "requests": requests, "refused": refused, "cost_micros": cost,
                     "spend": cost / 1e6, "prompt_tokens": prompt,
                     "completion_tokens": completion, "over_reservation_micros": over})
    rows.sort(key=lambda r: [(r[f] is not None, r[f] if r[f] is not None else "")
                             for f in fields])
    return rows


def _day(days: Any) -> str:
    return (_EPOCH + timedelta(days=int(days))).isoformat()


def to_csv(rows: Sequence[dict[str, Any]], group_by: str | Sequence[str] | None = None) -> str:
    """A report's rows as CSV text: a header, then one line per row (CRLF ends, RFC 4180).

    The header is the group fields, then :data:`COLUMNS`. ``spend`` is written as exact
    dollars with 6 decimals (from ``cost_micros``, never a float's digits); ``None`` as an
    empty cell.

    Args:
        rows: :func:`spend_report`'s rows.
        group_by: The report's group fields; ``None``: those of the first row (needed only
            for the header of a report with no rows).
    """
    if group_by is None:
        fields = tuple(f for f in (rows[0] if rows else {}) if f in GROUP_FIELDS)
    else:
        fields = parse_group_by(group_by)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([*fields, *COLUMNS])
    for row in rows:
        cost = int(row["cost_micros"])
        spend = f"{'-' if cost < 0 else ''}{abs(cost) // 10**6}.{abs(cost) % 10**6:06d}"
        writer.writerow([*(row[f] for f in fields),
                         *(spend if c == "spend" else row[c] for c in COLUMNS)])
    return out.getvalue()
