"""The port's writes over its own HTTP/1.1 (``ports/kube/http1.py``): answered as aiohttp answered them, on
connections kept alive, and failing as the port's transient error when the server breaks off."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import orjson
import pytest
from aiohttp import web

from scheduler.ports.errors import Conflict, Throttled, Unavailable
from scheduler.ports.kube.client import client_for
from scheduler.ports.kube.cluster import KubeCluster
from scheduler.ports.kube.http1 import Http1
from scheduler.ports.port import NODES, OPENED, ApiResource
from tests.scheduler.support import eventually, served

EVENTS = ApiResource("events.k8s.io", "v1", "events", "Event")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[str, list[tuple[str, int]]]]:
    """A server answering every POST with ``handler``; yields its URL and each request's (method, client port):
    the port tells the connections apart."""
    seen: list[tuple[str, int]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        seen.append((request.method, peer[1] if peer else 0))
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with served(app) as url:
        yield url, seen


async def stored(request: web.Request) -> web.Response:
    body = await request.json()
    return web.json_response({**body, "metadata": {**body.get("metadata", {}), "uid": "u1"}}, status=201)


@asynccontextmanager
async def opened(url: str, *, timeout: float = 10) -> AsyncIterator[KubeCluster]:
    port = KubeCluster(client_for(url), request_timeout=timeout)
    try:
        yield port
    finally:
        await port.close()


def event(name: str) -> dict[str, object]:
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": "team"}}


async def test_writes_one_after_another_share_one_connection_and_are_answered_with_the_object_stored() -> None:
    async with serving(stored) as (url, seen), opened(url) as port:
        created = [await port.create(EVENTS, "team", event(f"e{i}")) for i in range(20)]
        await port.bind("team", "a", "uid-a", "node-1")
        await port.delete(EVENTS, "team", "e1", uid="u1")
    assert [item["metadata"] for item in created[:2]] == [
        {"name": "e0", "namespace": "team", "uid": "u1"},
        {"name": "e1", "namespace": "team", "uid": "u1"},
    ]
    assert len(seen) == 22 and len({client for _, client in seen}) == 1
    assert {method for method, _ in seen} == {"POST", "DELETE"}


async def test_connections_probe_a_silent_server_so_that_one_gone_without_a_word_is_noticed_in_a_minute() -> None:
    """A server whose machine is lost without closing its connections (its node down, a partition) answers
    no keepalive probe: the kernel drops the connection after 30 s of silence and three probes 10 s apart,
    and a watch on it ends then, not at its timeout."""
    async with serving(stored) as (url, _), opened(url) as port:
        await port.create(EVENTS, "team", event("e0"))
        sock = port._http._idle[0].writer.get_extra_info("socket")  # type: ignore[union-attr]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        idle = getattr(socket, "TCP_KEEPIDLE", None) or socket.TCP_KEEPALIVE  # (macOS's name)
        timing = [idle, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT]
        assert [sock.getsockopt(socket.IPPROTO_TCP, option) for option in timing] == [30, 10, 3]


async def test_a_chunked_answer_is_read_whole() -> None:
    async def chunked(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        response = web.StreamResponse(status=201, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(0, len(body), 7):
            await response.write(body[i : i + 7])
        await response.write_eof()
        return response

    async with serving(chunked) as (url, _), opened(url) as port:
        assert await port.create(EVENTS, "team", event("long" * 50)) == event("long" * 50)


async def test_a_list_in_a_chunk_an_item_with_a_trailer_is_read_whole_and_its_connection_kept() -> None:
    """As kube-apiserver 1.36 streams a list: a chunk per item, then a trailer. The next request is made on
    the same connection, and answered."""
    items = [{"metadata": {"name": f"n{i}"}} for i in range(300)]
    connections = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.closing(writer), contextlib.suppress(asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                await respond(writer)

    async def respond(writer: asyncio.StreamWriter) -> None:
        pieces = [b'{"kind":"NodeList","metadata":{"resourceVersion":"7"},"items":[']
        pieces += [orjson.dumps(item) + (b"," if i < len(items) - 1 else b"") for i, item in enumerate(items)]
        pieces.append(b"]}")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces))
        writer.write(b"0\r\nX-Checksum: none\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with opened(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}") as port:
        first, second = await port.list(NODES), await port.list(NODES)
    server.close()
    assert [item["metadata"]["name"] for item in first.items] == [f"n{i}" for i in range(300)]
    assert (second.items, second.resource_version, connections) == (first.items, "7", 1)


async def test_refusals_are_the_port_s_errors_with_the_server_s_message_and_retry_after() -> None:
    async def refusing(request: web.Request) -> web.Response:
        if request.path.endswith("/binding"):
            status = {"kind": "Status", "code": 409, "message": "pod a is already assigned to node node-2"}
            return web.json_response(status, status=409)
        return web.json_response({"kind": "Status", "code": 429}, status=429, headers={"Retry-After": "3"})

    async with serving(refusing) as (url, seen), opened(url) as port:
        with pytest.raises(Conflict, match="already assigned to node node-2"):
            await port.bind("team", "a", "uid-a", "node-1")
        with pytest.raises(Throttled) as throttled:
            await port.create(EVENTS, "team", event("e"))
    assert throttled.value.retry_after == 3
    assert len({client for _, client in seen}) == 1  # a refusal keeps the connection


async def test_a_server_that_closes_connections_gets_each_write_on_a_new_one() -> None:
    """One answer says ``Connection: close``; the server drops the next connection while it sits idle. Each
    write after them is still made, on a connection of its own."""
    answered = 0

    async def closing(request: web.Request) -> web.Response:
        nonlocal answered
        answered += 1
        response = await stored(request)
        if answered == 1:
            response.force_close()
        return response

    async with serving(closing) as (url, seen), opened(url) as port:
        await port.create(EVENTS, "team", event("e0"))  # answered with Connection: close
        await port.create(EVENTS, "team", event("e1"))  # a new connection, kept
        kept = port._http._idle[0]  # type: ignore[union-attr]
        kept.writer.transport.abort()  # as a server drops an idle connection: the next write finds it shut
        await eventually(kept.reader.at_eof, what="the kept connection's end to reach its reader")
        await port.create(EVENTS, "team", event("e2"))
    assert len(seen) == 3 and len({client for _, client in seen}) == 3


async def test_a_server_that_does_not_answer_or_answers_no_http_fails_the_write_as_unavailable() -> None:
    never = asyncio.Event()

    async def silent(request: web.Request) -> web.Response:
        await never.wait()
        return web.json_response({}, status=201)

    async with serving(silent) as (url, _):
        port = KubeCluster(client_for(url), request_timeout=0.3)
        try:
            with pytest.raises(Unavailable, match="TimeoutError"):
                await port.bind("team", "a", "uid-a", "node-1")
        finally:
            never.set()  # the server's handler ends, and with it the server
            await port.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    address = server.sockets[0].getsockname()
    try:
        async with opened(f"http://127.0.0.1:{address[1]}") as port:
            with pytest.raises(Unavailable, match="not HTTP"):
                await port.create(EVENTS, "team", orjson.loads(orjson.dumps(event("e"))))
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def raw_server(
    answers: Callable[[int, int], bytes | None],
) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server speaking bytes: ``answers(connection, request)`` is what it sends for the request-th request on
    its connection-th connection (numbered from 0), or None to close that connection unanswered."""
    requests: list[bytes] = []
    connections = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, connections[0] = connections[0], connections[0] + 1
        try:
            for index in range(100):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                requests.append(head + await reader.readexactly(length))
                answer = answers(number, index)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", requests
    finally:
        server.close()
        await server.wait_closed()


def answer(status: str, body: bytes = b"{}", *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_an_interim_answer_is_passed_over_for_the_final_one_and_the_next_write_gets_its_own() -> None:
    refused = orjson.dumps({"kind": "Status", "code": 409, "message": "already assigned"})
    stored_event = orjson.dumps(event("e"))
    replies = {
        0: b"HTTP/1.1 100 Continue\r\n\r\n" + answer("201 Created", stored_event),
        1: answer("409 Conflict", refused),
    }
    async with raw_server(lambda _, index: replies[index]) as (url, _), opened(url) as port:
        assert await port.create(EVENTS, "team", event("e")) == event("e")
        with pytest.raises(Conflict, match="already assigned"):
            await port.bind("team", "a", "uid-a", "node-1")


async def test_a_kept_connection_closed_unanswered_is_asked_again_only_for_a_write_that_may_be_repeated() -> None:
    """The server closes each connection at its second request without answering it (as a server closing
    an idle connection just as it is reused): an update or a read is sent again on a new connection; a
    binding, which must not be sent twice unseen, fails as unavailable, and its caller retries it."""
    first_only = raw_server(lambda _, index: answer("200 OK") if index == 0 else None)
    async with first_only as (url, requests), opened(url) as port:
        await port.update(EVENTS, "team", "e", event("e"))
        await port.update(EVENTS, "team", "e", event("e"))  # the kept connection fails: asked again
        assert len(requests) == 3
        await port.get(EVENTS, "team", "e")
        assert len(requests) == 5 and requests[-1].startswith(b"GET ")
        with pytest.raises(Unavailable, match="closed the connection before it answered"):
            await port.bind("team", "a", "uid-a", "node-1")
        assert len(requests) == 6


async def test_a_watch_on_a_kept_connection_closed_as_it_is_taken_is_asked_again_on_a_new_one() -> None:
    """A watch takes the connection its list left (no TLS handshake more); the server closes it just then,
    unanswered: the watch is sent again on a new connection, and opens."""
    replies = {(0, 0): answer("200 OK", b'{"items": []}'), (1, 0): answer("200 OK", b"")}
    async with raw_server(lambda *at: replies.get(at)) as (url, requests), opened(url) as port:
        await port.list(NODES)
        assert [change.type async for change in port.watch(NODES, "1", timeout=5)] == [OPENED]
    assert [request.split(b"?")[0].split(b" HTTP")[0] for request in requests] == [b"GET /api/v1/nodes"] * 3
    assert b"watch=true" in requests[1] and b"watch=true" in requests[2]


async def test_a_server_behind_a_gateway_is_asked_under_its_path() -> None:
    """A kubeconfig's server may carry a path (Rancher's ``/k8s/clusters/<id>``, ``kubectl proxy
    --api-prefix``): every request, reads, watches and writes, goes under it."""
    # The list, the binding and the watch share one connection; the watch is answered with no event.
    answers = raw_server(lambda _, request: answer("200 OK", b"" if request == 2 else b'{"items": []}'))
    async with answers as (url, requests), opened(url + "/k8s/clusters/c-1/") as port:
        await port.list(NODES)
        await port.bind("team", "a", "uid-a", "node-1")
        assert [change.type async for change in port.watch(NODES, "1", timeout=5)] == [OPENED]
    assert [request.split(b"?")[0].split(b" HTTP")[0] for request in requests] == [
        b"GET /k8s/clusters/c-1/api/v1/nodes",
        b"POST /k8s/clusters/c-1/api/v1/namespaces/team/pods/a/binding",
        b"GET /k8s/clusters/c-1/api/v1/nodes",
    ]


async def test_an_answer_in_a_transfer_coding_not_asked_for_fails_as_unavailable() -> None:
    encoded = raw_server(lambda _, __: answer("200 OK", b"{}", "Transfer-Encoding: gzip, chunked"))
    async with encoded as (url, _), opened(url) as port:
        with pytest.raises(Unavailable, match="only chunked is read"):
            await port.get(EVENTS, "team", "e")


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with raw_server(lambda _, __: answer("201 Created")) as (url, requests), opened(url) as port:
        port._headers["User-Agent"] = "phalanx\r\nX-Injected: yes"
        with pytest.raises(Unavailable, match="line break"):
            await port.bind("team", "a", "uid-a", "node-1")
    assert requests == []


async def test_the_timeout_counts_the_wait_for_a_free_connection() -> None:
    gate = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await gate.wait()
        return web.json_response({}, status=201)

    async with serving(slow) as (url, _):
        writes = Http1(url, None, most=1)
        try:
            first = asyncio.ensure_future(writes.request("POST", "/a", {}, b"{}", timeout=30))
            await eventually(lambda: writes._slots.value == 0, what="the one connection to be taken")
            with pytest.raises(TimeoutError):
                await writes.request("POST", "/b", {}, b"{}", timeout=0.2)
            gate.set()
            assert (await first).status == 201
        finally:
            gate.set()
            await writes.close()
