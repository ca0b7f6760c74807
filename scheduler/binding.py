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

from collections.abc import Callable
from dataclasses import replace
from enum import Enum

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.clock import Clock
from scheduler.decision import BindJob, Reason
from scheduler.devices.allocation import DELETE_PROTECTION, ClaimWrite, plan, taken_back
from scheduler.devices.extended import asks_any, claim_body, pod_claim_status
from scheduler.devices.inventory import Release
from scheduler.devices.sharing import binding_state
from scheduler.gangs import GangKey
from scheduler.jobs import Jobs
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, NotFound, PortError, Throttled
from scheduler.ports.port import PODS, RESOURCE_CLAIMS, ClusterPort
from scheduler.ratelimit import TokenBucket
from scheduler.reporting import Reporter
from scheduler.settings import BindingSettings
from scheduler.state import ClusterState

log = structlog.get_logger("phalanx.binding")

_FIRST_RETRY = 0.2
_LAST_RETRY = 10.0
#: How long taking back a gang's claim allocations may hold up a binding that stops (cancelled or failed).
_TAKE_BACK_SECONDS = 10.0


class BindResult(Enum):
    """How binding one pod ended."""

    BOUND = "bound"
    GONE = "gone"  # deleted, recreated, or bound elsewhere by someone else: place the rest again now
    CROWDED = "crowded"  # another scheduler used the node meanwhile: place again now
    REFUSED = "refused"  # not transient (configuration, the pod's own state): back off, as after any failure


#: How many times in a row a gang may be given back to be placed again at once (its node found crowded at the
#: last moment, a member gone) before it backs off instead.
PLACE_AGAIN_IN_A_ROW = 5


class Binder:
    def __init__(
        self,
        *,
        port: ClusterPort,
        state: ClusterState,
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
        self.place_again = place_again
        self.back_off = back_off
        self._jobs = Jobs("binder", self._bind_gang)
        #: Gangs given back to be placed again at once, and how many times in a row (until one binds).
        self._again: dict[GangKey, int] = {}
        self._slots = anyio.Semaphore(settings.concurrency)
        self.in_flight = 0

    def submit(self, job: BindJob) -> None:
        """Queue a permitted gang for binding (only while :meth:`run` runs, i.e. while leading)."""
        if not job.pods:
            return
        self._jobs.submit(job)
        self.in_flight += 1
        self.reporter.binding(self.in_flight)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._jobs.run(task_status=task_status)
        finally:
            self.in_flight = 0
            self.reporter.binding(0)

    async def _bind_gang(self, job: BindJob) -> None:
        try:
            await self._bind_gang_steps(job)
        finally:
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
        made = [state.devices.extended_of[pod] for pod, _ in job.pods if pod in state.devices.extended_of]
        for claim in made:  # made for a pod by an attempt that did not bind (its delete failed): deleted first
            if claim not in state.devices.releasing and not await self._delete_made(claim):
                why = f"ResourceClaim {claim}, made by an earlier attempt, is not deleted yet"
                self._release(job, why, refused=True)
                return
        named = {claim for pod, _ in job.pods for claim in state.claims_of(pod)}
        stale = sorted((named | set(made)) & set(state.devices.releasing))
        if stale:  # an earlier attempt's take-back the watch has not shown yet: no Event, it passes by itself
            self._release(job, f"ResourceClaim {stale[0]} is being released by an earlier attempt", refused=True)
            return
        claimed = await self._allocate_claims(job)
        if isinstance(claimed, str):
            # Told on the gang's first pod, as a refused first bind is: nothing of the gang is bound.
            pod = job.pods[0][0]
            self.reporter.event(self.reporter.pod_subject(pod), Reason.FAILED_BINDING, claimed, action="Binding")
            self._release(job, claimed, refused=True)
            return
        if any(write.waits_for_driver for write, _ in claimed):
            failed = await self._await_drivers(claimed)
            if failed is not None:  # taken back and tried again later, as kube-scheduler's PreBind does
                with anyio.CancelScope(shield=True), anyio.move_on_after(_TAKE_BACK_SECONDS):
                    await self._take_back(self._as_known(claimed))
                pod = job.pods[0][0]
                self.reporter.event(self.reporter.pod_subject(pod), Reason.FAILED_BINDING, failed, action="Binding")
                self._release(job, failed, refused=True)
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
                with anyio.CancelScope(shield=True), anyio.move_on_after(_TAKE_BACK_SECONDS):
                    await self._take_back(unbound)
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
        results = [BindResult.BOUND]
        if rest:
            by_index: dict[int, BindResult] = {}

            async def bind(i: int, pod: str, node: str) -> None:
                by_index[i] = await self._bind_one(pod, node)
                if by_index[i] is BindResult.BOUND:
                    bound.add(pod)

            async with anyio.create_task_group() as group:
                for i, (pod, node) in enumerate(rest):
                    group.start_soon(bind, i, pod, node)
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

    async def _allocate_claims(self, job: BindJob) -> str | list[tuple[ClaimWrite, str]]:
        """PreBind: give every claim of the gang its devices before any pod is bound (``devices/allocation.py``);
        the claims written, with their new versions, or why not (what was written is taken back then)."""
        pods = []
        devices = self.state.devices
        served = devices.served()
        for pod, node in job.pods:
            info = self.state.index.pod(pod)
            if info is None:
                continue
            if (info.raw.get("spec") or {}).get("resourceClaims") or asks_any(info.raw, served):
                pods.append((info.raw, node))
        if not pods:
            return []
        writes = plan(devices, pods, self.state.own_allocatable, self.state.reaches)
        if isinstance(writes, str):
            return writes
        written: list[tuple[ClaimWrite, str]] = []
        for i, planned in enumerate(writes):
            write = planned
            try:
                if write.extended:  # made now (KEP-5004); from here on, taking the gang back deletes it
                    write = await self._make_claim(write)
                    written.append((write, write.version))
                version = write.version
                if write.finalizers is not None:
                    await self.limiter.take()
                    protected = {"metadata": {"finalizers": list(write.finalizers), "resourceVersion": version}}
                    stored = await self.port.patch(RESOURCE_CLAIMS, write.namespace, write.name, protected)
                    version = str((stored.get("metadata") or {}).get("resourceVersion", ""))
                await self.limiter.take()
                stored = await self.port.patch_status(
                    RESOURCE_CLAIMS,
                    write.namespace,
                    write.name,
                    {"metadata": {"resourceVersion": version}, "status": write.status},
                )
                if write.extended:  # the pod names its claim, as kube-scheduler's PreBind writes it
                    written.pop()
                    written.append((write, str((stored.get("metadata") or {}).get("resourceVersion", ""))))
                    await self.limiter.take()
                    await self.port.patch_status(PODS, write.namespace, write.pods[0].split("/", 1)[1],
                                                 {"status": pod_claim_status(write.name, write.extended)})  # fmt: skip
            except PortError as error:
                for unwritten in writes[i:]:
                    self.state.devices.release(unwritten.devices, f"{unwritten.namespace}/{unwritten.name}")
                with anyio.CancelScope(shield=True), anyio.move_on_after(_TAKE_BACK_SECONDS):
                    await self._take_back(written)
                return f"allocating ResourceClaim {write.namespace}/{write.name} was refused: {error}"
            except BaseException:
                for unwritten in writes[i:]:
                    self.state.devices.release(unwritten.devices, f"{unwritten.namespace}/{unwritten.name}")
                with anyio.CancelScope(shield=True), anyio.move_on_after(_TAKE_BACK_SECONDS):
                    await self._take_back(written)
                raise
            if not write.extended:
                written.append((write, str((stored.get("metadata") or {}).get("resourceVersion", ""))))
        log.info("claims allocated", gang=job.gang, claims=len(written))
        return written

    async def _await_drivers(self, claimed: list[tuple[ClaimWrite, str]]) -> str | None:
        """Wait until the drivers report every binding condition of the devices just allocated True (the claims'
        ``status.devices``, as the watch shows them); why not, when a failure condition turns True or
        ``binding.deviceBindingTimeoutSeconds`` passes first. No pod of the gang is bound meanwhile."""
        devices = self.state.devices
        keys = [f"{write.namespace}/{write.name}" for write, _ in claimed if write.waits_for_driver]
        deadline = self.clock.monotonic() + self.settings.device_binding_timeout_seconds
        seen: set[str] = set()  # claims the watch has shown allocated (before, it may be behind the write)
        while True:
            waiting = []
            for key in keys:
                claim = devices.claims.get(key)
                if claim is None or not claim.allocated:
                    if key in seen or claim is None:
                        return f"ResourceClaim {key} lost its allocation while its devices were being attached"
                    waiting.append(f"ResourceClaim {key} (its allocation)")
                    continue
                seen.add(key)
                for device, (wanted, failures) in zip(claim.allocated, claim.binding, strict=False):
                    ready, failed = binding_state(claim.conditions.get(device, {}), wanted, failures)
                    if failed is not None:
                        named = "/".join(device)
                        return f"device {named} of ResourceClaim {key} reports {failed}: it could not be attached"
                    if not ready:
                        waiting.append(f"{'/'.join(device)} ({', '.join(wanted)})")
            if not waiting:
                log.info("devices attached", claims=len(keys))
                return None
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return (f"the driver did not report {waiting[0]} ready within "
                        f"{self.settings.device_binding_timeout_seconds:g}s")  # fmt: skip
            changed = anyio.Event()
            devices.wakers.add(changed.set)
            try:
                with anyio.move_on_after(min(left, 1.0)):
                    await changed.wait()
            finally:
                devices.wakers.discard(changed.set)

    def _as_known(self, claimed: list[tuple[ClaimWrite, str]]) -> list[tuple[ClaimWrite, str]]:
        """The writes with the versions the watch shows now: a driver reporting its devices' conditions changed
        the claims since they were written, and the allocation is still this write's."""
        known = self.state.devices.claims
        return [
            (write, known[key].version if (key := f"{write.namespace}/{write.name}") in known and write.waits_for_driver
             else version)
            for write, version in claimed
        ]  # fmt: skip

    async def _make_claim(self, write: ClaimWrite) -> ClaimWrite:
        """Make the claim of a pod's extended resources (KEP-5004), with kube-scheduler's finalizer on: the
        write with its name and version."""
        info = self.state.index.pod(write.pods[0])
        pod = info.raw if info is not None else {"metadata": {"name": write.pods[0].split("/", 1)[1]}}
        await self.limiter.take()
        made = await self.port.create(RESOURCE_CLAIMS, write.namespace, claim_body(pod, write.extended,
                                                                                   DELETE_PROTECTION))  # fmt: skip
        metadata = made.get("metadata") or {}
        named = replace(write, name=str(metadata.get("name", "")), version=str(metadata.get("resourceVersion", "")),
                        finalizers=None)  # fmt: skip
        # Held under its name from now on: the watch's DELETED of it lets them go, whatever happens here.
        self.state.devices.release(write.devices, f"{write.namespace}/{write.name}")
        self.state.devices.hold(f"{named.namespace}/{named.name}", named.devices, named.consumed)
        return named

    async def _delete_made(self, key: str) -> bool:
        """Delete a claim made for a pod's extended resources, its finalizer taken off first (as kube-scheduler's
        Unreserve does); whether it is gone. Until the watch shows it gone, no PreBind uses what is known of it
        (``Devices.releasing``); one that cannot be deleted now is deleted at the pod's next attempt."""
        namespace, name = key.split("/", 1)
        known = self.state.devices.claims.get(key)
        kept = [finalizer for finalizer in (known.finalizers if known else ()) if finalizer != DELETE_PROTECTION]
        for attempt in range(3):
            try:
                await self.limiter.take()
                await self.port.patch(RESOURCE_CLAIMS, namespace, name, {"metadata": {"finalizers": kept or None}})
                await self.limiter.take()
                await self.port.delete(RESOURCE_CLAIMS, namespace, name)
            except NotFound:
                pass
            except PortError as error:
                log.warning("claim made for extended resources not deleted yet", claim=key, error=str(error)[:200])
                await anyio.sleep(0.2 * (attempt + 1))
                continue
            if key in self.state.devices.claims:
                self.state.devices.releasing[key] = Release(True, set())
            return True
        return False

    async def _take_back(self, written: list[tuple[ClaimWrite, str]]) -> None:
        """Release the allocations this gang's PreBind wrote (or the reservations it added), so that no claim
        stays allocated for a pod that is not bound; a claim changed since (its version differs) is someone
        else's now and left alone. Until the watch shows a claim taken back, no PreBind trusts what is known
        of it (``Devices.releasing``): it would still look allocated for the pod."""
        devices = self.state.devices
        for write, _ in written:
            if write.extended:
                continue  # deleted, not taken back: nothing of it stays to be seen
            before = {str(ref.get("uid", "")) for ref in write.reserved_before or ()}
            added = {str(ref.get("uid", "")) for ref in write.status.get("reservedFor") or ()} - before
            devices.releasing[f"{write.namespace}/{write.name}"] = Release(write.reserved_before is None, added)
        for write, written_version in written:
            key = f"{write.namespace}/{write.name}"
            if write.extended:
                if await self._delete_made(key):
                    devices.release(write.devices, key)  # free again once the watch shows the claim gone
                continue
            taken = False
            for attempt in range(3):
                try:
                    stored = await self.port.patch_status(
                        RESOURCE_CLAIMS, write.namespace, write.name, taken_back(write, written_version)
                    )
                    taken = True
                    if write.finalizers is not None:  # the finalizer was ours: it goes with the allocation
                        kept = [name for name in write.finalizers if name != DELETE_PROTECTION]
                        now = str((stored.get("metadata") or {}).get("resourceVersion", ""))
                        unprotected = {"metadata": {"finalizers": kept or None, "resourceVersion": now}}
                        await self.port.patch(RESOURCE_CLAIMS, write.namespace, write.name, unprotected)
                    break
                except (Conflict, NotFound):
                    break
                except PortError as error:
                    if taken:
                        break  # only our finalizer is left on the claim: it does not keep it from being allocated
                    log.warning("claim allocation not taken back yet", claim=write.name, error=str(error)[:200])
                    await anyio.sleep(0.2 * (attempt + 1))
            if taken:
                devices.release(write.devices, key)  # free again once the watch shows the claim without them
            else:  # still allocated as written: what is known of it will be true once the watch shows it
                devices.releasing.pop(key, None)

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

    async def _bind_one(self, pod: str, node: str, *, first: bool = False) -> BindResult:
        """Bind one pod, retrying transient failures with backoff. A refusal ends the first pod's attempt
        (nothing of the gang is bound: the gang backs off); for any later pod, part of its gang is bound
        already, so the refusal is retried with backoff too, holding the pod's room: giving the room up
        could leave the gang below its minimum for good."""
        namespace, name = pod.split("/", 1)
        delay = _FIRST_RETRY
        while True:
            uid = self.state.uid(pod)
            if uid is None or pod not in self.state.assumed:
                return BindResult.GONE  # deleted, or released (e.g. leadership lost) while waiting
            await self.limiter.take()
            async with self._slots:
                assumed = self.state.assumed.get(pod)
                if self.state.overcommitted([node], assumed.requests if assumed else None):
                    return BindResult.CROWDED  # checked at the last moment, with the latest state
                started = self.clock.monotonic()
                try:
                    await self.port.bind(namespace, name, uid, node)
                except NotFound:
                    self.metrics.bind_errors.labels("404").inc()
                    return BindResult.GONE
                except Conflict as error:
                    self.metrics.bind_errors.labels("409").inc()
                    result = await self._after_conflict(pod, node)
                    if result is BindResult.REFUSED:
                        self._refused(pod, node, error)
                        if first:
                            return result
                    elif result is not None:
                        return result
                    wait = delay
                except PortError as error:
                    self.metrics.bind_errors.labels(str(error.code)).inc()
                    if not error.transient:
                        self._refused(pod, node, error)
                        if first:
                            return BindResult.REFUSED
                    wait = max(delay, error.retry_after) if isinstance(error, Throttled) else delay
                else:
                    self.metrics.bind_duration.observe(self.clock.monotonic() - started)
                    self.metrics.api_writes.labels("bind").inc()
                    self.state.binding_done(pod)
                    return BindResult.BOUND
            await anyio.sleep(wait)
            delay = min(delay * 2, _LAST_RETRY)

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
