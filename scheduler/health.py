"""``/metrics`` (Prometheus text), ``/healthz`` (the process is alive) and ``/readyz`` (every informer has
listed once and is currently talking to the API server); and, unless ``server.view`` is off, the live view:
the page at ``/`` (``web/``: HTML, CSS and JavaScript served from the package, nothing from elsewhere) and
the pictures it draws, ``/api/cluster`` and ``/api/gang?key=`` (``picture.py``).

Everything here (served by ``httpd.py``) answers GET (and HEAD) only and changes nothing; every answer says
it may not be framed by another origin nor run anything but this server's own files.
"""

from __future__ import annotations

import functools
import ipaddress
import math
from collections.abc import Callable, Collection
from importlib import resources

import anyio
from anyio.abc import TaskStatus

from scheduler.httpd import Handler, Refused, Request, Response, serve, text
from scheduler.metrics import CONTENT_TYPE, Metrics
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


class HealthServer:
    def __init__(
        self,
        address: str,
        metrics: Metrics,
        ready: Callable[[], tuple[bool, str]],
        pictures: Pictures | None = None,
        *,
        view_from_anywhere: bool = False,
        view_hosts: Collection[str] = (),
    ) -> None:
        """Without ``pictures`` the live view is off: ``/`` and ``/api/`` answer 404. It answers requests from
        loopback only (``kubectl port-forward``), addressed to localhost, a loopback address or one of
        ``view_hosts``, unless ``view_from_anywhere``."""
        self.view_from_anywhere = view_from_anywhere
        self.view_hosts = frozenset(_host_name(host) for host in view_hosts)
        self.address = address
        self.metrics = metrics
        self.ready = ready
        self.pictures = pictures
        self.url = ""

    async def _metrics(self, _: Request) -> Response:
        return Response(self.metrics.exposition(), content_type=CONTENT_TYPE)

    async def _healthz(self, _: Request) -> Response:
        return text("ok\n")

    async def _readyz(self, _: Request) -> Response:
        ready, why = self.ready()
        return text(f"{why}\n", status=200 if ready else 503)

    def _may_view(self, request: Request) -> None:
        if self.view_from_anywhere:
            return
        if not _loopback(request.remote):
            raise Refused(
                403,
                "the live view answers on loopback only (kubectl port-forward); server.viewFrom: anywhere "
                "serves it to every address that reaches this port\n",
            )
        host = request.headers.get("host")
        if host is not None and not _local(name := _host_name(host)) and name not in self.view_hosts:
            # A page of another site, its name rebound to 127.0.0.1, would otherwise read the view through the
            # browser of someone running kubectl port-forward (DNS rebinding): that browser sends its own Host.
            # (A request without one, HTTP/1.0, comes from no browser.)
            raise Refused(
                403,
                f"the live view answers requests addressed to localhost only, not {name[:100]!r} (open it at "
                "http://localhost:PORT/, PORT the one kubectl port-forward listens on); server.viewHosts names "
                "others\n",
            )

    async def _page(self, request: Request) -> Response:
        self._may_view(request)
        return page(request)

    async def _cluster(self, request: Request) -> Response:
        assert self.pictures is not None
        self._may_view(request)
        try:
            etag, body = self.pictures.latest()
        except Busy as busy:
            raise Refused(503, f"{busy}\n", _retry(busy)) from None
        if request.headers.get("if-none-match") == etag:
            return Response(status=304, headers={"ETag": etag, "Cache-Control": "no-store"})
        # A picture of 10,000 nodes is half a megabyte of JSON, a tenth gzipped.
        return Response(
            body,
            content_type="application/json",
            headers={"ETag": etag, "Cache-Control": "no-store"},
            compressible=True,
        )

    async def _gang(self, request: Request) -> Response:
        assert self.pictures is not None
        self._may_view(request)
        try:
            body = self.pictures.gang(request.query.get("key", ""))
        except Busy as busy:
            raise Refused(429, f"{busy}\n", _retry(busy)) from None
        if body is None:
            raise Refused(404, "no such gang\n")
        return Response(body, content_type="application/json", headers={"Cache-Control": "no-store"})

    def routes(self) -> dict[str, Handler]:
        found: dict[str, Handler] = {"/metrics": self._metrics, "/healthz": self._healthz, "/readyz": self._readyz}
        if self.pictures is not None:
            found |= {"/": self._page, "/view/": self._page, "/api/cluster": self._cluster, "/api/gang": self._gang}
        return found

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        def started(url: str) -> None:
            self.url = url
            task_status.started()

        await serve(self.routes(), self.address, started, any_host="0.0.0.0", headers=SAFETY)


def page(request: Request) -> Response:
    """The view's page at ``/``, or its script or style under ``/view/``."""
    name = "index.html" if request.path == "/" else request.path.removeprefix("/view/")
    if name not in (SERVED_UNDER_VIEW if request.path != "/" else ASSETS):
        raise Refused(404)
    return Response(assets()[name], content_type=f"{ASSETS[name]}; charset=utf-8")


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


def _host_name(host: str) -> str:
    """A Host header's name, without its port, brackets or final dot, in lower case."""
    name = host.strip().lower()
    if name.startswith("["):  # an IPv6 address, perhaps with a port after the bracket
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name.removesuffix(".")


def _local(name: str) -> bool:
    """Whether a name is this machine's: ``localhost`` (or a name under it), a loopback address, or the
    unspecified one a browser opens as this machine (``0.0.0.0``)."""
    return name in ("localhost", "0.0.0.0", "::") or name.endswith(".localhost") or _loopback(name)


def _retry(busy: Busy) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(busy.retry_after)))}
