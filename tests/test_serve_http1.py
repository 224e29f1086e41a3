"""The upstream's HTTP/1.1 client (agents.serve.http1) against real sockets on 127.0.0.1.

Each test runs a small asyncio server that answers with the bytes it is given (framing,
keep-alive and faults as a real upstream may send them) and counts connections and
requests.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable

import httpx
import pytest

from agents.serve import http1
from agents.serve.http1 import Http1Pool, fast_path
from agents.serve.standin import free_port

#: The answer to the n-th request of connection c: bytes, bytes and then the close (a
#: tuple), or None (close without answering).
Script = Callable[[int, int], bytes | tuple[bytes] | None]


def _answer(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Upstream:
    """A scripted server: ``script(connection, request)`` gives each request's answer.

    On exit it closes the connections still open and waits for their handlers, so none is
    left for ``asyncio.run`` to cancel (Python 3.11's streams log such a cancel as an
    "Exception in callback" error).
    """

    def __init__(self, script: Script) -> None:
        self.script, self.connections, self.requests = script, 0, []
        self.port = free_port()
        self._handlers: list[tuple[asyncio.Task, asyncio.StreamWriter]] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection, count = self.connections, 0
        self.connections += 1
        self._handlers.append((asyncio.current_task(), writer))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                answer = self.script(connection, count)
                count += 1
                if answer is None:
                    break
                writer.write(answer[0] if isinstance(answer, tuple) else answer)
                await writer.drain()
                if isinstance(answer, tuple):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for _, writer in self._handlers:
            writer.close()  # a handler waiting for a request reads the end and returns
        await asyncio.gather(*(task for task, _ in self._handlers))


def _run(script: Script, calls: int = 1, timeout: float = 5.0,
         pause: float = 0.0) -> tuple[list[httpx.Response], Upstream]:
    async def go() -> tuple[list[httpx.Response], Upstream]:
        upstream, pool, answers = Upstream(script), Http1Pool(), []
        async with upstream as url:
            for i in range(calls):
                if i and pause:
                    await asyncio.sleep(pause)
                answers.append(await pool.post(url, json.dumps({"n": i}).encode(),
                                               {"Authorization": "Bearer k"}, timeout))
            await pool.aclose()
        return answers, upstream

    return asyncio.run(go())


def test_content_length_answers_reuse_one_connection() -> None:
    answers, upstream = _run(lambda c, n: _answer(json.dumps({"c": c, "n": n}).encode()), 3)
    assert [a.json() for a in answers] == [{"c": 0, "n": 0}, {"c": 0, "n": 1}, {"c": 0, "n": 2}]
    assert upstream.connections == 1 and len(upstream.requests) == 3
    head, body = upstream.requests[0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in head and b"Host: 127.0.0.1:" in head
    assert json.loads(body) == {"n": 0}


def test_chunked_gzip_and_100_continue_are_read() -> None:
    packed = gzip.compress(b'{"text": "hello"}')
    chunked = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               + f"{5:x};ext=1\r\n".encode() + packed[:5] + b"\r\n"
               + f"{len(packed) - 5:x}\r\n".encode() + packed[5:] + b"\r\n"
               + b"0\r\nX-Trailer: 1\r\n\r\n")
    answers, upstream = _run(lambda c, n: chunked, 2)
    assert [a.json() for a in answers] == [{"text": "hello"}] * 2
    assert upstream.connections == 1  # a chunked answer keeps the connection


def test_an_answer_framed_by_the_close_and_connection_close_open_new_connections() -> None:
    def script(c: int, n: int) -> bytes | tuple[bytes]:
        if c == 0:  # no length: the answer ends with the connection
            return (b"HTTP/1.1 200 OK\r\n\r\n" + b'{"a": 1}',)
        return _answer(b'{"b": 2}', "Connection: close")

    answers, upstream = _run(script, 3)
    assert answers[0].json() == {"a": 1} and answers[1].json() == {"b": 2}
    assert upstream.connections == 3


def test_an_error_status_is_an_answer_and_204_has_no_body() -> None:
    answers, _ = _run(lambda c, n: (_answer(b'{"error": {"message": "slow down"}}',
                                            status="429 Too Many Requests") if n == 0
                                    else b"HTTP/1.1 204 No Content\r\n\r\n"), 2)
    assert answers[0].status_code == 429 and answers[0].json()["error"]["message"] == "slow down"
    assert answers[1].status_code == 204 and answers[1].content == b""


def test_a_request_a_kept_connection_dropped_unanswered_is_never_sent_again() -> None:
    # the first connection answers once, then reads the second request and drops it: the
    # upstream may have run (and billed) it, so it is a read error, not a second send
    with pytest.raises(httpx.ReadError, match="before the answer"):
        _run(lambda c, n: None if (c, n) == (0, 1) else _answer(b'{"ok": 1}'), 2)


def test_a_connection_idle_past_its_keep_alive_is_not_reused(monkeypatch) -> None:
    monkeypatch.setattr(http1, "MAX_IDLE_SECONDS", 0.01)  # the server's timer: soon
    answers, upstream = _run(lambda c, n: _answer(b"{}"), 2, pause=0.05)
    assert [a.json() for a in answers] == [{}, {}]
    assert upstream.connections == 2 and len(upstream.requests) == 2  # none sent twice


def test_a_connection_closed_while_idle_is_not_reused() -> None:
    # the server closes each connection after its answer, without saying so
    answers, upstream = _run(lambda c, n: (_answer(b"{}"),), 2, pause=0.05)
    assert [a.json() for a in answers] == [{}, {}]
    assert upstream.connections == 2 and len(upstream.requests) == 2  # none sent twice


def test_a_fresh_connection_dropped_unanswered_is_a_read_error_not_retried() -> None:
    with pytest.raises(httpx.ReadError):
        _run(lambda c, n: None, 1)


def test_an_answer_cut_mid_body_is_a_read_error() -> None:
    with pytest.raises(httpx.ReadError):
        _run(lambda c, n: (_answer(b'{"a": 1}')[:-3],), 1)


def test_garbage_is_a_protocol_error() -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="status line"):
        _run(lambda c, n: b"SMTP ready\r\n\r\n", 1)


def test_a_slow_answer_times_out_and_a_refused_connection_fails_to_connect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Which timeout strikes is set up by the order of events, never by how fast this
    # process runs: a call on a kept-alive connection writes its request before it first
    # waits, so its timeout can only strike waiting for the answer; a call waiting for a
    # slot another call holds until released can only time out waiting for it. (Before,
    # two calls of 0.3 s raced for one slot: a process stalled between their starts gave
    # the slot to the second mid-way, which timed out connecting, and the server's
    # handler, finding the connection closed before a request, logged "Unhandled
    # exception in client_connected_cb".)
    monkeypatch.setattr(http1, "MAX_IDLE_SECONDS", float("inf"))  # reused however late

    async def slow() -> None:
        released = asyncio.Event()  # answers to /v1/held wait for it; others go at once
        handlers: list[asyncio.Task] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    await reader.readexactly(2)  # the body, b"{}"
                    if head.startswith(b"POST /v1/held "):
                        await released.wait()
                    writer.write(_answer(b"{}"))
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass  # the client closed the connection
            finally:
                writer.close()

        port = free_port()
        server = await asyncio.start_server(serve, "127.0.0.1", port)
        url = f"http://127.0.0.1:{port}/v1"
        pool = Http1Pool()
        assert (await pool.post(f"{url}/x", b"{}", {}, 30.0)).json() == {}  # kept alive
        with pytest.raises(httpx.ReadTimeout, match=r"within 0\.2 s \(read\)"):
            await pool.post(f"{url}/held", b"{}", {}, 0.2)
        # one connection at a time: the first call holds it until the server is released,
        # so the second's timeout strikes waiting for it, a pool timeout (nothing was
        # sent: not billed)
        narrow = Http1Pool()
        narrow._origin("http", "127.0.0.1", port).slots = asyncio.Semaphore(1)

        async def second() -> httpx.Response:
            try:
                return await narrow.post(f"{url}/x", b"{}", {}, 0.3)
            finally:
                released.set()

        first, late = await asyncio.gather(narrow.post(f"{url}/held", b"{}", {}, 30.0),
                                           second(), return_exceptions=True)
        assert isinstance(late, httpx.PoolTimeout), late
        assert isinstance(first, httpx.Response) and first.json() == {}, first
        with pytest.raises(httpx.ConnectError):
            await pool.post(f"http://127.0.0.1:{free_port()}/v1/x", b"{}", {}, 1.0)
        await pool.aclose()
        await narrow.aclose()
        server.close()
        await asyncio.gather(*handlers)  # each ended on its connection's close

    asyncio.run(slow())


def test_the_fast_path_leaves_proxied_upstreams_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY",
                 "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    fast_path.cache_clear()
    assert fast_path("https://api.example.com/v1/chat/completions")
    assert not fast_path("ftp://example.com/x")
    monkeypatch.setenv("https_proxy", "http://proxy:3128")
    monkeypatch.setenv("no_proxy", "internal.example.com")
    fast_path.cache_clear()
    assert not fast_path("https://api.example.com/v1/chat/completions")
    assert fast_path("https://internal.example.com/v1/chat/completions")
    fast_path.cache_clear()
