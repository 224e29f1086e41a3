"""A chat request as the server reads it: every bad field an OpenAI-shaped 4xx naming it.

Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``
(:class:`ApiError`), so OpenAI's clients raise their usual exceptions
(``BadRequestError``, ``AuthenticationError``, ...) with the message.

Every body the server cannot read, or whose bill it cannot bound before the call, is a
400 naming the field: malformed, too deeply nested (:data:`MAX_DEPTH`) or not valid
Unicode JSON, non-finite numbers, absurd integers, message parts other than text (images,
audio, files) and the fields that bill more than tokens of text (``audio``, non-text
``modalities``, ``prediction``, ``web_search_options``). What is left is bounded by
:func:`input_bound`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn

from agents.serve.config import micros

#: The header that caps one request's cost, in dollars (OmniRoute's ``X-...-Budget``).
BUDGET_HEADER = "X-Cost-Envs-Budget"
#: The body field that does the same (the smaller of the two applies).
BUDGET_FIELD = "cost_envs_budget"
#: The largest budget a request may name, in dollars (more is a typo; the config's
#: ``budgets.request.max`` caps it further).
MAX_REQUEST_BUDGET = 1_000_000
#: Chat message roles the server accepts.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
#: The deepest a body's arrays and objects may nest (the body itself is level 1).
MAX_DEPTH = 64
#: The most digits an integer of a body may have (Python's own limit on ``int(str)``).
MAX_INT_DIGITS = 4300
#: The most choices one request may ask for (``n``, as OpenAI's API).
MAX_N = 128
#: A ``max_tokens`` above this is absurd (the server caps it by the model anyway).
MAX_TOKENS = 10**9
#: Fields of a request whose bill the server cannot bound: refused when present.
UNPRICED_FIELDS = ("audio", "prediction", "web_search_options")
#: Fields of a request the upstream renders into the prompt (counted by :func:`input_bound`).
PROMPT_FIELDS = ("tools", "functions", "tool_choice", "function_call", "response_format")
#: Tokens a provider adds around each tool or function definition, and once for any.
TOOL_OVERHEAD, TOOLS_OVERHEAD = 16, 32

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


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
    #: The other fields (temperature, ``n``, tools, ...), passed to the upstream as they came.
    rest: dict[str, Any] = field(default_factory=dict)
    #: Which of max_tokens / max_completion_tokens the client used (the same is sent on).
    max_tokens_field: str = "max_tokens"
    #: The choices asked for, in [1, :data:`MAX_N`] (also in ``rest`` when the client sent it).
    n: int = 1


def parse_budget(text: str | int | float | None, source: str = BUDGET_HEADER) -> int | None:
    """A budget in dollars (header text or a body number) as micro-dollars, or ``None``.

    Args:
        text: The header's text or the body field's value (``None``: no budget).
        source: Where it came from, named in the error.

    Raises:
        ApiError: 400 naming ``source``, unless a finite decimal number of dollars in
            [0, :data:`MAX_REQUEST_BUDGET`] (not NaN, an infinity, a bool, hex or empty).
    """
    if text is None:
        return None
    value = None
    if isinstance(text, str) and _NUMBER.fullmatch(text.strip()):
        value = Decimal(text.strip())
    elif isinstance(text, int) and not isinstance(text, bool):
        value = Decimal(text)
    elif isinstance(text, float) and math.isfinite(text):
        value = Decimal(repr(text))  # the shortest text of the float: 0.1, not 0.1000...0555
    if value is None or not 0 <= value <= MAX_REQUEST_BUDGET:
        raise ApiError(400, f"{source}: expected a number of dollars in "
                       f"[0, {MAX_REQUEST_BUDGET}], got {_short(text)}", param=source)
    return micros(value)


def parse_chat(raw: bytes) -> ChatRequest:
    """Read and check a chat-completions body.

    Raises:
        ApiError: 400 naming the field: malformed JSON, no object, nesting deeper than
            :data:`MAX_DEPTH`, text that is not valid Unicode (a lone surrogate), a
            non-finite number or an integer of more than :data:`MAX_INT_DIGITS` digits
            (``body``); missing or empty ``messages``, a message without a role or
            content, a content part other than text; a bad ``model``, ``max_tokens``,
            ``stream``, ``n``, ``tools``, ``functions``, ``response_format`` or budget
            field; a field the server cannot price (:data:`UNPRICED_FIELDS`, non-text
            ``modalities``).
    """
    body = _loads(raw)
    _check_tree(body)
    if not isinstance(body, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(body).__name__}",
                       param="body")
    model = body.pop("model", None)
    if not isinstance(model, str) or not model:
        raise ApiError(400, f"model: expected a model name, got {_short(model)}", param="model")
    messages = body.pop("messages", None)
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, f"messages: expected a non-empty list of messages, got "
                       f"{_short(messages)}", param="messages")
    for i, message in enumerate(messages):
        _check_message(message, f"messages[{i}]")
    _check_priced(body)
    used = [k for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None]
    max_tokens = None
    if used:
        value = body.pop(used[0])
        body.pop("max_tokens", None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{used[0]}: expected an integer >= 1, got {_short(value)}",
                           param=used[0])
        if value > MAX_TOKENS:
            raise ApiError(400, f"{used[0]}: expected an integer >= 1 and <= {MAX_TOKENS}, "
                           f"got {_short(value)}", param=used[0])
        max_tokens = value
    stream = body.pop("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, f"stream: expected true or false, got {_short(stream)}",
                       param="stream")
    options = body.get("stream_options")  # the server reads it: checked like its own
    if options is not None and (not isinstance(options, dict) or not isinstance(
            options.get("include_usage", False), bool)):
        raise ApiError(400, "stream_options: expected an object {\"include_usage\": true or "
                       f"false}}, got {_short(options)}", param="stream_options")
    budget = parse_budget(body.pop(BUDGET_FIELD, None), BUDGET_FIELD)
    n = body.get("n")  # stays in the body: the upstream makes the n choices
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)
                          or not 1 <= n <= MAX_N):
        raise ApiError(400, f"n: expected an integer in [1, {MAX_N}], got {_short(n)}",
                       param="n")
    return ChatRequest(model, messages, max_tokens, stream, budget, body,
                       used[0] if used else "max_tokens", 1 if n is None else n)


def _refuse_constant(text: str) -> NoReturn:
    raise ApiError(400, f"body: expected finite numbers, got {text}", param="body")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ApiError(400, f"body: expected finite numbers, got {shown} (beyond a 64-bit "
                       "float)", param="body")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise ApiError(400, f"body: expected integers of at most {MAX_INT_DIGITS} digits, got "
                       f"one of {digits}", param="body")
    return int(text)


def _loads(raw: bytes) -> Any:
    """``json.loads``, every failure a 400 naming ``body``."""
    try:
        return json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float,
                          parse_int=_bounded_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"body: expected a JSON object, got malformed JSON ({err})",
                       param="body") from None
    except RecursionError:
        raise ApiError(400, f"body: expected JSON nested at most {MAX_DEPTH} levels deep, "
                       "got far deeper", param="body") from None
    except ValueError as err:  # what the hooks above leave to int() and float()
        raise ApiError(400, f"body: expected a JSON object, got an unreadable value ({err})",
                       param="body") from None


def _check_tree(body: Any) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and text that is not valid Unicode."""
    # a trail is (parent's trail, key): the path is spelled out only for an error
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(body, 1, ())]
    while stack:
        value, depth, trail = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                _check_text(value, trail)
            continue
        if depth > MAX_DEPTH:
            where = _path(trail)
            where = where if len(where) <= 80 else where[:77] + "..."
            raise ApiError(400, f"body: expected JSON nested at most {MAX_DEPTH} levels deep, "
                           f"got deeper at {where}", param="body")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and not key.isascii():
                _check_text(key, (trail, key))
            if isinstance(item, (str, dict, list)):
                stack.append((item, depth + 1, (trail, key)))


def _path(trail: tuple[Any, ...]) -> str:
    """``messages[0].content`` from a trail of :func:`_check_tree` (``body`` at the top)."""
    keys: list[Any] = []
    while trail:
        trail, key = trail
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path += f"[{key}]" if isinstance(key, int) else f".{key}" if path else key
    path = path if path and not path.startswith("[") else f"body{path}"
    return path.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_text(text: str, trail: tuple[Any, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        where = _path(trail)
        raise ApiError(400, f"{where}: expected valid Unicode text, got the lone surrogate "
                       f"{text[err.start]!a} at character {err.start}", param=where) from None


def _check_message(message: Any, where: str) -> None:
    """Refuse a message the server cannot read or price."""
    if not isinstance(message, dict):
        raise ApiError(400, f"{where}: expected an object, got {_short(message)}", param=where)
    role = message.get("role")
    if role not in ROLES:
        raise ApiError(400, f"{where}.role: expected one of {list(ROLES)}, got "
                       f"{_short(role)}", param=f"{where}.role")
    content = message.get("content")
    if not (isinstance(content, (str, list))
            or (content is None and role in ("assistant", "tool", "function"))):
        raise ApiError(400, f"{where}.content: expected a string or a list of parts, "
                       f"got {_short(content)}", param=f"{where}.content")
    kinds = ("text", "refusal") if role == "assistant" else ("text",)
    for j, part in enumerate(content if isinstance(content, list) else ()):
        at = f"{where}.content[{j}]"
        if not isinstance(part, dict):
            raise ApiError(400, f"{at}: expected an object, got {_short(part)}", param=at)
        kind = part.get("type")
        if kind not in kinds:
            raise ApiError(400, f"{at}.type: {_short(kind)} cannot be priced by this server; "
                           f"expected {' or '.join(map(repr, kinds))} parts",
                           param=f"{at}.type")
        if not isinstance(part.get(kind), str):
            raise ApiError(400, f"{at}.{kind}: expected a string, got "
                           f"{_short(part.get(kind))}", param=f"{at}.{kind}")
    if message.get("audio") is not None:  # an earlier audio answer, billed as audio tokens
        raise ApiError(400, f"{where}.audio: cannot be priced by this server; expected no "
                       "audio", param=f"{where}.audio")


def _check_priced(body: dict[str, Any]) -> None:
    """Refuse the fields whose bill cannot be bounded, and misshapen prompt fields."""
    for name in UNPRICED_FIELDS:
        if body.get(name) is not None:
            raise ApiError(400, f"{name}: cannot be priced by this server; expected it absent, "
                           f"got {_short(body[name])}", param=name)
    modalities = body.get("modalities")
    if modalities is not None and (not isinstance(modalities, list)
                                   or any(m != "text" for m in modalities)):
        raise ApiError(400, f"modalities: {_short(modalities)} cannot be priced by this "
                       "server; expected ['text']", param="modalities")
    for name in ("tools", "functions"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            raise ApiError(400, f"{name}: expected a list of objects, got {_short(value)}",
                           param=name)
        for j, item in enumerate(value):
            if not isinstance(item, dict):
                raise ApiError(400, f"{name}[{j}]: expected an object, got {_short(item)}",
                               param=f"{name}[{j}]")
    form = body.get("response_format")
    if form is not None and not isinstance(form, dict):
        raise ApiError(400, f"response_format: expected an object, got {_short(form)}",
                       param="response_format")


def _short(value: Any) -> str:
    try:
        shown = repr(value)
    except ValueError:  # an integer of more digits than Python prints
        return f"an integer of more than {MAX_INT_DIGITS} digits"
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


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def prompt_bound(messages: list[dict[str, Any]]) -> int:
    """An upper bound on the prompt tokens of a chat's messages (tools aside: :func:`input_bound`).

    Each message's whole JSON in UTF-8 bytes (``json.dumps(message, ensure_ascii=False)``:
    every content part, ``name``, ``tool_calls``, ``tool_call_id``, ``function_call``,
    any other field) plus 8 per message, plus 8. A byte-level BPE token (OpenAI's,
    Llama's, Mistral's tokenizers) holds at least one byte, the text a provider renders
    of a message is no longer than its JSON (which quotes and escapes it), and the chat
    template adds a few tokens per message; so the worst case reserved from this bound
    is never below the real cost.
    """
    return 8 + sum(8 + _json_bytes(message) for message in messages)


def input_bound(chat: ChatRequest) -> int:
    """An upper bound on the prompt tokens an upstream may bill for ``chat``.

    :func:`prompt_bound` of its messages, plus the UTF-8 bytes of the JSON of each of
    :data:`PROMPT_FIELDS` the request has (``tools``, ``functions``, ``tool_choice``,
    ``function_call``, ``response_format``), plus :data:`TOOL_OVERHEAD` per tool or
    function definition and :data:`TOOLS_OVERHEAD` once when there is any. A byte-level
    BPE token holds at least one byte, and a provider's rendering of tool definitions and
    schemas into the prompt is no longer in tokens than their JSON in bytes plus that
    overhead. Parts that would bill otherwise (images, audio, files) are refused by
    :func:`parse_chat`, so nothing the upstream bills as prompt is left out.
    """
    total = prompt_bound(chat.messages)
    definitions = 0
    for name in PROMPT_FIELDS:
        value = chat.rest.get(name)
        if value is None:
            continue
        total += _json_bytes(value)
        if name in ("tools", "functions") and isinstance(value, list):
            definitions += len(value)
    return total + TOOL_OVERHEAD * definitions + (TOOLS_OVERHEAD if definitions else 0)


def finite(value: Any) -> bool:
    """A real finite number (not a bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


async def read_body(request: Any, limit: int) -> bytes:
    """A request's body, refused (413) as soon as it passes ``limit`` bytes as it streams in.

    ``request``: a Starlette request (its ``headers`` and ``stream()``).
    """
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
