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
from scheduler.devices.sharing import (
    UNLIMITED_SHARES,
    Budget,
    CounterKey,
    consumption,
    fits_capacity,
    shares_left,
    tolerates,
)
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
        #: Device -> the claims it is allocated to (one, unless it allows multiple allocations, or adminAccess).
        self._allocated: dict[DeviceId, set[str]] = {}
        #: Of devices that allow multiple allocations, the claims PreBind has chosen them for that the watch does
        #: not show allocated yet, with what each consumes (device -> claim -> capacity -> amount).
        self.in_flight_shares: dict[DeviceId, dict[str, Mapping[str, int]]] = {}
        #: Whether some device consumes counters or is shared (as of the last :meth:`supply`): allocations then
        #: change what nodes offer.
        self.sharing_pools = False
        #: Per node, per column, the devices offered there that allocations counted nowhere in the column use
        #: (partitions whose counters other partitions took, shared capacity others consumed), as of the last
        #: :meth:`supply`: ClusterState counts them as room in use.
        self.blocked: dict[str, dict[str, int]] = {}
        #: What the last :meth:`supply` read of each column, kept so that a change of allocations reads again
        #: only the nodes it touched (``_touched``); a slice or class that changes drops them all.
        self._computed: dict[str, _Column] = {}
        self._touched: set[str] = set()
        self._notes: dict[str, str] | None = None  # why devices cannot serve each column, made when asked
        #: Called on every claim the watch shows: the binder waits on them for drivers' binding conditions.
        self.wakers: set[Callable[[], None]] = set()
        self._counters: dict[CounterKey, dict[str, int]] | None = None  # cached until a slice changes

    def apply(self, resource: ApiResource, change_type: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name", ""))
        key = f"{namespace}/{name}" if namespace else name
        gone = change_type == "DELETED"
        self.problems.pop((resource.kind, key), None)
        if resource.plural in (RESOURCE_SLICES.plural, DEVICE_CLASSES.plural):
            self.dirty, self._computed = True, {}  # every column is read again, on every node
        try:
            if resource.plural == RESOURCE_SLICES.plural:
                self._node_attributes = self._by_id = self._on_node = self._counters = None
                self.selectors.invalidate(self.pools.apply(change_type, obj))
                for slice_name, problem in self.pools.problems.items():
                    self.problems[(resource.kind, slice_name)] = problem
            elif resource.plural == DEVICE_CLASSES.plural:
                self._served = None
                self.classes.pop(key, None)
                if not gone:
                    self.classes[key] = read_class(obj)
            elif resource.plural == RESOURCE_CLAIMS.plural:
                before = self.claims.pop(key, None)
                if (
                    before is not None
                    and before.extended_for is not None
                    and self.extended_of.get(before.extended_for) == key
                ):
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
                    for shares in self.in_flight_shares.values():
                        shares.pop(key, None)
                elif claim is not None:
                    self.claims[key] = claim
                    if claim.extended_for is not None:
                        self.extended_of[claim.extended_for] = key
                    if key in self.releasing and self.releasing[key].seen_in(claim):
                        del self.releasing[key]  # the watch caught up with the take-back
                    for device in claim.allocated:
                        self._allocated.setdefault(device, set()).add(key)
                        self.in_flight.pop(device, None)  # the watch shows it given: the allocation counts now
                        self.in_flight_shares.get(device, {}).pop(key, None)
                changed = (*(before.allocated if before is not None else ()), *(claim.allocated if claim else ()))
                if (
                    self.sharing_pools
                    and changed
                    and (before is None or claim is None or before.allocated != claim.allocated)
                ):
                    # Counters, and the capacity of shared devices, are what allocations leave: offers change.
                    self._touch(device for device in changed if self._counts_use(device))
                for wake in self.wakers:
                    wake()
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
        return [device for device in self.pools.devices() if self._usable(device, request, expressions)]

    def _usable(self, device: Device, request: Request, expressions: tuple[str, ...]) -> bool:
        """Whether ``device`` can serve ``request`` at all: every selector, and what :meth:`_allowed` asks."""
        return all(
            self.selectors.matches(expression, device.key, device.view) for expression in expressions
        ) and self._allowed(device, request)

    def _selected(self, request: Request) -> list[Device]:
        """The devices ``request``'s selectors (its class's and its own) select; raises as :meth:`matching`."""
        expressions = self._expressions(request)
        return [
            device
            for device in self.pools.devices()
            if all(self.selectors.matches(expression, device.key, device.view) for expression in expressions)
        ]

    @staticmethod
    def _allowed(device: Device, request: Request) -> bool:
        """Every blocking taint of the device tolerated, and the capacity the request asks there (a share of a
        shared device, or at least that much of a whole one)."""
        sharing = device.sharing
        if sharing.taints and not tolerates(sharing.taints, request.tolerations):
            return False
        if sharing.shared:
            return consumption(sharing.capacity or {}, dict(request.capacity)) is not None
        if request.capacity:
            return fits_capacity(_whole_capacity(device), dict(request.capacity))
        return True

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
            return self._usable(device, request, (*device_class.selectors, *request.selectors))
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
            self._computed.pop(column, None)
            self.dirty = True

    def supply(self, reach: Callable[[tuple[NodeSelectorTerm, ...]], Iterable[str]]) -> dict[str, dict[str, int]]:
        """Per node, per column, the devices there that satisfy the column's request, allocated or not: the pod
        a claim is for counts its devices (bound, assumed or placed), as every pod counts its GPUs, so that an
        allocation written while its pod binds changes nothing placement sees; a claim no pod counts (shared,
        or its pod gone) is counted on its own by ClusterState. Devices on no one node (network-attached) are
        offered by every node that reaches them (``reach``: the nodes a node selector selects) while they
        are free: a pod counts only the devices of its claim that are on its node. (A column whose request
        cannot be evaluated offers nothing; the pods that ask for it are told why.)

        Partitions and shared devices are offered as many as the node could give at once were nothing
        allocated; what allocations take of their counters or capacity beyond what the column's own pods
        count is ``blocked`` (node -> column -> count), which ClusterState counts as room in use. Why devices
        that the column's selectors select cannot serve it (taints, counters, capacity) is :meth:`note`.

        A column read before is read again only on the nodes whose allocations changed since (``_touch``):
        on a cluster of MIG partitions, a claim allocated costs its node's devices, not every node's."""
        offered: dict[str, dict[str, int]] = {}
        self.most, self.blocked, self._notes = {}, {}, None
        # Not the devices PreBind holds: their pods still count them until the watch shows them allocated.
        taken = self._allocated
        counted_in = self._counted_in() if len(self.columns) > 1 else {}
        if not self._computed:  # the slices or classes changed: what kinds of device there are, read again
            devices = list(self.pools.devices())
            self.sharing_pools = any(device.sharing.consumes or device.sharing.shared for device in devices)
            self.networked_pools = any(device.node is None and device.reach is not None for device in devices)
        budget = self.budget(in_flight=False) if self.sharing_pools else None
        touched, self._touched = self._touched, set()
        reached: dict[tuple[NodeSelectorTerm, ...], list[str]] = {}  # the nodes of each node selector, once
        for name, request in self.columns.items():
            column = self._computed.get(name)
            if column is None:
                try:
                    column = self._computed[name] = _Column.read(self._selected(request), request, self._allowed)
                except (ClaimError, SelectorError):
                    continue
                again: Iterable[str] = column.by_node
            else:
                again = touched & column.by_node.keys()
            if name.endswith(WHOLE_NODE):  # allocationMode All: one set per node with the most of them
                nodes = set(reach(ALL_NODES))  # of the nodes there are (a slice may outlive its node)
                counts = {node: len(devices) for node, devices in column.by_node.items() if node in nodes}
                most = max(counts.values(), default=0)
                for node, count in counts.items():
                    if count == most:
                        offered.setdefault(node, {})[name] = 1
                self.most[name] = most  # what a pod taking such a set counts of the devices
                continue
            for node in again:
                now, whole = self._offered_on_nodes(name, request, column.by_node[node], counted_in, budget)
                column.found[node], column.capacity[node] = now[node], whole[node]
            found, capacity = Counter(column.found), Counter(column.capacity)
            # A networked partition only while its counters have room for it (PreBind keeps them together).
            free_networked = Counter(
                device.reach
                for device in column.networked
                if device.reach is not None and device.id not in taken and _fits(device, budget)
            )
            for terms, count in free_networked.items():
                if terms not in reached:
                    reached[terms] = list(reach(terms))
                for node in reached[terms]:
                    found[node] += count
                    capacity[node] += count
            for node, count in capacity.items():
                if count:
                    offered.setdefault(node, {})[name] = count
                if count > found[node]:
                    self.blocked.setdefault(node, {})[name] = count - found[node]
            self.most[name] = max(found.values(), default=0)
        return offered

    def note(self, name: str) -> str:
        """Why devices the selectors of column ``name`` select cannot serve its request (taints, counters,
        capacity), in words; empty when nothing keeps them."""
        if self._notes is None:
            self._notes = {}
        if name not in self._notes:
            column, request = self._computed.get(name), self.columns.get(name)
            if column is None or request is None:
                self._notes[name] = ""
            else:
                budget = self.budget(in_flight=False) if self.sharing_pools else None
                self._notes[name] = self._note(request, column.selected, column.matching, budget)
        return self._notes[name]

    def _offered_on_nodes(
        self,
        name: str,
        request: Request,
        matching: list[Device],
        counted_in: Mapping[tuple[DeviceId, str], str],
        budget: Budget | None,
    ) -> tuple[Counter[str], Counter[str]]:
        """Per node, the node's own devices offered in column ``name`` now, and as many as it could give were
        nothing allocated. Now: each allocated device whose claim is counted in this column (by its pod) or on
        its own, each free one; a free partition only as far as what allocations leave of its counters allows
        (the smallest partitions first, as many as fit); a shared device as each allocation it has plus the
        shares for ``request`` it has room for. Were nothing allocated: as many partitions as fit the counters
        whole, as many shares as fit the capacity whole."""
        found: Counter[str] = Counter()
        capacity: Counter[str] = Counter()
        partitions: list[Device] = []
        for device in matching:
            if device.node is None:
                continue
            holders = self._allocated.get(device.id)
            shared = device.sharing.shared
            if shared:
                capacity[device.node] += self.shares(device, request, empty=True) if not device.sharing.consumes else 0
            elif not device.sharing.consumes or budget is None:
                capacity[device.node] += 1
            if device.sharing.consumes and budget is not None:
                partitions.append(device)
                if not holders:
                    continue
            if holders:
                # A device a pod counts in another column (its claim's) is not offered in this one as well.
                here = sum(1 for claim in holders if counted_in.get((device.id, claim), name) == name)
                found[device.node] += here + self.shares(device, request) if shared else min(here, 1)
            else:
                found[device.node] += self.shares(device, request) if shared else 1
        if partitions and budget is not None:
            left, whole = budget.copy(), self.budget(in_flight=False, empty=True)
            for device in sorted(partitions, key=_smallest_first):
                node, sharing = str(device.node), device.sharing
                if whole.fits(device.driver, device.pool, sharing):
                    whole.take(device.driver, device.pool, sharing)
                    capacity[node] += self.shares(device, request, empty=True) if sharing.shared else 1
                if device.id not in self._allocated and left.fits(device.driver, device.pool, sharing):
                    left.take(device.driver, device.pool, sharing)
                    found[node] += self.shares(device, request) if sharing.shared else 1
        return found, capacity

    def _note(self, request: Request, selected: list[Device], matching: list[Device], budget: Budget | None) -> str:
        """Why devices the request's selectors select cannot serve it, in words (empty when all can)."""
        usable = {device.id for device in matching}
        tainted = [device for device in selected if device.id not in usable and device.sharing.taints
                   and not tolerates(device.sharing.taints, request.tolerations)]  # fmt: skip
        found = []
        if tainted:
            taints = sorted({str(taint) for device in tainted for taint in device.sharing.taints})
            found.append(f"{len(tainted)} tainted {', '.join(taints[:2])}{' and more' if len(taints) > 2 else ''}, "
                         "which the request does not tolerate")  # fmt: skip
        small = [device for device in selected if device.id not in usable and device not in tainted]
        if small and request.capacity:
            asked = " and ".join(f"{quantity.text} of {name}" for name, quantity in request.capacity)
            found.append(f"{len(small)} with less than {asked} (or a policy that refuses it)")
        if budget is not None:
            blocked = [device for device in matching if device.sharing.consumes and device.id not in self._allocated
                       and not budget.fits(device.driver, device.pool, device.sharing)]  # fmt: skip
            if blocked:
                first = blocked[0]
                short = budget.short(first.driver, first.pool, first.sharing)
                found.append(f"{len(blocked)} partitions whose GPU's counters other partitions use (on "
                             f"{first.node or first.pool}, {short})")  # fmt: skip
        full = [device for device in matching if device.sharing.shared and device.id in self._allocated
                and not self.shares(device, request)]  # fmt: skip
        if full:
            found.append(f"{len(full)} shared devices with too little capacity left for another share")
        return "; ".join(found)

    def counted_by_pod(self, claim: str, counted: bool) -> None:
        """ClusterState says whether the claim's devices are counted by its one pod (in its request's column)."""
        if counted != (claim in self._pod_counted):
            (self._pod_counted.add if counted else self._pod_counted.discard)(claim)
            if len(self.columns) > 1:  # offered in the other columns, or no longer
                known = self.claims.get(claim)
                self._touch(known.allocated if known is not None else ())

    def _touch(self, devices: Iterable[DeviceId]) -> None:
        """What these devices' nodes offer is read again at the next :meth:`supply` (their allocations, or the
        column their pod counts them in, changed)."""
        nodes = {device.node for device_id in devices if (device := self.device(device_id)) is not None}
        if nodes:
            self._touched |= {node for node in nodes if node is not None}
            self.dirty = True

    def _counted_in(self) -> dict[tuple[DeviceId, str], str]:
        """The column each device allocated to a claim of one pod is counted in by that pod (the column of the
        request it was given for), by (device, claim). Devices of claims counted on their own count in every
        column already."""
        found: dict[tuple[DeviceId, str], str] = {}
        for key in self._pod_counted:
            claim = self.claims.get(key)
            if claim is None:
                continue
            ways = {way.name: way for request in claim.requests for way in request.alternatives}
            for device, given in zip(claim.allocated, claim.allocated_requests, strict=False):
                if given in ways:
                    found[(device, key)] = column(ways[given])
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
        return sum(1 for device in (self._on_node or {}).get(node, ()) if self._usable(device, request, expressions))

    def candidates(
        self,
        request: Request,
        node: str,
        taken: set[DeviceId],
        reaches: Callable[[tuple[NodeSelectorTerm, ...], str], bool] = lambda terms, node: not terms,
        shares: Mapping[DeviceId, Mapping[str, int]] | None = None,
    ) -> list[Device]:
        """The devices ``node`` can use that satisfy ``request``, not allocated and not in ``taken`` (of a shared
        device: with room for one more share, counting ``shares``, what this choice has given of it already):
        its own, then those on no one node that it reaches (``reaches``); the lowest names first within each,
        so that a repeated choice is the same choice. Only the node's devices and the networked ones are looked
        at. Counters are not looked at here: what several devices consume together is (``Budget``)."""
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
                if self._free(device, request, taken, shares or {})
                and (device.node is not None or (device.reach is not None and reaches(device.reach, node)))
                and self._usable(device, request, expressions)
            ),
            key=lambda device: (device.node is None, *_smallest_first(device)),
        )

    def _free(
        self, device: Device, request: Request, taken: set[DeviceId], shares: Mapping[DeviceId, Mapping[str, int]]
    ) -> bool:
        if not device.sharing.shared:
            return device.id not in self._allocated and device.id not in taken and device.id not in self.in_flight
        capacity = device.sharing.capacity or {}
        takes = consumption(capacity, dict(request.capacity))
        if takes is None:
            return False
        used = self.used(device.id, in_flight=True)
        for name, amount in shares.get(device.id, {}).items():
            used[name] = used.get(name, 0) + amount
        return shares_left(capacity, used, takes, 1) >= 1

    def used(self, device_id: DeviceId, *, in_flight: bool) -> dict[str, int]:
        """What the claims a shared device is allocated to consume of its capacities (and, ``in_flight``, the
        shares PreBind has chosen that the watch does not show yet)."""
        found: dict[str, int] = {}
        consumed = [
            amounts
            for key in self._allocated.get(device_id, ())
            if (claim := self.claims.get(key)) is not None
            for given, amounts in zip(claim.allocated, claim.consumed, strict=False)
            if given == device_id
        ]
        if in_flight:
            consumed += list(self.in_flight_shares.get(device_id, {}).values())
        for amounts in consumed:
            for name, amount in amounts.items():
                found[name] = found.get(name, 0) + amount
        return found

    def shares(self, device: Device, request: Request, *, empty: bool = False) -> int:
        """How many more allocations for ``request`` a shared device has room for (allocations the watch shows;
        ``empty``: were it allocated to none)."""
        capacity = device.sharing.capacity or {}
        takes = consumption(capacity, dict(request.capacity))
        used = {} if empty else self.used(device.id, in_flight=False)
        return 0 if takes is None else shares_left(capacity, used, takes, UNLIMITED_SHARES)

    def budget(self, *, in_flight: bool, empty: bool = False) -> Budget:
        """What allocated devices (and, ``in_flight``, devices PreBind holds) leave of every counter set
        (``empty``: the counters whole)."""
        if self._counters is None:
            self._counters = self.pools.counters()
        budget = Budget(self._counters)
        if empty or not self._counters:
            return budget  # (most clusters: no pool publishes counters, and no allocation need be looked at)
        using = set(self._allocated)
        if in_flight:
            using |= set(self.in_flight) | {device for device, claims in self.in_flight_shares.items() if claims}
        for device_id in using:
            device = self.device(device_id)
            if device is not None and device.sharing.consumes:
                budget.take(device.driver, device.pool, device.sharing)
        return budget

    def spending(self, device_id: DeviceId) -> bool:
        """Whether the device's counters are spent already: it is allocated, or PreBind holds it."""
        return device_id in self._allocated or device_id in self.in_flight or bool(self.in_flight_shares.get(device_id))

    def _counts_use(self, device_id: DeviceId) -> bool:
        device = self.device(device_id)
        return device is not None and (bool(device.sharing.consumes) or device.sharing.shared)

    def set_aside(self, claim: str, devices: Iterable[DeviceId], consumed: Iterable[Mapping[str, int]] = ()) -> None:
        """PreBind chose ``devices`` for ``claim`` (consuming ``consumed`` of each shared one): nobody else gets
        them until the watch shows them given, or :meth:`put_back`."""
        amounts = list(consumed)
        for i, device in enumerate(devices):
            if i < len(amounts) and amounts[i]:
                self.in_flight_shares.setdefault(device, {})[claim] = amounts[i]
            else:
                self.in_flight[device] = claim

    def put_back(self, devices: Iterable[DeviceId], claim: str | None = None) -> None:
        for device in devices:
            self.in_flight.pop(device, None)
            shares = self.in_flight_shares.get(device)
            if shares is not None and claim is not None:
                shares.pop(claim, None)


def _fits(device: Device, budget: Budget | None) -> bool:
    return budget is None or not device.sharing.consumes or budget.fits(device.driver, device.pool, device.sharing)


def _smallest_first(device: Device) -> tuple[int, DeviceId]:
    return sum(amount for _, counters in device.sharing.consumes for _, amount in counters), device.id


def _whole_capacity(device: Device) -> dict[str, int]:
    """A device's capacities by the names a request may give them: bare, and qualified by their domain."""
    found: dict[str, int] = {}
    for domain, capacities in device.view.capacity.items():
        for name, amount in capacities.items():
            found[f"{domain}/{name}"] = amount
            if domain == device.driver:
                found[name] = amount
    return found


def _label_value(value: object) -> str | None:
    """An attribute's value as a domain is named (None for a list: no one domain)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if isinstance(value, list) else str(value)


@dataclass(slots=True)
class _Column:
    """What :meth:`Devices.supply` read of one column: the devices its selectors select, those that can serve
    its request, by node (and those on no one node), and what each node offered of them when last read."""

    selected: list[Device]
    matching: list[Device]
    by_node: dict[str, list[Device]]
    networked: list[Device]
    found: Counter[str]
    capacity: Counter[str]

    @staticmethod
    def read(selected: list[Device], request: Request, allowed: Callable[[Device, Request], bool]) -> _Column:
        matching = [device for device in selected if allowed(device, request)]
        by_node: dict[str, list[Device]] = {}
        networked = []
        for device in matching:
            if device.node is not None:
                by_node.setdefault(device.node, []).append(device)
            elif device.reach is not None:
                networked.append(device)
        return _Column(selected, matching, by_node, networked, Counter(), Counter())
