"""Extended resources served by devices (KEP-5004, ``DRAExtendedResource``: beta and on in 1.36).

A DeviceClass may name an extended resource (``spec.extendedResourceName: nvidia.com/gpu``), and every class
serves its implicit name, ``deviceclass.resource.kubernetes.io/<class>``. A pod that asks such a resource
in a container is served, on a node whose own allocatable has some of it (a device plugin's count), the
classic way; on a node without it, by devices of the class. kube-scheduler then makes one ResourceClaim for
the pod (``<pod>-extended-resources-``, owned by the pod, annotated
``resource.kubernetes.io/extended-resource-claim: "true"``) with one request per container and resource
(``container-<i>-request-<j>``: ``i`` counts the init containers, then the containers; ``j`` is the
resource's place among the container's request names, sorted), allocates it, reserves it for the pod and
names it in the pod's ``status.extendedResourceClaimStatus``, before binding. Phalanx does the same:
placement counts the resource on a node without it as the node's devices of the class
(``Devices.supply``), and PreBind writes the claim (``allocation.py``, the binder).

Where two classes name one resource, the newer serves it (equal ages: the first name), as kube-scheduler's
extended resource cache chooses.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.devices.claims import EXACT_COUNT, DeviceClass, Request
from topology import QuantityError
from topology.quantities import resource_list

#: The name every DeviceClass serves, whether it names an extended resource or not.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Marks the claim kube-scheduler (and Phalanx) makes for a pod's extended resources.
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True, slots=True)
class ExtendedRequest:
    """One container's resource that devices serve on the pod's node: a request of the pod's claim."""

    name: str  # container-<i>-request-<j>
    container: str
    resource: str
    device_class: str
    count: int

    def request(self) -> Request:
        return Request(self.name, self.device_class, (), EXACT_COUNT, self.count)


def served_by(classes: Mapping[str, DeviceClass]) -> dict[str, DeviceClass]:
    """Which class serves each extended resource name."""
    found = {IMPLICIT_PREFIX + name: device_class for name, device_class in classes.items()}
    named: dict[str, DeviceClass] = {}
    for device_class in classes.values():
        name, other = device_class.extended_resource, named.get(device_class.extended_resource or "")
        if name and (other is None or _preferred(device_class, other)):
            named[name] = device_class
    return {**found, **named}


def _preferred(one: DeviceClass, other: DeviceClass) -> bool:
    """Whether ``one`` serves a name both classes give rather than ``other``: the newer, else the first name."""
    return one.created > other.created if one.created != other.created else one.name < other.name


def asked(pod: Mapping[str, Any], served: Mapping[str, DeviceClass]) -> dict[str, DeviceClass]:
    """The extended resources the pod asks that a class serves (whichever nodes then serve them)."""
    return {
        name: served[name]
        for _, _, requests, _ in _containers(pod)
        for name, amount in requests.items()
        if amount > 0 and name in served
    }


def extended_requests(
    pod: Mapping[str, Any], served: Mapping[str, DeviceClass], allocatable: Mapping[str, int]
) -> tuple[ExtendedRequest, ...]:
    """The requests of the claim the pod needs on a node whose own allocatable is ``allocatable``: each
    long-lived container's resources that a class serves and the node has none of (empty: the node serves
    them all). An init container that runs to completion first reuses the long-lived containers' requests
    (the smallest one that covers it, else the largest); what the largest of them needs beyond all the
    long-lived requests is one more request, which the init containers that no single request covers share.
    So the claim asks what placement counts: the pod's effective request, the larger of the long-lived
    containers' sum and the largest init container."""
    found: list[ExtendedRequest] = []
    waiting: list[ExtendedRequest] = []  # init containers' needs, before any request is theirs
    for i, container, requests, runs_to_completion in _containers(pod):
        names = sorted(requests)
        for name, amount in sorted(requests.items()):
            device_class = served.get(name)
            if device_class is None or amount <= 0 or allocatable.get(name, 0) > 0:
                continue
            request = ExtendedRequest(f"container-{i}-request-{names.index(name)}", container, name,
                                      device_class.name, amount)  # fmt: skip
            (waiting if runs_to_completion else found).append(request)
    for resource in sorted({need.resource for need in waiting}):
        needs = [need for need in waiting if need.resource == resource]
        lasting = [request for request in found if request.resource == resource and request.count > 0]
        largest = max(needs, key=lambda need: need.count)
        extra = largest.count - sum(request.count for request in lasting)  # what the long-lived ones lack
        for need in needs:
            if need is largest and extra > 0:
                continue  # the request made for the init containers is its own, below
            fits = [request for request in lasting if request.count >= need.count]
            if fits:  # one long-lived request covers it: the smallest that does
                reused = min(fits, key=lambda request: request.count)
            elif extra > 0:
                reused = replace(largest, count=0)  # the request made for the init containers, below
            else:  # the long-lived ones together cover it: the largest of them
                reused = max(lasting, key=lambda request: request.count)
            found.append(replace(reused, container=need.container, count=0))
        if extra > 0:
            found.append(replace(largest, count=extra))
    return tuple(found)


def claim_requests(requests: tuple[ExtendedRequest, ...]) -> tuple[ExtendedRequest, ...]:
    """The claim's own requests: those of ``requests`` that ask devices (the rest reuse one of them)."""
    return tuple(request for request in requests if request.count > 0)


def claim_body(pod: Mapping[str, Any], requests: tuple[ExtendedRequest, ...], finalizer: str) -> dict[str, Any]:
    """The claim for ``requests``, as kube-scheduler makes it (with ``finalizer`` already on: PreBind would
    add it next)."""
    metadata = pod.get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{metadata.get('name', '')}-extended-resources-",
            "namespace": metadata.get("namespace", ""),
            "annotations": {ANNOTATION: "true"},
            "finalizers": [finalizer],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": metadata.get("name", ""),
                    "uid": metadata.get("uid", ""),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": request.name,
                        "exactly": {
                            "deviceClassName": request.device_class,
                            "allocationMode": EXACT_COUNT,
                            "count": request.count,
                        },
                    }
                    for request in claim_requests(requests)
                ]
            }
        },
    }


def pod_claim_status(claim: str, requests: tuple[ExtendedRequest, ...]) -> dict[str, Any]:
    """The pod's ``status.extendedResourceClaimStatus`` once ``claim`` is made for ``requests``."""
    mappings = [
        {"containerName": request.container, "resourceName": request.resource, "requestName": request.name}
        for request in requests
    ]
    return {"extendedResourceClaimStatus": {"requestMappings": mappings, "resourceClaimName": claim}}


def asks_any(pod: Mapping[str, Any], names: Container[str]) -> bool:
    """Whether the pod's containers ask any of ``names``, quantities unread (every pod event asks this)."""
    spec = pod.get("spec") or {}
    for part in ("initContainers", "containers"):
        for container in spec.get(part) or ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for asked_names in (resources.get("requests"), resources.get("limits")):
                if isinstance(asked_names, Mapping) and any(name in names for name in asked_names):
                    return True
    return False


def _containers(pod: Mapping[str, Any]) -> list[tuple[int, str, dict[str, int], bool]]:
    """(index, name, requests, whether it runs to completion before the others start) of the init containers
    and then the containers; requests defaulted from limits, as the API server defaults them. A sidecar (an
    init container with ``restartPolicy: Always``) runs beside the containers. A pod whose quantities cannot
    be read asks nothing here (its gang is told why by the resource kinds)."""
    spec = pod.get("spec") or {}
    init = spec.get("initContainers") or []
    containers = [*init, *(spec.get("containers") or [])]
    found = []
    for i, container in enumerate(containers):
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources") or {}
        try:
            limits = resource_list(resources.get("limits"), field="limits")
            requests = resource_list(resources.get("requests"), field="requests")
        except QuantityError:
            continue
        runs_to_completion = i < len(init) and container.get("restartPolicy") != "Always"
        found.append((i, str(container.get("name", "")), {**limits, **requests}, runs_to_completion))
    return found
