"""A watch over HTTP: the events a server streams, however its writes cut them, are read whole and in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.ports.errors import Expired, Unavailable
from scheduler.ports.kube import cluster, http1
from scheduler.ports.kube.client import client_for
from scheduler.ports.kube.cluster import KubeCluster
from scheduler.ports.port import OPENED, PODS, Change
from tests.scheduler.support import served


def event(kind: str, name: str, version: int) -> bytes:
    pod = {"kind": "Pod", "metadata": {"name": name, "namespace": "team", "resourceVersion": str(version)}}
    return orjson.dumps({"type": kind, "object": pod})


@asynccontextmanager
async def streaming(writes: list[bytes]) -> AsyncIterator[str]:
    """A server whose every watch answers with ``writes``, each flushed on its own, then ends."""

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for piece in writes:
            await response.write(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/api/v1/pods", watch)
    async with served(app) as url:
        yield url


async def read_all(url: str) -> list[Change]:
    port = KubeCluster(client_for(url))
    try:
        return [change async for change in port.watch(PODS, "1", timeout=10)]
    finally:
        await port.close()


async def test_events_cut_anywhere_by_the_server_s_writes_are_read_whole_and_in_order() -> None:
    first, second, third = event("ADDED", "a", 2), event("MODIFIED", "a", 3), event("ADDED", "b", 4)
    bookmark, last = event("BOOKMARK", "", 5), event("DELETED", "b", 6)
    writes = [
        first[:7],  # an event cut in two
        first[7:] + b"\n" + second + b"\n" + third[:1],  # one event's end, a whole one, one's first byte
        third[1:] + b"\n",
        b"\n",  # a blank line is no event
        bookmark + b"\n" + last,  # the last event ends with the stream, with no newline
    ]
    async with streaming(writes) as url:
        changes = await read_all(url)
    assert [change.type for change in changes] == [OPENED, "ADDED", "MODIFIED", "ADDED", "BOOKMARK", "DELETED"]
    assert [change.object.get("metadata", {}).get("resourceVersion") for change in changes[1:]] == list("23456")


async def test_a_malformed_event_fails_the_watch_as_unavailable_after_the_events_before_it() -> None:
    async with streaming([event("ADDED", "a", 2) + b"\n{not json\n" + event("ADDED", "b", 3) + b"\n"]) as url:
        port = KubeCluster(client_for(url))
        seen: list[str] = []
        try:
            with pytest.raises(Unavailable, match="malformed event"):
                async for change in port.watch(PODS, "1", timeout=10):
                    seen.append(change.type)
        finally:
            await port.close()
    assert seen == [OPENED, "ADDED"]


async def test_an_error_event_fails_the_watch_with_the_status_it_carries() -> None:
    expired = orjson.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    async with streaming([expired + b"\n"]) as url:
        with pytest.raises(Expired, match="too old"):
            await read_all(url)


async def test_an_event_past_the_longest_read_fails_the_watch_instead_of_filling_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster, "MAX_EVENT", 100)
    endless = [b'{"type": "ADDED", "object": {"metadata": {"name": "', *([b"x" * 40] * 5)]
    async with streaming(endless) as url:
        with pytest.raises(Unavailable, match="longer than 100 bytes"):
            await read_all(url)


@given(st.lists(st.binary(min_size=1, max_size=40), max_size=8), st.data())
@settings(max_examples=200, deadline=None, derandomize=True)
def test_chunked_coding_is_taken_off_however_the_bytes_are_cut(pieces: list[bytes], data: st.DataObject) -> None:
    """A watch's body comes in chunks, and the chunks in reads that may cut a size line, the data or the line
    break after it anywhere: the data come out whole and in order, and the end is seen."""
    coded = b"".join(b"%x;ext=1\r\n" % len(piece) + piece + b"\r\n" for piece in pieces) + b"0\r\n\r\n"
    cuts = sorted(data.draw(st.sets(st.integers(1, len(coded) - 1), max_size=12)))
    chunks, taken = http1._Chunks(), []
    for start, end in zip([0, *cuts], [*cuts, len(coded)], strict=True):
        taken.append(chunks.feed(coded[start:end]))
    assert b"".join(taken) == b"".join(pieces) and chunks.ended


@pytest.mark.parametrize(
    ("coded", "why"),
    [(b"zz\r\nab\r\n", "chunk size"), (b"2\r\nabXY", "CRLF"), (b"1" * 5000, "size line too long")],
)
def test_chunked_coding_that_is_not_is_refused(coded: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        http1._Chunks().feed(coded)


async def test_a_watch_cut_off_in_the_middle_of_a_chunk_fails_as_unavailable() -> None:
    """The server's connection breaks before the chunk it began ends: the events before it were read, and
    the watch then fails as the port's transient error (the informer lists again), not as a stream's end."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        whole = event("ADDED", "a", 2) + b"\n"
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(whole), whole) + b"40\r\n" + event("ADDED", "b", 3)[:10])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    port = KubeCluster(client_for(url))
    seen: list[Change] = []
    try:
        with pytest.raises(Unavailable, match="in the middle of its answer"):
            async for change in port.watch(PODS, "1", timeout=10):
                seen.append(change)
    finally:
        await port.close()
        server.close()
    assert [(change.type, change.object.get("metadata", {}).get("name")) for change in seen] == [
        (OPENED, None),
        ("ADDED", "a"),
    ]


async def test_watches_and_lists_one_after_another_share_one_connection() -> None:
    """A watch takes the connection its list left, and gives it back when its answer ends (at its timeout):
    over TLS each new connection is a handshake, and a start that opened one per watch paid some 40."""
    peers: list[int] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        peers.append(peer[1] if peer else 0)
        if "watch" not in request.query:
            return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(event("ADDED", "a", 2) + b"\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    async with served(app) as url:
        port = KubeCluster(client_for(url))
        try:
            for _ in range(2):
                assert (await port.list(PODS)).items == []
                assert [change.type async for change in port.watch(PODS, "1", timeout=10)] == [OPENED, "ADDED"]
        finally:
            await port.close()
    assert len(peers) == 4 and len(set(peers)) == 1


async def test_a_connection_is_kept_after_a_watch_only_when_its_answer_ended_cleanly_and_once() -> None:
    """Kept: an answer read to its end, on a connection the server keeps. Not kept: a watch left after its
    first event (its answer still coming), an answer with ``Connection: close``, an answer past its
    timeout, one closed after the client was; and a stream closed twice is kept once."""

    connections: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while head := await reader.readuntil(b"\r\n\r\n"):
                whole = event("ADDED", "a", 2) + b"\n"
                if b"/unending" in head:  # one event, then nothing until the client goes
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(whole), whole)
                    )
                elif b"/closing" in head:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(whole), whole)
                    )
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(whole), whole))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    http = http1.Http1(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", None, most=4)

    async def streamed(path: str, timeout: float = 10) -> http1.Stream:
        return await http.stream(path, {}, timeout=timeout)

    try:
        ended = await streamed("/ended")
        assert orjson.loads(await ended.whole())["object"]["metadata"]["name"] == "a"
        ended.close()
        ended.close()
        assert len(http._idle) == 1

        unending = await streamed("/unending")  # on the kept connection
        assert await unending.read()
        unending.close()  # its answer still coming: the connection goes
        assert http._idle == []

        closing = await streamed("/closing")
        await closing.whole()
        closing.close()
        assert http._idle == []

        expired = await streamed("/unending", timeout=0.3)
        await expired.read()
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            await expired.read()
        expired.close()
        assert http._idle == []

        late = await streamed("/ended")
        await late.whole()
        await http.close()
        late.close()  # after the client: closed, not kept
        assert http._idle == []
    finally:
        server.close()
        for writer in connections:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def test_a_stream_that_goes_quiet_ends_at_its_timeout() -> None:
    """A server that sends the head and one event, then nothing: the read waiting past the stream's
    timeout fails as a timeout (the informer then watches again), not as the stream's end."""

    async def quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        whole = event("ADDED", "a", 2) + b"\n"
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(whole), whole))
        await writer.drain()
        await reader.read()  # until the client goes
        writer.close()

    server = await asyncio.start_server(quiet, "127.0.0.1", 0)
    http = http1.Http1(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", None, most=1)
    try:
        stream = await http.stream("/api/v1/pods?watch=true", {}, timeout=0.3)
        assert orjson.loads(await stream.read())["object"]["metadata"]["name"] == "a"
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            await stream.read()
        stream.close()
    finally:
        server.close()
