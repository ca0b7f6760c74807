"""Volcano ``PodGroup`` (``scheduling.volcano.sh/v1beta1``), including Kthena's role-based gangs.

Pods join with the annotation ``scheduling.k8s.io/group-name``. The group compiles to:

- with neither ``subGroupPolicy`` nor ``minTaskMember``: one leaf whose minimum is ``minMember``;
- otherwise a root whose minimum is ``minMember`` pods in all, with one child per subgroup policy and
  one per task:

  * each ``subGroupPolicy[]`` entry takes the pods its ``labelSelector`` matches (not taken by an
    earlier entry) and splits them into subgroups by the values of ``matchLabelKeys`` (the older
    ``matchPolicy[].labelKey``); each subgroup is a leaf of ``subGroupSize`` pods, placed all or
    nothing, under its own ``networkTopology``; ``minSubGroups`` of them are required. This is what
    Kthena's ``minRoleReplicas`` produces: a role is a policy, a role replica a subgroup.
  * the remaining pods are grouped by the annotation ``volcano.sh/task-spec``; a task's leaf needs
    ``minTaskMember[task]`` pods (0 when not listed).

``networkTopology`` maps Volcano tiers onto the configured topology levels. Tier 1 is the narrowest
configured level above ``kubernetes.io/hostname``, tier 2 the next broader one, and so on: with levels
``[zone, block, rack, hostname]``, tier 1 is rack, 2 is block and 3 is zone. ``highestTierName`` may
name a level by its label key or the last part of it (``rack``). ``mode: hard`` requires one domain of
the tier ``highestTierAllowed`` (default 1); ``mode: soft`` prefers it and widens when it must.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.gangs.common import Context, Part, Placement, annotated, member_topology, topology
from scheduler.gangs.fields import SpecProblem, child, integer, items, label_selector, mapping, missing, string
from scheduler.gangs.gang_settings import GangSettings
from scheduler.gangs.groups import GroupObject, GroupStatus
from scheduler.gangs.model import ObjectRef
from scheduler.gangs.pods import VOLCANO_TASK_ANNOTATION, PodInfo
from topology import GangRequest, QuantityError
from topology.quantities import resource_list
from topology.reasons import short_name


def compile_volcano(group: GroupObject, pods: Sequence[PodInfo], context: Context) -> Part:
    ref, raw = group.ref, group.raw
    base = f"{ref.namespace}/{ref.name}"
    min_member = integer(ref, raw, "spec.minMember", minimum=0) or 0
    task_minimums = _task_minimums(ref, raw)
    try:
        min_resources = resource_list(group.spec.get("minResources"), field="spec.minResources")
    except QuantityError as error:
        raise SpecProblem(ref, error.field, error.value, error.problem) from None
    tiers = network_topology(ref, group.spec.get("networkTopology"), "spec.networkTopology", context.settings)
    on_group = annotated(group.annotations)
    on_pods = member_topology(pods)
    required, preferred = topology(
        ref, required=tiers[0] + on_group[0] + on_pods[0], preferred=tiers[1] + on_group[1] + on_pods[1]
    )
    priority = context.priority(ref, group.spec, pods)
    timeout = context.timeout()
    policies = items(ref, raw, "spec.subGroupPolicy")
    if not policies and not task_minimums:
        request = GangRequest.leaf(
            base, context.members(pods), min_pods=min_member, required=required, preferred=preferred
        )
        return Part(request=request, priority=priority, timeout=timeout, min_resources=min_resources)

    children: list[GangRequest] = []
    remaining = list(pods)
    seen_names: set[str] = set()
    for i, policy in enumerate(policies):
        where = f"spec.subGroupPolicy[{i}]"
        name = string(ref, policy, "name", required=True) if isinstance(policy, Mapping) else None
        if name is None:
            raise SpecProblem(ref, f"{where}.name", missing(), "each subgroup policy needs a name")
        if name in seen_names:
            raise SpecProblem(ref, f"{where}.name", name, "subgroup policy names must be distinct")
        seen_names.add(name)
        selector = label_selector(ref, child(policy, "labelSelector"), f"{where}.labelSelector")
        taken = [pod for pod in remaining if selector.matches(pod.labels)]
        remaining = [pod for pod in remaining if not selector.matches(pod.labels)]
        children.append(_policy_node(ref, policy, where, key=f"{base}/{name}", pods=taken, context=context))

    by_task: dict[str, list[PodInfo]] = {task: [] for task in task_minimums}
    for pod in remaining:
        by_task.setdefault(pod.annotations.get(VOLCANO_TASK_ANNOTATION, ""), []).append(pod)
    for task, task_pods in sorted(by_task.items()):
        children.append(
            GangRequest.leaf(
                f"{base}/{task or 'default'}", context.members(task_pods), min_pods=task_minimums.get(task, 0)
            )
        )
    request = GangRequest.group(base, children, min_pods=min_member, required=required, preferred=preferred)
    return Part(request=request, priority=priority, timeout=timeout, min_resources=min_resources)


def _task_minimums(ref: ObjectRef, raw: object) -> dict[str, int]:
    minimums: dict[str, int] = {}
    for task, value in mapping(ref, raw, "spec.minTaskMember").items():
        field = f"spec.minTaskMember[{task}]"
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecProblem(ref, field, value, "it must be an integer of at least 0")
        minimums[task] = value
    return minimums


def _policy_node(
    ref: ObjectRef, policy: object, where: str, *, key: str, pods: Sequence[PodInfo], context: Context
) -> GangRequest:
    size = integer(ref, policy, "subGroupSize", minimum=1, shown=f"{where}.subGroupSize")
    minimum = integer(ref, policy, "minSubGroups", minimum=0, shown=f"{where}.minSubGroups") or 0
    label_keys = _match_label_keys(ref, policy, where)
    keys = network_topology(ref, child(policy, "networkTopology"), f"{where}.networkTopology", context.settings)
    required, preferred = topology(ref, required=keys[0], preferred=keys[1])
    subgroups: dict[tuple[str, ...], list[PodInfo]] = {}
    for pod in pods:
        values = tuple(pod.labels.get(label) for label in label_keys)
        missing_labels = [label for label, value in zip(label_keys, values, strict=True) if value is None]
        if missing_labels:
            raise SpecProblem(
                pod.ref,
                f"metadata.labels[{missing_labels[0]}]",
                missing(),
                f"{ref} groups the pods of {where} by this label; every pod it selects needs it",
            )
        subgroups.setdefault(tuple(str(value) for value in values), []).append(pod)
    leaves = [
        GangRequest.leaf(
            f"{key}/{'-'.join(values) or 'all'}",
            context.members(members),
            min_pods=size if size is not None else len(members),
            required=required,
            preferred=preferred,
        )
        for values, members in sorted(subgroups.items())
    ]
    if minimum > len(leaves):
        if size is None:
            raise SpecProblem(
                ref,
                f"{where}.minSubGroups",
                minimum,
                f"only {len(leaves)} subgroup(s) exist and subGroupSize is not set, so the missing ones cannot be "
                "reserved; set subGroupSize",
            )
        limit = context.settings.max_gang_size
        if minimum * size > limit:  # checked before a leaf is made for each missing subgroup
            raise SpecProblem(
                ref,
                f"{where}.minSubGroups",
                minimum,
                f"{minimum} subgroups of {size} pods need {minimum * size} pods together, more than "
                f"gangs.maxGangSize ({limit}) allows; lower it, or raise gangs.maxGangSize in Phalanx's configuration",
            )
        # Subgroups whose pods do not exist yet: empty leaves that wait for their members.
        # Named as a user would say it (messages show the key): the n-th subgroup of the policy.
        leaves += [
            GangRequest.leaf(
                f"{key} (subgroup {n} of {minimum})", (), min_pods=size, required=required, preferred=preferred
            )
            for n in range(len(leaves) + 1, minimum + 1)
        ]
    return GangRequest.group(key, leaves, min_children=minimum)


def _match_label_keys(ref: ObjectRef, policy: object, where: str) -> list[str]:
    keys = items(ref, policy, "matchLabelKeys", shown=f"{where}.matchLabelKeys")
    if not keys:  # the older form, as Kthena wrote it before matchLabelKeys
        keys = [child(entry, "labelKey") for entry in items(ref, policy, "matchPolicy", shown=f"{where}.matchPolicy")]
    for i, key in enumerate(keys):
        if not isinstance(key, str) or not key:
            raise SpecProblem(ref, f"{where}.matchLabelKeys[{i}]", key, "it must be a pod label key")
    return keys


def network_topology(
    ref: ObjectRef, raw: object, field: str, settings: GangSettings
) -> tuple[list[Placement], list[Placement]]:
    """Volcano's ``networkTopology`` as (required, preferred) topology keys; see the module docstring."""
    if raw is None:
        return [], []
    if not isinstance(raw, Mapping):
        raise SpecProblem(ref, field, raw, "it must be an object with mode and highestTierAllowed")
    mode = raw.get("mode") or "hard"
    if mode not in ("hard", "soft"):
        raise SpecProblem(ref, f"{field}.mode", mode, "it must be hard or soft")
    tiers = settings.tiers
    described = ", ".join(f"{i + 1} = {short_name(level)} ({level})" for i, level in enumerate(tiers))
    tier_name, tier_number = raw.get("highestTierName"), raw.get("highestTierAllowed")
    if tier_name and tier_number is not None:
        raise SpecProblem(
            ref, f"{field}.highestTierName", tier_name, "set highestTierName or highestTierAllowed, not both"
        )
    if not tiers:
        raise SpecProblem(
            ref, field, dict(raw), "networkTopology needs topology levels in Phalanx's configuration to map tiers onto"
        )
    if tier_name:
        matches = [level for level in tiers if tier_name in (level, short_name(level))]
        if not matches:
            raise SpecProblem(
                ref, f"{field}.highestTierName", tier_name, f"it must name a configured tier: {described}"
            )
        level = matches[0]
    else:
        tier = integer(ref, raw, "highestTierAllowed", minimum=1, shown=f"{field}.highestTierAllowed") or 1
        if tier > len(tiers):
            raise SpecProblem(ref, f"{field}.highestTierAllowed", tier, f"the configured tiers are {described}")
        level = tiers[tier - 1]
    found = [Placement(level, f"{field} ({mode}, tier {tiers.index(level) + 1})")]
    return (found, []) if mode == "hard" else ([], found)


def status_patch(status: GroupStatus) -> dict[str, Any]:
    """Volcano's ``phase`` and its ``Scheduled`` / ``Unschedulable`` conditions (written through the object:
    its published CRD has no status subresource). A gang waiting for members is ``Pending``, and says
    nothing of resources it does not lack."""
    if status.waiting and not status.scheduled:
        return {"status": {"phase": "Pending", "conditions": status.conditions}}
    condition = {
        "type": "Scheduled" if status.scheduled else "Unschedulable",
        "status": "True",
        "transitionID": status.identity,
        "lastTransitionTime": status.now,
        "reason": "Scheduled" if status.scheduled else "NotEnoughResources",
        "message": status.message,
    }
    others = [c for c in status.conditions if c.get("type") not in ("Scheduled", "Unschedulable")]
    return {"status": {"phase": "Running" if status.scheduled else "Pending", "conditions": [*others, condition]}}
