"""The one YAML file that configures ``cost-envs serve``: models, routes, budgets, storage.

::

    storage: sqlite:///serve.db          # default; postgresql://... is the shared variant
    models:                              # the upstream models, OpenAI-compatible
      - name: small
        base_url: http://127.0.0.1:8100/v1
        api_key_env: SMALL_API_KEY       # optional: the variable holding its key
        input_price: 0.15                # dollars per 1M prompt tokens
        output_price: 0.60               # dollars per 1M completion tokens
        context: 16384                   # prompt + completion tokens, at most
        max_output_tokens: 4096          # the cap a request's max_tokens is held to
        timeout: 30                      # seconds per upstream call
    routers:
      - name: mf                         # clients send model "router-mf-0.42" (or "router-mf")
        path: routers/mf                 # saved by `cost-envs route train --save`
        threshold: 0.42                  # optional: the saved operating point otherwise
        models: {gpt-4.1-nano: small}    # optional: the router's model names -> models above
      - name: alloc                      # a trained TraceRouting-v0 allocator: "router-alloc"
        allocator: models/ppo            # saved by `cost-envs train`
        env_kwargs: {data: logs.csv}     # optional: the env's arguments, if not those saved
        models: {gpt-4.1-nano: small}
      - name: cheap                      # a fixed model: clients send model "cheap"
        model: small
        fallbacks: [large]
    budgets:
      request: {default: 0.05, max: 1.0} # dollars per request (header X-Cost-Envs-Budget)
      keys:
        - name: alice
          key_sha256: 3f2a...            # or key_env: ALICE_KEY (the key itself, hashed here)
          organisation: acme
          limit: 5.0                     # dollars per period, optional
          period: day                    # hour, day, week, month (calendar, UTC) or total
          rpm_limit: 60                  # requests per minute, optional (429 past it)
          tpm_limit: 100000              # tokens per minute, optional
          max_parallel_requests: 8       # requests at once, optional
      organisations:
        - {name: acme, limit: 20.0, period: month}
      users: {limit: 0.5, period: day, rpm_limit: 10}  # each end user (the `user` field)
    server: {max_body_bytes: 1000000, retries: 2, backoff: 0.05, reservation_ttl: 600,
             admin_key_sha256: 9b1c...,  # or admin_key_env: the key of the /admin routes
             open_routes: [/health],     # answered without a key (also /v1/models)
             docs: false}                # /docs and /openapi.json

Money is held as integer micro-dollars from here on (:func:`micros`), so sums never drift.
Every error is one ``ValueError`` line naming the key (``serve.yaml: models[1]: timeout:
expected a finite number > 0, got -1``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

from cost_envs.config import integer, number, one_of, reject_unknown, require_keys, text
from cost_envs.config_files import read_config_file

#: Budget periods: fixed UTC windows (``month`` is the calendar month; ``total`` never resets).
PERIODS = ("hour", "day", "week", "month", "total")
#: The routes a configuration may open to callers without a key (``server.open_routes``).
OPENABLE_ROUTES = ("/health", "/v1/models", "/metrics")
#: The model-name prefix that selects a router, as RouteLLM's ``router-<name>-<threshold>``.
ROUTER_PREFIX = "router-"
_NAME = re.compile(r"^[A-Za-z0-9_.:/-]+$")


def micros(dollars: Decimal | float | int) -> int:
    """Dollars as integer micro-dollars, rounded up (a budget is never under-counted)."""
    return int((Decimal(str(dollars)) * 1_000_000).to_integral_value(ROUND_CEILING))


def hash_key(key: str) -> str:
    """The stored form of an API key: its SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {value!r}")
    return value


def _name(value: Any, where: str, key: str = "name") -> str:
    name = text(value, key, where=where)
    if not _NAME.match(name):
        raise ValueError(f"{where}: {key}: expected letters, digits and _ . : / -, got {name!r}")
    return name


def _dollars(value: Any, key: str, where: str) -> int:
    return micros(Decimal(str(number(value, key, minimum=0, where=where))))


@dataclass(frozen=True)
class ModelConfig:
    """One upstream model (prices in dollars per 1M tokens, as providers list them)."""

    name: str
    base_url: str
    input_price: Decimal
    output_price: Decimal
    context: int = 128_000
    max_output_tokens: int = 4096
    timeout: float = 30.0
    api_key_env: str | None = None
    upstream_name: str | None = None

    def cost_micros(self, prompt_tokens: int, completion_tokens: int) -> int:
        """A call's cost in micro-dollars, rounded up ($1 per 1M tokens: 1 micro-dollar each)."""
        exact = self.input_price * prompt_tokens + self.output_price * completion_tokens
        return int(exact.to_integral_value(ROUND_CEILING))

    def api_key(self) -> str:
        """Its key from :attr:`api_key_env` (``"none"`` when it needs none)."""
        if self.api_key_env is None:
            return "none"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(f"models: {self.name}: api_key_env: the variable "
                             f"{self.api_key_env!r} is not set")
        return key


@dataclass(frozen=True)
class RouteConfig:
    """What a client's model name selects: a saved router or a fixed model (with fallbacks)."""

    name: str
    path: Path | None = None
    threshold: float | None = None
    model: str | None = None
    fallbacks: tuple[str, ...] = ()
    models: Mapping[str, str] = field(default_factory=dict)
    #: A trained allocator's model directory (:mod:`agents.serve.allocators`).
    allocator: Path | None = None
    #: Its env's arguments, when not those saved with it.
    env_kwargs: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class BudgetConfig:
    """A spending limit over a period, in micro-dollars (``None``: no limit)."""

    name: str
    limit: int | None
    period: str = "total"


@dataclass(frozen=True)
class RateLimits:
    """Rate limits of a key or an end user (``None``: no limit), as LiteLLM's proxy names them.

    ``rpm_limit``: requests per minute; ``tpm_limit``: tokens (prompt + completion, as
    billed) per minute; ``max_parallel_requests``: requests being answered at once. The
    minutes are fixed UTC windows.
    """

    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_parallel_requests: int | None = None

    def any(self) -> bool:
        """Whether any limit is set."""
        return any(v is not None for v in (self.rpm_limit, self.tpm_limit,
                                           self.max_parallel_requests))


@dataclass(frozen=True)
class KeyConfig:
    """An API key (its SHA-256 only), its budget, its organisation and its rate limits."""

    name: str
    key_sha256: str
    budget: BudgetConfig
    organisation: str | None = None
    rates: RateLimits = RateLimits()


@dataclass(frozen=True)
class UserPolicy:
    """The budget and rate limits of each end user (a request's ``user`` field) of a key.

    Each (key, user) pair has its own budget ``user:<key>/<user>`` of ``limit`` dollars per
    ``period`` (micro-dollars here; ``None``: no limit) and its own rate limits.
    """

    limit: int | None = None
    period: str = "total"
    rates: RateLimits = RateLimits()


@dataclass(frozen=True)
class ServerConfig:
    """Server settings: request size, upstream retries, how long a dead server's calls hold.

    ``reservation_ttl``: seconds after a server's last heartbeat that its reservations are
    released (it was killed mid-call). ``admin_key_sha256``: the SHA-256 of the key of the
    admin routes (``POST /admin/reload``); ``None``: no admin routes. ``open_routes``: of
    :data:`OPENABLE_ROUTES`, those answered without a key; ``docs``: serve ``/docs`` and
    ``/openapi.json`` (off by default).
    """

    max_body_bytes: int = 1_000_000
    retries: int = 2
    backoff: float = 0.05
    reservation_ttl: float = 600.0
    admin_key_sha256: str | None = None
    #: The routes answered without a key (every other one needs an API key).
    open_routes: tuple[str, ...] = ("/health",)
    #: Serve the OpenAPI schema and its pages (``/openapi.json``, ``/docs``), without a key.
    docs: bool = False


@dataclass(frozen=True)
class ServeConfig:
    """The whole configuration (:func:`load_config`)."""

    models: Mapping[str, ModelConfig]
    routes: Mapping[str, RouteConfig]
    keys: tuple[KeyConfig, ...]
    organisations: Mapping[str, BudgetConfig]
    request_default: int
    request_max: int
    storage: str = "sqlite:///serve.db"
    server: ServerConfig = ServerConfig()
    #: The budget and rate limits of each end user (``budgets.users``), or ``None``.
    users: UserPolicy | None = None


def _model(entry: Any, where: str) -> ModelConfig:
    entry = _mapping(entry, where)
    allowed = ("name", "base_url", "api_key_env", "input_price", "output_price", "context",
               "max_output_tokens", "timeout", "upstream_name")
    reject_unknown(entry, allowed, where)
    require_keys(entry, ("name", "base_url", "input_price", "output_price"), where)
    url = text(entry["base_url"], "base_url", where=where)
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: base_url: expected an http:// or https:// URL, got {url!r}")
    prices = {k: Decimal(str(number(entry[k], k, minimum=0, where=where)))
              for k in ("input_price", "output_price")}
    context = integer(entry.get("context", 128_000), "context", minimum=1, where=where)
    return ModelConfig(
        _name(entry["name"], where), url.rstrip("/"), prices["input_price"],
        prices["output_price"], context,
        integer(entry.get("max_output_tokens", min(4096, context)), "max_output_tokens",
                minimum=1, maximum=context, where=where),
        number(entry.get("timeout", 30.0), "timeout", minimum=0, inclusive=(False, True),
               where=where),
        None if entry.get("api_key_env") is None else text(entry["api_key_env"], "api_key_env",
                                                             where=where),
        None if entry.get("upstream_name") is None else text(entry["upstream_name"],
                                                               "upstream_name", where=where))


def _route(entry: Any, where: str, models: Mapping[str, ModelConfig], base: Path) -> RouteConfig:
    entry = _mapping(entry, where)
    reject_unknown(entry, ("name", "path", "threshold", "model", "fallbacks", "models",
                           "allocator", "env_kwargs"), where)
    require_keys(entry, ("name",), where)
    name = _name(entry["name"], where)
    kinds = sorted(k for k in entry if k in ("path", "model", "allocator"))
    if len(kinds) != 1:
        raise ValueError(f"{where}: expected one of 'path' (a saved router), 'model' "
                         f"(a fixed model) or 'allocator' (a trained allocator), got {kinds}")
    if "env_kwargs" in entry and "allocator" not in entry:
        raise ValueError(f"{where}: env_kwargs: expected only with 'allocator'")
    fallbacks = tuple(one_of(m, "fallbacks", list(models), where=where)
                      for m in _list(entry.get("fallbacks", []), f"{where}: fallbacks"))
    if "model" in entry:
        if "threshold" in entry or "models" in entry:
            raise ValueError(f"{where}: threshold/models: expected only with 'path' (a router)")
        return RouteConfig(name, model=one_of(entry["model"], "model", list(models), where=where),
                           fallbacks=fallbacks)
    mapping = {str(k): one_of(v, f"models[{k}]", list(models), where=where)
               for k, v in _mapping(entry.get("models", {}), f"{where}: models").items()}
    if "allocator" in entry:
        if "threshold" in entry:
            raise ValueError(f"{where}: threshold: an allocator has no threshold")
        directory = Path(text(entry["allocator"], "allocator", where=where))
        kwargs = None
        if "env_kwargs" in entry:
            kwargs = dict(_mapping(entry["env_kwargs"], f"{where}: env_kwargs"))
            data = kwargs.get("data")
            if isinstance(data, str) and not Path(data).is_absolute():
                kwargs["data"] = str(base / data)  # relative to the file, as other paths
        return RouteConfig(name, fallbacks=fallbacks, models=mapping,
                           allocator=directory if directory.is_absolute() else base / directory,
                           env_kwargs=kwargs)
    path = Path(text(entry["path"], "path", where=where))
    path = path if path.is_absolute() else base / path
    threshold = (None if entry.get("threshold") is None
                 else number(entry["threshold"], "threshold", where=where))
    return RouteConfig(name, path, threshold, None, fallbacks, mapping)


def _budget(entry: Mapping[str, Any], name: str, where: str) -> BudgetConfig:
    limit = entry.get("limit")
    return BudgetConfig(name, None if limit is None else _dollars(limit, "limit", where),
                        one_of(entry.get("period", "total"), "period", PERIODS, where=where))


def _digest(entry: Mapping[str, Any], where: str, prefix: str = "") -> str:
    """The key's SHA-256 from ``<prefix>key_sha256`` or ``<prefix>key_env`` (hashed here)."""
    if f"{prefix}key_env" in entry:
        variable = text(entry[f"{prefix}key_env"], f"{prefix}key_env", where=where)
        key = os.environ.get(variable)
        if not key:
            raise ValueError(f"{where}: {prefix}key_env: the variable {variable!r} is not set")
        return hash_key(key)
    digest = text(entry[f"{prefix}key_sha256"], f"{prefix}key_sha256", where=where).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError(f"{where}: {prefix}key_sha256: expected 64 hex digits, got {digest!r}")
    return digest


#: The rate-limit keys of a key or of ``budgets.users``.
RATE_KEYS = ("rpm_limit", "tpm_limit", "max_parallel_requests")


def rate_limits(entry: Mapping[str, Any], where: str) -> RateLimits:
    """The rate limits of ``entry`` (each an integer >= 1, or absent / null: no limit)."""
    return RateLimits(*(None if entry.get(k) is None else
                        integer(entry[k], k, minimum=1, maximum=10**12, where=where)
                        for k in RATE_KEYS))


def _key(entry: Any, where: str, organisations: Mapping[str, BudgetConfig]) -> KeyConfig:
    entry = _mapping(entry, where)
    reject_unknown(entry, ("name", "key_sha256", "key_env", "organisation", "limit", "period",
                           *RATE_KEYS), where)
    require_keys(entry, ("name",), where)
    name = _name(entry["name"], where)
    if ("key_sha256" in entry) == ("key_env" in entry):
        raise ValueError(f"{where}: expected one of 'key_sha256' (the key's SHA-256, hex) or "
                         "'key_env' (the variable holding the key)")
    digest = _digest(entry, where)
    org = entry.get("organisation")
    if org is not None:
        org = one_of(org, "organisation", list(organisations), where=where)
    return KeyConfig(name, digest, _budget(entry, f"key:{name}", where), org,
                     rate_limits(entry, where))


def parse_config(data: Any, source: str = "serve.yaml", base: Path | None = None) -> ServeConfig:
    """Check a parsed configuration and build it (``base``: where relative paths start).

    Raises:
        ValueError: One line naming the key and what was expected.
    """
    data = _mapping(data, source)
    base = Path.cwd() if base is None else base
    reject_unknown(data, ("storage", "models", "routers", "budgets", "server"), source)
    require_keys(data, ("models",), source)
    models: dict[str, ModelConfig] = {}
    for i, entry in enumerate(_list(data["models"], f"{source}: models")):
        model = _model(entry, f"{source}: models[{i}]")
        if model.name in models:
            raise ValueError(f"{source}: models[{i}]: name: {model.name!r} appears twice")
        models[model.name] = model
    if not models:
        raise ValueError(f"{source}: models: expected at least one model, got []")
    routes: dict[str, RouteConfig] = {}
    for i, entry in enumerate(_list(data.get("routers", []), f"{source}: routers")):
        route = _route(entry, f"{source}: routers[{i}]", models, base)
        if route.name in routes or route.name in models:
            raise ValueError(f"{source}: routers[{i}]: name: {route.name!r} is already a "
                             "model's or another router's name")
        routes[route.name] = route
    budgets = _mapping(data.get("budgets", {}), f"{source}: budgets")
    reject_unknown(budgets, ("request", "keys", "organisations", "users"),
                   f"{source}: budgets")
    request = _mapping(budgets.get("request", {}), f"{source}: budgets: request")
    where = f"{source}: budgets: request"
    reject_unknown(request, ("default", "max"), where)
    request_max = _dollars(request.get("max", 1.0), "max", where)
    request_default = _dollars(request.get("default", request.get("max", 1.0)), "default", where)
    if request_default > request_max:
        raise ValueError(f"{where}: default: expected at most max ({request_max / 1e6:g}), "
                         f"got {request_default / 1e6:g}")
    organisations: dict[str, BudgetConfig] = {}
    for i, entry in enumerate(_list(budgets.get("organisations", []),
                                    f"{source}: budgets: organisations")):
        where = f"{source}: budgets: organisations[{i}]"
        entry = _mapping(entry, where)
        reject_unknown(entry, ("name", "limit", "period"), where)
        require_keys(entry, ("name",), where)
        name = _name(entry["name"], where)
        organisations[name] = _budget(entry, f"org:{name}", where)
    keys = tuple(_key(entry, f"{source}: budgets: keys[{i}]", organisations)
                 for i, entry in enumerate(_list(budgets.get("keys", []),
                                                 f"{source}: budgets: keys")))
    if len({k.key_sha256 for k in keys}) < len(keys) or len({k.name for k in keys}) < len(keys):
        raise ValueError(f"{source}: budgets: keys: expected distinct names and keys")
    users = None
    if budgets.get("users") is not None:
        where = f"{source}: budgets: users"
        entry = _mapping(budgets["users"], where)
        reject_unknown(entry, ("limit", "period", *RATE_KEYS), where)
        budget = _budget(entry, "user", where)
        users = UserPolicy(budget.limit, budget.period, rate_limits(entry, where))
    storage = text(data.get("storage", "sqlite:///serve.db"), "storage", where=source)
    if not storage.startswith(("sqlite:///", "postgresql://")):
        raise ValueError(f"{source}: storage: expected sqlite:///PATH or postgresql://..., "
                         f"got {storage!r}")
    if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////"):
        relative = storage[len("sqlite:///"):]
        if relative != ":memory:":
            storage = f"sqlite:///{base / relative}"
    server = _mapping(data.get("server", {}), f"{source}: server")
    where = f"{source}: server"
    reject_unknown(server, ("max_body_bytes", "retries", "backoff", "reservation_ttl",
                            "admin_key_sha256", "admin_key_env", "open_routes", "docs"), where)
    open_routes = tuple(one_of(r, "open_routes", OPENABLE_ROUTES, where=where) for r in
                        _list(server.get("open_routes", ["/health"]), f"{where}: open_routes"))
    docs = server.get("docs", False)
    if not isinstance(docs, bool):
        raise ValueError(f"{where}: docs: expected true or false, got {docs!r}")
    admin = None
    if "admin_key_sha256" in server and "admin_key_env" in server:
        raise ValueError(f"{where}: expected one of 'admin_key_sha256' or 'admin_key_env'")
    if "admin_key_sha256" in server or "admin_key_env" in server:
        admin = _digest(server, where, "admin_")
        if admin in {k.key_sha256 for k in keys}:
            raise ValueError(f"{where}: admin key: expected a key of its own, got an API "
                             "key's")
    settings = ServerConfig(
        integer(server.get("max_body_bytes", 1_000_000), "max_body_bytes", minimum=1, where=where),
        integer(server.get("retries", 2), "retries", minimum=0, maximum=10, where=where),
        number(server.get("backoff", 0.05), "backoff", minimum=0, maximum=60, where=where),
        number(server.get("reservation_ttl", 600.0), "reservation_ttl", minimum=0,
               inclusive=(False, True), where=where), admin, open_routes, docs)
    return ServeConfig(models, routes, keys, organisations, request_default, request_max,
                       storage, settings, users)


def load_config(path: str | Path) -> ServeConfig:
    """Read and check a ``serve.yaml``; relative paths in it start at its folder."""
    path = Path(path)
    return parse_config(read_config_file(path), str(path), path.resolve().parent)
