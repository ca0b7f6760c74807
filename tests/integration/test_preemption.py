"""Preemption on a real kube-apiserver: the victim's DisruptionTarget condition and graceful DELETE, the
preemptor's nominatedNodeName, both Events as ``kubectl describe`` lists them, then the bind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.controlplane import ControlPlane
from tests.integration.conftest import FAST
from tests.integration.support import (
    PHALANX_USER,
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    pods,
    priority_class,
    requests_by,
)
from tests.scheduler.support import gpu_pod, pfn


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
        f"Preempting 1 pod of lower priority on node {name} (1 of preempt/squatter)"
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


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def victim_condition(message: str) -> dict[str, Any]:
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": message,
        "lastTransitionTime": "2026-11-25T10:00:00Z",
    }


def test_a_leader_finishes_an_eviction_an_earlier_leader_began_with_the_rest_of_its_unit(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "resume")
    priority_class(plane, "itest-batch", 10)
    nodes = sorted(n["metadata"]["name"] for n in plane.call("GET", "/api/v1/nodes")["items"])[:3]
    for i, node in enumerate(nodes):  # a gang bound whole, and an elastic gang (minimum 2) beside it
        for gang, size in (("wide", 3), ("elastic", 2)):
            plane.apply(
                gpu_pod(
                    f"{gang}-{i}",
                    "resume",
                    4,
                    annotations=pfn(gang, size),
                    nodeName=node,
                    priorityClassName="itest-batch",
                    terminationGracePeriodSeconds=0,
                )
            )
    eventually(lambda: len(bound(plane, "resume")) == 6, what="the gangs bound")
    # What an earlier leader wrote before it lost its lease: the first mark of each unit, no DELETE yet.
    for pod in ("wide-0", "elastic-2"):
        patch = {
            "status": {
                "conditions": [victim_condition("phalanx: preempted by gang pfn:prod/llm to make room in rack b0-r0")]
            }
        }
        status, body = plane.request(
            "PATCH",
            f"/api/v1/namespaces/resume/pods/{pod}/status",
            patch,
            content_type="application/strategic-merge-patch+json",
        )
        assert status == 200, body
    eventually(
        lambda: set(bound(plane, "resume")) == {"resume/elastic-0", "resume/elastic-1"},
        timeout=30,
        what="the whole marked gang and the marked surplus pod deleted, the rest of the elastic gang kept",
    )
    assert scheduler.metric("phalanx_preemption_victims_resumed_total") >= 4
    line = next(
        line
        for line in scheduler.log_lines()
        if line.get("event") == "finishing an eviction begun earlier" and "resume/wide-0" in line.get("pods", [])
    )
    assert line["pods"] == ["resume/wide-0", "resume/wide-1", "resume/wide-2"]


def keep_pods_policy(plane: ControlPlane) -> None:
    """A ValidatingAdmissionPolicy that refuses the DELETE of pods labelled ``itest-keep``, as an operator's
    policy might (422 Invalid, the policy's default reason); in force once a dry-run DELETE is refused."""
    plane.call(
        "POST",
        f"{ADMISSION}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "itest-keep-pods"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(oldObject.metadata.labels) || !('itest-keep' in oldObject.metadata.labels)",
                        "message": "pods labelled itest-keep may not be deleted",
                    }
                ],
            },
        },
    )
    plane.call(
        "POST",
        f"{ADMISSION}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "itest-keep-pods"},
            "spec": {"policyName": "itest-keep-pods", "validationActions": ["Deny"]},
        },
    )


def lift_keep_pods_policy(plane: ControlPlane) -> None:
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        plane.request("DELETE", f"{ADMISSION}/{kind}/itest-keep-pods")


def test_a_victim_an_admission_policy_will_not_let_go_is_told_on_both_gangs_and_deleted_once_it_may(
    plane: ControlPlane, workdir: Path, admin_kubeconfig: Path
) -> None:
    name = "phalanx-evicting"
    overrides = (*FAST, f"leaderElection.name={name}", f"schedulerNames=[{name}]", "preemption.refusedRetrySeconds=1")
    process = PhalanxProcess(workdir, admin_kubeconfig, name=name, overrides=overrides)
    ensure_namespace(plane, "refuse")
    priority_class(plane, "itest-batch", 10)
    priority_class(plane, "itest-production", 100000)
    first, second = sorted(n["metadata"]["name"] for n in plane.call("GET", "/api/v1/nodes")["items"])[:2]
    try:
        process.wait_ready()
        keep_pods_policy(plane)
        for i, node in enumerate((first, second)):
            plane.apply(
                gpu_pod(
                    f"held-{i}",
                    "refuse",
                    scheduler=name,
                    annotations=pfn("held", 2),
                    nodeName=node,
                    labels={"itest-keep": "yes"} if i == 1 else {},
                    priorityClassName="itest-batch",
                    terminationGracePeriodSeconds=0,
                )
            )
        probe = {"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["All"]}
        eventually(
            lambda: plane.request("DELETE", "/api/v1/namespaces/refuse/pods/held-1", probe)[0] == 422,
            what="the admission policy in force",
        )
        plane.apply(
            gpu_pod(
                "vip-0",
                "refuse",
                scheduler=name,
                annotations=pfn("vip", 1),
                priorityClassName="itest-production",
                nodeSelector={"kubernetes.io/hostname": first},
            )
        )
        eventually(lambda: "refuse/held-0" not in pods(plane, "refuse"), timeout=30, what="the first victim deleted")
        held = pods(plane, "refuse")["refuse/held-1"]
        told = eventually(
            lambda: [e for e in described_events(plane, held) if e["reason"] == "FailedPreemption"],
            timeout=30,
            what="FailedPreemption on the victim the policy keeps",
        )
        assert told[0]["type"] == "Warning"
        assert told[0]["message"].startswith(
            "Preempted by gang pfn:refuse/vip, but the API server refused to delete refuse/held-1 (422: "
        )
        assert "pods labelled itest-keep may not be deleted" in told[0]["message"]
        vip = pods(plane, "refuse")["refuse/vip-0"]
        on_preemptor = eventually(
            lambda: [e for e in described_events(plane, vip) if e["reason"] == "FailedPreemption"],
            timeout=30,
            what="FailedPreemption on the preemptor",
        )
        assert "tried again every 1 s (preemption.refusedRetrySeconds)" in on_preemptor[0]["message"]
        assert process.metric("phalanx_preemption_victims_refused_total") == 1
        lift_keep_pods_policy(plane)
        eventually(
            lambda: "refuse/held-1" not in pods(plane, "refuse"),
            timeout=30,
            what="the victim deleted once the policy is lifted",
        )
        eventually(lambda: bound(plane, "refuse") == {"refuse/vip-0": first}, timeout=30, what="the preemptor bound")
        warnings = {line.get("event") for line in process.problems()}
        assert warnings == {"preemption write refused; retrying it slowly"}, warnings
    finally:
        lift_keep_pods_policy(plane)
        process.stop()


def test_members_beyond_a_gang_s_minimum_preempt_as_any_pod_would(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """Upstream's gang test, on a real server: a v1alpha2 PodGroup of 4 (minCount 3) on a node full of
    lower-priority pods binds all four, evicting four pods, not three."""
    ensure_namespace(plane, "extras")
    priority_class(plane, "itest-batch", 10)
    priority_class(plane, "itest-production", 100000)
    node = sorted(n["metadata"]["name"] for n in plane.call("GET", "/api/v1/nodes")["items"])[-1]
    for i in range(8):
        plane.apply(gpu_pod(f"small-{i}", "extras", 1, scheduler="default-scheduler", nodeName=node,
                            priorityClassName="itest-batch", terminationGracePeriodSeconds=0))  # fmt: skip
    # The group's own class: a 1.36 server gives a PodGroup without one priority 0, whatever its pods say.
    spec = {"schedulingPolicy": {"gang": {"minCount": 3}}, "priorityClassName": "itest-production"}
    plane.apply({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                 "metadata": {"name": "four", "namespace": "extras"}, "spec": spec})  # fmt: skip
    for i in range(4):
        plane.apply(gpu_pod(f"four-{i}", "extras", 1, priorityClassName="itest-production",
                            nodeSelector={"kubernetes.io/hostname": node},
                            schedulingGroup={"podGroupName": "four"}))  # fmt: skip
    eventually(lambda: {f"extras/four-{i}" for i in range(4)} <= set(bound(plane, "extras")), timeout=60,
               what="all four bound")  # fmt: skip
    assert len([key for key in bound(plane, "extras") if key.startswith("extras/small-")]) == 4
