"""Learning-curve histories as CSV files beside the JSON reports that summarise them.

A training run logs a *history*: a list of points, each a dict of metric -> number
(``timesteps`` an int, the rest floats), as :class:`agents.callbacks.CostMetricsCallback`
records them. A report holds, per method, one history per training seed. Written as
indented JSON these were almost all of the committed results (issue #25: one table's JSON
was 3.5 MB); as a CSV they are about a third of that, open in any spreadsheet or
``pandas.read_csv``, and the JSON keeps only the file's name and each method's seed count
(:func:`detach`), so a method trained without RL keeps its empty histories.

The CSV has one row per logged point: ``method``, ``seed`` (the index of the seed in the
report, from 0), then one column per metric in the order they were first logged; a metric
a point did not log is an empty cell. Numbers are written as :func:`repr` writes them
(which is also what :mod:`json` writes), so :func:`read_csv` gives back exactly the
numbers, ints as ints and floats as the same floats, that :func:`to_csv` was given (each
point's metrics in the columns' order).

Example:
    >>> text = to_csv({"ppo": [[{"timesteps": 512, "cost/cps": 0.25}], []]})
    >>> print(text, end="")
    method,seed,timesteps,cost/cps
    ppo,0,512,0.25
    >>> read_csv(text, {"ppo": 2})
    {'ppo': [[{'timesteps': 512, 'cost/cps': 0.25}], []]}
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: A history: one training run's logged points.
History = list[dict[str, int | float]]
#: The two leading columns of every histories CSV.
INDEX = ("method", "seed")


def _cell(value: Any, method: str, metric: str) -> str:
    """A number as the text that reads back as the same number (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"histories: {method} {metric} is {value!r}, expected an int or "
                         "a float")
    return repr(value) if isinstance(value, float) else str(int(value))


def _number(text: str, where: str) -> int | float:
    """A cell's number: an int when written as one, else the float it spells."""
    try:
        if text.lstrip("-").isdigit():
            return int(text)
        return float(text)
    except ValueError:
        raise ValueError(f"histories: {where} is {text!r}, expected a number") from None


def to_csv(histories: Mapping[str, Sequence[Sequence[Mapping[str, int | float]]]]) -> str:
    """Histories (method -> one history per seed) as CSV text; see the module docstring.

    Raises:
        ValueError: If a value is not an int or a float, or a metric is named like an
            index column.
    """
    metrics: dict[str, None] = {}
    for runs in histories.values():
        for run in runs:
            for point in run:
                metrics.update(dict.fromkeys(point))
    clash = sorted(set(metrics) & set(INDEX))
    if clash:
        raise ValueError(f"histories: a metric is named {clash[0]!r}, which is an index "
                         f"column; expected metrics other than {INDEX}")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*INDEX, *metrics])
    for method, runs in histories.items():
        for seed, run in enumerate(runs):
            for point in run:
                writer.writerow([method, seed] + [
                    _cell(point[m], method, m) if m in point else "" for m in metrics])
    return buffer.getvalue()


def read_csv(text: str, seeds: Mapping[str, int]) -> dict[str, list[History]]:
    """The histories :func:`to_csv` wrote: method -> ``seeds[method]`` histories, in order.

    Args:
        text: The CSV text.
        seeds: Each method's number of seeds, in the order the methods are to come (the
            JSON's ``seeds``, :func:`detach`); a seed without rows is an empty history.

    Raises:
        ValueError: If the header does not start with the index columns, a row has a
            method or seed outside ``seeds`` or a cell that is not a number.
    """
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None or tuple(header[:2]) != INDEX:
        raise ValueError(f"histories: the header is {header!r}, expected it to start with "
                         f"{list(INDEX)}")
    metrics = header[2:]
    out: dict[str, list[History]] = {m: [[] for _ in range(n)] for m, n in seeds.items()}
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise ValueError(f"histories: line {line} has {len(row)} cells, expected "
                             f"{len(header)}")
        method, seed = row[0], _number(row[1], f"line {line}'s seed")
        if method not in out or not isinstance(seed, int) or not 0 <= seed < len(out[method]):
            raise ValueError(f"histories: line {line} is {method!r} seed {row[1]!r}, expected "
                             f"one of the methods and seed counts {dict(seeds)}")
        out[method][seed].append({metric: _number(cell, f"line {line}'s {metric}")
                                  for metric, cell in zip(metrics, row[2:], strict=True)
                                  if cell != ""})
    return out


def detach(report: Mapping[str, Any], key: str, file: str) -> tuple[dict[str, Any], str]:
    """``report`` without its histories under ``key``, and those histories' CSV text.

    The report gets ``f"{key}_csv": {"file": file, "seeds": {method: count}}`` in their
    place (the same position among its keys), which :func:`attach` reads back.
    """
    histories = report[key]
    text = to_csv(histories)
    pointer = {"file": file, "seeds": {m: len(runs) for m, runs in histories.items()}}
    # in the histories' place, so the JSON keeps its order
    summary = {(f"{key}_csv" if name == key else name): (pointer if name == key else value)
               for name, value in report.items()}
    return summary, text


def attach(report: Mapping[str, Any], key: str, directory: Path) -> dict[str, Any]:
    """``report`` (as :func:`detach` left it) with its histories under ``key`` again.

    The CSV is read from ``directory`` (where the report's JSON file is).

    Raises:
        ValueError: If the report does not name a histories file under ``key``, or the
            file cannot be read or does not parse (:func:`read_csv`).
    """
    pointer = report.get(f"{key}_csv")
    if not isinstance(pointer, Mapping) or not {"file", "seeds"} <= set(pointer):
        raise ValueError(f"histories: the report has {f'{key}_csv'!r} = {pointer!r}, "
                         "expected {'file': ..., 'seeds': {method: count}}")
    path = directory / pointer["file"]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"histories: cannot read {path}: {error}") from None
    histories = read_csv(text, pointer["seeds"])
    return {(key if name == f"{key}_csv" else name): (histories if name == f"{key}_csv"
                                                      else value)
            for name, value in report.items()}


def read_with_histories(path: Path, key: str, who: str) -> dict[str, Any]:
    """A report's JSON file with its histories under ``key`` read back (:func:`attach`).

    Raises:
        ValueError: Naming ``who`` and the file, if it cannot be read or parsed.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{who}: cannot read {path}: {error}") from None
    return attach(data, key, path.parent)


def same_numbers(a: Any, b: Any) -> bool:
    """Whether two JSON-like values are equal, NaN equal to NaN, ints not equal to floats.

    Stricter than ``==`` (``1 == 1.0``, ``nan != nan``), as the conversion of the
    committed reports needed; like ``==``, the order of a dict's keys does not count.
    """
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if type(a) is not type(b):
        return False
    if isinstance(a, Mapping):
        return set(a) == set(b) and all(same_numbers(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_numbers(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
