"""A cascade served: the weak model answers first, the cascade decides, maybe the strong.

The request's first call goes to the cascade's weak model, unstreamed (its answer is
buffered: the cascade reads all of it). :meth:`~agents.serve.routes.Plan.escalation` then
decides from the prompt and that answer, with the offline scorer's features and rule at
the request's operating point, whether to call the strong model. A TraceRouting
allocator trained with ``cascade=True`` is served by this same flow: its first call is
the model whose answer its second step observes, and the "strong" model is the one whose
answer the env takes after the second step, when that is another model
(:mod:`agents.serve.allocators`; its two actions in the header ``X-Cost-Envs-Actions``).

Budgets stay exact by reserving each call's worst case in its own transaction before it
is made: the weak call's when the request starts (as any call's), the strong call's after
the weak call was settled at its real cost. The escalation must fit what the request's
budget leaves (``budget - weak cost >= strong worst case``) and be reserved on the key's
and organisation's budgets; when it does not fit, the cascade keeps the weak answer (a
downgrade, never a refusal: the weak answer is already paid for) and the ledger records
the refused escalation (outcome ``refused_budget``, no cost). A strong call that fails
upstream also keeps the weak answer.

The ledger has one row per upstream call: the weak call's id is the request's, the
strong call's ``<id>.escalation``. The client gets the kept answer's id (the one its
feedback scores, and so the one :func:`~agents.serve.export.export_traces` writes) and
the headers ``X-Cost-Envs-Cascade`` (``kept``, ``escalated``, ``kept:budget``,
``kept:upstream_failed`` or ``kept:upstream_rejected``) and, unstreamed,
``X-Cost-Envs-Cost-Micros`` (both calls). A streamed request gets the weak answer as one
content chunk when it is kept, and the strong model's stream relayed when escalated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse, StreamingResponse

from agents.serve.config import KeyConfig, ModelConfig
from agents.serve.inputs import ChatRequest, input_bound
from agents.serve.ledger import BudgetExceededError
from agents.serve.routes import Plan
from agents.serve.upstream import (
    UpstreamFailedError,
    UpstreamRejectedError,
    UpstreamUnknownError,
)

if TYPE_CHECKING:
    from agents.serve.app import Server

#: The header saying what the cascade did.
CASCADE_HEADER = "X-Cost-Envs-Cascade"


async def cascade(server: Server, key: KeyConfig, chat: ChatRequest, budget: int,
                  budget_source: str, weak: ModelConfig, call: tuple[int, int],
                  reservation: str, plan: Plan, prompt: str, started: float,
                  answer_key: str | None = None) -> Any:
    """Serve one request of a cascade router (module docstring).

    Args:
        server: The server (its ledger, config and upstream client).
        key: The request's API key.
        chat: The request.
        budget: The request's budget, micro-dollars.
        budget_source: Where the budget came from (named when it refuses).
        weak: The weak model.
        call: The weak call's ``(max_tokens, worst-case cost)``.
        reservation: The weak call's reservation (the request's id).
        plan: The request's plan (:attr:`~agents.serve.routes.Plan.cascade` set).
        prompt: The routing prompt.
        started: The request's start (``time.perf_counter()``).
        answer_key: The request's scoped ``Idempotency-Key``: should the server die during
            the escalation, a retry is answered (the expiry keeps an answer under it).

    Raises:
        UpstreamFailedError, UpstreamRejectedError: The weak call failed (the caller
            falls back as for any call); a failed strong call keeps the weak answer.
    """
    # the weak call, unstreamed, through the server's one call path; its answer read back
    rest = {k: v for k, v in chat.rest.items() if k != "stream_options"}  # not streamed
    first = await server._call(weak, replace(chat, stream=False, rest=rest), *call,
                               reservation, plan, prompt, started, keep=False)
    data, weak_cost = json.loads(first.body), int(first.headers["x-cost-envs-cost-micros"])
    choices = data.get("choices") or [{}]
    answer = (choices[0].get("message") or {}).get("content")
    answer = answer if isinstance(answer, str) else ""  # a tool call's answer has no text
    tokens = (data.get("usage") or {}).get("completion_tokens")
    known = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
    strong_name, notes = plan.second(prompt, answer, tokens if known else None)
    if strong_name is None:
        return _kept(server, answer_key, data, weak_cost, chat, plan, "kept", notes=notes)
    strong = server.config.models[strong_name]
    max_tokens, worst = server.worst_case(strong, input_bound(chat), chat)
    escalation = f"{reservation}.escalation"
    refused = None
    if max_tokens == 0:
        refused = f"{strong_name}: the prompt leaves no room in its context"
    elif weak_cost + worst > budget:
        refused = (f"{strong_name}: up to ${worst / 1e6:.6f} after the weak call's "
                   f"${weak_cost / 1e6:.6f} does not fit the request budget "
                   f"${budget / 1e6:.6f} ({budget_source})")
    else:
        try:
            user = chat.rest.get("user")
            server.ledger.reserve(escalation, key, worst, None, user=user,
                                  user_budget=server.user_budget(key, user)[0],
                                  answer_key=answer_key, model=strong_name,
                                  route=plan.route)
        except BudgetExceededError as err:
            refused = f"{strong_name}: {err}"
    if refused is not None:
        server.ledger.record(escalation, "refused_budget", key_name=key.name, route=plan.route,
                             user=chat.rest.get("user"),
                             model=strong_name, prompt=prompt)
        return _kept(server, answer_key, data, weak_cost, chat, plan, "kept:budget", refused,
                     notes)
    outcome, charge = "upstream_failed", 0
    try:
        return await server._call(strong, chat, max_tokens, worst, escalation, plan, prompt,
                                  started, {CASCADE_HEADER: "escalated", **notes},
                                  weak_cost)
    except UpstreamFailedError:
        pass
    except UpstreamUnknownError:  # the upstream may have billed it: its worst case
        outcome, charge = "upstream_unknown", worst
    except UpstreamRejectedError as err:
        outcome = f"upstream_rejected_{err.status}"
    except BaseException:  # a client gone, a bug: charge the worst case
        server.ledger.settle(escalation, worst, "server_error", route=plan.route,
                             model=strong_name, prompt=prompt)
        raise
    server.ledger.settle(escalation, charge, outcome, route=plan.route, model=strong_name,
                         prompt=prompt)
    kind = "upstream_rejected" if outcome.startswith("upstream_rejected") else "upstream_failed"
    return _kept(server, answer_key, data, weak_cost, chat, plan, f"kept:{kind}",
                 notes=notes)


def _kept(server: Server, answer_key: str | None, data: dict[str, Any], cost: int,
          chat: ChatRequest, plan: Plan, how: str, why: str | None = None,
          notes: dict[str, str] | None = None) -> Any:
    """The weak answer to the client: as it came, or as a stream of one content chunk.

    It is the request's answer: kept under its idempotency key for a retry (an
    escalation's answer is kept when its call is settled).
    """
    if answer_key is not None:
        server.ledger.keep_answer(answer_key, 200, json.dumps(data), chat.stream)
    headers = {"X-Cost-Envs-Model": str(data["model"]), "X-Cost-Envs-Route": plan.route,
               CASCADE_HEADER: how, **(notes or {})}
    if why is not None:  # why the escalation was not made (a header is one line)
        headers["X-Cost-Envs-Cascade-Reason"] = " ".join(why.split())[:500]
    if not chat.stream:
        return JSONResponse(data, headers={**headers, "X-Cost-Envs-Cost-Micros": str(cost)})
    wants_usage = bool((chat.rest.get("stream_options") or {}).get("include_usage"))
    return StreamingResponse(buffered_stream(data, wants_usage), media_type="text/event-stream",
                             headers=headers)


async def buffered_stream(data: dict[str, Any], usage: bool) -> AsyncIterator[bytes]:
    """A whole chat completion as OpenAI's server-sent events.

    One chunk with the role and the whole content, one with the finish reason, the usage
    chunk when ``usage`` (as ``stream_options.include_usage`` asks), then ``[DONE]``.
    """
    base = {"id": data.get("id"), "object": "chat.completion.chunk",
            "created": data.get("created", 0), "model": data.get("model")}
    choice = (data.get("choices") or [{}])[0]
    content = (choice.get("message") or {}).get("content") or ""
    first = {"index": 0, "delta": {"role": "assistant", "content": content},
             "finish_reason": None}
    last: dict[str, Any] = {"index": 0, "delta": {},
                            "finish_reason": choice.get("finish_reason") or "stop"}
    for chunk in ({**base, "choices": [first]}, {**base, "choices": [last]}):
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    if usage and data.get("usage"):
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': data['usage']})}\n\n".encode()
    yield b"data: [DONE]\n\n"
