"""The writes' HTTP/1.1: one request at a time on each of a few connections kept alive.

A write (a binding, an Event, a status patch) is a request line, a few headers and a JSON body; its answer
a status line, a few headers and a body of a known length (or chunks). aiohttp spends about 230 us of CPU
on such a request, a third of a pod's whole cost; written and read here, about 100 us. The port sends its
writes here when no proxy stands between it and the server (a proxy's CONNECT tunnel is aiohttp's); its
reads and watches stay with aiohttp.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

#: A connection idle this long is not used again (the server may be closing it as it is reused): as long as
#: aiohttp keeps one.
IDLE_S = 15.0
#: The longest head line (status line or header) read: a server's are a few hundred bytes.
MAX_HEAD = 64 * 1024
#: Asked again once when a kept-alive connection turns out closed before any answer, as aiohttp does: the
#: methods that may be repeated (a binding or an Event created twice is not retried here; its caller
#: retries, and finds a second binding refused as a conflict).
REPEATABLE = frozenset({"PUT", "DELETE"})


class Broken(ConnectionError):
    """The answer could not be read: the server closed the connection before its end, or sent no HTTP."""


class Unanswered(Broken):
    """The connection failed before a byte of the answer came: the server may not have read the request."""


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


class Http1:
    """Requests to the server at ``url`` (``https://host:port``), over at most ``most`` connections. Raises
    ``ValueError`` for a URL with no host or a port out of range."""

    def __init__(self, url: str, tls: ssl.SSLContext | None, *, server_name: str | None = None, most: int) -> None:
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"no host in {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = f"{host}:{parts.port}" if parts.port else host  # as aiohttp sends it, no credentials
        self.tls = tls
        self.server_name = (server_name or self.host).rstrip(".")  # a certificate names no trailing dot
        self._idle: list[_Line] = []  # oldest first
        self._slots = anyio.Semaphore(most)
        self._closed = False

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, *, timeout: float
    ) -> Answer:
        """``target``: the path and query, encoded. Raises ``OSError`` (``Broken`` among them) or
        ``TimeoutError`` when no answer came whole within ``timeout`` (a free connection waited for included);
        the connection is then dropped."""
        data = _request(method, target, self.authority, headers, body)
        with anyio.fail_after(timeout):
            async with self._slots:
                try:
                    return await self._once(data)
                except Unanswered:
                    if method not in REPEATABLE:
                        raise
                return await self._once(data, fresh=True)

    async def close(self) -> None:
        self._closed = True  # connections still answering are closed when they are done
        idle, self._idle = self._idle, []
        for line in idle:
            line.writer.close()

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
        if self.tls is None:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        else:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.server_name, limit=MAX_HEAD
            )
        return _Line(reader, writer)


def _request(method: str, target: str, authority: str, headers: dict[str, str], body: bytes | None) -> bytes:
    if any("\r" in text or "\n" in text for text in (target, *headers, *headers.values())):
        raise Broken("a header or the path holds a line break; the request is not sent")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")  # UTF-8, as aiohttp encodes headers


async def _exchange(line: _Line, data: bytes) -> tuple[Answer, bool]:
    """Send one request and read its answer; whether the connection may carry another."""
    try:
        line.writer.write(data)
        await line.writer.drain()
        status_line = await line.reader.readline()
    except (ConnectionError, asyncio.IncompleteReadError) as error:
        raise Unanswered(f"the connection failed before the server answered: {error}") from error
    except ValueError as error:  # a status line past MAX_HEAD
        raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error
    if not status_line:
        raise Unanswered("the server closed the connection before it answered")
    try:
        return await _answer(line.reader, status_line)
    except asyncio.IncompleteReadError as error:
        raise Broken("the server closed the connection in the middle of its answer") from error
    except ValueError as error:  # a line past MAX_HEAD, a status or length that is no number
        raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error


async def _answer(reader: asyncio.StreamReader, status_line: bytes) -> tuple[Answer, bool]:
    while True:
        status, keep, length, chunked, retry_after = await _head(reader, status_line)
        if not 100 <= status < 200:
            break
        status_line = await reader.readline()  # an interim answer (100 Continue, 103): the final one follows
        if not status_line:
            raise asyncio.IncompleteReadError(b"", None)
    if status in (204, 304):
        body = b""
    elif chunked:
        body = await _chunks(reader)
    elif length is not None:
        body = await reader.readexactly(length)
    else:
        body, keep = await reader.read(), False  # the body ends with the connection
    return Answer(status, body, retry_after), keep


async def _head(reader: asyncio.StreamReader, status_line: bytes) -> tuple[int, bool, int | None, bool, str | None]:
    """The status code, and what the headers say: whether the connection stays open, the
    body's length or whether it comes in chunks, and ``Retry-After``."""
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
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            keep = False if b"close" in tokens else (keep or b"keep-alive" in tokens)
        elif name == b"retry-after" and retry_after is None:
            retry_after = value.decode("latin-1")
    return int(code), keep, length, chunked, retry_after


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readline()
        if not size_line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(size_line, None)
        size_text = size_line.split(b";", 1)[0].strip()
        if not size_text or any(byte not in b"0123456789abcdefABCDEF" for byte in size_text):
            raise ValueError(f"chunk size {size_text[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            while (trailer := await reader.readline()) not in (b"\r\n", b"\n"):
                if not trailer.endswith(b"\n"):
                    raise asyncio.IncompleteReadError(trailer, None)
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("a chunk does not end with CRLF")
