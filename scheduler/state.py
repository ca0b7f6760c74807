"""ClusterState: the single source of truth inside the process (docs/architecture.md).

Informers apply watch events here; the scheduling cycle reads the snapshot and the gang index and
*assumes* capacity (takes it for a placement before the watch shows the pods bound); the binding cycle
confirms or forgets what was assumed. Everything runs on one
event loop and no method awaits, so each call is atomic with respect to the others.

How a pod's capacity is counted::

                      assume                   bind succeeded            watch shows nodeName
    pending ──────────────────────▶ assumed ─────────────────▶ bound, unconfirmed ──────────────▶ bound
       ▲                              │                           │                               │
       │ forget (permit timeout,      │                           │ not confirmed within          │ deleted or
       │ bind failure, lost node)     ▼                           │ binding.assumeTimeoutSeconds  │ finished
       └───────────────────────────── ◀───────────────────────────┘ (expired)                     ▼
                                                                                               gone

    A pod another scheduler binds goes straight from pending to bound when the watch shows it.
    The room a gang holds for members that do not exist yet (its placeholders) is assumed without a pod.

Invariants:

- a pod (or placeholder) counts on at most one node, once;
- ``snapshot.free[n] == allocatable[n] - requests of bound and assumed pods on n``;
- an assumption with no deadline never expires: its binding is still in flight or in permit.

Costs: every pod event is O(resources) here plus the gang index's incremental work; node events that
change nothing placement reads (status heartbeats) cost a comparison.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import structlog

from scheduler.budgets import Budgets
from scheduler.clock import Clock
from scheduler.devices.accounting import DeviceAccounting
from scheduler.devices.demand import DeviceDemand
from scheduler.devices.extended import asks_any
from scheduler.devices.inventory import Devices
from scheduler.gangs import GangIndex, GangKey
from scheduler.gangs.fields import timestamp
from scheduler.gangs.pods import UPSTREAM_GROUP
from scheduler.ports.port import DISRUPTION_BUDGETS, DRA_GROUP, NODES, PODS, ApiResource, Change
from scheduler.runtimes import Runtimes
from scheduler.settings import Settings
from scheduler.strings import SharedStrings
from topology import (
    Assignment,
    GangRequest,
    Member,
    PodShape,
    ResourceKind,
    Snapshot,
    SpecError,
    Topology,
    node_record,
    pod_demand,
)
from topology.eligibility import affinity_mask
from topology.kinds import Claims, replacing
from topology.nodes import NodeRecord
from topology.request import NodeConstraints, NodeSelectorTerm
from topology.running import RunningPods

log = structlog.get_logger("phalanx.state")

FINISHED = frozenset({"Succeeded", "Failed"})
#: The condition a preemption puts on each victim before deleting it, and its reason (kube-scheduler's words).
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


@dataclass(slots=True)
class Assumption:
    """Capacity held for a pod (or a placeholder) before the watch confirms it bound."""

    node: str
    requests: dict[str, int]
    gang: GangKey
    shape: PodShape
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class Departure:
    """A bound pod that failed or was deleted while it ran (not preempted): its room may be kept for its
    replacement (``vacancies.py``)."""

    pod: str
    node: str
    requests: tuple[tuple[str, int], ...]
    gang: GangKey
    at: float  # monotonic


@dataclass(slots=True)
class RunningPod:
    """What the scheduler keeps of every pod, its own or another scheduler's."""

    uid: str
    node: str | None
    finished: bool
    requests: dict[str, int]
    priority: int = 0
    #: ``status.startTime`` (else the creation time) as written, parsed only when preemption asks.
    start: object = None
    deleting: bool = False
    labels: Mapping[str, str] | None = None
    #: Seconds it may take to terminate (``terminationGracePeriodSeconds``, 30 when unset).
    grace: float = 30.0
    #: ``spec.activeDeadlineSeconds``: the kubelet stops the pod this long after it starts.
    runtime_limit: float | None = None
    #: When it will have ended at the latest, in wall seconds, if that is known: its start plus its
    #: ``activeDeadlineSeconds``, or when its deletion's grace period ends.
    ends_at: float | None = None
    #: A scheduler's preemption marked it (its room was made for the preemptor, not left for a replacement).
    preempted: bool = False

    @property
    def started(self) -> float:
        """When it started, in wall seconds: preemption spares the longest-running first."""
        return timestamp(self.start) or 0.0

    def ends_by(self, now: float) -> float:
        """The latest it will have ended (wall seconds): a pod bound but not started yet may start now;
        one with no ``activeDeadlineSeconds`` may run forever."""
        if self.ends_at is not None:
            return self.ends_at
        return now + self.runtime_limit if self.runtime_limit is not None else float("inf")


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class ClusterState:
    """Nodes, pods, group objects and assumptions (see the module docstring for the pod states)."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self._strings = SharedStrings()  # the objects kept share one copy of each string they repeat
        self.snapshot = Snapshot(topology=Topology(levels=settings.levels))
        #: Dynamic Resource Allocation: device classes, the devices drivers publish, and claims. Pods are read
        #: with the devices they claim as one more kind of resource (``devices/demand.py``).
        self.devices = Devices()
        self.device_demand = DeviceDemand(self.devices)
        self.kinds: tuple[ResourceKind, ...] = replacing(Claims, self.device_demand)
        self.index = GangIndex(settings.gang_settings(), self.kinds)
        self._base_nodes: dict[str, NodeRecord] = {}  # each node as its own object says (no devices)
        self._device_supply: dict[str, dict[str, int]] = {}  # node -> devices offered, by column
        self._device_attributes: dict[str, dict[str, str]] = {}  # node -> attributes its devices agree on
        #: What no pod counts of the devices (claims counted on their own, partitions and shares others
        #: keep), counted in the snapshot through this state (``devices/accounting.py``).
        self.device_accounting = DeviceAccounting(self.devices, _DeviceLedger(self))
        #: Which class served each extended resource name when classes last changed (KEP-5004).
        self._served: dict[str, str] = {}
        self.assumed: dict[str, Assumption] = {}
        self._expiries: list[tuple[float, str]] = []  # heap of (deadline, pod); stale entries are skipped
        self._pods: dict[str, RunningPod] = {}
        #: Pods bound and not finished, by priority (what preemption could free).
        self.running = RunningPods()
        #: How long pods run, learned from those that ended (``runtimes.py``): when a domain may empty.
        self.runtimes = Runtimes(settings.starvation.runtime_history)
        #: Pending pods whose ``status.nominatedNodeName`` names a node: (node, requests, priority). The
        #: room is theirs against lower priorities until the API shows the nomination gone, whichever
        #: process (or an earlier leader) wrote it.
        self.nominated: dict[str, tuple[str, dict[str, int], int]] = {}
        #: Running pods that a preemption of ours marked as victims (their ``DisruptionTarget`` condition) and
        #: that the API does not show going yet: pod -> the condition's message (who preempted it, where).
        #: Kept from the watch, so that an eviction an earlier leader began is finished by the next one.
        self.marked_victims: dict[str, str] = {}
        self.budgets = Budgets()
        self._interned: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        self._groups: dict[ApiResource, set[tuple[str, str]]] = {}
        self.unreadable_nodes: dict[str, str] = {}
        self._freed: set[str] = set()
        self._departures: list[Departure] = []
        self._nodes_changed = False
        self._victim_prefixes = tuple(f"{name}: " for name in settings.scheduler_names)

    # -- informer side ----------------------------------------------------------------------------

    def apply(self, resource: ApiResource, change: Change) -> None:
        """Apply one watch event (ADDED, MODIFIED or DELETED) of any watched resource."""
        if change.type == "BOOKMARK":
            return
        if resource == PODS:
            self._apply_pod(change)
        elif resource == NODES:
            self._apply_node(change)
        elif _same_api(resource, DISRUPTION_BUDGETS):
            self.budgets.apply(change)
        elif resource.group == DRA_GROUP:
            self._apply_device_object(resource, change)
        else:
            self._apply_group(resource, change)

    def apply_listed(self, resource: ApiResource, items: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
        """Apply one page of a list; returns the (namespace, name) of what it held."""
        listed = set()
        for item in items:
            listed.add(_key(item))
            self.apply(resource, Change("ADDED", item))
        return listed

    def prune(self, resource: ApiResource, listed: set[tuple[str, str]]) -> None:
        """After the last page of a list: delete what is known but was not listed."""
        if resource == PODS:
            known: set[tuple[str, str]] = {tuple(key.split("/", 1)) for key in self._pods}  # type: ignore[misc]
        elif resource == NODES:
            known = {("", name) for name in self.snapshot.names} | {("", name) for name in self.unreadable_nodes}
        elif _same_api(resource, DISRUPTION_BUDGETS):
            known = self.budgets.known()
        elif resource.group == DRA_GROUP:
            self.devices.relisted(resource)
            known = self.devices.known(resource)
        else:
            known = set(self._groups.get(resource, set()))
        for namespace, name in known - listed:
            stub = {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": {"namespace": namespace, "name": name},
            }
            self.apply(resource, Change("DELETED", stub))

    def _apply_pod(self, change: Change) -> None:
        namespace, name = _key(change.object)
        key = f"{namespace}/{name}"
        if change.type == "DELETED":
            self._learn_deleted(key)
            self._drop_pod(key)
            self.index.delete_pod(namespace, name)
            self.device_accounting.pod_gone(key)
            return
        known = self.index.pod(key)  # a member's bind event shares what did not change from its last event
        obj = self._strings.share(change.object, known.raw if known is not None else None)
        spec, status, metadata = obj.get("spec") or {}, obj.get("status") or {}, obj.get("metadata") or {}
        self.device_accounting.pod_seen(key, obj)
        node = spec.get("nodeName") or None
        finished = status.get("phase") in FINISHED
        previous = self._pods.get(key)
        requests, read = self._requests_again(key, obj) or self._requests(obj)
        self._count_room(key, previous, node, status, requests)
        priority = spec.get("priority")
        priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
        deleting = metadata.get("deletionTimestamp") is not None
        limit, ends_at = _lifetime(spec, status, metadata)
        if node is not None and not finished:
            kind = self.runtimes.kind(namespace, priority, requests)  # learned of pods that run, as they end
            self.running.set(
                key, node, requests, priority, deleting=deleting, ends_at=ends_at, runtime_limit=limit, kind=kind
            )
        else:
            self.running.remove(key)
        nominated = status.get("nominatedNodeName")
        if node is None and not finished and not deleting and isinstance(nominated, str) and nominated:
            self.nominated[key] = (nominated, requests, priority)
        else:
            self.nominated.pop(key, None)
        victim_of = _victim_message(status)
        if finished and (previous is None or not previous.finished) and victim_of is None:
            self._learn_finished(previous, status, self.runtimes.kind(namespace, priority, requests))
        self._mark_victim(key, victim_of if node is not None and not finished and not deleting else None)
        labels = metadata.get("labels")
        uid = str(metadata.get("uid") or "")
        self._pods[key] = RunningPod(
            uid=uid,
            node=node,
            finished=finished,
            requests=requests,
            priority=priority,
            start=status.get("startTime") or metadata.get("creationTimestamp"),
            deleting=deleting,
            labels=labels if isinstance(labels, Mapping) else None,
            grace=_grace(obj),
            runtime_limit=limit,
            ends_at=ends_at,
            preempted=victim_of is not None or (previous is not None and previous.preempted and previous.uid == uid),
        )
        self.index.upsert_pod(obj, requests if read else None)  # the compile reads the same demand: once
        waiting = node is None and not deleting and not spec.get("schedulingGates")
        self.device_accounting.pod_counted(key, finished=finished, waiting=waiting)

    def _count_room(
        self,
        key: str,
        previous: RunningPod | None,
        node: str | None,
        status: Mapping[str, Any],
        requests: dict[str, int],
    ) -> None:
        """The pod's room in the snapshot: counted on the node it is bound to (no longer an assumption); given
        back when it finished or is not bound (unless Phalanx assumed it: then it binds); what an assumed pod
        asks kept current."""
        finished = status.get("phase") in FINISHED
        if node is not None and not finished:
            assumption = self.assumed.pop(key, None)
            if assumption is not None and assumption.node != node:
                self._freed.add(assumption.node)  # bound elsewhere than assumed (by someone else)
            self.snapshot.assume(key, node, requests)
            return
        if previous is not None and previous.node is not None and not previous.finished:  # counted until now
            if key not in self.assumed:
                self.snapshot.forget(key)
                self._freed.add(previous.node)
            if status.get("phase") == "Failed":
                self._departed(key, previous)
        if finished:
            self.forget(key)
        elif key in self.assumed and self.assumed[key].requests != requests:
            # What it asks changed while it binds (its claim got networked devices, which no node offers any
            # more): its node holds what it asks now, or the binder would find the node crowded.
            updated = replace(self.assumed[key], requests=requests)
            self.assumed[key] = updated
            self.snapshot.assume(key, updated.node, requests)

    def _mark_victim(self, key: str, victim_of: str | None) -> None:
        """A running pod Phalanx began to evict (its ``DisruptionTarget`` condition says by whom): kept, so
        that a new leader finishes the eviction. Another scheduler's preemption is its own to finish."""
        if victim_of is not None and victim_of.startswith(self._victim_prefixes):
            self.marked_victims[key] = victim_of
        else:
            self.marked_victims.pop(key, None)

    def _unfinished(self, pod: str) -> bool:
        known = self._pods.get(pod)
        return pod in self.assumed or (known is not None and not known.finished)

    def reach(self, terms: tuple[NodeSelectorTerm, ...]) -> list[str]:
        """The nodes that reach a networked device: all of them (``allNodes``), or those its node selector's
        terms select (one vectorized pass over the nodes)."""
        names = self.snapshot.names
        if not terms:
            return list(names)
        selected = affinity_mask(self.snapshot, NodeConstraints(affinity=terms))
        return [names[row] for row in np.flatnonzero(selected)]

    def reaches(self, terms: tuple[NodeSelectorTerm, ...], node: str) -> bool:
        """Whether ``node`` reaches a networked device whose node selector has these terms."""
        row = self.snapshot.index_of(node)
        if not terms or row is None:
            return row is not None
        return bool(affinity_mask(self.snapshot, NodeConstraints(affinity=terms))[row])

    def own_allocatable(self, node: str) -> Mapping[str, int]:
        """What the node itself says it has (devices DRA drivers publish not counted in)."""
        base = self._base_nodes.get(node)
        return base.allocatable if base is not None else {}

    def _departed(self, key: str, previous: RunningPod) -> None:
        gang = self.index.gang_of(key)
        if previous.preempted or previous.node is None or gang is None:
            return
        now = self.clock.monotonic()
        grace = self.settings.permit.replacement_grace_seconds
        # Taken by the leader's loop; a follower's list keeps only what could still be replaced.
        self._departures = [d for d in self._departures if now - d.at < grace]
        self._departures.append(Departure(key, previous.node, tuple(sorted(previous.requests.items())), gang, now))

    def take_departures(self) -> list[Departure]:
        """Gang members that failed or were deleted while running (not preempted), since the last call and
        within the replacement grace period."""
        now, grace = self.clock.monotonic(), self.settings.permit.replacement_grace_seconds
        departures, self._departures = [d for d in self._departures if now - d.at < grace], []
        return departures

    def _learn_deleted(self, pod: str) -> None:
        """A pod was deleted: if it was running, it ended now (its room comes back), unless Phalanx preempted
        it (it did not end by itself)."""
        record = self._pods.get(pod)
        if record is None or record.node is None or record.finished or record.preempted:
            return
        started = timestamp(record.start)
        if started is not None:
            self.runtimes.ended(self.runtime_kind(pod), started, self.clock.wall() - started)

    def _learn_finished(self, previous: RunningPod | None, status: Mapping[str, Any], kind: int) -> None:
        """A pod of ``kind`` finished: learn how long it ran, if that can be told. A pod seen only once it had
        finished (a new leader's list) counts if its status says when its containers finished; one Phalanx
        preempted does not count."""
        if previous is not None and previous.preempted:
            return
        started = timestamp(status.get("startTime"))
        finished = _finished_at(status)
        if finished is None and previous is not None and previous.node is not None:  # watched running till now
            finished = self.clock.wall()
        if started is not None and finished is not None:
            self.runtimes.ended(kind, started, finished - started)

    def runtime_kind(self, pod: str) -> int:
        """What the pod's runtime is learned and guessed as (``Runtimes.kind``); -1 for a pod not known."""
        record = self._pods.get(pod)
        if record is None:
            return -1
        return self.runtimes.kind(pod.partition("/")[0], record.priority, record.requests)

    def started(self, pod: str) -> float | None:
        """When a bound pod started (``status.startTime``, else its creation: the kubelet writes the start
        moments after the bind), in wall seconds, if known."""
        record = self._pods.get(pod)
        return timestamp(record.start) if record is not None and record.node is not None else None

    def _requests_again(self, key: str, obj: Mapping[str, Any]) -> tuple[dict[str, int], bool] | None:
        """What a gang member asks, as read from its last event, when its spec is the one it had but perhaps
        for ``nodeName`` (a bind's event): most of a member's events. Not while device classes serve extended
        resources, whose reading registers what nodes offer."""
        known = self.index.pod(key)
        if known is None or known.demand is None or self.devices.served():
            return None
        before, spec = known.raw.get("spec"), obj.get("spec")
        if not isinstance(before, dict) or not isinstance(spec, dict):
            return None
        if before == spec or ("nodeName" in spec and {**before, "nodeName": spec["nodeName"]} == spec):
            return known.demand, True  # type: ignore[return-value]  # the interned dict the state handed over
        return None

    def _requests(self, obj: Mapping[str, Any]) -> tuple[dict[str, int], bool]:
        """The pod's effective request, one shared dict per distinct request (most pods repeat a few), and
        whether it was read as the gang index reads it (False: its spec is wrong; it still takes a slot)."""
        try:
            requests, read = pod_demand(obj, self.kinds), True
        except SpecError:
            requests, read = {"pods": 1}, False  # the API rejects such pods; if one exists anyway it takes a slot
        key = tuple(sorted(requests.items()))
        return self._interned.setdefault(key, requests), read

    def _drop_pod(self, key: str) -> None:
        self.running.remove(key)
        self.nominated.pop(key, None)
        self.marked_victims.pop(key, None)
        previous = self._pods.pop(key, None)
        assumption = self.assumed.pop(key, None)
        if previous is not None and previous.node is not None and not previous.finished:
            self._freed.add(previous.node)
            if assumption is None:
                self._departed(key, previous)
        if assumption is not None:
            self._freed.add(assumption.node)
        self.snapshot.forget(key)

    def _apply_node(self, change: Change) -> None:
        _, name = _key(change.object)
        if change.type == "DELETED":
            self.unreadable_nodes.pop(name, None)
            self._base_nodes.pop(name, None)
            if self.snapshot.node(name) is not None:
                self.snapshot.remove_node(name)
                self._nodes_changed = True
            return
        try:
            record = node_record(change.object)
        except SpecError as error:
            if self.unreadable_nodes.get(name) != str(error):
                log.warning("node skipped: it cannot be read", node=name, problem=str(error))
            self.unreadable_nodes[name] = str(error)
            if self.snapshot.node(name) is not None:
                self.snapshot.remove_node(name)
                self._nodes_changed = True
            return
        self.unreadable_nodes.pop(name, None)
        self._base_nodes[name] = record
        record = self._offered(record)
        old = self.snapshot.node(name)
        if old == record:
            return
        self.snapshot.set_node(record)
        if old is None or old.static_key() != record.static_key():
            self._nodes_changed = True
        elif any(record.allocatable.get(r, 0) > amount for r, amount in old.allocatable.items()) or (
            set(record.allocatable) - set(old.allocatable)
        ):
            self._freed.add(name)

    def _apply_device_object(self, resource: ApiResource, change: Change) -> None:
        """A DRA object changed: what pods claim and what nodes offer are read again (at the next
        :meth:`take_signals` for what nodes offer)."""
        self.devices.apply(resource, change.type, change.object)
        namespace, name = _key(change.object)
        if resource.kind == "ResourceClaim":
            self.device_accounting.claim_changed(f"{namespace}/{name}")
        elif resource.kind == "DeviceClass":
            self.index.touch(self.device_accounting.claiming())
            served = {name: device_class.name for name, device_class in self.devices.served().items()}
            changed = {name for name in served.keys() | self._served if served.get(name) != self._served.get(name)}
            self._served = served
            if changed:
                # An extended resource a class serves now, or another class (KEP-5004): pending pods that ask it
                # are read again, so that nodes offer it (one pass over the gangs' pods; classes rarely change).
                for info in list(self.index.pods()):
                    if info.node is None and asks_any(info.raw, changed):
                        self._apply_pod(Change("MODIFIED", info.raw))

    def _offered(self, record: NodeRecord) -> NodeRecord:
        """The node with the devices it offers added to its allocatable, and the attributes its devices agree
        on to its labels (its own labels win)."""
        supply = self._device_supply.get(record.name)
        attributes = self._device_attributes.get(record.name)
        if supply:
            # An extended resource a class serves (KEP-5004) is served by devices only where the node has none
            # of its own (a device plugin's), as kube-scheduler decides per node.
            offered = {name: count for name, count in supply.items() if record.allocatable.get(name, 0) == 0}
            record = replace(record, allocatable={**record.allocatable, **offered})
        if attributes:
            record = replace(record, labels={**attributes, **record.labels})
        return record

    def refresh_devices(self) -> None:
        """Put what each node offers of every requested device into its record; room that grew is freed room,
        and a change of what its devices agree on is a change of labels."""
        if not self.devices.dirty and not (self._nodes_changed and self.devices.networked_pools):
            return  # (the nodes that reach a networked device may change with the nodes)
        self.devices.dirty = False
        before_supply, before_attributes, most_before = self._device_supply, self._device_attributes, self.devices.most
        self._device_supply = self.devices.supply(self.reach)
        self._device_attributes = self.devices.node_attributes()
        for name in (
            set(self._device_supply) | set(before_supply) | set(self._device_attributes) | set(before_attributes)
        ):
            base = self._base_nodes.get(name)
            old, new = before_supply.get(name, {}), self._device_supply.get(name, {})
            relabelled = before_attributes.get(name) != self._device_attributes.get(name)
            if base is None or (old == new and not relabelled):
                continue
            self.snapshot.set_node(self._offered(base))
            self._nodes_changed = self._nodes_changed or relabelled
            if any(count > old.get(column, 0) for column, count in new.items()):
                self._freed.add(name)
        self.device_accounting.recount(self._base_nodes)
        if self.devices.most != most_before:  # which alternative of firstAvailable a pending pod asks
            accounting, demand = self.device_accounting, self.device_demand
            self.read_again([pod for pod in accounting.claiming() if demand.chooses(accounting.last_seen(pod) or {})])

    def device_note(self, columns: Iterable[str]) -> str:
        """Why devices the gang's requests select cannot serve them (``DeviceAccounting.note``)."""
        return self.device_accounting.note(list(columns))

    def _apply_group(self, resource: ApiResource, change: Change) -> None:
        obj = change.object if change.type == "DELETED" else self._strings.share(change.object)
        if "apiVersion" not in obj or "kind" not in obj:
            obj = {**obj, "apiVersion": resource.api_version, "kind": resource.kind}
        known = self._groups.setdefault(resource, set())
        if (resource.group, resource.kind) == (UPSTREAM_GROUP, "PodGroup"):
            self.devices.apply_group(change.type, obj)
        if change.type == "DELETED":
            known.discard(_key(obj))
            self.index.delete_group(obj)
        else:
            known.add(_key(obj))
            self.index.upsert_group(obj)

    def take_signals(self) -> tuple[set[str], bool]:
        """Nodes where capacity was freed, and whether the node set or node labels changed, since the
        last call (what may wake gangs that failed for lack of room)."""
        self.refresh_devices()
        freed, changed = self._freed, self._nodes_changed
        self._freed, self._nodes_changed = set(), False
        return freed, changed

    # -- scheduling side --------------------------------------------------------------------------

    def pod(self, pod: str) -> RunningPod | None:
        """What is known of any pod (read-only)."""
        return self._pods.get(pod)

    def uid(self, pod: str) -> str | None:
        record = self._pods.get(pod)
        return record.uid if record is not None else None

    def bound_node(self, pod: str) -> str | None:
        """The node the watch says the pod runs on (None while pending, or once finished)."""
        record = self._pods.get(pod)
        return None if record is None or record.finished else record.node

    def placed_node(self, pod: str) -> str | None:
        """Where the pod is: bound, or assumed there by us."""
        bound = self.bound_node(pod)
        if bound is not None:
            return bound
        assumption = self.assumed.get(pod)
        return assumption.node if assumption is not None else None

    def exists(self, pod: str) -> bool:
        return pod in self._pods

    def unplaced(self, request: GangRequest) -> list[Member]:
        """The members of ``request`` neither bound nor assumed."""
        return [member for member in request.members() if self.placed_node(member.key) is None]

    def meets_minimum(self, part: GangRequest) -> bool:
        """Whether the members already bound or assumed satisfy every minimum of ``part``."""
        placed = {member.key for member in part.members() if self.placed_node(member.key) is not None}
        return part.satisfied_by(placed)

    def assume(self, gang: GangKey, assignments: Iterable[Assignment]) -> None:
        """Assume each assignment: its capacity is taken at once for every later placement."""
        for assignment in assignments:
            requests = dict(assignment.shape.requests)
            self.assumed[assignment.pod] = Assumption(assignment.node, requests, gang, assignment.shape)
            self.snapshot.assume(assignment.pod, assignment.node, requests)

    def assume_room(self, gang: GangKey, key: str, node: str, shape: PodShape, requests: dict[str, int]) -> None:
        """Assume room that no pod owns yet (a gang's placeholders on one node, whatever their count)."""
        self.assumed[key] = Assumption(node, requests, gang, shape)
        self.snapshot.assume(key, node, requests)

    def forget(self, pod: str) -> None:
        """Release what was assumed for a pod or placeholder (idempotent). A pod the watch already shows
        bound keeps counting: it is bound, whatever happened to our assumption."""
        assumption = self.assumed.pop(pod, None)
        if assumption is None:
            return
        for claim in self.device_accounting.claims_of(pod):
            self.device_accounting.count_on_its_own(claim)  # what it carried for a shared claim is the claim's again
        record = self._pods.get(pod)
        if record is not None and record.node == assumption.node and not record.finished:
            return
        self.snapshot.forget(pod)
        self._freed.add(assumption.node)

    def forget_gang(self, gang: GangKey) -> None:
        """Forget what a gang assumed that is not being bound (a placement, or the room it held, given up)."""
        for pod, assumption in list(self.assumed.items()):
            if assumption.gang == gang and assumption.deadline is None:
                self.forget(pod)

    def binding_done(self, pod: str) -> None:
        """The bind call succeeded: the assumption now waits for the watch, but not forever."""
        assumption = self.assumed.get(pod)
        if assumption is not None:
            assumption.deadline = self.clock.monotonic() + self.settings.binding.assume_timeout_seconds
            heapq.heappush(self._expiries, (assumption.deadline, pod))

    def _is_current(self, entry: tuple[float, str]) -> bool:
        assumption = self.assumed.get(entry[1])
        return assumption is not None and assumption.deadline == entry[0]

    def next_expiry(self) -> float | None:
        """When the earliest unconfirmed bind's assumption runs out, if any is waiting for the watch."""
        while self._expiries and not self._is_current(self._expiries[0]):
            heapq.heappop(self._expiries)
        return self._expiries[0][0] if self._expiries else None

    def expire(self) -> list[str]:
        """Forget assumptions whose bind the watch never confirmed in time; returns the pods.

        A heap keeps this proportional to what expires, not to the thousands of binds in flight."""
        now = self.clock.monotonic()
        late = []
        while self._expiries and self._expiries[0][0] <= now:
            entry = heapq.heappop(self._expiries)
            if self._is_current(entry):
                late.append(entry[1])
        for pod in late:
            log.warning(
                "assumed pod was never confirmed bound; releasing its capacity", pod=pod, node=self.assumed[pod].node
            )
            self.forget(pod)
        return late

    def forget_assumptions(self) -> None:
        """Drop every assumption (on losing leadership: another replica schedules now)."""
        for pod in list(self.assumed):
            self.forget(pod)

    def claims_of(self, pod: str) -> tuple[str, ...]:
        """The ResourceClaims (namespace/name) the pod names, as far as they are made."""
        return self.device_accounting.claims_of(pod)

    def read_again(self, pods: Sequence[str]) -> None:
        """Read pods that claim devices again from their last event (what they ask changed with the devices)."""
        self.index.touch(list(pods))
        for pod in pods:
            obj = self.device_accounting.last_seen(pod)
            if obj is not None:
                self._apply_pod(Change("MODIFIED", obj))

    def overcommitted(self, nodes: Iterable[str], resources: Iterable[str] | None = None) -> list[str]:
        """Nodes among ``nodes`` whose bound and assumed requests exceed allocatable for some resource (of
        ``resources`` only, when given: a pod short of nothing it asks for has taken nobody's room)."""
        snapshot = self.snapshot
        names = list(nodes)
        rows = [snapshot.index_of(name) for name in names]
        found = [name for name, row in zip(names, rows, strict=True) if row is None]
        known = [(name, row) for name, row in zip(names, rows, strict=True) if row is not None]
        if not known:
            return found
        if len(known) == 1:  # before every bind: one row, read without building index arrays
            short = snapshot.free[known[0][1]] < 0
            if not short.any():
                return found
            short = short[None, :]
        else:
            short = snapshot.free[np.array([row for _, row in known])] < 0
        if resources is not None:
            asked = set(resources)
            short = short[:, [i for i, name in enumerate(snapshot.resources) if name in asked]]
        return found + [name for (name, _), over in zip(known, short.any(axis=1), strict=True) if over]


def _victim_message(status: Mapping[str, Any]) -> str | None:
    """The message of a scheduler's preemption condition on the pod (kube-scheduler's convention: it starts
    with the scheduler's name), or None."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == DISRUPTION_TARGET
            and condition.get("status") == "True"
            and condition.get("reason") == PREEMPTION_BY_SCHEDULER
        ):
            message = condition.get("message")
            return message if isinstance(message, str) else ""
    return None


def _finished_at(status: Mapping[str, Any]) -> float | None:
    """When a finished pod's last container finished (``containerStatuses[].state.terminated.finishedAt``)."""
    latest = None
    for container in status.get("containerStatuses") or ():
        terminated = ((container or {}).get("state") or {}).get("terminated") or {}
        finished = timestamp(terminated.get("finishedAt"))
        if finished is not None and (latest is None or finished > latest):
            latest = finished
    return latest


def _grace(pod: Mapping[str, Any]) -> float:
    """A pod's grace period: the one its deletion set, else its spec's, else Kubernetes' default 30 s."""
    for value in ((pod.get("metadata") or {}).get("deletionGracePeriodSeconds"),
                  (pod.get("spec") or {}).get("terminationGracePeriodSeconds")):  # fmt: skip
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return 30.0


def _lifetime(
    spec: Mapping[str, Any], status: Mapping[str, Any], metadata: Mapping[str, Any]
) -> tuple[float | None, float | None]:
    """A pod's ``runtime_limit`` and ``ends_at`` (see :class:`RunningPod`), timestamps parsed only when the
    pod has a deadline or is being deleted."""
    raw = spec.get("activeDeadlineSeconds")
    limit = float(raw) if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None
    deleting = metadata.get("deletionTimestamp")
    if deleting is not None:
        return limit, timestamp(deleting)
    if limit is None:
        return None, None
    started = timestamp(status.get("startTime"))
    return limit, None if started is None else started + limit


def _same_api(resource: ApiResource, other: ApiResource) -> bool:
    return (resource.group, resource.plural) == (other.group, other.plural)


class _DeviceLedger:
    """ClusterState as device accounting counts in it: the snapshot's used room, the pods it knows."""

    __slots__ = ("_state",)

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def count(self, key: str, node: str, columns: Mapping[str, int]) -> None:
        self._state.snapshot.assume(key, node, dict(columns))

    def uncount(self, key: str, node: str) -> None:
        self._state.snapshot.forget(key)
        self._state._freed.add(node)

    def uid(self, pod: str) -> str | None:
        known = self._state._pods.get(pod)
        return known.uid if known is not None else None

    def unfinished(self, pod: str) -> bool:
        return self._state._unfinished(pod)

    def carries(self, pod: str) -> Collection[str] | None:
        assumption = self._state.assumed.get(pod)
        return assumption.requests.keys() if assumption is not None else None

    def read_again(self, pods: Sequence[str]) -> None:
        self._state.read_again(pods)
