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
    node: str, count: int = 8, *, generation: int = 1, pool_slices: int = 1, name: str | None = None, **device: Any
) -> dict[str, Any]:
    """One ResourceSlice of ``count`` GPUs on ``node``, its pool named after the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-gpu"},
        "spec": {
            "driver": GPU_DRIVER,
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
