"""A chat body as the server reads it: every bad body a 400 naming the field, every bound honest.

``parse_chat`` never raises anything but :class:`ApiError` (deep nesting, lone
surrogates, non-finite numbers and absurd integers included), refuses what it cannot
price (images, audio, predicted outputs, web search) and ``input_bound`` counts
everything the upstream renders into the prompt (every message field, tools, schemas).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.serve.inputs import (
    MAX_DEPTH,
    ApiError,
    ChatRequest,
    input_bound,
    parse_budget,
    parse_chat,
    prompt_bound,
)

HI = [{"role": "user", "content": "hi"}]


def _raw(extra: str = "", content: str = '"hi"') -> bytes:
    """A body as JSON text: one user message with ``content``, then ``extra`` fields."""
    message = '{"role": "user", "content": ' + content + "}"
    return ('{"model": "m", "messages": [' + message + "]" + extra + "}").encode()


def _body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": HI, **fields}).encode()


def _refused(raw: bytes, param: str) -> ApiError:
    with pytest.raises(ApiError) as err:
        parse_chat(raw)
    assert (err.value.status, err.value.param) == (400, param), err.value.message
    assert err.value.message.startswith(f"{param}: ") or param == "body"
    return err.value


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("raw", [
    b"[" * 100_000 + b"]" * 100_000,  # json.loads raised RecursionError
    _raw(', "metadata": ' + _nested(100_000)),
    _nested(MAX_DEPTH + 1).encode(),
    _raw(', "metadata": ' + _nested(MAX_DEPTH)),  # the body is level 1: 65 levels
])
def test_nesting_deeper_than_the_limit_is_a_400_naming_body(raw: bytes) -> None:
    assert "nested at most 64 levels deep" in _refused(raw, "body").message


def test_nesting_up_to_the_limit_is_read() -> None:
    chat = parse_chat(_raw(', "metadata": ' + _nested(MAX_DEPTH - 1)))
    assert chat.rest["metadata"] == json.loads(_nested(MAX_DEPTH - 1))


@pytest.mark.parametrize(("raw", "param"), [
    (_raw(content='"\\ud800"'), "messages[0].content"),
    (_raw(content='"\\ud800"').replace(b"\\ud800", b"\xed\xa0\x80"),  # bytes of U+D800
     "messages[0].content"),
    (_raw(content='[{"type": "text", "text": "a\\udfff"}]'), "messages[0].content[0].text"),
    (b'{"model": "\\ud800", "messages": []}', "model"),
    (_raw(', "metadata": {"\\udc00": 1}'), "metadata.\\udc00"),
    (b'"\\ud800"', "body"),
])
def test_a_lone_surrogate_is_a_400_naming_its_field(raw: bytes, param: str) -> None:
    err = _refused(raw, param)
    assert "lone surrogate" in err.message
    json.dumps(err.body()).encode()  # the answer itself can be sent


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e309", "-1e400",
                                    "1" * 400 + ".0"])
@pytest.mark.parametrize("where", [', "temperature": %s', ', "metadata": {"a": [%s]}',
                                   ', "max_tokens": %s', ', "cost_envs_budget": %s',
                                   ', "n": %s'])
def test_non_finite_numbers_anywhere_are_a_400_naming_body(number: str, where: str) -> None:
    assert "expected finite numbers" in _refused(_raw(where % number), "body").message


def test_absurd_integers_are_a_400_naming_body() -> None:
    err = _refused(_raw(', "seed": ' + "9" * 5000), "body")
    assert err.message == "body: expected integers of at most 4300 digits, got one of 5000"
    _refused(_raw(', "seed": -' + "9" * 4301), "body")
    assert parse_chat(_raw(', "seed": ' + "9" * 4300)).rest["seed"] == 10**4300 - 1


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe\x00", b"nul", b"[]", b'"x"', b"1e309", b"-",
                                 b"{", b'{"a": 1,}', b"\xef\xbb\xbf[", b"\x00" * 8,
                                 b'{"model": "m", "messages": [{"role": "user", "content": "\xff'
                                 b'"}]}'])
def test_every_malformed_body_is_a_400_naming_body(raw: bytes) -> None:
    _refused(raw, "body")


@pytest.mark.parametrize(("part", "role"), [
    ({"type": "image_url", "image_url": {"url": "https://x/y.png"}}, "user"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "user"),
    ({"type": "file", "file": {"file_id": "file-1"}}, "user"),
    ({"type": "refusal", "refusal": "no"}, "user"),  # a refusal is an assistant's part
    ({"type": "image_url", "image_url": {"url": "https://x/y.png"}}, "assistant"),
    ({"text": "no type"}, "system"),
])
def test_a_part_that_cannot_be_priced_is_a_400_naming_it(part: dict, role: str) -> None:
    content = [{"type": "text", "text": "look:"}, part]
    err = _refused(_body(messages=[{"role": role, "content": content}]),
                   "messages[0].content[1].type")
    expected = "'text' or 'refusal'" if role == "assistant" else "'text'"
    assert err.message == (f"messages[0].content[1].type: {part.get('type')!r} cannot be "
                           f"priced by this server; expected {expected} parts")


def test_text_and_refusal_parts_are_read_and_checked() -> None:
    assistant = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
    user = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    assert parse_chat(_body(messages=[user, assistant, user])).messages[1] == assistant
    _refused(_body(messages=[{"role": "user", "content": ["a"]}]), "messages[0].content[0]")
    _refused(_body(messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
             "messages[0].content[0].text")
    _refused(_body(messages=[{"role": "assistant", "content": None, "audio": {"id": "a1"}}]),
             "messages[0].audio")


@pytest.mark.parametrize(("field", "value", "param", "said"), [
    ("audio", {"voice": "alloy", "format": "wav"}, "audio", "cannot be priced"),
    ("modalities", ["text", "audio"], "modalities", "cannot be priced"),
    ("modalities", "text", "modalities", "cannot be priced"),
    ("prediction", {"type": "content", "content": "x"}, "prediction", "cannot be priced"),
    ("web_search_options", {}, "web_search_options", "cannot be priced"),
    ("tools", {"type": "function"}, "tools", "expected a list of objects"),
    ("tools", [1], "tools[0]", "expected an object"),
    ("functions", "f", "functions", "expected a list of objects"),
    ("functions", [["f"]], "functions[0]", "expected an object"),
    ("response_format", "json", "response_format", "expected an object"),
])
def test_fields_that_cannot_be_priced_or_are_misshapen_are_a_400_naming_them(
        field: str, value: Any, param: str, said: str) -> None:
    assert said in _refused(_body(**{field: value}), param).message


def test_priced_fields_in_their_shape_are_read() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    chat = parse_chat(_body(modalities=["text"], audio=None, tools=tools,
                            response_format={"type": "json_object"}))
    assert chat.rest["tools"] == tools and chat.rest["modalities"] == ["text"]


@pytest.mark.parametrize("n", [0, 129, -1, True, False, 1.5, 2.0, "2", [2]])
def test_n_outside_1_to_128_is_a_400_naming_n(n: Any) -> None:
    err = _refused(_body(n=n), "n")
    assert err.message == f"n: expected an integer in [1, 128], got {n!r}"


def test_n_is_read_and_passed_on() -> None:
    chat = parse_chat(_body(n=3))
    assert chat.n == 3 and chat.rest["n"] == 3  # the upstream makes the 3 choices
    assert parse_chat(_body(n=128)).n == 128
    plain = parse_chat(_body())
    assert plain.n == 1 and "n" not in plain.rest
    assert parse_chat(_body(n=None)).n == 1


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("max_tokens", 0, "an integer >= 1"), ("max_tokens", 5.0, "an integer >= 1"),
    ("max_tokens", True, "an integer >= 1"),
    ("max_tokens", 10**9 + 1, "an integer >= 1 and <= 1000000000"),
    ("max_completion_tokens", 10**30, "an integer >= 1 and <= 1000000000"),
])
def test_max_tokens_outside_1_to_10_9_is_a_400(field: str, value: Any, expected: str) -> None:
    err = _refused(_body(**{field: value}), field)
    assert err.message == f"{field}: expected {expected}, got {value!r}"


def test_max_tokens_up_to_10_9_is_read() -> None:
    assert parse_chat(_body(max_tokens=10**9)).max_tokens == 10**9


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city, today or on a date.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "A city's name, as Zürich or 東京"},
        "date": {"type": "string", "format": "date"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {}}}]


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def test_input_bound_counts_tools_and_schemas() -> None:
    plain = parse_chat(_body())
    tooled = parse_chat(_body(tools=TOOLS, tool_choice="auto"))
    grown = input_bound(tooled) - input_bound(plain)
    assert grown == _json_bytes(TOOLS) + _json_bytes("auto") + 16 * 2 + 32
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "properties": {"answer": {"type": "string"}}}}}
    formatted = parse_chat(_body(response_format=schema))
    assert input_bound(formatted) - input_bound(plain) == _json_bytes(schema)
    functions = [{"name": "f", "parameters": {"type": "object"}}]
    legacy = parse_chat(_body(functions=functions, function_call={"name": "f"}))
    assert input_bound(legacy) - input_bound(plain) == (
        _json_bytes(functions) + _json_bytes({"name": "f"}) + 16 + 32)


def test_input_bound_is_above_a_realistic_tokenisation() -> None:
    messages = [
        {"role": "system", "content": "You are terse. Réponds en français, s'il le faut."},
        {"role": "user", "content": [{"type": "text", "text": "Quel temps fait-il à 東京 ?"},
                                     {"type": "text", "text": "Et demain ?"}], "name": "zoé"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "東京"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "晴れ, 21°C, light wind"},
    ]
    chat = parse_chat(_body(messages=messages, tools=TOOLS))
    words = sum(len(json.dumps(m, ensure_ascii=False).split()) for m in messages)
    tool_words = len(json.dumps(TOOLS, ensure_ascii=False).split())
    # a tokenizer makes at least a token per word; bytes bound tokens from above
    assert input_bound(chat) >= words + tool_words + 4 * len(messages) + 3
    assert input_bound(chat) >= sum(_json_bytes(m) for m in messages) + _json_bytes(TOOLS)


def test_prompt_bound_counts_every_field_of_a_message() -> None:
    bare = {"role": "tool", "content": "ok"}
    full = {**bare, "tool_call_id": "call_" + "x" * 40, "name": "ünïcode"}
    assert prompt_bound([full]) - prompt_bound([bare]) >= 40 + len("ünïcode".encode())
    assert prompt_bound([bare]) == 8 + 8 + _json_bytes(bare)
    chat = ChatRequest("m", [full], None, False, None)
    assert input_bound(chat) == prompt_bound([full])


@pytest.mark.parametrize(("text", "micros"), [
    ("0", 0), ("0.01", 10_000), (" 2 ", 2_000_000), ("1e-6", 1), ("1E2", 100_000_000),
    ("1000000", 10**12), (".5", 500_000), ("-0", 0), (0, 0), (3, 3_000_000),
    (0.1, 100_000), (1e6, 10**12), (None, None),
])
def test_budgets_in_0_to_a_million_dollars_are_read(text: Any, micros: int | None) -> None:
    assert parse_budget(text, "X-Cost-Envs-Budget") == micros


@pytest.mark.parametrize("text", [
    "NaN", "nan", "inf", "Infinity", "-inf", "1e309", "1e999999999", "1000000.000001", "-0.5",
    "", " ", "0x10", "1_0", "$1", "1,5", "½", True, False, float("nan"), float("inf"), -0.5,
    1_000_001, pytest.param(10**5000, id="10**5000"), [1], {"a": 1},
])
@pytest.mark.parametrize("source", ["X-Cost-Envs-Budget", "cost_envs_budget"])
def test_budgets_that_are_not_finite_dollars_in_range_are_a_400(text: Any, source: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_budget(text, source)
    assert (err.value.status, err.value.param) == (400, source)
    assert err.value.message.startswith(
        f"{source}: expected a number of dollars in [0, 1000000], got ")


def test_a_budget_in_the_body_is_checked_as_the_header() -> None:
    assert parse_chat(_body(cost_envs_budget=0.25)).budget == 250_000
    _refused(_raw(', "cost_envs_budget": 1e7'), "cost_envs_budget")
    _refused(_raw(', "cost_envs_budget": "0x10"'), "cost_envs_budget")
