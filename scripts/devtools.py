"""Headless Chromium driven over the DevTools protocol: a page's JavaScript evaluated, waited on, and a
screenshot taken. Only what the browser test needs; aiohttp's WebSocket client speaks the protocol."""

from __future__ import annotations

import base64
import itertools
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
from anyio.abc import Process

#: Debian's package (``apt-get install chromium``), where the browser test looks first.
CHROMIUM = "/usr/bin/chromium"
#: A headless browser that stays offline: no background connections, no updates, no first-run pages.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1400,1000", "--remote-debugging-port=0",
)  # fmt: skip


def chromium() -> str | None:
    """Where Chromium is, if it is installed."""
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command, answered (events in between are passed over)."""
        ask = next(self._ids)
        await self._socket.send_json({"id": ask, "method": method, "params": params})
        while True:
            message = await self._socket.receive_json(timeout=30)
            if message.get("id") == ask:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('exception', {})}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, *, what: str, timeout: float = 30.0) -> Any:
        """The expression's value once it is truthy (the page polls its server every 2 s)."""
        with anyio.move_on_after(timeout):
            while not (value := await self.evaluate(expression)):
                await anyio.sleep(0.1)
            return value
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    async def screenshot(self) -> bytes:
        result = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(result["data"])


class Browser:
    @staticmethod
    @asynccontextmanager
    async def open(executable: str | None, url: str, scratch: Path) -> AsyncIterator[Page]:
        """Chromium showing ``url``, a fresh profile in ``scratch``; stopped on exit."""
        if executable is None:
            raise AssertionError("Chromium is not installed: apt-get install chromium (scripts/test does, as root)")
        command = [executable, *FLAGS, f"--user-data-dir={scratch / 'profile'}", url]
        async with await anyio.open_process(command) as process:
            try:
                port = await _devtools_port(process)
                async with aiohttp.ClientSession() as http:
                    async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                        targets = await response.json()
                    target = next(t for t in targets if t.get("type") == "page")
                    async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                        yield Page(socket)
            finally:
                process.kill()


async def _devtools_port(process: Process) -> int:
    """The port Chromium says it listens on (``DevTools listening on ws://127.0.0.1:PORT/...``)."""
    assert process.stderr is not None
    seen = b""
    with anyio.fail_after(30):
        async for chunk in process.stderr:
            seen += chunk
            marker = seen.find(b"DevTools listening on ws://")
            if marker >= 0 and b"\n" in seen[marker:]:
                line = seen[marker:].split(b"\n", 1)[0].decode()
                return int(line.split("ws://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    raise AssertionError(f"Chromium did not start: {seen.decode(errors='replace')[-500:]}")
