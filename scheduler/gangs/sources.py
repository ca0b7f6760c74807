"""Every gang source in one table: its APIs, how its leaves compile, how its status is written.

Five unrelated CRDs are called ``PodGroup``: an object is recognised by API group and version here and
nowhere else; objects of any other group or version are not gang sources and are ignored. The APIs the
scheduler watches (each in order of preference: the first version the server serves is used), the kinds
the gang index reads, the source a hierarchy's root gives its gang, and the status each source writes
are all derived from :data:`SOURCES`, and so are the RBAC rules the scheduler needs for them
(:meth:`SourceApi.rbac`; ``manifests/rbac.yaml`` is checked against them) and the CRD each is published
by (checked against the file). Adding a source is a row here plus its module in ``gangs/``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.gangs import coscheduling, upstream, volcano
from scheduler.gangs.common import Context, Part
from scheduler.gangs.fields import child
from scheduler.gangs.groups import GroupObject, GroupStatus, Kind, Role, build_group, split_api_version
from scheduler.gangs.model import ObjectRef, Source
from scheduler.gangs.pods import PHALANX_GROUP, SCHEDULER_PLUGINS_GROUP, UPSTREAM_GROUP, VOLCANO_GROUP, PodInfo

#: How a group object that holds pods compiles (the index passes every group object it knows, for the
#: sources whose objects refer to others, as upstream PodGroups refer to their Workload).
LeafCompiler = Callable[[GroupObject, Sequence[PodInfo], Context, Mapping[ObjectRef, GroupObject]], Part]
StatusPatch = Callable[[GroupStatus], dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceApi:
    group: str
    kind: str
    plural: str
    #: Versions read, the preferred first (the one watched is the first the server serves).
    versions: tuple[str, ...]
    role: Role
    source: Source | None = None
    namespaced: bool = True
    compile: LeafCompiler | None = None
    #: The status patch in the source's own vocabulary; None: the kind has no status Phalanx writes.
    status: StatusPatch | None = None
    #: Its published CRD keeps status in the object (no status subresource): written through the object.
    status_in_object: bool = False
    #: The file of its CRD, as its project publishes it, in ``scheduler/ports/sim/crds/`` (the emulator
    #: serves it, the real-server suite installs it); None for an API built into kube-apiserver.
    crd: str | None = None

    def rbac(self) -> set[tuple[str, str, str]]:
        """(API group, resource, verb) the scheduler needs: list and watch its objects, and patch the
        status it writes (through the object itself when the CRD has no status subresource)."""
        rules = {(self.group, self.plural, "list"), (self.group, self.plural, "watch")}
        if self.status is not None:
            rules.add((self.group, self.plural if self.status_in_object else f"{self.plural}/status", "patch"))
        return rules


def _plugins(group: GroupObject, pods: Sequence[PodInfo], context: Context, _: Mapping[ObjectRef, GroupObject]) -> Part:
    return coscheduling.compile_scheduler_plugins(group, pods, context)


def _volcano(group: GroupObject, pods: Sequence[PodInfo], context: Context, _: Mapping[ObjectRef, GroupObject]) -> Part:
    return volcano.compile_volcano(group, pods, context)


SOURCES: tuple[SourceApi, ...] = (
    SourceApi(
        group=UPSTREAM_GROUP,
        kind="PriorityClass",
        plural="priorityclasses",
        versions=("v1",),
        role=Role.PRIORITY_CLASS,
        namespaced=False,
    ),
    SourceApi(
        group=SCHEDULER_PLUGINS_GROUP,
        kind="PodGroup",
        plural="podgroups",
        versions=("v1alpha1",),
        role=Role.LEAF,
        source=Source.SCHEDULER_PLUGINS,
        compile=_plugins,
        status=coscheduling.status_patch,
        crd="podgroups.scheduling.x-k8s.io.yaml",
    ),
    SourceApi(
        group=VOLCANO_GROUP,
        kind="PodGroup",
        plural="podgroups",
        versions=("v1beta1",),
        role=Role.LEAF,
        source=Source.VOLCANO,
        compile=_volcano,
        status=volcano.status_patch,
        status_in_object=True,
        crd="podgroups.scheduling.volcano.sh.yaml",
    ),
    SourceApi(
        group=UPSTREAM_GROUP,
        kind="PodGroup",
        plural="podgroups",
        versions=("v1beta1", "v1alpha3", "v1alpha2"),
        role=Role.LEAF,
        source=Source.PODGROUP,
        compile=upstream.compile_podgroup,
        status=upstream.status_patch,
    ),
    SourceApi(
        group=UPSTREAM_GROUP,
        kind="Workload",
        plural="workloads",
        versions=("v1beta1", "v1alpha3", "v1alpha2", "v1alpha1"),
        role=Role.WORKLOAD,
    ),
    SourceApi(
        group=UPSTREAM_GROUP,
        kind="CompositePodGroup",
        plural="compositepodgroups",
        versions=("v1beta1", "v1alpha3"),
        role=Role.COMPOSITE,
        source=Source.COMPOSITE,
        status=upstream.status_patch,
    ),
    SourceApi(
        group=PHALANX_GROUP,
        kind="CompositePodGroup",
        plural="compositepodgroups",
        versions=("v1alpha1",),
        role=Role.COMPOSITE,
        source=Source.PHALANX,
        status=upstream.status_patch,
        crd="compositepodgroups.scheduling.phalanx.dev.yaml",
    ),
)

#: (group, version, kind) -> what such an object is.
KINDS: dict[tuple[str, str, str], Kind] = {
    (api.group, version, api.kind): Kind(api.role, api.source) for api in SOURCES for version in api.versions
}
#: The gang source (and key prefix) of a hierarchy, by the kind of object at its root.
ROOT_SOURCE: dict[tuple[str, str], Source] = {
    (api.group, api.kind): api.source
    for api in SOURCES
    if api.source is not None and api.role in (Role.LEAF, Role.COMPOSITE)
}
_BY_KIND = {(api.group, api.kind): api for api in SOURCES}
_BY_SOURCE = {api.source: api for api in SOURCES if api.source is not None and api.role is Role.LEAF}


def source_api(group: str, kind: str) -> SourceApi | None:
    return _BY_KIND.get((group, kind))


def compiler(source: Source) -> LeafCompiler:
    """How the group objects of ``source`` that hold pods compile."""
    found = _BY_SOURCE[source].compile
    assert found is not None, source
    return found


def object_ref(raw: Mapping[str, Any]) -> tuple[ObjectRef, str, Kind] | None:
    """The reference, version and kind of a raw object, or None when it is not a gang source's."""
    split = split_api_version(raw.get("apiVersion"))
    kind_name = raw.get("kind")
    if split is None or not isinstance(kind_name, str):
        return None
    group, version = split
    kind = KINDS.get((group, version, kind_name))
    if kind is None:
        return None
    metadata = child(raw, "metadata")
    name, namespace = child(metadata, "name"), child(metadata, "namespace")
    if not isinstance(name, str) or not name:
        return None
    if kind.role is Role.PRIORITY_CLASS:
        namespace = ""
    elif not isinstance(namespace, str) or not namespace:
        return None
    return ObjectRef(group, kind_name, namespace, name), version, kind


def read_group(raw: Mapping[str, Any]) -> GroupObject | None:
    """A group object of any source, or None when ``raw`` is no gang source's."""
    found = object_ref(raw)
    if found is None:
        return None
    return build_group(raw, *found)
