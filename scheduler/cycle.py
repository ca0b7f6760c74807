"""The scheduling cycle: pick a gang, place it whole, reserve, permit (DESIGN section 5).

One cycle, for the best gang in the queue, all synchronous (it never awaits the API while it holds the
snapshot):

1. read the gang from the index; an invalid gang, or one waiting for an object, gets its condition
   and Event and leaves the queue until an object changes;
2. a gang holding a reservation gives each newly arrived member a placeholder's place; once none is
   missing it is permitted;
3. otherwise its members that are already bound or assumed are pinned where they are, placeholders
   are added for members not created yet, and ``topology.place`` decides;
4. a placement is assumed at once (every later gang sees it), then either held (placeholders: the gang
   waits for its members, up to its timeout) or handed to the binding cycle; an infeasible gang gets
   the explanation as its condition and Event and backs off until an event could change the answer.

:class:`Scheduler.run` interleaves cycles with the informers and the binder: it folds cluster news
into the queue (gangs changed, capacity freed, nodes changed), expires what must expire, runs a batch
of cycles, and yields.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

import anyio
import numpy as np
import structlog
from anyio.abc import TaskStatus

from scheduler.binding import Binder, BindJob
from scheduler.cache import ClusterState
from scheduler.clock import Clock
from scheduler.gangs import GangError, GangKey, GangSpec, Problem, beyond_cluster, min_resources_problem
from scheduler.metrics import Metrics
from scheduler.permit import (
    Permit,
    Placeholder,
    Reservation,
    is_placeholder,
    placeholder_key,
    placeholder_requests,
    with_placeholders,
)
from scheduler.queue import GangQueue, Wake
from scheduler.reporting import SCHEDULER_ERROR, UNSCHEDULABLE, Reporter
from scheduler.settings import Settings
from scheduler.waiting import Shortfall, describe, split_unknown
from topology import Assignment, GangRequest, Infeasible, Member, Placement, PodShape, Snapshot, place
from topology.fit import pods_per_node, shape_fit

log = structlog.get_logger("phalanx.cycle")

GANG_WAITING = "GangWaiting"


class Placer(Protocol):
    def __call__(self, snapshot: Snapshot, request: GangRequest, *, max_tries: int) -> Placement | Infeasible: ...


#: Cycles run back to back before the loop yields to informers and binders.
BATCH = 64


class Scheduler:
    def __init__(
        self,
        *,
        settings: Settings,
        state: ClusterState,
        queue: GangQueue,
        permit: Permit,
        binder: Binder,
        reporter: Reporter,
        clock: Clock,
        metrics: Metrics,
        placer: Placer = place,
    ) -> None:
        """``placer`` is the placement algorithm: ``topology.place``, or a baseline the quality
        benchmark compares it with (it is called exactly as ``place`` is)."""
        self.settings = settings
        self.placer = placer
        self.state = state
        self.queue = queue
        self.permit = permit
        self.binder = binder
        self.reporter = reporter
        self.clock = clock
        self.metrics = metrics
        self._poke = anyio.Event()
        self._reserved_labels: set[str] = set()
        self.cycles = 0

    def poke(self) -> None:
        """Something changed (informers call this after applying events): run soon."""
        self._poke.set()

    def replace(self, gang: GangKey, why: str) -> None:
        """The binder gives a gang back because the cluster changed under it: place it again now."""
        self._requeue(gang)
        self.poke()

    def bind_refused(self, gang: GangKey, why: str) -> None:
        """The API server refused to bind the gang's members: a failed attempt like any other. The gang backs
        off (a change to its pods or to the nodes wakes it sooner), never placed again at once."""
        self._requeue(gang)
        self.metrics.attempts.labels("unschedulable").inc()
        backoff = self.queue.failed(gang, Wake(nodes=True))
        log.info("binding refused; backing off", gang=gang, why=why, backoff_s=round(backoff, 2))
        self.poke()  # the loop may be idle until a later deadline: this backoff ends sooner

    # -- folding cluster news into the queue ------------------------------------------------------

    def sync(self) -> None:
        state, queue = self.state, self.queue
        for key in state.index.take_changed():
            self._requeue(key)
        state.expire()
        for reservation in self.permit.expired():
            self._timeout(reservation)
        freed, nodes_changed = state.take_signals()
        if nodes_changed:
            queue.wake_nodes()
        if freed:
            queue.wake_capacity(lambda shape: self._room(shape, freed))
        self._gauges()

    def _requeue(self, key: GangKey) -> None:
        result = self.state.index.get(key)
        if result is None:
            self.queue.remove(key)
            self._release(key)
            return
        if isinstance(result, GangError):
            self.queue.remove(key)
            self._release(key)
            self._report_problem(result)
            return
        if key in self.permit.waiting or self._unplaced(result):
            self.queue.add(key, result.priority, result.created)
        else:
            self.queue.done(key)

    def _room(self, shape: PodShape, nodes: Iterable[str]) -> int:
        """Pods of ``shape`` the given nodes can take now."""
        snapshot = self.state.snapshot
        rows = np.array([row for row in (snapshot.index_of(name) for name in nodes) if row is not None], dtype=np.int64)
        if not len(rows):
            return 0
        return int(pods_per_node(snapshot.free, shape_fit(snapshot, shape), rows).sum())

    def _gauges(self) -> None:
        for name, count in self.queue.depth().items():
            self.metrics.queue_depth.labels(name).set(count)
        self.metrics.waiting_gangs.set(len(self.permit.waiting))
        held = self.permit.held()
        for name in self._reserved_labels - held.keys():
            self.metrics.reserved.labels(name).set(0)  # a resource no longer held reads 0, not its last value
        for name, amount in held.items():
            # Base units, as the metric's help says: cores for cpu (held internally in millicores).
            self.metrics.reserved.labels(name).set(amount / 1000 if name == "cpu" else amount)
        self._reserved_labels |= held.keys()

    # -- one cycle ------------------------------------------------------------------------------

    def cycle(self) -> bool:
        """Try the best ready gang; False when none is ready."""
        key = self.queue.pop()
        if key is None:
            return False
        self.cycles += 1
        result = self.state.index.get(GangKey(key))
        if result is None:
            self.queue.remove(key)
        elif isinstance(result, GangError):
            self.queue.remove(key)
            self._report_problem(result)
        else:
            self._schedule(result)
        return True

    def _unplaced(self, spec: GangSpec) -> list[Member]:
        return [member for member in spec.request.members() if self.state.placed_node(member.key) is None]

    def _schedule(self, spec: GangSpec) -> None:
        reservation = self.permit.waiting.get(spec.key)
        if reservation is not None:
            if self._fill(spec, reservation):
                return
            self._release(spec.key)
        unplaced = self._unplaced(spec)
        if not unplaced:
            self.queue.done(spec.key)
            return
        request, missing = with_placeholders(self._pinned(spec.request))
        wake = Wake(nodes=True, shapes=frozenset(member.shape for member in unplaced), pods=len(unplaced))
        too_big = beyond_cluster(request, self.state.snapshot)
        if too_big is not None:  # only more nodes help: wait for a node change, hold nothing
            self._fail(spec, unplaced, Wake(nodes=True), UNSCHEDULABLE, too_big.message)
            return
        trial, shortfalls = split_unknown(request)
        if shortfalls:
            self._wait_for_unknown(spec, unplaced, wake, trial, shortfalls)
            return
        if missing:
            totals = self._allocatable()
            if not self.permit.can_hold(placeholder_requests(request), totals):
                self._fail(
                    spec,
                    unplaced,
                    wake,
                    UNSCHEDULABLE,
                    f"Gang {spec.key} waits for {_absent(spec, missing)}, and room held for waiting gangs is "
                    f"at its limit ({self.settings.permit.max_reserved_share:.0%} of the cluster).{_gated(spec)}",
                )
                return
        problem = min_resources_problem(spec.key, spec.min_resources, self.state.snapshot)
        if problem is not None:
            self._fail(spec, unplaced, wake, UNSCHEDULABLE, problem)
            return
        started = time.perf_counter()
        outcome = self.placer(self.state.snapshot, request, max_tries=self.settings.placement.max_domain_tries)
        placement_ms = round((time.perf_counter() - started) * 1000, 3)
        self.metrics.placement_duration.observe(placement_ms / 1000)
        if isinstance(outcome, Infeasible):
            message = outcome.message
            if missing:  # the room was sought for members that do not exist yet, too: say so
                message += f" It also waits for {_absent(spec, missing)}.{_gated(spec)}"
            self._fail(spec, unplaced, wake, UNSCHEDULABLE, message, placement_ms=placement_ms)
            return
        self.state.reserve(spec.key, outcome.assignments)
        placeholders: dict[str, Placeholder] = {}
        for room in outcome.held:
            key = placeholder_key(spec.key, room.part, room.node)
            count = room.count + (placeholders[key].count if key in placeholders else 0)
            placeholders[key] = Placeholder(room.part, room.node, room.shape, count)
        for key, placeholder in placeholders.items():
            self.state.hold(spec.key, key, placeholder.node, placeholder.shape, placeholder.requests)
        real = list(outcome.assignments)
        log.info(
            "placed",
            gang=spec.key,
            pods=len(real),
            placeholders=sum(placeholder.count for placeholder in placeholders.values()),
            nodes=len({a.node for a in outcome.assignments} | {room.node for room in outcome.held}),
            domains={choice.gang: f"{choice.key}={choice.value}" for choice in outcome.domains},
            unplaced=len(outcome.unplaced),
            placement_ms=placement_ms,
        )
        if placeholders:
            self._hold(spec, placeholders)
            return
        if not real:
            # The minimum already runs; the extra members still find no room inside the gang's domains.
            self._fail(
                spec,
                unplaced,
                wake,
                UNSCHEDULABLE,
                f"Gang {spec.key} runs with its minimum; {len(outcome.unplaced)} extra member(s) wait for room "
                "inside the domains the gang already uses.",
            )
            return
        self.metrics.attempts.labels("scheduled").inc()
        self.binder.submit(BindJob(spec.key, tuple((a.pod, a.node) for a in real), spec.created))
        self.reporter.group(spec, scheduled=True, message=f"{len(real)} pod(s) placed")
        if outcome.unplaced:
            # Extras that did not fit wait, inside the gang's domains, for room: fill the running gang later.
            self.queue.failed(spec.key, wake)
        else:
            self.queue.binding(spec.key)

    def _wait_for_unknown(
        self, spec: GangSpec, unplaced: list[Member], wake: Wake, trial: GangRequest | None, shortfalls: list[Shortfall]
    ) -> None:
        """Parts of the gang have no member yet, so no room can be held for them: the gang waits, holding
        nothing. What exists is placed on trial (not kept), so that a gang that would not fit anyway says
        so, and cluster-autoscaler only hears ``Unschedulable`` when more room would help."""
        absent = describe(shortfalls)
        if trial is not None:
            outcome = self.placer(self.state.snapshot, trial, max_tries=self.settings.placement.max_domain_tries)
            if isinstance(outcome, Infeasible):
                message = f"{outcome.message} It also waits for members that do not exist yet: {absent}.{_gated(spec)}"
                self._fail(spec, unplaced, wake, UNSCHEDULABLE, message)
                return
        self.metrics.attempts.labels("waiting").inc()
        exists = " The members that exist fit now." if trial is not None else ""
        message = f"Gang {spec.key} waits for members that do not exist yet: {absent}.{exists}{_gated(spec)}"
        log.info("waiting for members", gang=spec.key, missing=absent)
        self._report_waiting(spec, message)
        self.reporter.group(spec, scheduled=self._meets_minimum(spec.request), message=message)
        self.queue.remove(spec.key)  # a member's arrival changes the gang, which brings it back

    def _report_waiting(self, spec: GangSpec, message: str) -> None:
        self.reporter.pending([m.key for m in spec.request.members()], GANG_WAITING, message)
        for ref in spec.objects[:1]:
            self.reporter.event(self.reporter.group_subject(ref), GANG_WAITING, message, type="Normal")
        if not spec.objects:
            self.reporter.event(self.reporter.pod_subject(spec.pods[0]), GANG_WAITING, message, type="Normal")

    def _pinned(self, request: GangRequest) -> GangRequest:
        """The request with every member that is bound or assumed pinned to its node."""
        if request.is_leaf:
            members = tuple(
                Member(key=member.key, shape=member.shape, node=self.state.placed_node(member.key))
                for member in request.pods
            )
            return GangRequest(
                key=request.key,
                pods=members,
                min_pods=request.min_pods,
                required=request.required,
                preferred=request.preferred,
            )
        return GangRequest(
            key=request.key,
            children=tuple(self._pinned(child) for child in request.children),
            min_pods=request.min_pods,
            min_children=request.min_children,
            required=request.required,
            preferred=request.preferred,
        )

    def _allocatable(self) -> dict[str, int]:
        snapshot = self.state.snapshot
        totals = snapshot.allocatable.sum(axis=0)
        return {name: int(total) for name, total in zip(snapshot.resources, totals, strict=True)}

    # -- permit -------------------------------------------------------------------------------

    def _hold(self, spec: GangSpec, placeholders: dict[str, Placeholder]) -> None:
        reservation = self.permit.hold(spec, placeholders)
        self.metrics.attempts.labels("waiting").inc()
        self._report_waiting(spec, self._holding(spec, reservation))
        self.queue.remove(spec.key)  # a member's arrival changes the gang, which brings it back

    def _holding(self, spec: GangSpec, reservation: Reservation) -> str:
        return (
            f"Gang {spec.key} holds room for {_absent(spec, reservation.missing)}; it binds when they arrive, or "
            f"releases the room in {reservation.deadline - self.clock.monotonic():.0f}s.{_gated(spec)}"
        )

    def _fill(self, spec: GangSpec, reservation: Reservation) -> bool:
        """Give arrived members their placeholders' places; False if they do not match (start over)."""
        leaf_of = {member.key: leaf.key for leaf in spec.request.walk() if leaf.is_leaf for member in leaf.pods}
        # Arrivals take the room in the order placement filled it (reversed, to pop from the end).
        slots: dict[tuple[str, PodShape], list[str]] = {}
        for key, held in reversed(reservation.placeholders.items()):
            slots.setdefault((held.leaf, held.shape), []).append(key)
        left = {key: held.count for key, held in reservation.placeholders.items()}
        moves: list[tuple[str, Member]] = []
        for member in self._unplaced(spec):
            keys = slots.get((leaf_of.get(member.key, ""), member.shape), [])
            while keys and not left[keys[-1]]:
                keys.pop()
            if not keys:
                return False
            left[keys[-1]] -= 1
            moves.append((keys[-1], member))
        for key, member in moves:
            held = reservation.placeholders[key]
            if held.count > 1:
                held = reservation.placeholders[key] = replace(held, count=held.count - 1)
                self.state.hold(spec.key, key, held.node, held.shape, held.requests)
            else:
                del reservation.placeholders[key]
                self.state.unreserve(key)
            self.state.reserve(spec.key, [Assignment(pod=member.key, node=held.node, shape=member.shape)])
        if reservation.placeholders:
            # Still waiting; what it waits for may have changed (a member arrived, a pod got or lost gates).
            self._report_waiting(spec, self._holding(spec, reservation))
            self.queue.remove(spec.key)
            return True
        self.permit.release(spec.key)
        assumed = [
            (m.key, self.state.assumed[m.key].node) for m in spec.request.members() if m.key in self.state.assumed
        ]
        self.metrics.attempts.labels("scheduled").inc()
        log.info("permitted", gang=spec.key, pods=len(assumed))
        self.binder.submit(BindJob(spec.key, tuple(assumed), spec.created))
        self.reporter.group(spec, scheduled=True, message="all members placed")
        self.queue.binding(spec.key)
        return True

    def _timeout(self, reservation: Reservation) -> None:
        key = reservation.gang
        missing = reservation.missing
        self._release(key)
        spec = self.state.index.get(key)
        message = (
            f"Gang {key} timed out waiting for {missing} of its members to be created; the room it held is "
            "released and it will be tried again."
        )
        log.info("gang timed out", gang=key, missing=missing)
        if isinstance(spec, GangSpec):
            self.reporter.pending([m.key for m in spec.request.members()], UNSCHEDULABLE, message)
            subject = (
                self.reporter.group_subject(spec.objects[0])
                if spec.objects
                else self.reporter.pod_subject(spec.pods[0])
            )
            self.reporter.event(subject, "GangTimeout", message)
            self.queue.add(key, spec.priority, spec.created)
            self.queue.failed(key, Wake(nodes=True))

    def _release(self, key: GangKey) -> None:
        """Drop a gang's reservation and whatever it assumed that is not bound."""
        reservation = self.permit.release(key)
        if reservation is not None:
            for placeholder in reservation.placeholders:
                self.state.unreserve(placeholder)
        for pod, assumption in list(self.state.assumed.items()):
            if assumption.gang == key and assumption.deadline is None:
                self.state.unreserve(pod)

    # -- reporting ----------------------------------------------------------------------------

    def _fail(
        self,
        spec: GangSpec,
        unplaced: list[Member],
        wake: Wake,
        reason: str,
        message: str,
        *,
        placement_ms: float = 0.0,
    ) -> None:
        self.metrics.attempts.labels("unschedulable").inc()
        backoff = self.queue.failed(spec.key, wake)
        log.info(
            "unschedulable",
            gang=spec.key,
            pods=len(unplaced),
            backoff_s=round(backoff, 2),
            reason=message,
            placement_ms=placement_ms,
        )
        pods = [member.key for member in unplaced if not is_placeholder(member.key)]
        self.reporter.pending(pods, reason, message)
        for pod in pods:
            self.reporter.event(self.reporter.pod_subject(pod), "FailedScheduling", message)
        for ref in spec.objects[:1]:
            self.reporter.event(self.reporter.group_subject(ref), "FailedScheduling", message)
        self.reporter.group(spec, scheduled=self._meets_minimum(spec.request), message=message)

    def _meets_minimum(self, part: GangRequest) -> bool:
        """Whether the members already bound or assumed satisfy every minimum of ``part``."""
        placed = {member.key for member in part.members() if self.state.placed_node(member.key) is not None}
        return part.satisfied_by(placed)

    def _report_problem(self, error: GangError) -> None:
        waiting = error.problem is Problem.WAITING
        self.metrics.attempts.labels("waiting" if waiting else "invalid").inc()
        reason = GANG_WAITING if waiting else "InvalidGang"
        self.reporter.pending(error.pods, GANG_WAITING if waiting else SCHEDULER_ERROR, error.message)
        for pod in error.pods:
            self.reporter.event(
                self.reporter.pod_subject(pod), reason, error.message, type="Normal" if waiting else "Warning"
            )
        if error.subject.kind != "Pod":
            self.reporter.event(
                self.reporter.group_subject(error.subject),
                reason,
                error.message,
                type="Normal" if waiting else "Warning",
            )

    # -- the loop -----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            self.sync()
            done = 0
            while done < BATCH and self.cycle():
                done += 1
            if done:
                await anyio.sleep(0)  # let informers and binders run between batches
                continue
            await self._idle()

    async def _idle(self) -> None:
        """Wait for a poke, or for the next moment something is due (a backoff, a permit timeout)."""
        due = (self.queue.next_ready(), self.permit.next_deadline(), self.state.next_expiry())
        deadlines = [d for d in due if d is not None]
        timeout = max(0.0, min(deadlines) - self.clock.monotonic()) if deadlines else 5.0
        if not self._poke.is_set():
            with anyio.move_on_after(timeout):
                await self._poke.wait()
        self._poke = anyio.Event()


def _absent(spec: GangSpec, missing: int) -> str:
    """``missing`` members a gang lacks, in words: not created yet, or held by scheduling gates."""
    gated = min(spec.gated, missing)
    if not gated:
        return f"{missing} member(s) that do not exist yet"
    if gated == missing:
        return f"{missing} member(s) held by scheduling gates"
    return f"{missing} member(s) ({missing - gated} not created yet, {gated} held by scheduling gates)"


def _gated(spec: GangSpec) -> str:
    """`` 3 of 4 members are held by scheduling gates: example.com/quota.`` (empty when none is)."""
    if not spec.gated:
        return ""
    total = sum(1 for _ in spec.request.members()) + spec.gated
    return f" {spec.gated} of {total} members are held by scheduling gates: {', '.join(spec.gates)}."
