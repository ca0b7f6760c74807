"""``/metrics`` (Prometheus text), ``/healthz`` (the process is alive) and ``/readyz`` (every informer has
listed once and is currently talking to the API server)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST

from scheduler.metrics import Metrics


class ListenError(Exception):
    """The address given for /metrics, /healthz and /readyz cannot be listened on (taken, or not this host's)."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"{address}: {why}")
        self.address = address


class HealthServer:
    def __init__(self, address: str, metrics: Metrics, ready: Callable[[], tuple[bool, str]]) -> None:
        self.address = address
        self.metrics = metrics
        self.ready = ready
        self.url = ""

    async def _metrics(self, _: web.Request) -> web.Response:
        response = web.Response(body=self.metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        ready, why = self.ready()
        return web.Response(text=f"{why}\n", status=200 if ready else 503)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        host, _, port = self.address.rpartition(":")
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host or "0.0.0.0", int(port)))
        except OSError as error:
            listener.close()
            await runner.cleanup()
            raise ListenError(self.address, error.strerror or str(error)) from error
        try:
            await web.SockSite(runner, listener).start()
            bound = listener.getsockname()[1]
            self.url = f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{bound}"
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()
