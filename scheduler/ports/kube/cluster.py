"""``KubeCluster``: the cluster port over HTTP, with raw JSON throughout.

Every request goes out on the port's own HTTP/1.1 connections (``http1.py``), with the connection's TLS,
proxy and credentials (``connection.py``); bodies are written and answers read as JSON, not through
kubernetes_asyncio's generated models and parameter handling (much faster for watches and binds, and
kubernetes_asyncio 36 fails to read Binding responses). The environment's proxy for the API server is
looked up once, here. Every error status is checked here and turned into a ``scheduler.ports.errors``
exception, once.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
from collections.abc import AsyncGenerator, Collection, Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import anyio
import orjson

import scheduler
from scheduler.ports.errors import NotFound, PortError, Unavailable, from_status
from scheduler.ports.kube.connection import Connection, KubeConfigError
from scheduler.ports.kube.http1 import Http1
from scheduler.ports.port import OPENED, PODS, ApiResource, Binding, Change, Listing, Outcomes

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The connections kept for requests (each watch has one more of its own): a write takes a few milliseconds,
#: so that 64 carry thousands a second, and a server is not handed a connection per write in flight.
CONNECTIONS = 64
#: The longest watch event read: an object is at most etcd's 1.5 MB, and a page of events far less.
MAX_EVENT = 64 * 2**20
_CORE_GROUPS = frozenset({"", "events.k8s.io", "coordination.k8s.io"})


class ReadOnlyViolation(RuntimeError):
    """Something tried to write through a connection that only reads (``phalanx dry-run``, ``explain``)."""


#: Taken from the package, not from its installed metadata: reading that costs every start 40 ms of CPU.
USER_AGENT = f"phalanx/{scheduler.__version__}"


def _path(resource: ApiResource, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    base = f"/api/{resource.version}" if not resource.group else f"/apis/{resource.group}/{resource.version}"
    if namespace and resource.namespaced:
        base += f"/namespaces/{namespace}"
    base += f"/{resource.plural}"
    if name:
        base += f"/{name}"
    if sub:
        base += f"/{sub}"
    return base


def _proxy(connection: Connection, environ: Mapping[str, str] = os.environ) -> tuple[str | None, dict[str, str] | None]:
    """The proxy to reach the API server through, and its headers: the kubeconfig's ``proxy-url``, else the
    environment's, read by Go's rules as kubectl reads them (:func:`_env_proxy`), looked up once.
    ``~/.netrc`` is not read, as kubectl does not read it. Raises :class:`KubeConfigError` for a proxy that
    is not ``http://`` or ``https://`` (a SOCKS proxy): no request could be made."""
    if connection.proxy:
        proxy, source = connection.proxy, "the kubeconfig's proxy-url"
    else:
        found = _env_proxy(connection.host, environ)
        if found is None:
            return None, None
        proxy, source = found
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()  # no credentials in the message
        raise KubeConfigError(f"proxy {shown!r} ({source}): only http:// and https:// proxies are supported")
    if parts.username is None:
        return urlunsplit(parts), None
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    return urlunsplit(bare), {"Proxy-Authorization": "Basic " + base64.b64encode(credentials).decode()}


def _env_proxy(server: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The environment's proxy for ``server`` and the variable naming it, by the rules of Go's
    ``httpproxy`` (kubectl, client-go): ``HTTPS_PROXY`` for an https server, ``HTTP_PROXY`` for http, the
    upper-case name before the lower-case one; never for ``localhost`` or a loopback address; not where
    ``NO_PROXY`` names the server (see :func:`_bypassed`)."""
    url = urlsplit(server)
    host = (url.hostname or "").lower()
    name = "HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY"
    proxy = environ.get(name) or environ.get(name.lower())
    if not proxy or host == "localhost" or _loopback(host):
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    if _bypassed(host, port, no_proxy):
        return None
    return proxy, name


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names ``host``: ``*``; an address or a network (``10.0.0.0/8``) that holds it; a
    name, itself or any name under it (``example.com``: ``example.com`` and ``api.example.com``); a name with
    a leading dot (or ``*.``), only the names under it. An entry with a port matches that port only."""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (entry.strip().lower() for entry in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                if address is not None and address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, given_port = _split_port(entry)
        if given_port is not None and given_port != port:
            continue
        try:
            named = ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            named = None
        if named is not None:  # an address matches only itself
            if named == address:
                return True
            continue
        if name.startswith("*."):
            name = name[1:]
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host:port`` (``[::1]:6443`` for an IPv6 address) split; an entry without a port, or a bare IPv6
    address, whole."""
    host, colon, port = entry.rpartition(":")
    if not colon or not port.isdigit() or (":" in host and not host.endswith("]")):
        return entry, None
    return host, int(port)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class KubeCluster:
    """The cluster port on an API server reached through ``connection`` (see the module docstring)."""

    def __init__(self, connection: Connection, *, request_timeout: float = 30.0) -> None:
        self.connection = connection
        self.request_timeout = request_timeout
        self.proxy, self.proxy_headers = _proxy(connection)
        # No Accept-Encoding: as kube-scheduler, Phalanx does not ask for gzip (on a cluster's network it
        # costs the server and Phalanx more CPU than the bytes it saves take to carry).
        self._headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        self._http: Http1 | None = None

    def _open(self) -> Http1:
        """Raises ``ValueError`` for a server or proxy URL that cannot be reached (no host, a SOCKS proxy)."""
        if self._http is None:
            self._http = Http1(
                self.connection.host,
                self.connection.tls,
                server_name=self.connection.server_name,
                most=CONNECTIONS,
                proxy=self.proxy,
                proxy_headers=self.proxy_headers,
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None  # a later request opens new connections
            await http.close()

    async def _said(self, content_type: str | None = None) -> dict[str, str]:
        """A request's headers: what every request says, its body's type, and the credentials of the moment."""
        headers = {**self._headers, "Content-Type": content_type} if content_type else dict(self._headers)
        authorization = await self.connection.credentials.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def _send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        """An answer's body, or the server's refusal raised as the port's error."""
        if self.connection.read_only and method not in READ_METHODS:
            raise ReadOnlyViolation(f"refused {method} {path}: this connection only reads the cluster")
        target = path + (f"?{urlencode(query)}" if query else "")
        try:
            headers = await self._said(content_type if body is not None else None)
            answer = await self._open().request(
                method, target, headers, orjson.dumps(body) if body is not None else None, timeout=self.request_timeout
            )
        except (TimeoutError, OSError, ValueError) as error:  # ValueError: a URL with no host, a SOCKS proxy
            raise Unavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if 200 <= answer.status < 300:
            return answer.body
        raise _refused(method, path, answer.status, answer.body, answer.retry_after)

    async def _written(self, method: str, path: str, body: Any, *, content_type: str = "application/json") -> Any:
        """A write's answer read as JSON: the object as the server stored it."""
        answer = await self._send(method, path, body, content_type=content_type)
        try:
            return orjson.loads(answer)
        except ValueError as error:
            raise Unavailable(f"{method} {path}: unreadable response: {error}") from error

    async def _json(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        answer = await self._send(method, path, query=query)
        try:
            data: dict[str, Any] = orjson.loads(answer)
        except ValueError as error:
            raise Unavailable(f"{method} {path}: unreadable response: {error}") from error
        return data

    async def served(self, groups: Collection[str] | None = None) -> set[tuple[str, str, str]]:
        """Every (group, version, resource) the server serves, of the core API and ``groups`` (all when None).
        The group versions are read all at once: read one after another they were the longest wait of a
        start."""
        roots: dict[str, dict[str, Any]] = {}

        async def root(path: str) -> None:
            try:
                roots[path] = await self._json("GET", path)
            except NotFound as error:
                raise NotFound(f"{error}: {self.connection.host} is not a Kubernetes API server") from error
            except Unavailable as error:
                if not isinstance(error.__cause__, json.JSONDecodeError):  # (orjson's is one)
                    raise
                # It answered, and not in JSON: a web server, a login page, a proxy's error page.
                raise Unavailable(
                    f"{error}: {self.connection.host} is not a Kubernetes API server"
                ) from error.__cause__

        await _all(root("/api"), root("/apis"))
        found: set[tuple[str, str, str]] = set()

        async def resources(group: str, version: str) -> None:
            path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
            try:
                listing = await self._json("GET", path)
            except PortError:
                if not group:
                    raise
                return  # an aggregated API that is down does not stop discovery of the rest
            found.update((group, version, item["name"]) for item in listing.get("resources", []))

        versions = [("", version) for version in roots["/api"].get("versions", [])]
        for group in roots["/apis"].get("groups", []):
            if groups is not None and group["name"] not in groups:
                continue
            versions += [(group["name"], version["version"]) for version in group.get("versions", [])]
        # Every call is made only now: a malformed document above raised before any call was begun.
        await _all(*(resources(group, version) for group, version in versions))
        return found

    async def list(
        self, resource: ApiResource, *, limit: int | None = None, continue_token: str | None = None
    ) -> Listing:
        query = [("limit", str(limit))] if limit else []
        if continue_token:
            query.append(("continue", continue_token))
        data = await self._json("GET", _path(resource), query=query)
        items = data.get("items") or []
        for item in items:  # list items of built-in types carry no apiVersion/kind; the gang sources need them
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        metadata = data.get("metadata") or {}
        return Listing(
            items=items,
            resource_version=str(metadata.get("resourceVersion", "")),
            continue_token=metadata.get("continue") or None,
        )

    async def watch(
        self, resource: ApiResource, resource_version: str, *, timeout: float
    ) -> AsyncGenerator[Change, None]:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(int(timeout))),
        ]
        path = _path(resource)
        try:
            stream = await self._open().stream(
                f"{path}?{urlencode(query)}",
                await self._said(),
                timeout=timeout + 30,
                head_timeout=self.request_timeout,
            )
        except (TimeoutError, OSError, ValueError) as error:
            raise Unavailable(f"GET {path}: {type(error).__name__}: {error}") from error
        try:
            if not 200 <= stream.status < 300:
                try:
                    body = await stream.whole()
                except (TimeoutError, OSError):
                    body = b""
                raise _refused("GET", path, stream.status, body, stream.retry_after)
            yield Change(type=OPENED, object={})
            started: list[bytes] = []  # the parts of an event whose end has not come yet
            waiting = 0  # their bytes
            while True:
                # What has arrived, split into events here: a burst of events (a gang's binds) costs one
                # read, not one read a line.
                try:
                    chunk = await stream.read()
                except (TimeoutError, OSError) as error:
                    raise Unavailable(f"watch {resource}: {type(error).__name__}: {error}") from error
                if chunk and b"\n" not in chunk:
                    started.append(chunk)
                    waiting += len(chunk)
                    if waiting > MAX_EVENT:
                        raise Unavailable(f"watch {resource}: an event longer than {MAX_EVENT} bytes")
                    continue
                lines = b"".join([*started, chunk]).split(b"\n") if chunk else [b"".join(started), b""]
                rest = lines.pop()
                started, waiting = ([rest], len(rest)) if rest else ([], 0)
                for line in lines:
                    if line.strip():
                        yield _watch_event(resource, line)
                if not chunk:
                    return
        finally:
            stream.close()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self._send("POST", _path(PODS, namespace, name, "binding"), body)

    async def bind_all(self, bindings: Sequence[Binding]) -> Outcomes:
        if self.connection.read_only:
            raise ReadOnlyViolation("refused binding pods: this connection only reads the cluster")
        outcomes: Outcomes = [None] * len(bindings)

        async def one(i: int, binding: Binding) -> None:
            try:
                await self.bind(*binding)
            except PortError as error:
                outcomes[i] = error

        async with anyio.create_task_group() as group:
            for i, binding in enumerate(bindings):
                group.start_soon(one, i, binding)
        return outcomes

    async def patch_status(
        self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        kind = STRATEGIC_MERGE_PATCH if resource.group in _CORE_GROUPS else MERGE_PATCH
        return await self._written(  # type: ignore[no-any-return]
            "PATCH", _path(resource, namespace, name, "status"), dict(patch), content_type=kind
        )

    async def create(self, resource: ApiResource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._written("POST", _path(resource, namespace), dict(body))  # type: ignore[no-any-return]

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]:
        return await self._json("GET", _path(resource, namespace, name))

    async def update(self, resource: ApiResource, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._written("PUT", _path(resource, namespace, name), dict(body))  # type: ignore[no-any-return]

    async def patch(self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        path = _path(resource, namespace, name)
        return await self._written("PATCH", path, dict(patch), content_type=MERGE_PATCH)  # type: ignore[no-any-return]

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        await self._send("DELETE", _path(resource, namespace, name), body)


async def _all(*calls: Coroutine[Any, Any, None]) -> None:
    """Await every call concurrently, each to its end; then raise the first exception any raised, as itself (not in
    a group: callers handle a port's errors one at a time). None is cut short: a request aborted mid-answer is
    noise in the server's logs, and the others end about as soon."""
    failed: list[Exception] = []

    async def one(call: Coroutine[Any, Any, None]) -> None:
        try:
            await call
        except Exception as error:
            failed.append(error)

    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(one, call)
    if failed:
        raise failed[0]


def _refused(method: str, path: str, code: int, body: bytes, retry_after: str | None) -> PortError:
    """The server's refusal as the port's error: its Status's message, and a 429's ``Retry-After``."""
    try:
        status = orjson.loads(body) if body else {}
    except ValueError:
        status = {}
    message = status.get("message") if isinstance(status, Mapping) else None
    return from_status(
        code,
        str(message or f"{method} {path}: HTTP {code}"),
        retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
    )


def _watch_event(resource: ApiResource, line: bytes) -> Change:
    try:
        event = orjson.loads(line)
    except ValueError as error:
        raise Unavailable(f"watch {resource}: malformed event {line[:80]!r}") from error
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        raise from_status(int(obj.get("code") or 500), str(obj.get("message") or "watch error"))
    return Change(type=str(kind), object=obj)
