"""DRA's objects applied: device classes, ResourceSlices and claims, read as what pods claim and what nodes
offer (``devices/`` reads them; this puts what they say into the snapshot)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from scheduler.devices.accounting import DeviceAccounting
from scheduler.devices.demand import DeviceDemand
from scheduler.devices.extended import asks_any
from scheduler.devices.inventory import Devices
from scheduler.gangs import GangIndex
from scheduler.ports.port import ApiResource, Change
from scheduler.state.changes import Changes
from scheduler.state.records import key_of
from topology import Snapshot
from topology.eligibility import affinity_mask
from topology.nodes import NodeRecord
from topology.request import NodeConstraints, NodeSelectorTerm


class DeviceApplier:
    def __init__(
        self,
        *,
        devices: Devices,
        demand: DeviceDemand,
        accounting: DeviceAccounting,
        index: GangIndex,
        snapshot: Snapshot,
        changes: Changes,
    ) -> None:
        self._devices = devices
        self._demand = demand
        self._accounting = accounting
        self._index = index
        self._snapshot = snapshot
        self._changes = changes
        self._supply: dict[str, dict[str, int]] = {}  # node -> devices offered, by column
        self._attributes: dict[str, dict[str, str]] = {}  # node -> attributes its devices agree on
        #: Which class served each extended resource name when classes last changed (KEP-5004).
        self._served: dict[str, str] = {}

    def apply(self, resource: ApiResource, change: Change) -> list[Mapping[str, Any]]:
        """A DRA object changed: what pods claim is read again (what nodes offer, at the next :meth:`refresh`).
        Returns the pending pods to read again, when which class serves an extended resource changed."""
        self._devices.apply(resource, change.type, change.object)
        namespace, name = key_of(change.object)
        if resource.kind == "ResourceClaim":
            self._accounting.claim_changed(f"{namespace}/{name}")
        elif resource.kind == "DeviceClass":
            self._index.touch(self._accounting.claiming())
            served = {name: device_class.name for name, device_class in self._devices.served().items()}
            changed = {name for name in served.keys() | self._served if served.get(name) != self._served.get(name)}
            self._served = served
            if changed:
                # An extended resource a class serves now, or another class (KEP-5004): pending pods that ask it
                # are read again, so that nodes offer it (one pass over the gangs' pods; classes rarely change).
                return [info.raw for info in self._index.pods() if info.node is None and asks_any(info.raw, changed)]
        return []

    def offered(self, record: NodeRecord) -> NodeRecord:
        """The node with the devices it offers added to its allocatable, and the attributes its devices agree
        on to its labels (its own labels win)."""
        supply = self._supply.get(record.name)
        attributes = self._attributes.get(record.name)
        if supply:
            # An extended resource a class serves (KEP-5004) is served by devices only where the node has none
            # of its own (a device plugin's), as kube-scheduler decides per node.
            offered = {name: count for name, count in supply.items() if record.allocatable.get(name, 0) == 0}
            record = replace(record, allocatable={**record.allocatable, **offered})
        if attributes:
            record = replace(record, labels={**attributes, **record.labels})
        return record

    def refresh(self, base_nodes: Mapping[str, NodeRecord]) -> list[str]:
        """Put what each node offers of every requested device into its record (``base_nodes``: each node as
        its own object says); room that grew is freed room, and a change of what its devices agree on is a
        change of labels. Returns the pods that claim devices to read again (which alternative of
        ``firstAvailable`` they ask changed)."""
        devices, changes = self._devices, self._changes
        if not devices.dirty and not (changes.nodes_changed and devices.networked_pools):
            return []  # (the nodes that reach a networked device may change with the nodes)
        devices.dirty = False
        before_supply, before_attributes, most_before = self._supply, self._attributes, devices.most
        self._supply = devices.supply(self.reach)
        self._attributes = devices.node_attributes()
        for name in set(self._supply) | set(before_supply) | set(self._attributes) | set(before_attributes):
            base = base_nodes.get(name)
            old, new = before_supply.get(name, {}), self._supply.get(name, {})
            relabelled = before_attributes.get(name) != self._attributes.get(name)
            if base is None or (old == new and not relabelled):
                continue
            self._snapshot.set_node(self.offered(base))
            changes.nodes_changed = changes.nodes_changed or relabelled
            if any(count > old.get(column, 0) for column, count in new.items()):
                changes.freed.add(name)
        self._accounting.recount(base_nodes)
        if devices.most == most_before:
            return []
        accounting, demand = self._accounting, self._demand
        return [pod for pod in accounting.claiming() if demand.chooses(accounting.last_seen(pod) or {})]

    def reach(self, terms: tuple[NodeSelectorTerm, ...]) -> list[str]:
        """The nodes that reach a networked device: all of them (``allNodes``), or those its node selector's
        terms select (one vectorized pass over the nodes)."""
        names = self._snapshot.names
        if not terms:
            return list(names)
        selected = affinity_mask(self._snapshot, NodeConstraints(affinity=terms))
        return [names[row] for row in np.flatnonzero(selected)]

    def reaches(self, terms: tuple[NodeSelectorTerm, ...], node: str) -> bool:
        """Whether ``node`` reaches a networked device whose node selector has these terms."""
        row = self._snapshot.index_of(node)
        if not terms or row is None:
            return row is not None
        return bool(affinity_mask(self._snapshot, NodeConstraints(affinity=terms))[row])

    def note(self, columns: Iterable[str]) -> str:
        """Why devices the gang's requests select cannot serve them (``DeviceAccounting.note``)."""
        return self._accounting.note(list(columns))
