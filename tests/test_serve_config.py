"""``serve.yaml``: a good file builds the config; each bad key is one line naming it."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path

import pytest

from agents.serve.config import hash_key, load_config, micros, parse_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "serve.yaml"

GOOD = {
    "storage": "sqlite:///ledger.db",
    "models": [
        {"name": "small", "base_url": "http://127.0.0.1:1/v1", "input_price": 0.15,
         "output_price": 0.6, "context": 1000, "max_output_tokens": 200},
        {"name": "large", "base_url": "http://127.0.0.1:1/v1/", "input_price": 2,
         "output_price": 8, "timeout": 5, "api_key_env": "LARGE_KEY"},
    ],
    "routers": [{"name": "cheap", "model": "small", "fallbacks": ["large"]},
                {"name": "mf", "path": "routers/mf", "threshold": 0.4,
                 "models": {"gpt-4.1-nano": "small"}}],
    "budgets": {"request": {"default": 0.01, "max": 0.5},
                "organisations": [{"name": "acme", "limit": 20, "period": "month"}],
                "keys": [{"name": "alice", "key_sha256": hash_key("sk-a"),
                          "organisation": "acme", "limit": 1.5, "period": "day"}]},
    "server": {"retries": 1},
}


def test_a_good_config_builds(tmp_path: Path) -> None:
    config = parse_config(GOOD, "s.yaml", tmp_path)
    assert list(config.models) == ["small", "large"]
    assert config.models["large"].base_url == "http://127.0.0.1:1/v1"  # no trailing slash
    assert config.models["small"].input_price == Decimal("0.15")
    assert config.routes["mf"].path == tmp_path / "routers" / "mf"
    assert config.routes["cheap"].fallbacks == ("large",)
    assert config.storage == f"sqlite:///{tmp_path}/ledger.db"
    assert (config.request_default, config.request_max) == (10_000, 500_000)
    key = config.keys[0]
    assert key.budget.limit == 1_500_000 and key.budget.period == "day"
    assert key.organisation == "acme" and config.organisations["acme"].limit == 20_000_000
    assert config.server.retries == 1 and config.server.backoff == 0.05


def test_money_is_exact_integer_micro_dollars() -> None:
    config = parse_config(GOOD)
    small = config.models["small"]
    # 0.15 $/1M tokens: 1000 tokens cost 150 micro-dollars exactly, 1 token rounds up to 1
    assert small.cost_micros(1000, 0) == 150 and small.cost_micros(1, 0) == 1
    assert small.cost_micros(3, 7) == 5  # 0.45 + 4.2 = 4.65 -> 5
    assert micros(0.1) + micros(0.2) == micros(0.3) == 300_000  # no float drift


def _bad(path: tuple, value: object) -> dict:
    data = copy.deepcopy(GOOD)
    node = data
    for step in path[:-1]:
        node = node[step]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize(("path", "value", "message"), [
    (("models", 0, "input_price"), -1,
     r"models\[0\]: input_price: expected a finite number >= 0, got -1"),
    (("models", 1, "timeout"), 0, r"models\[1\]: timeout: expected a finite number > 0, got 0"),
    (("models", 0, "base_url"), "ftp://x", r"models\[0\]: base_url: expected an http"),
    (("models", 0, "max_output_tokens"), 5000,
     r"models\[0\]: max_output_tokens: expected an int in \[1, 1000\]"),
    (("models", 0, "prices"), 1, r"models\[0\]: unknown key\(s\) \['prices'\]"),
    (("models", 0, "name"), KeyError, r"models\[0\]: missing key\(s\) \['name'\]"),
    (("models",), [], r"models: expected at least one model"),
    (("routers", 0, "model"), "smal",
     r"routers\[0\]: model: expected one of \['small', 'large'\], got 'smal'; did you"),
    (("routers", 1, "model"), "small",
     r"routers\[1\]: expected one of 'path' .*, 'model' .* or 'allocator' "
     r"\(a trained allocator\), got \['model', 'path'\]"),
    (("routers", 0, "name"), "small", r"routers\[0\]: name: 'small' is already"),
    (("budgets", "request", "max"), "1",
     r"budgets: request: max: expected a finite number >= 0, got '1'"),
    (("budgets", "request", "default"), 2, r"budgets: request: default: expected at most max"),
    (("budgets", "keys", 0, "period"), "daily",
     r"keys\[0\]: period: expected one of .*did you mean 'day'"),
    (("budgets", "keys", 0, "key_sha256"), "abc", r"keys\[0\]: key_sha256: expected 64 hex digits"),
    (("budgets", "keys", 0, "organisation"), "acne",
     r"keys\[0\]: organisation: expected one of \['acme'\]"),
    (("budgets", "organisations", 0, "limit"), -5,
     r"organisations\[0\]: limit: expected a finite number >= 0"),
    (("storage",), "mysql://x", r"storage: expected sqlite:///PATH or postgresql://"),
    (("server", "retries"), 11, r"server: retries: expected an int in \[0, 10\], got 11"),
    (("server", "admin_key_sha256"), "xyz", r"server: admin_key_sha256: expected 64 hex"),
    (("server", "admin_key_sha256"), hash_key("sk-a"),
     r"server: admin key: expected a key of its own, got an API key's"),
    (("budget",), {}, r"unknown key\(s\) \['budget'\]; .*did you mean 'budgets'"),
])
def test_each_bad_key_is_one_line_naming_it(path: tuple, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        parse_config(_bad(path, value), "s.yaml")
    assert "\n" not in str(err.value) and str(err.value).startswith("s.yaml: ")


def test_key_env_hashes_the_key_and_a_missing_variable_is_named(monkeypatch) -> None:
    data = _bad(("budgets", "keys", 0), {"name": "bob", "key_env": "BOB_KEY"})
    monkeypatch.delenv("BOB_KEY", raising=False)
    with pytest.raises(ValueError, match=r"keys\[0\]: key_env: the variable 'BOB_KEY' is not set"):
        parse_config(data)
    monkeypatch.setenv("BOB_KEY", "sk-bob")
    assert parse_config(data).keys[0].key_sha256 == hash_key("sk-bob")


def test_the_admin_key_is_stored_hashed(monkeypatch) -> None:
    assert parse_config(GOOD).server.admin_key_sha256 is None  # no admin routes
    data = _bad(("server", "admin_key_sha256"), hash_key("sk-admin").upper())
    assert parse_config(data).server.admin_key_sha256 == hash_key("sk-admin")
    data = _bad(("server", "admin_key_env"), "ADMIN_KEY")
    monkeypatch.setenv("ADMIN_KEY", "sk-root")
    assert parse_config(data).server.admin_key_sha256 == hash_key("sk-root")
    monkeypatch.delenv("ADMIN_KEY")
    with pytest.raises(ValueError, match="admin_key_env: the variable 'ADMIN_KEY' is not set"):
        parse_config(data)
    data["server"]["admin_key_sha256"] = hash_key("x")
    with pytest.raises(ValueError, match="expected one of 'admin_key_sha256' or 'admin_key_env'"):
        parse_config(data)


def test_the_example_config_loads() -> None:
    config = load_config(EXAMPLE)
    assert set(config.models) >= {"small", "large"}
    assert config.storage.startswith("sqlite:///")
