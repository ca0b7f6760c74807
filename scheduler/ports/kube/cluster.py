"""``KubeCluster``: the cluster port over HTTP, with raw JSON throughout.

Every request goes through the client's REST layer (``rest_client.request``, the aiohttp session, TLS and
proxy of the client's configuration) with ``_preload_content=False``, its token taken as ``call_api`` takes
it (the refresh hook of exec plugins and OIDC included), but without ``call_api``'s generic parameter
handling, which cost about a fifth of a request's CPU; responses are read as JSON (not into generated
models, which is much faster for watches, and avoids kubernetes_asyncio 36's failure to read Binding
responses).
With raw responses the client does not raise on error statuses, so every status is checked here and
turned into a ``scheduler.ports.errors`` exception, once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from scheduler.ports.errors import PortError, Unavailable, from_status
from scheduler.ports.port import OPENED, PODS, ApiResource, Change, Listing

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_CORE_GROUPS = frozenset({"", "events.k8s.io", "coordination.k8s.io"})


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


def _resolve_proxy_once(api: ApiClient) -> None:
    """Look up the environment's proxy for the API server once, not on every request.

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True``, which makes every request hop
    to a thread twice (for ``~/.netrc`` and for ``HTTPS_PROXY``/``NO_PROXY``): about a tenth of the
    scheduler's CPU when binding. The API server's address does not change, so its proxy is resolved
    here and the session is reopened on the same connector without the per-request look-ups. An explicit
    ``proxy-url`` in the kubeconfig still wins; ``~/.netrc`` is not read, as kubectl does not read it.
    """
    rest = api.rest_client
    session: aiohttp.ClientSession = rest.pool_manager
    if not session.trust_env or session.closed:
        return
    if not rest.proxy:
        try:
            proxy, auth = get_env_proxy_for_url(URL(str(api.configuration.host or "")))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": auth.encode()}
    connector = session.connector
    session.detach()
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)


class KubeCluster:
    """The cluster port on a kubernetes_asyncio ``ApiClient`` (see the module docstring)."""

    def __init__(self, api: ApiClient, *, request_timeout: float = 30.0) -> None:
        self.api = api
        self.request_timeout = request_timeout
        _resolve_proxy_once(api)

    async def close(self) -> None:
        await self.api.close()

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
        config = self.api.configuration
        headers = {**self.api.default_headers, "Accept": "application/json", "Content-Type": content_type}
        try:
            if "BearerToken" in config.api_key:
                # As call_api authenticates: the refresh hook keeps an exec plugin's or OIDC token current.
                token = await config.get_api_key_with_prefix("BearerToken")
                if token:
                    headers["authorization"] = token
            response: aiohttp.ClientResponse = await self.api.rest_client.request(
                method,
                f"{config.host}{path}",
                query_params=dict(query) if query else None,  # (no name is given twice)
                headers=headers,
                body=body,
                _preload_content=False,
                _request_timeout=timeout or self.request_timeout,
            )
        except ApiException as error:
            raise from_status(error.status or 503, str(error.reason)) from error
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise Unavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if 200 <= response.status < 300:
            return response
        try:
            text = await response.text()
            status = json.loads(text) if text else {}
        except (ValueError, aiohttp.ClientError):
            status = {}
        finally:
            response.release()
        message = status.get("message") if isinstance(status, Mapping) else None
        retry_after = response.headers.get("Retry-After")
        raise from_status(
            response.status,
            str(message or f"{method} {path}: HTTP {response.status}"),
            retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
        )

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self._request(method, path, **kwargs)
        try:
            data: dict[str, Any] = json.loads(await response.read())
        except (TimeoutError, ValueError, aiohttp.ClientError) as error:
            raise Unavailable(f"{method} {path}: unreadable response: {error}") from error
        finally:
            response.release()
        return data

    async def served(self) -> set[tuple[str, str, str]]:
        found: set[tuple[str, str, str]] = set()
        core = await self._json("GET", "/api")
        for version in core.get("versions", []):
            listing = await self._json("GET", f"/api/{version}")
            found |= {("", version, item["name"]) for item in listing.get("resources", [])}
        groups = await self._json("GET", "/apis")
        for group in groups.get("groups", []):
            for version in group.get("versions", []):
                try:
                    listing = await self._json("GET", f"/apis/{group['name']}/{version['version']}")
                except PortError:
                    continue  # an aggregated API that is down does not stop discovery of the rest
                found |= {(group["name"], version["version"], item["name"]) for item in listing.get("resources", [])}
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
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError) as error:
                    raise Unavailable(f"watch {resource}: {type(error).__name__}: {error}") from error
                if not line:
                    return
                try:
                    event = json.loads(line)
                except ValueError as error:
                    raise Unavailable(f"watch {resource}: malformed event {line[:80]!r}") from error
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise from_status(int(obj.get("code") or 500), str(obj.get("message") or "watch error"))
                yield Change(type=str(kind), object=obj)
        finally:
            response.release()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        response = await self._request("POST", _path(PODS, namespace, name, "binding"), body=body)
        response.release()

    async def patch_status(
        self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        kind = STRATEGIC_MERGE_PATCH if resource.group in _CORE_GROUPS else MERGE_PATCH
        return await self._json(
            "PATCH", _path(resource, namespace, name, "status"), body=dict(patch), content_type=kind
        )

    async def create(self, resource: ApiResource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._json("POST", _path(resource, namespace), body=dict(body))

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]:
        return await self._json("GET", _path(resource, namespace, name))

    async def update(self, resource: ApiResource, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._json("PUT", _path(resource, namespace, name), body=dict(body))

    async def patch(self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self._json("PATCH", _path(resource, namespace, name), body=dict(patch), content_type=MERGE_PATCH)

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        response = await self._request("DELETE", _path(resource, namespace, name), body=body)
        response.release()
