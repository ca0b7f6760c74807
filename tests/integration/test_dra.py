"""Dynamic Resource Allocation on kube-apiserver 1.36: the objects the device tests use are what the server
accepts, strictly, and Phalanx watches them with exactly the rights its manifests give it."""

from __future__ import annotations

from scripts.controlplane import ControlPlane
from tests.devices.support import claim, device_class, node_slice
from tests.integration.support import PHALANX_USER, PhalanxProcess, ensure_namespace, eventually, requests_by

DRA = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")


def test_the_device_objects_are_valid_and_phalanx_watches_them_with_its_own_rights(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "ml")
    plane.apply(device_class())
    plane.apply(node_slice("dra-n0"))
    created = plane.apply(claim("gpus", 2, "device.attributes['gpu.nvidia.com'].type == 'gpu'"))
    assert created["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"
    allocated = claim("gpus", 2, allocated=[("dra-n0", "gpu-0"), ("dra-n0", "gpu-1")])["status"]
    written = plane.call(
        "PUT",
        "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/gpus/status?fieldValidation=Strict",
        {**created, "status": allocated},
    )
    assert [result["device"] for result in written["status"]["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1"]

    def watched() -> set[str]:
        return {
            resource
            for event in requests_by(plane, PHALANX_USER)
            if event["verb"] in ("list", "watch") and (event.get("responseStatus") or {}).get("code") == 200
            for resource in DRA
            if f"/apis/resource.k8s.io/v1/{resource}" in event["requestURI"]
        }

    eventually(lambda: watched() == set(DRA), what=f"Phalanx's list and watch of each of {DRA}")
