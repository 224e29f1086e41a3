"""The operator's routes: keys, budgets, spend, metrics and reloading the routers.

Each takes the admin key (``server.admin_key_sha256``), except ``/spend/report``, which an
API key may read for itself, and ``/metrics``, which ``server.open_routes`` may open to a
scraper without a key. Their names follow LiteLLM's proxy where it has one (``/key/...``,
spend reports) and Prometheus's (``/metrics``):

* ``POST /key/generate``, ``/key/update``, ``/key/regenerate``, ``/key/delete``,
  ``GET /key/list``, ``/key/info?name=``: keys without a restart (:mod:`agents.serve.keys`);
* ``GET /admin/budgets``, ``POST /admin/budgets/unblock``: each budget's money this period
  and lifting a block (:mod:`agents.serve.ledger`);
* ``GET /spend/report?group_by=key,user,model,day&start=&end=&format=json|csv``
  (:mod:`agents.serve.spend`);
* ``GET /metrics`` (:mod:`agents.serve.metrics`);
* ``POST /admin/reload``: the routers loaded again from their files.
"""

from __future__ import annotations

import asyncio
import calendar
import hmac
import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from agents.serve.config import hash_key
from agents.serve.inputs import ApiError, read_body
from agents.serve.spend import parse_group_by, spend_report, to_csv

if TYPE_CHECKING:
    from agents.serve.app import Server


def check_admin(server: Server, request: Request) -> None:
    """Check the admin key of a request: 403 when none is configured, else 401."""
    digest = server.config.server.admin_key_sha256
    if digest is None:
        raise ApiError(403, "admin: no admin key is configured (server.admin_key_sha256 "
                       "or server.admin_key_env); reload with kill -HUP",
                       kind="permission_error", code="admin_disabled")
    if not is_admin(server, request):
        raise ApiError(401, "authorization: expected the header 'Authorization: Bearer "
                       "KEY' with the admin key", param="authorization",
                       code="invalid_api_key")


def is_admin(server: Server, request: Request) -> bool:
    """Whether the request carries the admin key."""
    digest = server.config.server.admin_key_sha256
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return (digest is not None and scheme.lower() == "bearer"
            and hmac.compare_digest(hash_key(key.strip()), digest))


async def admin_body(server: Server, request: Request) -> Mapping[str, Any]:
    """An admin route's JSON object body (after checking the admin key), or 400."""
    check_admin(server, request)
    raw = await read_body(request, server.config.server.max_body_bytes)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # malformed, not UTF-8, a 5,000-digit number
        body = None
    if not isinstance(body, dict):
        raise ApiError(400, "body: expected a JSON object", param="body")
    return body


def _time(value: str | None, name: str) -> float | None:
    """A report bound: Unix seconds or a UTC date ``YYYY-MM-DD`` (its midnight)."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        parts = value.split("-")
        try:
            year, month, day = (int(p) for p in parts)
            seconds = float(calendar.timegm((year, month, day, 0, 0, 0)))
        except (ValueError, OverflowError):
            raise ApiError(400, f"{name}: expected Unix seconds or a date YYYY-MM-DD, got "
                           f"{value[:40]!r}", param=name) from None
    if not math.isfinite(seconds):
        raise ApiError(400, f"{name}: expected a finite time, got {value[:40]!r}", param=name)
    return seconds


def add_operator_routes(app: FastAPI, server: Server) -> None:
    """Register the operator's routes (module docstring) on ``app``."""
    keys, ledger = server.key_store, server.ledger

    def key_route(change: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Any:
        async def changed(request: Request) -> dict[str, Any]:
            return change(await admin_body(server, request))
        return changed

    for change in (keys.generate, keys.update, keys.regenerate, keys.delete):
        app.post(f"/key/{change.__name__}")(key_route(change))  # /key/generate, ...

    @app.get("/key/list")
    async def key_list(request: Request) -> dict[str, Any]:
        check_admin(server, request)
        return {"object": "list", "data": keys.list()}

    @app.get("/key/info")
    async def key_info(request: Request, name: str = "") -> dict[str, Any]:
        check_admin(server, request)
        return keys.info(name)

    @app.get("/admin/budgets")
    async def admin_budgets(request: Request) -> dict[str, Any]:
        check_admin(server, request)
        blocked = ledger.blocked()
        return {"object": "list", "data": [
            {"budget": u.budget, "period_start": u.period_start, "spent_micros": u.spent,
             "reserved_micros": u.reserved, "limit_micros": u.limit,
             "blocked_by": blocked.get(u.budget)} for u in ledger.current_usage()]}

    @app.post("/admin/budgets/unblock")
    async def admin_unblock(request: Request) -> dict[str, Any]:
        # a budget is blocked by a call billed above its reservation, until this or the
        # end of its period
        name = (await admin_body(server, request)).get("budget")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "budget: expected a budget's name (key:NAME, org:NAME or "
                           "user:KEY/USER)", param="budget")
        try:
            lifted = ledger.unblock(name)
        except KeyError:
            raise ApiError(404, f"budget: no budget {name!r}; expected key:NAME, org:NAME or "
                           "user:KEY/USER", param="budget", code="budget_not_found") from None
        return {"object": "budget.unblock", "budget": name, "was_blocked": lifted}

    @app.get("/spend/report", response_model=None)
    async def spend(request: Request, group_by: str = "key", start: str | None = None,
                    end: str | None = None, format: str = "json") -> Any:
        mine = None if is_admin(server, request) else server.authenticate(request).name
        if format not in ("json", "csv"):
            raise ApiError(400, f"format: expected json or csv, got {format[:20]!r}",
                           param="format")
        try:
            fields = parse_group_by(group_by)
            rows = spend_report(ledger, fields, _time(start, "start"), _time(end, "end"),
                                key=mine)
        except ValueError as err:
            raise ApiError(400, str(err), param="group_by" if "group_by" in str(err)
                           else "start") from None
        if format == "csv":
            return Response(to_csv(rows, fields), media_type="text/csv")
        return {"object": "spend.report", "group_by": list(fields), "data": rows}

    @app.get("/metrics", response_model=None)
    async def metrics(request: Request) -> Response:
        if "/metrics" not in server.config.server.open_routes:
            check_admin(server, request)
        body, kind = server.metrics.exposition(request.headers.get("accept"))
        return Response(body, media_type=kind)

    @app.post("/admin/reload")
    async def admin_reload(request: Request) -> dict[str, Any]:
        # off the event loop: requests keep being served while the files load; a router
        # that fails to load leaves the old ones serving
        check_admin(server, request)
        async with server.reloading:  # one reload at a time
            try:
                await asyncio.to_thread(server.reload)
            except Exception as err:  # any failure: the old routers stay
                print(f"cost-envs serve: reload failed, the old routers stay: {err}",
                      flush=True)
                raise ApiError(500, f"reload failed, the old routers still serve: {err}",
                               kind="server_error", param="routers",
                               code="reload_failed") from None
        print("cost-envs serve: routers reloaded (POST /admin/reload)", flush=True)
        return {"object": "reload",
                "routers": [n for n, r in server.config.routes.items() if r.path is not None]}
