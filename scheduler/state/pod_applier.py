"""Pods applied: what each pod asks and where it runs, counted in the snapshot once; what preemption, the
reservations and the vacancies read of them (running pods by priority, nominations, victims marked,
departures); and how long pods ran, learned as they end (``runtimes.py``).

Costs: every pod event is O(resources) here plus the gang index's incremental work; a member's bind event
reads its demand from its last event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scheduler.clock import Clock
from scheduler.devices.accounting import DeviceAccounting
from scheduler.devices.inventory import Devices
from scheduler.gangs import GangIndex
from scheduler.gangs.fields import timestamp
from scheduler.ports.port import Change
from scheduler.runtimes import Runtimes
from scheduler.state.assumptions import Assumptions
from scheduler.state.changes import Changes
from scheduler.state.records import (
    FINISHED,
    Departure,
    RunningPod,
    finished_at,
    grace,
    key_of,
    lifetime,
    preempted_by,
)
from scheduler.strings import SharedStrings
from topology import ResourceKind, Snapshot, SpecError, pod_demand
from topology.running import RunningPods


class PodApplier:
    def __init__(
        self,
        *,
        records: dict[str, RunningPod],
        snapshot: Snapshot,
        index: GangIndex,
        assumptions: Assumptions,
        accounting: DeviceAccounting,
        devices: Devices,
        kinds: tuple[ResourceKind, ...],
        runtimes: Runtimes,
        strings: SharedStrings,
        changes: Changes,
        clock: Clock,
        replacement_grace_seconds: float,
        scheduler_names: tuple[str, ...],
    ) -> None:
        self._snapshot = snapshot
        self._index = index
        self._assumptions = assumptions
        self._accounting = accounting
        self._devices = devices
        self._kinds = kinds
        self._runtimes = runtimes
        self._strings = strings
        self._changes = changes
        self._clock = clock
        self._replacement_grace = replacement_grace_seconds
        self._victim_prefixes = tuple(f"{name}: " for name in scheduler_names)
        #: What is known of every pod, its own or another scheduler's (shared with the assumptions).
        self.records = records
        #: Pods bound and not finished, by priority (what preemption could free).
        self.running = RunningPods()
        #: Pending pods whose ``status.nominatedNodeName`` names a node: (node, requests, priority). The
        #: room is theirs against lower priorities until the API shows the nomination gone, whichever
        #: process (or an earlier leader) wrote it.
        self.nominated: dict[str, tuple[str, dict[str, int], int]] = {}
        #: Running pods that a preemption of ours marked as victims (their ``DisruptionTarget`` condition) and
        #: that the API does not show going yet: pod -> the condition's message (who preempted it, where).
        #: Kept from the watch, so that an eviction an earlier leader began is finished by the next one.
        self.marked_victims: dict[str, str] = {}
        self._interned: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        #: The spec last read and what it asks: the next pod's spec, of the same gang or Job, is mostly equal.
        self._last_read: tuple[object, tuple[dict[str, int], bool]] | None = None
        #: The pod read last, as shared: the next one's spec is mostly equal (``SharedStrings.share``).
        self._last_shared: dict[str, Any] | None = None
        self._departures: list[Departure] = []

    def apply(self, change: Change) -> None:
        namespace, name = key_of(change.object)
        key = f"{namespace}/{name}"
        if change.type == "DELETED":
            self._learn_deleted(key)
            self._drop(key)
            self._index.delete_pod(namespace, name)
            self._accounting.pod_gone(key)
            return
        known = self._index.pod(key)  # a member's bind event shares what did not change from its last event
        obj = self._strings.share(change.object, known.raw if known is not None else None, self._last_shared)
        self._last_shared = obj
        spec, status, metadata = obj.get("spec") or {}, obj.get("status") or {}, obj.get("metadata") or {}
        self._accounting.pod_seen(key, obj)
        node = spec.get("nodeName") or None
        finished = status.get("phase") in FINISHED
        previous = self.records.get(key)
        requests, read = self._requests_again(key, obj) or self._requests(obj)
        self._count_room(key, previous, node, status, requests)
        priority = spec.get("priority")
        priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
        deleting = metadata.get("deletionTimestamp") is not None
        limit, ends_at = lifetime(spec, status, metadata)
        if node is not None and not finished:
            kind = self._runtimes.kind(namespace, priority, requests)  # learned of pods that run, as they end
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
        victim_of = preempted_by(status)
        if finished and (previous is None or not previous.finished) and victim_of is None:
            self._learn_finished(previous, status, self._runtimes.kind(namespace, priority, requests))
        self._mark_victim(key, victim_of if node is not None and not finished and not deleting else None)
        labels = metadata.get("labels")
        uid = str(metadata.get("uid") or "")
        # Read before the index lets a terminating pod go from its gang (its first event with a deletionTimestamp).
        gang = None
        if deleting:
            gang = self._index.gang_of(key) or (previous.gang if previous is not None and previous.uid == uid else None)
        self.records[key] = RunningPod(
            uid=uid,
            node=node,
            finished=finished,
            requests=requests,
            priority=priority,
            start=status.get("startTime") or metadata.get("creationTimestamp"),
            deleting=deleting,
            labels=labels if isinstance(labels, Mapping) else None,
            grace=grace(obj),
            runtime_limit=limit,
            ends_at=ends_at,
            preempted=victim_of is not None or (previous is not None and previous.preempted and previous.uid == uid),
            gang=gang,
        )
        self._index.upsert_pod(obj, requests if read else None)  # the compile reads the same demand: once
        waiting = node is None and not deleting and not spec.get("schedulingGates")
        self._accounting.pod_counted(key, finished=finished, waiting=waiting)

    def known(self) -> set[tuple[str, str]]:
        """Every pod the state knows, as (namespace, name)."""
        return {tuple(key.split("/", 1)) for key in self.records}  # type: ignore[misc]

    def unfinished(self, pod: str) -> bool:
        known = self.records.get(pod)
        return pod in self._assumptions.by_pod or (known is not None and not known.finished)

    def take_departures(self) -> list[Departure]:
        """Gang members that failed or were deleted while running (not preempted), since the last call and
        within the replacement grace period."""
        now = self._clock.monotonic()
        departures, self._departures = [d for d in self._departures if now - d.at < self._replacement_grace], []
        return departures

    def runtime_kind(self, pod: str) -> int:
        """What the pod's runtime is learned and guessed as (``Runtimes.kind``); -1 for a pod not known."""
        record = self.records.get(pod)
        if record is None:
            return -1
        return self._runtimes.kind(pod.partition("/")[0], record.priority, record.requests)

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
        assumed = self._assumptions.by_pod
        finished = status.get("phase") in FINISHED
        if node is not None and not finished:
            assumption = assumed.pop(key, None)
            if assumption is not None and assumption.node != node:
                self._changes.freed.add(assumption.node)  # bound elsewhere than assumed (by someone else)
            self._snapshot.assume(key, node, requests)
            return
        if previous is not None and previous.node is not None and not previous.finished:  # counted until now
            if key not in assumed:
                self._snapshot.forget(key)
                self._changes.freed.add(previous.node)
            if status.get("phase") == "Failed":
                self._departed(key, previous)
        if finished:
            self._assumptions.forget(key)
        elif key in assumed and assumed[key].requests != requests:
            # What it asks changed while it binds (its claim got networked devices, which no node offers any
            # more): its node holds what it asks now, or the binder would find the node crowded.
            updated = replace(assumed[key], requests=requests)
            assumed[key] = updated
            self._snapshot.assume(key, updated.node, requests)

    def _mark_victim(self, key: str, victim_of: str | None) -> None:
        """A running pod Phalanx began to evict (its ``DisruptionTarget`` condition says by whom): kept, so
        that a new leader finishes the eviction. Another scheduler's preemption is its own to finish."""
        if victim_of is not None and victim_of.startswith(self._victim_prefixes):
            self.marked_victims[key] = victim_of
        else:
            self.marked_victims.pop(key, None)

    def _departed(self, key: str, previous: RunningPod) -> None:
        gang = self._index.gang_of(key) or previous.gang
        if previous.preempted or previous.node is None or gang is None:
            return
        now = self._clock.monotonic()
        # Taken by the leader's loop; a follower's list keeps only what could still be replaced.
        self._departures = [d for d in self._departures if now - d.at < self._replacement_grace]
        self._departures.append(Departure(key, previous.node, tuple(sorted(previous.requests.items())), gang, now))

    def _learn_deleted(self, pod: str) -> None:
        """A pod was deleted: if it was running, it ended now (its room comes back), unless Phalanx preempted
        it (it did not end by itself)."""
        record = self.records.get(pod)
        if record is None or record.node is None or record.finished or record.preempted:
            return
        started = timestamp(record.start)
        if started is not None:
            self._runtimes.ended(self.runtime_kind(pod), started, self._clock.wall() - started)

    def _learn_finished(self, previous: RunningPod | None, status: Mapping[str, Any], kind: int) -> None:
        """A pod of ``kind`` finished: learn how long it ran, if that can be told. A pod seen only once it had
        finished (a new leader's list) counts if its status says when its containers finished; one Phalanx
        preempted does not count."""
        if previous is not None and previous.preempted:
            return
        started = timestamp(status.get("startTime"))
        finished = finished_at(status)
        if finished is None and previous is not None and previous.node is not None:  # watched running till now
            finished = self._clock.wall()
        if started is not None and finished is not None:
            self._runtimes.ended(kind, started, finished - started)

    def _requests_again(self, key: str, obj: Mapping[str, Any]) -> tuple[dict[str, int], bool] | None:
        """What a gang member asks, as read from its last event, when its spec is the one it had but perhaps
        for ``nodeName`` (a bind's event): most of a member's events. Not while device classes serve extended
        resources, whose reading registers what nodes offer."""
        known = self._index.pod(key)
        if known is None or known.demand is None or self._devices.served():
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
        spec, last = obj.get("spec"), self._last_read
        # What the pod asks is read from its spec alone but for devices: the pods of a gang or a Job mostly
        # have equal specs, and comparing two costs a fraction of reading one. (Equal as the API server sends
        # them: its quantities are strings, where Python would take ``true`` for ``1``.)
        if last is not None and last[0] == spec and not self._devices.served() and not _claims_devices(spec):
            return last[1]
        try:
            requests, read = pod_demand(obj, self._kinds), True
        except SpecError:
            requests, read = {"pods": 1}, False  # the API rejects such pods; if one exists anyway it takes a slot
        key = tuple(sorted(requests.items()))
        found = self._interned.setdefault(key, requests), read
        self._last_read = (spec, found)
        return found

    def _drop(self, key: str) -> None:
        self.running.remove(key)
        self.nominated.pop(key, None)
        self.marked_victims.pop(key, None)
        previous = self.records.pop(key, None)
        assumption = self._assumptions.by_pod.pop(key, None)
        if previous is not None and previous.node is not None and not previous.finished:
            self._changes.freed.add(previous.node)
            if assumption is None:
                self._departed(key, previous)
        if assumption is not None:
            self._changes.freed.add(assumption.node)
        self._snapshot.forget(key)


def _claims_devices(spec: object) -> bool:
    return isinstance(spec, Mapping) and bool(spec.get("resourceClaims"))
