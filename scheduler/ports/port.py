"""The cluster port: the only way the scheduler talks to a cluster (docs/architecture.md).

Adapters: ``scheduler.ports.kube.KubeCluster`` (a real API server, JSON over HTTP) and
``scheduler.ports.sim.adapter.SimCluster`` (the in-memory store). Objects cross the port as plain JSON dicts,
read-only: the scheduler never modifies what it receives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeAlias

from scheduler.ports.errors import PortError


@dataclass(frozen=True, slots=True)
class ApiResource:
    """A resource by group, version and plural, as in REST paths. ``status_subresource`` says whether the
    server serves ``<plural>/status`` (discovery tells): a custom resource without it keeps its status in
    the object itself, written through the main resource (Volcano publishes its PodGroup CRD that way)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = field(default=True, compare=False)
    api_version: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "api_version", f"{self.group}/{self.version}" if self.group else self.version)

    def __str__(self) -> str:
        return f"{self.plural}.{self.version}.{self.group}" if self.group else f"{self.plural}.{self.version}"


PODS = ApiResource("", "v1", "pods", "Pod")
NODES = ApiResource("", "v1", "nodes", "Node", namespaced=False)
PRIORITY_CLASSES = ApiResource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
LEASES = ApiResource("coordination.k8s.io", "v1", "leases", "Lease")
#: Events are written through the core API: it takes eventTime and firstTimestamp/lastTimestamp together.
CORE_EVENTS = ApiResource("", "v1", "events", "Event")
DISRUPTION_BUDGETS = ApiResource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
#: Dynamic Resource Allocation (GA since Kubernetes 1.34): the devices drivers publish and who claims them.
DRA_GROUP = "resource.k8s.io"
DEVICE_CLASSES = ApiResource(DRA_GROUP, "v1", "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_SLICES = ApiResource(DRA_GROUP, "v1", "resourceslices", "ResourceSlice", namespaced=False)
RESOURCE_CLAIMS = ApiResource(DRA_GROUP, "v1", "resourceclaims", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = ApiResource(DRA_GROUP, "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
DRA = (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of a list: ``continue_token`` is set when more pages follow."""

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None = None


OPENED = "OPENED"


@dataclass(frozen=True, slots=True)
class Change:
    """A watch event: ADDED, MODIFIED, DELETED or BOOKMARK, with the object as the server sent it; or OPENED
    (no object), which every watch yields first, once the server has accepted it."""

    type: str
    object: Mapping[str, Any]


class Binding(NamedTuple):
    """One pod to bind: ``pods/binding`` for the pod of this uid, to ``node``."""

    namespace: str
    name: str
    uid: str
    node: str


#: What :meth:`ClusterPort.bind_all` answers: for each binding, None when the pod was bound, else the error
#: :meth:`ClusterPort.bind` would have raised.
Outcomes: TypeAlias = list[PortError | None]


class ClusterPort(Protocol):
    """What the scheduler needs from a cluster. Every method raises only ``scheduler.ports.errors`` types."""

    async def served(self, groups: Collection[str] | None = None) -> set[tuple[str, str, str]]:
        """(group, version, name) of every resource and subresource the server serves (API discovery):
        ``("", "v1", "pods")``, ``("", "v1", "pods/status")``, ...; with ``groups``, of the core API and those
        API groups only (a server serves some thirty groups, each a document of its own to read)."""
        ...

    async def list(
        self, resource: ApiResource, *, limit: int | None = None, continue_token: str | None = None
    ) -> Listing:
        """Objects of a resource in all namespaces, a page of at most ``limit`` at a time (all at once
        without a limit), with the list's resourceVersion."""
        ...

    def watch(self, resource: ApiResource, resource_version: str, *, timeout: float) -> AsyncGenerator[Change, None]:
        """Changes after ``resource_version`` with bookmarks, until ``timeout`` seconds pass or the
        server ends the stream, after an OPENED change as soon as the server has accepted the watch (a
        quiet resource may send nothing else for a minute). Raises ``Expired`` when the version is too old
        to resume from."""
        ...

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """``pods/binding``: Conflict when already bound, NotFound when gone (or recreated: uid differs)."""
        ...

    async def bind_all(self, bindings: Sequence[Binding]) -> Outcomes:
        """Each binding as :meth:`bind` makes it, all in flight together. A gang's members go together: a writer
        process is handed them in one message, and the caller pays for one wait instead of one per pod."""
        ...

    async def patch_status(
        self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Patch the object's status subresource with ``patch`` (``{"status": ...}``); returns the object as
        stored (a custom resource's schema may have pruned fields the patch set).

        Pods take a strategic merge patch (conditions merge by type, as the API does for core types);
        custom resources a JSON merge patch, which replaces lists: send the whole conditions list."""
        ...

    async def create(self, resource: ApiResource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]: ...

    async def update(self, resource: ApiResource, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT with the body's resourceVersion as precondition: Conflict when it is stale."""
        ...

    async def patch(self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the main resource."""
        ...

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        """DELETE with the object's own grace period (a pod's ``terminationGracePeriodSeconds``), only if its
        uid is still ``uid``: Conflict when it was replaced, NotFound when it is gone."""
        ...
