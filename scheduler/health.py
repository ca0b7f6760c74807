"""``/metrics`` (Prometheus text), ``/healthz`` (the process is alive) and ``/readyz`` (every informer has
listed once and is currently talking to the API server); and, unless ``server.view`` is off, the live view:
the page at ``/`` (``web/``: HTML, CSS and JavaScript served from the package, nothing from elsewhere) and
the pictures it draws, ``/api/cluster`` and ``/api/gang?key=`` (``picture.py``).

Everything here answers GET (and HEAD) only and changes nothing; every answer says it may not be framed by
another origin nor run anything but this server's own files.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import socket
from collections.abc import Awaitable, Callable
from importlib import resources

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST

from scheduler.metrics import Metrics
from scheduler.picture import Busy, Pictures

#: The view's own files, and their types: nothing else is served from the package.
ASSETS = {"index.html": "text/html", "view.js": "text/javascript", "view.css": "text/css"}
#: What ``/view/`` serves: the page's script and style (the page itself only at ``/``, where its relative
#: addresses resolve).
SERVED_UNDER_VIEW = ("view.js", "view.css")
#: Said on every answer: no framing by other origins, no script, style or connection but this server's.
SAFETY = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class ListenError(Exception):
    """The address given for /metrics, /healthz and /readyz cannot be listened on (taken, or not this host's)."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"{address}: {why}")
        self.address = address


class HealthServer:
    def __init__(
        self,
        address: str,
        metrics: Metrics,
        ready: Callable[[], tuple[bool, str]],
        pictures: Pictures | None = None,
        *,
        view_from_anywhere: bool = False,
    ) -> None:
        """Without ``pictures`` the live view is off: ``/`` and ``/api/`` answer 404. It answers requests from
        loopback only (``kubectl port-forward``) unless ``view_from_anywhere``."""
        self.view_from_anywhere = view_from_anywhere
        self.address = address
        self.metrics = metrics
        self.ready = ready
        self.pictures = pictures
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

    def _may_view(self, request: web.Request) -> None:
        if not self.view_from_anywhere and not _loopback(request.remote):
            raise web.HTTPForbidden(
                text="the live view answers on loopback only (kubectl port-forward); server.viewFrom: anywhere "
                "serves it to every address that reaches this port\n"
            )

    async def _page(self, request: web.Request) -> web.Response:
        self._may_view(request)
        name = request.match_info.get("name", "index.html")
        if name not in ASSETS or ("name" in request.match_info and name not in SERVED_UNDER_VIEW):
            raise web.HTTPNotFound()
        return web.Response(body=assets()[name], content_type=ASSETS[name], charset="utf-8")

    async def _cluster(self, request: web.Request) -> web.Response:
        assert self.pictures is not None
        self._may_view(request)
        try:
            etag, body = self.pictures.latest()
        except Busy as busy:
            raise web.HTTPServiceUnavailable(text=f"{busy}\n", headers=_retry(busy)) from None
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag, "Cache-Control": "no-store"})
        response = web.Response(
            body=body, content_type="application/json", headers={"ETag": etag, "Cache-Control": "no-store"}
        )
        response.enable_compression()  # a picture of 10,000 nodes is half a megabyte of JSON, a tenth gzipped
        return response

    async def _gang(self, request: web.Request) -> web.Response:
        assert self.pictures is not None
        self._may_view(request)
        try:
            body = self.pictures.gang(request.query.get("key", ""))
        except Busy as busy:
            raise web.HTTPTooManyRequests(text=f"{busy}\n", headers=_retry(busy)) from None
        if body is None:
            raise web.HTTPNotFound(text="no such gang\n")
        return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "no-store"})

    def application(self) -> web.Application:
        app = web.Application(middlewares=[safety])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self.pictures is not None:
            app.router.add_get("/", self._page)
            app.router.add_get("/view/{name}", self._page)
            app.router.add_get("/api/cluster", self._cluster)
            app.router.add_get("/api/gang", self._gang)
        return app

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        def started(url: str) -> None:
            self.url = url
            task_status.started()

        await serve_app(self.application(), self.address, started, any_host="0.0.0.0")


async def serve_app(app: web.Application, address: str, started: Callable[[str], None], *, any_host: str) -> None:
    """Serve ``app`` on ``address`` (HOST:PORT; an empty host is ``any_host``, port 0 picks one) until
    cancelled; ``started`` gets the URL to reach it by. :class:`ListenError` when it cannot listen there."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    host, _, port = address.rpartition(":")
    host = host or any_host
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, int(port)))
    except OSError as error:
        listener.close()
        await runner.cleanup()
        raise ListenError(address, error.strerror or str(error)) from error
    try:
        await web.SockSite(runner, listener).start()
        started(url_of("127.0.0.1" if host == "0.0.0.0" else host, listener.getsockname()[1]))
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()


@web.middleware
async def safety(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every answer, errors included, carries :data:`SAFETY`."""
    try:
        response = await handler(request)
    except web.HTTPException as error:
        error.headers.update(SAFETY)
        raise
    response.headers.update(SAFETY)
    return response


@functools.cache
def assets() -> dict[str, bytes]:
    """The view's files, read from the package when first asked for (not at every start: reading them costs
    the start its first bind's CPU)."""
    return {name: (resources.files("scheduler") / "web" / name).read_bytes() for name in ASSETS}


def _loopback(remote: str | None) -> bool:
    """Whether a peer is this pod's loopback (an IPv4 one seen through a dual-stack socket too)."""
    try:
        address = ipaddress.ip_address((remote or "").split("%", 1)[0])
    except ValueError:
        return False  # no address (a Unix socket) is not loopback
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _retry(busy: Busy) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(busy.retry_after)))}


def url_of(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
