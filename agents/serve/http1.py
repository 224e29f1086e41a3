"""A small HTTP/1.1 client for the upstream's unstreamed calls: keep-alive connections, pooled.

A call to the stand-in upstream (answering at once) took 1.34 ms through httpx's
``AsyncClient`` on the 2-core development machine (its layers, h11's checks, anyio), and
0.43 ms as a bare POST on a kept-alive :mod:`asyncio` stream; this client takes 0.53 ms.
The difference was the largest part of what the server added to a call (issue #27's
latency benchmark). This client does only what an OpenAI-compatible upstream needs: a
``POST`` with a body, a response framed by ``Content-Length``, ``Transfer-Encoding:
chunked`` or the connection's end, ``1xx`` answers skipped, and TLS with httpx's own
certificate settings. It answers an :class:`httpx.Response` (gzip and deflate bodies
decoded by httpx) and raises httpx's exceptions (:class:`httpx.ConnectError`,
:class:`httpx.ReadError`, :class:`httpx.RemoteProtocolError`, :class:`httpx.TimeoutException`),
so a caller cannot tell it from httpx. Streams, and upstreams reached through a proxy
(``HTTP(S)_PROXY``), stay with httpx (:func:`fast_path`).

A kept-alive connection the server closed while it sat idle is dropped before reuse when
its end was seen, and one idle for :data:`MAX_IDLE_SECONDS` is not reused at all (a
server's keep-alive timer closing it just as a request goes out is the race that
remains). Nothing is ever sent twice here: a request written whole and then left without
an answer may have been run and billed, so it raises (:class:`httpx.ReadError`) and the
server charges it as maybe billed (:mod:`agents.serve.upstream`); only a request that
could not be written at all is written again, once, on a new connection. Timeouts name
where they struck: waiting for a connection slot (:class:`httpx.PoolTimeout`),
connecting (:class:`httpx.ConnectTimeout`), writing (:class:`httpx.WriteTimeout`) or
waiting for the answer (:class:`httpx.ReadTimeout`).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
import urllib.request
from collections.abc import Coroutine, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import httpx

#: Idle connections kept per upstream (httpx's ``max_keepalive_connections`` was 64).
MAX_IDLE = 64
#: Connections open at once per upstream; more requests wait (httpx's ``max_connections``).
MAX_OPEN = 256
#: The longest header block read (bytes).
HEADER_LIMIT = 1 << 20
#: Seconds an idle connection may wait to be reused (uvicorn's keep-alive is 5 s).
MAX_IDLE_SECONDS = 4.0

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _within(seconds: float, work: Coroutine[Any, Any, httpx.Response]) -> httpx.Response:
    """``await work``, cancelled after ``seconds`` (TimeoutError)."""
    if sys.version_info >= (3, 11):  # no new task, unlike wait_for before 3.12
        async with asyncio.timeout(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)  # pragma: no cover (Python 3.10)


@lru_cache(maxsize=16)
def fast_path(url: str) -> bool:
    """Whether this client serves ``url``: http or https, with no proxy in the environment."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


class _Origin:
    """The connections to one ``scheme://host:port``."""

    def __init__(self, scheme: str, host: str, port: int) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        default = 443 if scheme == "https" else 80
        name = f"[{host}]" if ":" in host else host  # an IPv6 address
        self.host_header = (name if port == default else f"{name}:{port}").encode("idna")
        self.idle: list[tuple[Connection, float]] = []  # with the time it went idle
        self.slots = asyncio.Semaphore(MAX_OPEN)
        self._ssl: ssl.SSLContext | None = None

    async def connect(self) -> Connection:
        if self.scheme == "https" and self._ssl is None:
            self._ssl = httpx.create_ssl_context()  # httpx's CAs and SSL_CERT_* variables
        try:
            return await asyncio.open_connection(
                self.host, self.port, ssl=self._ssl if self.scheme == "https" else None,
                limit=HEADER_LIMIT)
        except (OSError, ssl.SSLError) as err:
            raise httpx.ConnectError(f"{self.host}:{self.port}: {err}") from err

    def take(self) -> Connection | None:
        now = time.monotonic()
        while self.idle:
            (reader, writer), since = self.idle.pop()
            if reader.at_eof() or writer.is_closing() or now - since > MAX_IDLE_SECONDS:
                writer.close()  # closed by the server while idle, or soon to be
                continue
            return reader, writer
        return None

    def give_back(self, connection: Connection) -> None:
        if len(self.idle) < MAX_IDLE:
            self.idle.append((connection, time.monotonic()))
        else:
            connection[1].close()


class Http1Pool:
    """Keep-alive HTTP/1.1 connections per upstream, for ``POST`` requests with a body."""

    def __init__(self) -> None:
        self._origins: dict[tuple[str, str, int], _Origin] = {}

    def _origin(self, scheme: str, host: str, port: int) -> _Origin:
        key = (scheme, host, port)
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = _Origin(scheme, host, port)
        return origin

    async def post(self, url: str, content: bytes, headers: Mapping[str, str],
                   timeout: float) -> httpx.Response:
        """``POST content`` to ``url``: the whole answer, read, within ``timeout`` seconds.

        Raises:
            httpx.TimeoutException: No whole answer within ``timeout`` seconds.
            httpx.TransportError: The connection failed or the answer was not HTTP/1.x.
        """
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        origin = self._origin(scheme, host, port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"POST {target} HTTP/1.1".encode(), b"Host: " + origin.host_header,
                b"Accept: application/json", b"Accept-Encoding: gzip, deflate",
                b"Content-Type: application/json", f"Content-Length: {len(content)}".encode()]
        head += [f"{name}: {value}".encode() for name, value in headers.items()]
        message = b"\r\n".join(head) + b"\r\n\r\n" + content
        phase = ["pool"]  # where the call is, for a timeout's name
        try:
            return await _within(timeout, self._exchange(origin, message, phase))
        except TimeoutError:
            error = {"pool": httpx.PoolTimeout, "connect": httpx.ConnectTimeout,
                     "write": httpx.WriteTimeout}.get(phase[0], httpx.ReadTimeout)
            raise error(f"no whole answer within {timeout:g} s ({phase[0]})") from None

    async def _exchange(self, origin: _Origin, message: bytes,
                        phase: list[str]) -> httpx.Response:
        async with origin.slots:
            phase[0] = "connect"
            connection = origin.take()
            reused = connection is not None
            if connection is None:
                connection = await origin.connect()
            while True:
                try:
                    status, headers, body, keep = await _read_response(*connection, message,
                                                                       reused, phase)
                except _StaleError:  # it could not be written: once more, on a new one
                    connection[1].close()
                    phase[0] = "connect"
                    connection, reused = await origin.connect(), False
                    continue
                except BaseException:  # an error or a cancel: the stream's state is unknown
                    connection[1].close()
                    raise
                break
            if keep:
                origin.give_back(connection)
            else:
                connection[1].close()
        return httpx.Response(status, headers=headers, content=body)

    async def aclose(self) -> None:
        """Close every idle connection."""
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop()[0][1].close()


class _StaleError(Exception):
    """A kept-alive connection found closed before the request could be written."""


async def _read_response(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         message: bytes, reused: bool, phase: list[str]
                         ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """Send ``message``; the answer's status, headers, body, and whether to keep the line."""
    phase[0] = "write"
    try:
        writer.write(message)
        await writer.drain()
    except ConnectionError as err:  # not written: nothing reached the server to run
        if reused:
            raise _StaleError from None
        raise httpx.WriteError(f"connection lost while sending: {err!r}") from None
    phase[0] = "read"
    try:
        block = await reader.readuntil(b"\r\n\r\n")
    except (ConnectionError, asyncio.IncompleteReadError) as err:
        # written whole, then no answer: the server may have run (and billed) it
        raise httpx.ReadError(f"connection lost before the answer: {err!r}") from None
    except asyncio.LimitOverrunError:
        raise httpx.RemoteProtocolError(f"headers over {HEADER_LIMIT} bytes") from None
    try:
        while True:
            status, version, headers = _parse_head(block)
            if not 100 <= status < 200:
                break
            block = await reader.readuntil(b"\r\n\r\n")  # after a 100 Continue
        fields = {name.lower(): value for name, value in headers}
        body = b"" if status in (204, 304) else await _read_body(reader, fields)
    except (ConnectionError, asyncio.IncompleteReadError) as err:
        raise httpx.ReadError(f"connection lost mid-answer: {err!r}") from None
    except (ValueError, asyncio.LimitOverrunError) as err:
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 answer: {err}") from None
    close = b"close" in fields.get(b"connection", b"").lower()
    keep_alive = b"keep-alive" in fields.get(b"connection", b"").lower()
    framed = (status in (204, 304) or b"content-length" in fields
              or b"chunked" in fields.get(b"transfer-encoding", b"").lower())
    keep = framed and not close and (version == b"HTTP/1.1" or keep_alive)
    return status, headers, body, keep


def _parse_head(block: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    lines = block[:-4].split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    if not version.startswith(b"HTTP/1."):
        raise ValueError(f"status line {lines[0][:80]!r}")
    status = int(rest[:3])
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError(f"header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return status, version, headers


async def _read_body(reader: asyncio.StreamReader, fields: Mapping[bytes, bytes]) -> bytes:
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        chunks: list[bytes] = []
        while True:
            size = int(bytes((await reader.readuntil(b"\r\n"))[:-2]).split(b";")[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the end
                    pass
                return b"".join(chunks)
            chunks.append((await reader.readexactly(size + 2))[:-2])
    if b"content-length" in fields:
        return await reader.readexactly(int(fields[b"content-length"]))
    return await reader.read()  # framed by the connection's end
