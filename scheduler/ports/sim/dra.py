"""What kube-apiserver does to Dynamic Resource Allocation objects (``resource.k8s.io/v1``) on their way in.

A device request's ``allocationMode`` defaults to ``ExactCount`` and, so counted, its ``count`` to 1, in a
claim and in a template's claim alike (``k8s.io/kubernetes/pkg/apis/resource/v1/defaults.go``).
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
