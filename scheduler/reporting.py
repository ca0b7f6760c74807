"""Telling people what Phalanx decided: Events, the PodScheduled condition, group status.

Decisions are recorded here synchronously (no waiting on the API inside a scheduling cycle) and written
by :meth:`Reporter.run`, a task of its own, every ``reporting.statusIntervalSeconds``:

- the ``PodScheduled=False`` condition on each pending pod, reason ``Unschedulable`` when room is
  missing (cluster-autoscaler reads it) or ``SchedulerError`` when the gang's definition must be fixed,
  written only when its message changes;
- ``events.k8s.io/v1`` Events, aggregated: the same reason and note on the same object is one Event
  whose ``series.count`` grows, updated at most every ``reporting.eventIntervalSeconds``;
- the status of group objects, in each source's own vocabulary (scheduler-plugins phase and counts,
  Volcano conditions, ``PodGroupInitiallyScheduled`` upstream), latest value only.

Write failures are logged and retried at the next flush; they never reach the scheduling cycle.
"""

from __future__ import annotations

import itertools
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.cache import ClusterState
from scheduler.clock import Clock
from scheduler.errors import NotFound, PortError
from scheduler.gangs import GangSpec, ObjectRef
from scheduler.metrics import Metrics
from scheduler.port import EVENTS, PODS, ApiResource, ClusterPort
from scheduler.ratelimit import TokenBucket
from scheduler.settings import ReportingSettings

log = structlog.get_logger("phalanx.reporting")

UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"
_NOTE_LIMIT = 1024
_EVENTS_TRACKED = 4096
_PLURALS = {"PodGroup": "podgroups", "CompositePodGroup": "compositepodgroups"}


def micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Subject:
    """What an Event is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(slots=True)
class _Event:
    subject: Subject
    reason: str
    note: str
    type: str
    action: str
    count: int = 1
    name: str | None = None  # set once created
    written_count: int = 0
    last_write: float = -1e18


class Reporter:
    def __init__(
        self,
        *,
        port: ClusterPort,
        state: ClusterState,
        settings: ReportingSettings,
        clock: Clock,
        limiter: TokenBucket,
        metrics: Metrics,
        identity: str,
    ) -> None:
        self.port = port
        self.state = state
        self.settings = settings
        self.clock = clock
        self.limiter = limiter
        self.metrics = metrics
        self.identity = identity
        self._conditions: dict[str, tuple[str, str]] = {}  # pod -> (reason, message) wanted
        self._written: dict[str, tuple[str, str]] = {}  # pod -> what the API has
        self._events: dict[tuple[Subject, str, str], _Event] = {}  # oldest occurrence first
        self._due: set[tuple[Subject, str, str]] = set()  # events with occurrences not yet written
        self._groups: dict[ObjectRef, tuple[bool, int, str]] = {}  # wanted: scheduled?, bound count, message
        self._groups_written: dict[ObjectRef, tuple[bool, int, str]] = {}

    # -- recording decisions (synchronous, cheap) -------------------------------------------------

    def pending(self, pods: Iterable[str], reason: str, message: str) -> None:
        """Every pod listed stays pending for ``message``."""
        for pod in pods:
            self._conditions[pod] = (reason, message)

    def event(
        self, subject: Subject | None, reason: str, note: str, *, type: str = "Warning", action: str = "Scheduling"
    ) -> None:
        if subject is None:
            return
        note = note if len(note) <= _NOTE_LIMIT else note[: _NOTE_LIMIT - 3] + "..."
        key = (subject, reason, note)
        found = self._events.pop(key, None)
        if found is None:
            found = _Event(subject, reason, note, type, action)
        else:
            found.count += 1
        self._events[key] = found  # re-inserted: the dict is kept in order of last occurrence
        self._due.add(key)
        if len(self._events) > _EVENTS_TRACKED + _EVENTS_TRACKED // 8:
            self._forget_quiet_events()

    def _forget_quiet_events(self) -> None:
        """Stop aggregating into the Events that recurred least recently (client-go's correlator keeps an
        LRU cache of 4,096 too): a later occurrence of one starts a new Event. Done in batches. If the
        oldest still have occurrences not written (the API has refused writes for a long while), those
        occurrences are dropped: Events are best effort, memory is not."""
        excess = len(self._events) - _EVENTS_TRACKED
        for key in list(itertools.islice(self._events, excess)):
            del self._events[key]
            self._due.discard(key)

    def pod_subject(self, pod: str) -> Subject | None:
        uid = self.state.uid(pod)
        if uid is None:
            return None
        namespace, name = pod.split("/", 1)
        return Subject("v1", "Pod", namespace, name, uid)

    def group_subject(self, ref: ObjectRef) -> Subject | None:
        group = self.state.index.group(ref)
        if group is None:
            return None
        uid = str((group.raw.get("metadata") or {}).get("uid") or "")
        return Subject(f"{ref.group}/{group.version}", ref.kind, ref.namespace, ref.name, uid)

    def scheduled(self, pod: str, node: str) -> None:
        self._conditions.pop(pod, None)
        self._written.pop(pod, None)
        self.event(
            self.pod_subject(pod),
            "Scheduled",
            f"Successfully assigned {pod} to {node}",
            type="Normal",
            action="Binding",
        )

    def group(self, spec: GangSpec, *, scheduled: bool, bound: int, message: str) -> None:
        for ref in spec.objects:
            self._groups[ref] = (scheduled, bound, message)

    def why_pending(self, pod: str) -> tuple[str, str] | None:
        """The (reason, message) of the pod's latest ``PodScheduled=False`` decision, if it has one."""
        return self._conditions.get(pod)

    def forget_pod(self, pod: str) -> None:
        self._conditions.pop(pod, None)
        self._written.pop(pod, None)

    # -- writing --------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self.settings.status_interval_seconds)
            await self.flush()

    async def flush(self) -> None:
        await self._flush_conditions()
        await self._flush_events()
        await self._flush_groups()

    async def _attempt(self, kind: str, what: str, write: Coroutine[Any, Any, Any]) -> Any:
        """Run one write under the rate limit; None when it failed (it is retried at the next flush)."""
        await self.limiter.take()
        try:
            result = await write
        except NotFound:
            return {}  # the object is gone: nothing left to tell
        except PortError as error:
            log.warning("write failed; retrying at the next flush", kind=kind, object=what, error=str(error)[:200])
            return None
        self.metrics.api_writes.labels(kind).inc()
        return {} if result is None else result

    async def _flush_conditions(self) -> None:
        for pod, wanted in list(self._conditions.items()):
            if self._written.get(pod) == wanted:
                continue
            if self.state.bound_node(pod) is not None or not self.state.exists(pod):
                self._conditions.pop(pod, None)
                continue
            namespace, name = pod.split("/", 1)
            reason, message = wanted
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self.clock.wall()),
            }
            write = self.port.patch_status(PODS, namespace, name, {"status": {"conditions": [condition]}})
            if await self._attempt("condition", pod, write) is not None:
                self._written[pod] = wanted

    async def _flush_events(self) -> None:
        now = self.clock.monotonic()
        for key in list(self._due):
            event = self._events.get(key)
            if event is None:
                self._due.discard(key)
                continue
            namespace = event.subject.namespace
            if event.name is None:
                created = await self._attempt(
                    "event", event.reason, self.port.create(EVENTS, namespace, self._event_body(event))
                )
                if created is not None:
                    event.name = str((created.get("metadata") or {}).get("name") or "") or None
                    event.written_count, event.last_write = event.count, now
                    if event.name is None:
                        self._events.pop(key, None)
            elif now - event.last_write >= self.settings.event_interval_seconds:
                series = {"series": {"count": event.count, "lastObservedTime": micro_time(self.clock.wall())}}
                if (
                    await self._attempt("event", event.reason, self.port.patch(EVENTS, namespace, event.name, series))
                    is not None
                ):
                    event.written_count, event.last_write = event.count, now
            if event.count == event.written_count:
                self._due.discard(key)

    def _event_body(self, event: _Event) -> dict[str, Any]:
        subject = event.subject
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": f"{subject.name}.", "namespace": subject.namespace},
            "eventTime": micro_time(self.clock.wall()),
            "reportingController": self.settings.controller,
            "reportingInstance": self.identity,
            "action": event.action,
            "reason": event.reason,
            "regarding": {
                "apiVersion": subject.api_version,
                "kind": subject.kind,
                "namespace": subject.namespace,
                "name": subject.name,
                "uid": subject.uid,
            },
            "note": event.note,
            "type": event.type,
        }

    async def _flush_groups(self) -> None:
        for ref, wanted in list(self._groups.items()):
            if self._groups_written.get(ref) == wanted:
                continue
            group = self.state.index.group(ref)
            if group is None:
                self._groups.pop(ref, None)
                continue
            resource = ApiResource(ref.group, group.version, _PLURALS.get(ref.kind, ref.kind.lower() + "s"), ref.kind)
            write = self.port.patch_status(
                resource, ref.namespace, ref.name, self._group_status(ref, group.raw, *wanted)
            )
            if await self._attempt("status", str(ref), write) is not None:
                self._groups_written[ref] = wanted

    def _group_status(self, ref: ObjectRef, raw: Any, scheduled: bool, bound: int, message: str) -> dict[str, Any]:
        """The status patch in the object's own vocabulary."""
        now = rfc3339(self.clock.wall())
        current = ((raw.get("status") or {}).get("conditions") or []) if isinstance(raw, dict) else []
        if ref.group == "scheduling.x-k8s.io":
            return {"status": {"phase": "Scheduled" if scheduled else "Pending", "scheduled": bound}}
        if ref.group == "scheduling.volcano.sh":
            return _volcano_status(current, scheduled, message, now, self.identity)
        generation = int((raw.get("metadata") or {}).get("generation", 1)) if isinstance(raw, dict) else 1
        return _upstream_status(ref, current, scheduled, message, now=now, generation=generation)


def _volcano_status(current: list[Any], scheduled: bool, message: str, now: str, identity: str) -> dict[str, Any]:
    """Volcano's phase and its ``Scheduled`` / ``Unschedulable`` conditions."""
    condition = {
        "type": "Scheduled" if scheduled else "Unschedulable",
        "status": "True",
        "transitionID": identity,
        "lastTransitionTime": now,
        "reason": "Scheduled" if scheduled else "NotEnoughResources",
        "message": message,
    }
    others = [c for c in current if c.get("type") not in ("Scheduled", "Unschedulable")]
    return {"status": {"phase": "Running" if scheduled else "Pending", "conditions": [*others, condition]}}


def _upstream_status(
    ref: ObjectRef, current: list[Any], scheduled: bool, message: str, *, now: str, generation: int
) -> dict[str, Any]:
    """``PodGroupInitiallyScheduled`` (or the composite's), terminal once True; ``Scheduled`` for Phalanx's own."""
    kind = {
        ("scheduling.k8s.io", "PodGroup"): "PodGroupInitiallyScheduled",
        ("scheduling.k8s.io", "CompositePodGroup"): "CompositePodGroupInitiallyScheduled",
    }.get((ref.group, ref.kind), "Scheduled")
    previous = next((c for c in current if c.get("type") == kind), None)
    if previous is not None and previous.get("status") == "True" and kind.endswith("InitiallyScheduled"):
        return {"status": {"conditions": current}}
    condition = {
        "type": kind,
        "status": "True" if scheduled else "False",
        "reason": "Scheduled" if scheduled else UNSCHEDULABLE,
        "message": message,
        "lastTransitionTime": now,
        "observedGeneration": generation,
    }
    return {"status": {"conditions": [*(c for c in current if c.get("type") != kind), condition]}}
