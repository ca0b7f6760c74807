"""The small HTTP/1.1 server under ``/metrics``, ``/healthz``, ``/readyz`` and the live view (``health.py``),
and under a recorded run's view (``frontends/playback.py``).

It answers GET and HEAD from a table of routes and changes nothing, so it needs none of a web framework:
aiohttp's server and client cost a fifth of the CPU from exec to the first bind to import, and the
scheduler no longer needs them for anything else. Each connection answers one request after another
(kept alive as HTTP/1.1 keeps it); a request that carries a body, or any method but GET and HEAD, is
refused and its connection closed.
"""

from __future__ import annotations

import asyncio
import socket
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote, urlsplit

import anyio
import structlog

log = structlog.get_logger("phalanx.httpd")

#: The longest line of a request's head, the longest head, and the most header lines it may have.
MAX_LINE = 16 * 1024
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
#: How long a connection may sit without a whole request's head, and the longest an answer may take to be
#: taken by its client: as long as aiohttp kept a connection alive.
IDLE_S = 75.0
#: The connections served at once; one more is answered 503 and closed. A scraper, two probes and a few
#: people's browsers need a handful.
MAX_CONNECTIONS = 64
#: Bodies shorter than this are sent as they are, even to a client that takes gzip.
COMPRESS_FROM = 1024
#: How long the server waits, when stopped, for its connections to end once told to.
SHUTDOWN_S = 1.0


class ListenError(Exception):
    """The address given cannot be listened on (taken, or not this host's)."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"{address}: {why}")
        self.address = address


@dataclass(frozen=True, slots=True)
class Request:
    path: str  # percent-decoded
    query: Mapping[str, str] = field(default_factory=dict)  # a name given twice: its first value
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    remote: str | None = None  # the peer's address; None for a Unix socket


@dataclass(slots=True)
class Response:
    body: bytes = b""
    status: int = 200
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    compressible: bool = False  # sent gzipped to a client that takes gzip


class Refused(Exception):
    """An answer that is not the one asked for (403, 404, 503...), raised by a handler."""

    def __init__(self, status: int, text: str = "", headers: Mapping[str, str] | None = None) -> None:
        super().__init__(text or _default_text(status))
        self.status = status
        self.text = text or _default_text(status)
        self.headers = dict(headers or {})


Handler = Callable[[Request], Awaitable[Response]]


def text(body: str, status: int = 200) -> Response:
    return Response(body.encode(), status)


async def serve(
    routes: Mapping[str, Handler],
    address: str,
    started: Callable[[str], None],
    *,
    any_host: str,
    headers: Mapping[str, str],
) -> None:
    """Serve ``routes`` on ``address`` (HOST:PORT; an empty host is ``any_host``, port 0 picks one) until
    cancelled; ``started`` gets the URL to reach it by. A route ending in ``/`` (not ``/`` itself) answers
    every path under it. ``headers`` go with every answer, refusals included. Raises :class:`ListenError`
    when it cannot listen there."""
    host, _, port = address.rpartition(":")
    host = (host or any_host).strip("[]")
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, int(port)))
    except OSError as error:
        listener.close()
        raise ListenError(address, error.strerror or str(error)) from error
    site = _Site(routes, headers)
    server = await asyncio.start_server(site.converse, sock=listener, limit=MAX_LINE)
    try:
        started(url_of("127.0.0.1" if host == "0.0.0.0" else host, listener.getsockname()[1]))
        await anyio.sleep_forever()
    finally:
        server.close()
        with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_S):
            await site.close()


def url_of(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _TooLarge(ValueError):
    """A request's head past :data:`MAX_HEAD` or :data:`MAX_HEADERS` lines."""


class _Site:
    def __init__(self, routes: Mapping[str, Handler], headers: Mapping[str, str]) -> None:
        self.routes = routes
        self.prefixes = sorted((path for path in routes if path.endswith("/") and path != "/"), key=len, reverse=True)
        self.headers = dict(headers)
        self.conversations: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """End every connection: a handler still answering is cancelled."""
        conversations = list(self.conversations)
        for conversation in conversations:
            conversation.cancel()
        await asyncio.gather(*conversations, return_exceptions=True)

    async def converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the requests of one connection, one after another, until either side closes it."""
        conversation = asyncio.current_task()
        assert conversation is not None
        self.conversations.add(conversation)
        try:
            if len(self.conversations) > MAX_CONNECTIONS:
                await self._refuse(writer, Refused(503, "503: too many connections\n"))
                return
            await self._requests(reader, writer)
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or did not take its answer in time
        except asyncio.CancelledError:
            # The server stops (close()). Ended quietly: asyncio's streams of Python 3.11 log an error for a
            # connection's task that ends cancelled. Nothing else awaits this task's outcome.
            pass
        except Exception:
            log.exception("connection failed")
        finally:
            self.conversations.discard(conversation)
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        remote = peer[0] if isinstance(peer, tuple) else None
        while True:
            try:
                async with asyncio.timeout(IDLE_S):
                    head = await _read_head(reader)
            except (TimeoutError, asyncio.IncompleteReadError):
                return
            except _TooLarge as error:
                await self._refuse(writer, Refused(431, f"431: {error}\n"))
                return
            except ValueError as error:  # a line past MAX_LINE, no HTTP request line, a malformed header
                await self._refuse(writer, Refused(400, f"400: Bad Request: {error}\n"))
                return
            method, target, version, fields = head
            keep = version == "HTTP/1.1" and "close" not in fields.get("connection", "").lower()
            if method not in ("GET", "HEAD"):  # its body, if any, is not read
                await self._refuse(writer, Refused(405, headers={"Allow": "GET, HEAD"}), method)
                return
            if fields.get("transfer-encoding") or fields.get("content-length", "0") != "0":
                await self._refuse(writer, Refused(400, "400: a GET has no body\n"), method)
                return
            try:
                parts = urlsplit(target)
                query: dict[str, str] = {}
                for name, value in parse_qsl(parts.query, keep_blank_values=True):
                    query.setdefault(name, value)
            except ValueError as error:  # a target urlsplit cannot read (``//[x``)
                await self._refuse(writer, Refused(400, f"400: Bad Request: {error}\n"), method)
                return
            response = await self._answer(method, unquote(parts.path), query, fields, remote)
            await self._send(writer, method, fields, response, keep)
            if not keep:
                return

    async def _answer(
        self, method: str, path: str, query: dict[str, str], fields: Mapping[str, str], remote: str | None
    ) -> Response:
        handler = self.routes.get(path) or next(
            (self.routes[prefix] for prefix in self.prefixes if path.startswith(prefix)), None
        )
        if handler is None:
            return _refusal(Refused(404))
        try:
            return await handler(Request(path, query, fields, remote))
        except Refused as refusal:
            return _refusal(refusal)
        except Exception:
            log.exception("request failed", method=method, path=path)
            return _refusal(Refused(500))

    async def _refuse(self, writer: asyncio.StreamWriter, refusal: Refused, method: str = "GET") -> None:
        """Answer ``refusal`` and close the connection after it."""
        await self._send(writer, method, {}, _refusal(refusal), False)

    async def _send(
        self, writer: asyncio.StreamWriter, method: str, fields: Mapping[str, str], response: Response, keep: bool
    ) -> None:
        body = response.body
        said = {**response.headers, **self.headers}
        if response.status in (204, 304):
            body = b""
        else:
            said["Content-Type"] = response.content_type
            if response.compressible and len(body) >= COMPRESS_FROM:
                said["Vary"] = "Accept-Encoding"
                if _takes_gzip(fields.get("accept-encoding", "")):
                    compressor = zlib.compressobj(wbits=31)  # the gzip format
                    body = compressor.compress(body) + compressor.flush()
                    said["Content-Encoding"] = "gzip"
            said["Content-Length"] = str(len(body))
        if not keep:
            said["Connection"] = "close"
        lines = [f"HTTP/1.1 {response.status} {_phrase(response.status)}"]
        lines += [f"{name}: {value}" for name, value in said.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if method == "HEAD" else body))
        async with asyncio.timeout(IDLE_S):
            await writer.drain()


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, str, dict[str, str]]:
    """A request's method, target, version and headers (names in lower case; a name given twice, its values
    joined with commas)."""
    request_line = await reader.readline()
    while request_line in (b"\r\n", b"\n"):  # a stray line break between requests is allowed
        request_line = await reader.readline()
    if not request_line.endswith(b"\n"):
        raise asyncio.IncompleteReadError(request_line, None)
    words = request_line.decode("latin-1").split()
    if len(words) != 3 or not words[2].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1.x request line")
    given: dict[str, list[str]] = {}
    size, lines = len(request_line), 0
    while (line := await reader.readline()) not in (b"\r\n", b"\n"):
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        size, lines = size + len(line), lines + 1
        if size > MAX_HEAD or lines > MAX_HEADERS:
            raise _TooLarge(f"a request's head is at most {MAX_HEAD} bytes in {MAX_HEADERS} lines")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name.strip() or name != name.strip():
            raise ValueError(f"malformed header {line[:40]!r}")
        given.setdefault(name.lower(), []).append(value.strip())
    return words[0], words[1], words[2], {name: ", ".join(values) for name, values in given.items()}


def _refusal(refusal: Refused) -> Response:
    return Response(refusal.text.encode(), refusal.status, headers=refusal.headers)


def _takes_gzip(accepted: str) -> bool:
    for entry in accepted.lower().split(","):
        coding, _, weight = entry.partition(";")
        if coding.strip() == "gzip":
            return weight.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _default_text(status: int) -> str:
    return f"{status}: {_phrase(status)}\n"
