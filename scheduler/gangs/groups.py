"""Group objects of every gang source, as the index keeps them.

What an object *is* (five unrelated CRDs are called ``PodGroup``) is decided by API group and version
in one table, ``sources.SOURCES``; this module reads an object once it is known to be a gang source's.

Each object's place in a hierarchy (its parent composite) is read once, here, when it arrives:

- ``spec.parentCompositePodGroupName`` on ``scheduling.k8s.io`` PodGroups and CompositePodGroups
  names an upstream CompositePodGroup; on a Phalanx CompositePodGroup it names a Phalanx one;
- the annotation ``scheduling.phalanx.dev/parent`` on any group object names a Phalanx
  CompositePodGroup (for clusters without the upstream API).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from scheduler.gangs.fields import SpecProblem, child, timestamp
from scheduler.gangs.model import ObjectRef, Source
from scheduler.gangs.pods import (
    PARENT_ANNOTATION,
    PHALANX_GROUP,
    UPSTREAM_GROUP,
)


class Role(Enum):
    LEAF = "leaf"  # holds pods
    COMPOSITE = "composite"  # holds groups
    WORKLOAD = "workload"  # templates and (1.35) policies, referenced by the others
    PRIORITY_CLASS = "priority-class"


@dataclass(frozen=True, slots=True)
class Kind:
    role: Role
    source: Source | None


@dataclass(frozen=True, slots=True)
class GroupObject:
    """One group object, with what the index needs to place it in a hierarchy.

    ``problem`` is a malformed or contradictory parent declaration; the hierarchy it is in is invalid
    until the object is fixed.
    """

    ref: ObjectRef
    version: str
    kind: Kind
    raw: Mapping[str, Any]
    created: float
    annotations: Mapping[str, str]
    parent: ObjectRef | None
    workload: str | None
    template: str | None
    problem: SpecProblem | None = None

    @property
    def spec(self) -> Mapping[str, Any]:
        spec = child(self.raw, "spec")
        return spec if isinstance(spec, Mapping) else {}


def split_api_version(api_version: object) -> tuple[str, str] | None:
    if not isinstance(api_version, str) or not api_version:
        return None
    group, _, version = api_version.rpartition("/")
    return group, version


def build_group(raw: Mapping[str, Any], ref: ObjectRef, version: str, kind: Kind) -> GroupObject:
    """Read a group object that the sources' table has recognised as ``kind``."""
    metadata = child(raw, "metadata")
    annotations_raw = child(metadata, "annotations")
    annotations = (
        {key: value for key, value in annotations_raw.items() if isinstance(key, str) and isinstance(value, str)}
        if isinstance(annotations_raw, Mapping)
        else {}
    )
    spec = child(raw, "spec")
    parent, problem = _parent(ref, spec, annotations)
    workload, template = _workload_reference(spec)
    return GroupObject(
        ref=ref,
        version=version,
        kind=kind,
        raw=raw,
        created=timestamp(child(metadata, "creationTimestamp")) or 0.0,
        annotations=annotations,
        parent=parent,
        workload=workload,
        template=template,
        problem=problem,
    )


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What a source's status patch is made from: the object's current status, and the decision."""

    ref: ObjectRef
    current: Mapping[str, Any]
    generation: int
    scheduled: bool
    message: str
    #: Not scheduled because members are missing (not created yet, or gated), not for lack of room.
    waiting: bool
    now: str  # RFC 3339
    identity: str  # the scheduler instance (Volcano records it as the condition's transitionID)
    #: The API version served and written (the upstream condition's type changed from 1.36 to 1.37).
    version: str = ""

    @property
    def conditions(self) -> list[Any]:
        found = self.current.get("conditions")
        return list(found) if isinstance(found, list) else []


def _parent(
    ref: ObjectRef, spec: object, annotations: Mapping[str, str]
) -> tuple[ObjectRef | None, SpecProblem | None]:
    field_name = "spec.parentCompositePodGroupName"
    in_spec = child(spec, "parentCompositePodGroupName")
    by_annotation = annotations.get(PARENT_ANNOTATION)
    if in_spec is not None and (not isinstance(in_spec, str) or not in_spec):
        return None, SpecProblem(ref, field_name, in_spec, "it must name a CompositePodGroup in the same namespace")
    if by_annotation is not None and not by_annotation.strip():
        return None, SpecProblem(
            ref, f"metadata.annotations[{PARENT_ANNOTATION}]", by_annotation, "it must name a Phalanx CompositePodGroup"
        )
    phalanx_parent = (
        ObjectRef(PHALANX_GROUP, "CompositePodGroup", ref.namespace, by_annotation.strip()) if by_annotation else None
    )
    if ref.group == PHALANX_GROUP:
        spec_parent = ObjectRef(PHALANX_GROUP, "CompositePodGroup", ref.namespace, in_spec) if in_spec else None
    elif ref.group == UPSTREAM_GROUP and in_spec:
        spec_parent = ObjectRef(UPSTREAM_GROUP, "CompositePodGroup", ref.namespace, in_spec)
    else:
        spec_parent = None
    if spec_parent and phalanx_parent and spec_parent != phalanx_parent:
        return None, SpecProblem(
            ref,
            f"metadata.annotations[{PARENT_ANNOTATION}]",
            by_annotation,
            f"it disagrees with {field_name} {in_spec!r}; a group has one parent",
        )
    return spec_parent or phalanx_parent, None


def _workload_reference(spec: object) -> tuple[str | None, str | None]:
    """The Workload and template an upstream object was made from (1.37 ``workloadRef``, 1.36
    ``podGroupTemplateRef.workload``)."""
    reference = child(spec, "workloadRef")
    workload, template = child(reference, "workloadName"), child(reference, "templateName")
    if workload is None:
        reference = child(child(spec, "podGroupTemplateRef"), "workload")
        workload, template = child(reference, "workloadName"), child(reference, "podGroupTemplateName")
    return (
        workload if isinstance(workload, str) and workload else None,
        template if isinstance(template, str) and template else None,
    )
