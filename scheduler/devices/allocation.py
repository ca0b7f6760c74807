"""Which devices each claim of a placed gang gets, written before any of its pods is bound (PreBind).

Placement decided where each pod goes by counts (``demand.py``); when the gang is permitted, the binder
asks :func:`plan` for the devices themselves: for each claim not allocated yet, the request's count of
free devices on the pod's node that satisfy it, never one device twice (other claims' allocations, and
this gang's other choices). Each claim's ``status`` then gets, as kube-scheduler's PreBind writes it, the
``allocation`` (the devices, the configuration of their class and of the claim, and a node selector that
names the node) and ``reservedFor`` (the pod), with the claim's ``resourceVersion`` as precondition, so
that a claim another scheduler allocated meanwhile is refused, not overwritten. First, as kube-scheduler
does, the claim gets the ``resource.kubernetes.io/delete-protection`` finalizer: the resourceclaim
controller then deallocates it once no pod uses it. The devices chosen are
held (``Devices.in_flight``) until the watch shows them given, so that a gang binding beside this one never
gets them too. If any claim of the gang cannot be written, or a pod whose claims were written is not bound
after all, the allocations are taken back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.devices.claims import Claim, ClaimError, Constraint, pod_claims
from scheduler.devices.expressions import SelectorError
from scheduler.devices.inventory import DeviceId, Devices
from scheduler.devices.slices import Device

#: What kube-scheduler puts on a claim it allocates: the resourceclaim controller deallocates the claim
#: (and removes it) once no pod uses it, and the claim cannot be deleted while allocated.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One claim's writes as PreBind makes them: the delete-protection finalizer, then the status."""

    namespace: str
    name: str
    pod: str
    #: The claim's ``resourceVersion`` when it was read: the precondition of the first write.
    version: str
    #: The claim's finalizers with :data:`DELETE_PROTECTION` among them (None: it is there already).
    finalizers: tuple[str, ...] | None
    #: The ``status`` to merge in (allocation and reservedFor).
    status: Mapping[str, Any]
    devices: tuple[DeviceId, ...]


def plan(devices: Devices, pods: Iterable[tuple[Mapping[str, Any], str]]) -> list[ClaimWrite] | str:
    """The writes that give the claims of ``pods`` (each a pod object and its node) their devices, or why
    that cannot be done (nothing is written then)."""
    taken: set[DeviceId] = set()
    writes: list[ClaimWrite] = []
    for pod, node in pods:
        metadata = pod.get("metadata") or {}
        namespace, name, uid = (str(metadata.get(field, "")) for field in ("namespace", "name", "uid"))
        for named in pod_claims(pod):
            claim = devices.claims.get(f"{namespace}/{named.claim}") if named.claim else None
            if claim is None:
                return f"pod {namespace}/{name}: its ResourceClaim {named.claim or named.template} is not there"
            if claim.allocated:  # for this pod (demand.py refuses any other): by an earlier attempt of ours
                if claim.node not in (None, node):
                    return f"ResourceClaim {claim.key} is allocated on {claim.node}, not on {node}"
                continue
            try:
                free = {
                    request.name: devices.candidates(request.alternatives[0], node, taken) for request in claim.requests
                }
            except (ClaimError, SelectorError) as error:
                return f"ResourceClaim {claim.key}: {error}"
            picked = _pick(claim, free, claim.constraints)
            if picked is None:
                wanted = ", ".join(
                    f"{request.alternatives[0].count} of class {request.alternatives[0].device_class}"
                    for request in claim.requests
                )
                kept = " that satisfy its constraints" if claim.constraints else ""
                return f"ResourceClaim {claim.key} needs {wanted} on {node}, and fewer are free there{kept}"
            results: list[dict[str, str]] = []
            classes: dict[str, list[str]] = {}
            for request in claim.requests:
                chosen = picked[request.name]
                taken.update(device.id for device in chosen)
                results += [
                    {"request": request.name, "driver": device.driver, "pool": device.pool, "device": device.name}
                    for device in chosen
                ]
                classes.setdefault(request.alternatives[0].device_class, []).append(request.name)
            allocation: dict[str, Any] = {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
            config = _config(devices, classes, claim.config)
            if config:
                allocation["devices"]["config"] = config
            status = {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}
            writes.append(
                ClaimWrite(
                    namespace=namespace,
                    name=claim.name,
                    pod=f"{namespace}/{name}",
                    version=claim.version,
                    finalizers=None
                    if DELETE_PROTECTION in claim.finalizers
                    else (*claim.finalizers, DELETE_PROTECTION),
                    status=status,
                    devices=tuple(result for result in _ids(results)),
                )
            )
    for write in writes:
        devices.hold(f"{write.namespace}/{write.name}", write.devices)
    return writes


def _pick(
    claim: Claim, free: Mapping[str, list[Device]], constraints: Sequence[Constraint]
) -> dict[str, list[Device]] | None:
    """Each request's devices out of ``free`` (per request), every constraint kept: ``matchAttribute`` tries
    each value the devices have in turn (the lowest first), ``distinctAttribute`` takes devices whose
    values differ; None when no choice keeps them all."""
    if constraints:
        first, rest = constraints[0], constraints[1:]
        covered = first.requests or tuple(free)
        if first.match is not None:
            attribute = first.match
            values = sorted({str(_attribute(d, attribute)) for name in covered for d in free.get(name, ())} - {"None"})
            for value in values:
                narrowed = {
                    name: [d for d in found if name not in covered or str(_attribute(d, attribute)) == value]
                    for name, found in free.items()
                }
                found = _pick(claim, narrowed, rest)
                if found is not None:
                    return found
            return None
        if first.distinct is not None:
            used: set[str] = set()
            narrowed = dict(free)
            for request in claim.requests:
                if request.name not in covered:
                    continue
                chosen = []
                for device in free.get(request.name, ()):
                    distinct = _attribute(device, first.distinct)
                    if distinct is not None and str(distinct) not in used:
                        chosen.append(device)
                        used.add(str(distinct))
                    if len(chosen) == request.alternatives[0].count:
                        break
                narrowed[request.name] = chosen
            return _pick(claim, narrowed, rest)
        return _pick(claim, free, rest)
    picked: dict[str, list[Device]] = {}
    seen: set[DeviceId] = set()
    for request in claim.requests:
        count = request.alternatives[0].count
        chosen = [device for device in free.get(request.name, ()) if device.id not in seen][:count]
        if len(chosen) < count:
            return None
        seen.update(device.id for device in chosen)
        picked[request.name] = chosen
    return picked


def _attribute(device: Device, qualified: str) -> object:
    """A device's attribute by its fully qualified name (``gpu.nvidia.com/cliqueId``); None when it lacks it."""
    domain, _, name = qualified.rpartition("/")
    value = device.view.attributes.get(domain or device.driver, {}).get(name)
    return tuple(value) if isinstance(value, list) else value


def released(version: str) -> Mapping[str, Any]:
    """The merge patch of the status that takes an allocation back."""
    return {"metadata": {"resourceVersion": version}, "status": {"allocation": None, "reservedFor": None}}


def _config(
    devices: Devices, classes: Mapping[str, list[str]], claim_config: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The configuration the drivers get with the devices: each class's, for the requests that used it,
    then the claim's own (as kube-scheduler copies them, classes first)."""
    found: list[dict[str, Any]] = []
    for class_name, requests in classes.items():
        device_class = devices.classes.get(class_name)
        for entry in device_class.config if device_class else ():
            found.append({"source": "FromClass", "requests": list(requests), **dict(entry)})
    for entry in claim_config:
        found.append({"source": "FromClaim", **dict(entry)})
    return found


def _ids(results: Iterable[Mapping[str, str]]) -> Iterable[DeviceId]:
    return ((result["driver"], result["pool"], result["device"]) for result in results)
