"""DeviceClasses, ResourceClaims and the claims a pod names (``resource.k8s.io/v1``), as values.

A pod's ``spec.resourceClaims`` names each claim directly (``resourceClaimName``) or through a template
(``resourceClaimTemplateName``): then kube-controller-manager's resourceclaim controller makes the claim
and names it in the pod's ``status.resourceClaimStatuses``; until it has, the pod cannot be placed.

A claim may also be its PodGroup's (``scheduling.k8s.io`` 1.36+, KEP-5729 ``DRAWorkloadResourceClaims``):
when a pod's entry is exactly an entry of its PodGroup's ``spec.resourceClaims``, the claim is the
group's (one claim, made once from a template, the same name in every member's status) and it is
reserved for the PodGroup, not for each pod (``GroupClaims``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as default
from typing import Any

from scheduler.devices.sharing import Quantity, quantity
from topology import QuantityError
from topology.quantities import DEVICES

#: ``allocationMode``: a count of devices, or every matching device.
EXACT_COUNT, ALL = "ExactCount", "All"


class ClaimError(ValueError):
    """A claim or class that cannot be read; the message names the object and the field."""


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    #: KEP-5004: pods asking for this extended resource are served by the class's devices.
    extended_resource: str | None = None
    #: ``spec.config``, copied into each allocation of the class's devices (``source: FromClass``).
    config: tuple[Mapping[str, Any], ...] = ()
    #: ``metadata.creationTimestamp``: of two classes naming one extended resource, the newer serves it.
    created: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """One way to satisfy a request of a claim: devices of a class, with more selectors, counted."""

    name: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    #: ``tolerations`` as written: the device taints the request tolerates, copied into its results.
    tolerations: tuple[Mapping[str, Any], ...] = ()
    #: ``capacity.requests``: what it takes of a shared device's capacities (of a whole device, what it needs).
    capacity: tuple[tuple[str, Quantity], ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A request of a claim: ``exactly`` one way, or the first of ``firstAvailable`` that can be met."""

    name: str
    alternatives: tuple[Request, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    """Devices of ``requests`` (all of the claim's when empty) must share ``match`` or all differ in
    ``distinct`` (a fully qualified attribute name)."""

    requests: tuple[str, ...]
    match: str | None
    distinct: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str
    requests: tuple[ClaimRequest, ...]
    constraints: tuple[Constraint, ...]
    #: (driver, pool, device) of each device allocated to it (empty while unallocated).
    allocated: tuple[tuple[str, str, str], ...]
    #: The pods it is reserved for, by uid.
    reserved_for: tuple[str, ...]
    #: ``metadata.resourceVersion``: the precondition of a write of its status.
    version: str = ""
    #: The node its allocation's node selector names (None while unallocated, or for other selectors).
    node: str | None = None
    finalizers: tuple[str, ...] = ()
    #: ``spec.devices.config``, copied into its allocation (``source: FromClaim``).
    config: tuple[Mapping[str, Any], ...] = ()
    #: ``status.reservedFor`` as written: a pod joining a shared claim writes it back with itself added.
    reservations: tuple[Mapping[str, Any], ...] = ()
    #: The ``request`` each allocated device was given for (``gpus``, or ``gpus/h100`` of firstAvailable).
    allocated_requests: tuple[str, ...] = ()
    #: namespace/name of the pod whose extended resources it serves (KEP-5004: made by a scheduler for it).
    extended_for: str | None = None
    #: Allocated with no node selector (every device networked, reached from all nodes): usable anywhere.
    anywhere: bool = False
    #: Per allocated device, what it consumes of the device's capacity (``consumedCapacity``, thousandths).
    consumed: tuple[Mapping[str, int], ...] = ()
    #: Per allocated device, its ``bindingConditions`` and ``bindingFailureConditions`` as the result copies them.
    binding: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    #: ``status.devices``: per (driver, pool, device), its conditions (type -> status) as the driver reports them.
    conditions: Mapping[tuple[str, str, str], Mapping[str, str]] = default(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A claim a pod names: ``claim`` is the ResourceClaim's name, None while a template's claim is not made."""

    name: str
    claim: str | None
    template: str | None


@dataclass(frozen=True, slots=True)
class GroupClaims:
    """A PodGroup's ``spec.resourceClaims``: the entries (name -> (resourceClaimName, resourceClaimTemplateName))
    a member pod must repeat exactly to use the group's claim, and the consumer the claim is reserved for."""

    namespace: str
    name: str
    uid: str
    entries: Mapping[str, tuple[str | None, str | None]]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def serves(self, named: PodClaim) -> bool:
        """Whether the pod's entry ``named`` is one of the group's (every field equal, as the API requires)."""
        direct = named.claim if named.template is None else None
        return self.entries.get(named.name) == (direct, named.template)

    def consumer(self) -> dict[str, str]:
        """The group as ``status.reservedFor`` names it."""
        return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": self.name, "uid": self.uid}


def read_group_claims(obj: Mapping[str, Any]) -> GroupClaims:
    """The claims a ``scheduling.k8s.io`` PodGroup shares with its pods (none in versions without the field)."""
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    where = f"podgroup {namespace}/{name}: spec.resourceClaims"
    entries = {}
    for i, raw in enumerate(_list(_mapping(obj.get("spec"), f"podgroup {namespace}/{name}: spec").get("resourceClaims"),
                                  where)):  # fmt: skip
        entry = _mapping(raw, f"{where}[{i}]")
        direct, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        entries[str(entry.get("name", ""))] = (str(direct) if direct else None, str(template) if template else None)
    return GroupClaims(namespace, name, str(metadata.get("uid", "")), entries)


def pod_group(pod: Mapping[str, Any]) -> str | None:
    """namespace/name of the ``scheduling.k8s.io`` PodGroup the pod belongs to (1.36's field), if any."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    return f"{namespace}/{group}" if isinstance(group, str) and group else None


def column(request: Request) -> str:
    """``devices/<class>``, with a digest of the request's own selectors (and of the taints it tolerates and the
    capacity it asks) when it has some: the column of placement's arrays that counts the devices that satisfy
    the request."""
    name = f"{DEVICES}{request.device_class}"
    if request.selectors or request.tolerations or request.capacity:
        own = [*request.selectors]
        if request.tolerations or request.capacity:
            own.append(json.dumps([list(request.tolerations), [(k, v.text) for k, v in request.capacity]],
                                  sort_keys=True))  # fmt: skip
        name += "/" + hashlib.sha256("\n".join(own).encode()).hexdigest()[:8]
    return name


def read_class(obj: Mapping[str, Any]) -> DeviceClass:
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = _mapping(obj.get("spec"), f"deviceclass {name}: spec")
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        name=name,
        selectors=_selectors(spec.get("selectors"), f"deviceclass {name}: spec.selectors"),
        extended_resource=str(extended) if extended else None,
        config=tuple(_list(spec.get("config"), f"deviceclass {name}: spec.config")),
        created=str((obj.get("metadata") or {}).get("creationTimestamp") or ""),
    )


def read_claim(obj: Mapping[str, Any]) -> Claim:
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    where = f"resourceclaim {namespace}/{name}"
    devices = _mapping(_mapping(obj.get("spec"), f"{where}: spec").get("devices"), f"{where}: spec.devices")
    status = _mapping(obj.get("status"), f"{where}: status")
    allocation = _mapping(status.get("allocation"), f"{where}: status.allocation")
    results = _mapping(allocation.get("devices"), f"{where}: status.allocation.devices").get("results") or []
    return Claim(
        namespace=namespace,
        name=name,
        uid=str(metadata.get("uid", "")),
        requests=tuple(
            _claim_request(raw, f"{where}: spec.devices.requests[{i}]")
            for i, raw in enumerate(_list(devices.get("requests"), f"{where}: spec.devices.requests"))
        ),
        constraints=tuple(
            Constraint(
                requests=tuple(str(r) for r in _list(raw.get("requests"), f"{where}: constraints[{i}].requests")),
                match=raw.get("matchAttribute"),
                distinct=raw.get("distinctAttribute"),
            )
            for i, raw in enumerate(_list(devices.get("constraints"), f"{where}: spec.devices.constraints"))
        ),
        allocated=tuple(
            (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
            for result in results
            if isinstance(result, Mapping)
        ),
        reserved_for=tuple(
            str(ref.get("uid", ""))
            for ref in _list(status.get("reservedFor"), f"{where}: status.reservedFor")
            if isinstance(ref, Mapping)
        ),
        version=str(metadata.get("resourceVersion", "")),
        node=_allocated_node(allocation.get("nodeSelector")),
        finalizers=tuple(str(name) for name in _list(metadata.get("finalizers"), f"{where}: metadata.finalizers")),
        config=tuple(_list(devices.get("config"), f"{where}: spec.devices.config")),
        allocated_requests=tuple(str(result.get("request", "")) for result in results if isinstance(result, Mapping)),
        reservations=tuple(
            ref for ref in _list(status.get("reservedFor"), f"{where}: status.reservedFor") if isinstance(ref, Mapping)
        ),
        extended_for=_extended_for(metadata),
        anywhere=bool(results) and allocation.get("nodeSelector") is None,
        consumed=tuple(_consumed(result, where) for result in results if isinstance(result, Mapping)),
        binding=tuple(
            (tuple(result.get("bindingConditions") or ()), tuple(result.get("bindingFailureConditions") or ()))
            for result in results
            if isinstance(result, Mapping)
        ),
        conditions={
            (str(entry.get("driver", "")), str(entry.get("pool", "")), str(entry.get("device", ""))): {
                str(condition.get("type", "")): str(condition.get("status", ""))
                for condition in entry.get("conditions") or []
                if isinstance(condition, Mapping)
            }
            for entry in _list(status.get("devices"), f"{where}: status.devices")
            if isinstance(entry, Mapping)
        },
    )


def _consumed(result: Mapping[str, Any], where: str) -> Mapping[str, int]:
    try:
        return {
            str(name): quantity(value, name).milli for name, value in (result.get("consumedCapacity") or {}).items()
        }
    except (QuantityError, ValueError) as error:
        raise ClaimError(f"{where}: status.allocation: consumedCapacity: {error}") from None


def _extended_for(metadata: Mapping[str, Any]) -> str | None:
    """The pod (namespace/name) a claim made for its extended resources belongs to: annotated so, and owned by
    that pod as its controller."""
    if (metadata.get("annotations") or {}).get("resource.kubernetes.io/extended-resource-claim") != "true":
        return None
    for owner in metadata.get("ownerReferences") or []:
        if isinstance(owner, Mapping) and owner.get("kind") == "Pod" and owner.get("controller") is True:
            return f"{metadata.get('namespace', '')}/{owner.get('name', '')}"
    return None


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The claims a pod names, each with the ResourceClaim it is (known once a template's claim is made)."""
    spec = pod.get("spec") or {}
    if not spec.get("resourceClaims"):
        return ()  # most pods: every pod event of the informers asks
    made = {
        str(entry.get("name")): entry.get("resourceClaimName")
        for entry in ((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        if isinstance(entry, Mapping)
    }
    found = []
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name", ""))
        direct, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        claim = direct if direct else made.get(name)
        found.append(PodClaim(name, str(claim) if claim else None, str(template) if template else None))
    return tuple(found)


def _allocated_node(selector: object) -> str | None:
    """The node a ``metadata.name In [node]`` node selector names (as kube-scheduler writes them)."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    for term in terms if isinstance(terms, list) else ():
        for field in (term.get("matchFields") or []) if isinstance(term, Mapping) else ():
            values = field.get("values") if isinstance(field, Mapping) else None
            if field.get("key") == "metadata.name" and isinstance(values, list) and len(values) == 1:
                return str(values[0])
    return None


def _claim_request(raw: object, where: str) -> ClaimRequest:
    request = _mapping(raw, where)
    name = str(request.get("name", ""))
    if request.get("exactly") is not None:
        return ClaimRequest(name, (_request(name, request["exactly"], f"{where}.exactly"),))
    alternatives = _list(request.get("firstAvailable"), f"{where}.firstAvailable")
    if not alternatives:
        raise ClaimError(f"{where}: needs exactly or firstAvailable")
    return ClaimRequest(
        name,
        tuple(
            _request(f"{name}/{_mapping(sub, where).get('name', '')}", sub, f"{where}.firstAvailable[{i}]")
            for i, sub in enumerate(alternatives)
        ),
    )


def _request(name: str, raw: object, where: str) -> Request:
    request = _mapping(raw, where)
    mode = str(request.get("allocationMode") or EXACT_COUNT)
    if mode not in (EXACT_COUNT, ALL):
        raise ClaimError(f"{where}.allocationMode: {mode!r} is neither ExactCount nor All")
    count = request.get("count", 1) if mode == EXACT_COUNT else 0
    if not isinstance(count, int) or isinstance(count, bool) or (mode == EXACT_COUNT and count < 1):
        raise ClaimError(f"{where}.count: {count!r} is not a positive integer")
    asked = _mapping(request.get("capacity"), f"{where}.capacity").get("requests") or {}
    try:
        capacity = tuple(sorted((str(key), quantity(value, str(key))) for key, value in _mapping(asked, where).items()))
    except (QuantityError, ValueError) as error:
        raise ClaimError(f"{where}.capacity.requests: {error}") from None
    return Request(
        name=name,
        device_class=str(request.get("deviceClassName", "")),
        selectors=_selectors(request.get("selectors"), f"{where}.selectors"),
        mode=mode,
        count=count,
        tolerations=tuple(_mapping(t, f"{where}.tolerations") for t in _list(request.get("tolerations"), where)),
        capacity=capacity,
    )


def _selectors(raw: object, where: str) -> tuple[str, ...]:
    found = []
    for i, selector in enumerate(_list(raw, where)):
        expression = _mapping(_mapping(selector, f"{where}[{i}]").get("cel"), f"{where}[{i}].cel").get("expression")
        if not isinstance(expression, str):
            raise ClaimError(f"{where}[{i}].cel.expression must be a string")
        found.append(expression)
    return tuple(found)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(f"{where} must be an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClaimError(f"{where} must be a list")
    return value
