"""What an operator reads after Phalanx decides: Events under ``kubectl describe``, the PodScheduled
condition, and the status of every kind of group object, each in the schema its project publishes."""

from __future__ import annotations

from typing import Any

from scripts.controlplane import ControlPlane
from tests.integration.support import (
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    get,
    pod_scheduled,
    pods,
)
from tests.scheduler.support import gpu_pod, pfn

CONTROLLER = "phalanx.dev/scheduler"


def test_an_infeasible_gang_says_why_as_kubectl_describe_shows_it(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "too-big")
    for i in range(2):
        plane.apply(gpu_pod(f"big-{i}", "too-big", gpus=16, annotations=pfn("big", 2)))

    def told() -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The condition and the Event that says the same (an earlier attempt, made before the second pod
        was seen, said something else: that is an Event of its own, as kube-scheduler's would be)."""
        pod = pods(plane, "too-big")["too-big/big-0"]
        condition = pod_scheduled(pod) or {}
        events = [
            event
            for event in described_events(plane, pod)
            if event["reason"] == "FailedScheduling" and event["message"] == condition.get("message")
        ]
        return (condition, events[0]) if events else None

    condition, event = eventually(told, what="a FailedScheduling Event and a PodScheduled condition on too-big/big-0")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "0/64 nodes are available: 64 Insufficient nvidia.com/gpu." in condition["message"]
    assert event["type"] == "Warning"
    assert event["reportingComponent"] == CONTROLLER and event["reportingInstance"] == scheduler.name
    assert bound(plane, "too-big") == {}


def test_a_bound_pod_has_a_scheduled_event_naming_its_node(plane: ControlPlane, scheduler: PhalanxProcess) -> None:
    ensure_namespace(plane, "small")
    plane.apply(gpu_pod("one", "small", gpus=1))
    node = eventually(lambda: bound(plane, "small").get("small/one"), what="small/one bound")
    pod = pods(plane, "small")["small/one"]
    events = eventually(
        lambda: [e for e in described_events(plane, pod) if e["reason"] == "Scheduled"], what="a Scheduled Event"
    )
    assert [(e["type"], e["message"]) for e in events] == [("Normal", f"Successfully assigned small/one to {node}")]
    assert events[0]["metadata"]["name"].startswith("one.")


def group_objects(namespace: str, name: str, size: int, *, fits: bool) -> list[dict[str, Any]]:
    """A gang of ``size`` pods in each gang source that has a status: scheduler-plugins, Volcano and the
    ``scheduling.k8s.io/v1alpha2`` PodGroup (the API a 1.36 server serves)."""
    gpus = 8 if fits else 16
    groups = [
        ({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "spec": {"minMember": size}},
         {"labels": {"scheduling.x-k8s.io/pod-group": f"{name}-sp"}}, {}),
        ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "spec": {"minMember": size}},
         {"annotations": {"scheduling.k8s.io/group-name": f"{name}-volcano"}}, {}),
        ({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
          "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}},
         {}, {"schedulingGroup": {"podGroupName": f"{name}-upstream"}}),
    ]  # fmt: skip
    objects: list[dict[str, Any]] = []
    for (group, metadata, spec), suffix in zip(groups, ("sp", "volcano", "upstream"), strict=True):
        objects.append({**group, "metadata": {"name": f"{name}-{suffix}", "namespace": namespace}})
        for i in range(size):
            pod = gpu_pod(f"{name}-{suffix}-{i}", namespace, gpus=gpus, **spec)
            pod["metadata"].update(metadata)
            objects.append(pod)
    return objects


def statuses(plane: ControlPlane, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {
        suffix: get(plane, f"/apis/{api}/namespaces/{namespace}/podgroups/{name}-{suffix}").get("status") or {}
        for suffix, api in (
            ("sp", "scheduling.x-k8s.io/v1alpha1"),
            ("volcano", "scheduling.volcano.sh/v1beta1"),
            ("upstream", "scheduling.k8s.io/v1alpha2"),
        )
    }


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def test_group_status_of_every_source_is_written_and_kept_by_the_server(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "groups")
    for obj in group_objects("groups", "fits", 2, fits=True):
        plane.apply(obj)
    eventually(lambda: len(bound(plane, "groups")) == 6, what="all six pods bound")

    def written() -> dict[str, dict[str, Any]] | None:
        found = statuses(plane, "groups", "fits")
        done = (
            found["sp"].get("phase") == "Scheduled"
            and found["volcano"].get("phase") == "Running"
            and condition(found["upstream"], "PodGroupScheduled").get("status") == "True"
        )
        return found if done else None

    found = eventually(written, what=f"every group's status written, got {statuses(plane, 'groups', 'fits')}")
    assert found["sp"]["scheduleStartTime"].endswith("Z")
    assert set(found["sp"]) == {"phase", "scheduleStartTime"}  # nothing the schema lacks, nothing pruned
    volcano = condition(found["volcano"], "Scheduled")
    assert (volcano["status"], volcano["reason"]) == ("True", "Scheduled")
    assert condition(found["upstream"], "PodGroupScheduled")["reason"] == "Scheduled"


def test_group_status_of_an_infeasible_gang_says_pending_and_why(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "groups")
    for obj in group_objects("groups", "big", 2, fits=False):
        plane.apply(obj)

    def written() -> dict[str, dict[str, Any]] | None:
        found = statuses(plane, "groups", "big")
        done = (
            found["sp"].get("phase") == "Pending"
            and condition(found["volcano"], "Unschedulable").get("status") == "True"
            and condition(found["upstream"], "PodGroupScheduled").get("status") == "False"
        )
        return found if done else None

    found = eventually(written, what=f"every group's status written, got {statuses(plane, 'groups', 'big')}")
    assert found["volcano"]["phase"] == "Pending"
    for why in (
        condition(found["volcano"], "Unschedulable"),
        condition(found["upstream"], "PodGroupScheduled"),
    ):
        assert "Insufficient nvidia.com/gpu" in why["message"]
    for suffix, api in (("sp", "scheduling.x-k8s.io/v1alpha1"), ("volcano", "scheduling.volcano.sh/v1beta1")):
        group = {**get(plane, f"/apis/{api}/namespaces/groups/podgroups/big-{suffix}"), "kind": "PodGroup"}
        reasons = {event["reason"] for event in described_events(plane, group)}
        assert "FailedScheduling" in reasons, suffix
    assert bound(plane, "groups") == {}


def test_a_group_waiting_for_members_is_pending_and_says_nothing_of_resources(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """Issue 25: a scheduler-plugins PodGroup waiting for a member got no status.phase at all."""
    ensure_namespace(plane, "groups")
    objects = group_objects("groups", "short", 3, fits=True)
    for obj in objects:
        if not obj["metadata"]["name"].endswith("-2"):  # one member of each gang is never created
            plane.apply(obj)

    def written() -> dict[str, dict[str, Any]] | None:
        found = statuses(plane, "groups", "short")
        return found if found["sp"].get("phase") == "Pending" and found["volcano"].get("phase") == "Pending" else None

    found = eventually(written, what=f"the waiting groups Pending, got {statuses(plane, 'groups', 'short')}")
    assert condition(found["volcano"], "Unschedulable") == {}  # it lacks members, not resources
    assert condition(found["upstream"], "PodGroupScheduled") == {}
    assert bound(plane, "groups") == {}
