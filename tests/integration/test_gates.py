"""Pods held by ``spec.schedulingGates`` (as Kueue holds them): never bound, never a loop, bound when released."""

from __future__ import annotations

from scripts.controlplane import ControlPlane
from tests.integration.support import (
    PHALANX_USER,
    PhalanxProcess,
    bound,
    described_events,
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

    eventually(
        lambda: [
            e for e in described_events(plane, pods(plane, "gated")["gated/train-0"]) if e["reason"] == "GangWaiting"
        ],
        what="Phalanx's decision on the free member, written: the gang waits",
    )
    attempts = scheduler.metric_total("phalanx_schedule_attempts_total")
    # Let Phalanx go round its loop and its reporter more than once: a plain pod elsewhere is scheduled
    # and its Event written. The gated pod must still be untouched, and the waiting gang not tried again.
    ensure_namespace(plane, "elsewhere")
    plane.apply(gpu_pod("plain", "elsewhere", gpus=1))
    other = eventually(lambda: pods(plane, "elsewhere")["elsewhere/plain"] if bound(plane, "elsewhere") else None)
    eventually(lambda: [e for e in described_events(plane, other) if e["reason"] == "Scheduled"], what="its Event")
    assert scheduler.metric_total("phalanx_schedule_attempts_total") == attempts + 1  # the plain pod's, no other

    gated = pods(plane, "gated")["gated/train-1"]
    assert pod_scheduled(gated) == {  # the API server's own condition, which Phalanx leaves alone
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
        "lastProbeTime": None,
        "lastTransitionTime": gated["status"]["conditions"][0]["lastTransitionTime"],
    }
    touched = [e for e in requests_by(plane, PHALANX_USER, audit_from) if e["objectRef"].get("name") == "train-1"]
    assert [e["verb"] for e in touched] == []  # not bound, not patched: not Phalanx's yet
    assert "gated/train-0" not in bound(plane, "gated")

    plane.call(
        "PATCH",
        "/api/v1/namespaces/gated/pods/train-1",
        {"spec": {"schedulingGates": None}},
        content_type="application/merge-patch+json",
    )
    placed = eventually(lambda: len(bound(plane, "gated")) == 2 and bound(plane, "gated"), what="both bound")
    assert len({node.rsplit("-", 1)[0] for node in placed.values()}) == 1  # one rack, as PFN gangs prefer
    binds = [e for e in requests_by(plane, PHALANX_USER, audit_from) if e["objectRef"].get("subresource") == "binding"]
    assert sorted(e["objectRef"]["name"] for e in binds if e["objectRef"]["namespace"] == "gated") == [
        "train-0",
        "train-1",
    ]  # one each, once the gate was gone
    assert all(e["responseStatus"]["code"] == 201 for e in binds)


def test_the_kueue_pattern_gates_counted_then_released_with_a_rack_selector_into_that_rack(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "kueue")
    for i in range(3):  # Kueue's TAS holds every pod of the workload until it has chosen their rack
        held = gpu_pod(f"tas-{i}", "kueue", annotations=pfn("tas", 3))
        held["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
        plane.apply(held)

    def admit(i: int) -> None:
        """As Kueue does: the topology assignment becomes a nodeSelector, and the gate goes, in one update
        (allowed while the pod is gated)."""
        plane.call(
            "PATCH",
            f"/api/v1/namespaces/kueue/pods/tas-{i}",
            {"spec": {"schedulingGates": None, "nodeSelector": {"example.com/rack": "b1-r2"}}},
            content_type="application/merge-patch+json",
        )

    admit(0)
    first = pods(plane, "kueue")["kueue/tas-0"]
    said = "holds room for 2 member(s) held by scheduling gates"
    counted = "2 of 3 members are held by scheduling gates: kueue.x-k8s.io/topology."
    waiting = eventually(
        lambda: [
            e
            for e in described_events(plane, first)
            if e["reason"] == "GangWaiting" and said in e["message"] and e["message"].endswith(counted)
        ],
        what="the gang's Event on its released member, counting the gated ones",
    )
    assert waiting[0]["type"] == "Normal"
    for i in (1, 2):
        assert pod_scheduled(pods(plane, "kueue")[f"kueue/tas-{i}"])["reason"] == "SchedulingGated"  # type: ignore[index]
        admit(i)
    placed = eventually(lambda: len(bound(plane, "kueue")) == 3 and bound(plane, "kueue"), what="the gang bound")
    assert {node.rsplit("-", 1)[0] for node in placed.values()} == {"b1-r2"}
