"""PreBind's choice of devices (``devices/allocation.py``): a claim's count on its pod's node, never a device
twice, its constraints kept, and the allocation written as kube-scheduler writes it."""

from __future__ import annotations

from typing import Any

from scheduler.devices.allocation import plan, taken_back
from scheduler.devices.inventory import Devices, Release
from scheduler.ports.port import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.devices.support import GPU_DRIVER, claim, device_class, first_available, node_slice, partitioned_node


def devices_with(*objects: tuple[Any, dict[str, Any]]) -> Devices:
    devices = Devices()
    for resource, obj in objects:
        devices.apply(resource, "ADDED", obj)
    return devices


def pod(name: str, *claims: str) -> dict[str, Any]:
    named = [{"name": f"c{i}", "resourceClaimName": claim_name} for i, claim_name in enumerate(claims)]
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"}, "spec": {"resourceClaims": named}}


def two_cliques() -> dict[str, Any]:
    """8 GPUs on n0: 0-3 in NVLink clique a, 4-7 in clique b."""
    found = node_slice("n0")
    for device in found["spec"]["devices"]:
        device["attributes"]["cliqueId"] = {"string": "a" if device["attributes"]["index"]["int"] < 4 else "b"}
    return found


def test_each_claim_gets_its_count_on_its_pod_s_node_and_no_device_twice() -> None:
    devices = devices_with(
        (DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")), (RESOURCE_SLICES, node_slice("n1")),
        (RESOURCE_CLAIMS, claim("a", 3)), (RESOURCE_CLAIMS, claim("b", 3)), (RESOURCE_CLAIMS, claim("c", 4)),
    )  # fmt: skip
    writes = plan(devices, [(pod("p", "a"), "n0"), (pod("q", "b"), "n0"), (pod("r", "c"), "n1")])
    assert not isinstance(writes, str)
    chosen = {write.name: [device for _, pool, device in write.devices] for write in writes}
    assert chosen == {"a": ["gpu-0", "gpu-1", "gpu-2"], "b": ["gpu-3", "gpu-4", "gpu-5"],
                      "c": ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]}  # fmt: skip
    status = writes[0].status
    assert status["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    term = status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
    assert writes[0].version == ""  # the claim's version, the precondition of its first write
    assert writes[0].finalizers == ("resource.kubernetes.io/delete-protection",)  # as kube-scheduler protects it
    # Chosen devices are held until the watch shows them given: a gang binding beside gets others, or none.
    devices.apply(RESOURCE_CLAIMS, "ADDED", claim("d", 3))
    refused = plan(devices, [(pod("s", "d"), "n0")])
    assert refused == "ResourceClaim ml/d needs 3 of class gpu.nvidia.com on n0, and fewer are free there"
    for write in writes:  # taken back (a bind failed): free again
        devices.put_back(write.devices)
    again = plan(devices, [(pod("s", "d"), "n0")])
    assert not isinstance(again, str) and [device for *_, device in again[0].devices] == ["gpu-0", "gpu-1", "gpu-2"]


def test_match_attribute_takes_devices_of_one_value_and_is_refused_when_no_value_has_enough() -> None:
    same_clique = claim("same", 4)
    same_clique["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/cliqueId"}]
    too_many = claim("many", 6)
    too_many["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/cliqueId"}]
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, two_cliques()),
                           (RESOURCE_CLAIMS, same_clique), (RESOURCE_CLAIMS, too_many))  # fmt: skip
    (write,) = plan(devices, [(pod("p", "same"), "n0")])  # type: ignore[misc]
    assert [device for *_, device in write.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]  # all of clique a
    assert plan(devices, [(pod("q", "many"), "n0")]) == (
        "ResourceClaim ml/many needs 6 of class gpu.nvidia.com on n0, and fewer are free there that satisfy its "
        "constraints"
    )


def test_distinct_attribute_takes_devices_whose_values_differ() -> None:
    spread = claim("spread", 2)
    spread["spec"]["devices"]["constraints"] = [{"distinctAttribute": "gpu.nvidia.com/cliqueId"}]
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, two_cliques()),
                           (RESOURCE_CLAIMS, spread))  # fmt: skip
    (write,) = plan(devices, [(pod("p", "spread"), "n0")])  # type: ignore[misc]
    assert [device for *_, device in write.devices] == ["gpu-0", "gpu-4"]  # one of each clique


def test_a_claim_the_gang_s_pods_share_is_allocated_once_and_reserved_for_each() -> None:
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")),
                           (RESOURCE_CLAIMS, claim("shared", 4)))  # fmt: skip
    writes = plan(devices, [(pod("p", "shared"), "n0"), (pod("q", "shared"), "n0")])
    assert not isinstance(writes, str)
    (write,) = writes
    assert write.pods == ("ml/p", "ml/q") and len(write.devices) == 4
    assert [ref["name"] for ref in write.status["reservedFor"]] == ["p", "q"]
    assert plan(devices, [(pod("p", "shared"), "n0"), (pod("q", "shared"), "n1")]) == (
        "ResourceClaim ml/shared is shared by pods placed on n0 and n1: its devices serve one"
    )


def test_a_pod_joining_an_allocated_claim_is_added_to_its_reservations_and_taking_back_removes_only_it() -> None:
    running = claim("shared", 2, allocated=[("n0", "gpu-0"), ("n0", "gpu-1")])
    running["status"]["reservedFor"] = [{"resource": "pods", "name": "first", "uid": "uid-first"}]
    running["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}  # fmt: skip
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")),
                           (RESOURCE_CLAIMS, running))  # fmt: skip
    writes = plan(devices, [(pod("second", "shared"), "n0")])
    assert not isinstance(writes, str)
    (write,) = writes
    assert write.devices == () and write.finalizers is None and set(write.status) == {"reservedFor"}
    assert [ref["name"] for ref in write.status["reservedFor"]] == ["first", "second"]
    assert taken_back(write, "7")["status"] == {"reservedFor": [running["status"]["reservedFor"][0]]}
    assert plan(devices, [(pod("second", "shared"), "n1")]) == "ResourceClaim ml/shared is allocated on n0, not on n1"


def test_first_available_takes_the_first_alternative_the_node_has_enough_of() -> None:
    b200 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")),
                           (RESOURCE_CLAIMS, first_available("f", ("b200", b200, 2), ("any", "true", 3))))  # fmt: skip
    writes = plan(devices, [(pod("p", "f"), "n0")])
    assert not isinstance(writes, str)
    (write,) = writes
    assert [result["request"] for result in write.status["allocation"]["devices"]["results"]] == ["gpus/any"] * 3


def test_a_claim_whose_take_back_the_watch_has_not_shown_is_not_used_until_it_has() -> None:
    """PreBind took an allocation back; until the watch shows the version that wrote, the claim known here
    is stale (still allocated), and a PreBind that trusted it would bind a pod to devices being released."""
    given = claim("c", 2, allocated=[("n0", "gpu-0"), ("n0", "gpu-1")])
    given["metadata"]["resourceVersion"] = "5"
    given["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")),
                           (RESOURCE_CLAIMS, given))  # fmt: skip
    devices.releasing["ml/c"] = Release(deallocates=True, pods=set())
    assert plan(devices, [(pod("p", "c"), "n0")]) == (
        "ResourceClaim ml/c is being released by an earlier attempt; the gang is tried again soon"
    )
    devices.apply(RESOURCE_CLAIMS, "MODIFIED", {**given, "metadata": {**given["metadata"], "resourceVersion": "6"}})
    assert "ml/c" in devices.releasing  # a later version, still allocated: not the take-back yet
    devices.apply(RESOURCE_CLAIMS, "MODIFIED", claim("c", 2))
    writes = plan(devices, [(pod("p", "c"), "n0")])
    assert not isinstance(writes, str) and len(writes[0].devices) == 2  # allocated afresh


def test_a_podgroup_s_claim_is_reserved_once_for_the_group_and_a_later_member_writes_nothing() -> None:
    """A pod whose entry is exactly its PodGroup's uses the group's claim: it is reserved for the PodGroup (one
    entry, whatever the number of pods), and a member placed once it is allocated joins without a write. A pod
    whose entry differs from the group's keeps its own reservation."""
    group = {"metadata": {"name": "replica", "namespace": "ml", "uid": "uid-replica"},
             "spec": {"resourceClaims": [{"name": "c0", "resourceClaimName": "shared"}]}}  # fmt: skip
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0")),
                           (RESOURCE_CLAIMS, claim("shared", 4)))  # fmt: skip
    devices.apply_group("ADDED", group)

    def member(name: str) -> dict[str, Any]:
        found = pod(name, "shared")
        found["spec"]["schedulingGroup"] = {"podGroupName": "replica"}
        return found

    writes = plan(devices, [(member("p"), "n0"), (member("q"), "n0")])
    assert not isinstance(writes, str)
    (write,) = writes
    assert write.pods == ("ml/p", "ml/q") and len(write.devices) == 4
    assert write.status["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "replica", "uid": "uid-replica"}
    ]
    given = claim("shared", 4, allocated=[("n0", f"gpu-{i}") for i in range(4)])
    given["status"]["reservedFor"] = write.status["reservedFor"]
    given["status"]["allocation"]["nodeSelector"] = write.status["allocation"]["nodeSelector"]
    devices.apply(RESOURCE_CLAIMS, "MODIFIED", given)
    assert plan(devices, [(member("r"), "n0")]) == []
    (outsider,) = plan(devices, [(pod("s", "shared"), "n0")])  # type: ignore[misc]  # not in the group
    assert [ref["name"] for ref in outsider.status["reservedFor"]] == ["replica", "s"]


def test_every_device_takes_all_of_the_node_s_own_and_is_refused_while_one_is_taken() -> None:
    whole = claim("whole", 1)
    whole["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": GPU_DRIVER, "allocationMode": "All"}
    devices = devices_with((DEVICE_CLASSES, device_class()), (RESOURCE_SLICES, node_slice("n0", 4)),
                           (RESOURCE_CLAIMS, whole))  # fmt: skip
    (write,) = plan(devices, [(pod("p", "whole"), "n0")])  # type: ignore[misc]
    assert sorted(device for _, _, device in write.devices) == [f"gpu-{i}" for i in range(4)]
    devices.put_back(write.devices)
    devices.apply(RESOURCE_CLAIMS, "ADDED", claim("one", 1, allocated=[("n0", "gpu-2")]))
    assert plan(devices, [(pod("p", "whole"), "n0")]) == (
        "ResourceClaim ml/whole needs every device of class gpu.nvidia.com on n0, and fewer are free there"
    )


def test_partitions_are_chosen_smallest_first_and_together_never_beyond_their_gpu_s_counters() -> None:
    """A claim of any two partitions gets two 1g ones (the whole-GPU partition, first by name, would spend
    every counter and leave nothing for the second), and a claim of any eight (seven 1g partitions, then the
    whole GPU's) is refused with the counter that is short."""
    slices = ((RESOURCE_SLICES, obj) for obj in partitioned_node("n0"))
    devices = devices_with((DEVICE_CLASSES, device_class()), *slices)
    devices.apply(RESOURCE_CLAIMS, "ADDED", claim("any-two", 2))
    (write,) = plan(devices, [(pod("p", "any-two"), "n0")])  # type: ignore[misc]
    assert [device for _, _, device in write.devices] == ["gpu-0-1g-0", "gpu-0-1g-1"]
    devices.put_back(write.devices, "ml/any-two")
    devices.apply(RESOURCE_CLAIMS, "ADDED", claim("eight", 8))
    refused = plan(devices, [(pod("q", "eight"), "n0")])
    assert isinstance(refused, str), refused
    assert "(partition gpu-0-7g-0: counter set gpu-0 has 10Gi of memory left, one needs 80Gi)" in refused, refused
