"""Users' files: crafted pools, price tables and traces give one-line errors naming them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import cost_envs  # noqa: F401  (registers the envs)
from cost_envs import AgentPool
from cost_envs.envs.agentic_routing import AgenticRoutingEnv
from cost_envs.envs.expert_routing import ExpertRoutingEnv, ModelProfile
from cost_envs.envs.toolbench import toolbench_pool
from cost_envs.prices import PriceTable, default_price_table
from cost_envs.traces import detect_format, load_traces

NEVER = (OverflowError, RecursionError, TypeError, AssertionError)
BOM = b"\xef\xbb\xbf"


def raises_naming(call, *fragments: str) -> str:
    """Run ``call``; it must raise a one-line ValueError holding every fragment."""
    try:
        call()
    except NEVER as err:  # pragma: no cover - the failure these tests exist for
        pytest.fail(f"{type(err).__name__} escaped: {err}")
    except ValueError as err:
        message = str(err)
        assert "\n" not in message, message
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"
        return message
    pytest.fail("no error")


def price_dict() -> dict:
    """The packaged price table as plain data."""
    table = default_price_table()
    return {"currency": table.currency, "unit": "per_million_tokens", "models": [
        {"name": m.name, "input": m.input, "output": m.output, "source": m.source,
         "date": m.date, "active_params_billion": m.active_params_billion}
        for m in table]}


# ------------------------------------------------------------------ pools and prices
def test_duplicate_key_in_a_pool_yaml(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    text = yaml.safe_dump(toolbench_pool(2).to_dict(), sort_keys=False)
    path.write_text(text.replace("  role:", "  cost: 99.0\n  role:", 1), encoding="utf-8")
    raises_naming(lambda: AgentPool.from_file(path), str(path), "agents[0]",
                  "duplicate key 'cost'")


def test_duplicate_key_in_a_price_json(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    text = json.dumps(price_dict())
    path.write_text(text.replace('"input": ', '"input": 0.0, "input": ', 1), encoding="utf-8")
    raises_naming(lambda: PriceTable.from_file(path), str(path), "models[0]",
                  "duplicate key 'input'")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_price_too_large_for_a_float(tmp_path: Path, suffix: str) -> None:
    data = price_dict()
    data["models"][1]["output"] = 10**400
    path = tmp_path / f"prices{suffix}"
    path.write_text(json.dumps(data), encoding="utf-8")  # JSON is YAML too
    raises_naming(lambda: PriceTable.from_file(path), str(path), "models[1].output",
                  "too large for a float")
    # the same number handed over in memory is refused as cleanly
    raises_naming(lambda: PriceTable.from_dict(data), "models[1]", "output",
                  "too large for a float")


def test_nan_in_a_yaml_pool(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    text = yaml.safe_dump(toolbench_pool(2).to_dict(), sort_keys=False)
    path.write_text(text.replace("flops: ", "flops: .nan #", 1), encoding="utf-8")
    raises_naming(lambda: AgentPool.from_file(path), str(path), "agents[0].flops", "nan")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_deeply_nested_pool(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"pool{suffix}"
    path.write_text('{"skills": ' + "[" * 1000 + "]" * 1000 + ', "agents": []}',
                    encoding="utf-8")
    raises_naming(lambda: AgentPool.from_file(path), str(path), "skills", "nested deeper")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_byte_order_mark_in_pool_and_price_files(tmp_path: Path, suffix: str) -> None:
    pool, prices = toolbench_pool(3), price_dict()
    dump = json.dumps if suffix == ".json" else yaml.safe_dump
    pool_path, price_path = tmp_path / f"pool{suffix}", tmp_path / f"prices{suffix}"
    pool_path.write_bytes(BOM + dump(pool.to_dict()).encode("utf-8"))
    price_path.write_bytes(BOM + dump(prices).encode("utf-8"))
    assert AgentPool.from_file(pool_path) == pool
    assert PriceTable.from_file(price_path) == PriceTable.from_dict(prices)


def test_unknown_key_suggests_the_known_one() -> None:
    data = toolbench_pool(2).to_dict()
    data["agents"][0]["costs"] = data["agents"][0].pop("cost")
    raises_naming(lambda: AgentPool.from_dict(data, source="pool.yaml"), "pool.yaml: agents[0]",
                  "unknown key(s) ['costs']", "did you mean 'cost'?")


# ------------------------------------------------------------------ envs keep the file name
def write_prices_without(tmp_path: Path, model: str, currency: str = "USD") -> Path:
    data = price_dict()
    data["currency"] = currency
    data["models"] = [m for m in data["models"] if m["name"] != model]
    path = tmp_path / "my_prices.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# A user table is merged onto the shipped one, so a model is missing only when neither has
# it: a model of the user's own, or any model with a table in another currency (not merged).
def test_price_table_file_missing_a_model_is_named_by_expert_routing(tmp_path: Path) -> None:
    path = write_prices_without(tmp_path, "o3")
    assert ExpertRoutingEnv(prices=path).price_table["o3"] == default_price_table()["o3"]
    stranger = ModelProfile("gpt-5", skill=0.9, sharpness=5.0, trust=2.0, output_tokens=300)
    raises_naming(lambda: ExpertRoutingEnv(prices=path, experts=["o3", stranger]),
                  "ExpertRouting-v0: prices", "['gpt-5']", str(path))
    path = write_prices_without(tmp_path, "o3", currency="EUR")
    raises_naming(lambda: gym.make("cost_envs/ExpertRouting-v0", prices=str(path)), str(path),
                  "['o3']")


def test_price_table_file_missing_a_model_is_named_by_agentic_routing(tmp_path: Path) -> None:
    path = write_prices_without(tmp_path, "gpt-4.1")
    raises_naming(lambda: AgenticRoutingEnv(prices=path, large="my-large"), "AgenticRouting-v0",
                  "['my-large']", str(path))


def test_price_table_file_the_large_model_undercuts_is_named(tmp_path: Path) -> None:
    path = write_prices_without(tmp_path, "none")
    raises_naming(lambda: AgenticRoutingEnv(prices=path, small="gpt-4.1",
                                            large="Qwen/Qwen2.5-7B-Instruct"),
                  str(path), "lower input")


def test_price_table_file_missing_a_model_is_named_by_trace_routing(tmp_path: Path) -> None:
    path = write_prices_without(tmp_path, "gpt-4.1-nano", currency="EUR")
    raises_naming(lambda: gym.make("cost_envs/TraceRouting-v0", prices=path),
                  "TraceRouting-v0", "['gpt-4.1-nano']", str(path))


@pytest.mark.parametrize("env_id", ["cost_envs/ToolBench-v0", "cost_envs/FlightPlanner-v0"])
def test_pool_file_whose_skills_do_not_fit_is_named(tmp_path: Path, env_id: str) -> None:
    data = toolbench_pool(3).to_dict()
    data["skills"] = ["a", "b", "c", "d", "e", "f"]
    path = tmp_path / "my_pool.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    raises_naming(lambda: gym.make(env_id, pool=path), env_id.split("/")[1], str(path),
                  "skills must be")


# ------------------------------------------------------------------ trace loaders
ROWS = [{"query_id": f"q{q}", "model": m, "correct": (q + j) % 2 == 0, "input_tokens": 3,
         "output_tokens": 4, "prompt": f"question {q}"}
        for q in range(3) for j, m in enumerate(("a", "b"))]
GENERIC_CSV = "query_id,model,correct,input_tokens,output_tokens,prompt\n" + "".join(
    f"{r['query_id']},{r['model']},{r['correct']},3,4,{r['prompt']}\n" for r in ROWS)
JSONL = "".join(json.dumps(r) + "\n" for r in ROWS)
ROUTELLM = "prompt,m1,m2\nfirst question,True,False\nsecond question,False,True\n"


@pytest.mark.parametrize(("name", "content"), [
    ("t.csv", GENERIC_CSV), ("t.jsonl", JSONL), ("t.csv", ROUTELLM)])
def test_every_trace_loader_accepts_a_byte_order_mark(tmp_path: Path, name: str,
                                                      content: str) -> None:
    plain, marked = tmp_path / name, tmp_path / f"bom-{name}"
    plain.write_text(content, encoding="utf-8")
    marked.write_bytes(BOM + content.encode("utf-8"))
    assert detect_format(marked) == detect_format(plain)
    expected = load_traces(plain, token_counter="approx")
    got = load_traces(marked, token_counter="approx")
    assert got.models == expected.models and got.query_ids == expected.query_ids
    assert got.prompts == expected.prompts and (got.correct == expected.correct).all()


@pytest.mark.parametrize(("wrong", "right"), [("query_idd", "query_id"), ("modle", "model"),
                                              ("input_token", "input_tokens")])
def test_misspelt_generic_csv_header_is_reported_as_such(tmp_path: Path, wrong: str,
                                                         right: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(GENERIC_CSV.replace(right, wrong, 1), encoding="utf-8")
    assert detect_format(path) == "csv"
    message = raises_naming(lambda: load_traces(path), str(path), "line 1",
                            f"column {wrong!r}", "unknown column",
                            f"did you mean {right!r}?", "'query_id'")
    assert "RouteLLM" not in message and "True or False" not in message


def test_csv_header_of_neither_format_names_both(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("question,answer\nq,a\n", encoding="utf-8")
    raises_naming(lambda: load_traces(path), str(path), "line 1", "['question', 'answer']",
                  "generic trace CSV", "'query_id'", "RouteLLM CSV", "'prompt'")


@pytest.mark.parametrize(("line", "fragments"), [
    ('{"query_id": "q0", "model": "a", "model": "b", "correct": true, "input_tokens": 1, '
     '"output_tokens": 1}', ("line 2", "duplicate key 'model'")),
    ('{"query_id": "q0", "model": "a", "correct": true, "input_tokens": 1' + "0" * 400
     + ', "output_tokens": 1}', ("line 2", "input_tokens", "too large for a float")),
    ('{"query_id": "q0", "model": "a", "correct": true, "input_tokens": ' + "9" * 5000
     + ', "output_tokens": 1}', ("line 2", "input_tokens", "5000 digits", "too large")),
    ('{"query_id": "q0", "model": "a", "correct": true, "input_tokens": 1, '
     '"output_tokens": 1, "prompt": ' + "[" * 1000 + "]" * 1000 + "}",
     ("line 2: prompt[0]", "nested deeper")),
])
def test_crafted_jsonl_lines(tmp_path: Path, line: str, fragments: tuple[str, ...]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n", encoding="utf-8")
    message = raises_naming(lambda: load_traces(path), str(path), *fragments)
    assert message.count("line ") == 1 and len(message) < len(str(path)) + 200, message


def test_records_with_an_integer_too_large_for_a_float(tmp_path: Path) -> None:
    from cost_envs.traces import dataset_from_records

    rows = [dict(r) for r in ROWS]
    rows[1]["output_tokens"] = 10**400
    raises_naming(lambda: dataset_from_records(rows, source="mine"), "mine", "line 2",
                  "output_tokens")


@pytest.mark.parametrize("models", [("model_a", "model_b"), ("models", "m2"), ("Score", "m2"),
                                    ("scorer", "m2"), ("m1", "response")])
def test_routellm_csv_whose_model_columns_look_like_generic_ones(tmp_path: Path,
                                                                 models: tuple[str, str]
                                                                 ) -> None:
    path = tmp_path / "routellm.csv"
    path.write_text(ROUTELLM.replace("m1,m2", ",".join(models), 1), encoding="utf-8")
    assert detect_format(path) == "routellm"
    data = load_traces(path, token_counter="approx")
    assert data.models == models and data.correct.tolist() == [[True, False], [False, True]]
    prices = price_dict()
    prices["models"] = [dict(prices["models"][i], name=name) for i, name in enumerate(models)]
    env = gym.make("cost_envs/TraceRouting-v0", data=path, prices=prices)
    assert env.unwrapped.dataset.models == models
    env.reset(seed=0)


def test_header_of_misspelt_generic_columns_only_is_reported_as_generic(tmp_path: Path
                                                                        ) -> None:
    path = tmp_path / "t.csv"
    path.write_text("query_idd,modle,correct_\nq,a,True\n", encoding="utf-8")
    assert detect_format(path) == "csv"
    raises_naming(lambda: load_traces(path), str(path), "column 'query_idd'",
                  "did you mean 'query_id'?")


def test_a_long_field_is_cut_short_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(GENERIC_CSV.replace(",3,4,", "," + "9" * 5000 + ",4,", 1), encoding="utf-8")
    message = raises_naming(lambda: load_traces(path), str(path), "line 2",
                            "column 'input_tokens'", "expected an integer >= 0, got '9999",
                            "(5000 characters)")
    assert len(message) < len(str(path)) + 200, message
    path.write_text(ROUTELLM.replace("True", "x" * 5000, 1), encoding="utf-8")
    message = raises_naming(lambda: load_traces(path), "column 'm1'", "(5000 characters)")
    assert len(message) < len(str(path)) + 200, message


def test_detect_format_of_a_csv_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("prompt,m1\ncaf\xe9,True\n".encode("latin-1"))
    raises_naming(lambda: detect_format(path), str(path), "not UTF-8")
    raises_naming(lambda: load_traces(path), str(path), "not UTF-8")


def test_integer_over_pythons_digit_limit_names_its_key(tmp_path: Path) -> None:
    big = "9" * 5000
    pool_path = tmp_path / "pool.yaml"
    text = yaml.safe_dump(toolbench_pool(2).to_dict(), sort_keys=False)
    pool_path.write_text(re.sub(r"flops: \S+", f"flops: {big}", text, count=1),
                         encoding="utf-8")
    prices = price_dict()
    prices["models"][0]["output"] = 0.123456789
    price_path = tmp_path / "prices.json"
    price_path.write_text(json.dumps(prices).replace("0.123456789", big), encoding="utf-8")
    for call, path, key in [(lambda: AgentPool.from_file(pool_path), pool_path,
                             "agents[0].flops"),
                            (lambda: PriceTable.from_file(price_path), price_path,
                             "models[0].output")]:
        message = raises_naming(call, str(path), f"{key}: expected a finite number, got an "
                                "integer of 5000 digits", "too large for a float")
        assert "not valid" not in message and len(message) < len(str(path)) + 200, message
