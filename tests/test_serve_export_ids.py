"""``cost-envs serve export`` names each query by its prompt's whole SHA-256, and it loads.

The ledger is a real SQLite file; the scored calls go through ``reserve``, ``settle`` and
``feedback`` as the server makes them, and :func:`~cost_envs.traces.load_traces` reads
what :func:`~agents.serve.export.export_traces` wrote.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from agents.serve.config import BudgetConfig, KeyConfig, hash_key
from agents.serve.export import export_traces
from agents.serve.ledger import Ledger
from agents.serve.storage import open_storage
from cost_envs.traces import load_traces

ALICE = KeyConfig("alice", hash_key("a"), BudgetConfig("key:alice", None))
PROMPTS = ("What is 7 times 8?", "Combien font 7 fois 8 ? Réponds en chiffres.", "東京の天気")
MODELS = ("large", "small")  # sorted: the models every query must have


def _scored(path: Path) -> Ledger:
    """A ledger where every prompt was answered by every model and scored."""
    ledger = Ledger(open_storage(f"sqlite:///{path}"), [ALICE])
    for i, prompt in enumerate(PROMPTS):
        for j, model in enumerate(MODELS):
            ident = f"chatcmpl-{i}-{j}"
            ledger.reserve(ident, ALICE, 1_000)
            ledger.settle(ident, 10 + j, "ok", route=model, model=model, prompt_tokens=5 + i,
                          completion_tokens=3, prompt=prompt, response=f"{model} says 56")
            assert ledger.feedback(ident, 1.0 - 0.5 * j, "alice")
    return ledger


def test_query_ids_are_whole_sha256_digests_that_load_traces_reads(tmp_path: Path) -> None:
    out = tmp_path / "live.jsonl"
    summary = export_traces(_scored(tmp_path / "ledger.db"), out)
    assert (summary.queries, summary.incomplete, summary.models) == (3, 0, MODELS)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    expected = {hashlib.sha256(p.encode()).hexdigest(): p for p in PROMPTS}
    assert {row["query_id"]: row["prompt"] for row in rows} == expected
    assert all(re.fullmatch(r"[0-9a-f]{64}", row["query_id"]) for row in rows)
    data = load_traces(out)
    assert set(data.query_ids) == set(expected) and data.models == MODELS
    assert all(expected[q] == p for q, p in zip(data.query_ids, data.prompts, strict=True))
    assert data.scores[:, data.model_index("large")].tolist() == [1.0] * 3
