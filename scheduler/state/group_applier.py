"""Group objects applied (PodGroups of every source, Workloads, CompositePodGroups): into the gang index,
and the upstream PodGroups' device claims into the device inventory."""

from __future__ import annotations

from scheduler.devices.inventory import Devices
from scheduler.gangs import GangIndex
from scheduler.gangs.pods import UPSTREAM_GROUP
from scheduler.ports.port import ApiResource, Change
from scheduler.state.records import key_of
from scheduler.strings import SharedStrings


class GroupApplier:
    def __init__(self, *, index: GangIndex, devices: Devices, strings: SharedStrings) -> None:
        self._index = index
        self._devices = devices
        self._strings = strings
        self._known: dict[ApiResource, set[tuple[str, str]]] = {}

    def apply(self, resource: ApiResource, change: Change) -> None:
        obj = change.object if change.type == "DELETED" else self._strings.share(change.object)
        if "apiVersion" not in obj or "kind" not in obj:
            obj = {**obj, "apiVersion": resource.api_version, "kind": resource.kind}
        known = self._known.setdefault(resource, set())
        if (resource.group, resource.kind) == (UPSTREAM_GROUP, "PodGroup"):
            self._devices.apply_group(change.type, obj)
        if change.type == "DELETED":
            known.discard(key_of(obj))
            self._index.delete_group(obj)
        else:
            known.add(key_of(obj))
            self._index.upsert_group(obj)

    def known(self, resource: ApiResource) -> set[tuple[str, str]]:
        """The objects of ``resource`` the state knows, as (namespace, name)."""
        return set(self._known.get(resource, set()))
