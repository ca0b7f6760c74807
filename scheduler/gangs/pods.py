"""A pod as the gang index sees it: who schedules it, whether it still counts, and which gang it names.

A pod may carry markers of several gang sources. It belongs to the first of, in this order: upstream
``spec.schedulingGroup`` / ``spec.workloadRef``, Volcano, scheduler-plugins, PFN annotations; the
markers it ignores are kept so that the user can be told (a Warning Event names them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.gangs.fields import SpecProblem, child, missing, timestamp
from scheduler.gangs.gang_settings import GangSettings
from scheduler.gangs.model import ObjectRef, PodKey, Source, pod_key

SCHEDULER_PLUGINS_GROUP = "scheduling.x-k8s.io"
SCHEDULER_PLUGINS_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
UPSTREAM_GROUP = "scheduling.k8s.io"
PHALANX_GROUP = "scheduling.phalanx.dev"
TOPOLOGY_REQUIRED = "scheduling.phalanx.dev/topology-required"
TOPOLOGY_PREFERRED = "scheduling.phalanx.dev/topology-preferred"
PARENT_ANNOTATION = "scheduling.phalanx.dev/parent"

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


#: The ``schedulerName`` of a pod that names none (the API server's default).
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class Membership:
    """The gang a pod names. ``leaf`` identifies it within the source and namespace; ``group`` is the
    group object it points at, if the source has one. ``problem`` is set when the marker is malformed."""

    source: Source
    leaf: str
    group: ObjectRef | None = None
    problem: SpecProblem | None = None


@dataclass(slots=True)
class PodInfo:
    key: PodKey
    namespace: str
    name: str
    raw: Mapping[str, Any]
    scheduler: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node: str | None
    priority: int
    created: float
    finished: bool
    deleting: bool
    #: Names of the pod's ``spec.schedulingGates`` (none once bound: gates only hold scheduling).
    gates: tuple[str, ...]
    membership: Membership
    ignored_markers: tuple[str, ...] = ()
    #: What the pod asks of a node, as ClusterState read it from this same object (every kind's columns), when
    #: it did and the pod claims no devices: the compile takes it instead of reading the requests again.
    demand: Mapping[str, int] | None = None
    ref: ObjectRef = field(init=False)

    def __post_init__(self) -> None:
        self.ref = ObjectRef("", "Pod", self.namespace, self.name)

    @property
    def counts(self) -> bool:
        """Finished pods, pods being deleted and pods still held by scheduling gates are not members of
        anything. A gated pod is not schedulable yet (the API server refuses to bind it): its gang waits for
        it exactly as for a member not created yet, and its removal of the last gate is a pod update that
        makes it a member."""
        return not self.finished and not self.deleting and not self.gated

    @property
    def gated(self) -> bool:
        return bool(self.gates)

    @property
    def held_by_gates(self) -> bool:
        """A pod that would be a member but for its scheduling gates (its gang counts it as held)."""
        return self.gated and not self.finished and not self.deleting


def _gate_names(gates: object) -> tuple[str, ...]:
    if not isinstance(gates, list):
        return ()
    names = [str(child(gate, "name") or "?") for gate in gates]
    return tuple(names)


def _strings(value: object) -> dict[str, str]:
    if type(value) is not dict and not isinstance(value, Mapping):
        return {}
    return {key: item for key, item in value.items() if isinstance(key, str) and isinstance(item, str)}


def read_pod(raw: Mapping[str, Any], settings: GangSettings, demand: Mapping[str, int] | None = None) -> PodInfo | None:
    """Parse a pod; None when it has no namespace and name (nothing can refer to it). ``demand``: what it asks
    of a node, read already from ``raw`` with the index's kinds."""
    metadata = child(raw, "metadata")
    namespace, name = child(metadata, "namespace"), child(metadata, "name")
    if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
        return None
    spec, status = child(raw, "spec"), child(raw, "status")
    labels, annotations = _strings(child(metadata, "labels")), _strings(child(metadata, "annotations"))
    node = child(spec, "nodeName")
    priority = child(spec, "priority")
    scheduler = child(spec, "schedulerName")
    info = PodInfo(
        key=pod_key(namespace, name),
        namespace=namespace,
        name=name,
        raw=raw,
        scheduler=scheduler if isinstance(scheduler, str) and scheduler else DEFAULT_SCHEDULER,
        labels=labels,
        annotations=annotations,
        node=node if isinstance(node, str) and node else None,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        created=timestamp(child(metadata, "creationTimestamp")) or 0.0,
        finished=child(status, "phase") in FINISHED_PHASES,
        deleting=child(metadata, "deletionTimestamp") is not None,
        gates=() if isinstance(node, str) and node else _gate_names(child(spec, "schedulingGates")),
        membership=Membership(Source.POD, name),
        demand=demand if demand is not None and not child(spec, "resourceClaims") else None,
    )
    found = _markers(info, spec, settings)
    info.membership = found[0] if found else Membership(Source.POD, name)
    info.ignored_markers = tuple(_describe(marker) for marker in found[1:])
    return info


#: Metadata a bind changes that no gang reads: the resource version, and the server's record of who wrote
#: which field (a binding may add its entry).
_WRITTEN_BY_EVERY_UPDATE = {"resourceVersion": None, "managedFields": None}


def read_bound(raw: Mapping[str, Any], before: PodInfo, demand: Mapping[str, int] | None = None) -> PodInfo | None:
    """What :func:`read_pod` reads from a pod's bind event, taken from ``before`` (read from its last event)
    instead of read again: a bind changes ``nodeName``, the status, the resource version and the managed
    fields, nothing else a gang is read from. None when the event changed more than that (then read it)."""
    spec, metadata = raw.get("spec"), raw.get("metadata")
    spec_before, metadata_before = before.raw.get("spec"), before.raw.get("metadata")
    if before.node is not None or type(spec) is not dict or type(spec_before) is not dict:
        return None
    node = spec.get("nodeName")
    if type(node) is not str or not node or {**spec_before, "nodeName": node} != spec:
        return None
    if type(metadata) is not dict or type(metadata_before) is not dict:
        return None
    if {**metadata_before, **_WRITTEN_BY_EVERY_UPDATE} != {**metadata, **_WRITTEN_BY_EVERY_UPDATE}:
        return None
    # Built field by field, not by dataclasses.replace, which costs each bind event several microseconds
    # more; tests/gangs/test_incremental.py holds it equal to read_pod's reading.
    return PodInfo(
        key=before.key,
        namespace=before.namespace,
        name=before.name,
        raw=raw,
        scheduler=before.scheduler,
        labels=before.labels,
        annotations=before.annotations,
        node=node,
        priority=before.priority,
        created=before.created,
        finished=child(raw.get("status"), "phase") in FINISHED_PHASES,
        deleting=before.deleting,
        gates=(),
        membership=before.membership,
        ignored_markers=before.ignored_markers,
        demand=demand if demand is not None and not spec.get("resourceClaims") else None,
    )


def _markers(pod: PodInfo, spec: object, settings: GangSettings) -> list[Membership]:
    """Every gang marker on the pod, in order of precedence."""
    ref = ObjectRef("", "Pod", pod.namespace, pod.name)
    found: list[Membership] = []
    scheduling_group = child(spec, "schedulingGroup")
    if scheduling_group is not None:
        group_name = child(scheduling_group, "podGroupName")
        if isinstance(group_name, str) and group_name:
            target = ObjectRef(UPSTREAM_GROUP, "PodGroup", pod.namespace, group_name)
            found.append(Membership(Source.PODGROUP, group_name, target))
        else:
            problem = SpecProblem(
                ref, "spec.schedulingGroup.podGroupName", group_name or missing(), "it must name a PodGroup"
            )
            found.append(Membership(Source.PODGROUP, pod.name, problem=problem))
    workload_ref = child(spec, "workloadRef")
    if workload_ref is not None:
        found.append(_workload_membership(ref, workload_ref))
    volcano = pod.annotations.get(VOLCANO_GROUP_ANNOTATION)
    if volcano is not None:
        found.append(
            _named(ref, Source.VOLCANO, VOLCANO_GROUP, volcano, f"metadata.annotations[{VOLCANO_GROUP_ANNOTATION}]")
        )
    plugins = pod.labels.get(SCHEDULER_PLUGINS_LABEL)
    if plugins is not None:
        found.append(
            _named(
                ref,
                Source.SCHEDULER_PLUGINS,
                SCHEDULER_PLUGINS_GROUP,
                plugins,
                f"metadata.labels[{SCHEDULER_PLUGINS_LABEL}]",
            )
        )
    pfn_name = pod.annotations.get(f"{settings.annotation_prefix}-name")
    if pfn_name is not None:
        field_name = f"metadata.annotations[{settings.annotation_prefix}-name]"
        if pfn_name.strip():
            found.append(Membership(Source.PFN, pfn_name.strip()))
        else:
            problem = SpecProblem(ref, field_name, pfn_name, "it must name the gang")
            found.append(Membership(Source.PFN, pod.name, problem=problem))
    return found


def _named(ref: ObjectRef, source: Source, group: str, name: str, field_name: str) -> Membership:
    if not name.strip():
        return Membership(source, ref.name, problem=SpecProblem(ref, field_name, name, "it must name a PodGroup"))
    return Membership(source, name.strip(), ObjectRef(group, "PodGroup", ref.namespace, name.strip()))


def _workload_membership(ref: ObjectRef, workload_ref: object) -> Membership:
    """Kubernetes 1.35: ``spec.workloadRef{name, podGroup, podGroupReplicaKey}``; each replica key is
    its own gang."""
    workload, group = child(workload_ref, "name"), child(workload_ref, "podGroup")
    replica = child(workload_ref, "podGroupReplicaKey")
    for field_name, value in (("name", workload), ("podGroup", group)):
        if not isinstance(value, str) or not value:
            what = "it must name a Workload" if field_name == "name" else "it must name a pod group of the Workload"
            problem = SpecProblem(ref, f"spec.workloadRef.{field_name}", value or missing(), what)
            return Membership(Source.WORKLOAD, ref.name, problem=problem)
    if replica is not None and (not isinstance(replica, str) or not replica):
        problem = SpecProblem(ref, "spec.workloadRef.podGroupReplicaKey", replica, "it must be a non-empty string")
        return Membership(Source.WORKLOAD, ref.name, problem=problem)
    leaf = f"{workload}/{group}" + (f"/{replica}" if replica else "")
    return Membership(Source.WORKLOAD, leaf, ObjectRef(UPSTREAM_GROUP, "Workload", ref.namespace, str(workload)))


def _describe(marker: Membership) -> str:
    words = {
        Source.PODGROUP: "spec.schedulingGroup",
        Source.WORKLOAD: "spec.workloadRef",
        Source.VOLCANO: f"annotation {VOLCANO_GROUP_ANNOTATION}",
        Source.SCHEDULER_PLUGINS: f"label {SCHEDULER_PLUGINS_LABEL}",
        Source.PFN: "the PFN gang annotations",
    }
    return f"{words[marker.source]} ({marker.leaf})"
