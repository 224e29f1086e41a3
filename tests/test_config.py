"""cost_envs.config: the typed value checks and the strict YAML/JSON reader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from cost_envs.config import (
    boolean,
    integer,
    number,
    one_of,
    probability,
    reject_unknown,
    require_keys,
    text,
)
from cost_envs.config_files import MAX_DEPTH, read_config_file

NEVER = (OverflowError, RecursionError, TypeError, AssertionError)


# ------------------------------------------------------------------------ value checks
@pytest.mark.parametrize(("call", "message"), [
    (lambda: number(-1, "cost", minimum=0, where="pool.yaml: agents[2]"),
     "pool.yaml: agents[2]: cost: expected a finite number >= 0, got -1"),
    (lambda: number(float("nan"), "lam"), "lam: expected a finite number, got nan"),
    (lambda: number(float("inf"), "x", maximum=3), "x: expected a finite number <= 3, got inf"),
    (lambda: number(True, "x"), "x: expected a finite number, got True"),
    (lambda: number("1", "x"), "x: expected a finite number, got '1'"),
    (lambda: number(10**400, "input", minimum=0), "got an integer of 401 digits"),
    (lambda: number(0, "kappa", minimum=0, inclusive=False), "expected a finite number > 0"),
    (lambda: number(1, "c", minimum=0, maximum=1, inclusive=False),
     "c: expected a number in (0, 1), got 1"),
    (lambda: number(0, "l", minimum=0, maximum=1, inclusive=(False, True)),
     "l: expected a number in (0, 1], got 0"),
    (lambda: probability(1.5, "p", where="w"), "w: p: expected a number in [0, 1], got 1.5"),
    (lambda: integer(9, "max_rounds", minimum=1, maximum=8, where="Env"),
     "Env: max_rounds: expected an int in [1, 8], got 9"),
    (lambda: integer(2.0, "n"), "n: expected an int, got 2.0"),
    (lambda: integer(True, "n", minimum=0), "n: expected an int >= 0, got True"),
    (lambda: boolean("yes", "cascade"), "cascade: expected True or False, got 'yes'"),
    (lambda: text("", "name"), "name: expected a non-empty string, got ''"),
    (lambda: one_of("tset", "split", ("train", "test")),
     "split: expected one of ['train', 'test'], got 'tset'; did you mean 'test'?"),
    (lambda: one_of(["x"], "split", ("train",)), "split: expected one of ['train'], got ['x']"),
    (lambda: reject_unknown({"costs": 1}, ("name", "cost"), "pool.yaml: agents[0]"),
     "pool.yaml: agents[0]: unknown key(s) ['costs']; expected some of ['name', 'cost']; "
     "did you mean 'cost'?"),
    (lambda: require_keys({"name": 1}, ("name", "cost"), "w"),
     "w: missing key(s) ['cost']; expected ['name', 'cost']"),
])
def test_checks_raise_one_line_value_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as excinfo:
        call()
    assert "\n" not in str(excinfo.value)


def test_checks_return_the_value_converted() -> None:
    assert number(np.float32(0.5), "x") == 0.5 and type(number(3, "x")) is float
    assert integer(np.int64(3), "n") == 3 and type(integer(np.int64(3), "n")) is int
    assert probability(1, "p") == 1.0 and boolean(np.bool_(True), "b") is True
    assert one_of("test", "split", ("train", "test")) == "test"


# ------------------------------------------------------------------------ the reader
def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


NESTED = "[" * 1000 + "]" * 1000
# name -> (file name, content, fragments the one-line message must contain)
BAD_FILES = {
    "duplicate JSON key": ("p.json", '{"models": [{"name": "a", "input": 1, "input": 2}]}',
                           ("models[0]", "duplicate key 'input'")),
    "duplicate top-level JSON key": ("p.json", '{"unit": "x", "unit": "y"}',
                                     ("top level", "duplicate key 'unit'")),
    "duplicate YAML key": ("p.yaml", "agents:\n  - name: a\n    cost: 1\n    cost: 2\n",
                           ("line 4", "agents[0]", "duplicate key 'cost'", "first on line 3")),
    "huge JSON integer": ("p.json", '{"models": [{"input": ' + "9" * 400 + "}]}",
                          ("models[0].input", "400 digits", "too large for a float")),
    "huge YAML integer": ("p.yaml", "input: " + "1" + "0" * 400 + "\n",
                          ("input", "too large for a float")),
    "JSON integer over int()'s limit": ("p.json", '{"a": {"b": [1, -' + "9" * 5000 + "]}}",
                                        ("a.b[1]", "5000 digits", "too large for a float")),
    "YAML integer over int()'s limit": ("p.yaml", "a:\n  b: [1, " + "9" * 5000 + "]\n",
                                        ("a.b[1]", "5000 digits", "too large for a float")),
    "YAML sexagesimal over int()'s limit": ("p.yaml", "a: " + "9" * 5000 + ":00\n",
                                            ("a: expected a finite number", "too large")),
    "YAML hexadecimal integer": ("p.yaml", "a: 0x" + "f" * 5000 + "\n",
                                 ("a: expected a finite number", "too large for a float")),
    "YAML binary integer": ("p.yaml", "a: 0b" + "1" * 20000 + "\n",
                            ("a: expected a finite number", "too large for a float")),
    "huge YAML key": ("p.yaml", "9" * 500 + ": 1\n", ("top level", "500 digits")),
    "YAML NaN": ("p.yaml", "capability: [0.5, .nan]\n", ("capability[1]", "got nan")),
    "YAML infinity": ("p.yaml", "cost: .inf\n", ("cost", "got inf")),
    "JSON NaN": ("p.json", '{"cost": NaN}', ("cost", "got nan")),
    "JSON Infinity": ("p.json", '{"cost": -Infinity}', ("cost", "got -inf")),
    "deep JSON": ("p.json", '{"agents": ' + NESTED + "}",
                  ("line 1", "agents[0][0]", f"nested deeper than {MAX_DEPTH} levels")),
    "deep YAML flow": ("p.yaml", "agents: " + NESTED + "\n",
                       ("agents[0][0]", f"nested deeper than {MAX_DEPTH} levels")),
    "deep YAML block": ("p.yaml", "agents:\n" + "".join(
        "  " * i + "-\n" for i in range(1, 1000)), ("agents[0]", "nested deeper than")),
    "deep YAML through aliases": ("p.yaml", "\n".join(
        ["l0: &l0 [1]", *(f"l{i}: &l{i} [*l{i - 1}]" for i in range(1, 1000))]),
        ("nested deeper than",)),
    "recursive YAML alias": ("p.yaml", "a: &a [*a]\n", ("a[0]", "contains itself")),
    "JSON syntax": ("p.json", '{"a": [1, 2}', ("line 1, column 12", "not valid JSON")),
    "YAML syntax": ("p.yaml", "a: [1, 2\n", ("not valid YAML", "flow sequence")),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_are_one_line_value_errors_naming_file_and_key(tmp_path: Path,
                                                                  case: str) -> None:
    name, content, fragments = BAD_FILES[case]
    path = write(tmp_path, name, content)
    try:
        read_config_file(path)
    except NEVER as err:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"{type(err).__name__} escaped: {err}")
    except ValueError as err:
        message = str(err)
        assert "\n" not in message and len(message) < 600, message
        assert "not valid" not in message or "syntax" in case, message
        for fragment in (str(path), *fragments):
            assert fragment in message, f"{fragment!r} not in {message!r}"
    else:
        pytest.fail("no error")


@pytest.mark.parametrize(("name", "content"), [
    ("p.json", '{"a": [1, {"b": 2}], "c": 1e9}'),
    ("p.yaml", "a: [1, {b: 2}]\nc: 1e9\n"),
    ("p.yml", "a:\n  - 1\n  - b: 2\nc: 1.0e9\n"),
])
def test_valid_files_read_as_before(tmp_path: Path, name: str, content: str) -> None:
    assert read_config_file(write(tmp_path, name, content)) == {"a": [1, {"b": 2}], "c": 1e9}
    # a byte-order mark (Windows editors write one) changes nothing
    bom = tmp_path / f"bom-{name}"
    bom.write_bytes(b"\xef\xbb\xbf" + content.encode("utf-8"))
    assert read_config_file(bom) == {"a": [1, {"b": 2}], "c": 1e9}


def test_yaml_merge_keys_and_shared_anchors_are_not_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "base: &b {x: 1, y: [1, 2]}\nc:\n  <<: *b\n  x: 2\n"
                                     "d: *b\n")
    assert read_config_file(path) == {"base": {"x": 1, "y": [1, 2]},
                                      "c": {"x": 2, "y": [1, 2]}, "d": {"x": 1, "y": [1, 2]}}


def test_nesting_up_to_the_limit_is_accepted(tmp_path: Path) -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert read_config_file(write(tmp_path, "p.json", deep)) == json.loads(deep)
    assert read_config_file(write(tmp_path, "p.yaml", deep)) == json.loads(deep)
    with pytest.raises(ValueError, match="nested deeper"):
        read_config_file(write(tmp_path, "q.json", f"[{deep}]"))


def test_integers_of_every_yaml_form_read_as_before(tmp_path: Path) -> None:
    import yaml

    content = ("a: [0, -12, +7, 1_000, 0x1F, 017, 0b101, 190:20:30, 0o17]\n"
               f"b: {'9' * 300}\nc: 0b{'1' * 1000}\n{'8' * 300}: 1\n")
    assert read_config_file(write(tmp_path, "p.yaml", content)) == yaml.safe_load(content)
    assert read_config_file(write(tmp_path, "p.json", '[0, -12, 1' + "0" * 300 + "]")) == [
        0, -12, 10**300]
