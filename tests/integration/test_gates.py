"""Pods held by ``spec.schedulingGates`` (as Kueue holds them): never bound, never a loop, bound when released."""

from __future__ import annotations

from tests.integration.controlplane import ControlPlane
from tests.integration.support import (
    PHALANX_USER,
    PhalanxProcess,
    bound,
    ensure_namespace,
    eventually,
    pod_scheduled,
    pods,
    requests_by,
)
from tests.scheduler.support import gpu_pod, pfn


def test_a_gated_member_is_left_alone_and_its_gang_binds_once_the_gate_is_removed(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "gated")
    audit_from = plane.audit_offset()
    plane.apply(gpu_pod("train-0", "gated", annotations=pfn("train", 2)))
    held = gpu_pod("train-1", "gated", annotations=pfn("train", 2))
    held["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    plane.apply(held)

    waiting = eventually(
        lambda: (pod_scheduled(pods(plane, "gated")["gated/train-0"]) or {}).get("reason") == "GangWaiting",
        what="Phalanx's decision on the free member: the gang waits",
    )
    assert waiting
    attempts = scheduler.metric("phalanx_schedule_attempts_total", 'result="unschedulable"')
    gated = pods(plane, "gated")["gated/train-1"]
    assert pod_scheduled(gated) == {  # the API server's own condition, which Phalanx leaves alone
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
        "lastProbeTime": None,
        "lastTransitionTime": gated["status"]["conditions"][0]["lastTransitionTime"],
    }
    assert bound(plane, "gated") == {}

    plane.call(
        "PATCH",
        "/api/v1/namespaces/gated/pods/train-1",
        {"spec": {"schedulingGates": None}},
        content_type="application/merge-patch+json",
    )
    placed = eventually(lambda: len(bound(plane, "gated")) == 2 and bound(plane, "gated"), what="both bound")
    assert len({node.rsplit("-", 1)[0] for node in placed.values()}) == 1  # one rack, as PFN gangs prefer

    binds = [e for e in requests_by(plane, PHALANX_USER, audit_from) if e["objectRef"].get("subresource") == "binding"]
    assert sorted(e["objectRef"]["name"] for e in binds) == ["train-0", "train-1"]  # one each, none refused
    assert all(e["responseStatus"]["code"] == 201 for e in binds)
    assert scheduler.metric("phalanx_schedule_attempts_total", 'result="unschedulable"') == attempts  # no loop
