"""The API writes of a preemption, off the scheduling cycle (as the binder is for binds).

For each victim, as kube-scheduler does: first the ``DisruptionTarget`` condition (reason
``PreemptionByScheduler``, so that the pod's controller and its users learn why it goes), then a DELETE
with the pod's own grace period and its uid as precondition (a pod recreated under the same name is not
touched), then a Normal ``Preempted`` Event on the pod and, once per gang, on its group object. Each
preemptor pod gets ``status.nominatedNodeName``, which ``kubectl get pods -o wide`` shows.

A victim that is already gone needs nothing more; a write the server refuses is logged and counted, and
the nomination's timeout lets the preemptor be evaluated again.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.clock import Clock
from scheduler.gangs import GangKey, ObjectRef
from scheduler.jobs import Jobs
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, NotFound, PortError
from scheduler.ports.port import PODS, ClusterPort
from scheduler.ratelimit import TokenBucket
from scheduler.reporting import Reason, Reporter, Subject, rfc3339

log = structlog.get_logger("phalanx.preemption")

DISRUPTION_TARGET = "DisruptionTarget"
#: How long a write that may pass is retried; a victim left running would leave its unit half evicted.
RETRY_SECONDS = 120.0
_FIRST_RETRY, _LAST_RETRY = 0.2, 10.0
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


@dataclass(frozen=True, slots=True)
class Victim:
    pod: str
    uid: str
    #: The victim's group object, if its gang has one (its Preempted Event goes there too).
    group: ObjectRef | None


@dataclass(frozen=True, slots=True)
class EvictJob:
    preemptor: GangKey
    victims: tuple[Victim, ...]
    #: (pod, node) of the preemptor's pods, for ``status.nominatedNodeName`` ("" clears it).
    nominated: tuple[tuple[str, str], ...]
    #: Where the room is made ("rack b0-r3"), for the messages.
    domain: str
    #: What the preemptor's Events are about (its group object or first pod); told when a victim could
    #: not be deleted.
    subject: Subject | None = None


class Evictor:
    def __init__(
        self,
        *,
        port: ClusterPort,
        clock: Clock,
        limiter: TokenBucket,
        reporter: Reporter,
        metrics: Metrics,
        scheduler_name: str,
    ) -> None:
        self.port = port
        self.clock = clock
        self.limiter = limiter
        self.reporter = reporter
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self._jobs = Jobs("evictor", self._evict)
        #: Told of each victim the API accepted to delete, and its preemptor (``simulate`` reports them).
        self.on_evicted: Callable[[str, GangKey], None] | None = None

    def submit(self, job: EvictJob) -> None:
        """Queue a preemption's writes (only while :meth:`run` runs, i.e. while leading)."""
        self._jobs.submit(job)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self._jobs.run(task_status=task_status)

    async def _evict(self, job: EvictJob) -> None:
        evicted: list[Victim] = []

        async def evict(victim: Victim) -> None:
            if await self._evict_one(job, victim):
                evicted.append(victim)

        async with anyio.create_task_group() as group:  # the victims are marked going first, then the room named
            for victim in job.victims:
                group.start_soon(evict, victim)
        async with anyio.create_task_group() as group:
            for pod, node in job.nominated:
                group.start_soon(self._nominate, pod, node)
        told: set[ObjectRef] = set()
        for victim in evicted:
            if victim.group is not None and victim.group not in told:
                told.add(victim.group)
                count = sum(1 for other in evicted if other.group == victim.group)
                self.reporter.event(
                    self.reporter.group_subject(victim.group),
                    Reason.PREEMPTED,
                    f"{count} of its pods preempted by gang {job.preemptor} to make room in {job.domain}",
                    type="Normal",
                    action="Preempting",
                )

    async def _nominate(self, pod: str, node: str) -> None:
        """Set the pod's ``status.nominatedNodeName`` (clear it when ``node`` is empty)."""
        namespace, name = pod.split("/", 1)
        patch = {"status": {"nominatedNodeName": node or None}}
        await self._write("nominate", pod, lambda: self.port.patch_status(PODS, namespace, name, patch))

    async def _evict_one(self, job: EvictJob, victim: Victim) -> bool:
        """Mark and delete one victim; True once the API has accepted the DELETE."""
        namespace, name = victim.pod.split("/", 1)
        message = f"{self.scheduler_name}: preempted by gang {job.preemptor} to make room in {job.domain}"
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER,
            "message": message,
            "lastTransitionTime": rfc3339(self.clock.wall()),
        }
        patch = {"status": {"conditions": [condition]}}
        marked = await self._write(
            "disruption-target", victim.pod, lambda: self.port.patch_status(PODS, namespace, name, patch)
        )
        if marked is None:
            return False  # gone or replaced: nothing to delete
        # Deleted even when the condition could not be written: the rest of its unit is going, and a unit
        # left half running would be a gang below its minimum.
        deleted = await self._write(
            "delete",
            victim.pod,
            lambda: self.port.delete(PODS, namespace, name, uid=victim.uid),
            replaced=lambda: self._replaced(namespace, name, victim.uid),
        )
        if isinstance(deleted, str):
            # The unit may now be half evicted, and the preemptor waits for a pod that does not go: say so
            # where the operator looks (the pending gang), not only in the log.
            self.reporter.event(
                job.subject,
                Reason.FAILED_PREEMPTION,
                f"Could not delete {victim.pod} to make room in {job.domain} ({deleted}); the gang is "
                "evaluated again after preemption.nominationTimeoutSeconds.",
                action="Preempting",
            )
        if deleted is not True:
            return False
        if self.on_evicted is not None:
            self.on_evicted(victim.pod, job.preemptor)
        self.reporter.event(
            self.reporter.pod_subject(victim.pod),
            Reason.PREEMPTED,
            f"Preempted by gang {job.preemptor} to make room in {job.domain}",
            type="Normal",
            action="Preempting",
        )
        return True

    async def _replaced(self, namespace: str, name: str, uid: str) -> bool:
        """After a 409 on the uid-guarded DELETE: whether the pod under that name is another one (or gone)."""
        try:
            current = await self.port.get(PODS, namespace, name)
        except NotFound:
            return True
        except PortError:
            return False  # cannot tell: try the DELETE again, its precondition keeps it safe
        return str((current.get("metadata") or {}).get("uid") or "") != uid

    async def _write(
        self,
        kind: str,
        pod: str,
        write: Callable[[], Coroutine[Any, Any, Any]],
        *,
        replaced: Callable[[], Coroutine[Any, Any, bool]] | None = None,
    ) -> Literal[True] | str | None:
        """Run one write under the rate limit, retrying what may pass (5xx, 429, timeouts, a 409 that was a
        race on the server) with backoff for up to ``RETRY_SECONDS``. A 409 of a write with a precondition
        asks ``replaced`` whether the pod is another one now. True when applied; None when the pod is gone
        or was replaced; what the server said when it refused for good or kept failing (logged, counted)."""
        delay, waited = _FIRST_RETRY, 0.0
        while True:
            await self.limiter.take()
            try:
                await write()
            except NotFound:
                log.info("preemption write skipped: the pod is gone", kind=kind, pod=pod)
                return None
            except PortError as error:
                if isinstance(error, Conflict) and replaced is not None and await replaced():
                    log.info("preemption write skipped: the pod was replaced", kind=kind, pod=pod)
                    return None
                self.metrics.api_write_errors.labels(kind, str(error.code)).inc()
                retryable = error.transient or isinstance(error, Conflict)
                if not retryable or waited >= RETRY_SECONDS:
                    log.warning("preemption write failed", kind=kind, pod=pod, code=error.code, error=str(error)[:300])
                    return f"{error.code}: {str(error)[:300]}"
                await anyio.sleep(delay)
                waited += delay
                delay = min(delay * 2, _LAST_RETRY)
                continue
            self.metrics.api_writes.labels(kind).inc()
            return True
