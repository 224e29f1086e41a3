"""Calling an upstream model: retries, the faults it bills and those it does not, streams.

Every fault falls in one of two classes, by whether the upstream may have billed the call:

* **not billed** (:class:`UpstreamFailedError`, charged nothing): the connection could not
  be made or the request not sent (refused, reset while sending, a connect or pool
  timeout), or the upstream answered an error (a 5xx, a 429, or a 401, 403, 404 or 408:
  the model's key or name is wrong, which is the gateway's fault, not the request's).
  The call is tried again
  after ``backoff * 2**attempt`` seconds (after the ``Retry-After`` of a 429 when that is
  longer, up to the model's ``timeout``; a longer one gives the model up at once),
  ``retries`` times, and then given up so that the server can fall back to another model;
* **maybe billed** (:class:`UpstreamUnknownError`, charged the reservation's worst case):
  the request went out and no usable answer came back: a read timeout, the connection
  lost before or during the answer, a 200 whose body is not a chat completion, a stream
  cut (or broken) before its end. The upstream may have run the call and billed it, so
  the same reservation is never spent twice: the server falls back to another model (a
  new reservation) without retrying this one.

Another 4xx (400, 413, 422, ...) is the request's fault, not the model's
(:class:`UpstreamRejectedError`, charged nothing): it is answered as it came, without
retries.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agents.serve.config import ModelConfig
from agents.serve.http1 import Http1Pool, fast_path

#: httpx's errors raised before the request was wholly sent: the upstream cannot bill it.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.WriteError,
            httpx.WriteTimeout, httpx.UnsupportedProtocol)


class UpstreamFailedError(Exception):
    """Every try of a model failed with a fault the upstream does not bill."""


class UpstreamUnknownError(Exception):
    """A call sent whose answer never came whole: the upstream may have billed it."""


class UpstreamRejectedError(Exception):
    """The upstream refused the request itself (a 4xx other than 429)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"upstream answered {status}")
        self.status, self.body = status, body


#: 4xx answers that are the gateway's fault, not the request's: the model's key or name is
#: wrong (401, 403, 404), or the upstream timed the request out (408); retried and fallen
#: back from like a 5xx, and not billed.
GATEWAY_FAULTS = (401, 403, 404, 408, 429)


def _fault(response: httpx.Response) -> bool:
    return response.status_code in GATEWAY_FAULTS or response.status_code >= 500


def _rejected(response: httpx.Response) -> UpstreamRejectedError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        body = {"error": {"message": f"upstream answered {response.status_code}: "
                          f"{response.text[:500]}", "type": "upstream_error", "param": None,
                          "code": None}}
    return UpstreamRejectedError(response.status_code, body)


def retry_after(response: httpx.Response, now: float | None = None) -> float | None:
    """The seconds a 429 asks to wait, or ``None`` when it names none that can be read.

    ``retry-after-ms`` (OpenAI's), else ``Retry-After``: seconds or an HTTP date.
    """
    millis = response.headers.get("retry-after-ms")
    try:
        if millis is not None and float(millis) >= 0:
            return float(millis) / 1000
    except ValueError:
        pass
    text = response.headers.get("retry-after")
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if seconds == seconds else None  # NaN names nothing


async def send(client: httpx.AsyncClient, model: ModelConfig, body: dict[str, Any],
               retries: int, backoff: float, stream: bool = False,
               pool: Http1Pool | None = None) -> httpx.Response:
    """POST ``body`` to the model's chat completions, trying again on faults not billed.

    With ``stream``, the response is returned open (its body unread): the caller reads
    and closes it. Without, ``pool`` (when given) makes the call where it can
    (:func:`~agents.serve.http1.fast_path`), a fraction of a millisecond faster than
    ``client``.

    Raises:
        UpstreamFailedError: Every try failed with a fault the upstream does not bill.
        UpstreamUnknownError: A try was sent and its answer never came (maybe billed).
        UpstreamRejectedError: The upstream answered another 4xx.
    """
    url = f"{model.base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {model.api_key()}"}
    content = None
    if pool is not None and not stream and fast_path(url):  # httpx's encoding of json=
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False).encode()
    reason, wait = "no try", 0.0
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(wait)
        wait = backoff * 2 ** attempt
        try:
            if content is not None and pool is not None:
                response = await pool.post(url, content, headers, model.timeout)
            else:
                request = client.build_request("POST", url, json=body, headers=headers,
                                               timeout=model.timeout)
                response = await client.send(request, stream=stream)
        except NOT_SENT as err:
            reason = f"connection failed ({type(err).__name__})"
            continue
        except httpx.TimeoutException:
            raise UpstreamUnknownError(f"{model.name}: no answer within {model.timeout:g} s "
                                       "(the request was sent)") from None
        except httpx.TransportError as err:
            raise UpstreamUnknownError(f"{model.name}: the connection was lost before the "
                                       f"answer ({type(err).__name__})") from None
        if response.status_code < 400:
            return response
        if stream:
            await response.aread()
            await response.aclose()
        if not _fault(response):
            raise _rejected(response)
        reason = f"answered {response.status_code}"
        if response.status_code == 429:
            asked = retry_after(response)
            if asked is not None and asked > model.timeout:
                reason += f" with Retry-After {asked:g} s, beyond its timeout"
                break
            wait = max(wait, asked or 0.0)
    raise UpstreamFailedError(f"{model.name}: {reason} ({retries + 1} tries)")


def read_completion(response: httpx.Response, model: ModelConfig) -> dict[str, Any]:
    """An unstreamed answer's JSON, checked to be a chat completion.

    A ``usage`` that is not an object is dropped (the call is then charged as one without
    usage: its worst case).

    Raises:
        UpstreamUnknownError: The body is not a JSON object whose ``choices`` are objects
            with an object ``message`` (the upstream answered 200, so it may have billed
            the call).
    """
    try:
        data = response.json()
    except (ValueError, UnicodeDecodeError, RecursionError):
        data = None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not all(
            isinstance(c, dict) and isinstance(c.get("message", {}), dict) for c in choices):
        raise UpstreamUnknownError(f"{model.name}: answered {response.status_code} with a body "
                                   f"that is not a chat completion: {response.text[:80]!r}")
    if not isinstance(data.get("usage"), dict):
        data.pop("usage", None)
    return data


def usage_tokens(usage: Any) -> tuple[int, int] | None:
    """``(prompt_tokens, completion_tokens)`` of a ``usage`` object, or ``None`` if unreadable."""
    if not isinstance(usage, dict):
        return None
    tokens = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    if all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 10**12 for t in tokens):
        return int(tokens[0]), int(tokens[1])  # type: ignore[arg-type]  # ints: checked above
    return None


@dataclass
class StreamResult:
    """What a relayed stream carried: its text, the usage of its last chunk, how it ended."""

    text: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    complete: bool = False
    #: Events passed on to the client.
    relayed: int = 0
    #: Why the stream broke off (``None`` while it has not).
    fault: str | None = None
    #: The upstream's id of the completion.
    upstream_id: str | None = None
    finish_reason: str | None = None


def error_event(message: str, code: str = "upstream_stream_failed") -> bytes:
    """An error as an OpenAI stream event (OpenAI's clients raise it as an ``APIError``)."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None,
                      "code": code}}
    return f"data: {json.dumps(body)}\n\n".encode()


async def relay(response: httpx.Response, model_name: str, request_id: str,
                forward_usage: bool, result: StreamResult) -> AsyncIterator[bytes]:
    """The upstream's server-sent events, passed on (with the server's id and model name).

    The usage chunk (asked for with ``stream_options.include_usage``) is read into
    ``result`` and passed on only when the client asked for it too. A stream that breaks
    (the connection lost or timed out, an event that is not JSON, an upstream error event,
    the end before ``[DONE]``) sets ``result.fault`` and ends without another event: the
    caller says so to the client (:func:`error_event`).
    """
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                result.complete = True
                yield b"data: [DONE]\n\n"
                return
            try:
                chunk = json.loads(data)
            except (json.JSONDecodeError, RecursionError):
                chunk = None
            if not isinstance(chunk, dict):
                result.fault = f"{model_name}: an event that is not a JSON object: {data[:80]!r}"
                return
            if "error" in chunk:
                result.fault = f"{model_name}: the upstream's stream failed: " + _short(
                    chunk["error"])
                return
            if chunk.get("usage"):
                result.usage = chunk["usage"]
                if not forward_usage and not chunk.get("choices"):
                    continue
                if not forward_usage:
                    chunk.pop("usage")
            if result.upstream_id is None and isinstance(chunk.get("id"), str):
                result.upstream_id = chunk["id"]
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict):
                    continue
                piece = (choice.get("delta") or {}).get("content")
                if isinstance(piece, str) and piece:
                    result.text.append(piece)
                if choice.get("finish_reason"):
                    result.finish_reason = str(choice["finish_reason"])
            chunk["model"], chunk["id"] = model_name, request_id
            result.relayed += 1
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        result.fault = f"{model_name}: the stream ended before [DONE]"
    except httpx.TimeoutException:
        result.fault = f"{model_name}: the stream stalled (no event within its timeout)"
    except httpx.TransportError as err:
        result.fault = f"{model_name}: the stream was cut ({type(err).__name__})"
    finally:
        await response.aclose()


def _short(value: Any) -> str:
    shown = value.get("message") if isinstance(value, dict) else None
    shown = str(shown if shown is not None else value)
    return shown if len(shown) <= 200 else shown[:197] + "..."
