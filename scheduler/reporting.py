"""Telling people what Phalanx decided: Events, the PodScheduled condition, group status.

Decisions are recorded here synchronously (no waiting on the API inside a scheduling cycle) and written
by :meth:`Reporter.run`, a task of its own, every ``reporting.statusIntervalSeconds``, and news (new Events,
a gang now scheduled) at once, ``reporting.concurrency`` writes in flight:

- the ``PodScheduled=False`` condition on each pending pod, reason ``Unschedulable`` when room is
  missing (cluster-autoscaler reads it) or ``SchedulerError`` when the gang's definition must be fixed,
  written only when its message changes;
- ``events.k8s.io/v1`` Events, aggregated: the same reason and note (its numbers aside) on the same
  object is one Event whose ``series.count`` grows, updated at most every
  ``reporting.eventIntervalSeconds``. Each is named
  as client-go's event recorder names them (``<object>.<hex nanoseconds>``) and its fields are kept
  within what the API server validates (a note of at most 1024 bytes);
- the status of group objects, in each source's own vocabulary and only in fields its published CRD
  has (scheduler-plugins phase and scheduleStartTime, Volcano phase and conditions,
  ``PodGroupInitiallyScheduled`` upstream), latest value only; through the status subresource, or
  through the object itself when the CRD has none (Volcano's). Fields the server drops anyway (an
  older CRD) are logged once.

A write that fails for a transient reason (429, 5xx, a timeout, a server that does not answer) is retried
at a later flush, and all writes pause first: 1 s, doubling up to ``_LONGEST_PAUSE`` while they keep
failing (with the server gone, every flush tried every Event again and logged each failure: 40% of a core
for as long as it was gone). One the server refuses for good (invalid, forbidden) is logged and dropped,
never retried in a loop. Nothing here reaches the scheduling cycle.
"""

from __future__ import annotations

import functools
import itertools
import re
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskStatus

from scheduler.clock import Clock
from scheduler.decision import Reason, Subject
from scheduler.gangs import GangSpec, ObjectRef
from scheduler.gangs.groups import GroupStatus
from scheduler.gangs.sources import source_api
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, NotFound, PortError, Throttled
from scheduler.ports.port import CORE_EVENTS, PODS, ApiResource, ClusterPort
from scheduler.ratelimit import TokenBucket
from scheduler.settings import ReportingSettings
from scheduler.state import ClusterView

log = structlog.get_logger("phalanx.reporting")

#: What the API server accepts in an Event (events.k8s.io/v1 validation): the note in bytes, the others in characters.
_NOTE_BYTES = 1024
_FIELD_LIMIT = 128
_EVENTS_TRACKED = 4096
#: How many status intervals the interval's writes may wait for binds in flight to finish.
_BINDS_FIRST = 10
#: How long writes pause after a transient failure: the first pause, and the longest one they double to.
_FIRST_PAUSE = 1.0
_LONGEST_PAUSE = 30.0
_COUNTS = re.compile(r"\d+(?:\.\d+)?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class _Dropped:
    """``_attempt``'s answer when the server refused a write for good: drop it, do not retry."""


_DROPPED = _Dropped()


def micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(regarding: str, nanoseconds: int) -> str:
    """client-go's name for an Event: the object's name and the time in hex nanoseconds; a UUID when that
    is not a valid object name (too long for one: a 253-character pod name has no room for the suffix)."""
    name = f"{regarding}.{nanoseconds:x}"
    return name if len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) else str(uuid.uuid4())


def clip_bytes(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8 (ending in "..." when cut), never inside a character."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode(errors="ignore") + "..."


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
        state: ClusterView,
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
        self._groups: dict[ObjectRef, tuple[bool, str, bool]] = {}  # wanted: scheduled?, message, waiting?
        self._groups_written: dict[ObjectRef, tuple[bool, str, bool]] = {}
        self._resources: dict[tuple[str, str], ApiResource] = {}  # (group, kind) -> the resource watched
        self._pruned: set[tuple[str, str, str]] = set()  # (group, kind, field) already reported as dropped
        self._last_nanoseconds = 0
        self._news: anyio.Event | None = None  # set when something is recorded that :meth:`run` writes at once
        self._binds_in_flight = 0
        self._binds_done: anyio.Event | None = None
        self._paused_until = -1e18  # monotonic: writes wait until then after a transient failure
        self._pause = _FIRST_PAUSE

    def watching(self, resources: Iterable[ApiResource]) -> None:
        """The group-object resources discovery chose: which have a status, and whether it is written through
        ``/status`` or through the object itself."""
        for resource in resources:
            where = (resource.group, resource.kind)
            api = source_api(*where)
            if api is None or api.status is None:
                continue  # not a group object, or one without a status Phalanx writes (the upstream Workload)
            if resource.status_subresource or api.status_in_object:
                self._resources[where] = resource
            if not resource.status_subresource and api.status_in_object:
                log.info(
                    "the CRD has no status subresource; its status is written through the object itself",
                    resource=str(resource),
                )

    # -- recording decisions (synchronous, cheap) -------------------------------------------------

    def pending(self, pods: Iterable[str], reason: str, message: str) -> None:
        """Every pod listed stays pending for ``message``."""
        for pod in pods:
            self._conditions[pod] = (reason, message)

    def event(
        self, subject: Subject | None, reason: Reason, note: str, *, type: str = "Warning", action: str = "Scheduling"
    ) -> None:
        if subject is None:
            return
        note = clip_bytes(note, _NOTE_BYTES)
        # Counts in a note change as a gang gathers members or room frees ("waits for 26 member(s)", then
        # "3"): keyed without them, as client-go's aggregator keys similar events, so that one series
        # counts them, and says the latest note.
        key = (subject, reason, _COUNTS.sub("#", note))
        found = self._events.pop(key, None)
        if found is None:
            found = _Event(subject, reason, note, type, action)
        else:
            found.count += 1
            found.note = note
        self._events[key] = found  # re-inserted: the dict is kept in order of last occurrence
        self._due.add(key)
        self._tell()
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

    def gang(self, objects: Sequence[ObjectRef], pods: Sequence[str]) -> Subject | None:
        """What an Event about a whole gang is about: its (root) group object, else its first pod."""
        if objects:
            return self.group_subject(objects[0])
        return self.pod_subject(pods[0]) if pods else None

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
            Reason.SCHEDULED,
            f"Successfully assigned {pod} to {node}",
            type="Normal",
            action="Binding",
        )

    def group(self, spec: GangSpec, *, scheduled: bool, message: str, waiting: bool = False) -> None:
        """The gang's group objects' status: ``scheduled`` once its minimum is placed; ``waiting`` when what it
        lacks is members, not room (each source then says only what is not about room)."""
        for ref in spec.objects:
            self._groups[ref] = (scheduled, message, waiting)
        if scheduled and spec.objects:
            self._tell()

    def _tell(self) -> None:
        if self._news is not None:
            self._news.set()

    def binding(self, in_flight: int) -> None:
        """The binder's gangs in flight: writes wait until there are none (the interval's for ten intervals at
        most)."""
        self._binds_in_flight = in_flight
        if not in_flight and self._binds_done is not None:
            self._binds_done.set()

    def why_pending(self, pod: str) -> tuple[str, str] | None:
        """The (reason, message) of the pod's latest ``PodScheduled=False`` decision, if it has one."""
        return self._conditions.get(pod)

    # -- writing --------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Everything due every ``statusIntervalSeconds``; in between, what is news (new Events, gangs now
        scheduled). Binds go first: news waits until no bind is in flight, and so does the interval's
        batch, for at most ``_BINDS_FIRST`` intervals. A bound gang's Events and status then follow its
        binds at once, as kube-scheduler's do, instead of up to a second later, without slowing the binds
        of the gangs after it (a burst of 2,000 binds went 21% faster without the Events written among them);
        pending pods' conditions, whose messages change as a gang gathers, keep the interval's batching."""
        self._news = anyio.Event()
        task_status.started()
        interval = self.settings.status_interval_seconds
        tick = anyio.current_time() + interval
        while True:
            with anyio.move_on_after(max(0.0, tick - anyio.current_time())):
                await self._news.wait()
                # Let the tasks that are ready record theirs too. No timer: under ``simulate``'s virtual clock
                # a timer here made the order of writes, and so the run, depend on the machine's speed.
                await anyio.lowlevel.checkpoint()
                await self._binds_finished()
            self._news = anyio.Event()
            if anyio.current_time() >= tick:
                with anyio.move_on_after(interval * _BINDS_FIRST):
                    await self._binds_finished()
                tick = anyio.current_time() + interval
                await self.flush()
            else:
                await self.flush(news_only=True)

    async def _binds_finished(self) -> None:
        while self._binds_in_flight:
            self._binds_done = anyio.Event()
            await self._binds_done.wait()

    async def flush(self, *, news_only: bool = False) -> None:
        """Write what is due (with ``news_only``, only Events and the status of gangs now scheduled),
        ``reporting.concurrency`` writes in flight: one at a time, a thousand Events took four seconds, each
        waiting on the answer to the one before."""
        if self.clock.monotonic() < self._paused_until:
            return  # nothing would go out: not even the bodies are built
        conditions = () if news_only else self._condition_writes()
        writes = [*conditions, *self._event_writes(), *self._group_writes(scheduled_only=news_only)]
        if not writes:
            return
        due = iter(writes)

        async def writing() -> None:  # one of ``concurrency`` tasks taking the writes in turn: no task per write
            for write in due:
                await write()

        async with anyio.create_task_group() as group:
            for _ in range(min(self.settings.concurrency, len(writes))):
                group.start_soon(writing)

    async def _attempt(self, kind: str, what: str, write: Coroutine[Any, Any, Any]) -> Any:
        """Run one write under the rate limit. Returns what the server answered; None when the write failed
        for a reason that passes (it is retried at a later flush); ``_DROPPED`` when it never can succeed
        as it is (the object is gone, or the server refused it: logged, and not retried). While writes pause
        after a transient failure, it returns None at once."""
        if self.clock.monotonic() < self._paused_until:
            write.close()
            return None
        await self.limiter.take()
        if self.clock.monotonic() < self._paused_until:  # paused while this waited for its turn
            write.close()
            return None
        try:
            result = await write
        except NotFound:
            return _DROPPED  # the object is gone: nothing left to tell
        except Conflict:
            return None  # changed meanwhile, or an Event name taken (another replica, the same nanosecond)
        except PortError as error:
            if error.transient:
                self._pause_writes(kind, what, error)
                return None
            log.warning(
                "write refused by the API server; not retried",
                kind=kind,
                object=what,
                code=error.code,
                error=str(error)[:300],
            )
            self.metrics.api_write_errors.labels(kind, str(error.code)).inc()
            return _DROPPED
        self.metrics.api_writes.labels(kind).inc()
        self._pause = _FIRST_PAUSE
        return {} if result is None else result

    def _pause_writes(self, kind: str, what: str, error: PortError) -> None:
        """After a transient failure: no write until the pause ends (the writes in flight fail alone)."""
        now = self.clock.monotonic()
        if now < self._paused_until:
            return
        seconds = max(self._pause, error.retry_after) if isinstance(error, Throttled) else self._pause
        self._paused_until = now + seconds
        log.warning(
            "write failed; Events and status wait, then are retried",
            kind=kind,
            object=what,
            error=str(error)[:200],
            seconds=seconds,
        )
        self._pause = min(self._pause * 2, _LONGEST_PAUSE)

    def _condition_writes(self) -> Iterator[Callable[[], Awaitable[None]]]:
        for pod, wanted in list(self._conditions.items()):
            if self._written.get(pod) == wanted:
                continue
            if self.state.bound_node(pod) is not None or not self.state.exists(pod):
                self._conditions.pop(pod, None)
                continue
            yield functools.partial(self._write_condition, pod, wanted)

    async def _write_condition(self, pod: str, wanted: tuple[str, str]) -> None:
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
        answer = await self._attempt("condition", pod, write)
        if answer is _DROPPED:
            self._conditions.pop(pod, None)
        elif answer is not None:
            self._written[pod] = wanted

    def _event_writes(self) -> Iterator[Callable[[], Awaitable[None]]]:
        now = self.clock.monotonic()
        for key in list(self._due):
            event = self._events.get(key)
            if event is None:
                self._due.discard(key)
            elif event.name is None or now - event.last_write >= self.settings.event_interval_seconds:
                yield functools.partial(self._write_event, key, event, now)

    async def _write_event(self, key: tuple[Subject, str, str], event: _Event, now: float) -> None:
        if event.name is None:
            answer = await self._create_event(event)
            if answer is _DROPPED:
                self._events.pop(key, None)
            elif answer is not None:
                event.name = str((answer.get("metadata") or {}).get("name") or "") or None
                # The new Event stands for one occurrence; those recorded before it was written are
                # counted into its series at the next write.
                event.written_count, event.last_write = 1, now
                if event.name is None:
                    self._events.pop(key, None)
        else:
            wall = self.clock.wall()
            # The series for events.k8s.io readers; count and lastTimestamp for kubectl's columns.
            series = {
                "series": {"count": event.count, "lastObservedTime": micro_time(wall)},
                "count": event.count,
                "lastTimestamp": rfc3339(wall),
                "message": event.note,  # the latest (the core API lets it change, as client-go's recorder does)
            }
            answer = await self._attempt(
                "event", event.reason, self.port.patch(CORE_EVENTS, event.subject.namespace, event.name, series)
            )
            if answer is _DROPPED:
                event.name = None  # the Event expired (they live an hour): the next occurrence starts a new one
                event.count = event.written_count = 0
            elif answer is not None:
                event.written_count, event.last_write = event.count, now
        if event.count == event.written_count:
            self._due.discard(key)

    async def _create_event(self, event: _Event) -> Any:
        body = self._event_body(event)  # named afresh on every attempt: a name taken once is not tried again
        return await self._attempt("event", event.reason, self.port.create(CORE_EVENTS, event.subject.namespace, body))

    def _nanoseconds(self) -> int:
        """The wall clock in nanoseconds, strictly increasing, so that two Events never get one name."""
        self._last_nanoseconds = max(int(self.clock.wall() * 1e9), self._last_nanoseconds + 1)
        return self._last_nanoseconds

    def _event_body(self, event: _Event) -> dict[str, Any]:
        """A core/v1 Event with the fields of both generations: ``eventTime``, ``reportingComponent``,
        ``reportingInstance`` and ``action`` (what events.k8s.io readers see), and ``firstTimestamp``,
        ``lastTimestamp``, ``count`` and ``source`` (what ``kubectl get events`` sorts and shows; the
        events.k8s.io API refuses them on create, the core API takes both)."""
        subject = event.subject
        wall = self.clock.wall()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(subject.name, self._nanoseconds()), "namespace": subject.namespace},
            "eventTime": micro_time(wall),
            "firstTimestamp": rfc3339(wall),
            "lastTimestamp": rfc3339(wall),
            "count": 1,
            "source": {"component": self.settings.controller},
            "reportingComponent": self.settings.controller,
            "reportingInstance": self.identity[:_FIELD_LIMIT],
            "action": event.action[:_FIELD_LIMIT],
            "reason": event.reason[:_FIELD_LIMIT],
            "involvedObject": {
                "apiVersion": subject.api_version,
                "kind": subject.kind,
                "namespace": subject.namespace,
                "name": subject.name,
                "uid": subject.uid,
            },
            "message": event.note,
            "type": event.type,
        }

    def _group_writes(self, *, scheduled_only: bool = False) -> Iterator[Callable[[], Awaitable[None]]]:
        for ref, wanted in list(self._groups.items()):
            if self._groups_written.get(ref) == wanted or (scheduled_only and not wanted[0]):
                continue
            group = self.state.index.group(ref)
            resource = self._resources.get((ref.group, ref.kind))
            if group is None or resource is None:
                self._groups.pop(ref, None)
                continue
            yield functools.partial(self._write_group, ref, wanted, group.raw, resource)

    async def _write_group(
        self, ref: ObjectRef, wanted: tuple[bool, str, bool], raw: Any, resource: ApiResource
    ) -> None:
        patch = self._group_status(ref, raw, *wanted)
        if resource.status_subresource:
            write = self.port.patch_status(resource, ref.namespace, ref.name, patch)
        else:
            write = self.port.patch(resource, ref.namespace, ref.name, patch)
        answer = await self._attempt("status", str(ref), write)
        if answer is _DROPPED:
            self._groups.pop(ref, None)
        elif answer is not None:
            self._groups_written[ref] = wanted
            self._check_kept(ref, patch["status"], answer.get("status"))

    def _check_kept(self, ref: ObjectRef, written: Mapping[str, Any], stored: Any) -> None:
        """Log, once per field, status fields the server dropped: the installed CRD's schema lacks them."""
        stored = stored if isinstance(stored, Mapping) else {}
        for field_name in sorted(set(written) - set(stored)):
            if written[field_name] in ([], {}, None):
                continue  # an empty value is left out of what the server stores, whatever the schema
            if (ref.group, ref.kind, field_name) not in self._pruned:
                self._pruned.add((ref.group, ref.kind, field_name))
                log.warning(
                    "the installed CRD has no such status field; the API server drops what Phalanx writes there",
                    resource=f"{ref.kind}.{ref.group}",
                    field=f"status.{field_name}",
                    hint="install the CRD as its project publishes it (README: Input formats)",
                )

    def _group_status(self, ref: ObjectRef, raw: Any, scheduled: bool, message: str, waiting: bool) -> dict[str, Any]:
        """The status patch in the object's own vocabulary, in the fields its published CRD has."""
        api = source_api(ref.group, ref.kind)
        assert api is not None and api.status is not None, ref
        status = (raw.get("status") or {}) if isinstance(raw, dict) else {}
        generation = int((raw.get("metadata") or {}).get("generation", 1)) if isinstance(raw, dict) else 1
        return api.status(
            GroupStatus(
                ref=ref,
                current=status if isinstance(status, Mapping) else {},
                generation=generation,
                scheduled=scheduled,
                message=message,
                waiting=waiting,
                now=rfc3339(self.clock.wall()),
                identity=self.identity,
                version=served.version if (served := self._resources.get((ref.group, ref.kind))) else "",
            )
        )
