"""The OpenAI-compatible server: ``POST /v1/chat/completions``, ``GET /v1/models``, ``/health``.

One request, in order: the body's size, the API key (``Authorization: Bearer KEY``, looked
up by its SHA-256), the body's fields (:func:`~agents.serve.inputs.parse_chat`) and the
per-request budget (header ``X-Cost-Envs-Budget`` and body field ``cost_envs_budget``,
dollars; the smaller applies, capped by ``budgets.request.max``) are checked first: a bad
one is an OpenAI-shaped 4xx naming it, and nothing is reserved or charged. A retry with an
``Idempotency-Key`` already answered gets that answer again. Then:

1. the model name selects the models to try (:class:`~agents.serve.routes.Routes`);
2. for each in turn, the worst case (:func:`~agents.serve.inputs.input_bound`, every part
   the upstream bills as input, plus ``max_tokens`` capped by the model's limits, at its
   prices, times ``n``) must fit the request's budget and be reserved on the key's and
   organisation's budgets (:meth:`~agents.serve.ledger.Ledger.reserve`); a model that
   does not fit is skipped for the next (a downgrade);
3. the upstream is called, with the reserved completion bound forwarded and retries on
   the faults it does not bill; if it still fails, the call is settled by the charge rule
   of its fault (:mod:`agents.serve.upstream`: nothing, or the worst case when the
   upstream may have billed it) and the next model that fits is tried (a fallback);
4. the real cost from the answer's ``usage`` is settled and the rest released before the
   answer is relayed (a stream: its usage written ahead, and settled before its
   ``[DONE]``; one whose usage never came is charged its worst case; one the upstream
   breaks ends with an error event). A cost above the reservation is charged as billed
   and blocks the budgets (:mod:`agents.serve.ledger`).

A cascade router's first call is its weak model's, buffered; the cascade then decides
from the answer whether the strong model is called, reserved in its own transaction
(:mod:`agents.serve.cascade`). An allocator trained with ``cascade=True`` takes the same
path: its first call is the model whose answer its second step observes.

Nothing fits: 402 naming the budget (``insufficient_quota``). Nothing answers: 502 (with
``x-should-retry: false`` when an attempt was charged). docs/serving.md tabulates the
charge of every outcome.
Headers ``X-Cost-Envs-Model``, ``X-Cost-Envs-Route`` and (unstreamed)
``X-Cost-Envs-Cost-Micros`` say what was called and what it cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agents.serve.cascade import buffered_stream, cascade
from agents.serve.config import BudgetConfig, KeyConfig, ModelConfig, ServeConfig, hash_key
from agents.serve.http1 import Http1Pool
from agents.serve.inputs import (
    BUDGET_FIELD,
    BUDGET_HEADER,
    ApiError,
    ChatRequest,
    input_bound,
    parse_budget,
    parse_chat,
    routing_prompt,
)
from agents.serve.ledger import BudgetExceededError, DuplicateRequestError, Ledger
from agents.serve.routes import Plan, Routes
from agents.serve.storage import open_storage
from agents.serve.upstream import (
    StreamResult,
    UpstreamFailedError,
    UpstreamRejectedError,
    UpstreamUnknownError,
    error_event,
    read_completion,
    relay,
    send,
    usage_tokens,
)

#: The key of a server configured without keys: anyone may call, with no key budget.
ANONYMOUS = KeyConfig("anonymous", "", BudgetConfig("key:anonymous", None, "total"))


def _error(err: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def end_user(chat: ChatRequest) -> str | None:
    """The request's end user (OpenAI's ``user`` field), or ``None``; 400 unless a short string."""
    user = chat.rest.get("user")
    if user is None:
        return None
    if not isinstance(user, str) or not 1 <= len(user) <= 256:
        raise ApiError(400, f"user: expected a string of 1 to 256 characters, got "
                       f"{str(user)[:40]!r}", param="user")
    return user


def replayed(status: int, body: str, stream: bool) -> Response:
    """A kept answer, to a client retrying with its ``Idempotency-Key`` (charged nothing)."""
    headers = {"X-Cost-Envs-Replayed": "true"}
    if stream:
        data = json.loads(body)
        return StreamingResponse(buffered_stream(data, data.get("usage") is not None),
                                 media_type="text/event-stream", headers=headers)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def _chained(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for event in rest:
        yield event


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    too_big = ApiError(413, f"body: expected at most {limit} bytes", param="body",
                       code="request_too_large")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


class Server:
    """The server's state: config, routes (routers loaded), ledger and upstream client."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.routes = Routes(config)
        self.ledger = Ledger(open_storage(config.storage), config.keys or (ANONYMOUS,),
                             config.organisations, ttl=config.server.reservation_ttl)
        self.ledger.release_expired()  # reservations of a server that was killed
        self.keys = {k.key_sha256: k for k in config.keys}
        self.client: httpx.AsyncClient | None = None
        self.pool: Http1Pool | None = None  # unstreamed calls: faster than the client
        self._reloading = asyncio.Lock()

    def authenticate(self, request: Request) -> KeyConfig:
        """The key of ``Authorization: Bearer KEY``, or 401."""
        if not self.keys:
            return ANONYMOUS
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "authorization: expected the header 'Authorization: Bearer "
                           "KEY' with an API key", param="authorization",
                           code="invalid_api_key")
        found = self.keys.get(hash_key(key.strip()))
        if found is None:
            raise ApiError(401, "authorization: incorrect API key provided",
                           param="authorization", code="invalid_api_key")
        return found

    def request_budget(self, request: Request, chat: ChatRequest) -> tuple[int, str]:
        """The request's cap in micro-dollars and where it came from."""
        header = parse_budget(request.headers.get(BUDGET_HEADER), BUDGET_HEADER)
        given = [(v, s) for v, s in ((header, BUDGET_HEADER), (chat.budget, BUDGET_FIELD))
                 if v is not None]
        if not given:
            return self.config.request_default, "budgets.request.default"
        value, source = min(given)
        return min(value, self.config.request_max), (
            source if value <= self.config.request_max else "budgets.request.max")

    def worst_case(self, model: ModelConfig, bound: int, chat: ChatRequest) -> tuple[int, int]:
        """The call's max_tokens (capped by the model's limits) and its worst cost, or (0, 0).

        ``bound``: the request's input bound (:func:`~agents.serve.inputs.input_bound`).
        Each of the ``n`` choices is reserved the whole prompt and ``max_tokens`` (an
        upstream that bills the prompt once per request is covered with room to spare).
        """
        room = model.context - bound
        max_tokens = min(chat.max_tokens or model.max_output_tokens, model.max_output_tokens,
                         room)
        if max_tokens < 1:
            return 0, 0
        return max_tokens, chat.n * model.cost_micros(bound, max_tokens)

    def idempotency_key(self, request: Request, key: KeyConfig) -> str | None:
        """The request's ``Idempotency-Key``, scoped to its API key, or ``None``."""
        value = request.headers.get("idempotency-key")
        if value is None:
            return None
        if not 1 <= len(value) <= 255 or not value.isprintable():
            raise ApiError(400, f"Idempotency-Key: expected 1 to 255 printable characters, "
                           f"got {value[:40]!r}", param="Idempotency-Key")
        return f"{key.name}:{value}"

    async def chat(self, request: Request) -> Any:
        """``POST /v1/chat/completions``."""
        started = time.perf_counter()
        key = self.authenticate(request)
        chat = parse_chat(await _read_body(request, self.config.server.max_body_bytes))
        budget, budget_source = self.request_budget(request, chat)
        idempotency = self.idempotency_key(request, key)
        if idempotency is not None:
            kept = self.ledger.answer_of(idempotency)
            if kept is not None:
                return replayed(*kept)
        user = end_user(chat)
        prompt = routing_prompt(chat.messages)
        plan = self.routes.plan(chat.model, prompt)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        refusals: list[str] = []
        failures: list[str] = []
        charged = False  # an attempt the upstream may have billed was charged
        reserved_before = False  # the idempotency key goes on the first reservation only
        for attempt, name in enumerate(plan.models):
            model = self.config.models[name]
            max_tokens, worst = self.worst_case(model, input_bound(chat), chat)
            if max_tokens == 0:
                refusals.append(f"{name}: the prompt (up to {input_bound(chat)} tokens) leaves "
                                f"no room in its context of {model.context}")
                continue
            if worst > budget:
                refusals.append(f"{name}: a call of up to ${worst / 1e6:.6f} does not fit the "
                                f"request budget ${budget / 1e6:.6f} ({budget_source})")
                continue
            reservation = request_id if attempt == 0 else f"{request_id}.{attempt}"
            try:
                self.ledger.reserve(reservation, key, worst,
                                    None if reserved_before else idempotency, user=user)
            except BudgetExceededError as err:
                refusals.append(f"{name}: {err}")
                continue
            except DuplicateRequestError:
                raise ApiError(409, "Idempotency-Key: a request with this key is still being "
                               "answered; try again in a moment", param="Idempotency-Key",
                               code="request_in_progress") from None
            reserved_before = True
            try:
                if plan.cascade is not None and attempt == 0:  # the weak call, then maybe more
                    answer = await cascade(self, key, chat, budget, budget_source, model,
                                           (max_tokens, worst), reservation, plan, prompt,
                                           started)
                    if idempotency is not None and isinstance(answer, JSONResponse):
                        self.ledger.keep_answer(idempotency, answer.status_code,
                                                bytes(answer.body).decode())
                    return answer
                return await self._call(model, chat, max_tokens, worst, reservation, plan,
                                        prompt, started)
            except UpstreamFailedError as err:
                self.ledger.settle(reservation, 0, "upstream_failed", route=plan.route,
                                   model=name, prompt=prompt)
                failures.append(str(err))
            except UpstreamUnknownError as err:  # maybe billed: its worst case, never 0
                self.ledger.settle(reservation, worst, "upstream_unknown", route=plan.route,
                                   model=name, prompt=prompt)
                failures.append(f"{err} (charged ${worst / 1e6:.6f}, its worst case)")
                charged = True
            except UpstreamRejectedError as err:
                body = json.dumps(err.body)
                self.ledger.settle(reservation, 0, f"upstream_rejected_{err.status}",
                                   route=plan.route, model=name, prompt=prompt,
                                   answer=(err.status, body, False))
                return Response(body, status_code=err.status, media_type="application/json")
            except BaseException:  # a client gone, a bug: charge the worst case (the
                # upstream may have billed it); a no-op once settled
                self.ledger.settle(reservation, worst, "server_error", route=plan.route,
                                   model=name, prompt=prompt)
                raise
        if failures:
            error = ApiError(502, "no upstream could serve the request: " + "; ".join(failures),
                             kind="upstream_error", code="upstream_failed")
            if idempotency is not None and reserved_before:
                self.ledger.keep_answer(idempotency, error.status, json.dumps(error.body()))
            # a retry would be another upstream call, billed again: the client decides
            return _error(error, {"x-should-retry": "false"} if charged else None)
        # no idempotency key on the row: nothing was charged, the client may try again
        self.ledger.record(request_id, "refused_budget", key_name=key.name, route=plan.route,
                           prompt=prompt, user=user)
        raise ApiError(402, "budget exceeded: " + "; ".join(refusals), kind="insufficient_quota",
                       param="budget", code="budget_exceeded")

    async def _call(self, model: ModelConfig, chat: ChatRequest, max_tokens: int, worst: int,
                    reservation: str, plan: Plan, prompt: str, started: float,
                    extra: dict[str, str] | None = None, spent_before: int = 0,
                    keep: bool = True) -> Any:
        """One call, settled and answered (``spent_before``: a cascade's weak call's cost).

        ``keep``: the answer is kept for the reservation's idempotency key (a cascade's
        weak call is not the request's answer).

        Raises:
            UpstreamFailedError, UpstreamUnknownError, UpstreamRejectedError: The call
                failed before any of its answer reached the client (the caller settles
                it and falls back).
        """
        body = {**chat.rest, "model": model.upstream_name or model.name,
                "messages": chat.messages, chat.max_tokens_field: max_tokens}
        headers = {"X-Cost-Envs-Model": model.name, "X-Cost-Envs-Route": plan.route,
                   **(extra or {})}
        settings = self.config.server
        assert self.client is not None
        if not chat.stream:
            response = await send(self.client, model, body, settings.retries, settings.backoff,
                                  pool=self.pool)
            data = read_completion(response, model)
            tokens = usage_tokens(data.get("usage"))
            cost = worst if tokens is None else model.cost_micros(*tokens)
            choices = data["choices"]
            first = choices[0] if choices and isinstance(choices[0], dict) else {}
            text = (first.get("message") or {}).get("content")
            upstream_id = data.get("id") if isinstance(data.get("id"), str) else None
            data["model"], data["id"] = model.name, reservation  # the id feedback names
            # settled (the write-ahead) before a byte of the answer reaches the client
            excess = self.ledger.settle(
                reservation, cost, "ok" if tokens else "ok_no_usage", route=plan.route,
                model=model.name, prompt_tokens=tokens[0] if tokens else None,
                completion_tokens=tokens[1] if tokens else None,
                latency_ms=1000 * (time.perf_counter() - started), prompt=prompt,
                response=text if isinstance(text, str) else None, upstream_id=upstream_id,
                answer=(200, json.dumps(data), False) if keep else None)
            headers["X-Cost-Envs-Cost-Micros"] = str(spent_before + cost)
            if excess:
                headers["X-Cost-Envs-Over-Reservation-Micros"] = str(excess)
            return JSONResponse(data, headers=headers)
        wants_usage = bool((chat.rest.get("stream_options") or {}).get("include_usage"))
        body["stream"] = True
        body["stream_options"] = {**(chat.rest.get("stream_options") or {}),
                                  "include_usage": True}
        response = await send(self.client, model, body, settings.retries, settings.backoff,
                              stream=True)
        result = StreamResult()
        upstream = relay(response, model.name, reservation, wants_usage, result)
        try:  # the first event before the 200 goes out: a stream dead at once falls back
            first_event = await anext(upstream)
        except StopAsyncIteration:
            raise UpstreamUnknownError(result.fault or f"{model.name}: an empty stream") from None

        def settle() -> None:
            tokens = usage_tokens(result.usage)
            if result.complete:
                outcome = "ok" if tokens else "ok_no_usage"
            else:  # cut by the upstream, or the client left
                outcome = "upstream_stream_failed" if result.fault else "stream_incomplete"
            completion = {
                "id": reservation, "object": "chat.completion", "created": int(time.time()),
                "model": model.name, "usage": result.usage,
                "choices": [{"index": 0, "finish_reason": result.finish_reason or "stop",
                             "message": {"role": "assistant",
                                         "content": "".join(result.text)}}]}
            self.ledger.settle(
                reservation, worst if tokens is None else model.cost_micros(*tokens), outcome,
                route=plan.route, model=model.name,
                prompt_tokens=tokens[0] if tokens else None,
                completion_tokens=tokens[1] if tokens else None,
                latency_ms=1000 * (time.perf_counter() - started), prompt=prompt,
                response="".join(result.text), upstream_id=result.upstream_id,
                answer=(200, json.dumps(completion), True)
                if keep and result.complete else None)

        async def events() -> Any:
            settled = written = False
            try:
                async for event in _chained(first_event, upstream):
                    tokens = usage_tokens(result.usage)
                    if tokens and not written and not result.complete:
                        # the write-ahead: a crash from here on is charged this, not 0
                        self.ledger.write_ahead(reservation, model.cost_micros(*tokens),
                                                upstream_id=result.upstream_id,
                                                prompt_tokens=tokens[0],
                                                completion_tokens=tokens[1])
                        written = True
                    if result.complete and not settled:
                        # charged before the client reads the stream's end: a client that
                        # has its [DONE] finds its row in the ledger
                        settle()
                        settled = True
                    yield event
                if result.fault is not None:
                    settle()
                    settled = True
                    yield error_event(f"{result.fault}; the answer is incomplete")
            finally:  # also when the client went away mid-stream
                if not settled:
                    settle()

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def feedback(self, request: Request) -> dict[str, Any]:
        """``POST /v1/feedback``: ``{"id": "<a response's id>", "score": 0..1}``."""
        key = self.authenticate(request)
        raw = await _read_body(request, self.config.server.max_body_bytes)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            raise ApiError(400, "body: expected a JSON object {\"id\": ..., \"score\": ...}",
                           param="body")
        ident, score = body.get("id"), body.get("score")
        if not isinstance(ident, str) or not ident:
            raise ApiError(400, f"id: expected a response's id, got {ident!r}", param="id")
        if (isinstance(score, bool) or not isinstance(score, (int, float))
                or not 0 <= score <= 1):
            raise ApiError(400, f"score: expected a number in [0, 1], got {score!r}",
                           param="score")
        if not self.ledger.feedback(ident, float(score), key.name):
            raise ApiError(404, f"id: no answered request {ident!r} of this API key",
                           param="id")
        return {"id": ident, "score": float(score)}

    def admin(self, request: Request) -> None:
        """Check the admin key of an ``/admin`` route: 403 when none is configured, else 401."""
        digest = self.config.server.admin_key_sha256
        if digest is None:
            raise ApiError(403, "admin: no admin key is configured (server.admin_key_sha256 "
                           "or server.admin_key_env); reload with kill -HUP",
                           kind="permission_error", code="admin_disabled")
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(hash_key(key.strip()), digest):
            raise ApiError(401, "authorization: expected the header 'Authorization: Bearer "
                           "KEY' with the admin key", param="authorization",
                           code="invalid_api_key")

    async def admin_unblock(self, request: Request) -> dict[str, Any]:
        """``POST /admin/budgets/unblock`` ``{"budget": "key:alice"}``: lift a budget's block.

        A budget is blocked by a call billed above its reservation (:mod:`~agents.serve.ledger`);
        the block holds until this or the end of the budget's period.
        """
        self.admin(request)
        raw = await _read_body(request, self.config.server.max_body_bytes)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            body = None
        name = body.get("budget") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            raise ApiError(400, "body: expected a JSON object {\"budget\": \"key:NAME\"} (or "
                           "org:NAME)", param="budget")
        try:
            lifted = self.ledger.unblock(name)
        except KeyError:
            raise ApiError(404, f"budget: no budget {name!r}; expected key:NAME or org:NAME",
                           param="budget", code="budget_not_found") from None
        return {"object": "budget.unblock", "budget": name, "was_blocked": lifted}

    async def admin_budgets(self, request: Request) -> dict[str, Any]:
        """``GET /admin/budgets``: every budget's money this period, and what blocks it."""
        self.admin(request)
        blocked = self.ledger.blocked()
        return {"object": "list", "data": [
            {"budget": u.budget, "period_start": u.period_start, "spent_micros": u.spent,
             "reserved_micros": u.reserved, "limit_micros": u.limit,
             "blocked_by": blocked.get(u.budget)} for u in self.ledger.current_usage()]}

    async def admin_reload(self, request: Request) -> dict[str, Any]:
        """``POST /admin/reload`` with the admin key: :meth:`reload`, off the event loop.

        Requests keep being served while the files load (in a thread); a router that fails
        to load leaves the old ones serving, and the answer is a 500 naming its file.
        """
        self.admin(request)
        async with self._reloading:  # one reload at a time
            try:
                await asyncio.to_thread(self.reload)
            except Exception as err:  # any failure: the old routers stay
                print(f"cost-envs serve: reload failed, the old routers stay: {err}",
                      flush=True)
                raise ApiError(500, f"reload failed, the old routers still serve: {err}",
                               kind="server_error", param="routers",
                               code="reload_failed") from None
        print("cost-envs serve: routers reloaded (POST /admin/reload)", flush=True)
        return {"object": "reload",
                "routers": [n for n, r in self.config.routes.items() if r.path is not None]}

    def reload(self) -> None:
        """Load the routers again from their files and swap them in at once.

        A request already routed keeps its plan (the old router's decision); the next
        ones use the new routers. A router that fails to load leaves the old ones.
        """
        self.routes = Routes(self.config)


def create_app(config: ServeConfig) -> FastAPI:
    """The FastAPI app serving ``config`` (its routers and ledger opened now)."""
    server = Server(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        del app
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async def beat() -> None:  # this server is alive: its reservations do not expire
            while True:
                await asyncio.sleep(config.server.reservation_ttl / 4)
                server.ledger.heartbeat()

        heart = asyncio.create_task(beat())
        with contextlib.suppress(NotImplementedError, RuntimeError):  # SIGHUP: reload
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, _reload)
        async with httpx.AsyncClient(limits=limits) as client:
            server.client, server.pool = client, Http1Pool()
            yield
            await server.pool.aclose()
        heart.cancel()
        server.ledger.storage.close()

    def _reload() -> None:
        try:
            server.reload()
        except (ValueError, OSError) as err:  # keep serving with the routers it has
            print(f"cost-envs serve: reload failed, the old routers stay: {err}", flush=True)
        else:
            print("cost-envs serve: routers reloaded", flush=True)

    docs = config.server.docs
    app = FastAPI(title="cost-envs serve", lifespan=lifespan,
                  docs_url="/docs" if docs else None, redoc_url=None,
                  openapi_url="/openapi.json" if docs else None)
    app.state.server = server
    opened = set(config.server.open_routes)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        del request
        return _error(err)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own answers (no such route, a wrong method) in OpenAI's shape too
        where = f"{request.method} {request.url.path}"
        message = {404: f"path: no route {where}; expected POST /v1/chat/completions, GET "
                        "/v1/models, POST /v1/feedback, GET /health or an /admin route",
                   405: f"method: {where} is not allowed on this route"}.get(
                       err.status_code, f"{where}: {err.detail}")
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code)
        return _error(ApiError(err.status_code, message, param="path", code=code),
                      dict(err.headers or {}))

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        if "/health" not in opened:
            server.authenticate(request)
        return {"status": "ok", "models": list(config.models)}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        if "/v1/models" not in opened:
            server.authenticate(request)
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0,
                                            "owned_by": "cost-envs"}
                                           for n in server.routes.names()]}

    @app.get("/admin/budgets")
    async def admin_budgets(request: Request) -> dict[str, Any]:
        return await server.admin_budgets(request)

    @app.post("/admin/budgets/unblock")
    async def admin_unblock(request: Request) -> dict[str, Any]:
        return await server.admin_unblock(request)

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> dict[str, Any]:
        return await server.feedback(request)

    @app.post("/admin/reload")
    async def admin_reload(request: Request) -> dict[str, Any]:
        return await server.admin_reload(request)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> Any:
        return await server.chat(request)

    return app
