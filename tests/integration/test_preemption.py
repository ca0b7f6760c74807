"""Preemption on a real kube-apiserver: the victim's DisruptionTarget condition and graceful DELETE, the
preemptor's nominatedNodeName, both Events as ``kubectl describe`` lists them, then the bind."""

from __future__ import annotations

from typing import Any

from tests.integration.controlplane import ControlPlane
from tests.integration.support import (
    PHALANX_USER,
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    pods,
    requests_by,
)
from tests.scheduler.support import gpu_pod, pfn


def priority_class(plane: ControlPlane, name: str, value: int) -> None:
    status, _ = plane.request(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value},
    )
    assert status in (201, 409)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def test_a_high_priority_gang_preempts_a_low_priority_pod_and_binds_once_it_is_gone(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "preempt")
    priority_class(plane, "itest-batch", 10)
    priority_class(plane, "itest-production", 100000)
    node = sorted(plane.call("GET", "/api/v1/nodes")["items"], key=lambda n: n["metadata"]["name"])[0]
    name = node["metadata"]["name"]
    audit_from = plane.audit_offset()
    # A low-priority pod of another scheduler holds the only node the gang may use.
    plane.apply(
        gpu_pod("squatter", "preempt", scheduler="default-scheduler", nodeName=name, priorityClassName="itest-batch")
    )
    plane.apply(
        gpu_pod(
            "vip-0",
            "preempt",
            annotations=pfn("vip", 1),
            priorityClassName="itest-production",
            nodeSelector={"kubernetes.io/hostname": name},
        )
    )
    # There is no kubelet: the victim stays Terminating for its grace period, marked as the API marks it.
    victim = eventually(
        lambda: (p := pods(plane, "preempt")["preempt/squatter"])["metadata"].get("deletionTimestamp") and p,
        what="the victim marked for deletion",
    )
    target = condition(victim, "DisruptionTarget")
    assert target is not None
    assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
    assert target["message"] == "phalanx: preempted by gang pfn:preempt/vip to make room in the cluster"
    assert victim["metadata"]["deletionGracePeriodSeconds"] == 30  # its own terminationGracePeriodSeconds
    preemptor = eventually(
        lambda: (p := pods(plane, "preempt")["preempt/vip-0"])["status"].get("nominatedNodeName") and p,
        what="the preemptor nominated",
    )
    assert preemptor["status"]["nominatedNodeName"] == name
    assert "preempt/vip-0" not in bound(plane, "preempt")
    preempting = eventually(
        lambda: [e for e in described_events(plane, preemptor) if e["reason"] == "Preempting"],
        what="the Preempting Event on the preemptor",
    )
    assert preempting[0]["type"] == "Normal"
    assert preempting[0]["message"].startswith(
        "Preempting 1 pod of lower priority in the cluster (1 of preempt/squatter)"
    )
    preempted = eventually(
        lambda: [e for e in described_events(plane, victim) if e["reason"] == "Preempted"],
        what="the Preempted Event on the victim",
    )
    assert preempted[0]["message"] == "Preempted by gang pfn:preempt/vip to make room in the cluster"
    deletes = [e for e in requests_by(plane, PHALANX_USER, audit_from) if e["verb"] == "delete"]
    assert [(e["objectRef"]["name"], e["responseStatus"]["code"]) for e in deletes] == [("squatter", 200)]

    # The kubelet's part: the containers stopped, the pod is deleted for good.
    plane.request(
        "DELETE",
        "/api/v1/namespaces/preempt/pods/squatter",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )
    placed = eventually(lambda: bound(plane, "preempt"), what="the preemptor bound")
    assert placed == {"preempt/vip-0": name}
