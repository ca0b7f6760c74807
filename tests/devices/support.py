"""DRA objects as drivers and users write them (resource.k8s.io/v1), for the device tests."""

from __future__ import annotations

from typing import Any

GPU_DRIVER = "gpu.nvidia.com"


def gpu(
    name: str,
    *,
    product: str = "NVIDIA H100 80GB HBM3",
    memory: str = "80Gi",
    clique: str = "c0",
    **attributes: dict[str, Any],
) -> dict[str, Any]:
    """A GPU as NVIDIA's DRA driver publishes it."""
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "driverVersion": {"version": "550.54.15"},
            "index": {"int": int(name.rsplit("-", 1)[-1])},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
            "cliqueId": {"string": clique},
            **attributes,
        },
        "capacity": {"memory": {"value": memory}},
    }  # fmt: skip


def node_slice(
    node: str,
    count: int = 8,
    *,
    generation: int = 1,
    pool_slices: int = 1,
    name: str | None = None,
    driver: str = GPU_DRIVER,
    **device: Any,
) -> dict[str, Any]:
    """One ResourceSlice of ``count`` GPUs on ``node``, its pool named after the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-gpu"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": pool_slices},
            "devices": [gpu(f"gpu-{i}", **device) for i in range(count)],
        },
    }  # fmt: skip


def device_class(name: str = GPU_DRIVER, *selectors: str) -> dict[str, Any]:
    expressions = selectors or (f"device.driver == '{GPU_DRIVER}'",)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}} for expression in expressions]},
    }


def claim(
    name: str,
    count: int = 1,
    *selectors: str,
    namespace: str = "ml",
    allocated: list[tuple[str, str]] = (),
    device_class_name: str = GPU_DRIVER,
) -> dict[str, Any]:
    """A claim of ``count`` devices of the class; ``allocated``: (pool, device) already given to it."""
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": device_class_name,
                            "count": count,
                            "selectors": [{"cel": {"expression": expression}} for expression in selectors],
                        },
                    }
                ]
            }
        },
    }
    if allocated:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": GPU_DRIVER, "pool": pool, "device": device}
                        for pool, device in allocated
                    ]
                }
            }
        }
    return obj  # fmt: skip


def first_available(name: str, *ways: tuple[str, str, int], namespace: str = "ml") -> dict[str, Any]:
    """A claim of one request, ``gpus``, met by the first of ``ways`` (subrequest name, CEL selector, count)
    that can be."""
    alternatives = [
        {"name": sub, "deviceClassName": GPU_DRIVER, "count": count,
         "selectors": [{"cel": {"expression": expression}}]}
        for sub, expression, count in ways
    ]  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpus", "firstAvailable": alternatives}]}},
    }


def networked_slice(name: str, count: int, *, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pool of ``count`` GPUs on no one node (network-attached): every node reaches them, or those
    ``selector`` (a NodeSelector) selects."""
    found = node_slice(name, count, clique=f"{name}-fabric")
    del found["spec"]["nodeName"]
    found["spec"].update({"nodeSelector": selector} if selector is not None else {"allNodes": True})
    return found


def partitioned_node(
    node: str, gpus: int = 1, *, taint: dict[str, str] | None = None, driver: str = GPU_DRIVER
) -> list[dict[str, Any]]:
    """A node's GPUs as NVIDIA's driver publishes MIG partitions (``DRAPartitionableDevices``): one slice of
    counter sets (each GPU's memory and its seven compute slices), one of partitions that consume them: seven
    ``1g.10gb`` and one ``7g.80gb`` per GPU."""
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    counters = [
        {"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}} for g in range(gpus)
    ]
    devices = []
    for g in range(gpus):
        for profile, memory, slices, names in (("1g.10gb", "10Gi", "1", range(7)), ("7g.80gb", "80Gi", "7", range(1))):
            for k in names:
                device = {
                    "name": f"gpu-{g}-{profile.split('.')[0]}-{k}",
                    "attributes": {"profile": {"string": profile}, "parentIndex": {"int": g}},
                    "capacity": {"memory": {"value": memory}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}",
                                          "counters": {"memory": {"value": memory}, "slices": {"value": slices}}}],
                }  # fmt: skip
                if taint is not None:
                    device["taints"] = [taint]
                devices.append(device)
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-counters"},
         "spec": {"driver": driver, "nodeName": node, "pool": pool, "sharedCounters": counters}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-partitions"},
         "spec": {"driver": driver, "nodeName": node, "pool": pool, "devices": devices}},
    ]  # fmt: skip


def profile_claim(
    name: str, profile: str, count: int = 1, *, namespace: str = "team", driver: str = GPU_DRIVER
) -> dict[str, Any]:
    """A claim of ``count`` partitions of one MIG profile (``1g.10gb``, ``7g.80gb``), of the class named after
    the driver."""
    return claim(name, count, f"device.attributes['{driver}'].profile == '{profile}'", namespace=namespace,
                 device_class_name=driver)  # fmt: skip


def shared_slice(
    node: str, count: int = 1, memory: str = "80Gi", *, driver: str = GPU_DRIVER, **policy: Any
) -> dict[str, Any]:
    """``count`` GPUs on ``node`` that several claims share, each consuming part of their memory
    (``DRAConsumableCapacity``), with ``policy`` as the memory's ``requestPolicy``."""
    found = node_slice(node, count, memory=memory, driver=driver)
    for device in found["spec"]["devices"]:
        device["allowMultipleAllocations"] = True
        if policy:
            device["capacity"]["memory"]["requestPolicy"] = policy
    return found


def capacity_claim(
    name: str, memory: str, *, namespace: str = "team", device_class_name: str = GPU_DRIVER
) -> dict[str, Any]:
    """A claim of one share of a GPU: ``memory`` of its capacity."""
    found = claim(name, 1, namespace=namespace, device_class_name=device_class_name)
    found["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return found


def tolerating(obj: dict[str, Any], *tolerations: dict[str, Any]) -> dict[str, Any]:
    """The claim with its request tolerating ``tolerations`` (device taints)."""
    obj["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = list(tolerations)
    return obj
