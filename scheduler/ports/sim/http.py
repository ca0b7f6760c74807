"""SimCluster over HTTP, in the Kubernetes REST wire format, so that real clients talk to it.

Serves discovery (``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>[/<version>]``), OpenAPI
v3 (``/openapi/v3``) and every enabled resource at its usual path, namespaced or not, with the
subresources it has. Lists take ``labelSelector``, ``fieldSelector``, ``limit`` and ``continue``; watches
(``?watch=1``) stream newline-delimited JSON events and take ``resourceVersion``,
``allowWatchBookmarks`` and ``timeoutSeconds``. Answers are JSON, YAML or server-side Tables as
``Accept`` asks (``scheduler.ports.sim.media``); server-side apply creates or updates. A path the server does
not serve is a 404 and a method a resource does not take a 405. Errors are ``Status`` objects with the
right code.

A watch from a compacted resource version gets ``200`` and an ``ERROR`` event holding a 410
``Status``, exactly as from a real API server; clients relist. Faults (``scheduler.ports.sim.faults``) are
applied to every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from scheduler.ports.sim import media, openapi
from scheduler.ports.sim.faults import Faults
from scheduler.ports.sim.resources import Resource
from scheduler.ports.sim.schema import unknown_fields
from scheduler.ports.sim.selectors import Selector, selector
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import MERGE_PATCH, Store, Watch
from scheduler.ports.sim.tables import table
from scheduler.ports.sim.validation import strict, unknown_pod_fields

_VERBS_COLLECTION = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_NOT_ALLOWED = "the server does not allow this method on the requested resource"
#: The verb of each (method, what the path names): a collection, an object, or one of its subresources.
_VERBS = {
    ("GET", "collection"): "list",
    ("POST", "collection"): "create",
    ("DELETE", "collection"): "deletecollection",
    ("GET", "object"): "get",
    ("PUT", "object"): "update",
    ("PATCH", "object"): "patch",
    ("DELETE", "object"): "delete",
    ("GET", "status"): "get",
    ("PUT", "status"): "update",
    ("PATCH", "status"): "patch",
    ("POST", "binding"): "bind",
}


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def _error(error: ApiError) -> web.Response:
    response = _json(error.status(), error.code)
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _unknown_fields(resource: Resource, body: Any) -> list[str]:
    """The fields of a written object the server does not know (and drops)."""
    if not isinstance(body, Mapping):
        return []
    if resource.schema is not None:
        return unknown_fields(body, resource.schema)
    if resource.kind == "Pod" and not resource.group:
        return unknown_pod_fields(body)
    return []  # SimCluster keeps no schema of other built-in kinds (README: phalanx serve)


def _selector(query: Mapping[str, str], resource: Resource) -> Selector:
    """The label and field selectors a list or watch asks for, with the field labels ``resource`` has."""
    return selector(
        query.get("labelSelector"),
        query.get("fieldSelector"),
        group=resource.group,
        kind=resource.kind,
        namespaced=resource.namespaced,
    )


@dataclass(frozen=True, slots=True)
class _Target:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None


class SimServer:
    """An aiohttp application serving one :class:`Store`. Use :meth:`start` and :meth:`stop`."""

    def __init__(self, store: Store, *, faults: Faults | None = None, bookmark_interval: float = 60.0) -> None:
        self.store = store
        self.faults = faults or Faults()
        self.bookmark_interval = bookmark_interval
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner: web.AppRunner | None = None
        self._streams: set[Watch] = set()
        self.url = ""
        #: Requests served, by HTTP method (tests check that a dry-run only reads).
        self.methods: Counter[str] = Counter()
        #: Resource requests by (RBAC verb, API group, resource[/subresource]), as an audit log would show
        #: them: what a ClusterRole must allow (tests compare it with manifests/rbac.yaml).
        self.audit: Counter[tuple[str, str, str]] = Counter()
        #: ``Authorization`` headers received (a test checks the credentials it gave were the ones used).
        self.authorizations: Counter[str] = Counter()

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, tls: ssl.SSLContext | None = None) -> str:
        """Listen and return the base URL (``http://127.0.0.1:<port>``; ``https://`` with ``tls``)."""
        self._runner = web.AppRunner(self.app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        await web.SockSite(self._runner, listener, ssl_context=tls).start()
        self.url = f"{'https' if tls else 'http'}://{host}:{listener.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        """Stop listening; open watches end at once (their clients see the stream close)."""
        for stream in list(self._streams):
            stream.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- routing -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.methods[request.method] += 1
        try:
            return await self._route(request)
        except ApiError as error:
            return _error(error)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [part for part in request.path.split("/") if part]
        if parts == ["version"]:
            return _json({"major": "1", "minor": "37", "gitVersion": "v1.37.0-phalanx-sim", "platform": "linux/amd64"})
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi(parts[2:])
        if parts == ["api"]:
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return _json(
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [self._group(g) for g in self.store.catalog.groups()],
                }
            )
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            if len(parts) == 2:
                if parts[1] not in self.store.catalog.groups():
                    raise ApiError(404, f"the server could not find the requested resource (group {parts[1]})")
                return _json({"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1])})
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        if not rest:
            return self._resource_list(group, version)
        return await self._serve(request, self._target(group, version, rest))

    def _openapi(self, parts: list[str]) -> web.Response:
        if not parts:
            return _json(openapi.root(self.store.catalog))
        if parts[0] == "api" and len(parts) == 2:
            found = openapi.document(self.store.catalog, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            found = openapi.document(self.store.catalog, parts[1], parts[2])
        else:
            found = None
        if found is None:
            raise ApiError(404, "the server could not find the requested resource")
        return _json(found)

    def _group(self, group: str) -> dict[str, Any]:
        versions = [
            {"groupVersion": f"{group}/{version}", "version": version} for version in self.store.catalog.versions(group)
        ]
        return {"name": group, "versions": versions, "preferredVersion": versions[0]}

    def _resource_list(self, group: str, version: str) -> web.Response:
        resources = [r for r in self.store.catalog.resources if r.group == group and r.version == version]
        if not resources:
            raise ApiError(404, f"the server could not find the requested resource ({group}/{version})")
        entries: list[dict[str, Any]] = []
        for resource in resources:
            entries.append(
                {
                    "name": resource.plural,
                    "singularName": resource.kind.lower(),
                    "namespaced": resource.namespaced,
                    "kind": resource.kind,
                    "verbs": _VERBS_COLLECTION,
                    "shortNames": list(resource.short_names),
                }
            )
            for sub in sorted(resource.subresources):
                kind, verbs = (
                    ("Binding", ["create"]) if sub == "binding" else (resource.kind, ["get", "patch", "update"])
                )
                entries.append(
                    {
                        "name": f"{resource.plural}/{sub}",
                        "singularName": "",
                        "namespaced": resource.namespaced,
                        "kind": kind,
                        "verbs": verbs,
                    }
                )
        group_version = f"{group}/{version}" if group else version
        return _json(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}
        )

    def _target(self, group: str, version: str, rest: list[str]) -> _Target:
        catalog = self.store.catalog
        if rest[0] == "namespaces" and len(rest) >= 3 and catalog.by_path(group, version, rest[2]):
            resource = catalog.by_path(group, version, rest[2])
            namespace, tail = rest[1], rest[3:]
        else:
            resource = catalog.by_path(group, version, rest[0])
            namespace, tail = None, rest[1:]
        if resource is None or len(tail) > 2 or (len(tail) == 2 and tail[1] not in resource.subresources):
            raise ApiError(404, "the server could not find the requested resource")
        return _Target(resource, namespace, tail[0] if tail else None, tail[1] if len(tail) > 1 else None)

    # -- verbs ---------------------------------------------------------------------------------

    async def _serve(self, request: web.Request, target: _Target) -> web.StreamResponse:
        method, query = request.method, request.query
        names = "collection" if target.name is None else target.subresource or "object"
        verb = _VERBS.get((method, names))
        if verb is None:
            raise ApiError(405, _NOT_ALLOWED)
        if verb == "list" and query.get("watch") in ("1", "true", "True"):
            verb = "watch"
        resource_path = target.resource.plural + (f"/{target.subresource}" if target.subresource else "")
        self.audit["create" if verb == "bind" else verb, target.resource.group, resource_path] += 1
        if target.resource.storage == ("resource.k8s.io", "resourceclaims") and target.subresource == "status":
            # kube-apiserver (1.36) authorizes a write of a claim's allocation or reservedFor again, as the verb
            # on resourceclaims/binding: who may do it is a scheduler's right, not only the status's.
            self.audit[verb, target.resource.group, "resourceclaims/binding"] += 1
        self.authorizations[request.headers.get("Authorization", "")] += 1
        key = f"{target.namespace}/{target.name}" if target.namespace else str(target.name)
        delay, failure = self.faults.decide(verb, target.resource.plural, key)
        if delay:
            await asyncio.sleep(delay)
        if failure is not None:
            raise failure
        if verb == "watch":
            return await self._watch(request, target)
        store, resource, namespace = self.store, target.resource, target.namespace
        if resource.namespaced and target.name is not None and namespace is None and resource.kind != "Namespace":
            raise ApiError(404, "the server could not find the requested resource")
        wanted = media.wanted(request, table_possible=verb in ("list", "get") and not target.subresource)
        if verb in ("list", "deletecollection"):
            chosen = _selector(query, resource)
            limit = int(query["limit"]) if query.get("limit", "").isdigit() and verb == "list" else None
            items, version, token = store.list(
                resource, namespace, chosen, limit=limit, continue_token=query.get("continue")
            )
            if verb == "deletecollection":
                items = [
                    store.delete(resource, item["metadata"].get("namespace"), item["metadata"]["name"])
                    for item in items
                ]
            if wanted.form == "table":
                return _json(table(resource, items, now=store.now(), version=str(version), full=wanted.full))
            metadata: dict[str, Any] = {"resourceVersion": str(version)}
            if token:
                metadata["continue"] = token
            listing = {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": metadata,
                "items": items,
            }
            return media.answer(listing, wanted)
        name = str(target.name)
        if verb == "get":
            found = store.get(resource, namespace, name)
            if wanted.form == "table":
                stamp = str(found["metadata"].get("resourceVersion", ""))
                return _json(table(resource, [found], now=store.now(), version=stamp, full=wanted.full))
            return media.answer(found, wanted)
        if verb == "create" and resource.namespaced and namespace is None:
            raise ApiError(405, _NOT_ALLOWED)  # a namespaced kind is created in its namespace's collection
        if verb == "patch" and request.content_type == media.APPLY_PATCH:
            given = await self._applied(request)
        else:
            creates_namespace = verb == "create" and resource.kind == "Namespace" and not resource.group
            given = await media.body(request, namespace_create=creates_namespace, any_json=verb == "patch")
        unknown: list[str] = []
        validation = request.query.get("fieldValidation", "Warn")  # the server's default since 1.27
        if verb in ("create", "update", "patch") and validation in ("Strict", "Warn"):
            unknown = _unknown_fields(resource, given)
            # Strict: a 400 (kubectl sends Strict, and relies on it: it skips its own validation when the
            # server's OpenAPI says the server validates); Warn: dropped, and said in a Warning header each.
            if unknown and validation == "Strict":
                raise strict(resource.kind, resource.version, unknown)
        if verb == "delete" and given:  # a DELETE's options are its body when it has one (kubectl's dryRun is there)
            dry = "All" in (given.get("dryRun") or [])
        else:
            dry = request.query.get("dryRun") == "All"
        # Reading the body awaited; the store is changed (or, dry, only asked) without awaiting.
        with store.dry_run() if dry else contextlib.nullcontext():
            response = self._write(request, verb, target, given, wanted)
        for field in unknown:
            response.headers.add("Warning", f'299 - "unknown field \\"{field}\\""')
        return response

    def _write(
        self, request: web.Request, verb: str, target: _Target, given: Any, wanted: media.Wanted
    ) -> web.Response:
        store, resource, namespace, name = self.store, target.resource, target.namespace, str(target.name)
        if verb == "bind":
            store.bind(str(namespace), name, given)
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)
        if verb == "create":
            return media.answer(store.create(resource, namespace, given), wanted, 201)
        if verb == "update":
            return media.answer(store.update(resource, namespace, name, given, subresource=target.subresource), wanted)
        if verb == "patch" and request.content_type == media.APPLY_PATCH:
            # Server-side apply, as far as a single manager needs it: create the object when it does not
            # exist, otherwise merge what was applied into it.
            try:
                store.get(resource, namespace, name)
            except ApiError as error:
                if error.code != 404 or target.subresource:
                    raise
                named = {**given, "metadata": {**(given.get("metadata") or {}), "name": name}}
                return media.answer(store.create(resource, namespace, named), wanted, 201)
            return media.answer(
                store.patch(resource, namespace, name, given, MERGE_PATCH, subresource=target.subresource), wanted
            )
        if verb == "patch":
            return media.answer(
                store.patch(resource, namespace, name, given, request.content_type, subresource=target.subresource),
                wanted,
            )
        preconditions = given.get("preconditions") or {}
        removed = store.delete(
            resource,
            namespace,
            name,
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
            grace_period_seconds=_grace(given.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))),
        )
        return media.answer(removed, wanted)

    async def _applied(self, request: web.Request) -> Any:
        if not request.query.get("fieldManager"):
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )
        return await media.body(request)

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        query = request.query
        chosen = _selector(query, target.resource)
        as_table = media.wanted(request, table_possible=True).form == "table"  # kubectl get -w
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds", "").isdigit() else None
        bookmarks = query.get("allowWatchBookmarks") in ("1", "true", "True")
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        expired = self.faults.take_expired_watch()
        try:
            if expired:
                raise ApiError(410, "too old resource version (injected)", reason="Expired")
            stream = self.store.watch(
                target.resource,
                target.namespace,
                chosen,
                query.get("resourceVersion"),
                bookmark_interval=self.bookmark_interval if bookmarks else None,
                timeout=timeout,
            )
        except ApiError as error:
            await response.write(json.dumps({"type": "ERROR", "object": error.status()}).encode() + b"\n")
            return response
        sent = 0
        self._streams.add(stream)
        try:
            async for event in stream:
                if event.type != "BOOKMARK" and (lag := self.faults.lag(target.resource.plural)):
                    await asyncio.sleep(lag)
                shown = event.object
                if as_table and event.type != "BOOKMARK":
                    # One row per event; the columns only in the first, as the API server sends them.
                    version = str((event.object.get("metadata") or {}).get("resourceVersion", ""))
                    shown = table(target.resource, [event.object], now=self.store.now(), version=version)
                    if sent:
                        shown["columnDefinitions"] = None
                await response.write(json.dumps({"type": event.type, "object": shown}).encode() + b"\n")
                sent += 1
                if self.faults.unavailable:  # an outage cuts open connections too (bookmarks bring us here)
                    self.faults.injected["watch cut"] += 1
                    if request.transport is not None:
                        request.transport.abort()  # cut, not ended: the client may not keep the connection
                    break
                if self.faults.drop_watch_after is not None and sent >= self.faults.drop_watch_after:
                    self.faults.injected["watch dropped"] += 1
                    break
        except ConnectionResetError:
            pass  # the client went away: nothing more to send
        finally:
            stream.close()
            self._streams.discard(stream)
        return response


def _grace(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None
