"""The four DRA features of 1.36 that GPU drivers use, over HTTP (the emulator), each checked by the invariant
oracle at every bind: partitions that share their GPU's counters, device taints, devices shared by capacity,
and devices the driver attaches before their pods may bind (binding conditions)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.ports.sim.store import MERGE_PATCH
from tests.devices.support import (
    GPU_DRIVER,
    capacity_claim,
    claim,
    device_class,
    node_slice,
    partitioned_node,
    profile_claim,
    shared_slice,
    tolerating,
)
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import FAST, Cluster, cluster, eventually, gpu_pod, pfn, phalanx

SHAPE = "blocks=1,racks=1,nodes=3,gpus=8"
CLAIMS = ("resource.k8s.io/v1", "ResourceClaim")
UNHEALTHY = {"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}


def claims(where: Cluster) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in where.store.objects(where.store.resource(*CLAIMS))}


def claiming_pod(where: Cluster, name: str, claim_obj: dict[str, Any], gang: tuple[str, int]) -> None:
    """A pod of ``gang`` that claims ``claim_obj`` (made first) and asks no extended GPUs."""
    where.create(claim_obj)
    resource_claims = [{"name": "gpus", "resourceClaimName": claim_obj["metadata"]["name"]}]
    where.create(gpu_pod(name, gpus=0, annotations=pfn(*gang), resourceClaims=resource_claims))


def results(where: Cluster, name: str) -> list[dict[str, Any]]:
    status = claims(where)[name].get("status") or {}
    return list(((status.get("allocation") or {}).get("devices") or {}).get("results") or [])


def deallocate(where: Cluster, name: str) -> None:
    """What the resourceclaim controller does once no pod uses the claim."""
    released = {"status": {"allocation": None, "reservedFor": None}}
    where.store.patch(where.store.resource(*CLAIMS), "team", name, released, MERGE_PATCH, subresource="status")


async def test_partitions_of_a_gpu_whose_whole_partition_is_allocated_are_not_given_and_the_gang_is_told() -> None:
    """Two nodes of one MIG-partitioned GPU each. The ``7g.80gb`` partition of one is allocated, which
    consumes all of its GPU's counters; a gang of two pods of four ``1g.10gb`` partitions each cannot fit (the
    other GPU has seven) and waits whole, told about the partitions. Once the big claim is released, the
    gang binds one pod per GPU, and no counter is ever consumed beyond its value."""
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        for node in ("b0-r0-n0", "b0-r0-n1"):
            for obj in partitioned_node(node):
                where.create(obj)
        claiming_pod(where, "whole", profile_claim("whole-gpu", "7g.80gb"), ("whole", 1))
        bound = await eventually(lambda: where.bound().get("team/whole"), what="the whole-GPU pod bound")
        for i in range(2):
            claiming_pod(where, f"part-{i}", profile_claim(f"part-{i}-gpus", "1g.10gb", 4), ("parts", 2))
        condition = await eventually(lambda: (c := where.condition("team/part-0")) and c.get("message") and c,
                                     what="the gang told why it waits")  # fmt: skip
        assert set(where.bound()) == {"team/whole"}
        assert not results(where, "part-0-gpus") and not results(where, "part-1-gpus")
        assert (
            "Of the devices of class gpu.nvidia.com that satisfy the claim's selectors: 7 partitions whose GPU's "
            "counters other partitions use (on b0-r0-n0, counter set gpu-0 has 0 of memory left, one needs 10Gi)"
        ) in condition["message"], condition["message"]
        where.delete_pod("team/whole")
        deallocate(where, "whole-gpu")
        final = await eventually(lambda: len(where.bound()) == 2 and where.bound(), what="the gang bound", timeout=60)
        assert set(final.values()) == {"b0-r0-n0", "b0-r0-n1"}, (final, bound)
        for i in range(2):
            devices = [result["device"] for result in results(where, f"part-{i}-gpus")]
            assert len(devices) == 4 and all("-1g-" in device for device in devices)
        await check_invariants(where)


async def test_tainted_devices_go_only_to_requests_that_tolerate_their_taint_with_the_toleration_copied() -> None:
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        tainted = node_slice("b0-r0-n0")
        for device in tainted["spec"]["devices"]:
            device["taints"] = [UNHEALTHY]
        where.create(tainted)
        where.create(node_slice("b0-r0-n1"))
        claiming_pod(where, "first", claim("first-gpus", 8, namespace="team"), ("first", 1))
        assert await eventually(lambda: where.bound().get("team/first")) == "b0-r0-n1"
        claiming_pod(where, "second", claim("second-gpus", 8, namespace="team"), ("second", 1))
        condition = await eventually(
            lambda: (c := where.condition("team/second")) and "taint" in (c.get("message") or "") and c,
            what="the second pod told that the free devices are tainted",
        )
        assert "example.com/unhealthy=true:NoSchedule" in condition["message"], condition["message"]
        assert "team/second" not in where.bound()
        toleration = {"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
        claiming_pod(where, "tolerant", tolerating(claim("tolerant-gpus", 8, namespace="team"), toleration),
                     ("tolerant", 1))  # fmt: skip
        assert await eventually(lambda: where.bound().get("team/tolerant")) == "b0-r0-n0"
        given = results(where, "tolerant-gpus")
        assert len(given) == 8 and all(result["tolerations"] == [toleration] for result in given)
        assert "team/second" not in where.bound()
        await check_invariants(where)


async def test_a_shared_device_serves_claims_by_capacity_each_with_a_share_and_never_beyond_it() -> None:
    """One GPU per node that claims share, 80Gi each, claims of 30Gi: two fit on a GPU, so a gang of four binds
    two pods per node; a fifth claim waits (each GPU has 20Gi left), and every result carries its consumed
    capacity and a share ID of its own."""
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        for node in ("b0-r0-n0", "b0-r0-n1"):
            where.create(shared_slice(node))
        for i in range(4):
            claiming_pod(where, f"s-{i}", capacity_claim(f"s-{i}-gpu", "30Gi"), ("sharing", 4))
        bound = await eventually(lambda: len(where.bound()) == 4 and where.bound(), what="four sharing pods bound")
        assert sorted(bound.values()) == ["b0-r0-n0", "b0-r0-n0", "b0-r0-n1", "b0-r0-n1"]
        shares = [result for i in range(4) for result in results(where, f"s-{i}-gpu")]
        assert all(result["consumedCapacity"] == {"memory": "30Gi"} for result in shares)
        assert len({result["shareID"] for result in shares}) == 4
        claiming_pod(where, "fifth", capacity_claim("fifth-gpu", "30Gi"), ("fifth", 1))
        condition = await eventually(
            lambda: (c := where.condition("team/fifth")) and c.get("message") and c, what="the fifth told"
        )
        assert "team/fifth" not in where.bound(), condition
        await check_invariants(where)


async def test_a_request_rounded_up_by_the_device_s_policy_consumes_the_rounded_amount() -> None:
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        where.create(shared_slice("b0-r0-n0", validRange={"min": "10Gi", "step": "10Gi"}, default="10Gi"))
        claiming_pod(where, "odd", capacity_claim("odd-gpu", "25Gi"), ("odd", 1))
        await eventually(lambda: where.bound().get("team/odd"), what="the pod bound")
        (result,) = results(where, "odd-gpu")
        assert result["consumedCapacity"] == {"memory": "30Gi"}
        await check_invariants(where)


def attached_slice(node: str) -> dict[str, Any]:
    """Eight GPUs the driver attaches before their pods may run (``DRADeviceBindingConditions``)."""
    found = node_slice(node)
    for device in found["spec"]["devices"]:
        device.update(bindingConditions=["dra.example.com/attached"],
                      bindingFailureConditions=["dra.example.com/failed"], bindsToNode=True)  # fmt: skip
    return found


def report(where: Cluster, name: str, condition: str, status: str = "True") -> None:
    """The driver reports ``condition`` of every device of the claim, as it does once it has attached them."""
    devices = [
        {"driver": result["driver"], "pool": result["pool"], "device": result["device"],
         "conditions": [{"type": condition, "status": status, "reason": "Attached", "message": "",
                         "lastTransitionTime": "2026-11-28T00:00:00Z"}]}
        for result in results(where, name)
    ]  # fmt: skip
    where.store.patch(where.store.resource(*CLAIMS), "team", name, {"status": {"devices": devices}}, MERGE_PATCH,
                      subresource="status")  # fmt: skip


async def test_pods_wait_unbound_until_the_driver_reports_every_device_attached_then_bind_whole() -> None:
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        for node in ("b0-r0-n0", "b0-r0-n1"):
            where.create(attached_slice(node))
        for i in range(2):
            claiming_pod(where, f"a-{i}", claim(f"a-{i}-gpus", 8, namespace="team"), ("attached", 2))
        await eventually(lambda: results(where, "a-0-gpus") and results(where, "a-1-gpus"), what="both allocated")
        for i in range(2):
            allocation = claims(where)[f"a-{i}-gpus"]["status"]["allocation"]
            assert allocation["allocationTimestamp"]
            assert all(result["bindingConditions"] == ["dra.example.com/attached"] and
                       result["bindingFailureConditions"] == ["dra.example.com/failed"]
                       for result in allocation["devices"]["results"])  # fmt: skip
        report(where, "a-0-gpus", "dra.example.com/attached")
        await eventually(lambda: claims(where)["a-0-gpus"]["status"].get("devices"), what="the report stored")
        assert not where.bound()  # one claim of two attached: nothing of the gang binds
        report(where, "a-1-gpus", "dra.example.com/attached")
        bound = await eventually(lambda: len(where.bound()) == 2 and where.bound(), what="the gang bound")
        assert set(bound.values()) == {"b0-r0-n0", "b0-r0-n1"}
        await check_invariants(where)


async def test_a_device_that_fails_to_attach_takes_the_allocation_back_and_the_gang_is_tried_again() -> None:
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        where.create(attached_slice("b0-r0-n0"))
        claiming_pod(where, "f", claim("f-gpus", 8, namespace="team"), ("failing", 1))
        await eventually(lambda: results(where, "f-gpus"), what="allocated")
        report(where, "f-gpus", "dra.example.com/failed")
        event = await eventually(lambda: where.events("FailedBinding"), what="the failure told")
        assert "dra.example.com/failed" in event[0]["note"], event[0]["note"]
        assert not where.bound()
        # Taken back, then allocated afresh at the gang's next attempt; this time the driver attaches them.
        await eventually(lambda: results(where, "f-gpus") and not claims(where)["f-gpus"]["status"].get("devices"),
                         what="allocated again, with no stale report", timeout=60)  # fmt: skip
        report(where, "f-gpus", "dra.example.com/attached")
        assert await eventually(lambda: where.bound().get("team/f"), timeout=30) == "b0-r0-n0"
        await check_invariants(where)


async def test_devices_the_driver_never_reports_attached_are_taken_back_after_the_binding_timeout() -> None:
    """Nothing reports the devices attached: after ``binding.deviceBindingTimeoutSeconds`` the allocation is taken
    back (the claim is free for others), the gang is told, and no pod was bound."""
    patient = replace(FAST.binding, device_binding_timeout_seconds=0.5)
    async with cluster(SHAPE) as where, phalanx(where, binding=patient):
        where.create(device_class())
        where.create(attached_slice("b0-r0-n0"))
        claiming_pod(where, "late", claim("late-gpus", 8, namespace="team"), ("late", 1))
        await eventually(lambda: results(where, "late-gpus"), what="allocated")
        event = await eventually(lambda: where.events("FailedBinding"), what="the timeout told")
        assert "did not report" in event[0]["note"] and "within 0.5s" in event[0]["note"], event[0]["note"]
        await eventually(lambda: not results(where, "late-gpus") or len(where.events("FailedBinding")) > 1,
                         what="taken back (or taken back and allocated again)")  # fmt: skip
        assert not where.bound()
        await check_invariants(where)


async def test_a_gang_asking_an_extended_resource_devices_serve_is_told_what_the_cluster_holds_when_empty() -> None:
    """Two nodes of eight devices; six of one node's are a claim's, counted in the claim's own column. A gang of
    three pods of ``example.com/gpu: 4`` (served by the same devices) fits two pods now, and an empty cluster
    would hold four: it waits for room, and is not told the cluster could never hold it."""
    async with cluster(SHAPE) as where, phalanx(where):
        served = device_class("gpu-extended")
        served["spec"]["extendedResourceName"] = "example.com/gpu"
        where.create(served)
        for node in ("b0-r0-n0", "b0-r0-n1"):
            where.create(node_slice(node))
        claiming_pod(where, "first", claim("first-gpus", 6, namespace="team", device_class_name="gpu-extended"),
                     ("first", 1))  # fmt: skip
        await eventually(lambda: where.bound().get("team/first"), what="the first pod bound")
        for i in range(3):
            pod = gpu_pod(f"w-{i}", gpus=0, annotations=pfn("w", 3))
            pod["spec"]["containers"][0]["resources"]["limits"]["example.com/gpu"] = "4"
            where.create(pod)
        condition = await eventually(lambda: (c := where.condition("team/w-0")) and c.get("message") and c,
                                     what="the gang told why it waits")  # fmt: skip
        assert "even if it were empty" not in condition["message"], condition["message"]
        assert "Gang team/w needs 3 pods; the cluster fits 2" in condition["message"], condition["message"]
        assert set(where.bound()) == {"team/first"}
        await check_invariants(where)


async def test_a_pod_joining_a_claim_allocated_before_waits_for_its_devices_to_be_attached_too() -> None:
    """A claim allocated before (by an earlier attempt, or for pods of another gang) to devices whose driver has
    not reported them attached: a pod that joins it is reserved, and binds only once they are."""
    async with cluster(SHAPE) as where, phalanx(where):
        where.create(device_class())
        where.create(attached_slice("b0-r0-n0"))
        given = claim("early", 2, namespace="team")
        where.create(given)
        results_before = [
            {"request": "gpus", "driver": GPU_DRIVER, "pool": "b0-r0-n0", "device": f"gpu-{i}",
             "bindingConditions": ["dra.example.com/attached"], "bindingFailureConditions": ["dra.example.com/failed"]}
            for i in range(2)
        ]  # fmt: skip
        node = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0-r0-n0"]}]}]
        }
        allocation = {"devices": {"results": results_before}, "nodeSelector": node}
        where.store.patch(where.store.resource(*CLAIMS), "team", "early", {"status": {"allocation": allocation}},
                          MERGE_PATCH, subresource="status")  # fmt: skip
        where.create(gpu_pod("joining", gpus=0, annotations=pfn("joining", 1),
                             resourceClaims=[{"name": "gpus", "resourceClaimName": "early"}]))  # fmt: skip
        await eventually(lambda: (claims(where)["early"].get("status") or {}).get("reservedFor"), what="reserved")
        assert "team/joining" not in where.bound()
        report(where, "early", "dra.example.com/attached")
        assert await eventually(lambda: where.bound().get("team/joining"), what="bound once attached") == "b0-r0-n0"
        await check_invariants(where)
