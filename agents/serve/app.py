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
import json
import re
import signal
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from agents.serve.admin import add_operator_routes
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
    read_body,
    routing_prompt,
)
from agents.serve.keys import KeyStore
from agents.serve.ledger import (
    BudgetExceededError,
    DuplicateRequestError,
    Ledger,
    RateLimit,
    RateLimitedError,
    Settled,
)
from agents.serve.metrics import ServeMetrics
from agents.serve.routes import Plan, Routes
from agents.serve.schema import EXPIRED_ANSWER
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

#: The answer of a request the server failed on (a bug): OpenAI's shape, never a traceback.
SERVER_ERROR = ApiError(500, "the server failed on this request; it was charged its reserved "
                        "worst case if an upstream was called", kind="server_error",
                        code="server_error")

#: The metrics' refusal reason of a status (a 402 of a blocked budget: "blocked").
REFUSALS = {401: "auth", 402: "budget", 429: "rate_limit"}
#: The metrics' fault kind of a settled call's outcome.
FAULTS = {"upstream_failed": "failed", "upstream_unknown": "unknown",
          "upstream_rejected": "rejected", "upstream_stream_failed": "stream_failed"}

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


def _broken(outcome: str, result: StreamResult) -> dict[str, Any]:
    """The answer kept for a retry of a stream that did not end: what happened to it."""
    why = result.fault or "the client left before its end"
    return ApiError(502, f"this request's stream did not end ({outcome}: {why}); it was "
                    "charged by docs/serving.md's rule", kind="upstream_error",
                    code=outcome).body()


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


class Server:
    """The server's state: config, routes (routers loaded), ledger and upstream client."""

    def __init__(self, config: ServeConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.routes = Routes(config)
        # no key in the file and no admin key to make one: anyone may call (trying it out)
        self.anonymous = not config.keys and config.server.admin_key_sha256 is None
        self.ledger = Ledger(open_storage(config.storage),
                             (ANONYMOUS,) if self.anonymous else config.keys,
                             config.organisations, ttl=config.server.reservation_ttl,
                             clock=clock)
        for name in self.ledger.overridden:
            print(f"cost-envs serve: key {name!r}: its serve.yaml entry is ignored; the admin "
                  "API changed it (/key/list shows it)", flush=True)
        self.ledger.release_expired()  # reservations of a server that was killed
        self.key_store = KeyStore(self.ledger, clock)
        self.metrics = ServeMetrics(self.ledger.open_reservations)
        self.ledger.on_settle = self.settled
        self.client: httpx.AsyncClient | None = None
        self.pool: Http1Pool | None = None  # unstreamed calls: faster than the client
        self.reloading = asyncio.Lock()  # one reload at a time

    def settled(self, call: Settled) -> None:
        """Count a settled call in the metrics (the ledger's hook, after its commit)."""
        if call.cost or call.prompt_tokens or call.completion_tokens:
            self.metrics.add_spend(call.key_name or "", call.model, call.cost,
                                   call.prompt_tokens, call.completion_tokens)
        if call.excess:
            self.metrics.over_reservation(call.key_name or "", call.excess)
        fault = FAULTS.get(re.sub(r"_\d+$", "", call.outcome.removeprefix("late:")))
        if fault is not None:
            self.metrics.upstream_fault(call.model, fault)

    async def answer(self, request: Request) -> Any:
        """``POST /v1/chat/completions``, counted in the metrics (a stream: to its start)."""
        started, status, response, message = time.perf_counter(), 500, None, ""
        try:
            response = await self.chat(request)
            status = response.status_code
            return response
        except ApiError as err:
            status, message = err.status, err.message
            raise
        finally:
            headers = getattr(response, "headers", {})
            self.metrics.observe_request(headers.get("x-cost-envs-route"),
                                         headers.get("x-cost-envs-model"), status,
                                         time.perf_counter() - started)
            if status in REFUSALS:
                message += bytes(getattr(response, "body", b"") or b"").decode(errors="replace")
                self.metrics.refusal("blocked" if "is blocked" in message else REFUSALS[status])
            elif 400 <= status < 500:
                self.metrics.refusal("invalid_request")

    def authenticate(self, request: Request) -> KeyConfig:
        """The key of ``Authorization: Bearer KEY``, or 401."""
        if self.anonymous:
            return ANONYMOUS
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "authorization: expected the header 'Authorization: Bearer "
                           "KEY' with an API key", param="authorization",
                           code="invalid_api_key")
        found = self.key_store.lookup(hash_key(key.strip()))
        if found is None:
            raise ApiError(401, "authorization: incorrect API key provided",
                           param="authorization", code="invalid_api_key")
        return found

    def user_budget(self, key: KeyConfig, user: str | None) -> tuple[BudgetConfig | None,
                                                                      list[RateLimit]]:
        """The end user's budget (``budgets.users``) and the rate limits of a request."""
        limits = [RateLimit(f"key:{key.name}", key.rates)] if key.rates.any() else []
        policy = self.config.users
        if user is None or policy is None:
            return None, limits
        subject = f"user:{key.name}/{quote(user, safe='')}"  # no , or @: the held-list's
        if policy.rates.any():
            limits.append(RateLimit(subject, policy.rates))
        return BudgetConfig(subject, policy.limit, policy.period), limits

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

    def duplicate(self, idempotency: str | None) -> Response:
        """A request whose ``Idempotency-Key`` was used: 409 while its first one is answered.

        When that first request left no answer to replay and never will (its server died
        between two of its steps: :meth:`~agents.serve.ledger.Ledger.abandoned`), the
        retry gets a final 502 instead of a 409 for good.
        """
        if idempotency is not None and self.ledger.abandoned(idempotency):
            self.ledger.keep_answer(idempotency, 502, json.dumps(EXPIRED_ANSWER))
            kept = self.ledger.answer_of(idempotency)
            if kept is not None:
                return replayed(*kept)
        return _error(ApiError(409, "Idempotency-Key: a request with this key is still being "
                               "answered; try again in a moment", param="Idempotency-Key",
                               code="request_in_progress"))

    def idempotency_key(self, request: Request, key: KeyConfig) -> str | None:
        """The request's ``Idempotency-Key``, scoped to its API key, or ``None``."""
        value = request.headers.get("idempotency-key")
        if value is None:
            return None
        if not 1 <= len(value) <= 255 or not value.isprintable():
            raise ApiError(400, f"Idempotency-Key: expected 1 to 255 printable characters, "
                           f"got {value[:40]!r}", param="Idempotency-Key")
        return f"{key.name}|{value}"  # a key's name has no |: one scope per API key

    async def chat(self, request: Request) -> Any:
        """``POST /v1/chat/completions``."""
        started = time.perf_counter()
        key = self.authenticate(request)
        chat = parse_chat(await read_body(request, self.config.server.max_body_bytes))
        budget, budget_source = self.request_budget(request, chat)
        idempotency = self.idempotency_key(request, key)
        if idempotency is not None:
            kept = self.ledger.answer_of(idempotency)
            if kept is not None:
                return replayed(*kept)
        user = end_user(chat)
        user_budget, limits = self.user_budget(key, user)
        prompt = routing_prompt(chat.messages)
        plan = self.routes.plan(chat.model, prompt)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        refusals: list[str] = []
        failures: list[str] = []
        charged = 0  # what the attempts so far were charged: the budget left is the rest
        reserved_before = False  # the idempotency key goes on the first reservation only
        bound = input_bound(chat)
        for attempt, name in enumerate(plan.models):
            model = self.config.models[name]
            max_tokens, worst = self.worst_case(model, bound, chat)
            if max_tokens == 0:
                refusals.append(f"{name}: the prompt (up to {bound} tokens) leaves "
                                f"no room in its context of {model.context}")
                continue
            if worst > budget - charged:
                refusals.append(f"{name}: a call of up to ${worst / 1e6:.6f} does not fit the "
                                f"${(budget - charged) / 1e6:.6f} left of the request budget "
                                f"${budget / 1e6:.6f} ({budget_source})")
                continue
            reservation = request_id if attempt == 0 else f"{request_id}.{attempt}"
            try:
                self.ledger.reserve(reservation, key, worst,
                                    None if reserved_before else idempotency, user=user,
                                    user_budget=user_budget,
                                    limits=() if reserved_before else limits,
                                    answer_key=idempotency, model=name, route=plan.route)
            except RateLimitedError as err:
                kind = "tokens" if "tokens" in err.what else "requests"
                return _error(ApiError(429, str(err), kind=kind, param=None,
                                       code="rate_limit_exceeded"),
                              {"Retry-After": str(err.retry_after)})
            except BudgetExceededError as err:
                refusals.append(f"{name}: {err}")
                continue
            except DuplicateRequestError:
                return self.duplicate(idempotency)
            reserved_before = True
            try:
                if plan.cascade is not None and attempt == 0:  # the weak call, then maybe more
                    return await cascade(self, key, chat, budget, budget_source, model,
                                         (max_tokens, worst), reservation, plan, prompt,
                                         started, idempotency)
                return await self._call(model, chat, max_tokens, worst, reservation, plan,
                                        prompt, started, keep=idempotency is not None,
                                        spent_before=charged)
            except UpstreamFailedError as err:
                self.ledger.settle(reservation, 0, "upstream_failed", route=plan.route,
                                   model=name, prompt=prompt)
                failures.append(str(err))
            except UpstreamUnknownError as err:  # maybe billed: its worst case, never 0
                self.ledger.settle(reservation, worst, "upstream_unknown", route=plan.route,
                                   model=name, prompt=prompt)
                failures.append(f"{err} (charged ${worst / 1e6:.6f}, its worst case)")
                charged += worst
            except UpstreamRejectedError as err:
                body = json.dumps(err.body)
                self.ledger.settle(reservation, 0, f"upstream_rejected_{err.status}",
                                   route=plan.route, model=name, prompt=prompt,
                                   answer=(err.status, body, False))
                return Response(body, status_code=err.status, media_type="application/json")
            except BaseException as err:  # a client gone, a bug: charge the worst case (the
                # upstream may have billed it); a no-op once settled
                self.ledger.settle(reservation, worst, "server_error", route=plan.route,
                                   model=name, prompt=prompt)
                if idempotency is not None and isinstance(err, Exception):  # a retry's answer
                    self.ledger.keep_answer(idempotency, 500, json.dumps(SERVER_ERROR.body()))
                raise
        if failures:
            error = ApiError(502, "no upstream could serve the request: " + "; ".join(
                failures + [f"not tried: {r}" for r in refusals]), kind="upstream_error",
                code="upstream_failed")
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
                answer=None if not keep else (200, json.dumps(completion), True)
                if result.complete else (502, json.dumps(_broken(outcome, result)), False))

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
        raw = await read_body(request, self.config.server.max_body_bytes)
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

    def reload(self) -> None:
        """Load the routers again from their files and swap them in at once.

        A request already routed keeps its plan (the old router's decision); the next
        ones use the new routers. A router that fails to load leaves the old ones.
        """
        self.routes = Routes(self.config)


def create_app(config: ServeConfig, clock: Callable[[], float] = time.time) -> FastAPI:
    """The FastAPI app serving ``config`` (its routers and ledger opened now).

    ``clock``: the time of the ledger (budget periods, rate windows); tests move it.
    """
    server = Server(config, clock)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        del app
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async def beat() -> None:  # this server is alive: its reservations do not expire
            while True:
                await asyncio.sleep(config.server.reservation_ttl / 4)
                try:
                    server.ledger.heartbeat()
                except Exception as err:  # a database hiccup: the next beat tries again
                    print(f"cost-envs serve: heartbeat failed: {err}", flush=True)

        heart = asyncio.create_task(beat())
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # SIGHUP
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

    @app.exception_handler(Exception)
    async def server_error(request: Request, err: Exception) -> JSONResponse:
        # a bug: OpenAI's error shape for the client, the traceback for the operator
        del request
        traceback.print_exception(err)
        return _error(SERVER_ERROR)

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

    add_operator_routes(app, server)

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> dict[str, Any]:
        return await server.feedback(request)

    async def chat(request: Request) -> Any:
        return await server.answer(request)

    # a plain Starlette route: the request is read by hand, so FastAPI's dependency and
    # response machinery would only add time to every call (about 0.1 ms)
    app.router.routes.append(Route("/v1/chat/completions", chat, methods=["POST"]))

    return app
