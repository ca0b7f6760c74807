"""The four DRA features of 1.36 that GPU drivers use, on kube-apiserver 1.36 with kube-controller-manager:
partitions that share their GPU's counters, device taints, devices shared by capacity and devices the
driver attaches first. The devices are a driver of these tests' own (``sharing.example.com``, with its own
DeviceClass), on nodes no other test uses, so that no other test's claims reach them; after each test, the
server's own claims and slices are checked by the oracle's device checks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.simulation.device_checks import DeviceChecks
from scripts.controlplane import ControlPlane
from tests.devices.support import (
    capacity_claim,
    claim,
    device_class,
    node_slice,
    partitioned_node,
    profile_claim,
    shared_slice,
)
from tests.integration.support import PhalanxProcess, bound, ensure_namespace, eventually, listed, pods
from tests.scheduler.support import gpu_pod, pfn

DRIVER = "sharing.example.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
UNHEALTHY = {"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}


def device_violations(plane: ControlPlane) -> list[str]:
    """What the server's allocations break: the oracle's device checks over its slices and claims."""
    checks = DeviceChecks()
    for obj in listed(plane, SLICES):
        checks.slice_changed("ADDED", obj)
    return checks.allocations(listed(plane, "/apis/resource.k8s.io/v1/resourceclaims"))


@pytest.fixture
def devices(plane: ControlPlane, scheduler: PhalanxProcess) -> Iterator[list[dict[str, Any]]]:
    """The test's DeviceClass and namespace; the slices it appends are deleted after it, with its pods."""
    classes = {item["metadata"]["name"] for item in listed(plane, "/apis/resource.k8s.io/v1/deviceclasses")}
    if DRIVER not in classes:
        plane.apply(device_class(DRIVER, f"device.driver == '{DRIVER}'"))
    ensure_namespace(plane, "sharing")
    published: list[dict[str, Any]] = []
    yield published
    assert device_violations(plane) == []
    for key in pods(plane, "sharing"):
        plane.request("DELETE", f"/api/v1/namespaces/sharing/pods/{key.split('/', 1)[1]}",
                      {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})  # fmt: skip
    for obj in published:
        plane.request("DELETE", f"{SLICES}/{obj['metadata']['name']}")


def claiming_pod(plane: ControlPlane, name: str, claim_obj: dict[str, Any], gang: tuple[str, int]) -> None:
    plane.apply(claim_obj)
    named = [{"name": "devices", "resourceClaimName": claim_obj["metadata"]["name"]}]
    plane.apply(gpu_pod(name, "sharing", gpus=0, annotations=pfn(*gang), resourceClaims=named))


def ours(claim_obj: dict[str, Any]) -> dict[str, Any]:
    claim_obj["metadata"]["namespace"] = "sharing"
    return claim_obj


def results(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    found = plane.call("GET", f"/apis/resource.k8s.io/v1/namespaces/sharing/resourceclaims/{name}")
    return list((((found.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or [])


def publish(plane: ControlPlane, devices: list[dict[str, Any]], *objects: dict[str, Any]) -> None:
    for obj in objects:
        devices.append(plane.apply(obj))


def test_partitions_whose_gpu_is_wholly_allocated_are_not_given(
    plane: ControlPlane, devices: list[dict[str, Any]]
) -> None:
    publish(plane, devices, *partitioned_node("b1-r1-n1", driver=DRIVER), *partitioned_node("b1-r1-n2", driver=DRIVER))
    claiming_pod(plane, "whole", ours(profile_claim("whole", "7g.80gb", driver=DRIVER)), ("whole", 1))
    eventually(lambda: bound(plane, "sharing").get("sharing/whole"), what="the whole-GPU pod bound", timeout=60)
    for i in range(2):
        claiming_pod(plane, f"part-{i}", ours(profile_claim(f"part-{i}", "1g.10gb", 4, driver=DRIVER)), ("parts", 2))

    def told() -> str:
        pod = pods(plane, "sharing").get("sharing/part-0") or {}
        conditions = (pod.get("status") or {}).get("conditions") or []
        return next((c.get("message", "") for c in conditions if c.get("type") == "PodScheduled"), "")

    assert "partitions whose GPU's counters other partitions use" in eventually(told, what="the gang told", timeout=60)
    assert set(bound(plane, "sharing")) == {"sharing/whole"}
    assert not results(plane, "part-0") and not results(plane, "part-1")


def test_tainted_devices_go_only_to_a_request_that_tolerates_them(
    plane: ControlPlane, devices: list[dict[str, Any]]
) -> None:
    tainted = node_slice("b1-r1-n3", 4, driver=DRIVER, name="b1-r1-n3-tainted")
    for device in tainted["spec"]["devices"]:
        device["taints"] = [UNHEALTHY]
    publish(plane, devices, tainted)
    claiming_pod(plane, "plain", ours(claim("plain", 4, device_class_name=DRIVER)), ("plain", 1))
    toleration = {"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    tolerant = ours(claim("tolerant", 4, device_class_name=DRIVER))
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [toleration]
    claiming_pod(plane, "tolerant", tolerant, ("tolerant", 1))
    placed = eventually(
        lambda: bound(plane, "sharing").get("sharing/tolerant"), what="the tolerant pod bound", timeout=60
    )
    assert placed == "b1-r1-n3"
    assert all(result["tolerations"] == [toleration] for result in results(plane, "tolerant"))
    assert "sharing/plain" not in bound(plane, "sharing") and not results(plane, "plain")


def test_a_shared_device_serves_claims_by_capacity_with_a_share_each(
    plane: ControlPlane, devices: list[dict[str, Any]]
) -> None:
    publish(plane, devices, shared_slice("b1-r1-n4", driver=DRIVER))
    for i in range(2):
        claiming_pod(plane, f"s-{i}", ours(capacity_claim(f"s-{i}", "30Gi", device_class_name=DRIVER)), ("s", 2))
    placed = eventually(lambda: len(bound(plane, "sharing")) == 2 and bound(plane, "sharing"), what="both bound",
                        timeout=60)  # fmt: skip
    assert set(placed.values()) == {"b1-r1-n4"}
    shares = [result for i in range(2) for result in results(plane, f"s-{i}")]
    assert [result["consumedCapacity"] for result in shares] == [{"memory": "30Gi"}] * 2
    assert len({result["shareID"] for result in shares}) == 2


def test_pods_bind_only_once_the_driver_reports_their_devices_attached(
    plane: ControlPlane, devices: list[dict[str, Any]]
) -> None:
    attached = node_slice("b1-r1-n5", 2, driver=DRIVER)
    for device in attached["spec"]["devices"]:
        device.update(bindingConditions=["example.com/attached"], bindingFailureConditions=["example.com/failed"],
                      bindsToNode=True)  # fmt: skip
    publish(plane, devices, attached)
    claiming_pod(plane, "a", ours(claim("a", 2, device_class_name=DRIVER)), ("a", 1))
    given = eventually(lambda: results(plane, "a"), what="the claim allocated", timeout=60)
    assert all(result["bindingConditions"] == ["example.com/attached"] for result in given)
    assert "sharing/a" not in bound(plane, "sharing")
    condition = {"type": "example.com/attached", "status": "True", "reason": "Attached", "message": "",
                 "lastTransitionTime": "2026-11-28T00:00:00Z"}  # fmt: skip
    report = [
        {"driver": r["driver"], "pool": r["pool"], "device": r["device"], "conditions": [condition]} for r in given
    ]
    plane.call("PATCH", "/apis/resource.k8s.io/v1/namespaces/sharing/resourceclaims/a/status",
               {"status": {"devices": report}}, content_type="application/merge-patch+json")  # fmt: skip
    assert eventually(lambda: bound(plane, "sharing").get("sharing/a"), what="bound once attached", timeout=60) == (
        "b1-r1-n5"
    )
