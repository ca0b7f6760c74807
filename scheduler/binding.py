"""The binding cycle: one ``pods/binding`` request per pod, many in flight, never half a gang by mistake.

A permitted gang arrives as a :class:`BindJob`. For each job:

1. Before binding, and again right before each request is sent (with the latest state), the nodes are
   checked: if another scheduler used one meanwhile (its bound and assumed requests now exceed
   allocatable), or a member is gone, that pod is not bound; what the gang assumed and did not bind
   is forgotten and it is placed again (around any member already bound).
2. The first pod is bound alone. If the API refuses it for a reason that is not transient (RBAC, an
   admission webhook, a pod the server will not bind yet), nothing of the gang is bound, and the gang
   backs off with an Event, like any failed attempt: a refusal that will not change by itself is never
   answered by placing the gang again at once. A systematic refusal therefore never leaves a gang half
   bound, and never loops.
3. The others are bound concurrently, under ``binding.concurrency`` requests in flight and the shared
   write rate limit. Failures (429, 5xx and timeouts, but refusals too: part of the gang is bound, so
   its room must not be given up) are retried with backoff (``Retry-After`` respected) for as long as
   the pod exists, each refusal with an Event. A pod deleted meanwhile is dropped and the gang is
   re-evaluated at once: bound members stay bound (Phalanx never deletes or evicts pods), the rest is
   placed again around them.

A 409 is checked against the pod itself: bound where we asked (an earlier attempt succeeded but its
answer was lost) is success; gone, recreated or bound elsewhere is a lost member; still unbound is a
refusal (the API server answers 409 when a pod still has ``spec.schedulingGates``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.clock import Clock
from scheduler.decision import BindJob, Reason
from scheduler.devices.prebind import TAKE_BACK_SECONDS, PreBind
from scheduler.gangs import GangKey
from scheduler.jobs import Jobs
from scheduler.logs import since_start
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, NotFound, PortError, Throttled
from scheduler.ports.port import PODS, Binding, ClusterPort
from scheduler.ratelimit import Slots, TokenBucket
from scheduler.reporting import Reporter
from scheduler.settings import BindingSettings
from scheduler.state import ClusterView

log = structlog.get_logger("phalanx.binding")

_FIRST_RETRY = 0.2
_LAST_RETRY = 10.0


class BindResult(Enum):
    """How binding one pod ended."""

    BOUND = "bound"
    GONE = "gone"  # deleted, recreated, or bound elsewhere by someone else: place the rest again now
    CROWDED = "crowded"  # another scheduler used the node meanwhile: place again now
    REFUSED = "refused"  # not transient (configuration, the pod's own state): back off, as after any failure


#: The longest a lead's start lasts for the loop (``Binder.starting``), when no gang's binding ends sooner.
STARTING_S = 1.0

#: How many times in a row a gang may be given back to be placed again at once (its node found crowded at the
#: last moment, a member gone) before it backs off instead.
PLACE_AGAIN_IN_A_ROW = 5


class Binder:
    def __init__(
        self,
        *,
        port: ClusterPort,
        state: ClusterView,
        settings: BindingSettings,
        clock: Clock,
        limiter: TokenBucket,
        reporter: Reporter,
        metrics: Metrics,
        place_again: Callable[[GangKey, str], None],
        back_off: Callable[[GangKey, str], None],
    ) -> None:
        """``place_again(gang, why)`` hands a gang back to the scheduling cycle to be placed again at once (the
        cluster changed under it); ``back_off(gang, why)`` hands it back as a failed attempt (the API refused)."""
        self.port = port
        self.state = state
        self.settings = settings
        self.clock = clock
        self.limiter = limiter
        self.reporter = reporter
        self.metrics = metrics
        self._binds_written = metrics.api_writes.labels("bind")  # every pod bound counts: its series found once
        self.place_again = place_again
        self.back_off = back_off
        self._jobs = Jobs("binder", self._bind_gang)
        self.prebind = PreBind(
            port=port,
            devices=state.devices,
            limiter=limiter,
            clock=clock,
            timeout=settings.device_binding_timeout_seconds,
            pod_of=lambda pod: info.raw if (info := state.index.pod(pod)) is not None else None,
            own=state.own_allocatable,
            reaches=state.reaches,
        )
        #: Gangs given back to be placed again at once, and how many times in a row (until one binds).
        self._again: dict[GangKey, int] = {}
        self._slots = Slots(settings.concurrency)
        self.in_flight = 0
        #: Whether this process has bound a pod yet (the first bind is logged: how long the start took).
        self.bound_once = False
        #: Whether this lead's start is over: a gang's job ended (its binding answered, or it was given back
        #: before one was sent), or ``STARTING_S`` passed since the binder began (``_began``).
        self._past_start = False
        self._began = 0.0

    def submit(self, job: BindJob) -> None:
        """Queue a permitted gang for binding (only while :meth:`run` runs, i.e. while leading)."""
        if not job.pods:
            return
        self._jobs.submit(job)
        self.in_flight += 1
        self.reporter.binding(self.in_flight)

    def idle(self) -> bool:
        return self._jobs.idle

    def starting(self) -> bool:
        if not self._past_start and self.clock.monotonic() - self._began >= STARTING_S:
            self._past_start = True  # nothing bound for a while (nothing fits): no reason to yield so often
        return not self._past_start

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._past_start, self._began = False, self.clock.monotonic()
        try:
            await self._jobs.run(task_status=task_status)
        finally:
            self.in_flight = 0
            self.reporter.binding(0)

    async def _bind_gang(self, job: BindJob) -> None:
        # Every line logged while the gang binds names it, the tasks binding its pods' included.
        structlog.contextvars.bind_contextvars(gang=job.gang)
        try:
            await self._bind_gang_steps(job)
        finally:
            self._past_start = True
            self.in_flight -= 1
            self.reporter.binding(self.in_flight)

    async def _bind_gang_steps(self, job: BindJob) -> None:
        state = self.state
        requested = {name for pod, _ in job.pods if pod in state.assumed for name in state.assumed[pod].requests}
        crowded = state.overcommitted({node for _, node in job.pods}, requested)
        gone = [pod for pod, _ in job.pods if not state.exists(pod) or pod not in state.assumed]
        if crowded or gone:
            why = f"nodes {', '.join(sorted(crowded))} no longer have room" if crowded else f"{gone[0]} is gone"
            self._release(job, why)
            return
        # Claims of an earlier attempt not deleted or taken back yet: no Event, it passes by itself.
        waits = await self.prebind.ready([pod for pod, _ in job.pods], state.claims_of)
        if waits is not None:
            self._release(job, waits, refused=True)
            return
        claimed = await self.prebind.allocate(job.pods)
        if isinstance(claimed, str):
            # Told on the gang's first pod, as a refused first bind is: nothing of the gang is bound.
            self._refused_before_binding(job, claimed)
            return
        named = [claim for pod, _ in job.pods for claim in state.claims_of(pod)]
        try:
            failed = await self.prebind.attached(claimed, named)
        except BaseException:  # cancelled while drivers attach (the lead lost, a shutdown): nothing stays allocated
            with anyio.CancelScope(shield=True), anyio.move_on_after(TAKE_BACK_SECONDS):
                await self.prebind.take_back(self.prebind.as_known(claimed))
            raise
        if failed is not None:  # taken back and tried again later, as kube-scheduler's PreBind does
            with anyio.CancelScope(shield=True), anyio.move_on_after(TAKE_BACK_SECONDS):
                await self.prebind.take_back(self.prebind.as_known(claimed))
            self._refused_before_binding(job, failed)
            return
        bound: set[str] = set()
        then: list[Callable[[], None]] = []
        try:
            await self._bind_members(job, bound, then)
        finally:
            # Claims given devices for pods that did not bind (refused, gone, the lead lost) are taken back:
            # no claim stays allocated for a pod that is not running there. A shared claim stays with the
            # pods of it that did bind.
            unbound = [(write, version) for write, version in claimed if not bound.intersection(write.pods)]
            if unbound:
                with anyio.CancelScope(shield=True), anyio.move_on_after(TAKE_BACK_SECONDS):
                    await self.prebind.take_back(self.prebind.as_known(unbound))
        for release in then:  # only now may the gang be placed again: its next PreBind sees no stale claim
            release()

    async def _bind_members(self, job: BindJob, bound: set[str], then: list[Callable[[], None]]) -> None:
        """Bind the first pod alone, then the rest together; ``bound`` gets each pod bound, ``then`` what gives
        the gang back to be placed again (done once the claims of pods not bound are taken back)."""
        state = self.state
        first, rest = job.pods[0], job.pods[1:]
        result = await self._bind_one(*first, first=True)
        if result is not BindResult.BOUND:
            why, refused = f"binding {first[0]} was {result.value}", result is BindResult.REFUSED
            then.append(lambda: self._release(job, why, refused=refused))
            return
        bound.add(first[0])
        if not self.bound_once:
            self.bound_once = True
            log.info("first bind", pod=first[0], **since_start())
        results = [BindResult.BOUND]
        if rest:
            by_index: dict[int, BindResult] = {}

            async def bind_together(start: int) -> None:
                pods = rest[start : start + self._slots.total]
                tried = await self._bind_together(pods, bound)
                async with anyio.create_task_group() as retries:  # what did not end in one go, one by one
                    for i, ((pod, node), outcome) in enumerate(zip(pods, tried, strict=True), start):
                        if isinstance(outcome, BindResult):
                            by_index[i] = outcome
                        else:
                            retries.start_soon(retry, i, pod, node, outcome)

            async def retry(i: int, pod: str, node: str, wait: float) -> None:
                structlog.contextvars.bind_contextvars(pod=pod)  # a task of its own: its lines name its pod
                by_index[i] = await self._bind_one(pod, node, wait=wait)
                if by_index[i] is BindResult.BOUND:
                    bound.add(pod)  # at once: a cancellation meanwhile must not take its claims back

            async with anyio.create_task_group() as group:
                for start in range(0, len(rest), self._slots.total):
                    group.start_soon(bind_together, start)
            results += [by_index[i] for i in range(len(rest))]
        for (pod, node), result in zip(job.pods, results, strict=True):
            if result is BindResult.BOUND:
                self.reporter.scheduled(pod, node)
        if all(result is BindResult.BOUND for result in results):
            self._again.pop(job.gang, None)
            self.metrics.gang_latency.observe(max(0.0, self.clock.wall() - job.created))
            return
        lost = [pod for (pod, _), result in zip(job.pods, results, strict=True) if result is not BindResult.BOUND]

        def place_the_rest_again() -> None:
            for pod in lost:  # only now unplaced: a pod forgotten earlier could be placed before the take-back
                state.forget(pod)
            self.place_again(
                job.gang, "members were lost while binding; the rest is placed again around the bound ones"
            )

        then.append(place_the_rest_again)

    def _refused_before_binding(self, job: BindJob, why: str) -> None:
        """The gang's devices could not be written or attached: told on its first pod, as a refused first bind
        is (nothing of the gang is bound), and the gang backs off."""
        pod = job.pods[0][0]
        self.reporter.event(self.reporter.pod_subject(pod), Reason.FAILED_BINDING, why, action="Binding")
        self._release(job, why, refused=True)

    def _release(self, job: BindJob, why: str, *, refused: bool = False) -> None:
        for pod, _ in job.pods:
            self.state.forget(pod)
        again = 0 if refused else self._again.get(job.gang, 0) + 1
        if again > PLACE_AGAIN_IN_A_ROW:
            # The cluster cannot have changed under the gang this often in a row: what Phalanx counts and
            # what it checks disagree. Backing off turns such a disagreement into a slow retry, not a busy loop.
            log.warning("gang placed again too often in a row; it backs off", gang=job.gang, why=why, times=again)
            refused, why = True, f"{why} ({again} times in a row)"
        if refused:
            self._again.pop(job.gang, None)
            log.info("gang not bound; it backs off", gang=job.gang, why=why)
            self.back_off(job.gang, why)
        else:
            self._again[job.gang] = again
            log.info("gang not bound; placing it again", gang=job.gang, why=why)
            self.place_again(job.gang, why)

    async def _bind_one(self, pod: str, node: str, *, first: bool = False, wait: float = 0.0) -> BindResult:
        """Bind one pod, retrying transient failures with backoff. A refusal ends the first pod's attempt
        (nothing of the gang is bound: the gang backs off); for any later pod, part of its gang is bound
        already, so the refusal is retried with backoff too, holding the pod's room: giving the room up
        could leave the gang below its minimum for good. ``wait``: seconds before the first try (after a
        try together with the rest of its gang failed)."""
        namespace, name = pod.split("/", 1)
        delay = _FIRST_RETRY
        if wait:  # its first try failed with the rest of its gang: the backoff goes on from there
            await anyio.sleep(wait)
            delay = min(_FIRST_RETRY * 2, _LAST_RETRY)
        while True:
            uid = self.state.uid(pod)
            if uid is None or pod not in self.state.assumed:
                return BindResult.GONE  # deleted, or released (e.g. leadership lost) while waiting
            await self.limiter.take()
            async with self._slots.taken():
                if self._crowded([(pod, node)]):
                    return BindResult.CROWDED  # checked at the last moment, with the latest state
                started = self.clock.monotonic()
                self.state.sending((pod,))
                try:
                    await self.port.bind(namespace, name, uid, node)
                except PortError as error:
                    outcome = await self._refusal(pod, node, error, first=first, delay=delay)
                else:
                    outcome = self._bound(pod, self.clock.monotonic() - started)
                finally:
                    self.state.sent((pod,))
            if isinstance(outcome, BindResult):
                return outcome
            await anyio.sleep(outcome)
            delay = min(delay * 2, _LAST_RETRY)

    async def _bind_together(self, pods: Sequence[tuple[str, str]], bound: set[str]) -> list[BindResult | float]:
        """The first try of a gang's members (at most :attr:`_slots`'s total), in one ``bind_all``: each pod's
        end, or how long to wait before it is tried again alone (:meth:`_bind_one`). Each pod bound is added to
        ``bound`` as soon as it is known bound."""
        outcomes: list[BindResult | float] = [BindResult.GONE] * len(pods)
        known = [(i, self.state.uid(pod)) for i, (pod, _) in enumerate(pods)]
        tried = [(i, uid) for i, uid in known if uid is not None and pods[i][0] in self.state.assumed]
        if not tried:
            return outcomes
        await self.limiter.take(len(tried))
        async with self._slots.taken(len(tried)):
            crowded = self._crowded([pods[i] for i, _ in tried])
            for i, _ in tried:
                if pods[i][0] in crowded:
                    outcomes[i] = BindResult.CROWDED
            tried = [(i, uid) for i, uid in tried if pods[i][0] not in crowded]
            bindings = [Binding(*_named(pods[i][0]), str(uid), pods[i][1]) for i, uid in tried]
            sending = [pods[i][0] for i, _ in tried]
            self.state.sending(sending)
            try:
                await self._answered_together(pods, tried, bindings, outcomes, bound)
            finally:
                self.state.sent(sending)
        return outcomes

    async def _answered_together(
        self,
        pods: Sequence[tuple[str, str]],
        tried: Sequence[tuple[int, str]],
        bindings: list[Binding],
        outcomes: list[BindResult | float],
        bound: set[str],
    ) -> None:
        """Send ``bindings`` in one ``bind_all`` and read each answer into ``outcomes`` (``tried``: each
        binding's index in ``pods``, and the uid it names)."""
        started = self.clock.monotonic()
        errors = await self.port.bind_all(bindings) if bindings else []
        took = self.clock.monotonic() - started
        conflicts: list[tuple[int, PortError]] = []
        for (i, _), error in zip(tried, errors, strict=True):
            pod, node = pods[i]
            if error is None:
                outcomes[i] = self._bound(pod, took)
                bound.add(pod)
            elif isinstance(error, Conflict):
                conflicts.append((i, error))  # each asks the server about its pod: together, below
            else:
                outcomes[i] = await self._refusal(pod, node, error, first=False, delay=_FIRST_RETRY)

        async def settle(i: int, error: PortError) -> None:
            pod, node = pods[i]
            outcomes[i] = await self._refusal(pod, node, error, first=False, delay=_FIRST_RETRY)
            if outcomes[i] is BindResult.BOUND:
                bound.add(pod)

        if conflicts:
            async with anyio.create_task_group() as group:
                for i, error in conflicts:
                    group.start_soon(settle, i, error)

    def _crowded(self, pods: Sequence[tuple[str, str]]) -> set[str]:
        """The pods whose node another scheduler used meanwhile (its bound and assumed requests now exceed
        what it has, in what the pod asks): one look at all their nodes, then each pod on a crowded one."""
        assumed = self.state.assumed
        asked = {name for pod, _ in pods if pod in assumed for name in assumed[pod].requests}
        nodes = self.state.overcommitted({node for _, node in pods}, asked or None)
        if not nodes:
            return set()
        return {
            pod
            for pod, node in pods
            if node in nodes and self.state.overcommitted([node], assumed[pod].requests if pod in assumed else None)
        }

    def _bound(self, pod: str, took: float) -> BindResult:
        self.metrics.bind_duration.observe(took)
        self._binds_written.inc()
        self.state.binding_done(pod)
        return BindResult.BOUND

    async def _refusal(self, pod: str, node: str, error: PortError, *, first: bool, delay: float) -> BindResult | float:
        """What a failed bind of ``pod`` means: how it ended, or the seconds to wait before trying it again."""
        if isinstance(error, NotFound):
            self.metrics.bind_errors.labels("404").inc()
            return BindResult.GONE
        if isinstance(error, Conflict):
            self.metrics.bind_errors.labels("409").inc()
            result = await self._after_conflict(pod, node)
            if result is BindResult.REFUSED:
                self._refused(pod, node, error)
                if first:
                    return result
            elif result is not None:
                return result
            return delay
        self.metrics.bind_errors.labels(str(error.code)).inc()
        if not error.transient:
            self._refused(pod, node, error)
            if first:
                return BindResult.REFUSED
        return max(delay, error.retry_after) if isinstance(error, Throttled) else delay

    def _refused(self, pod: str, node: str, error: PortError) -> None:
        log.error("bind refused", pod=pod, node=node, code=error.code, error=str(error)[:300])
        self.reporter.event(
            self.reporter.pod_subject(pod),
            Reason.FAILED_BINDING,
            f"Binding to {node} was refused: {str(error)[:300]}",
            action="Binding",
        )

    async def _after_conflict(self, pod: str, node: str) -> BindResult | None:
        """What a 409 meant, from the pod as the server has it now; None when the server could not say (the
        bind is tried again after a backoff, and asks again if it conflicts again)."""
        namespace, name = pod.split("/", 1)
        try:
            current = await self.port.get(PODS, namespace, name)
        except NotFound:
            return BindResult.GONE
        except PortError:
            return None
        bound_to = (current.get("spec") or {}).get("nodeName")
        if (current.get("metadata") or {}).get("uid") != self.state.uid(pod) or bound_to not in (None, node):
            return BindResult.GONE
        if bound_to == node:
            self.state.binding_done(pod)
            return BindResult.BOUND
        return BindResult.REFUSED


def _named(pod: str) -> tuple[str, str]:
    namespace, name = pod.split("/", 1)
    return namespace, name
