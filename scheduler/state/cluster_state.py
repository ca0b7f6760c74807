"""ClusterState: the single source of truth inside the process (docs/architecture.md), made of parts
with one job each: an applier per kind of object the API shows (``pod_applier``, ``node_applier``,
``group_applier``, ``device_applier``), what Phalanx assumed (``assumptions``), and the indexes built from
them (the snapshot's arrays, the gang index, running pods by priority). What the cycle, the binder and the
stages read of it is ``view.ClusterView``.

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
- an assumption with no deadline never expires: its binding is still in flight or in permit;
- an assumption whose bind request is out (``sending`` until ``sent``) is not given up with its gang before
  the answer: the server may bind it yet.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.budgets import Budgets
from scheduler.clock import Clock
from scheduler.devices.accounting import DeviceAccounting
from scheduler.devices.demand import DeviceDemand
from scheduler.devices.inventory import Devices
from scheduler.gangs import GangIndex, GangKey
from scheduler.gangs.fields import timestamp
from scheduler.ports.port import DISRUPTION_BUDGETS, DRA_GROUP, NODES, PODS, ApiResource, Change
from scheduler.runtimes import Runtimes
from scheduler.settings import Settings
from scheduler.state.assumptions import Assumptions
from scheduler.state.changes import Changes
from scheduler.state.device_applier import DeviceApplier
from scheduler.state.group_applier import GroupApplier
from scheduler.state.node_applier import NodeApplier
from scheduler.state.pod_applier import PodApplier
from scheduler.state.records import Assumption, Departure, RunningPod, key_of
from scheduler.strings import SharedStrings
from topology import Assignment, GangRequest, Member, PodShape, ResourceKind, Snapshot, Topology
from topology.kinds import Claims, replacing
from topology.request import NodeSelectorTerm
from topology.running import RunningPods


class ClusterState:
    """Nodes, pods, group objects and assumptions (see the module docstring for the pod states)."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.snapshot = Snapshot(topology=Topology(levels=settings.levels))
        #: Dynamic Resource Allocation: device classes, the devices drivers publish, and claims. Pods are read
        #: with the devices they claim as one more kind of resource (``devices/demand.py``).
        self.devices = Devices()
        self.device_demand = DeviceDemand(self.devices)
        self.kinds: tuple[ResourceKind, ...] = replacing(Claims, self.device_demand)
        self.index = GangIndex(settings.gang_settings(), self.kinds)
        #: What no pod counts of the devices (claims counted on their own, partitions and shares others
        #: keep), counted in the snapshot through this state (``devices/accounting.py``).
        self.device_accounting = DeviceAccounting(self.devices, _DeviceLedger(self))
        #: How long pods run, learned from those that ended (``runtimes.py``): when a domain may empty.
        self.runtimes = Runtimes(settings.starvation.runtime_history)
        self.budgets = Budgets()
        self._changes = Changes()
        strings = SharedStrings()  # the objects kept share one copy of each string they repeat
        records: dict[str, RunningPod] = {}
        self.assumptions = Assumptions(
            snapshot=self.snapshot,
            clock=clock,
            timeout_seconds=settings.binding.assume_timeout_seconds,
            pods=records,
            accounting=self.device_accounting,
            changes=self._changes,
        )
        self.device_objects = DeviceApplier(
            devices=self.devices,
            demand=self.device_demand,
            accounting=self.device_accounting,
            index=self.index,
            snapshot=self.snapshot,
            changes=self._changes,
        )
        self.nodes = NodeApplier(snapshot=self.snapshot, offers=self.device_objects, changes=self._changes)
        self.pods = PodApplier(
            records=records,
            snapshot=self.snapshot,
            index=self.index,
            assumptions=self.assumptions,
            accounting=self.device_accounting,
            devices=self.devices,
            kinds=self.kinds,
            runtimes=self.runtimes,
            strings=strings,
            changes=self._changes,
            clock=clock,
            replacement_grace_seconds=settings.permit.replacement_grace_seconds,
            scheduler_names=settings.scheduler_names,
        )
        self.groups = GroupApplier(index=self.index, devices=self.devices, strings=strings)

    # What the parts keep that the stages read, under the names they have always read.

    @property
    def assumed(self) -> dict[str, Assumption]:
        return self.assumptions.by_pod

    @property
    def running(self) -> RunningPods:
        return self.pods.running

    @property
    def nominated(self) -> dict[str, tuple[str, dict[str, int], int]]:
        return self.pods.nominated

    @property
    def marked_victims(self) -> dict[str, str]:
        return self.pods.marked_victims

    @property
    def unreadable_nodes(self) -> dict[str, str]:
        return self.nodes.unreadable

    # -- informer side ----------------------------------------------------------------------------

    def apply(self, resource: ApiResource, change: Change) -> None:
        """Apply one watch event (ADDED, MODIFIED or DELETED) of any watched resource."""
        if change.type == "BOOKMARK":
            return
        if resource == PODS:
            self.pods.apply(change)
        elif resource == NODES:
            self.nodes.apply(change)
        elif _same_api(resource, DISRUPTION_BUDGETS):
            self.budgets.apply(change)
        elif resource.group == DRA_GROUP:
            for pod in self.device_objects.apply(resource, change):
                self.pods.apply(Change("MODIFIED", pod))
        else:
            self.groups.apply(resource, change)

    def apply_listed(self, resource: ApiResource, items: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
        """Apply one page of a list; returns the (namespace, name) of what it held."""
        listed = set()
        for item in items:
            listed.add(key_of(item))
            self.apply(resource, Change("ADDED", item))
        return listed

    def prune(self, resource: ApiResource, listed: set[tuple[str, str]]) -> None:
        """After the last page of a list: delete what is known but was not listed."""
        if resource == PODS:
            known = self.pods.known()
        elif resource == NODES:
            known = self.nodes.known()
        elif _same_api(resource, DISRUPTION_BUDGETS):
            known = self.budgets.known()
        elif resource.group == DRA_GROUP:
            self.devices.relisted(resource)
            known = self.devices.known(resource)
        else:
            known = self.groups.known(resource)
        for namespace, name in known - listed:
            stub = {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": {"namespace": namespace, "name": name},
            }
            self.apply(resource, Change("DELETED", stub))

    def refresh_devices(self) -> None:
        """Put what each node offers of every requested device into its record (``DeviceApplier.refresh``)."""
        self.read_again(self.device_objects.refresh(self.nodes.base))

    def read_again(self, pods: Sequence[str]) -> None:
        """Read pods that claim devices again from their last event (what they ask changed with the devices)."""
        if not pods:
            return
        self.index.touch(list(pods))
        for pod in pods:
            obj = self.device_accounting.last_seen(pod)
            if obj is not None:
                self.pods.apply(Change("MODIFIED", obj))

    def take_signals(self) -> tuple[set[str], bool]:
        """Nodes where capacity was freed, and whether the node set or node labels changed, since the
        last call (what may wake gangs that failed for lack of room)."""
        self.refresh_devices()
        return self._changes.take()

    def take_departures(self) -> list[Departure]:
        """Gang members that failed or were deleted while running (``PodApplier.take_departures``)."""
        return self.pods.take_departures()

    # -- what the API says, read ------------------------------------------------------------------

    def pod(self, pod: str) -> RunningPod | None:
        """What is known of any pod (read-only)."""
        return self.pods.records.get(pod)

    def uid(self, pod: str) -> str | None:
        record = self.pods.records.get(pod)
        return record.uid if record is not None else None

    def exists(self, pod: str) -> bool:
        return pod in self.pods.records

    def bound_node(self, pod: str) -> str | None:
        """The node the watch says the pod runs on (None while pending, or once finished)."""
        record = self.pods.records.get(pod)
        return None if record is None or record.finished else record.node

    def runtime_kind(self, pod: str) -> int:
        """What the pod's runtime is learned and guessed as (``Runtimes.kind``); -1 for a pod not known."""
        return self.pods.runtime_kind(pod)

    def started(self, pod: str) -> float | None:
        """When a bound pod started (``status.startTime``, else its creation: the kubelet writes the start
        moments after the bind), in wall seconds, if known."""
        record = self.pods.records.get(pod)
        return timestamp(record.start) if record is not None and record.node is not None else None

    def own_allocatable(self, node: str) -> Mapping[str, int]:
        """What the node itself says it has (devices DRA drivers publish not counted in)."""
        base = self.nodes.base.get(node)
        return base.allocatable if base is not None else {}

    def reach(self, terms: tuple[NodeSelectorTerm, ...]) -> list[str]:
        """The nodes that reach a networked device (``DeviceApplier.reach``)."""
        return self.device_objects.reach(terms)

    def reaches(self, terms: tuple[NodeSelectorTerm, ...], node: str) -> bool:
        """Whether ``node`` reaches a networked device whose node selector has these terms."""
        return self.device_objects.reaches(terms, node)

    def device_note(self, columns: Iterable[str]) -> str:
        """Why devices the gang's requests select cannot serve them (``DeviceAccounting.note``)."""
        return self.device_objects.note(columns)

    def claims_of(self, pod: str) -> tuple[str, ...]:
        """The ResourceClaims (namespace/name) the pod names, as far as they are made."""
        return self.device_accounting.claims_of(pod)

    # -- what Phalanx assumed ---------------------------------------------------------------------

    def placed_node(self, pod: str) -> str | None:
        """Where the pod is: bound, or assumed there by us."""
        bound = self.bound_node(pod)
        if bound is not None:
            return bound
        assumption = self.assumptions.by_pod.get(pod)
        return assumption.node if assumption is not None else None

    def unplaced(self, request: GangRequest) -> list[Member]:
        """The members of ``request`` neither bound nor assumed."""
        return [member for member in request.members() if self.placed_node(member.key) is None]

    def meets_minimum(self, part: GangRequest) -> bool:
        """Whether the members already bound or assumed satisfy every minimum of ``part``."""
        placed = {member.key for member in part.members() if self.placed_node(member.key) is not None}
        return part.satisfied_by(placed)

    def assume(self, gang: GangKey, assignments: Iterable[Assignment]) -> None:
        """Assume each assignment: its capacity is taken at once for every later placement."""
        self.assumptions.assume(gang, assignments)

    def assume_room(self, gang: GangKey, key: str, node: str, shape: PodShape, requests: dict[str, int]) -> None:
        """Assume room that no pod owns yet (a gang's placeholders on one node, whatever their count)."""
        self.assumptions.assume_room(gang, key, node, shape, requests)

    def forget(self, pod: str) -> None:
        """Give back what was assumed for a pod or placeholder (``Assumptions.forget``)."""
        self.assumptions.forget(pod)

    def forget_gang(self, gang: GangKey) -> None:
        """Forget what a gang assumed that is not being bound (a placement, or the room it kept, given up)."""
        self.assumptions.forget_gang(gang)

    def forget_assumptions(self) -> None:
        """Drop every assumption (on losing leadership: another replica schedules now)."""
        self.assumptions.forget_all()

    def binding_done(self, pod: str) -> None:
        """The bind call succeeded: the assumption now waits for the watch, but not forever."""
        self.assumptions.binding_done(pod)

    def sending(self, pods: Iterable[str]) -> None:
        """Their bind requests are being sent: their room stays theirs until answered (``Assumptions.sent``)."""
        self.assumptions.sending(pods)

    def sent(self, pods: Iterable[str]) -> None:
        """Their bind requests were answered (``Assumptions.sent``)."""
        self.assumptions.sent(pods)

    def next_expiry(self) -> float | None:
        """When the earliest unconfirmed bind's assumption runs out, if any is waiting for the watch."""
        return self.assumptions.next_expiry()

    def expire(self) -> list[str]:
        """Forget assumptions whose bind the watch never confirmed in time; returns the pods."""
        return self.assumptions.expire()

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
        self._state._changes.freed.add(node)

    def uid(self, pod: str) -> str | None:
        return self._state.uid(pod)

    def unfinished(self, pod: str) -> bool:
        return self._state.pods.unfinished(pod)

    def carries(self, pod: str) -> Collection[str] | None:
        assumption = self._state.assumed.get(pod)
        return assumption.requests.keys() if assumption is not None else None

    def read_again(self, pods: Sequence[str]) -> None:
        self._state.read_again(pods)
