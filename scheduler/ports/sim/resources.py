"""The API resources SimCluster serves, and which of them are switched on.

Each resource is known by group, version and plural name, as in REST paths. Versions of one
resource share storage (as on a real API server: a PodGroup written as ``v1beta1`` is read as
``v1alpha3``); objects are returned with the ``apiVersion`` that was asked for, without field
conversion, except where the API server converts: core/v1 Events are a view of events.k8s.io/v1 ones
(``scheduler.ports.sim.events``). The CRD-backed resources (scheduler-plugins', Volcano's, Phalanx's) come
from their CRDs (``scheduler.ports.sim.schema``), with their schemas, subresources and printer columns.
Every group/version can be switched off, so that discovery of a missing API can be tested exactly as a
cluster without that CRD behaves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.ports.sim.schema import crd_versions


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: frozenset[str] = field(default_factory=frozenset)
    short_names: tuple[str, ...] = ()
    #: The structural schema of a custom resource (pruning and defaults), None for built-in kinds.
    schema: Mapping[str, Any] | None = field(default=None, compare=False)
    #: A custom resource's ``additionalPrinterColumns`` (what ``kubectl get`` shows).
    columns: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    #: The storage of another group's resource this one is a converted view of (core/v1 Events).
    view_of: tuple[str, str] | None = field(default=None, compare=False)
    #: ``group/version`` (or ``v1`` for the core API), as objects carry it.
    api_version: str = field(init=False, compare=False)
    #: What versions of one resource share: group and plural. (Both are read on every write.)
    storage: tuple[str, str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "api_version", f"{self.group}/{self.version}" if self.group else self.version)
        object.__setattr__(self, "storage", self.view_of or (self.group, self.plural))

    @property
    def group_version(self) -> tuple[str, str]:
        return self.group, self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


STATUS = frozenset({"status"})

_BUILT_IN: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False, subresources=STATUS, short_names=("ns",)),
    Resource("", "v1", "nodes", "Node", namespaced=False, subresources=STATUS, short_names=("no",)),
    Resource("", "v1", "pods", "Pod", subresources=frozenset({"status", "binding"}), short_names=("po",)),
    Resource("", "v1", "events", "Event", short_names=("ev",), view_of=("events.k8s.io", "events")),
    Resource("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False, short_names=("pc",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", subresources=STATUS, short_names=("pdb",)),
    Resource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
    Resource("scheduling.k8s.io", "v1alpha2", "workloads", "Workload"),
    Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", subresources=STATUS),
    Resource("scheduling.k8s.io", "v1alpha3", "workloads", "Workload"),
    Resource("scheduling.k8s.io", "v1alpha3", "podgroups", "PodGroup", subresources=STATUS),
    Resource("scheduling.k8s.io", "v1alpha3", "compositepodgroups", "CompositePodGroup", subresources=STATUS),
    Resource("scheduling.k8s.io", "v1beta1", "workloads", "Workload"),
    Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", subresources=STATUS),
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", subresources=STATUS),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"),
)

#: scheduler-plugins' and Volcano's PodGroup, Phalanx's CompositePodGroup: as their CRDs define them.
_CUSTOM: tuple[Resource, ...] = tuple(
    Resource(
        crd.group,
        crd.version,
        crd.plural,
        crd.kind,
        namespaced=crd.namespaced,
        subresources=crd.subresources,
        short_names=crd.short_names,
        schema=crd.schema,
        columns=crd.columns,
    )
    for crd in crd_versions()
)
_ALL = _BUILT_IN + _CUSTOM

#: Group/versions a fresh SimCluster serves: everything Phalanx reads.
ALL_GROUP_VERSIONS: frozenset[tuple[str, str]] = frozenset(resource.group_version for resource in _ALL)
#: What every cluster has (they cannot be switched off).
CORE_GROUP_VERSIONS: frozenset[tuple[str, str]] = frozenset(
    {("", "v1"), ("events.k8s.io", "v1"), ("coordination.k8s.io", "v1"), ("scheduling.k8s.io", "v1")}
)


class Catalog:
    """The resources of the enabled group/versions, found by path parts or by apiVersion and kind."""

    def __init__(self, enabled: Iterable[tuple[str, str]] | None = None) -> None:
        chosen = set(ALL_GROUP_VERSIONS if enabled is None else enabled) | CORE_GROUP_VERSIONS
        unknown = chosen - ALL_GROUP_VERSIONS
        if unknown:
            raise ValueError(f"SimCluster does not know the API group/versions {sorted(unknown)}")
        self.enabled = frozenset(chosen)
        self.resources = tuple(resource for resource in _ALL if resource.group_version in self.enabled)
        self._by_path = {(r.group, r.version, r.plural): r for r in self.resources}
        self._by_kind = {(r.api_version, r.kind): r for r in self.resources}

    def by_path(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        return self._by_kind.get((api_version, kind))

    def versions(self, group: str) -> list[str]:
        """Served versions of a group, preferred (most stable, then newest) first."""
        found = sorted({r.version for r in self.resources if r.group == group}, key=_stability, reverse=True)
        return found

    def groups(self) -> list[str]:
        return sorted({r.group for r in self.resources if r.group})


def _stability(version: str) -> tuple[int, int, int]:
    """v1 > v1beta2 > v1beta1 > v1alpha3 ... (Kubernetes' version priority)."""
    major, _, rest = version[1:].partition("alpha") if "alpha" in version else version[1:].partition("beta")
    level = 0 if "alpha" in version else 1 if "beta" in version else 2
    return level, int(major or 0), int(rest or 0)
