"""``KubeCluster``: the cluster port over HTTP, with raw JSON throughout.

Reads and watches go out on one aiohttp session that the port owns, writes on the port's own HTTP/1.1
connections (``http1.py``; aiohttp's when a proxy stands between), with the connection's TLS, proxy and
credentials (``connection.py``); bodies are written and responses read as JSON, not through
kubernetes_asyncio's generated models and parameter handling (much faster for watches and binds, and
kubernetes_asyncio 36 fails to read Binding responses). The session does not consult the environment at
each request (``trust_env``, which hops to a thread twice a request for ``~/.netrc`` and the proxy
variables): the environment's proxy for the API server is looked up once, here.
Every error status is checked here and turned into a ``scheduler.ports.errors`` exception, once.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import AsyncIterator, Collection, Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
import anyio
import orjson
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

import scheduler
from scheduler.ports.errors import PortError, Unavailable, from_status
from scheduler.ports.kube.connection import Connection
from scheduler.ports.kube.http1 import Http1
from scheduler.ports.port import OPENED, PODS, ApiResource, Binding, Change, Listing, Outcomes

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: As kubernetes_asyncio sized its pool: the watches (one connection each) and the writes together.
CONNECTIONS = 100
#: The writes' own connections (``http1.py``), beside those: a write takes a few milliseconds, so that 64 carry
#: thousands a second, and a server is not handed a connection per write in flight.
WRITE_CONNECTIONS = 64
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


def _proxy(connection: Connection) -> tuple[str | None, dict[str, str] | None]:
    """The proxy to reach the API server through, and its headers: the kubeconfig's ``proxy-url``, else the
    environment's (``HTTPS_PROXY``/``HTTP_PROXY``, unless ``NO_PROXY`` names the server), looked up once.
    ``~/.netrc`` is not read, as kubectl does not read it."""
    if connection.proxy:
        return connection.proxy, None
    url = URL(connection.host)
    if _in_no_proxy_network(url.host or ""):
        return None, None
    try:
        proxy, auth = get_env_proxy_for_url(url)
    except LookupError:
        return None, None
    return str(proxy), ({"Proxy-Authorization": auth.encode()} if auth is not None else None)


def _in_no_proxy_network(host: str) -> bool:
    """Whether ``NO_PROXY`` names a network (``10.0.0.0/8``) that holds the API server's address, as Go's
    proxy rules read it; Python's read only names and addresses, and a cluster's service network is a range."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    for entry in (os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or "").split(","):
        if "/" not in entry:
            continue
        try:
            if address in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


class KubeCluster:
    """The cluster port on an API server reached through ``connection`` (see the module docstring)."""

    def __init__(self, connection: Connection, *, request_timeout: float = 30.0) -> None:
        self.connection = connection
        self.request_timeout = request_timeout
        self.proxy, self.proxy_headers = _proxy(connection)
        self._headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        self._session: aiohttp.ClientSession | None = None
        self._writes: Http1 | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:  # opened in the event loop that uses it
            tls: Any = self.connection.tls if self.connection.tls is not None else True
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONNECTIONS, ssl=tls), trust_env=False, read_bufsize=2**21
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None  # a later request opens a new one
            await session.close()
        if self._writes is not None:
            writes, self._writes = self._writes, None
            await writes.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> aiohttp.ClientResponse:
        if self.connection.read_only and method not in READ_METHODS:
            raise ReadOnlyViolation(f"refused {method} {path}: this connection only reads the cluster")
        session = self._open()
        headers = {**self._headers, "Content-Type": content_type}
        url = self.connection.host + path + (f"?{urlencode(query)}" if query else "")
        try:
            authorization = await self.connection.credentials.authorization()
            if authorization:
                headers["Authorization"] = authorization
            response = await session.request(
                method,
                URL(url, encoded=True),
                data=orjson.dumps(body) if body is not None else None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout or self.request_timeout),
                proxy=self.proxy,
                proxy_headers=self.proxy_headers,
                server_hostname=self.connection.server_name,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise Unavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if 200 <= response.status < 300:
            return response
        try:
            body = await response.read()
        except aiohttp.ClientError:
            body = b""
        finally:
            response.release()
        raise _refused(method, path, response.status, body, response.headers.get("Retry-After"))

    async def _write(self, method: str, path: str, body: Any, *, content_type: str = "application/json") -> bytes:
        """A write's answer: its body, or the server's refusal raised as the port's error. Written by
        :class:`Http1` (a third of aiohttp's CPU) unless a proxy stands between."""
        if self.proxy is not None:
            response = await self._request(method, path, body=body, content_type=content_type)
            try:
                return await response.read()
            except (TimeoutError, aiohttp.ClientError) as error:
                raise Unavailable(f"{method} {path}: unreadable response: {error}") from error
            finally:
                response.release()
        if self.connection.read_only:
            raise ReadOnlyViolation(f"refused {method} {path}: this connection only reads the cluster")
        headers = {**self._headers, "Content-Type": content_type}
        try:
            if self._writes is None:
                self._writes = Http1(
                    self.connection.host,
                    self.connection.tls,
                    server_name=self.connection.server_name,
                    most=WRITE_CONNECTIONS,
                )
            authorization = await self.connection.credentials.authorization()
            if authorization:
                headers["Authorization"] = authorization
            answer = await self._writes.request(
                method, path, headers, orjson.dumps(body) if body is not None else None, timeout=self.request_timeout
            )
        except (TimeoutError, OSError, ValueError) as error:  # ValueError: a server URL aiohttp finds invalid too
            raise Unavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if 200 <= answer.status < 300:
            return answer.body
        raise _refused(method, path, answer.status, answer.body, answer.retry_after)

    async def _written(self, method: str, path: str, body: Any, *, content_type: str = "application/json") -> Any:
        """A write's answer read as JSON: the object as the server stored it."""
        answer = await self._write(method, path, body, content_type=content_type)
        try:
            return orjson.loads(answer)
        except ValueError as error:
            raise Unavailable(f"{method} {path}: unreadable response: {error}") from error

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self._request(method, path, **kwargs)
        try:
            data: dict[str, Any] = orjson.loads(await response.read())
        except (TimeoutError, ValueError, aiohttp.ClientError) as error:
            raise Unavailable(f"{method} {path}: unreadable response: {error}") from error
        finally:
            response.release()
        return data

    async def served(self, groups: Collection[str] | None = None) -> set[tuple[str, str, str]]:
        """Every (group, version, resource) the server serves, of the core API and ``groups`` (all when None).
        The group versions are read all at once: read one after another they were the longest wait of a
        start."""
        roots: dict[str, dict[str, Any]] = {}

        async def root(path: str) -> None:
            roots[path] = await self._json("GET", path)

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

    async def watch(self, resource: ApiResource, resource_version: str, *, timeout: float) -> AsyncIterator[Change]:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(int(timeout))),
        ]
        response = await self._request("GET", _path(resource), query=query, timeout=timeout + 30)
        try:
            yield Change(type=OPENED, object={})
            started: list[bytes] = []  # the parts of an event whose end has not come yet
            waiting = 0  # their bytes
            while True:
                # What has arrived, split into events here: a burst of events (a gang's binds) costs one
                # read, not one read a line.
                try:
                    chunk = await response.content.readany()
                except (TimeoutError, aiohttp.ClientError) as error:
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
            response.release()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self._write("POST", _path(PODS, namespace, name, "binding"), body)

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
        await self._write("DELETE", _path(resource, namespace, name), body)


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
