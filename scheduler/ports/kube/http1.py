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
#: The longest head (status line and headers) read: a server's are a few hundred bytes.
MAX_HEAD = 64 * 1024


class Broken(ConnectionError):
    """The answer could not be read: the server closed the connection before its end, or sent no HTTP."""


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
    """Requests to the server at ``url`` (``https://host:port``), over at most ``most`` connections."""

    def __init__(self, url: str, tls: ssl.SSLContext | None, *, server_name: str | None = None, most: int) -> None:
        parts = urlsplit(url)
        if parts.hostname is None:
            raise ValueError(f"no host in {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.authority = parts.netloc.encode("idna")
        self.tls = tls
        self.server_name = server_name
        self._idle: list[_Line] = []
        self._slots = anyio.Semaphore(most)

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, *, timeout: float
    ) -> Answer:
        """``target``: the path and query, encoded. Raises ``OSError`` (``Broken`` among them) or
        ``TimeoutError`` when no answer came whole; the connection is then dropped."""
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.authority.decode()}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"Content-Length: {len(body or b'')}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        async with self._slots:
            line = self._kept()
            try:
                with anyio.fail_after(timeout):
                    if line is None:
                        line = await self._connect()
                    answer, keep = await _exchange(line, data)
            except BaseException:
                if line is not None:
                    line.writer.close()
                raise
            if keep:
                line.idle_since = time.monotonic()
                self._idle.append(line)
            else:
                line.writer.close()
            return answer

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for line in idle:
            line.writer.close()

    def _kept(self) -> _Line | None:
        now = time.monotonic()
        while self._idle:
            line = self._idle.pop()
            if now - line.idle_since < IDLE_S and not line.reader.at_eof():
                return line
            line.writer.close()
        return None

    async def _connect(self) -> _Line:
        if self.tls is None:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        else:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.server_name or self.host, limit=MAX_HEAD
            )
        return _Line(reader, writer)


async def _exchange(line: _Line, data: bytes) -> tuple[Answer, bool]:
    """Send one request and read its answer; whether the connection may carry another."""
    try:
        return await _answer(line, data)
    except asyncio.IncompleteReadError as error:
        raise Broken("the server closed the connection in the middle of its answer") from error
    except ValueError as error:  # a line past MAX_HEAD, or a status or length that is no number
        raise Broken(f"the server's answer is not HTTP/1.1: {error}") from error


async def _answer(line: _Line, data: bytes) -> tuple[Answer, bool]:
    line.writer.write(data)
    await line.writer.drain()
    reader = line.reader
    status_line = await reader.readline()
    if not status_line.endswith(b"\n"):
        raise Broken("the server closed the connection before it answered")
    version, status_text, *_ = status_line.split(None, 2)
    status = int(status_text)
    length: int | None = None
    chunked = False
    keep = version == b"HTTP/1.1"
    retry_after = None
    while (header := await reader.readline()) not in (b"\r\n", b"\n"):
        if not header.endswith(b"\n"):
            raise Broken("the server closed the connection in the middle of its answer's headers")
        name, _, value = header.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection" and value.lower() in (b"close", b"keep-alive"):
            keep = value.lower() == b"keep-alive"
        elif name == b"retry-after":
            retry_after = value.decode("latin-1")
    if chunked:
        body = await _chunks(reader)
    elif length is not None:
        body = await reader.readexactly(length)
    elif status in (204, 304) or status < 200:
        body = b""
    else:
        body, keep = await reader.read(), False  # the body ends with the connection
    return Answer(status, body, retry_after), keep


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readline()
        if not size_line.endswith(b"\n"):
            raise Broken("the server closed the connection in the middle of its answer")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (trailer := await reader.readline()) not in (b"\r\n", b"\n"):
                if not trailer:
                    raise Broken("the server closed the connection in the middle of its answer")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the chunk's CRLF
