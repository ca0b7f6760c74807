"""Which devices each claim of a placed gang gets, written before any of its pods is bound (PreBind).

Placement decided where each pod goes by counts (``demand.py``); when the gang is permitted, the binder asks
:func:`plan` for the devices themselves: for each claim not allocated yet, the request's count of free devices
on the pod's node that satisfy it, never one device twice (other claims' allocations, and this gang's other
choices). Each claim's ``status`` then gets, as kube-scheduler's PreBind writes it, the ``allocation`` (the
devices, the configuration of their class and of the claim, and a node selector that names the node) and
``reservedFor`` (every pod of the gang that names it, or the PodGroup when the claim is the group's: a shared
claim is allocated once), with the claim's ``resourceVersion`` as precondition, so that a claim another
scheduler allocated meanwhile is refused, not overwritten. A claim allocated already is only reserved for more
pods. First, as kube-scheduler does, a claim it allocates gets the ``resource.kubernetes.io/delete-protection``
finalizer: the resourceclaim controller then deallocates it once no pod uses it. The devices
chosen are held (``Devices.in_flight``) until the watch shows them given, so that a gang binding beside this
one never gets them too. If any claim of the gang cannot be written, or none of the pods a claim was written
for is bound after all, the write is taken back (``taken_back``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.devices.claims import ALL, Claim, ClaimError, ClaimRequest, Constraint, Request, pod_claims
from scheduler.devices.demand import MAX_RESERVED
from scheduler.devices.expressions import SelectorError
from scheduler.devices.extended import ExtendedRequest, asks_any, claim_requests, extended_requests
from scheduler.devices.inventory import DeviceId, Devices
from scheduler.devices.sharing import Budget, consumption
from scheduler.devices.slices import ALL_NODES, Device
from topology.request import NodeSelectorTerm

#: What kube-scheduler puts on a claim it allocates: the resourceclaim controller deallocates the claim
#: (and removes it) once no pod uses it, and the claim cannot be deleted while allocated.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One claim's writes as PreBind makes them: the delete-protection finalizer, then the status."""

    namespace: str
    name: str
    #: The pods (namespace/name) it is written for: the gang's pods that name it.
    pods: tuple[str, ...]
    #: The claim's ``resourceVersion`` when it was read: the precondition of the first write.
    version: str
    #: The claim's finalizers with :data:`DELETE_PROTECTION` among them (None: it is there already, or the
    #: claim is allocated already and only reserved for more pods).
    finalizers: tuple[str, ...] | None
    #: The ``status`` to merge in: the allocation and ``reservedFor``, or ``reservedFor`` alone.
    status: Mapping[str, Any]
    devices: tuple[DeviceId, ...]
    #: For a claim allocated already: its ``reservedFor`` before, what taking this write back restores.
    #: None when the write allocates the claim (taking it back deallocates it).
    reserved_before: tuple[Mapping[str, Any], ...] | None = None
    #: For the claim of a pod's extended resources (KEP-5004): the requests it is made with. It does not
    #: exist yet: the binder makes it (``extended.claim_body``), names it in the pod's status, and deletes it
    #: to take the write back.
    extended: tuple[ExtendedRequest, ...] = ()
    #: Per device, what it consumes of a shared device's capacity (empty for a device given whole).
    consumed: tuple[Mapping[str, int], ...] = ()
    #: Some device needs its driver to report binding conditions before the claim's pods may bind.
    waits_for_driver: bool = False


def plan(
    devices: Devices,
    pods: Iterable[tuple[Mapping[str, Any], str]],
    own: Callable[[str], Mapping[str, int]] = lambda node: {},
    reaches: Callable[[tuple[NodeSelectorTerm, ...], str], bool] = lambda terms, node: not terms,
    share_id: Callable[[], str] | None = None,
) -> list[ClaimWrite] | str:
    """The writes that give the claims of ``pods`` (each a pod object and its node) their devices and
    reserve each claim for the pods that name it, or why that cannot be done (nothing is written then).
    A claim several of the pods name is allocated once, on their one node; a claim allocated already (for
    a pod of this gang by an earlier attempt, or shared with pods that run) is only reserved for more. A pod
    that asks an extended resource its node has none of (``own``: what each node itself has) gets a claim
    of the devices that serve it, made for it (KEP-5004). A node uses its own devices first, then networked
    ones it reaches (``reaches``: whether a node selector's terms select the node)."""
    share_id = share_id or share_ids
    named = _claims_named(devices, pods, own)
    if isinstance(named, str):
        return named
    users, made = named
    taken: set[DeviceId] = set()
    choice = _Choice(devices.budget(in_flight=True), {}, set(), devices.spending)
    writes: list[ClaimWrite] = []
    for claim, using in users.values():
        place = _where(devices, claim, using)
        if isinstance(place, str):
            return place
        node, joining = place
        reservations = [*claim.reservations, *joining]
        names = tuple(pod for _, _, pod in using)
        if claim.allocated:
            if claim.node not in (None, node):
                return f"ResourceClaim {claim.key} is allocated on {claim.node}, not on {node}"
            if joining:
                writes.append(_reserved_for_more(claim, names, reservations))
            continue
        try:
            ways = {
                request.name: _first_available(devices, request, node, taken, reaches, shares=choice.shares)
                for request in claim.requests
            }
        except (ClaimError, SelectorError) as error:
            return f"ResourceClaim {claim.key}: {error}"
        free = {name: found for name, (_, found, _) in ways.items()}
        picked = _pick(claim, free, {name: count for name, (_, _, count) in ways.items()}, claim.constraints, choice)
        if picked is None:
            return _too_few(devices, claim, node, ways, choice)
        allocated = _allocated(
            devices,
            claim,
            node,
            ways=ways,
            picked=picked,
            choice=choice,
            taken=taken,
            share_id=share_id,
            names=names,
            reservations=reservations,
            made=made,
        )
        writes.append(allocated)
    for write in writes:
        devices.set_aside(f"{write.namespace}/{write.name}", write.devices, write.consumed)
    return writes


def _where(
    devices: Devices, claim: Claim, using: list[tuple[dict[str, str], str, str]]
) -> tuple[str, list[dict[str, str]]] | str:
    """The one node the claim's pods are placed on, and the pods it is not reserved for yet; or why the
    claim cannot serve them."""
    if claim.key in devices.releasing:
        return f"ResourceClaim {claim.key} is being released by an earlier attempt; the gang is tried again soon"
    nodes = sorted({node for _, node, _ in using})
    if len(nodes) > 1:
        return f"ResourceClaim {claim.key} is shared by pods placed on {' and '.join(nodes)}: its devices serve one"
    reserved = {str(ref.get("uid", "")) for ref in claim.reservations}
    joining = list({ref["uid"]: ref for ref, _, _ in using if ref["uid"] not in reserved}.values())
    if len(claim.reservations) + len(joining) > MAX_RESERVED:
        count = len(claim.reservations) + len(joining)
        return f"ResourceClaim {claim.key} would be reserved for {count} pods, more than {MAX_RESERVED}"
    return nodes[0], joining


def _reserved_for_more(claim: Claim, names: tuple[str, ...], reservations: list[Any]) -> ClaimWrite:
    """The write that reserves a claim allocated already for more pods (no device changes hands)."""
    return ClaimWrite(
        namespace=claim.namespace,
        name=claim.name,
        pods=names,
        version=claim.version,
        finalizers=None,
        status={"reservedFor": reservations},
        devices=(),
        reserved_before=claim.reservations,
    )


def _too_few(devices: Devices, claim: Claim, node: str, ways: Mapping[str, Any], choice: _Choice) -> str:
    """Why the claim's requests find too few free devices on ``node``."""
    wanted = ", ".join(
        f"{'every device' if way.mode == ALL else way.count} of class {way.device_class}" for way, _, _ in ways.values()
    )
    kept = " that satisfy its constraints" if claim.constraints else ""
    short = _partitions_short(devices, ways, choice)
    return f"ResourceClaim {claim.key} needs {wanted} on {node}, and fewer are free there{kept}{short}"


#: Who uses each claim: the reference written to its ``reservedFor``, the node, and the pod (namespace/name).
_Users = dict[str, tuple[Claim, list[tuple[dict[str, str], str, str]]]]


def _claims_named(
    devices: Devices, pods: Iterable[tuple[Mapping[str, Any], str]], own: Callable[[str], Mapping[str, int]]
) -> tuple[_Users, dict[str, tuple[ExtendedRequest, ...]]] | str:
    """Each claim the pods name, with its users, and the claims to make for extended resources served by
    devices (by their ``generateName``, with what they serve); or why a named claim cannot be had."""
    users: _Users = {}
    made: dict[str, tuple[ExtendedRequest, ...]] = {}
    served = devices.served()
    for pod, node in pods:
        metadata = pod.get("metadata") or {}
        namespace, name, uid = (str(metadata.get(field, "")) for field in ("namespace", "name", "uid"))
        extended = extended_requests(pod, served, own(node)) if asks_any(pod, served) else ()
        if extended:
            key = f"{namespace}/{name}-extended-resources-"  # its generateName: no claim has such a name
            requests = tuple(ClaimRequest(request.name, (request.request(),)) for request in claim_requests(extended))
            to_make = Claim(namespace, key.split("/", 1)[1], "", requests, (), (), ())
            users[key] = (to_make, [({"resource": "pods", "name": name, "uid": uid}, node, f"{namespace}/{name}")])
            made[key] = extended
        for named in pod_claims(pod):
            claim = devices.claims.get(f"{namespace}/{named.claim}") if named.claim else None
            if claim is None:
                return f"pod {namespace}/{name}: its ResourceClaim {named.claim or named.template} is not there"
            group = devices.group_of(pod, named)
            ref = group.consumer() if group is not None else {"resource": "pods", "name": name, "uid": uid}
            using = users.setdefault(claim.key, (claim, []))[1]
            if all(seen_pod != f"{namespace}/{name}" for _, _, seen_pod in using):  # a pod may name one claim twice
                using.append((ref, node, f"{namespace}/{name}"))
    return users, made


def _allocated(
    devices: Devices,
    claim: Claim,
    node: str,
    *,
    ways: Mapping[str, tuple[Request, list[Device], int]],
    picked: Mapping[str, list[Device]],
    choice: _Choice,
    taken: set[DeviceId],
    share_id: Callable[[], str],
    names: tuple[str, ...],
    reservations: list[Any],
    made: Mapping[str, tuple[ExtendedRequest, ...]],
) -> ClaimWrite:
    """The write that gives ``claim`` the devices picked for it on ``node`` (what kube-scheduler's allocator
    writes), their counters and shares spent in ``choice``."""
    results: list[dict[str, Any]] = []
    classes: dict[str, list[str]] = {}
    consumed: list[Mapping[str, int]] = []
    for request in claim.requests:
        way, _, _ = ways[request.name]
        chosen = picked[request.name]
        for device in chosen:
            result, amounts = _result(way, device, share_id)
            results.append(result)
            consumed.append(amounts)
            choice.spend(device, amounts)
            if not device.sharing.shared:
                taken.add(device.id)
        classes.setdefault(way.device_class, []).append(way.name)
    allocation: dict[str, Any] = {"devices": {"results": results}}
    chosen_all = [device for request in claim.requests for device in picked[request.name]]
    waits = any(device.sharing.binding_conditions for device in chosen_all)
    if waits:  # when the wait for the driver began, for the binding timeout (as kube-scheduler writes it)
        allocation["allocationTimestamp"] = now()
    if any(device.sharing.binds_to_node for device in chosen_all) or not all(
        device.node is None and device.reach == ALL_NODES for device in chosen_all
    ):
        # Usable on this node only (a device of a node, or reached by some nodes): as kube-scheduler's
        # allocator names a node. Devices every node reaches leave the claim usable anywhere.
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
    config = _config(devices, classes, claim.config)
    if config:
        allocation["devices"]["config"] = config
    return ClaimWrite(
        namespace=claim.namespace,
        name=claim.name,
        pods=names,
        version=claim.version,
        finalizers=None if DELETE_PROTECTION in claim.finalizers else (*claim.finalizers, DELETE_PROTECTION),
        status={"allocation": allocation, "reservedFor": reservations},
        devices=tuple(_ids(results)),
        extended=made.get(claim.key, ()),
        consumed=tuple(consumed),
        waits_for_driver=waits,
    )


@dataclass(slots=True)
class _Choice:
    """What this PreBind has spent so far, beside what allocations and other PreBinds hold: counters left, and
    the shares it gave of shared devices (``spent``: devices whose counters are taken already)."""

    budget: Budget
    shares: dict[DeviceId, dict[str, int]]
    spent: set[DeviceId]
    #: Whether a device's counters are spent outside this choice (allocated, or held by another PreBind).
    spent_before: Callable[[DeviceId], bool]

    def counted(self, device: Device) -> bool:
        """Whether the device's counters are spent already (by this choice or before it)."""
        return device.id in self.spent or self.spent_before(device.id)

    def fits(self, device: Device, budget: Budget) -> bool:
        return (
            not device.sharing.consumes
            or self.counted(device)
            or budget.fits(device.driver, device.pool, device.sharing)
        )

    def spend(self, device: Device, amounts: Mapping[str, int]) -> None:
        if device.sharing.consumes and not self.counted(device):
            self.budget.take(device.driver, device.pool, device.sharing)
        self.spent.add(device.id)
        if amounts:
            used = self.shares.setdefault(device.id, {})
            for name, amount in amounts.items():
                used[name] = used.get(name, 0) + amount


def _result(way: Request, device: Device, share_id: Callable[[], str]) -> tuple[dict[str, Any], Mapping[str, int]]:
    """One device's entry of ``results`` as kube-scheduler writes it, and what it consumes of a shared device."""
    result: dict[str, Any] = {"request": way.name, "driver": device.driver, "pool": device.pool, "device": device.name}
    sharing = device.sharing
    if way.tolerations:
        result["tolerations"] = [dict(toleration) for toleration in way.tolerations]
    if sharing.binding_conditions:
        result["bindingConditions"] = list(sharing.binding_conditions)
        result["bindingFailureConditions"] = list(sharing.binding_failure_conditions)
    amounts: dict[str, int] = {}
    if sharing.shared:
        taken = consumption(sharing.capacity or {}, dict(way.capacity)) or {}
        result["shareID"] = share_id()
        result["consumedCapacity"] = {name: amount.text for name, amount in taken.items()}
        amounts = {name: amount.milli for name, amount in taken.items()}
    return result, amounts


def _partitions_short(devices: Devices, ways: Mapping[str, tuple[Request, list[Device], int]], choice: _Choice) -> str:
    """Why partitions that match were not enough, in words: the first that its GPU's counters, with the
    partitions before it, have no room for."""
    for _, found, _ in ways.values():
        budget = choice.budget.copy()
        for device in found:
            if not device.sharing.consumes or choice.counted(device):
                continue
            short = budget.short(device.driver, device.pool, device.sharing)
            if short is not None:
                return f" (partition {device.name}: {short})"
            budget.take(device.driver, device.pool, device.sharing)
    return ""


def share_ids() -> str:
    """A share's ``shareID``, unique among the device's allocations (a lowercase UUID, as the API checks)."""
    return str(uuid.uuid4())


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _first_available(
    devices: Devices,
    request: ClaimRequest,
    node: str,
    taken: set[DeviceId],
    reaches: Callable[[tuple[NodeSelectorTerm, ...], str], bool],
    *,
    shares: Mapping[DeviceId, Mapping[str, int]],
) -> tuple[Request, list[Device], int]:
    """The way ``request`` is met on ``node``, the free devices that meet it there and how many it takes: of
    ``firstAvailable``, the first alternative with enough of them (the last when none has), as kube-scheduler
    tries them. ``All`` takes every one of the node's own devices that satisfy it, and is met only if none is
    taken (and there is one)."""
    for way in request.alternatives:
        found = devices.candidates(way, node, taken, reaches, shares)
        count = way.count
        if way.mode == ALL:
            found = [device for device in found if device.node == node]
            count = devices.on_node(way, node)
            enough = 0 < count == len(found)
        else:
            enough = len(found) >= count
        if enough or way is request.alternatives[-1]:
            return way, found, max(count, 1)
    raise AssertionError("a request has at least one alternative")


def _pick(
    claim: Claim,
    free: Mapping[str, list[Device]],
    counts: Mapping[str, int],
    constraints: Sequence[Constraint],
    choice: _Choice,
) -> dict[str, list[Device]] | None:
    """Each request's devices out of ``free`` (per request, ``counts`` of each), every constraint kept:
    ``matchAttribute`` tries each value the devices have in turn (the lowest first), ``distinctAttribute``
    takes devices whose values differ; None when no choice keeps them all. A constraint naming a
    subrequest (``gpus/h100``) applies to its request."""
    if constraints:
        first, rest = constraints[0], constraints[1:]
        covered = tuple(name.split("/", 1)[0] for name in first.requests) or tuple(free)
        if first.match is not None:
            attribute = first.match
            values = sorted({str(_attribute(d, attribute)) for name in covered for d in free.get(name, ())} - {"None"})
            for value in values:
                narrowed = {
                    name: [d for d in found if name not in covered or str(_attribute(d, attribute)) == value]
                    for name, found in free.items()
                }
                found = _pick(claim, narrowed, counts, rest, choice)
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
                    if len(chosen) == counts[request.name]:
                        break
                narrowed[request.name] = chosen
            return _pick(claim, narrowed, counts, rest, choice)
        return _pick(claim, free, counts, rest, choice)
    picked: dict[str, list[Device]] = {}
    seen: set[DeviceId] = set()
    budget = choice.budget.copy()  # partitions of one GPU chosen together must fit its counters together
    for request in claim.requests:
        count = counts[request.name]
        chosen = []
        for device in free.get(request.name, ()):
            if len(chosen) == count:
                break
            if device.id in seen or not choice.fits(device, budget):
                continue
            if device.sharing.consumes and not choice.counted(device):
                budget.take(device.driver, device.pool, device.sharing)
            chosen.append(device)
            seen.add(device.id)
        if len(chosen) < count:
            return None
        picked[request.name] = chosen
    return picked


def _attribute(device: Device, qualified: str) -> object:
    """A device's attribute by its fully qualified name (``gpu.nvidia.com/cliqueId``); None when it lacks it."""
    domain, _, name = qualified.rpartition("/")
    value = device.view.attributes.get(domain or device.driver, {}).get(name)
    return tuple(value) if isinstance(value, list) else value


def taken_back(write: ClaimWrite, version: str) -> Mapping[str, Any]:
    """The merge patch of the status that takes ``write`` back: the allocation it made, or the reservations
    it added to a claim allocated before."""
    if write.reserved_before is None:
        # What drivers reported of the devices (``status.devices``) the API server drops with the allocation: a
        # scheduler that wrote it would need each driver's right to.
        status: dict[str, Any] = {"allocation": None, "reservedFor": None}
    else:
        status = {"reservedFor": list(write.reserved_before) or None}
    return {"metadata": {"resourceVersion": version}, "status": status}


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
