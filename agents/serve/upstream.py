"""Calling an upstream model: retries with backoff on faults, and streaming relayed.

A fault is a timeout, a refused or dropped connection, a 429 or a 5xx: the call is tried
again after ``backoff * 2**attempt`` seconds, ``retries`` times, and then given up
(:class:`UpstreamFailedError`) so that the server can fall back to another model. Another
4xx is the request's fault, not the model's: it is answered as it came, without retries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agents.serve.config import ModelConfig
from agents.serve.http1 import Http1Pool, fast_path


class UpstreamFailedError(Exception):
    """Every try of a model failed (``reason``: the last fault)."""


class UpstreamRejectedError(Exception):
    """The upstream refused the request itself (a 4xx other than 429)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"upstream answered {status}")
        self.status, self.body = status, body


def _fault(response: httpx.Response) -> bool:
    return response.status_code == 429 or response.status_code >= 500


def _rejected(response: httpx.Response) -> UpstreamRejectedError:
    try:
        body = response.json()
    except ValueError:
        body = {"error": {"message": response.text[:500], "type": "upstream_error",
                          "param": None, "code": None}}
    return UpstreamRejectedError(response.status_code, body)


async def send(client: httpx.AsyncClient, model: ModelConfig, body: dict[str, Any],
               retries: int, backoff: float, stream: bool = False,
               pool: Http1Pool | None = None) -> httpx.Response:
    """POST ``body`` to the model's chat completions, trying again on faults.

    With ``stream``, the response is returned open (its body unread): the caller reads
    and closes it. Without, ``pool`` (when given) makes the call where it can
    (:func:`~agents.serve.http1.fast_path`), a fraction of a millisecond faster than
    ``client``.

    Raises:
        UpstreamFailedError: Every try failed with a fault.
        UpstreamRejectedError: The upstream answered another 4xx.
    """
    url = f"{model.base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {model.api_key()}"}
    content = None
    if pool is not None and not stream and fast_path(url):  # httpx's encoding of json=
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False).encode()
    reason = "no try"
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(backoff * 2 ** (attempt - 1))
        try:
            if content is not None and pool is not None:
                response = await pool.post(url, content, headers, model.timeout)
            else:
                request = client.build_request("POST", url, json=body, headers=headers,
                                               timeout=model.timeout)
                response = await client.send(request, stream=stream)
        except httpx.TimeoutException:
            reason = f"timed out after {model.timeout:g} s"
            continue
        except httpx.TransportError as err:
            reason = f"connection failed ({type(err).__name__})"
            continue
        if response.status_code < 400:
            return response
        if stream:
            await response.aread()
            await response.aclose()
        if not _fault(response):
            raise _rejected(response)
        reason = f"answered {response.status_code}"
    raise UpstreamFailedError(f"{model.name}: {reason} ({retries + 1} tries)")


@dataclass
class StreamResult:
    """What a relayed stream carried: its text and the usage of its last chunk, if any."""

    text: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    complete: bool = False


async def relay(response: httpx.Response, model_name: str, request_id: str,
                forward_usage: bool, result: StreamResult) -> AsyncIterator[bytes]:
    """The upstream's server-sent events, passed on (with the server's id and model name).

    The usage chunk (asked for with ``stream_options.include_usage``) is read into
    ``result`` and passed on only when the client asked for it too.
    """
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                result.complete = True
                yield b"data: [DONE]\n\n"
                continue
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                continue
            if chunk.get("usage"):
                result.usage = chunk["usage"]
                if not forward_usage and not chunk.get("choices"):
                    continue
                if not forward_usage:
                    chunk.pop("usage")
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    result.text.append(piece)
            chunk["model"], chunk["id"] = model_name, request_id
            yield f"data: {json.dumps(chunk)}\n\n".encode()
    finally:
        await response.aclose()
