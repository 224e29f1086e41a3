"""Token price tables: the packaged table, ModelPrice arithmetic, file loading and validation."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

import cost_envs.prices
from cost_envs.envs.expert_routing import CONTROLLER, DEFAULT_EXPERTS
from cost_envs.prices import ModelPrice, PriceTable, coerce_prices, default_price_table

PACKAGED = Path(cost_envs.prices.__file__).parent / "data" / "prices.yaml"


def table_dict() -> dict[str, Any]:
    """A valid three-model table in its dict form (plain JSON-able data)."""
    return {
        "currency": "USD",
        "unit": "per_million_tokens",
        "models": [
            {"name": "small", "input": 0.1, "output": 0.4, "source": "https://a.example",
             "date": "2025-04-14"},
            {"name": "large", "input": 2.0, "output": 8.0, "active_params_billion": 200,
             "params_source": "estimate", "source": "https://b.example", "date": "2025-04-14"},
            {"name": "reasoner", "input": 2.0, "output": 8.0, "reasoning": 8.0,
             "source": "https://c.example", "date": "2025-06-10"},
        ],
    }


def write_table(path: Path, data: Any) -> Path:
    """Write plain data as JSON or YAML according to the suffix."""
    if path.suffix == ".json":
        path.write_text(json.dumps(data), encoding="utf-8")  # NaN/inf become NaN/Infinity
    else:
        path.write_text(yaml.safe_dump(data), encoding="utf-8")  # NaN/inf become .nan/.inf
    return path


def price(**overrides: Any) -> ModelPrice:
    fields = {"name": "m", "input": 2.0, "output": 8.0, "source": "s", "date": "2025-04-14"}
    return ModelPrice(**{**fields, **overrides})


# ------------------------------------------------------------------------ packaged table
def test_packaged_table_loads_and_every_entry_is_sourced_and_dated() -> None:
    table = default_price_table()
    assert table.currency == "USD"
    assert len(table.names) == len(set(table.names)) >= 4
    # read the raw file too: the keys must be written, not filled in by defaults
    raw = yaml.safe_load(PACKAGED.read_text(encoding="utf-8"))
    assert raw["unit"] == "per_million_tokens"
    assert [m["name"] for m in raw["models"]] == list(table.names)
    today = dt.date.today()
    for entry, model in zip(raw["models"], table, strict=True):
        assert "source" in entry and "date" in entry, entry["name"]
        assert isinstance(model.source, str) and model.source.strip(), model.name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", model.date), (model.name, model.date)
        listed = dt.date.fromisoformat(model.date)
        assert dt.date(2020, 1, 1) <= listed <= today, (model.name, model.date)
        assert model.input > 0 and model.output > 0
        assert model.active_params_billion > 0 and model.params_source


def test_packaged_table_prices_the_expert_routing_models() -> None:
    table = default_price_table()
    table.require([CONTROLLER.name, *DEFAULT_EXPERTS])  # no error
    o3 = table["o3"]
    assert o3.reasoning is not None and o3.reasoning_price == o3.output  # billed as output
    assert table["gpt-4.1"].input == 2.0 and table["gpt-4.1"].output == 8.0
    assert default_price_table() == table  # a pure function of the packaged file


def test_packaged_table_is_parsed_once_and_cannot_be_changed_by_one_env() -> None:
    # every token-billed env asks for it; one shared, frozen instance
    table = default_price_table()
    assert default_price_table() is table
    with pytest.raises(AttributeError):
        table.models = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        table["o3"].input = 0.0  # type: ignore[misc]


def test_module_docstring_yaml_example_loads(tmp_path: Path) -> None:
    # the schema example users copy: comments after values, an unquoted date
    example = cost_envs.prices.__doc__.split("::", 1)[1].split("Unknown keys", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(textwrap.dedent(example), encoding="utf-8")
    table = PriceTable.from_file(path)
    model = table["gpt-4.1"]
    assert (model.input, model.output, model.reasoning) == (2.0, 8.0, 8.0)
    assert model.date == "2025-04-14" and model.active_params_billion == 200.0


# --------------------------------------------------------------------------- ModelPrice
def test_cost_is_tokens_times_price_per_million() -> None:
    model = price(input=2.0, output=8.0)
    assert model.cost(1000, 0) == pytest.approx(0.002, rel=1e-15)
    assert model.cost(0, 500) == pytest.approx(0.004, rel=1e-15)
    assert model.cost(1000, 500) == pytest.approx(0.006, rel=1e-15)
    assert model.cost(0, 0) == 0.0
    assert model.cost(1e6, 1e6) == pytest.approx(10.0, rel=1e-15)


def test_reasoning_tokens_billed_at_output_price_unless_given() -> None:
    default = price(input=2.0, output=8.0)
    assert default.reasoning is None and default.reasoning_price == 8.0
    assert default.cost(0, 0, 1000) == pytest.approx(0.008, rel=1e-15)
    assert default.cost(100, 200, 300) == pytest.approx((200 + 1600 + 2400) / 1e6, rel=1e-15)
    own = price(input=2.0, output=8.0, reasoning=3.0)
    assert own.reasoning_price == 3.0
    assert own.cost(0, 0, 1000) == pytest.approx(0.003, rel=1e-15)
    free = price(reasoning=0)
    assert free.reasoning_price == 0.0 and free.cost(0, 0, 10**6) == 0.0


def test_flops_are_two_times_params_times_tokens() -> None:
    model = price(active_params_billion=7.6)
    assert model.flops(1000) == pytest.approx(2 * 7.6e9 * 1000, rel=1e-15)
    assert model.flops(0) == 0.0
    assert price().flops(10**6) == 0.0  # parameter count unknown: 0 by default


def test_numbers_are_stored_as_floats() -> None:
    model = price(input=2, output=8, reasoning=1, active_params_billion=7)
    for key in ("input", "output", "reasoning", "active_params_billion"):
        assert type(getattr(model, key)) is float, key


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"input": -1.0}, "input"),
        ({"output": float("nan")}, "output"),
        ({"reasoning": float("inf")}, "reasoning"),
        ({"input": True}, "input"),
        ({"output": "8.00"}, "output"),
        ({"active_params_billion": -7}, "active_params_billion"),
        ({"name": ""}, "name"),
        ({"source": "  "}, "source"),
        ({"date": "14/04/2025"}, "YYYY-MM-DD"),
        ({"params_source": 3}, "params_source"),
    ],
)
def test_model_price_validates(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        price(**overrides)


def test_a_date_object_is_stored_as_iso_text() -> None:
    assert price(date=dt.date(2025, 4, 14)).date == "2025-04-14"


@pytest.mark.parametrize("date", ["20250414", "2025-W15-1"])
def test_only_yyyy_mm_dd_dates_are_accepted(date: str) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        price(date=date)


# ---------------------------------------------------------------------------- PriceTable
def test_lookup_membership_and_order() -> None:
    table = PriceTable.from_dict(table_dict())
    assert table.names == ("small", "large", "reasoner")
    assert [m.name for m in table] == list(table.names)
    assert "large" in table and "huge" not in table
    assert table["large"].active_params_billion == 200.0
    with pytest.raises(KeyError, match="huge"):
        table["huge"]


def test_require_names_every_missing_model() -> None:
    table = PriceTable.from_dict(table_dict())
    table.require(["small", "reasoner"])  # all present: no error
    with pytest.raises(ValueError) as excinfo:
        table.require(["small", "gpt-5", "claude-x", "large"], "MyEnv: prices")
    message = str(excinfo.value)
    assert "MyEnv: prices" in message
    assert "['gpt-5', 'claude-x']" in message  # exactly the missing ones, in order


def test_a_table_in_another_currency_says_why_it_lacks_a_model() -> None:
    # Issue #26: a EUR table (or a typo such as "usd") is not merged onto the packaged
    # USD table, so a model it does not list is missing; the error says so.
    for currency in ("EUR", "usd"):
        table = coerce_prices({**table_dict(), "currency": currency})
        with pytest.raises(ValueError, match=rf"no price for model\(s\) \['gpt-5'\]; .*its "
                                             rf"currency is '{currency}', not the packaged "
                                             r"table's 'USD', so it is not merged"):
            table.require(["small", "gpt-5"], "MyEnv: prices")
    with pytest.raises(ValueError) as excinfo:  # a USD table gives no such reason
        PriceTable.from_dict(table_dict()).require(["gpt-5"])
    assert "currency" not in str(excinfo.value)


def test_null_for_an_optional_key_means_absent() -> None:
    data = table_dict()
    data["currency"] = data["unit"] = None
    data["models"][0].update(reasoning=None, active_params_billion=None, params_source=None)
    assert PriceTable.from_dict(data) == PriceTable.from_dict(table_dict())
    data["models"][0]["input"] = None  # a required key stays required
    with pytest.raises(ValueError, match=r"models\[0\]"):
        PriceTable.from_dict(data)


def test_direct_construction_validates() -> None:
    with pytest.raises(ValueError, match="at least one"):
        PriceTable(())
    with pytest.raises(ValueError, match="duplicate"):
        PriceTable((price(), price()))


def test_from_dict_does_not_mutate_its_input() -> None:
    data = table_dict()
    before = copy.deepcopy(data)
    PriceTable.from_dict(data)
    assert data == before


# ------------------------------------------------------------------------------- files
@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml", ".JSON"])
def test_file_loads_like_the_dict(tmp_path: Path, suffix: str) -> None:
    data = table_dict()
    path = tmp_path / f"prices{suffix}"
    write_table(path.with_suffix(suffix.lower()), data).rename(path)
    assert PriceTable.from_file(path) == PriceTable.from_dict(data)
    assert PriceTable.from_file(str(path)) == PriceTable.from_dict(data)


def test_yaml_as_people_write_it(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(
        textwrap.dedent("""\
            currency: EUR
            models:
              - name: tiny
                input: 1.5e-1          # YAML 1.1 would read this as a string
                output: 6e-1
                reasoning: 2.5E+0
                active_params_billion: 3
                source: internal quote
                date: 2025-01-31       # unquoted: YAML reads a date
              - name: other
                input: 1
                output: .5
                reasoning: null
                source: https://example.com
                date: "2024-12-01"
            """),
        encoding="utf-8",
    )
    table = PriceTable.from_file(path)
    assert table.currency == "EUR"
    tiny, other = table
    assert (tiny.input, tiny.output, tiny.reasoning) == (0.15, 0.6, 2.5)
    assert tiny.active_params_billion == 3.0
    assert tiny.date == "2025-01-31" and isinstance(tiny.date, str)
    assert (other.input, other.output, other.reasoning) == (1.0, 0.5, None)
    assert other.reasoning_price == 0.5
    assert tiny.cost(1e6, 1e6, 1e6) == pytest.approx(0.15 + 0.6 + 2.5, rel=1e-15)


def _set(index: int, key: str, value: Any) -> Any:
    return lambda d: d["models"][index].__setitem__(key, value)


def _pop(index: int, key: str) -> Any:
    return lambda d: d["models"][index].pop(key)


# name -> (data edit, substrings the message must contain besides the path)
BAD_TABLES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "unknown top key": (lambda d: d.__setitem__("vendor", "x"), ("unknown", "vendor")),
    "unknown model key": (_set(2, "price", 1.0), ("models[2]", "unknown", "price")),
    "missing source": (_pop(2, "source"), ("models[2]", "missing", "source")),
    "missing date": (_pop(2, "date"), ("models[2]", "missing", "date")),
    "missing name": (_pop(1, "name"), ("models[1]", "missing", "name")),
    "missing output": (_pop(2, "output"), ("models[2]", "missing", "output")),
    "empty source": (_set(2, "source", ""), ("models[2]", "source")),
    "bad date format": (_set(2, "date", "14/04/2025"), ("models[2]", "date", "YYYY-MM-DD")),
    "impossible date": (_set(2, "date", "2025-02-30"), ("models[2]", "date", "YYYY-MM-DD")),
    "date not text": (_set(2, "date", 20250414), ("models[2]", "date")),
    "negative input": (_set(2, "input", -0.5), ("models[2]", "input", ">= 0")),
    "negative params": (_set(2, "active_params_billion", -1), ("models[2]", "active_params")),
    "nan output": (_set(2, "output", float("nan")), ("models[2]", "output", "finite")),
    "inf reasoning": (_set(2, "reasoning", float("inf")), ("models[2]", "reasoning", "finite")),
    "bool input": (_set(2, "input", True), ("models[2]", "input")),
    "string input": (_set(2, "input", "2.00"), ("models[2]", "input")),
    "empty name": (_set(2, "name", ""), ("models[2]", "name")),
    "params_source not text": (_set(2, "params_source", 5), ("models[2]", "params_source")),
    "duplicate names": (_set(2, "name", "small"), ("duplicate", "small")),
    "empty models": (lambda d: d.__setitem__("models", []), ("models",)),
    "models not a list": (lambda d: d.__setitem__("models", {"name": "x"}), ("models",)),
    "missing models": (lambda d: d.pop("models"), ("models",)),
    "entry not a mapping": (lambda d: d["models"].__setitem__(2, "gpt-4.1"),
                            ("models[2]", "mapping")),
    "wrong unit": (lambda d: d.__setitem__("unit", "per_thousand_tokens"),
                   ("unit", "per_thousand_tokens", "per_million_tokens")),
    "empty currency": (lambda d: d.__setitem__("currency", ""), ("currency",)),
}


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_table_file_raises_naming_file_and_entry(
    tmp_path: Path, suffix: str, case: str
) -> None:
    edit, fragments = BAD_TABLES[case]
    data = table_dict()
    edit(data)
    path = write_table(tmp_path / f"prices{suffix}", data)
    with pytest.raises(ValueError) as excinfo:
        PriceTable.from_file(path)
    message = str(excinfo.value)
    for fragment in (str(path), *fragments):
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_bad_dict_is_named_as_a_dict() -> None:
    data = table_dict()
    data["models"][1]["input"] = -1
    with pytest.raises(ValueError, match=re.escape("<dict>: models[1]: model 'large': input")):
        PriceTable.from_dict(data)


@pytest.mark.parametrize(
    ("name", "text"),
    [("prices.yaml", "- just\n- a list\n"), ("prices.json", "[1, 2]"),
     ("prices.yaml", "just a string\n"), ("prices.yml", "")],
)
def test_top_level_not_a_mapping(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="expected a mapping") as excinfo:
        PriceTable.from_file(path)
    assert str(path) in str(excinfo.value)


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("prices.json", '{"models": [', "JSON"),
        ("prices.json", "", "JSON"),
        ("prices.json", "{'models': []}", "JSON"),
        ("prices.yaml", "models: [a, b\ncurrency: {", "YAML"),
        ("prices.yml", "models:\n  - name: a\n bad-indent: 1\n", "YAML"),
    ],
)
def test_invalid_syntax(tmp_path: Path, name: str, text: str, fragment: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as excinfo:
        PriceTable.from_file(path)
    message = str(excinfo.value)
    assert str(path) in message and fragment in message and "valid" in message


def test_non_utf8_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_bytes("currency: \u20ac\nmodels: []\n".encode("cp1252"))
    with pytest.raises(ValueError) as excinfo:
        PriceTable.from_file(path)
    assert str(path) in str(excinfo.value)


@pytest.mark.parametrize("name", ["prices.txt", "prices.toml", "prices", "prices.json.bak"])
def test_wrong_suffix(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(table_dict()), encoding="utf-8")
    with pytest.raises(ValueError) as excinfo:
        PriceTable.from_file(path)
    message = str(excinfo.value)
    assert str(path) in message and ".json" in message and ".yaml" in message


# ------------------------------------------------------------------------ coerce_prices
def test_coerce_prices_accepts_every_documented_form(tmp_path: Path) -> None:
    data = table_dict()
    table = PriceTable.from_dict(data)
    assert coerce_prices(table) is table  # an object is used exactly as it is
    merged = table.over(default_price_table())
    assert coerce_prices(data) == merged
    path = write_table(tmp_path / "p.yaml", data)
    assert coerce_prices(path) == merged
    assert coerce_prices(str(path)) == merged
    assert coerce_prices(None) == default_price_table()


# ----------------------------------------------------- user tables merge onto the shipped
def test_a_user_table_overrides_only_the_models_it_lists(tmp_path: Path) -> None:
    shipped = default_price_table()
    path = write_table(tmp_path / "mine.yaml", {"models": [
        {"name": "o3", "input": 1.0, "output": 4.0, "source": "mine", "date": "2026-01-01"},
        {"name": "my-model", "input": 0.5, "output": 0.5, "source": "mine",
         "date": "2026-01-01"}]})
    merged = coerce_prices(path)
    assert merged.names == (*shipped.names, "my-model")  # shipped order, new ones after
    assert (merged["o3"].input, merged["o3"].output, merged["o3"].reasoning) == (1.0, 4.0, None)
    assert merged["o3"].reasoning_price == 4.0  # replaced whole: nothing inherited
    for name in shipped.names:
        if name != "o3":
            assert merged[name] == shipped[name]
    assert merged.source == str(path)  # errors about the merged table name the user's file


def test_a_bad_entry_of_a_partial_table_names_file_model_and_field(tmp_path: Path) -> None:
    path = write_table(tmp_path / "mine.yaml", {"models": [
        {"name": "o3", "input": -2.0, "output": 8.0, "source": "s", "date": "2026-01-01"}]})
    with pytest.raises(ValueError, match=re.escape(f"{path}: models[0]: model 'o3': input")):
        coerce_prices(path)


def test_a_table_in_another_currency_is_not_merged() -> None:
    data = table_dict()
    data["currency"] = "EUR"
    table = coerce_prices(data)
    assert table.names == ("small", "large", "reasoner")
    with pytest.raises(ValueError, match="currency 'EUR' differs from 'USD'"):
        PriceTable.from_dict(data).over(default_price_table())


@pytest.mark.parametrize("value", [42, 1.5, ["small"], ("a",), b"prices.yaml", object()])
def test_coerce_prices_rejects_other_types(value: Any) -> None:
    with pytest.raises(ValueError, match="prices: expected a PriceTable"):
        coerce_prices(value)


def test_coerce_prices_validates_mappings() -> None:
    data = table_dict()
    data["models"][0]["date"] = "yesterday"
    with pytest.raises(ValueError, match=re.escape("models[0]")):
        coerce_prices(data)


def test_nan_in_json_is_refused_even_though_json_allows_it(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    text = json.dumps(table_dict()).replace('"output": 0.4', '"output": NaN')
    assert "NaN" in text
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape("models[0]")):
        PriceTable.from_file(path)
    assert math.isnan(json.loads(text)["models"][0]["output"])
