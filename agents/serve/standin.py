"""A stand-in OpenAI-compatible upstream: try ``cost-envs serve`` (and test it) without keys.

::

    python -m agents.serve.standin --port 8100 [--models small,medium,large]
                                   [--latency 0.0] [--fault large=500] [--api-key KEY]

It serves ``GET /v1/models`` and ``POST /v1/chat/completions`` (with and without
``stream: true``; ``stream_options.include_usage`` adds the usage chunk, as OpenAI's API
does) for each of its models. Its answers are made up, but their token counts are real
counts of what it sent and received, so a client's bill can be checked to the token:

* prompt tokens: each message's whitespace-separated words plus 4, plus 3 per request
  (OpenAI's chat overhead), never more than :func:`agents.serve.app.prompt_bound`;
* completion tokens: the words of the answer, ``min(max_tokens, 8 + words % 24)``.

With ``--replay FILE`` (a trace file :func:`~cost_envs.traces.load_traces` reads, with
answer texts) a model named as one of the file's models answers a prompt of the file (the
last user message) with its logged answer, whitespace kept, cut at ``max_tokens`` words;
one token per word. So a cascade served in front of it reads the answers it was scored on
offline. Other prompts get the made-up answer.

Tool and function definitions are billed as input, as providers bill them: the words of
their JSON plus 10 per definition are added to the prompt tokens.

Faults are injected per model, from the command line (``--fault large=500``) or at run
time with ``POST /control`` (``{"model": "large", "fault": "429", "count": 3}``: the next
3 calls; ``"rate": 0.5``: half of them, seeded). A fault is one of :data:`FAULTS`:

* ``timeout``: the answer comes after 3600 s;
* ``hold``: the answer waits until ``POST /control`` releases the model's held calls
  (``{"model": "small", "release": true}``), so a test knows a call is in flight;
* ``429`` (with ``Retry-After`` when ``"retry_after"`` is given), ``500`` or ``401`` (the
  gateway's key for it is wrong);
* ``reset``: the connection is dropped before any header (after reading the request);
* ``bad_json``: a 200 whose body is not JSON (streamed: not server-sent events either);
* ``bad_shape``: a 200 whose JSON is not a chat completion (a message that is a string);
* ``cut``: the answer is cut mid-way (unstreamed: mid-body; streamed: after 3 chunks);
* ``no_usage``: the answer carries no usage;
* ``lie``: the usage reports (and the stand-in bills) ``factor`` (10 by default) times
  the tokens;
* ``overrun``: the answer ignores ``max_tokens`` (``factor`` times as many tokens).

A refused connection is a real one: point a model at a port nobody listens on
(:func:`free_port`). ``GET /stats`` counts the calls each model received and answered,
and the tokens and calls it billed per model and per ``user`` field (``"billed"``:
``{model: {user: [prompt_tokens, completion_tokens, calls]}}``; a call is billed once
its generation started, whatever then happened to its answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

#: The faults a model can be given.
FAULTS = ("timeout", "hold", "429", "500", "401", "reset", "bad_json", "bad_shape", "cut",
          "no_usage", "lie", "overrun")
#: The stand-in's models by default.
MODELS = ("small", "medium", "large")


@dataclass
class Fault:
    """A fault injected into one model's calls: the next ``count`` or a ``rate`` of them."""

    kind: str
    count: int | None = None
    rate: float = 1.0
    #: ``lie`` and ``overrun``: how many times the tokens.
    factor: float = 10.0
    #: ``429``: the ``Retry-After`` header's seconds (none when ``None``).
    retry_after: float | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def count_prompt(messages: Sequence[dict[str, Any]],
                 tools: Sequence[Any] | None = None) -> int:
    """The stand-in's prompt tokens: words plus 4 per message, plus 3; tools' JSON words + 10."""
    tokens = 3 + sum(4 + len(str(m.get("content") or "").split()) for m in messages)
    return tokens + sum(10 + len(json.dumps(t).split()) for t in tools or ())


def answer_words(model: str, messages: Sequence[dict[str, Any]], max_tokens: int) -> list[str]:
    """The made-up answer, one token per word."""
    words = " ".join(str(m.get("content") or "") for m in messages).split() or ["nothing"]
    n = max(1, min(max_tokens, 8 + len(words) % 24))
    said = [f"[{model}]"] + [words[i % len(words)] for i in range(n - 1)]
    return said[:n]


def replayed_words(text: str, max_tokens: int) -> list[str]:
    """A logged answer as tokens: each word and the whitespace before it, ``max_tokens`` at most.

    Whole, they join to the logged text exactly (its trailing whitespace on the last one).
    """
    words = re.findall(r"\s*\S+", text) or [""]
    if len(words) <= max_tokens:
        words[-1] += text[len("".join(words)):]
    return words[:max_tokens]


def replay_table(path: str) -> dict[tuple[str, str], str]:
    """``(model, prompt) -> logged answer`` of a trace file with answer texts."""
    from cost_envs.traces import load_traces

    data = load_traces(path)
    if data.responses is None:
        raise ValueError(f"--replay: {path} logs no answer texts; expected a file that does")
    return {(model, prompt): text
            for prompt, row in zip(data.prompts, data.response_texts(), strict=True)
            for model, text in zip(data.models, row, strict=True)}


def create_app(models: Sequence[str] = MODELS, latency: float = 0.0,
               faults: dict[str, Fault] | None = None, api_key: str | None = None,
               seed: int = 0, replay: dict[tuple[str, str], str] | None = None) -> FastAPI:
    """The stand-in's FastAPI app (see the module docstring; ``replay``: :func:`replay_table`)."""
    app = FastAPI(title="cost-envs stand-in upstream")
    fault_of: dict[str, Fault] = dict(faults or {})
    latency_of: dict[str, float] = dict.fromkeys(models, latency)
    held: dict[str, asyncio.Event] = {}  # model -> what its held calls wait for
    calls: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    billed: dict[str, dict[str, list[int]]] = {}
    rng = random.Random(seed)

    def error(status: int, message: str, kind: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                       "code": None}}, status_code=status)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0,
                                            "owned_by": "cost-envs-standin"} for m in models]}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"calls": dict(calls), "answered": dict(answered), "billed": billed}

    @app.post("/control", response_model=None)  # a dict, or a JSONResponse on an error
    async def control(request: Request) -> dict[str, Any] | JSONResponse:
        body = await request.json()
        model = body.get("model")
        if model not in models:
            return error(400, f"model: expected one of {list(models)}", "invalid_request_error")
        if "latency" in body:
            latency_of[model] = float(body["latency"])
        if body.get("release"):
            held.pop(model, asyncio.Event()).set()
            return {"ok": True}
        if body.get("fault") in (None, "none"):
            fault_of.pop(model, None)
        elif body["fault"] in FAULTS:
            fault_of[model] = Fault(
                body["fault"], body.get("count"), float(body.get("rate", 1.0)),
                float(body.get("factor", 10.0)),
                None if body.get("retry_after") is None else float(body["retry_after"]))
        else:
            return error(400, f"fault: expected one of {list(FAULTS)}", "invalid_request_error")
        return {"ok": True}

    def take_fault(model: str) -> Fault | None:
        fault = fault_of.get(model)
        if fault is None or rng.random() >= fault.rate:
            return None
        if fault.count is not None:
            fault.count -= 1
            if fault.count <= 0:
                fault_of.pop(model, None)
        return fault

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> Any:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            return error(401, "Incorrect API key provided", "invalid_request_error")
        body = await request.json()
        model = body.get("model")
        if model not in models:
            return error(404, f"The model {model!r} does not exist", "invalid_request_error")
        calls[model] += 1
        fault = take_fault(model)
        kind = None if fault is None else fault.kind
        if kind == "timeout":
            await asyncio.sleep(3600)
        if kind == "hold":
            await held.setdefault(model, asyncio.Event()).wait()
        if kind in ("429", "500", "401"):
            answer = error(int(kind), f"injected fault {kind}",
                           {"429": "rate_limit_error", "401": "invalid_request_error"}.get(
                               kind, "server_error"))
            if kind == "429" and fault is not None and fault.retry_after is not None:
                answer.headers["Retry-After"] = f"{fault.retry_after:g}"
            return answer
        if kind == "reset":  # the connection dropped with no answer at all
            # receive is a method of uvicorn's protocol object, which holds the transport
            request.receive.__self__.transport.abort()  # type: ignore[attr-defined]  # see above
            return None
        if latency_of[model] > 0:
            await asyncio.sleep(latency_of[model])
        messages = body.get("messages") or []
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        last: dict[str, Any] = next(
            (m for m in reversed(messages) if m.get("role") == "user"), {})
        logged = (replay or {}).get((model, str(last.get("content") or "")))
        words = (answer_words(model, messages, max_tokens) if logged is None
                 else replayed_words(logged, max_tokens))
        joiner = " " if logged is None else ""
        if kind == "overrun" and fault is not None:  # as many words as asked, times factor
            max_tokens = int(max_tokens * fault.factor)
            words = (words * max_tokens)[:max_tokens]
        prompt_tokens = count_prompt(messages, (body.get("tools") or [])
                                     + (body.get("functions") or []))
        completion_tokens = len(words)
        if kind == "lie" and fault is not None:  # and bills it: its usage is its invoice
            prompt_tokens = int(prompt_tokens * fault.factor)
            completion_tokens = int(completion_tokens * fault.factor)
        user = str(body.get("user") or "")
        bill = billed.setdefault(model, {}).setdefault(user, [0, 0, 0])
        bill[0], bill[1], bill[2] = (bill[0] + prompt_tokens, bill[1] + completion_tokens,
                                     bill[2] + 1)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        ident, created = f"chatcmpl-standin-{sum(calls.values())}", int(time.time())
        finish = "length" if len(words) == max_tokens else "stop"
        answered[model] += 1
        if not body.get("stream"):
            reply: dict[str, Any] = {
                "id": ident, "object": "chat.completion", "created": created,
                "model": model, "usage": usage,
                "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                             "message": {"role": "assistant", "content": joiner.join(words)}}]}
            if kind == "no_usage":
                reply.pop("usage")
            if kind == "bad_json":
                return Response(json.dumps(reply)[:-9], media_type="application/json")
            if kind == "bad_shape":
                reply["choices"][0]["message"] = joiner.join(words)
            if kind == "cut":
                return StreamingResponse(_cut([json.dumps(reply)[:40]]),
                                         media_type="application/json",
                                         headers={"Content-Length": "100000"})
            return reply
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if kind == "bad_json":
            return Response("this is not a stream {", media_type="text/event-stream")

        def events() -> list[str]:
            base = {"id": ident, "object": "chat.completion.chunk", "created": created,
                    "model": model}
            found = []
            for i, word in enumerate(words):
                delta = {"content": (joiner if i else "") + word}
                if i == 0:
                    delta["role"] = "assistant"
                chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                found.append(f"data: {json.dumps(chunk)}\n\n")
            last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
            found.append(f"data: {json.dumps(last)}\n\n")
            if include_usage and kind != "no_usage":
                found.append(f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n")
            return [*found, "data: [DONE]\n\n"]

        if kind == "cut":
            return StreamingResponse(_cut(events()[:3]), media_type="text/event-stream")
        return StreamingResponse(_events(events()), media_type="text/event-stream")

    return app


async def _events(events: list[str]) -> AsyncIterator[str]:
    for event in events:
        yield event


class CutError(Exception):
    """Raised inside a response to make the server drop the connection mid-answer."""


async def _cut(parts: list[str]) -> AsyncIterator[str]:
    """Send ``parts``, then fail: uvicorn drops the connection, the answer unfinished."""
    for part in parts:
        yield part
    await asyncio.sleep(0.01)  # the parts reach the client first
    raise CutError("injected fault: the answer is cut")


def _fault(text: str) -> tuple[str, Fault]:
    model, _, kind = text.partition("=")
    if kind not in FAULTS or not model:
        raise argparse.ArgumentTypeError(f"expected MODEL=FAULT with FAULT one of {list(FAULTS)}, "
                                         f"got {text!r}")
    return model, Fault(kind)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the stand-in with uvicorn on 127.0.0.1."""
    parser = argparse.ArgumentParser(prog="python -m agents.serve.standin",
                                     description="A stand-in OpenAI-compatible upstream.",
                                     allow_abbrev=False)
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated model names (default: %(default)s)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--fault", type=_fault, action="append", default=[],
                        metavar="MODEL=FAULT", help=f"inject a fault, one of {list(FAULTS)}")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--seed", type=int, default=0, help="seeds the fault rates")
    parser.add_argument("--replay", default=None, metavar="FILE",
                        help="answer the prompts of this trace file with their logged answers")
    args = parser.parse_args(argv)
    models = tuple(m for m in args.models.split(",") if m)
    for model, _ in args.fault:
        if model not in models:
            parser.error(f"--fault: expected a model of {list(models)}, got {model!r}")
    try:
        replay = None if args.replay is None else replay_table(args.replay)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    import uvicorn

    uvicorn.run(create_app(models, args.latency, dict(args.fault), args.api_key, args.seed,
                           replay),
                host=args.host, port=args.port, log_level="warning",
                # a 'timeout' fault's answer sleeps an hour: on SIGTERM do not wait for it
                timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
