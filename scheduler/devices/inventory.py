"""What the cluster's devices are and who has them: the DRA objects as ClusterState keeps them.

Fed by the informers of ``resource.k8s.io/v1`` (when the server serves it): DeviceClasses,
ResourceSlices (``slices.py``), ResourceClaims and ResourceClaimTemplates. It answers, for one request
of a claim, which devices satisfy it (the class's selectors and the request's, each expression compiled
once and evaluated once per device, ``expressions.py``) and how many of those are free on each node:
the count placement will compare, as it compares GPUs. An object that cannot be read is kept out, and
what is wrong with it is kept in ``problems`` for the pods that name it to be told.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.devices.claims import (
    Claim,
    ClaimError,
    DeviceClass,
    GroupClaims,
    PodClaim,
    Request,
    column,
    pod_group,
    read_claim,
    read_class,
    read_group_claims,
)
from scheduler.devices.expressions import SelectorError, Selectors
from scheduler.devices.extended import served_by
from scheduler.devices.slices import ALL_NODES, Device, Pools
from scheduler.ports.port import DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES, ApiResource
from topology.quantities import WHOLE_NODE
from topology.request import NodeSelectorTerm

DeviceId = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True, slots=True)
class Release:
    """A take-back PreBind wrote: it deallocates the claim, or removes these pods (uids) from its
    ``reservedFor``."""

    deallocates: bool
    pods: set[str]

    def seen_in(self, claim: Claim) -> bool:
        """Whether ``claim``, as the watch shows it, is taken back."""
        return not claim.allocated if self.deallocates else not self.pods & set(claim.reserved_for)


class Devices:
    def __init__(self) -> None:
        self.pools = Pools()
        self.selectors = Selectors()
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, Claim] = {}
        self.templates: set[str] = set()  # namespace/name
        #: The claims each ``scheduling.k8s.io`` PodGroup (namespace/name) shares with its pods.
        self.groups: dict[str, GroupClaims] = {}
        #: The claim made for each pod's extended resources (pod -> claim, both namespace/name; KEP-5004).
        self.extended_of: dict[str, str] = {}
        self._served: dict[str, DeviceClass] | None = None  # cached until a class changes
        #: Allocated claims whose devices their one pod counts (kept by ClusterState: ``counted_by_pod``).
        self._pod_counted: set[str] = set()
        #: Whether some device is on no one node (as of the last :meth:`supply`): its allocations, and the
        #: nodes' labels, change what nodes offer.
        self.networked_pools = False
        #: The unfinished pods that name each claim (namespace/name), kept by ClusterState: a claim named by
        #: several is shared.
        self.named_by: dict[str, set[str]] = {}
        #: Of those, the pods waiting to be placed (not bound, gated or being deleted): the pods an unallocated
        #: shared claim's devices are asked by (one of them), and that go to one node with it.
        self.waiting_by: dict[str, set[str]] = {}
        #: Objects that could not be read, by kind and key: what is wrong with each.
        self.problems: dict[tuple[str, str], str] = {}
        #: Every request pods have asked for, by the name of its column (``demand.column``).
        self.columns: dict[str, Request] = {}
        #: Per column, the most devices one node offers in it (as of the last :meth:`supply`): which
        #: alternative of a ``firstAvailable`` request a pod asks for.
        self.most: dict[str, int] = {}
        #: Something changed what nodes offer (a device, an allocation, a class, a new column).
        self.dirty = False
        #: Devices PreBind has chosen for a claim (device -> claim) that the watch does not show allocated
        #: yet: never chosen again meanwhile, by this gang or another binding beside it.
        self.in_flight: dict[DeviceId, str] = {}
        #: Claims whose allocation (or added reservations) PreBind is taking back: until the watch shows them
        #: taken back, the claim as known here is stale (it looks allocated for the pod), and no PreBind uses it.
        self.releasing: dict[str, Release] = {}
        self._node_attributes: dict[str, dict[str, str]] | None = None  # cached until a slice changes
        self._by_id: dict[DeviceId, Device] | None = None  # cached until a slice changes
        self._on_node: dict[str, list[Device]] | None = None  # cached until a slice changes
        #: Device -> the claims it is allocated to (one, unless another scheduler shares devices: adminAccess).
        self._allocated: dict[DeviceId, set[str]] = {}

    def apply(self, resource: ApiResource, change_type: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name", ""))
        key = f"{namespace}/{name}" if namespace else name
        gone = change_type == "DELETED"
        self.problems.pop((resource.kind, key), None)
        self.dirty = self.dirty or resource.plural in (RESOURCE_SLICES.plural, DEVICE_CLASSES.plural)
        try:
            if resource.plural == RESOURCE_SLICES.plural:
                self._node_attributes = self._by_id = self._on_node = None
                self.selectors.forget(self.pools.apply(change_type, obj))
                for slice_name, problem in self.pools.problems.items():
                    self.problems[(resource.kind, slice_name)] = problem
            elif resource.plural == DEVICE_CLASSES.plural:
                self._served = None
                self.classes.pop(key, None)
                if not gone:
                    self.classes[key] = read_class(obj)
            elif resource.plural == RESOURCE_CLAIMS.plural:
                before = self.claims.pop(key, None)
                if before is not None and before.extended_for is not None and self.extended_of.get(
                    before.extended_for
                ) == key:
                    del self.extended_of[before.extended_for]
                for device in before.allocated if before is not None else ():
                    holders = self._allocated.get(device, set())
                    holders.discard(key)
                    if not holders:
                        self._allocated.pop(device, None)
                if self.networked_pools and before is not None:  # which networked devices are free changes
                    self.dirty = self.dirty or self.networked(before.allocated) > 0
                claim = None if gone else read_claim(obj)
                if self.networked_pools and claim is not None:
                    self.dirty = self.dirty or self.networked(claim.allocated) > 0
                if gone:
                    self.releasing.pop(key, None)
                    self.counted_by_pod(key, False)
                if gone:
                    self.in_flight = {device: claim for device, claim in self.in_flight.items() if claim != key}
                elif claim is not None:
                    self.claims[key] = claim
                    if claim.extended_for is not None:
                        self.extended_of[claim.extended_for] = key
                    if key in self.releasing and self.releasing[key].seen_in(claim):
                        del self.releasing[key]  # the watch caught up with the take-back
                    for device in claim.allocated:
                        self._allocated.setdefault(device, set()).add(key)
                        self.in_flight.pop(device, None)  # the watch shows it given: the allocation counts now
            elif resource.plural == RESOURCE_CLAIM_TEMPLATES.plural:
                self.templates.discard(key)
                if not gone:
                    self.templates.add(key)
        except ClaimError as error:
            self.problems[(resource.kind, key)] = str(error)

    def apply_group(self, change_type: str, obj: Mapping[str, Any]) -> None:
        """A ``scheduling.k8s.io`` PodGroup changed: the claims it shares with its pods are read again."""
        metadata = obj.get("metadata") or {}
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        self.groups.pop(key, None)
        if change_type == "DELETED":
            return
        try:
            found = read_group_claims(obj)
        except ClaimError:
            return  # the API server validates the field; a group that got past it shares nothing
        if found.entries:
            self.groups[key] = found

    def served(self) -> dict[str, DeviceClass]:
        """Which class serves each extended resource name (KEP-5004, ``extended.served_by``)."""
        if self._served is None:
            self._served = served_by(self.classes)
        return self._served

    def group_of(self, pod: Mapping[str, Any], named: PodClaim) -> GroupClaims | None:
        """The PodGroup whose claim ``named`` is (the pod's entry is exactly one of its group's), else None:
        the claim is then reserved for the group, not for the pod."""
        group = self.groups.get(pod_group(pod) or "")
        return group if group is not None and group.serves(named) else None

    def relisted(self, resource: ApiResource) -> None:
        """``resource`` was listed again: every claim is known as it is now, none stale after a take-back."""
        if resource.plural == RESOURCE_CLAIMS.plural:
            self.releasing.clear()

    def known(self, resource: ApiResource) -> set[tuple[str, str]]:
        """(namespace, name) of what is known of ``resource``, for pruning after a relist."""
        if resource.plural == RESOURCE_SLICES.plural:
            return self.pools.known()
        if resource.plural == DEVICE_CLASSES.plural:
            return {("", name) for name in self.classes}
        keys = self.claims if resource.plural == RESOURCE_CLAIMS.plural else self.templates
        return {tuple(key.split("/", 1)) for key in keys}  # type: ignore[misc]

    def allocated(self) -> set[DeviceId]:
        """Devices allocated to a claim (never given to another, unless the driver allows sharing)."""
        return set(self._allocated)

    def matching(self, request: Request) -> list[Device]:
        """The devices that satisfy ``request``: its class's selectors and its own, all of them. Raises
        SelectorError (an expression that does not compile or fails on a device) and ClaimError (no such
        class)."""
        expressions = self._expressions(request)
        return [
            device
            for device in self.pools.devices()
            if all(self.selectors.matches(expression, device.key, device.view) for expression in expressions)
        ]

    def _expressions(self, request: Request) -> tuple[str, ...]:
        """The selectors a device must satisfy for ``request``, its class's first; raises as :meth:`matching`."""
        device_class = self.classes.get(request.device_class)
        if device_class is None:
            raise ClaimError(f"DeviceClass {request.device_class} does not exist")
        expressions = (*device_class.selectors, *request.selectors)
        for expression in expressions:
            problem = self.selectors.check(expression)
            if problem is not None:
                raise SelectorError(problem)
        return expressions

    def device(self, device_id: DeviceId) -> Device | None:
        if self._by_id is None:
            self._by_id = {device.id: device for device in self.pools.devices()}
        return self._by_id.get(device_id)

    def networked(self, device_ids: Iterable[DeviceId]) -> int:
        """How many of these devices are on no one node (reached from several: ``Device.reach``)."""
        found = (self.device(device_id) for device_id in device_ids)
        return sum(1 for device in found if device is not None and device.node is None)

    def held(self, claim: Claim) -> dict[str, dict[str, int]]:
        """Per node, per column, the devices allocated to ``claim`` that the column's request would take: what
        a claim no pod counts as its own (shared, or its pod finished or gone before the resourceclaim
        controller deallocates it) keeps from everyone else. (A device on no one node is not offered once
        allocated: nothing holds it.)"""
        found: dict[str, dict[str, int]] = {}
        for device_id in claim.allocated:
            device = self.device(device_id)
            if device is None or device.node is None:
                continue
            for name, request in self.columns.items():
                if not name.endswith(WHOLE_NODE) and self._satisfies(device, request):
                    on_node = found.setdefault(device.node, {})
                    on_node[name] = on_node.get(name, 0) + 1
        return found

    def _satisfies(self, device: Device, request: Request) -> bool:
        device_class = self.classes.get(request.device_class)
        if device_class is None:
            return False
        try:
            expressions = (*device_class.selectors, *request.selectors)
            return all(self.selectors.matches(expression, device.key, device.view) for expression in expressions)
        except SelectorError:
            return False  # a request that cannot be evaluated: its pods are told, and take nothing

    def free_by_node(self, request: Request) -> Counter[str]:
        """Per node, how many devices satisfying ``request`` are not allocated (node-local devices only)."""
        taken = self.allocated()
        return Counter(
            device.node for device in self.matching(request) if device.node is not None and device.id not in taken
        )

    def register(self, column: str, request: Request) -> None:
        """A pod asks for ``request`` (counted as ``column``): nodes offer it from now on."""
        known = self.columns.get(column)
        if known is None or known.device_class != request.device_class:  # new, or served by another class now
            self.columns[column] = request
            self.dirty = True

    def supply(self, reach: Callable[[tuple[NodeSelectorTerm, ...]], Iterable[str]]) -> dict[str, dict[str, int]]:
        """Per node, per column, the devices there that satisfy the column's request, allocated or not: the pod
        a claim is for counts its devices (bound, assumed or placed), as every pod counts its GPUs, so that an
        allocation written while its pod binds changes nothing placement sees; a claim no pod counts (shared,
        or its pod gone) is counted on its own by ClusterState. Devices on no one node (network-attached) are
        offered by every node that reaches them (``reach``: the nodes a node selector selects) while they
        are free: a pod counts only the devices of its claim that are on its node. (A column whose request
        cannot be evaluated offers nothing; the pods that ask for it are told why.)"""
        offered: dict[str, dict[str, int]] = {}
        self.most = {}
        # Not the devices PreBind holds: their pods still count them until the watch shows them allocated.
        taken = self._allocated
        counted_in = self._counted_in() if len(self.columns) > 1 else {}
        reached: dict[tuple[NodeSelectorTerm, ...], list[str]] = {}  # the nodes of each node selector, once
        for name, request in self.columns.items():
            try:
                matching = self.matching(request)
            except (ClaimError, SelectorError):
                continue
            if name.endswith(WHOLE_NODE):  # allocationMode All: one set per node with the most of them
                nodes = set(reach(ALL_NODES))  # of the nodes there are (a slice may outlive its node)
                found = Counter(device.node for device in matching if device.node in nodes)
                most = max(found.values(), default=0)
                for node, count in found.items():
                    if count == most:
                        offered.setdefault(node, {})[name] = 1
                self.most[name] = most  # what a pod taking such a set counts of the devices
                continue
            # A device a pod counts in another column (its claim's) is not offered in this one as well.
            found = Counter(
                device.node
                for device in matching
                if device.node is not None and counted_in.get(device.id, name) == name
            )
            free_networked = Counter(
                device.reach for device in matching if device.node is None and device.reach is not None
                and device.id not in taken
            )  # fmt: skip
            for terms, count in free_networked.items():
                if terms not in reached:
                    reached[terms] = list(reach(terms))
                for node in reached[terms]:
                    found[node] += count
            for node, count in found.items():
                offered.setdefault(node, {})[name] = count
            self.most[name] = max(found.values(), default=0)
        self.networked_pools = any(device.node is None and device.reach is not None for device in self.pools.devices())
        return offered

    def counted_by_pod(self, claim: str, counted: bool) -> None:
        """ClusterState says whether the claim's devices are counted by its one pod (in its request's column)."""
        if counted != (claim in self._pod_counted):
            (self._pod_counted.add if counted else self._pod_counted.discard)(claim)
            self.dirty = self.dirty or len(self.columns) > 1  # offered in the other columns, or no longer

    def _counted_in(self) -> dict[DeviceId, str]:
        """The column each device allocated to a claim of one pod is counted in by that pod (the column of the
        request it was given for). Devices of claims counted on their own count in every column already."""
        found: dict[DeviceId, str] = {}
        for key in self._pod_counted:
            claim = self.claims.get(key)
            if claim is None:
                continue
            ways = {way.name: way for request in claim.requests for way in request.alternatives}
            for device, given in zip(claim.allocated, claim.allocated_requests, strict=False):
                if given in ways:
                    found[device] = column(ways[given])
        return found

    def node_attributes(self) -> dict[str, dict[str, str]]:
        """Per node, the device attributes (``domain/name`` -> value) that every device there with that
        attribute agrees on: the NVLink clique of a node's GPUs, say. A gang may require or prefer one domain
        of such an attribute as it does of a node label; a node whose devices disagree is in no domain of it.
        """
        if self._node_attributes is not None:
            return self._node_attributes
        seen: dict[str, dict[str, str | None]] = {}
        for device in self.pools.devices():
            if device.node is None:
                continue
            found = seen.setdefault(device.node, {})
            for domain, attributes in device.view.attributes.items():
                for name, value in attributes.items():
                    key, text = f"{domain}/{name}", _label_value(value)
                    if found.setdefault(key, text) != text:
                        found[key] = None  # two devices of the node disagree
        self._node_attributes = {
            node: {key: value for key, value in found.items() if value is not None} for node, found in seen.items()
        }
        return self._node_attributes

    def on_node(self, request: Request, node: str) -> int:
        """How many of ``node``'s own devices satisfy ``request``, taken or not (what ``All`` takes there)."""
        expressions = self._expressions(request)
        self.candidates(request, node, set())  # builds the per-node index
        return sum(
            1
            for device in (self._on_node or {}).get(node, ())
            if all(self.selectors.matches(expression, device.key, device.view) for expression in expressions)
        )

    def candidates(
        self,
        request: Request,
        node: str,
        taken: set[DeviceId],
        reaches: Callable[[tuple[NodeSelectorTerm, ...], str], bool] = lambda terms, node: not terms,
    ) -> list[Device]:
        """The devices ``node`` can use that satisfy ``request``, not allocated and not in ``taken``: its own,
        then those on no one node that it reaches (``reaches``); the lowest names first within each, so that a
        repeated choice is the same choice. Only the node's devices and the networked ones are looked at."""
        expressions = self._expressions(request)
        if self._on_node is None:
            self._on_node = {}
            for device in self.pools.devices():
                if device.node is not None:
                    self._on_node.setdefault(device.node, []).append(device)
                elif device.reach is not None:
                    self._on_node.setdefault("", []).append(device)  # networked: "" is no node's name
        return sorted(
            (
                device
                for device in (*self._on_node.get(node, ()), *self._on_node.get("", ()))
                if device.id not in self._allocated
                and device.id not in taken
                and device.id not in self.in_flight
                and (device.node is not None or (device.reach is not None and reaches(device.reach, node)))
                and all(self.selectors.matches(expression, device.key, device.view) for expression in expressions)
            ),
            key=lambda device: (device.node is None, device.id),
        )

    def hold(self, claim: str, devices: Iterable[DeviceId]) -> None:
        """PreBind chose ``devices`` for ``claim``: nobody else gets them until the watch shows them given, or
        :meth:`release`."""
        for device in devices:
            self.in_flight[device] = claim

    def release(self, devices: Iterable[DeviceId]) -> None:
        for device in devices:
            self.in_flight.pop(device, None)


def _label_value(value: object) -> str | None:
    """An attribute's value as a domain is named (None for a list: no one domain)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if isinstance(value, list) else str(value)
