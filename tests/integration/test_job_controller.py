"""Gangs of Jobs with the real Job controller (kube-controller-manager 1.36): what happens when a member
fails and the controller replaces it after its backoff. There is no kubelet: the test marks a pod Failed as
one would."""

from __future__ import annotations

from typing import Any

from tests.integration.controlplane import ControlPlane
from tests.integration.support import (
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    pod_scheduled,
    pods,
)
from tests.scheduler.support import gpu_pod, pfn

RACK = "example.com/rack"


def rack_nodes(plane: ControlPlane, rack: str) -> list[str]:
    nodes = plane.call("GET", f"/api/v1/nodes?labelSelector={RACK}%3D{rack}")["items"]
    return sorted(node["metadata"]["name"] for node in nodes)


def job(name: str, namespace: str, pods: int, template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    pod_template = {"metadata": template["metadata"], "spec": {**template["spec"], "restartPolicy": "Never"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 6, **spec, "template": pod_template},
    }


def fail(plane: ControlPlane, pod: str) -> None:
    """What a kubelet reports when the pod's containers fail."""
    namespace, name = pod.split("/")
    status = {"status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}]}}
    code, body = plane.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", status,
                               content_type="application/strategic-merge-patch+json")  # fmt: skip
    assert code == 200, body


def test_the_room_of_a_failed_job_member_is_kept_for_the_job_controller_s_replacement(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "replace")
    nodes = rack_nodes(plane, "b1-r2")
    for i, node in enumerate(nodes[4:]):  # half the rack is taken by another scheduler's pods
        plane.apply(gpu_pod(f"other-{i}", "replace", scheduler="default-scheduler", nodeName=node))
    template = gpu_pod("", "replace", annotations={**pfn("train", 4), "scheduling.phalanx.dev/topology-required": RACK},
                       nodeSelector={RACK: "b1-r2"})  # fmt: skip
    template["metadata"] = {"annotations": template["metadata"]["annotations"]}
    plane.apply(job("train", "replace", 4, template))
    members = eventually(lambda: len(mine := {p: n for p, n in bound(plane, "replace").items() if "train" in p}) == 4
                         and mine, what="the Job's four pods bound")  # fmt: skip
    failed = sorted(members)[0]
    freed = members[failed]
    fail(plane, failed)
    # Before the Job controller's replacement (it waits 10 s), a pod of the same priority wants the freed node.
    plane.apply(gpu_pod("web-0", "replace", nodeSelector={RACK: "b1-r2"}))
    told = eventually(lambda: (c := pod_scheduled(pods(plane, "replace")["replace/web-0"])) and c["message"],
                      what="the web pod told why it waits")  # fmt: skip
    assert "is kept for gang pfn:replace/train, whose member " + failed + " failed or was deleted, for its " in told
    replacement = eventually(
        lambda: [p for p, n in bound(plane, "replace").items() if "train" in p and p not in members],
        timeout=60,
        what="the Job controller's replacement bound",
    )
    assert bound(plane, "replace")[replacement[0]] == freed
    assert "replace/web-0" not in bound(plane, "replace")


def test_a_48_pod_job_gathering_its_gang_leaves_one_waiting_event_on_its_first_pod(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "flood")
    template = gpu_pod("", "flood", 1, annotations=pfn("wide", 48))
    template["metadata"] = {"annotations": template["metadata"]["annotations"]}
    plane.apply(job("wide", "flood", 48, template))
    eventually(lambda: len(bound(plane, "flood")) == 48, timeout=60, what="the Job's 48 pods bound")
    first = min(pods(plane, "flood").values(), key=lambda pod: pod["metadata"]["creationTimestamp"])
    events = described_events(plane, first)
    waiting = [event for event in events if event["reason"] == "GangWaiting"]
    assert len(waiting) <= 1, [event["message"] for event in waiting]
    assert len(events) <= 3, [(event["reason"], event["message"]) for event in events]  # waiting, scheduled
