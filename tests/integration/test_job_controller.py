"""Gangs of Jobs with the real Job controller (kube-controller-manager 1.36): what happens when a member
fails and the controller replaces it after its backoff. There is no kubelet: the test marks a pod Failed as
one would."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.controlplane import ControlPlane
from tests.integration.support import (
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    pod_scheduled,
    pods,
)
from tests.integration.test_preemption import priority_class
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


def kubelet_ends_preempted(plane: ControlPlane, namespace: str) -> set[str]:
    """What a kubelet does with a pod a preemption deleted: its containers stop, it reports Failed (keeping the
    DisruptionTarget condition), and it is removed. Returns the pods it ended."""
    ended = set()
    for key, pod in pods(plane, namespace).items():
        if pod["metadata"].get("deletionTimestamp") and pod["status"].get("phase") != "Failed":
            fail(plane, key)
            ended.add(key)
    return ended


@pytest.mark.parametrize("ignored", [True, False])
def test_a_preempted_job_survives_its_backoff_limit_when_its_pod_failure_policy_ignores_disruption(
    plane: ControlPlane, scheduler: PhalanxProcess, ignored: bool
) -> None:
    """Issue 25: preempting a Job's pods counted against backoffLimit and failed it (BackoffLimitExceeded).
    With podFailurePolicy's Ignore on DisruptionTarget, the real Job controller replaces them instead."""
    namespace = f"survive-{str(ignored).lower()}"
    ensure_namespace(plane, namespace)
    priority_class(plane, "itest-batch", 10)
    priority_class(plane, "itest-production", 100000)
    rack = "b0-r1" if ignored else "b0-r2"
    nodes = rack_nodes(plane, rack)
    for i, node in enumerate(nodes[2:]):  # two nodes of the rack are left for the sweep; these are no victims
        plane.apply(gpu_pod(f"other-{i}", namespace, scheduler="default-scheduler", nodeName=node,
                            priorityClassName="itest-production"))  # fmt: skip
    template = gpu_pod("", namespace, annotations=pfn("sweep", 2), nodeSelector={RACK: rack},
                       priorityClassName="itest-batch")  # fmt: skip
    template["metadata"] = {"annotations": template["metadata"]["annotations"]}
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    failure_policy = {"podFailurePolicy": {"rules": rules}} if ignored else {}
    plane.apply(job("sweep", namespace, 2, template, backoffLimit=0, **failure_policy))
    eventually(lambda: len(bound(plane, namespace)) == 8, what="the sweep bound beside the other pods")
    for i in range(2):
        plane.apply(gpu_pod(f"vip-{i}", namespace, annotations=pfn("vip", 2), nodeSelector={RACK: rack},
                            priorityClassName="itest-production"))  # fmt: skip
    first = {key for key in pods(plane, namespace) if key.startswith(f"{namespace}/sweep-")}
    ended: set[str] = set()
    eventually(lambda: len(ended.__ior__(kubelet_ends_preempted(plane, namespace))) == 2, what="the sweep preempted")
    assert ended == first

    def failed() -> str | None:
        status = plane.call("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/sweep").get("status") or {}
        # FailureTarget comes first; Failed once every pod is terminal, which without a kubelet the pods the
        # controller deletes then never are.
        kinds = ("Failed", "FailureTarget")
        found = [c for c in status.get("conditions") or [] if c["type"] in kinds and c["status"] == "True"]
        return found[0].get("reason") if found else None

    if ignored:
        eventually(
            lambda: len([k for k, p in pods(plane, namespace).items() if k.startswith(f"{namespace}/sweep-")
                         and k not in first and not p["metadata"].get("deletionTimestamp")]) == 2,
            timeout=60, what="the Job controller's two replacements",
        )  # fmt: skip
        assert failed() is None
    else:
        assert eventually(failed, timeout=60, what="the Job failed") == "BackoffLimitExceeded"
    eventually(lambda: {f"{namespace}/vip-{i}" for i in range(2)} <= set(bound(plane, namespace)), timeout=60,
               what="the preemptor bound")  # fmt: skip


def test_a_group_larger_than_its_job_holds_room_then_cools_down_and_the_pod_it_blocked_is_told_whose_it_is(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """Issue 25: a scheduler-plugins PodGroup of minMember 4 and a Job of 3 pods held room for the missing
    member, timed out and held it again a second later, for ever; a pod it kept out was told "the cluster
    fits 0"."""
    ensure_namespace(plane, "cooldown")
    nodes = rack_nodes(plane, "b0-r3")
    for i, node in enumerate(nodes[4:]):  # four nodes of the rack are left
        plane.apply(gpu_pod(f"other-{i}", "cooldown", scheduler="default-scheduler", nodeName=node))
    plane.apply({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "mm", "namespace": "cooldown"},
                 "spec": {"minMember": 4, "scheduleTimeoutSeconds": 3}})  # fmt: skip
    template = gpu_pod("", "cooldown", labels={"scheduling.x-k8s.io/pod-group": "mm"}, nodeSelector={RACK: "b0-r3"})
    template["metadata"] = {"labels": template["metadata"]["labels"]}
    plane.apply(job("mm", "cooldown", 3, template))
    eventually(lambda: len(pods(plane, "cooldown")) == 7, what="the Job's three pods")
    plane.apply(gpu_pod("web-0", "cooldown", nodeSelector={RACK: "b0-r3"}))
    told = eventually(lambda: (c := pod_scheduled(pods(plane, "cooldown")["cooldown/web-0"])) and "held for gang"
                      in c["message"] and c["message"], what="the web pod told whose room it waits for")  # fmt: skip
    assert "Room on 1 node is held for gang scheduler-plugins:cooldown/mm, which waits for 1 member(s) that " in told
    # The gang times out, releases the room (the web pod binds) and cools down before it holds room again.
    eventually(lambda: "cooldown/web-0" in bound(plane, "cooldown"), what="the web pod bound once the room is free")
    member = next(key for key in pods(plane, "cooldown") if key.startswith("cooldown/mm-"))
    waiting = eventually(lambda: (c := pod_scheduled(pods(plane, "cooldown")[member])) and "holds room again in"
                         in c["message"] and c["message"], what="the gang saying when it holds room again")  # fmt: skip
    assert "1 member(s) that do not exist yet" in waiting
