"""SimCluster's store: Kubernetes API semantics in memory.

What it keeps faithful, because the scheduler's correctness depends on it:

- one cluster-wide ``resourceVersion`` that increases with every write; every object carries the
  version of its last write, a ``uid``, a ``creationTimestamp`` and a ``generation``;
- watches from a resource version replay every later change exactly once and in order, then follow
  live; a watch from a version older than the retained history fails with 410 Expired (the caller
  must list again); BOOKMARK events carry the current version when a watch is idle;
- a watch with a selector sees an object *enter* (ADDED) and *leave* (DELETED) its selection when a
  change makes it match or stop matching;
- create fails with 409 AlreadyExists, update with 409 Conflict on a stale ``resourceVersion``;
- names, Events and the pod rules a scheduler meets are validated as the API server validates them
  (``scheduler.ports.sim.validation``): 422 with the same fields named;
- ``pods/binding`` sets ``spec.nodeName`` and ``PodScheduled=True``, fails with 409 when the pod is
  already bound or still has scheduling gates and 404 when it is gone; ``spec.nodeName`` cannot be
  changed any other way; a pod created with gates gets ``PodScheduled=False, SchedulingGated``;
- the ``status`` subresource writes only status; the main resource never writes status;
- custom resources are pruned to their CRD's schema and get its defaults (``scheduler.ports.sim.schema``);
- core/v1 Events are a converted view of events.k8s.io/v1 ones (``scheduler.ports.sim.events``);
- namespaced objects need their namespace to exist; deleting a namespace deletes what is in it.

Deleting a pod first marks it (``deletionTimestamp``, a MODIFIED event), then removes it, as a kubelet
confirms at once that nothing runs: nothing here runs containers. With ``graceful=True`` a pod bound to
a node stays Terminating for its grace period instead (the DELETE's ``gracePeriodSeconds``, else its
``terminationGracePeriodSeconds``, else 30), as a kubelet keeps it while its containers stop, until
:meth:`Store.finish_terminations` is called at or after that time (``phalanx simulate`` moves its clock
there). Other objects go at once.

Objects are plain JSON dicts. The store owns what it is given (do not modify a dict after passing it
in) and what it returns is shared and read-only: writes build new dicts, never change stored ones, so
old versions stay intact in watch history.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio

from scheduler.ports.sim.dra import default_claim_spec, default_template_spec, drop_deallocated_devices
from scheduler.ports.sim.events import to_core, to_modern
from scheduler.ports.sim.patch import json_patch, merge_patch, strategic_merge_patch
from scheduler.ports.sim.resources import Catalog, Resource
from scheduler.ports.sim.schema import structural, validate
from scheduler.ports.sim.selectors import Selector
from scheduler.ports.sim.status import ApiError, already_exists, conflict, not_found
from scheduler.ports.sim.validation import (
    admit_pod,
    bad,
    claim_status_causes,
    event_causes,
    invalid,
    name_causes,
    pod_status_causes,
    pod_update_causes,
    slice_causes,
)
from topology.quantities import parse_quantity

Obj = dict[str, Any]
Key = tuple[str, str]  # namespace ("" when cluster-scoped), name

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_BUILTIN_GROUPS = frozenset({"", "events.k8s.io", "coordination.k8s.io"})
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: The PriorityClasses every API server creates at start (the admission plugin knows them by name).
SYSTEM_PRIORITY_CLASSES: dict[str, dict[str, Any]] = {
    "system-cluster-critical": {"value": 2_000_000_000, "preemptionPolicy": "PreemptLowerPriority"},
    "system-node-critical": {"value": 2_000_001_000, "preemptionPolicy": "PreemptLowerPriority"},
}
GATED = {
    "type": "PodScheduled",
    "status": "False",
    "lastProbeTime": None,
    "reason": "SchedulingGated",
    "message": "Scheduling is blocked due to non-empty scheduling gates",
}


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Mapping[str, Any]


Observer = Callable[[tuple[str, str], str, Obj, Obj | None], None]  # (group, plural), type, object, previous


@dataclass(frozen=True, slots=True)
class _Change:
    version: int
    storage: tuple[str, str]
    namespace: str
    type: str
    object: Obj
    previous: Obj | None


@functools.lru_cache(maxsize=64)
def _timestamp_at(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _timestamp(seconds: float) -> str:
    """RFC 3339 at whole seconds, as the API writes ``creationTimestamp``."""
    return _timestamp_at(int(seconds))


class Watch:
    """Events of one resource (optionally one namespace and a selector) from a resource version on.

    Iterate with ``async for``, or call :meth:`next`, which returns None when the watch ends (its
    timeout passed, or it was closed). Idle watches with bookmarks get BOOKMARK events.
    """

    def __init__(
        self,
        store: Store,
        resource: Resource,
        namespace: str | None,
        selector: Selector,
        *,
        bookmark_interval: float | None,
        timeout: float | None,
    ) -> None:
        self._store = store
        self.resource = resource
        self._namespace = namespace
        self._selector = selector
        self._bookmark_interval = bookmark_interval
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._queue: deque[_Change] = deque()
        self._wakeup: anyio.Event | None = None
        self._closed = False

    def _wants(self, change: _Change) -> bool:
        return self._namespace is None or change.namespace == self._namespace

    def _push(self, change: _Change) -> None:
        self._queue.append(change)
        if self._wakeup is not None:
            # Wake the consumer once; it drains the whole queue before waiting again.
            self._wakeup.set()
            self._wakeup = None

    def close(self) -> None:
        """End the watch; the consumer sees the end after the events already queued."""
        if not self._closed:
            self._closed = True
            self._store._forget_watch(self)
            if self._wakeup is not None:
                self._wakeup.set()
                self._wakeup = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _translate(self, change: _Change) -> WatchEvent | None:
        view = self._store._view(change.object, self.resource)
        if self._selector.empty:
            return WatchEvent(change.type, view)
        now = self._selector.matches(view)
        before = change.previous is not None and self._selector.matches(
            self._store._view(change.previous, self.resource)
        )
        if change.type == "ADDED":
            return WatchEvent("ADDED", view) if now else None
        if change.type == "DELETED":
            return WatchEvent("DELETED", view) if now else None
        if now and before:
            return WatchEvent("MODIFIED", view)
        if now:
            return WatchEvent("ADDED", view)
        return WatchEvent("DELETED", view) if before else None

    async def next(self) -> WatchEvent | None:
        while True:
            while self._queue:
                event = self._translate(self._queue.popleft())
                if event is not None:
                    return event
            if self._closed:
                return None
            limits = [self._bookmark_interval] if self._bookmark_interval else []
            if self._deadline is not None:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    self.close()
                    return None
                limits.append(remaining)
            wakeup = self._wakeup = anyio.Event()
            with anyio.move_on_after(min(limits) if limits else float("inf")) as scope:
                await wakeup.wait()
            self._wakeup = None
            if scope.cancelled_caught and not self._queue and self._bookmark_interval:
                deadline_passed = self._deadline is not None and time.monotonic() >= self._deadline
                if not deadline_passed:
                    return WatchEvent("BOOKMARK", self._store.bookmark(self.resource))

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event


class Store:
    """The objects of one simulated cluster; see the module docstring for the semantics kept."""

    def __init__(
        self,
        *,
        catalog: Catalog | None = None,
        history: int = 10_000,
        clock: Callable[[], float] = time.time,
        seed: int = 0,
        graceful: bool = False,
    ) -> None:
        self.catalog = catalog or Catalog()
        self.graceful = graceful
        self._terminating: dict[Key, float] = {}  # pods marked for deletion -> when their grace ends
        self._clock = clock
        self._random = random.Random(seed)
        self._version = 1
        self._objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._history: deque[_Change] = deque(maxlen=max(history, 1))
        self._compacted = 1  # changes with version <= this are no longer in history
        self._watches: dict[tuple[str, str], list[Watch]] = {}
        self._list_snapshots: dict[int, tuple[int, list[Obj]]] = {}
        self._next_snapshot = 0
        self._observers: list[Observer] = []
        self._dry = False

    # -- reading -------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._version

    def now(self) -> float:
        """The store's clock (wall seconds), as it stamps objects."""
        return self._clock()

    def resource(self, api_version: str, kind: str) -> Resource:
        found = self.catalog.by_kind(api_version, kind)
        if found is None:
            raise ApiError(404, f"the server could not find the requested resource ({kind} {api_version})")
        return found

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        obj = self._table(resource).get(self._key(resource, namespace, name))
        if obj is None:
            raise not_found(resource.plural, name, resource.group)
        return self._view(obj, resource)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        selector: Selector | None = None,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], int, str | None]:
        """Items (sorted by namespace and name), the list's resourceVersion, and a continue token.

        As on a real API server, every page of one list comes from the same snapshot, taken at the
        first page's resourceVersion, whatever happens in between.
        """
        if continue_token:
            try:
                snapshot_id, offset = (
                    int(part) for part in base64.urlsafe_b64decode(continue_token).decode().split(":")
                )
            except (ValueError, UnicodeDecodeError):
                raise ApiError(400, "the continue token is not valid") from None
            snapshot = self._list_snapshots.get(snapshot_id)
            if snapshot is None:
                raise ApiError(410, "the continue token has expired; list again", reason="Expired")
            version, items = snapshot
        else:
            selector = selector or Selector()
            viewed = (
                self._view(obj, resource)
                for key, obj in sorted(self._table(resource).items())
                if namespace is None or key[0] == namespace
            )
            items = [obj for obj in viewed if selector.matches(obj)]
            version, offset = self._version, 0
            if limit and len(items) > limit:
                self._next_snapshot += 1
                snapshot_id = self._next_snapshot
                self._list_snapshots[snapshot_id] = (version, items)
                while len(self._list_snapshots) > 8:  # a few lists in progress at once, like etcd's window
                    del self._list_snapshots[next(iter(self._list_snapshots))]
        if not limit or offset + limit >= len(items):
            if continue_token:
                self._list_snapshots.pop(snapshot_id, None)
            return items[offset:], version, None
        token = base64.urlsafe_b64encode(f"{snapshot_id}:{offset + limit}".encode()).decode()
        return items[offset : offset + limit], version, token

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        selector: Selector | None = None,
        resource_version: str | None = None,
        *,
        bookmark_interval: float | None = None,
        timeout: float | None = None,
    ) -> Watch:
        """Start a watch. ``resource_version`` "" or "0" (or None) starts with an ADDED event for every
        current object; a number replays the changes after it, or fails with 410 if they are gone."""
        stream = Watch(
            self, resource, namespace, selector or Selector(), bookmark_interval=bookmark_interval, timeout=timeout
        )
        if resource_version in (None, "", "0"):
            for key, obj in sorted(self._table(resource).items()):
                if namespace is None or key[0] == namespace:
                    stream._push(_Change(self._version, resource.storage, key[0], "ADDED", obj, None))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise ApiError(400, f"invalid resourceVersion {resource_version!r}") from None
            if since < self._compacted:
                raise ApiError(410, f"too old resource version: {since} ({self._compacted + 1})", reason="Expired")
            for change in self._history:
                if change.version > since and change.storage == resource.storage and stream._wants(change):
                    stream._push(change)
        self._watches.setdefault(resource.storage, []).append(stream)
        return stream

    def bookmark(self, resource: Resource) -> Obj:
        return {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"resourceVersion": str(self._version)},
        }

    def compact(self) -> None:
        """Forget all watch history, as etcd compaction does (every watch from an old version gets 410)."""
        if self._history:
            self._compacted = self._history[-1].version
            self._history.clear()

    def objects(self, resource: Resource) -> Iterator[Obj]:
        """Every stored object of a resource (read-only), for builders and tests."""
        return iter(self._table(resource).values())

    # -- writing -------------------------------------------------------------------------------

    def create(self, resource: Resource, namespace: str | None, obj: Mapping[str, Any]) -> Obj:
        metadata = dict(self._body_metadata(resource, obj))  # as sent, before a view's body is converted
        obj = self._incoming(resource, obj)
        for omitted in ("labels", "annotations"):  # Go's omitempty: an empty map is not stored
            if metadata.get(omitted) == {}:
                del metadata[omitted]
        if metadata.get("resourceVersion"):
            raise ApiError(500, "resourceVersion should not be set on objects to be created")
        namespace = self._namespace_for(resource, namespace, metadata)
        name = metadata.get("name") or ""
        causes = []
        if not name:
            prefix = metadata.get("generateName")
            if not prefix:
                raise ApiError(
                    422, f"{resource.kind} is invalid: metadata.name: Required value: name or generateName is required"
                )
            name = prefix + "".join(self._random.choice(_NAME_ALPHABET) for _ in range(5))
            causes = name_causes(resource.kind, prefix, "metadata.generateName", prefix=True)
        causes = causes or name_causes(resource.kind, name)
        if resource.storage == ("events.k8s.io", "events"):
            causes += event_causes(obj, str(namespace), modern=resource.view_of is None)
        elif resource.storage == ("resource.k8s.io", "resourceslices"):
            causes += slice_causes(obj)
        elif resource.kind == "Pod" and not resource.group:
            spec, qos, refused = admit_pod(obj, parse_quantity)
            causes += refused
            obj = {**obj, "spec": spec}
        if causes:
            raise invalid(resource.kind, resource.group, name, causes)
        if resource.kind == "Pod" and not resource.group:
            obj = {**obj, "spec": self._admit_priority(name, obj["spec"])}
        elif resource.storage == ("scheduling.k8s.io", "podgroups") and resource.version == "v1alpha2":
            obj = {**obj, "spec": self._admit_pod_group(name, obj.get("spec") or {})}
        elif resource.storage == ("resource.k8s.io", "resourceclaims"):
            obj = {**obj, "spec": default_claim_spec(obj.get("spec") or {})}
        elif resource.storage == ("resource.k8s.io", "resourceclaimtemplates"):
            obj = {**obj, "spec": default_template_spec(obj.get("spec") or {})}
        key = self._key(resource, namespace, name)
        table = self._table(resource)
        if key in table:
            raise already_exists(resource.plural, name, resource.group)
        now = _timestamp(self._clock())
        metadata.update(
            name=name,
            uid=str(uuid.UUID(int=self._random.getrandbits(128), version=4)),
            creationTimestamp=now,
            generation=1,
        )
        metadata.pop("resourceVersion", None)
        if resource.namespaced:
            metadata["namespace"] = namespace
        stored: Obj = {**obj, "apiVersion": self._stored_version(resource), "kind": resource.kind, "metadata": metadata}
        if resource.kind == "Pod" and not resource.group:
            stored["status"] = {"phase": "Pending", "qosClass": qos}
            if (stored.get("spec") or {}).get("schedulingGates"):
                stored["status"]["conditions"] = [{**GATED, "lastTransitionTime": now}]
        elif "status" in resource.subresources:
            stored.pop("status", None)
        if resource.schema is not None:
            stored = self._schematic(resource, name, stored)
        return self._write(resource, key, "ADDED", stored, None)

    def _schematic(self, resource: Resource, name: str, obj: Obj) -> Obj:
        """A custom resource pruned to its CRD's schema, defaulted, and validated against it (422)."""
        assert resource.schema is not None
        shaped = structural(obj, resource.schema)
        causes = validate(shaped, resource.schema)
        if causes:
            raise invalid(resource.kind, resource.group, name, causes)
        return shaped

    def admit_priority(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The pod spec as the Priority admission plugin leaves it (for objects loaded past admission)."""
        return self._admit_priority(name, spec)

    def _admit_priority(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The Priority admission plugin: ``spec.priority`` (and ``preemptionPolicy``) from the pod's
        PriorityClass, the global default class, or 0; 403 for a class that does not exist, or a
        ``spec.priority`` the user set to something else."""
        chosen = self._priority_class(spec, f'pods "{name}"')
        value = int((chosen or {}).get("value", 0))
        given = spec.get("priority")
        if given is not None and given != value:
            raise ApiError(
                403,
                f'pods "{name}" is forbidden: the integer value of priority ({given}) must not be provided in pod '
                f"spec; priority admission controller computed {value} from the given PriorityClass name",
            )
        policy = (chosen or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        return {**spec, "priority": value, "preemptionPolicy": spec.get("preemptionPolicy") or policy}

    def _priority_class(self, spec: Mapping[str, Any], subject: str) -> Mapping[str, Any] | None:
        """The PriorityClass ``spec.priorityClassName`` names, else the global default (None: there is none);
        403 about ``subject`` for a class that does not exist."""
        class_name = spec.get("priorityClassName")
        classes = {key[1]: obj for key, obj in self._objects.get(("scheduling.k8s.io", "priorityclasses"), {}).items()}
        if not class_name:
            return next((c for c in classes.values() if c.get("globalDefault")), None)
        chosen = classes.get(class_name) or SYSTEM_PRIORITY_CLASSES.get(class_name)
        if chosen is None:
            raise ApiError(403, f"{subject} is forbidden: no PriorityClass with name {class_name} was found")
        return chosen

    def _admit_pod_group(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A 1.36 PodGroup as the server admits it (the WorkloadAwarePreemption gate): ``spec.priority`` from
        its own PriorityClass, the global default, or 0 (never from its pods'), and ``disruptionMode: Pod``."""
        chosen = self._priority_class(spec, f'podgroups.scheduling.k8s.io "{name}"')
        value = int((chosen or {}).get("value", 0))
        given = spec.get("priority")
        if given is not None and given != value:
            raise ApiError(
                403,
                f'podgroups.scheduling.k8s.io "{name}" is forbidden: priority set in the pod group ({given}) must '
                f"match the priority computed ({value}) based on the priority class set in the spec",
            )
        return {"disruptionMode": "Pod", **spec, "priority": value}

    def restore(self, resource: Resource, obj: Mapping[str, Any]) -> Obj:
        """Load an object as it is (status, ``nodeName`` and all), as when copying a real cluster in."""
        metadata = dict(self._body_metadata(resource, obj))
        namespace = self._namespace_for(resource, metadata.get("namespace"), metadata)
        if not metadata.get("name"):
            raise ApiError(422, f"{resource.kind} is invalid: metadata.name: Required value")
        metadata.setdefault("uid", str(uuid.UUID(int=self._random.getrandbits(128), version=4)))
        metadata.setdefault("creationTimestamp", _timestamp(self._clock()))
        metadata.setdefault("generation", 1)
        if resource.namespaced:
            metadata["namespace"] = namespace
        key = self._key(resource, namespace, metadata["name"])
        previous = self._table(resource).get(key)
        stored = {**obj, "apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata}
        return self._write(resource, key, "ADDED" if previous is None else "MODIFIED", stored, previous)

    def update(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        obj: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> Obj:
        key, current = self._current(resource, namespace, name)
        metadata = self._body_metadata(resource, obj)
        obj = self._incoming(resource, obj)
        if metadata.get("name") not in (None, name):
            raise ApiError(400, "the name of the object does not match the name on the URL")
        wanted = metadata.get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
            raise conflict(
                resource.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
                resource.group,
            )
        return self._replace(resource, key, current, dict(obj), subresource)

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
    ) -> Obj:
        key, current = self._current(resource, namespace, name)
        seen = self._view(current, resource)  # a patch applies to the object as the client reads it
        if patch_type == MERGE_PATCH:
            patched = merge_patch(seen, body)
        elif patch_type == STRATEGIC_MERGE_PATCH:
            if resource.group not in _BUILTIN_GROUPS:
                raise ApiError(415, "strategic merge patch is not supported for custom resources; use a merge patch")
            patched = strategic_merge_patch(seen, body)
        elif patch_type == JSON_PATCH:
            patched = json_patch(seen, body)
        else:
            raise ApiError(415, f"the patch type {patch_type!r} is not supported")
        if not isinstance(patched, dict):
            raise ApiError(422, "a patch must leave an object")
        patched = dict(self._incoming(resource, patched))
        uid = (patched.get("metadata") or {}).get("uid")
        if uid not in (None, "", current["metadata"].get("uid")):  # any subresource: the server compares them
            cause = bad("metadata.uid", uid, "field is immutable")
            raise invalid(resource.kind, resource.group, name, [cause])
        wanted = (patched.get("metadata") or {}).get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
            raise conflict(
                resource.plural, name, "the resourceVersion in the patch does not match the object", resource.group
            )
        return self._replace(resource, key, current, patched, subresource)

    def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        key, current = self._current(resource, namespace, name)
        if uid and current["metadata"].get("uid") != uid:
            raise conflict(resource.plural, name, f"Precondition failed: UID in precondition: {uid}", resource.group)
        if resource_version and current["metadata"].get("resourceVersion") != resource_version:
            raise conflict(resource.plural, name, "Precondition failed: resourceVersion does not match", resource.group)
        if resource.kind == "Namespace":
            seen: set[tuple[str, str]] = set()
            for other in self.catalog.resources:
                if other.namespaced and other.storage not in seen:
                    seen.add(other.storage)
                    for member_key in [k for k in self._table(other) if k[0] == name]:
                        self._remove(other, member_key)
        elif self.graceful and resource.kind == "Pod" and not resource.group and _node_of(current):
            grace = grace_period_seconds
            if grace is None:
                grace = (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            if not isinstance(grace, int) or grace > 0:
                if current["metadata"].get("deletionTimestamp"):
                    return current  # already terminating: a second DELETE does not shorten or restart it
                seconds = grace if isinstance(grace, int) else 30
                ends = self._clock() + seconds
                marked = {**current, "metadata": {**current["metadata"], "deletionTimestamp": _timestamp(ends),
                                                  "deletionGracePeriodSeconds": seconds}}  # fmt: skip
                if not self._dry:
                    self._terminating[key] = ends
                return self._write(resource, key, "MODIFIED", marked, current)
        if resource.kind == "Pod" and not resource.group and not current["metadata"].get("deletionTimestamp"):
            # The API server marks the pod first; its kubelet (here: at once) confirms nothing runs.
            marked = {**current, "metadata": {**current["metadata"], "deletionTimestamp": _timestamp(self._clock()),
                                              "deletionGracePeriodSeconds": 0}}  # fmt: skip
            self._write(resource, key, "MODIFIED", marked, current)
        return self._remove(resource, key)

    def next_termination(self) -> float | None:
        """When the earliest Terminating pod's grace period ends (``graceful`` stores only)."""
        return min(self._terminating.values(), default=None)

    def finish_terminations(self) -> int:
        """Remove the Terminating pods whose grace period has ended, as their kubelets would; returns how many."""
        now = self._clock()
        due = [key for key, ends in self._terminating.items() if ends <= now]
        pods = self.resource("v1", "Pod")
        for key in due:
            del self._terminating[key]
            if key in self._table(pods):
                self._remove(pods, key)
        return len(due)

    def bind(self, namespace: str, name: str, binding: Mapping[str, Any]) -> None:
        """``POST pods/<name>/binding``: assign the pod to ``binding.target.name``."""
        pods = self.resource("v1", "Pod")
        key, current = self._current(pods, namespace, name)
        target = binding.get("target") if isinstance(binding, Mapping) else None
        node = target.get("name") if isinstance(target, Mapping) else None
        if not isinstance(node, str) or not node:
            raise ApiError(422, "Binding is invalid: target.name: Required value")
        metadata = binding.get("metadata") if isinstance(binding.get("metadata"), Mapping) else {}
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        if uid and uid != current["metadata"].get("uid"):
            raise conflict(
                "pods/binding",
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{current['metadata'].get('uid')}",
            )
        if current["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", name, "pod is being deleted, cannot be assigned to a host")
        assigned = (current.get("spec") or {}).get("nodeName")
        if assigned:
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{assigned}"')
        if (current.get("spec") or {}).get("schedulingGates"):
            raise conflict("pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates")
        conditions = [
            condition
            for condition in (current.get("status") or {}).get("conditions") or []
            if condition.get("type") != "PodScheduled"
        ]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": _timestamp(self._clock()),
            }
        )
        status = {**(current.get("status") or {}), "conditions": conditions}
        status.pop("nominatedNodeName", None)  # ClearingNominatedNodeNameAfterBinding, on by default since 1.35
        bound = {
            **current,
            "metadata": dict(current["metadata"]),
            "spec": {**(current.get("spec") or {}), "nodeName": node},
            "status": status,
        }
        self._write(pods, key, "MODIFIED", bound, current)

    def ensure_namespace(self, name: str) -> None:
        namespaces = self.resource("v1", "Namespace")
        if ("", name) not in self._table(namespaces):
            self.create(namespaces, None, {"metadata": {"name": name}, "spec": {}})

    # -- internals -----------------------------------------------------------------------------

    def _table(self, resource: Resource) -> dict[Key, Obj]:
        table = self._objects.get(resource.storage)
        if table is None:
            table = self._objects[resource.storage] = {}
        return table

    @staticmethod
    def _key(resource: Resource, namespace: str | None, name: str) -> Key:
        return (namespace or "") if resource.namespaced else "", name

    def _view(self, obj: Obj, resource: Resource) -> Obj:
        if resource.view_of is not None:
            return to_core(obj)
        if obj.get("apiVersion") == resource.api_version:
            return obj
        return {**obj, "apiVersion": resource.api_version}

    @staticmethod
    def _incoming(resource: Resource, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """A body written through a converted view, in the stored form."""
        return to_modern(obj) if resource.view_of is not None and isinstance(obj, Mapping) else obj

    def _stored_version(self, resource: Resource) -> str:
        return "events.k8s.io/v1" if resource.view_of is not None else resource.api_version

    def _body_metadata(self, resource: Resource, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        if not isinstance(obj, Mapping):
            raise ApiError(400, f"the body of a {resource.kind} must be a JSON object")
        for field, wanted in (("kind", resource.kind), ("apiVersion", resource.api_version)):
            given = obj.get(field)
            if given not in (None, "", wanted) and not (field == "apiVersion" and self._same_resource(given, resource)):
                raise ApiError(
                    400,
                    f"the {field} {given!r} of the body does not match "
                    f"the {resource.kind} {resource.api_version} on the URL",
                )
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise ApiError(400, "metadata must be an object")
        return metadata

    def _same_resource(self, api_version: Any, resource: Resource) -> bool:
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else None
        return group == resource.group

    def _namespace_for(self, resource: Resource, namespace: str | None, metadata: Mapping[str, Any]) -> str | None:
        if not resource.namespaced:
            return None
        given = metadata.get("namespace")
        if namespace and given and given != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        namespace = namespace or given
        if not namespace:
            raise ApiError(400, f"a {resource.kind} needs a namespace")
        if ("", namespace) not in self._table(self.resource("v1", "Namespace")):
            raise not_found("namespaces", namespace)
        return str(namespace)

    def _current(self, resource: Resource, namespace: str | None, name: str) -> tuple[Key, Obj]:
        key = self._key(resource, namespace, name)
        current = self._table(resource).get(key)
        if current is None:
            raise not_found(resource.plural, name, resource.group)
        return key, current

    def _replace(self, resource: Resource, key: Key, current: Obj, new: Obj, subresource: str | None) -> Obj:
        if subresource is not None and subresource not in resource.subresources:
            raise ApiError(404, "the server could not find the requested resource")
        if subresource == "status":
            result = {**current, "metadata": dict(current["metadata"]), "status": new.get("status")}
            if result["status"] is None:
                result.pop("status")
            if resource.kind == "Pod" and not resource.group:
                causes = pod_status_causes(current, result)
                if causes:
                    raise invalid("Pod", "", key[1], causes)
            elif resource.storage == ("resource.k8s.io", "resourceclaims"):
                old_status = current.get("status") or {}
                if (old_status.get("allocation") or None) != (result.get("status") or {}).get("allocation"):
                    result["status"] = drop_deallocated_devices(result.get("status"))
                causes = claim_status_causes(current, result)
                if causes:
                    raise invalid("ResourceClaim", "resource.k8s.io", key[1], causes)
        else:
            result = {**new, "apiVersion": self._stored_version(resource), "kind": resource.kind}
            if "status" in resource.subresources:
                result.pop("status", None)
                if "status" in current:
                    result["status"] = current["status"]
            metadata = dict(new.get("metadata") or {})
            for fixed in ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp"):
                if fixed in current["metadata"]:
                    metadata[fixed] = current["metadata"][fixed]
                else:
                    metadata.pop(fixed, None)
            result["metadata"] = metadata
            if resource.kind == "Pod" and not resource.group:
                before = (current.get("spec") or {}).get("nodeName")
                after = (result.get("spec") or {}).get("nodeName")
                if before != after:
                    raise ApiError(
                        422, f'Pod "{key[1]}" is invalid: spec.nodeName: Forbidden: set it with pods/binding'
                    )
                causes = pod_update_causes(current, result)
                if causes:
                    raise invalid("Pod", "", key[1], causes)
            if _spec(result) != _spec(current):
                metadata["generation"] = int(current["metadata"].get("generation", 1)) + 1
        if resource.schema is not None:
            result = self._schematic(resource, key[1], result)
        return self._write(resource, key, "MODIFIED", result, current)

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Writes inside are checked and answered as usual but change nothing (``dryRun=All``)."""
        self._dry = True
        try:
            yield
        finally:
            self._dry = False

    def _remove(self, resource: Resource, key: Key) -> Obj:
        if self._dry:
            return self._view(self._table(resource)[key], resource)
        current = self._table(resource).pop(key)
        self._version += 1
        final = {**current, "metadata": {**current["metadata"], "resourceVersion": str(self._version)}}
        self._record(_Change(self._version, resource.storage, key[0], "DELETED", final, current))
        return self._view(final, resource)

    def _write(self, resource: Resource, key: Key, kind: str, obj: Obj, previous: Obj | None) -> Obj:
        if self._dry:
            obj["metadata"].pop("resourceVersion", None)  # a dry run stores nothing, so it has no version
            return self._view(obj, resource)
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._table(resource)[key] = obj
        self._record(_Change(self._version, resource.storage, key[0], kind, obj, previous))
        return self._view(obj, resource)

    def _record(self, change: _Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].version
        self._history.append(change)
        for observer in self._observers:
            observer(change.storage, change.type, change.object, change.previous)
        for stream in self._watches.get(change.storage, ()):
            if stream._wants(change):
                stream._push(change)

    def observe(self, observer: Observer) -> None:
        """Call ``observer((group, plural), type, object, previous)`` on every change, as it is made (the invariant
        monitor sees each moment the API could show, which a watch, delivering later, cannot promise)."""
        self._observers.append(observer)

    def _forget_watch(self, stream: Watch) -> None:
        streams = self._watches.get(stream.resource.storage, [])
        if stream in streams:
            streams.remove(stream)


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in obj.items() if key not in ("metadata", "status", "apiVersion", "kind")}


def _node_of(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return node if isinstance(node, str) and node else None
