"""The server under /metrics, /healthz, /readyz and the live view (``scheduler/httpd.py``), as a client on the
wire sees it: requests answered one after another on a kept-alive connection, HEAD, refusals that close
the connection, gzip for a client that takes it, and a handler's failure answered 500 without stopping
the server."""

from __future__ import annotations

import asyncio
import functools
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from scheduler import httpd
from scheduler.httpd import Handler, Refused, Request, Response, serve, text
from tests.scheduler.support import listening

SAID = {"X-Frame-Options": "DENY"}


async def hello(request: Request) -> Response:
    return text(f"hello {request.query.get('name', 'nobody')} at {request.path}\n")


async def big(_: Request) -> Response:
    return Response(b'{"nodes": [' + b'"n",' * 2000 + b'"n"]}', content_type="application/json", compressible=True)


async def broken(_: Request) -> Response:
    raise RuntimeError("a bug")


async def busy(_: Request) -> Response:
    raise Refused(503, "busy\n", {"Retry-After": "2"})


ROUTES: dict[str, Handler] = {"/hello": hello, "/files/": hello, "/big": big, "/broken": broken, "/busy": busy}


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A raw connection to a server of :data:`ROUTES` on loopback."""
    server = functools.partial(serve, ROUTES, "127.0.0.1:0", any_host="127.0.0.1", headers=SAID)
    async with listening(server) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            yield reader, writer
        finally:
            writer.close()


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, *, head_only: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` and read one answer: its status, headers (names in lower case) and body."""
    writer.write(request)
    with anyio.fail_after(10):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = dict(line.split(": ", 1) for line in head[1:] if line)
        fields = {name.lower(): value for name, value in fields.items()}
        length = 0 if head_only else int(fields.get("content-length", "0"))
        return int(head[0].split()[1]), fields, await reader.readexactly(length)


async def test_requests_are_answered_one_after_another_on_a_kept_alive_connection() -> None:
    async with connected() as (reader, writer):
        first = await exchange(reader, writer, b"GET /hello?name=ann%20b&name=c HTTP/1.1\r\nHost: x\r\n\r\n")
        under = await exchange(reader, writer, b"GET /files/a%2Fb.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await exchange(reader, writer, b"HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n", head_only=True)
        missing = await exchange(reader, writer, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        failed = await exchange(reader, writer, b"GET /broken HTTP/1.1\r\nHost: x\r\n\r\n")
        refused = await exchange(reader, writer, b"GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
        last = await exchange(reader, writer, b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert await reader.read() == b""  # closed, as asked
    assert (first[0], first[2]) == (200, b"hello ann b at /hello\n")  # a name given twice: its first value
    assert first[1]["content-type"] == "text/plain; charset=utf-8" and first[1]["x-frame-options"] == "DENY"
    assert under[2] == b"hello nobody at /files/a/b.txt\n"
    assert (head[0], head[1]["content-length"], head[2]) == (200, str(len(b"hello nobody at /hello\n")), b"")
    assert (missing[0], missing[2], missing[1]["x-frame-options"]) == (404, b"404: Not Found\n", "DENY")
    assert (failed[0], failed[2]) == (500, b"500: Internal Server Error\n")
    assert (refused[0], refused[1]["retry-after"], refused[2]) == (503, "2", b"busy\n")
    assert (last[0], last[1]["connection"]) == (200, "close")


async def test_gzip_only_for_a_client_that_takes_it() -> None:
    async with connected() as (reader, writer):
        plain = await exchange(reader, writer, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        zipped = await exchange(reader, writer, b"GET /big HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br, gzip\r\n\r\n")
        declined = await exchange(reader, writer, b"GET /big HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0\r\n\r\n")
    assert "content-encoding" not in plain[1] and plain[1]["vary"] == "Accept-Encoding"
    assert zipped[1]["content-encoding"] == "gzip" and gzip.decompress(zipped[2]) == plain[2]
    assert len(zipped[2]) < len(plain[2]) / 10
    assert "content-encoding" not in declined[1] and declined[2] == plain[2]


async def test_a_write_a_body_or_a_malformed_request_is_refused_and_its_connection_closed() -> None:
    cases = {
        b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi": (405, "GET, HEAD"),
        b"GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi": (400, None),
        b"GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": (400, None),
        b"HELLO\r\n\r\n": (400, None),
        b"GET /hello HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n": (400, None),
        b"GET /hello HTTP/1.1\r\n no-name\r\n\r\n": (400, None),
        b"GET //[x HTTP/1.1\r\nHost: x\r\n\r\n": (400, None),  # a target that is no URL
        b"GET /hello HTTP/1.1\r\n" + b"X: a\r\n" * 101 + b"\r\n": (431, None),  # one name, said too often
        b"GET /hello HTTP/1.1\r\n" + (b"X: " + b"a" * 15000 + b"\r\n") * 5 + b"\r\n": (431, None),
    }
    for request, (status, allow) in cases.items():
        async with connected() as (reader, writer):
            answer = await exchange(reader, writer, request)
            with anyio.fail_after(10):
                assert await reader.read() == b"", request[:30]
        assert (answer[0], answer[1].get("allow"), answer[1]["connection"]) == (status, allow, "close"), request[:30]


async def test_stopping_the_server_ends_a_request_still_being_answered() -> None:
    """A handler that never returns does not keep the server from stopping: it is cancelled with it."""
    entered, cancelled = anyio.Event(), anyio.Event()

    async def stuck(_: Request) -> Response:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    urls: list[str] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: serve({"/stuck": stuck}, "[::1]:0", urls.append, any_host="::", headers=SAID))
            while not urls:
                await anyio.wait_all_tasks_blocked()
            host, port = urls[0].removeprefix("http://").rsplit(":", 1)
            assert host == "[::1]"
            _, writer = await asyncio.open_connection("::1", int(port))
            writer.write(b"GET /stuck HTTP/1.1\r\nHost: x\r\n\r\n")
            await entered.wait()
            group.cancel_scope.cancel()
        await cancelled.wait()
        writer.close()


async def test_connections_past_the_most_served_at_once_are_answered_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpd, "MAX_CONNECTIONS", 1)
    async with connected() as (reader, writer):
        first = await exchange(reader, writer, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")  # kept open
        host, port = writer.get_extra_info("peername")[:2]
        other_reader, other_writer = await asyncio.open_connection(host, port)
        try:
            second = await exchange(other_reader, other_writer, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        finally:
            other_writer.close()
        third = await exchange(reader, writer, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (first[0], second[0], second[2], third[0]) == (200, 503, b"503: too many connections\n", 200)
