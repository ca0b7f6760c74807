"""Nodes applied: each node's record in the snapshot, with the devices it offers; nodes that cannot be read
kept aside with why."""

from __future__ import annotations

import structlog

from scheduler.ports.port import Change
from scheduler.state.changes import Changes
from scheduler.state.device_applier import DeviceApplier
from scheduler.state.records import key_of
from topology import Snapshot, SpecError, node_record
from topology.nodes import NodeRecord

log = structlog.get_logger("phalanx.state")


class NodeApplier:
    def __init__(self, *, snapshot: Snapshot, offers: DeviceApplier, changes: Changes) -> None:
        self._snapshot = snapshot
        self._offers = offers
        self._changes = changes
        #: Each node as its own object says (no devices).
        self.base: dict[str, NodeRecord] = {}
        #: Nodes left out of the snapshot because their object cannot be read: node -> why.
        self.unreadable: dict[str, str] = {}

    def apply(self, change: Change) -> None:
        _, name = key_of(change.object)
        if change.type == "DELETED":
            self.unreadable.pop(name, None)
            self.base.pop(name, None)
            self._remove(name)
            return
        try:
            record = node_record(change.object)
        except SpecError as error:
            if self.unreadable.get(name) != str(error):
                log.warning("node skipped: it cannot be read", node=name, problem=str(error))
            self.unreadable[name] = str(error)
            self._remove(name)
            return
        self.unreadable.pop(name, None)
        self.base[name] = record
        record = self._offers.offered(record)
        old = self._snapshot.node(name)
        if old == record:
            return  # a status heartbeat: nothing placement reads
        self._snapshot.set_node(record)
        if old is None or old.static_key() != record.static_key():
            self._changes.nodes_changed = True
        elif any(record.allocatable.get(r, 0) > amount for r, amount in old.allocatable.items()) or (
            set(record.allocatable) - set(old.allocatable)
        ):
            self._changes.freed.add(name)

    def known(self) -> set[tuple[str, str]]:
        """Every node the state knows, readable or not, as (namespace, name)."""
        return {("", name) for name in self._snapshot.names} | {("", name) for name in self.unreadable}

    def _remove(self, name: str) -> None:
        if self._snapshot.node(name) is not None:
            self._snapshot.remove_node(name)
            self._changes.nodes_changed = True
