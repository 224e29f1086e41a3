"""A chat request as the server reads it: every bad field an OpenAI-shaped 4xx naming it.

Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``
(:class:`ApiError`), so OpenAI's clients raise their usual exceptions
(``BadRequestError``, ``AuthenticationError``, ...) with the message.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from agents.serve.config import micros

#: The header that caps one request's cost, in dollars (OmniRoute's ``X-...-Budget``).
BUDGET_HEADER = "X-Cost-Envs-Budget"
#: The body field that does the same (the smaller of the two applies).
BUDGET_FIELD = "cost_envs_budget"
#: Chat message roles the server accepts.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ApiError(Exception):
    """An error answered in OpenAI's shape (status, message, type, param, code)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status, message, kind, param, code)

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {...}}``."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    """A checked ``POST /v1/chat/completions`` body."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None
    stream: bool
    budget: int | None
    #: The other fields (temperature, ...), passed to the upstream as they came.
    rest: dict[str, Any] = field(default_factory=dict)
    #: Which of max_tokens / max_completion_tokens the client used (the same is sent on).
    max_tokens_field: str = "max_tokens"


def parse_budget(text: str | None, source: str = BUDGET_HEADER) -> int | None:
    """A budget in dollars (header text or a body number) as micro-dollars, or ``None``.

    Raises:
        ApiError: 400 naming ``source``, unless a finite number >= 0.
    """
    if text is None:
        return None
    try:
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise InvalidOperation
        value = Decimal(str(text).strip())
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0:
        raise ApiError(400, f"{source}: expected a number of dollars >= 0, got {text!r}",
                       param=source)
    return micros(value)


def parse_chat(raw: bytes) -> ChatRequest:
    """Read and check a chat-completions body.

    Raises:
        ApiError: 400 naming the field: malformed JSON, no object, missing or empty
            ``messages``, a message without a role or content, a bad ``model``,
            ``max_tokens``, ``stream`` or budget field.
    """
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"body: expected a JSON object, got malformed JSON ({err})",
                       param="body") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(body).__name__}",
                       param="body")
    model = body.pop("model", None)
    if not isinstance(model, str) or not model:
        raise ApiError(400, f"model: expected a model name, got {model!r}", param="model")
    messages = body.pop("messages", None)
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, f"messages: expected a non-empty list of messages, got "
                       f"{_short(messages)}", param="messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"{where}: expected an object, got {_short(message)}",
                           param=where)
        if message.get("role") not in ROLES:
            raise ApiError(400, f"{where}.role: expected one of {list(ROLES)}, got "
                           f"{_short(message.get('role'))}", param=f"{where}.role")
        content = message.get("content")
        if not (isinstance(content, (str, list)) or (content is None and message["role"]
                                                      in ("assistant", "tool", "function"))):
            raise ApiError(400, f"{where}.content: expected a string or a list of parts, "
                           f"got {_short(content)}", param=f"{where}.content")
    used = [k for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None]
    max_tokens = None
    if used:
        value = body.pop(used[0])
        body.pop("max_tokens", None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{used[0]}: expected an integer >= 1, got {_short(value)}",
                           param=used[0])
        max_tokens = value
    stream = body.pop("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, f"stream: expected true or false, got {_short(stream)}",
                       param="stream")
    budget = parse_budget(body.pop(BUDGET_FIELD, None), BUDGET_FIELD)
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, f"n: expected 1 (one choice per request), got {_short(n)}", param="n")
    return ChatRequest(model, messages, max_tokens, stream, budget, body,
                       used[0] if used else "max_tokens")


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def content_text(content: Any) -> str:
    """A message's text: the string, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return ""


def routing_prompt(messages: list[dict[str, Any]]) -> str:
    """What a router reads: the last user message's text (as RouteLLM's server does)."""
    for message in reversed(messages):
        if message.get("role") == "user" and content_text(message.get("content")):
            return content_text(message["content"])
    return content_text(messages[-1].get("content")) or " "


def prompt_bound(messages: list[dict[str, Any]]) -> int:
    """An upper bound on a chat's prompt tokens: its UTF-8 bytes plus 8 per message, plus 8.

    A byte-level BPE token (OpenAI's, Llama's, Mistral's tokenizers) holds at least one
    byte, and the chat template adds a few tokens per message; so the worst case reserved
    from this bound is never below the real cost.
    """
    total = 8
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        total += 8 + len(text.encode()) + len(str(message.get("name") or "").encode())
        if message.get("tool_calls"):
            total += len(json.dumps(message["tool_calls"]).encode())
    return total


def finite(value: Any) -> bool:
    """A real finite number (not a bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
