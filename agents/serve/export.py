"""Live traffic as logged outcomes: the ledger's scored calls in the generic trace schema.

A call a client scored (``POST /v1/feedback``) is one row of
:mod:`cost_envs.traces.generic`'s JSONL schema: ``query_id`` (the SHA-256 of the
prompt's UTF-8 text, all 64 hex digits, so the same prompt sent to several models is one
query), ``model``, ``score`` (the client's, in [0, 1]), ``input_tokens`` and
``output_tokens`` (the upstream's ``usage``), ``cost`` (dollars), ``prompt`` and
``response``. :func:`~cost_envs.traces.load_traces` reads the file, so it is a
``TraceRouting`` dataset and a router's training logs.

That schema wants every query answered by every model of the file; a router sends a
prompt to one model, so only the prompts scored on each of ``models`` are written (send
the same prompt to each fixed model, or score a sample of them, to fill it). A prompt
scored twice on one model keeps its latest score.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agents.serve.ledger import Ledger


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_traces` wrote and left out."""

    path: Path
    models: tuple[str, ...]
    queries: int
    incomplete: int


def export_traces(ledger: Ledger, out: str | Path,
                  models: Sequence[str] | None = None) -> ExportSummary:
    """Write the scored calls of ``ledger`` as a JSONL trace file.

    Args:
        ledger: The server's ledger.
        out: The ``.jsonl`` file to write.
        models: The models every written query must have a scored call of (default:
            every model that has a scored call).

    Raises:
        ValueError: When no query is scored on every one of ``models``, or ``out`` is not
            a ``.jsonl`` path.
    """
    out = Path(out)
    if out.suffix != ".jsonl":
        raise ValueError(f"out: expected a .jsonl file, got {str(out)!r}")
    queries: dict[str, dict[str, dict]] = {}
    prompts: dict[str, str] = {}
    for call in ledger.scored_calls():  # oldest score first: a later one replaces it
        if call["prompt"] is None or call["prompt_tokens"] is None:
            continue
        qid = hashlib.sha256(call["prompt"].encode()).hexdigest()
        prompts[qid] = call["prompt"]
        queries.setdefault(qid, {})[call["model"]] = call
    wanted = tuple(models) if models else tuple(sorted({m for q in queries.values() for m in q}))
    complete = {qid: calls for qid, calls in queries.items() if all(m in calls for m in wanted)}
    if not complete:
        raise ValueError(f"models: no prompt was scored on every one of {list(wanted)} "
                         f"({len(queries)} scored prompts)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as file:
        for qid, calls in complete.items():
            for model in wanted:
                call = calls[model]
                file.write(json.dumps({
                    "query_id": qid, "model": model, "score": call["score"],
                    "input_tokens": call["prompt_tokens"],
                    "output_tokens": call["completion_tokens"],
                    "cost": call["cost_micros"] / 1e6, "prompt": prompts[qid],
                    "response": call["response"] or ""}) + "\n")
    return ExportSummary(out, wanted, len(complete), len(queries) - len(complete))
