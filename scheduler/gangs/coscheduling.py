"""scheduler-plugins coscheduling ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``).

Pods join with the label ``scheduling.x-k8s.io/pod-group: <name>``. The group compiles to one leaf
whose minimum is ``spec.minMember``. ``spec.minResources`` is checked before placement (a gang asking
for more than the cluster has free fails fast, see ``precheck``), and ``spec.scheduleTimeoutSeconds``
bounds how long a partial gang may hold a reservation (never above the configured limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.gangs.common import Context, Part, annotated, member_topology, topology
from scheduler.gangs.fields import SpecProblem, integer
from scheduler.gangs.groups import GroupObject, GroupStatus
from scheduler.gangs.pods import PodInfo
from topology import GangRequest, QuantityError
from topology.quantities import resource_list


def compile_scheduler_plugins(group: GroupObject, pods: Sequence[PodInfo], context: Context) -> Part:
    ref, raw = group.ref, group.raw
    min_member = integer(ref, raw, "spec.minMember", minimum=1, required=True)
    assert min_member is not None
    timeout = integer(ref, raw, "spec.scheduleTimeoutSeconds", minimum=1)
    try:
        min_resources = resource_list(group.spec.get("minResources"), field="spec.minResources")
    except QuantityError as error:
        raise SpecProblem(ref, error.field, error.value, error.problem) from None
    on_group = annotated(group.annotations)
    on_pods = member_topology(pods)
    required, preferred = topology(ref, required=on_group[0] + on_pods[0], preferred=on_group[1] + on_pods[1])
    request = GangRequest.leaf(
        f"{ref.namespace}/{ref.name}",
        context.members(pods),
        min_pods=min_member,
        required=required,
        preferred=preferred,
    )
    return Part(
        request=request,
        priority=context.priority(ref, {}, pods),
        timeout=context.timeout(None if timeout is None else float(timeout)),
        min_resources=min_resources,
    )


def status_patch(status: GroupStatus) -> dict[str, Any]:
    """scheduler-plugins' PodGroupStatus: ``phase`` and ``scheduleStartTime`` are the scheduler's to write;
    running/succeeded/failed are counted from pod phases by its controller."""
    written: dict[str, Any] = {"phase": "Scheduled" if status.scheduled else "Pending"}
    if not status.current.get("scheduleStartTime"):
        written["scheduleStartTime"] = status.now
    return {"status": written}
