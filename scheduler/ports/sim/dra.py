"""What kube-apiserver does to Dynamic Resource Allocation objects (``resource.k8s.io/v1``) on their way in.

A device request's ``allocationMode`` defaults to ``ExactCount`` and, so counted, its ``count`` to 1, in a
claim and in a template's claim alike (``k8s.io/kubernetes/pkg/apis/resource/v1/defaults.go``). A status
write that deallocates devices loses what drivers reported of them (``status.devices``), as the server's
strategy drops them before it validates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def default_claim_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaim's ``spec`` with its device requests defaulted."""
    devices = spec.get("devices")
    if not isinstance(devices, Mapping) or not isinstance(devices.get("requests"), list):
        return dict(spec)
    return {**spec, "devices": {**devices, "requests": [_request(request) for request in devices["requests"]]}}


def drop_deallocated_devices(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A claim's ``status`` without the device reports of devices it no longer has allocated."""
    if not isinstance(status, Mapping) or not status.get("devices"):
        return status
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    allocated = {_device(result) for result in results if isinstance(result, Mapping)}
    kept = [entry for entry in status["devices"] if isinstance(entry, Mapping) and _device(entry) in allocated]
    found = {**status, "devices": kept}
    if not kept:
        del found["devices"]
    return found


def _device(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (str(entry.get("driver")), str(entry.get("pool")), str(entry.get("device")),
            str(entry.get("shareID") or ""))  # fmt: skip


def default_template_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaimTemplate's ``spec``: the claim spec it holds, defaulted."""
    inner = spec.get("spec")
    return {**spec, "spec": default_claim_spec(inner)} if isinstance(inner, Mapping) else dict(spec)


def _request(request: object) -> object:
    if not isinstance(request, Mapping):
        return request
    found = dict(request)
    if isinstance(found.get("exactly"), Mapping):
        found["exactly"] = _counted(found["exactly"])
    if isinstance(found.get("firstAvailable"), list):
        found["firstAvailable"] = [
            _counted(sub) if isinstance(sub, Mapping) else sub for sub in found["firstAvailable"]
        ]
    return found


def _counted(request: Mapping[str, Any]) -> dict[str, Any]:
    mode = request.get("allocationMode") or "ExactCount"
    found = {**request, "allocationMode": mode}
    if mode == "ExactCount" and not found.get("count"):
        found["count"] = 1
    return found
