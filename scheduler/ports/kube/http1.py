"""The port's HTTP/1.1: one request at a time on each of a few connections kept alive, and a watch's
answer read as it comes.

A request to the API server is a request line, a few headers and perhaps a JSON body; its answer a status
line, a few headers and a body of a known length, in chunks, or (a watch) chunks that go on for minutes.
aiohttp spent about 230 us of CPU on a binding, a third of a pod's whole cost, and importing it a fifth of
the CPU to the first bind; written and read here, a binding costs about 100 us and nothing is imported
but the standard library's asyncio and ssl.

A proxy is reached as client-go reaches one: a plain-HTTP server's requests are sent to the proxy whole
(the target in absolute form), an HTTPS server's through a ``CONNECT`` tunnel, TLS to the server inside it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import anyio

#: A connection idle this long is not used again (the server may be closing it as it is reused): as long as
#: aiohttp kept one.
IDLE_S = 15.0
#: How much of an answer is read ahead, at most, before the reader stops taking more from the socket; also
#: the longest line of an answer's head.
BUFFER = 2**21
#: Asked again once when a kept-alive connection turns out closed before any answer, as aiohttp and Go's
#: transport do: the methods that may be repeated (a binding or an Event created twice is not retried
#: here; its caller retries, and finds a second binding refused as a conflict).
REPEATABLE = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: The longest chunk-size line: a size in hex and perhaps an extension.
MAX_SIZE_LINE = 4096
#: TCP keepalive on every connection: after this long without a byte either way, a probe every
#: ``KEEPALIVE_INTERVAL_S``, and the connection is dropped after ``KEEPALIVE_PROBES`` unanswered. A watch, or
#: a request awaiting its answer, on a server whose machine vanished without closing it (a node lost, a
#: partition) ends within a minute and is resumed, not at its timeout (a watch's: 5 min 30 s). Behind a
#: proxy the probes reach the proxy only; a server process that hangs on a live machine still answers them.
#: (client-go gets much the same from HTTP/2's pings, 30 s then 15 s.)
KEEPALIVE_IDLE_S = 30
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 3


class Broken(ConnectionError):
    """The answer could not be read: the server closed the connection before its end, or sent no HTTP."""


class Unanswered(Broken):
    """The connection failed before a byte of the answer came: the server may not have read the request."""


class ProxyUnreachable(ConnectionError):
    """No connection could be made to the proxy the requests go through (``HTTPS_PROXY``, ``proxy-url``)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    retry_after: str | None = None


@dataclass(slots=True)
class _Line:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0


@dataclass(frozen=True, slots=True)
class _Head:
    """An answer's status and what its headers say."""

    status: int
    keep: bool  # whether the connection may carry another request
    length: int | None  # the body's length, if given
    chunked: bool
    retry_after: str | None


@dataclass(frozen=True, slots=True)
class _Proxy:
    host: str
    port: int
    tls: ssl.SSLContext | None  # None: the proxy is spoken to in plain HTTP
    headers: dict[str, str]  # said to the proxy: its credentials


class Http1:
    """Requests to the server at ``url`` (``https://host:port``), over at most ``most`` connections (a watch's
    stream has its own besides), through ``proxy`` (``http://`` or ``https://``, credentials in it or in
    ``proxy_headers``) if given. Raises ``ValueError`` for a URL with no host, a port out of range, or a
    proxy of another kind (a SOCKS proxy)."""

    def __init__(
        self,
        url: str,
        tls: ssl.SSLContext | None,
        *,
        server_name: str | None = None,
        most: int,
        proxy: str | None = None,
        proxy_headers: Mapping[str, str] | None = None,
    ) -> None:
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"no host in {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = f"{host}:{parts.port}" if parts.port else host  # as aiohttp sends it, no credentials
        self.prefix = parts.path.rstrip("/")  # a server behind a gateway: https://rancher/k8s/clusters/c-1
        if tls is None and parts.scheme == "https":
            tls = ssl.create_default_context()
        self.tls = tls
        self.server_name = (server_name or self.host).rstrip(".")  # a certificate names no trailing dot
        self.proxy = _proxy(proxy, proxy_headers, tls) if proxy else None
        # A plain-HTTP server behind a proxy is asked in absolute form, the proxy's credentials with each request.
        forwarded = self.proxy is not None and tls is None
        self._origin = f"http://{self.authority}" if forwarded else ""
        self._extra = dict(self.proxy.headers) if self.proxy is not None and forwarded else {}
        self._idle: list[_Line] = []  # oldest first
        self._slots = anyio.Semaphore(most)
        self._closed = False

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, *, timeout: float
    ) -> Answer:
        """``target``: the path and query, encoded. Raises ``OSError`` (``Broken`` among them) or
        ``TimeoutError`` when no answer came whole within ``timeout`` (a free connection waited for included);
        the connection is then dropped."""
        data = self._request(method, target, headers, body)
        with anyio.fail_after(timeout):
            async with self._slots:
                try:
                    return await self._once(data)
                except Unanswered:
                    if method not in REPEATABLE:
                        raise
                return await self._once(data, fresh=True)

    async def stream(
        self, target: str, headers: dict[str, str], *, timeout: float, head_timeout: float | None = None
    ) -> Stream:
        """A GET whose answer is read as it comes, on a connection of its own while it lasts (a watch holds
        one for minutes), within ``timeout`` in all and its head within ``head_timeout`` (a server gone with
        a kept connection acknowledges nothing, and keepalive probes only a connection with nothing unsent).
        Raises as :meth:`request` until the head of the answer is read.

        The connection is a kept one if one is idle (a watch follows its list, whose connection has just come
        back), and goes back to be kept when the answer ended cleanly (a watch's timeout): over TLS, each new
        connection is a handshake that costs both ends CPU, and a start that opened one per watch paid some
        40 of them before its first bind."""
        deadline = asyncio.get_running_loop().time() + timeout
        data = self._request("GET", target, headers, None)
        with anyio.fail_after(min(timeout, head_timeout or timeout)):
            kept = self._kept()
            if kept is not None:
                try:
                    return Stream(kept, await _open(kept, data), deadline, self._keep)
                except Unanswered:
                    pass  # closed by the server as it was taken: asked again on a new connection
            line = await self._connect()
            return Stream(line, await _open(line, data), deadline, self._keep)

    def _keep(self, line: _Line) -> None:
        """Keep a connection whose answer ended cleanly for the next request."""
        if self._closed:
            line.writer.close()
            return
        line.idle_since = time.monotonic()
        self._idle.append(line)

    async def close(self) -> None:
        self._closed = True  # connections still answering are closed when they are done
        idle, self._idle = self._idle, []
        for line in idle:
            line.writer.close()

    def _request(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        if self._extra:
            headers = {**headers, **self._extra}
        return _request(method, self._origin + self.prefix + target, self.authority, headers, body)

    async def _once(self, data: bytes, *, fresh: bool = False) -> Answer:
        line = None if fresh else self._kept()
        reused = line is not None
        try:
            if line is None:
                line = await self._connect()
            answer, keep = await _exchange(line, data)
        except BaseException as error:
            if line is not None:
                line.writer.close()
            if isinstance(error, Unanswered) and not reused:
                raise Broken(str(error)) from error  # a new connection: nothing to ask again on
            raise
        if keep and not self._closed:
            line.idle_since = time.monotonic()
            self._idle.append(line)
        else:
            line.writer.close()
        return answer

    def _kept(self) -> _Line | None:
        now = time.monotonic()
        while self._idle and now - self._idle[0].idle_since >= IDLE_S:
            self._idle.pop(0).writer.close()
        while self._idle:
            line = self._idle.pop()  # the most recently used: the likeliest still open
            if not line.reader.at_eof():
                return line
            line.writer.close()
        return None

    async def _connect(self) -> _Line:
        if self.proxy is None:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=self.tls,
                server_hostname=self.server_name if self.tls is not None else None,
                limit=BUFFER,
            )
            _keep_alive(writer)
            return _Line(reader, writer)
        proxy = self.proxy
        try:
            reader, writer = await asyncio.open_connection(
                proxy.host, proxy.port, ssl=proxy.tls, server_hostname=proxy.host if proxy.tls else None, limit=BUFFER
            )
        except ssl.SSLError as error:  # said as the proxy's: the server's address appears nowhere in the error
            raise ProxyUnreachable(f"TLS with the proxy {proxy.host}:{proxy.port} failed: {error}") from error
        except OSError as error:
            raise ProxyUnreachable(f"the proxy {proxy.host}:{proxy.port} could not be reached: {error}") from error
        _keep_alive(writer)
        line = _Line(reader, writer)
        if self.tls is None:
            return line  # requests go to the proxy, in absolute form
        try:
            await self._tunnel(line, proxy)
            await writer.start_tls(self.tls, server_hostname=self.server_name)
        except BaseException:
            writer.close()
            raise
        return line

    async def _tunnel(self, line: _Line, proxy: _Proxy) -> None:
        """Ask the proxy for a tunnel to the server; raises ``Broken`` when it refuses."""
        lines = [f"CONNECT {self._tunnelled()} HTTP/1.1", f"Host: {self._tunnelled()}"]
        lines += [f"{name}: {value}" for name, value in proxy.headers.items()]
        await _send(line, ("\r\n".join(lines) + "\r\n\r\n").encode())
        try:
            status_line = await line.reader.readline()
            if not status_line:
                raise Broken(f"the proxy {proxy.host}:{proxy.port} closed the connection before it answered")
            head = await _head(line.reader, status_line)
        except (asyncio.IncompleteReadError, ValueError) as error:
            raise Broken(f"the proxy {proxy.host}:{proxy.port} did not answer CONNECT in HTTP/1.1: {error}") from error
        if not 200 <= head.status < 300:
            raise Broken(f"the proxy {proxy.host}:{proxy.port} refused a tunnel to {self.host}: HTTP {head.status}")

    def _tunnelled(self) -> str:
        """The server as a tunnel is asked for: host and port, always both."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _keep_alive(writer: asyncio.StreamWriter) -> None:
    """Turn TCP keepalive on for the connection's socket, with the probes' timing where the system has it
    (macOS names the idle time ``TCP_KEEPALIVE``). A socket that refuses (one the peer just reset) is left
    as it is: the request on it fails or succeeds by itself."""
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    timing = [(idle, KEEPALIVE_IDLE_S), (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_S)]
    timing.append((getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES))
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in timing:
            if option is not None:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)


class Stream:
    """An answer read as it comes (a watch's events): its status, then its body piece by piece."""

    def __init__(self, line: _Line, head: _Head, deadline: float, keep: Callable[[_Line], None]) -> None:
        """``deadline``: on the event loop's clock; ``keep`` takes the connection back if the answer ended
        cleanly when the stream is closed."""
        self.status = head.status
        self.retry_after = head.retry_after
        self._line: _Line | None = line
        self._keep = keep
        # Whether the connection may carry another request once the body is read: not when the body ends
        # with the connection.
        self._reusable = head.keep and (head.chunked or head.length is not None or head.status in (204, 304))
        self._left = head.length  # of a body of known length, the bytes still to come
        self._chunks = _Chunks() if head.chunked else None
        self._ended = head.status in (204, 304) or head.length == 0
        # One timer for the whole answer, which cuts the connection at the deadline: a timeout around every
        # read cost a watch's event more than the read itself.
        self._expired = False
        self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._expired = True
        if self._line is not None:
            self._line.writer.transport.abort()  # the read waiting, if any, ends with the connection

    async def read(self) -> bytes:
        """What has come of the body since the last read (at least a byte); ``b""`` at its end. Raises
        ``Broken`` when the server breaks off and ``TimeoutError`` past the stream's timeout."""
        if self._line is None:
            raise Broken("the answer was closed")
        while not self._ended:
            try:
                data = await self._line.reader.read(BUFFER if self._left is None else min(self._left, BUFFER))
            except OSError as error:
                if self._expired:
                    raise TimeoutError("the answer did not end within its timeout") from error
                raise Broken(f"the connection failed in the middle of the answer: {error}") from error
            if self._expired:
                raise TimeoutError("the answer did not end within its timeout")
            if not data:
                if self._chunks is not None or self._left is not None:
                    raise Broken("the server closed the connection in the middle of its answer")
                self._ended = True  # the body ends with the connection
                break
            if self._left is not None:
                self._left -= len(data)
                self._ended = self._left == 0
                return data
            if self._chunks is None:
                return data
            try:
                piece = self._chunks.feed(data)
            except ValueError as error:
                raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error
            self._ended = self._chunks.ended
            if piece:
                return piece
        return b""

    async def whole(self) -> bytes:
        """The rest of the body."""
        parts = []
        while piece := await self.read():
            parts.append(piece)
        return b"".join(parts)

    def close(self) -> None:
        """Done with the answer: its connection is kept if the answer was read to its end, else closed. Once:
        the connection is no longer the stream's (read again, the stream is at its end)."""
        line, self._line = self._line, None
        if line is None:
            return
        self._timer.cancel()
        clean = self._ended and self._reusable and not self._expired
        if clean and (self._chunks is None or not self._chunks.rest) and not line.reader.at_eof():
            self._keep(line)
        else:
            line.writer.close()


class _Chunks:
    """Chunked transfer coding taken off a body as its bytes come, in whatever pieces they come: a whole
    answer's (a list's may be thousands of chunks, one an object) or a watch's, read a burst at a time."""

    def __init__(self) -> None:
        self.ended = False  # the last chunk and the trailer after it have been read
        self.rest = b""  # what came after the end: nothing, from a server that waits for the next request
        self._pending = b""  # the start of a line (a size or a trailer's) whose end has not come
        self._left = 0  # of the current chunk's data, the bytes still to come
        self._crlf = 0  # of the line break after a chunk's data, the bytes still to come
        self._trailer = False  # the last chunk has come: lines of trailer follow, up to an empty one

    def feed(self, data: bytes) -> bytes:
        """The chunks' data in ``data``; ``ValueError`` on framing that is not chunked coding."""
        if self._pending:
            data, self._pending = self._pending + data, b""
        pieces = []
        at, size = 0, len(data)
        while at < size and not self.ended:
            if self._left:
                end = min(at + self._left, size)
                pieces.append(data[at:end])
                self._left -= end - at
                at = end
                if not self._left:
                    self._crlf = 2
            elif self._crlf:
                end = min(at + self._crlf, size)
                if data[at:end] != b"\r\n"[2 - self._crlf :][: end - at]:
                    raise ValueError("a chunk does not end with CRLF")
                self._crlf -= end - at
                at = end
            else:
                end = data.find(b"\n", at)
                if end < 0:
                    self._pending = data[at:]
                    if len(self._pending) > MAX_SIZE_LINE:
                        raise ValueError("a chunk size line too long")
                    break
                line, at = data[at:end], end + 1
                if self._trailer:
                    self.ended = line in (b"", b"\r")
                else:
                    self._left = _chunk_size(line)
                    self._trailer = self._left == 0
        if self.ended:
            self.rest = data[at:]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _proxy(url: str, headers: Mapping[str, str] | None, tls: ssl.SSLContext | None) -> _Proxy:
    """An ``https://`` proxy is checked with the server's TLS settings (its authority, the client's
    certificate), as client-go checks one; the system's authorities where the server has no TLS."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"proxy {url!r}: only http:// and https:// proxies are supported")
    said = dict(headers or {})
    if parts.username is not None and not any(name.lower() == "proxy-authorization" for name in said):
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        said["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    if parts.scheme == "https":
        tls = tls or ssl.create_default_context()
        return _Proxy(parts.hostname, parts.port or 443, tls, said)
    return _Proxy(parts.hostname, parts.port or 80, None, said)


def _request(method: str, target: str, authority: str, headers: dict[str, str], body: bytes | None) -> bytes:
    if any("\r" in text or "\n" in text for text in (target, *headers, *headers.values())):
        raise Broken("a header or the path holds a line break; the request is not sent")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")  # UTF-8, as aiohttp encodes headers


async def _send(line: _Line, data: bytes) -> None:
    try:
        line.writer.write(data)
        await line.writer.drain()
    except ConnectionError as error:
        raise Unanswered(f"the connection failed before the server answered: {error}") from error


async def _asked(line: _Line, data: bytes) -> bytes:
    """Send a request and read the status line of its answer. Raises ``Unanswered`` when the connection
    failed before a byte of the answer came (the server may not have read the request)."""
    await _send(line, data)
    try:
        status_line = await line.reader.readline()
    except (ConnectionError, asyncio.IncompleteReadError) as error:
        raise Unanswered(f"the connection failed before the server answered: {error}") from error
    except ValueError as error:  # a status line past BUFFER
        raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error
    if not status_line:
        raise Unanswered("the server closed the connection before it answered")
    return status_line


async def _exchange(line: _Line, data: bytes) -> tuple[Answer, bool]:
    """Send one request and read its answer; whether the connection may carry another."""
    status_line = await _asked(line, data)
    try:
        return await _answer(line.reader, status_line, head_only=data.startswith(b"HEAD "))
    except (asyncio.IncompleteReadError, ConnectionError) as error:
        raise Broken("the server closed the connection in the middle of its answer") from error
    except ValueError as error:  # a line past BUFFER, a status or length that is no number
        raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error


async def _open(line: _Line, data: bytes) -> _Head:
    """Send a request whose answer is read as it comes, and read the head of that answer. Raises
    ``Unanswered`` when the connection failed before a byte of it came; the connection is closed on any
    failure."""
    try:
        status_line = await _asked(line, data)
        try:
            head = await _head(line.reader, status_line)
            return await _read_head(line.reader) if 100 <= head.status < 200 else head
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            raise Broken("the server closed the connection in the middle of its answer") from error
        except ValueError as error:  # a line past BUFFER, a status that is no number
            raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error
    except BaseException:
        line.writer.close()
        raise


async def _read_head(reader: asyncio.StreamReader) -> _Head:
    """The head of the final answer, interim ones (``100 Continue``, ``103``) passed over."""
    while True:
        status_line = await reader.readline()
        if not status_line:
            raise asyncio.IncompleteReadError(b"", None)
        head = await _head(reader, status_line)
        if not 100 <= head.status < 200:
            return head


async def _answer(reader: asyncio.StreamReader, status_line: bytes, *, head_only: bool) -> tuple[Answer, bool]:
    head = await _head(reader, status_line)
    if 100 <= head.status < 200:
        head = await _read_head(reader)
    keep = head.keep
    if head.status in (204, 304) or head_only:
        body = b""
    elif head.chunked:
        body, clean = await _chunked(reader)
        keep = keep and clean
    elif head.length is not None:
        body = await reader.readexactly(head.length)
    else:
        body, keep = await reader.read(), False  # the body ends with the connection
    return Answer(head.status, body, head.retry_after), keep


async def _head(reader: asyncio.StreamReader, status_line: bytes) -> _Head:
    version, code, *_ = status_line.split(None, 2)
    if not version.startswith(b"HTTP/1.") or not code.isdigit() or len(code) != 3:
        raise ValueError(f"status line {status_line[:80]!r}")
    keep = version == b"HTTP/1.1"
    length: int | None = None
    chunked = False
    retry_after = None
    while (header := await reader.readline()) not in (b"\r\n", b"\n"):
        if not header.endswith(b"\n"):
            raise asyncio.IncompleteReadError(header, None)
        name, _, value = header.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            if not value.isdigit():
                raise ValueError(f"Content-Length {value[:40]!r}")
            length = int(value)
        elif name == b"transfer-encoding":
            codings = [coding.strip() for coding in value.lower().split(b",")]
            if any(coding not in (b"chunked", b"identity") for coding in codings):
                raise ValueError(f"Transfer-Encoding {value[:40]!r}: only chunked is read")
            chunked = b"chunked" in codings
        elif name == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            keep = False if b"close" in tokens else (keep or b"keep-alive" in tokens)
        elif name == b"retry-after" and retry_after is None:
            retry_after = value.decode("latin-1")
    return _Head(int(code), keep, None if chunked else length, chunked, retry_after)


async def _chunked(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """A chunked body, read a burst at a time; whether the connection may carry another (nothing came
    after its end)."""
    chunks, parts = _Chunks(), []
    while not chunks.ended:
        data = await reader.read(BUFFER)
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
        parts.append(chunks.feed(data))
    return b"".join(parts), not chunks.rest


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > 16 or any(byte not in b"0123456789abcdefABCDEF" for byte in text):
        raise ValueError(f"chunk size {text[:40]!r}")
    return int(text, 16)
