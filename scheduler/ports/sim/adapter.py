"""``SimCluster``: the cluster port on an in-process :class:`Store` (no HTTP), for ``phalanx simulate``,
``phalanx dry-run`` and in-process benchmarks. Same semantics and the same errors as ``KubeCluster``."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from scheduler.ports.errors import PortError, from_status
from scheduler.ports.port import OPENED, ApiResource, Binding, Change, Listing, Outcomes
from scheduler.ports.sim.resources import Resource
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import MERGE_PATCH, STRATEGIC_MERGE_PATCH, Store

T = TypeVar("T")
_CORE_GROUPS = frozenset({"", "events.k8s.io", "coordination.k8s.io"})


class SimCluster:
    def __init__(self, store: Store, *, bookmark_interval: float = 60.0) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval

    def _resource(self, resource: ApiResource) -> Resource:
        found = self.store.catalog.by_path(resource.group, resource.version, resource.plural)
        if found is None:
            raise from_status(404, f"the server could not find the requested resource ({resource})")
        return found

    @staticmethod
    def _call(action: Callable[[], T]) -> T:
        try:
            return action()
        except ApiError as error:
            raise from_status(error.code, error.message, retry_after=error.retry_after) from error

    async def served(self, groups: Collection[str] | None = None) -> set[tuple[str, str, str]]:
        return {
            (r.group, r.version, name)
            for r in self.store.catalog.resources
            if groups is None or not r.group or r.group in groups
            for name in (r.plural, *(f"{r.plural}/{sub}" for sub in r.subresources))
        }

    async def list(
        self, resource: ApiResource, *, limit: int | None = None, continue_token: str | None = None
    ) -> Listing:
        items, version, token = self._call(
            lambda: self.store.list(self._resource(resource), limit=limit, continue_token=continue_token)
        )
        return Listing(items=items, resource_version=str(version), continue_token=token)

    async def watch(
        self, resource: ApiResource, resource_version: str, *, timeout: float
    ) -> AsyncGenerator[Change, None]:
        stream = self._call(
            lambda: self.store.watch(
                self._resource(resource),
                None,
                None,
                resource_version,
                bookmark_interval=self.bookmark_interval,
                timeout=timeout,
            )
        )
        try:
            yield Change(type=OPENED, object={})
            async for event in stream:
                yield Change(type=event.type, object=event.object)
        finally:
            stream.close()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        binding = {"metadata": {"name": name, "uid": uid}, "target": {"kind": "Node", "name": node}}
        self._call(lambda: self.store.bind(namespace, name, binding))

    async def bind_all(self, bindings: Sequence[Binding]) -> Outcomes:
        outcomes: Outcomes = []
        for binding in bindings:
            try:
                await self.bind(*binding)
            except PortError as error:
                outcomes.append(error)
            else:
                outcomes.append(None)
        return outcomes

    async def patch_status(
        self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        kind = STRATEGIC_MERGE_PATCH if resource.group in _CORE_GROUPS else MERGE_PATCH
        return self._call(
            lambda: self.store.patch(
                self._resource(resource), namespace or None, name, dict(patch), kind, subresource="status"
            )
        )

    async def create(self, resource: ApiResource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call(lambda: self.store.create(self._resource(resource), namespace or None, dict(body)))

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]:
        return self._call(lambda: self.store.get(self._resource(resource), namespace or None, name))

    async def update(self, resource: ApiResource, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call(lambda: self.store.update(self._resource(resource), namespace or None, name, dict(body)))

    async def patch(self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self._call(
            lambda: self.store.patch(self._resource(resource), namespace or None, name, dict(patch), MERGE_PATCH)
        )

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        self._call(lambda: self.store.delete(self._resource(resource), namespace or None, name, uid=uid))
