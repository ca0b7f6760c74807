"""Kubernetes' own gang API, ``scheduling.k8s.io``, in each shape it has had:

- 1.35, ``v1alpha1``: pods name ``spec.workloadRef{name, podGroup, podGroupReplicaKey}``; the policy
  lives in ``Workload.spec.podGroups[].policy``; each replica key is its own gang.
- 1.36, ``v1alpha2``: pods name ``spec.schedulingGroup.podGroupName``; a ``PodGroup`` carries its
  own ``schedulingPolicy`` and ``schedulingConstraints.topology[].key`` (as the 1.36 server's schema
  has it; a pre-release spelling, ``topologyConstraints[].topologyKey``, is read too), points at its
  template with ``podGroupTemplateRef.workload{workloadName, podGroupTemplateName}``, and keeps the
  ``PodGroupScheduled`` condition.
- 1.37, ``v1beta1`` (and ``v1alpha3``): ``PodGroup`` with ``workloadRef{workloadName, templateName}``,
  ``parentCompositePodGroupName`` and ``schedulingConstraints.topology[].key``; ``CompositePodGroup``
  with ``schedulingPolicy.gang.minGroupCount``.

Field names are accepted in every version in which they appeared, so that objects written for one
release keep working on the next. ``basic`` policy means no gang: each pod is placed on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.gangs.common import Context, Part, Placement, annotated, member_topology, topology
from scheduler.gangs.fields import SpecProblem, child, integer, items, missing
from scheduler.gangs.groups import GroupObject, GroupStatus
from scheduler.gangs.model import ObjectRef
from scheduler.gangs.pods import UPSTREAM_GROUP, PodInfo
from topology import GangRequest

#: A PodGroup's own claims (KEP-5729), read by ``devices.claims.read_group_claims``.
_GROUP_CLAIMS = (
    "spec.resourceClaims[].name",
    "spec.resourceClaims[].resourceClaimName",
    "spec.resourceClaims[].resourceClaimTemplateName",
)
_POD_GROUP_1_37 = (
    "spec.schedulingPolicy.gang.minCount",
    "spec.schedulingPolicy.basic",
    "spec.schedulingConstraints.topology[].key",
    "spec.workloadRef.workloadName",
    "spec.workloadRef.templateName",
    "spec.parentCompositePodGroupName",
    "spec.priority",
    "spec.priorityClassName",
    "spec.disruptionMode.all",
    "status.conditions[]",
    *_GROUP_CLAIMS,
)
_WORKLOAD_TEMPLATES = (
    "spec.podGroupTemplates[].name",
    "spec.podGroupTemplates[].schedulingPolicy.gang.minCount",
    "spec.podGroupTemplates[].schedulingConstraints.topology[].key",
)
#: Every field this module reads, by served version and kind, spelled as that version's schema spells it:
#: the suite holds each list against the schema (the 1.36 server's OpenAPI; 1.37's types), so that the next
#: rename is caught by a test, not by a user. (Pre-release spellings also read are not listed.)
FIELDS_READ: dict[str, dict[str, tuple[str, ...]]] = {
    "v1alpha2": {
        "PodGroup": (
            "spec.schedulingPolicy.gang.minCount",
            "spec.schedulingPolicy.basic",
            "spec.schedulingConstraints.topology[].key",
            "spec.podGroupTemplateRef.workload.workloadName",
            "spec.podGroupTemplateRef.workload.podGroupTemplateName",
            "spec.priority",
            "spec.priorityClassName",
            "spec.disruptionMode",
            "status.conditions[]",
            *_GROUP_CLAIMS,
        ),
        "Workload": _WORKLOAD_TEMPLATES,
    },
    "v1alpha3": {
        "PodGroup": _POD_GROUP_1_37,
        "CompositePodGroup": (
            "spec.schedulingPolicy.gang.minGroupCount",
            "spec.schedulingPolicy.basic",
            "spec.schedulingConstraints.topology[].key",
            "spec.workloadRef.workloadName",
            "spec.workloadRef.templateName",
            "spec.parentCompositePodGroupName",
            "spec.priorityClassName",
            "spec.disruptionMode.all",
            "status.conditions[]",
        ),
        "Workload": (*_WORKLOAD_TEMPLATES, "spec.compositePodGroupTemplates[].name"),
    },
    "v1beta1": {"PodGroup": _POD_GROUP_1_37, "Workload": _WORKLOAD_TEMPLATES},
}


def gang_minimum(ref: ObjectRef, policy: object, field: str, count_field: str) -> int:
    """The minimum a scheduling policy asks for: 0 (no gang) for ``basic``, the count for ``gang``.

    ``policy`` is the policy object and ``field`` its path, for messages.
    """
    if not isinstance(policy, Mapping):
        raise SpecProblem(
            ref, field, missing() if policy is None else policy, "it must set exactly one of basic or gang"
        )
    chosen = [name for name in ("basic", "gang") if policy.get(name) is not None]
    if len(chosen) != 1:
        raise SpecProblem(ref, field, dict(policy), "it must set exactly one of basic or gang")
    if chosen[0] == "basic":
        return 0
    count = integer(ref, policy, f"gang.{count_field}", minimum=1, required=True, shown=f"{field}.gang.{count_field}")
    assert count is not None
    return count


def constraint_keys(ref: ObjectRef, constraints: object, field: str) -> list[Placement]:
    """``topology[].key`` (1.36 and 1.37) or the pre-release ``topologyConstraints[].topologyKey`` of a
    constraints object at ``field``."""
    found: list[Placement] = []
    for name, key_name in (("topology", "key"), ("topologyConstraints", "topologyKey")):
        entries = items(ref, constraints, name, shown=f"{field}.{name}")
        if len(entries) > 1:
            raise SpecProblem(ref, f"{field}.{name}", entries, "only one topology constraint is supported")
        for entry in entries:
            found.append(Placement(child(entry, key_name), f"{field}.{name}[0].{key_name}"))  # type: ignore[arg-type]
    return found


def compile_podgroup(
    group: GroupObject, pods: Sequence[PodInfo], context: Context, workloads: Mapping[ObjectRef, GroupObject]
) -> Part:
    """A ``PodGroup`` of 1.36 or 1.37 (with its template checked when its Workload is known)."""
    ref = group.ref
    minimum = gang_minimum(ref, group.spec.get("schedulingPolicy"), "spec.schedulingPolicy", "minCount")
    _check_template(group, workloads)
    on_group = annotated(group.annotations)
    on_pods = member_topology(pods)
    required, preferred = topology(
        ref,
        required=constraint_keys(ref, group.spec.get("schedulingConstraints"), "spec.schedulingConstraints")
        + on_group[0]
        + on_pods[0],
        preferred=on_group[1] + on_pods[1],
    )
    request = GangRequest.leaf(
        f"{ref.namespace}/{ref.name}", context.members(pods), min_pods=minimum, required=required, preferred=preferred
    )
    return Part(request=request, priority=context.priority(ref, group.spec, pods), timeout=context.timeout())


def compile_workload_gang(
    leaf: str, workload: GroupObject, pods: Sequence[PodInfo], context: Context, pod_group: str
) -> Part:
    """A 1.35 gang: the pods of one pod group (and replica key) of a ``Workload``."""
    ref = workload.ref
    groups = items(ref, workload.raw, "spec.podGroups") or items(ref, workload.raw, "spec.podGroupTemplates")
    names = [child(entry, "name") for entry in groups]
    if pod_group not in names:
        referrer = pods[0].ref
        raise SpecProblem(
            referrer,
            "spec.workloadRef.podGroup",
            pod_group,
            f"{ref} has no pod group of that name (it has: {', '.join(map(str, names)) or 'none'})",
        )
    index = names.index(pod_group)
    field = "spec.podGroups" if items(ref, workload.raw, "spec.podGroups") else "spec.podGroupTemplates"
    entry = groups[index]
    where = f"{field}[{index}]"
    policy_field = "policy" if child(entry, "policy") is not None else "schedulingPolicy"
    minimum = gang_minimum(ref, child(entry, policy_field), f"{where}.{policy_field}", "minCount")
    on_pods = member_topology(pods)
    required, preferred = topology(
        ref,
        required=constraint_keys(ref, child(entry, "schedulingConstraints"), f"{where}.schedulingConstraints")
        + on_pods[0],
        preferred=on_pods[1],
    )
    request = GangRequest.leaf(
        f"{ref.namespace}/{leaf}", context.members(pods), min_pods=minimum, required=required, preferred=preferred
    )
    return Part(request=request, priority=context.priority(ref, {}, pods), timeout=context.timeout())


def composite_minimum(group: GroupObject) -> int:
    """``schedulingPolicy.gang.minGroupCount`` children together, or 0 (independent) for ``basic``."""
    return gang_minimum(group.ref, group.spec.get("schedulingPolicy"), "spec.schedulingPolicy", "minGroupCount")


def composite_topology(group: GroupObject) -> tuple[str | None, str | None]:
    on_group = annotated(group.annotations)
    return topology(
        group.ref,
        required=constraint_keys(group.ref, group.spec.get("schedulingConstraints"), "spec.schedulingConstraints")
        + on_group[0],
        preferred=on_group[1],
    )


def template_names(workload: GroupObject) -> set[str]:
    """Every (composite) pod group template name in a Workload, at any depth."""
    names: set[str] = set()
    stack: list[Any] = [workload.spec]
    while stack:
        current = stack.pop()
        for field in ("podGroupTemplates", "compositePodGroupTemplates", "podGroups"):
            entries = child(current, field)
            if isinstance(entries, list):
                for entry in entries:
                    name = child(entry, "name")
                    if isinstance(name, str):
                        names.add(name)
                    stack.append(entry)
    return names


def _check_template(group: GroupObject, workloads: Mapping[ObjectRef, GroupObject]) -> None:
    """A template reference must resolve when its Workload is known (the PodGroup itself carries its
    policy, so a Workload that is not watched or not yet seen does not hold the gang back)."""
    if group.workload is None or group.template is None:
        return
    workload = workloads.get(ObjectRef(group.ref.group, "Workload", group.ref.namespace, group.workload))
    if workload is None:
        return
    names = template_names(workload)
    if group.template not in names:
        field = (
            "spec.workloadRef.templateName"
            if child(group.spec, "workloadRef")
            else ("spec.podGroupTemplateRef.workload.podGroupTemplateName")
        )
        raise SpecProblem(
            group.ref,
            field,
            group.template,
            f"{workload.ref} has no template of that name (it has: {', '.join(sorted(names)) or 'none'})",
        )


#: The condition each upstream kind keeps in 1.37's versions (terminal once True); 1.36's ``v1alpha2`` PodGroup
#: keeps ``PodGroupScheduled`` (its schema's "Known condition types"); Phalanx's own composite ``Scheduled``.
_CONDITIONS = {
    (UPSTREAM_GROUP, "PodGroup"): "PodGroupInitiallyScheduled",
    (UPSTREAM_GROUP, "CompositePodGroup"): "CompositePodGroupInitiallyScheduled",
}
_CONDITION_1_36 = "PodGroupScheduled"


def condition_type(group: str, kind: str, version: str) -> str:
    """The condition Phalanx keeps on a group object of this served version."""
    if (group, kind, version) == (UPSTREAM_GROUP, "PodGroup", "v1alpha2"):
        return _CONDITION_1_36
    return _CONDITIONS.get((group, kind), "Scheduled")


def status_patch(status: GroupStatus) -> dict[str, Any]:
    """The served version's condition: ``PodGroupScheduled`` (1.36), ``PodGroupInitiallyScheduled`` or the
    composite's (1.37, terminal once True); ``Scheduled`` for Phalanx's own."""
    ref, current = status.ref, status.conditions
    kind = condition_type(ref.group, ref.kind, status.version)
    if status.waiting and not status.scheduled:
        return {"status": {"conditions": current}}  # its known reasons all speak of room, which it does not lack
    previous = next((c for c in current if c.get("type") == kind), None)
    if previous is not None and previous.get("status") == "True" and kind.endswith("InitiallyScheduled"):
        return {"status": {"conditions": current}}
    condition = {
        "type": kind,
        "status": "True" if status.scheduled else "False",
        "reason": "Scheduled" if status.scheduled else "Unschedulable",
        "message": status.message,
        "lastTransitionTime": status.now,
        "observedGeneration": status.generation,
    }
    return {"status": {"conditions": [*(c for c in current if c.get("type") != kind), condition]}}
