"""The API writes of a preemption, off the scheduling cycle (as the binder is for binds).

For each victim, as kube-scheduler does: the ``DisruptionTarget`` condition (reason
``PreemptionByScheduler``, so that the pod's controller and its users learn why it goes), then a DELETE
with the pod's own grace period and its uid as precondition (a pod recreated under the same name is not
touched), then a Normal ``Preempted`` Event on the pod and, once per gang, on its group object. Each
preemptor pod gets ``status.nominatedNodeName``, which ``kubectl get pods -o wide`` shows.

Once begun, an eviction is finished: every victim of a job is marked before any is deleted, so that if
this process stops half way (its lease lost), the marks tell the next leader which units were going
(``evictions.py`` hands them back here). A write that may still pass (5xx, 429, timeouts, a 409 race) is
retried with backoff for as long as it takes; a DELETE the server refuses for good (403 from RBAC or an
admission policy) is told as a Warning on the preemptor and on the victim's gang, counted, and tried
again every ``preemption.refusedRetrySeconds``, since an operator may lift the refusal. A victim that is
gone, or replaced by another pod under its name, needs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Literal

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.clock import Clock
from scheduler.decision import Reason
from scheduler.gangs import GangKey, ObjectRef
from scheduler.jobs import Jobs
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, Invalid, NotFound, PortError, Throttled
from scheduler.ports.port import PODS, ClusterPort
from scheduler.preemption.evictions import EvictJob, Victim, victim_message
from scheduler.ratelimit import TokenBucket
from scheduler.reporting import Reporter, rfc3339
from scheduler.state import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER

log = structlog.get_logger("phalanx.preemption")

_FIRST_RETRY, _LAST_RETRY = 0.2, 10.0
#: What kube-apiserver's validation says when ``nominatedNodeName`` is written on a bound pod.
_ALREADY_BOUND = "already bound to a node"


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
        refused_retry_seconds: float = 60.0,
    ) -> None:
        self.port = port
        self.clock = clock
        self.limiter = limiter
        self.reporter = reporter
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self.refused_retry_seconds = refused_retry_seconds
        self._jobs = Jobs("evictor", self._evict)
        #: Told of each victim the API accepted to delete, and its preemptor (``simulate`` reports them).
        self.on_evicted: Callable[[str, GangKey], None] | None = None

    def submit(self, job: EvictJob) -> None:
        """Queue a preemption's writes (only while :meth:`run` runs, i.e. while leading)."""
        self._jobs.submit(job)

    @property
    def idle(self) -> bool:
        """No preemption's writes are queued or under way."""
        return self._jobs.idle

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self._jobs.run(task_status=task_status)

    async def _evict(self, job: EvictJob) -> None:
        there: list[Victim] = []
        evicted: list[Victim] = []

        async def mark(victim: Victim) -> None:
            if await self._mark(job, victim):
                there.append(victim)

        async def delete(victim: Victim) -> None:
            if await self._delete(job, victim):
                evicted.append(victim)

        async with anyio.create_task_group() as group:  # every victim marked going before any is deleted
            for victim in job.victims:
                group.start_soon(mark, victim)
        async with anyio.create_task_group() as group:  # the victims are going: the room is named meanwhile
            for victim in there:
                group.start_soon(delete, victim)
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

        async def nominate() -> None:
            try:
                await self.port.patch_status(PODS, namespace, name, patch)
            except Invalid as error:
                # The preemptor was bound first (some victims went quickly): there is nothing to name any more.
                if _ALREADY_BOUND not in str(error):
                    raise
                log.info("nominatedNodeName not written: the pod is bound already", pod=pod)

        await self._write("nominate", pod, nominate)

    async def _mark(self, job: EvictJob, victim: Victim) -> bool:
        """Write the victim's ``DisruptionTarget`` condition; False when the pod is gone (nothing to delete).
        A condition the server refuses for good does not stop the DELETE: the rest of the unit is going."""
        namespace, name = victim.pod.split("/", 1)
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER,
            "message": victim_message(self.scheduler_name, job.preemptor, job.domain),
            "lastTransitionTime": rfc3339(self.clock.wall()),
        }
        # The uid makes the patch a precondition as the DELETE's is: the API refuses it (uid is immutable) on
        # another pod made under the same name since, which must not be marked a victim.
        patch = (
            {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}}
            if victim.uid
            else {"status": {"conditions": [condition]}}
        )
        marked = await self._write(
            "disruption-target", victim.pod, lambda: self.port.patch_status(PODS, namespace, name, patch)
        )
        if isinstance(marked, str) and await self._replaced(namespace, name, victim.uid):
            log.info("preemption write skipped: the pod was replaced", kind="disruption-target", pod=victim.pod)
            return False
        return marked is not None

    async def _delete(self, job: EvictJob, victim: Victim) -> bool:
        """Delete one victim, for as long as the API may still accept it; True once it has."""
        namespace, name = victim.pod.split("/", 1)

        def refused(said: str) -> None:
            # The unit is now partly running and the preemptor waits for a pod that does not go: say so where
            # the operator looks, on both gangs, not only in the log.
            self.metrics.preemption_refused.inc()
            retry = f"tried again every {self.refused_retry_seconds:g} s (preemption.refusedRetrySeconds)"
            self.reporter.event(
                job.subject,
                Reason.FAILED_PREEMPTION,
                f"Could not delete {victim.pod} to make room in {job.domain} ({said}); {retry}. The gang is "
                "evaluated again after preemption.nominationTimeoutSeconds.",
                action="Preempting",
            )
            self.reporter.event(
                self.reporter.group_subject(victim.group)
                if victim.group is not None
                else self.reporter.pod_subject(victim.pod),
                Reason.FAILED_PREEMPTION,
                f"Preempted by gang {job.preemptor}, but the API server refused to delete {victim.pod} ({said}): "
                f"the rest of its unit is going, so it runs below its minimum until this pod goes too; {retry}.",
                action="Preempting",
            )

        deleted = await self._write(
            "delete",
            victim.pod,
            lambda: self.port.delete(PODS, namespace, name, uid=victim.uid),
            replaced=lambda: self._replaced(namespace, name, victim.uid),
            refused=refused,
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
        refused: Callable[[str], None] | None = None,
    ) -> Literal[True] | str | None:
        """Run one write under the rate limit until it is applied, retrying what may pass (5xx, 429 after its
        Retry-After, timeouts, a 409 that was a race on the server) with backoff. A 409 of a write with a
        precondition asks ``replaced`` whether the pod is another one now. True when applied; None when the
        pod is gone or was replaced. A refusal for good (403, 400, 422) is returned as what the server said,
        unless the write must go through (``refused`` given): then ``refused`` is told once and the write
        tried again every ``refused_retry_seconds``."""
        delay = _FIRST_RETRY
        told = False
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
                if error.transient or isinstance(error, Conflict):
                    wait = max(delay, error.retry_after) if isinstance(error, Throttled) else delay
                    log.info("preemption write failed; retrying", kind=kind, pod=pod, code=error.code, retry_in_s=wait)
                    await anyio.sleep(wait)
                    delay = min(delay * 2, _LAST_RETRY)
                    continue
                said = f"{error.code}: {str(error)[:300]}"
                self.metrics.api_write_errors.labels(kind, str(error.code)).inc()
                if refused is None:
                    log.warning("preemption write refused", kind=kind, pod=pod, code=error.code, error=str(error)[:300])
                    return said
                if not told:
                    told = True
                    log.warning(
                        "preemption write refused; retrying it slowly",
                        kind=kind,
                        pod=pod,
                        code=error.code,
                        error=str(error)[:300],
                        retry_in_s=self.refused_retry_seconds,
                    )
                    refused(said)
                await anyio.sleep(self.refused_retry_seconds)
                delay = _FIRST_RETRY
                continue
            self.metrics.api_writes.labels(kind).inc()
            return True
