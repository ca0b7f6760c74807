"""The DRA objects as ClusterState keeps them from its informers: which devices a request may have, free,
per node. Pools count only whole at their newest generation; what cannot be read is said, not used."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scheduler.clock import ManualClock
from scheduler.devices.claims import ClaimError, PodClaim, column, pod_claims, read_claim
from scheduler.devices.expressions import SelectorError
from scheduler.devices.inventory import Devices
from scheduler.gangs import GangKey
from scheduler.ports.port import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Change
from scheduler.ports.sim import ClusterShape
from scheduler.settings import Settings
from scheduler.state import ClusterState
from tests.devices.support import claim, device_class, networked_slice, node_slice, partitioned_node, profile_claim
from topology import Assignment, pod_shape
from topology.request import NodeSelectorTerm


def state_with(*objects: tuple[Any, dict[str, Any]]) -> ClusterState:
    state = ClusterState(Settings(), ManualClock())
    for resource, obj in objects:
        state.apply(resource, Change("ADDED", obj))
    return state


def request_of(obj: dict[str, Any]) -> Any:
    return read_claim(obj).requests[0].alternatives[0]


def test_free_devices_per_node_are_those_of_the_class_and_the_request_not_allocated_elsewhere() -> None:
    state = state_with(
        (DEVICE_CLASSES, device_class()),
        (RESOURCE_SLICES, node_slice("n0")),
        (RESOURCE_SLICES, node_slice("n1", product="NVIDIA A100-SXM4-40GB", memory="40Gi")),
        (RESOURCE_CLAIMS, claim("running", 2, allocated=[("n0", "gpu-0"), ("n0", "gpu-1")])),
    )
    devices = state.devices
    assert devices.free_by_node(request_of(claim("any", 1))) == {"n0": 6, "n1": 8}
    big = request_of(claim("big", 1, "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0"))
    assert devices.free_by_node(big) == {"n0": 6}
    state.apply(RESOURCE_CLAIMS, Change("DELETED", claim("running", 2)))  # its devices are free again
    assert devices.free_by_node(big) == {"n0": 8}


def test_a_pool_counts_only_whole_at_its_newest_generation() -> None:
    half = node_slice("n0", 4, generation=2, pool_slices=2, name="n0-a")
    state = state_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0", 8, generation=1)))
    any_gpu = request_of(claim("any", 1))
    assert state.devices.free_by_node(any_gpu) == {"n0": 8}
    state.apply(RESOURCE_SLICES, Change("ADDED", half))  # the driver republishes: half of generation 2 is there
    assert state.devices.free_by_node(any_gpu) == {}
    assert state.devices.pools.incomplete() == [("gpu.nvidia.com", "n0")]
    state.apply(RESOURCE_SLICES, Change("ADDED", node_slice("n0", 4, generation=2, pool_slices=2, name="n0-b")))
    assert state.devices.free_by_node(any_gpu) == {"n0": 8}  # 4 + 4 of generation 2; generation 1 is gone


def test_a_slice_that_cannot_be_read_is_said_and_keeps_its_pool_out() -> None:
    broken = node_slice("n0")
    broken["spec"]["devices"][0]["capacity"] = {"memory": {"value": "eighty"}}
    state = state_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, broken))
    assert state.devices.free_by_node(request_of(claim("any", 1))) == {}
    ((kind, name), problem), *_ = state.devices.problems.items()
    assert (kind, name) == ("ResourceSlice", "n0-gpu") and "eighty" in problem


def test_relisting_forgets_the_objects_the_server_no_longer_has() -> None:
    state = state_with(
        (DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")), (RESOURCE_SLICES, node_slice("n1"))
    )
    state.prune(RESOURCE_SLICES, {("", "n1-gpu")})
    assert state.devices.free_by_node(request_of(claim("any", 1))) == {"n1": 8}


def test_a_request_names_its_class_and_its_selectors_must_work() -> None:
    state = state_with((RESOURCE_SLICES, node_slice("n0")))
    with pytest.raises(ClaimError, match=re.escape("DeviceClass gpu.nvidia.com does not exist")):
        state.devices.free_by_node(request_of(claim("any", 1)))
    state.apply(DEVICE_CLASSES, Change("ADDED", device_class()))
    with pytest.raises(SelectorError, match=re.escape("failed on a device of gpu.nvidia.com")):
        state.devices.free_by_node(request_of(claim("x", 1, "device.attributes['gpu.nvidia.com'].missing == 1")))


def test_a_claim_reads_exactly_first_available_constraints_allocation_and_reservation() -> None:
    obj = claim("c", 2, allocated=[("n0", "gpu-0")])
    obj["spec"]["devices"]["requests"].append(
        {"name": "small", "firstAvailable": [
            {"name": "mig", "deviceClassName": "mig.nvidia.com"},
            {"name": "whole", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
        ]}
    )  # fmt: skip
    obj["spec"]["devices"]["constraints"] = [{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/cliqueId"}]
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    read = read_claim(obj)
    assert [(r.name, [(a.name, a.device_class, a.mode, a.count) for a in r.alternatives]) for r in read.requests] == [
        ("gpus", [("gpus", "gpu.nvidia.com", "ExactCount", 2)]),
        ("small", [("small/mig", "mig.nvidia.com", "ExactCount", 1), ("small/whole", "gpu.nvidia.com", "All", 0)]),
    ]
    assert read.constraints[0].match == "gpu.nvidia.com/cliqueId"
    assert (read.allocated, read.reserved_for) == ((("gpu.nvidia.com", "n0", "gpu-0"),), ("uid-p",))
    with pytest.raises(ClaimError, match=r"requests\[0\].exactly.count: 0 is not a positive integer"):
        read_claim(claim("zero", 0))


def test_a_pod_names_its_claims_directly_or_through_a_template_once_its_claim_is_made() -> None:
    pod = {
        "spec": {"resourceClaims": [
            {"name": "gpus", "resourceClaimTemplateName": "eight-gpus"},
            {"name": "channel", "resourceClaimName": "domain-channel"},
        ]},
        "status": {},
    }  # fmt: skip
    assert pod_claims(pod) == (
        PodClaim("gpus", None, "eight-gpus"),  # the resourceclaim controller has not made it yet
        PodClaim("channel", "domain-channel", None),
    )
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "train-0-gpus-x7k2p"}]}
    assert pod_claims(pod)[0] == PodClaim("gpus", "train-0-gpus-x7k2p", "eight-gpus")


def test_networked_devices_are_offered_by_every_node_that_reaches_them_while_they_are_free() -> None:
    """A fabric of 4 GPUs every node reaches, and 2 that only rack r1 reaches, beside n0's own 2: each node
    offers its own and the free networked ones it reaches; allocating 3 of the fabric's takes them from all."""
    racked = networked_slice("racked", 2, selector={"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "example.com/rack", "operator": "In", "values": ["r1"]}]}]})  # fmt: skip
    devices = Devices()
    for resource, obj in ((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0", 2)),
                          (RESOURCE_SLICES, networked_slice("fabric", 4)), (RESOURCE_SLICES, racked)):  # fmt: skip
        devices.apply(resource, "ADDED", obj)
    wanted = request_of(claim("c", 1))
    devices.register("gpus", wanted)
    nodes = {"n0": "r0", "n1": "r0", "n2": "r1"}

    def reach(terms: tuple[NodeSelectorTerm, ...]) -> list[str]:
        if not terms:
            return list(nodes)
        values = set(terms[0].match_expressions[0].values)
        return [node for node, rack in nodes.items() if rack in values]

    assert devices.supply(reach) == {"n0": {"gpus": 6}, "n1": {"gpus": 4}, "n2": {"gpus": 6}}
    devices.dirty = False
    given = claim("given", 3, allocated=[("fabric", f"gpu-{i}") for i in range(3)])
    devices.apply(RESOURCE_CLAIMS, "ADDED", given)
    assert devices.dirty  # what networked devices are free changed
    assert devices.supply(reach) == {"n0": {"gpus": 3}, "n1": {"gpus": 1}, "n2": {"gpus": 3}}
    # A node uses its own devices first, then networked ones it reaches.
    found = devices.candidates(wanted, "n2", set(), lambda terms, node: not terms or node == "n2")
    assert [(device.pool, device.name) for device in found] == [("fabric", "gpu-3"), ("racked", "gpu-0"),
                                                               ("racked", "gpu-1")]  # fmt: skip


def test_a_placed_pod_whose_claim_gets_networked_devices_no_longer_counts_them_on_its_node() -> None:
    """No node offers an allocated networked device any more; the pod that got it, placed and waiting to
    bind, stops counting it on its node at the same time, or its node would look crowded when it binds."""
    state = state_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, networked_slice("fabric", 4)),
                       (NODES, ClusterShape.parse("blocks=1,racks=1,nodes=1,gpus=0").manifests()[0]),
                       (RESOURCE_CLAIMS, claim("w-gpus", 2)))  # fmt: skip
    pod = {"metadata": {"name": "w", "namespace": "ml", "uid": "uid-w"},
           "spec": {"schedulerName": "phalanx", "containers": [{"name": "main", "image": "pause"}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": "w-gpus"}]}}  # fmt: skip
    state.apply(PODS, Change("ADDED", pod))
    state.take_signals()
    state.assume(GangKey("pfn:ml/w"), [Assignment(pod="ml/w", node="b0-r0-n0", shape=pod_shape(pod, state.kinds))])
    assert state.assumed["ml/w"].requests["devices/gpu.nvidia.com"] == 2
    given = claim("w-gpus", 2, allocated=[("fabric", "gpu-0"), ("fabric", "gpu-1")])
    given["status"]["reservedFor"] = [{"resource": "pods", "name": "w", "uid": "uid-w"}]
    state.apply(RESOURCE_CLAIMS, Change("MODIFIED", given))
    state.take_signals()
    assert state.assumed["ml/w"].requests["devices/gpu.nvidia.com"] == 0
    assert state.overcommitted(["b0-r0-n0"]) == []


def test_a_partition_allocated_on_one_node_blocks_that_node_s_other_partitions_until_it_is_released() -> None:
    """Each node offers seven 1g partitions of its GPU; a 7g partition allocated on one node (to a claim no
    pending pod counts in the 1g column) keeps all seven there, counted as room in use (blocked), and nothing
    elsewhere; released, the node offers them again. Read again only where the allocation changed."""
    devices = Devices()
    devices.apply(DEVICE_CLASSES, "ADDED", device_class())
    for node in ("n0", "n1"):
        for obj in partitioned_node(node):
            devices.apply(RESOURCE_SLICES, "ADDED", obj)
    small = request_of(profile_claim("small", "1g.10gb"))
    devices.register(column(small), small)

    def everywhere(terms: object) -> list[str]:
        return ["n0", "n1"]

    assert {node: offered[column(small)] for node, offered in devices.supply(everywhere).items()} == {"n0": 7, "n1": 7}
    assert devices.blocked == {}
    whole = profile_claim("whole", "7g.80gb")
    whole["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n0", "device": "gpu-0-7g-0"}]}}}  # fmt: skip
    devices.apply(RESOURCE_CLAIMS, "MODIFIED", whole)
    assert devices.dirty
    offered = devices.supply(everywhere)
    assert offered["n0"][column(small)] == 7 and devices.blocked == {"n0": {column(small): 7}}
    assert "counter set gpu-0 has 0 of memory left" in devices.note(column(small))
    del whole["status"]
    devices.apply(RESOURCE_CLAIMS, "MODIFIED", whole)
    devices.supply(everywhere)
    assert devices.blocked == {} and devices.note(column(small)) == ""
