"""PreBind's choice of devices (``devices/allocation.py``): a claim's count on its pod's node, never a device
twice, its constraints kept, and the allocation written as kube-scheduler writes it."""

from __future__ import annotations

from typing import Any

from scheduler.devices.allocation import plan
from scheduler.devices.inventory import Devices
from scheduler.ports.port import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.devices.support import claim, device_class, node_slice


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
        devices.release(write.devices)
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
