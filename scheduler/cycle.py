"""The scheduling cycle: pick a gang, place it whole, reserve, permit (docs/architecture.md).

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

:class:`SchedulingLoop.run` interleaves cycles with the informers and the binder: it folds cluster news
into the queue (gangs changed, capacity freed, nodes changed), expires what must expire, runs a batch
of cycles, and yields.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Protocol

import anyio
import numpy as np
import structlog
from anyio.abc import TaskStatus

from scheduler.binding import BindJob
from scheduler.clock import Clock
from scheduler.gangs import (
    GangError,
    GangKey,
    GangSpec,
    ObjectRef,
    Problem,
    Source,
    beyond_cluster,
    min_resources_problem,
)
from scheduler.metrics import Metrics
from scheduler.outcome import Code, Outcome
from scheduler.permit import Permit, Reservation, placeholder_requests, with_placeholders
from scheduler.preemption.evictions import Evictions
from scheduler.preemption.evictor import EvictJob
from scheduler.preemption.nominations import Nominations, hiding
from scheduler.preemption.planner import (
    PreemptionPlanner,
    longest_grace,
    preempting_note,
    terminating_for,
    victims_by_reason,
)
from scheduler.queue import GangQueue, Wake
from scheduler.reporting import SCHEDULER_ERROR, UNSCHEDULABLE, Reason, Subject
from scheduler.settings import Settings
from scheduler.starvation import (
    DomainReservation,
    Starvation,
    held_back_note,
    holding_note,
    reserving_note,
    runtime_bound,
)
from scheduler.state import ClusterState
from scheduler.vacancies import Vacancies
from scheduler.waiting import Shortfall, describe, split_unknown
from scheduler.whose_room import Placer, WhoseRoom, absent
from topology import (
    Assignment,
    GangRequest,
    Infeasible,
    Member,
    NodeConstraints,
    Placement,
    PodShape,
    place,
)
from topology.domains import IntArray
from topology.fit import pods_per_node, shape_fit
from topology.preemption import NoVictims, Victims

log = structlog.get_logger("phalanx.cycle")

GANG_WAITING = "GangWaiting"  # the PodScheduled condition's reason while a gang waits for members


class JobSink(Protocol):
    """Where placed gangs go to be bound (the binding cycle, ``binding.Binder``)."""

    def submit(self, job: BindJob) -> None: ...


class EvictionSink(Protocol):
    """Where preemptions go to be carried out (``preemption.evictor.Evictor``)."""

    def submit(self, job: EvictJob) -> None: ...


class DecisionRecorder(Protocol):
    """Where decisions go to be told (``reporting.Reporter``): recorded at once, written later."""

    def pending(self, pods: Iterable[str], reason: str, message: str) -> None: ...

    def event(
        self, subject: Subject | None, reason: Reason, note: str, *, type: str = "Warning", action: str = "Scheduling"
    ) -> None: ...

    def pod_subject(self, pod: str) -> Subject | None: ...

    def group_subject(self, ref: ObjectRef) -> Subject | None: ...

    def gang(self, objects: Sequence[ObjectRef], pods: Sequence[str]) -> Subject | None: ...

    def group(self, spec: GangSpec, *, scheduled: bool, message: str, waiting: bool = False) -> None: ...


#: Cycles run back to back before the loop yields to informers and binders.
BATCH = 64


class SchedulingLoop:
    def __init__(
        self,
        *,
        settings: Settings,
        state: ClusterState,
        queue: GangQueue,
        permit: Permit,
        binder: JobSink,
        reporter: DecisionRecorder,
        clock: Clock,
        metrics: Metrics,
        placer: Placer = place,
        evictor: EvictionSink | None = None,
    ) -> None:
        """``placer`` is the placement algorithm: ``topology.place``, or a baseline the quality
        benchmark compares it with (it is called exactly as ``place`` is). Without an ``evictor`` nothing
        is preempted (the replay benchmark has no API to evict through)."""
        self.settings = settings
        self.placer = placer
        self.state = state
        self.queue = queue
        self.permit = permit
        self.binder = binder
        self.reporter = reporter
        self.clock = clock
        self.metrics = metrics
        self.evictor = evictor
        self.nominations = Nominations(clock, settings.preemption.nomination_timeout_seconds)
        self._clearing: set[str] = set()  # pods whose nominatedNodeName is being cleared
        self.evictions = Evictions(state)
        self.vacancies = Vacancies(clock, settings.permit.replacement_grace_seconds)
        self.preemption = PreemptionPlanner(state, settings, self.nominations, self.evictions, self.vacancies)
        self.whose_room = WhoseRoom(
            state=state, permit=permit, vacancies=self.vacancies, placer=placer, settings=settings, clock=clock
        )
        self.starvation = Starvation(settings.starvation, state, clock, settings.levels)
        self._poke = anyio.Event()
        self._reserved_labels: set[str] = set()
        self._reservation_levels: set[str] = set()
        self.cycles = 0

    def poke(self) -> None:
        """Something changed (informers call this after applying events): run soon."""
        self._poke.set()

    def place_again(self, gang: GangKey, why: str) -> None:
        """The binder gives a gang back because the cluster changed under it: place it again now."""
        self.nominations.resume(gang)
        self._requeue(gang)
        self.poke()

    def bind_refused(self, gang: GangKey, why: str) -> None:
        """The API server refused to bind the gang's members: a failed attempt like any other. The gang backs
        off (a change to its pods or to the nodes wakes it sooner), never placed again at once."""
        spec = self.state.index.get(gang)
        self.nominations.resume(gang)
        self._requeue(gang)
        if isinstance(spec, GangSpec) and gang in self.queue:
            refused = f"binding refused: {why}"
            self._record(spec, Outcome(code=Code.UNSCHEDULABLE, message=refused, wake=Wake(nodes=True), reported=True))
        self.poke()  # the loop may be idle until a later deadline: this backoff ends sooner

    # -- folding cluster news into the queue ------------------------------------------------------

    def sync(self) -> None:
        state, queue = self.state, self.queue
        self.starvation.refresh()
        for key in state.index.take_changed():
            self._requeue(key)
        state.expire()
        for reservation in self.permit.expired():
            self._timeout(reservation)
        for gang in self.permit.cooled():
            self._requeue(gang)
        self._vacancies()
        for nomination in self.nominations.expired():
            log.info("nomination timed out; the gang is evaluated again", gang=nomination.gang)
            spec = state.index.get(nomination.gang)
            if isinstance(spec, GangSpec):
                self._clear_stale(spec.key, spec.pods)
                queue.add(spec.key, spec.priority, spec.created)
        if state.marked_victims:
            self._finish_evictions()
        for late in self.starvation.expired():
            log.info("domain reservation released: its gang did not bind in time", gang=late.gang, domain=late.where)
            self.metrics.starvation_released.labels("expired").inc()
            queue.wake(late.gang)  # tried again at once: it reserves the next domain if it still does not fit
            self._next_in_line(late)
        freed, nodes_changed = state.take_signals()
        freed |= {vacancy.node for vacancy in self.vacancies.expired()}  # kept for a replacement that never came
        if nodes_changed:
            queue.wake_nodes()
        if freed:
            for gang in self.starvation.touching(freed):
                queue.wake(gang)
            held = self.starvation.held_from_wakes()
            with hiding(state.snapshot, [], [(item.rows, item.amounts) for item in held]):
                queue.wake_capacity(lambda shape: self._room(shape, freed))
            if held:  # gangs of higher priority than a reservation are not held back by it
                above = min(item.reservation.priority for item in held)
                queue.wake_capacity(lambda shape: self._room(shape, freed), above=above)
        self._gauges()

    def _vacancies(self) -> None:
        """Room lost members of running gangs leave is kept for their replacements (``vacancies.py``)."""
        for departure in self.state.take_departures():
            gang = departure.gang
            spec = self.state.index.get(gang) if gang is not None else None
            if not isinstance(spec, GangSpec) or spec.source is Source.POD:
                continue
            if not any(self.state.bound_node(member.key) for member in spec.request.members()):
                self.vacancies.filled(spec.key)  # the whole gang is going: nothing to replace
                continue
            self.vacancies.left(spec.key, spec.priority, departure.pod, departure.node, departure.requests)
            log.info("room kept for a replacement", gang=spec.key, pod=departure.pod, node=departure.node)

    def requeue_all(self) -> None:
        """Put every known gang that needs anything in the queue (on becoming the leader)."""
        for key in list(self.state.index.results()):
            self._requeue(key)

    def _requeue(self, key: GangKey) -> None:
        result = self.state.index.get(key)
        if result is None:
            self.queue.remove(key)
            self._release(key)
            self.permit.forget(key)
            self.vacancies.filled(key)
            self.nominations.drop(key)
            self._unreserve(key, "deleted")
            return
        if isinstance(result, GangError):
            self._release(key)
            self.nominations.drop(key)
            self._record(result, _problem(result))
            return
        if self.permit.holds(key) or self._unplaced(result):
            self.queue.add(key, result.priority, result.created)
        else:
            self.nominations.bound(key)
            self._unreserve(key, "bound")
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
        self.metrics.waiting_gangs.set(len(self.permit))
        levels: dict[str, int] = dict.fromkeys(self._reservation_levels, 0)  # a level with none left reads 0
        for reservation in self.starvation.standing():
            level = reservation.level or "cluster"
            levels[level] = levels.get(level, 0) + 1
        for level, count in levels.items():
            self.metrics.starvation_reservations.labels(level).set(count)
        self._reservation_levels |= levels.keys()
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
        result = self.state.index.get(key)
        if result is None:
            self.queue.remove(key)
        elif isinstance(result, GangError):
            self._record(result, _problem(result))
        else:
            self._record(result, self._schedule(result))
        return True

    def _unplaced(self, spec: GangSpec) -> list[Member]:
        return [member for member in spec.request.members() if self.state.placed_node(member.key) is None]

    def _schedule(self, spec: GangSpec) -> Outcome:
        """Decide about one gang."""
        if self.permit.holds(spec.key):
            outcome = self._arrivals(spec)
            if outcome is not None:
                return outcome
            self._release(spec.key)  # the arrivals do not match what was held: place the gang afresh
        unplaced = self._unplaced(spec)
        if not unplaced:
            return Outcome(code=Code.PLACED, attempt=False)
        pods = tuple(member.key for member in unplaced)
        request, missing = with_placeholders(self._pinned(spec.request))
        wake = Wake(nodes=True, shapes=frozenset(member.shape for member in unplaced), pods=len(unplaced))
        too_big = beyond_cluster(request, self.state.snapshot)
        if too_big is not None:  # only more nodes help; nothing is held
            message = too_big.message + (
                f" It also waits for {absent(spec, missing)}.{_gated(spec)}" if missing else ""
            )
            return Outcome(code=Code.UNRESOLVABLE, message=message, pods=pods, each_pod=True)
        never = min_resources_problem(spec.key, spec.min_resources, self.state.snapshot, at_all=True)
        if never is not None:  # only more nodes help: evicting or holding room would be for nothing
            return Outcome(code=Code.UNRESOLVABLE, message=never, pods=pods, each_pod=True)
        trial, shortfalls = split_unknown(request)
        if shortfalls:
            return self._unknown_members(spec, pods, wake, trial, shortfalls)
        cooling = self.permit.cooling(spec.key) if missing else None
        if cooling is not None:
            timeouts = self.permit.timeouts.get(spec.key, 0)
            message = (
                f"Gang {spec.key} waits for {absent(spec, missing)}; it held room for them until its timeout "
                f"({_times(timeouts)} in a row), and holds room again in {cooling:.0f} s.{_gated(spec)}"
            )
            return Outcome(code=Code.WAIT, message=message, pods=spec.pods, reason=Reason.GANG_WAITING, attempt=False)
        if missing and not self.permit.can_hold(placeholder_requests(request), self._allocatable()):
            message = (
                f"Gang {spec.key} waits for {absent(spec, missing)}, and room held for waiting gangs is at its "
                f"limit ({self.settings.permit.max_reserved_share:.0%} of the cluster).{_gated(spec)}"
            )
            return Outcome(
                code=Code.UNSCHEDULABLE,
                message=message,
                pods=spec.pods,
                wake=wake,
                reason=Reason.GANG_WAITING,
                condition=GANG_WAITING,
            )
        held = []
        if len(self.starvation):
            # A gang that waits for members cannot promise when it ends: it starts when the last one arrives.
            runtime = None if missing else runtime_bound(spec, self.state)
            held = self.starvation.held_from(spec.key, spec.priority, runtime)
        problem = min_resources_problem(spec.key, spec.min_resources, self.state.snapshot)
        if problem is not None:
            # No search can succeed, but room can still be made: by preemption, or by a reservation for a
            # gang that has waited too long (the training-operator's and LWS's groups all declare minResources).
            outcome = Outcome(code=Code.UNSCHEDULABLE, message=problem, pods=pods, each_pod=True, wake=wake)
            if missing:
                return outcome
            if self.evictor is not None:
                outcome = self._preempt(spec, request, problem, pods, wake, held=[(h.rows, h.amounts) for h in held])
            return self._starving(spec, request, outcome)
        started = time.perf_counter()
        nominated = self.nominations.hidden_from(self.state, spec.key, spec.priority)
        kept = self.vacancies.hidden_from(spec.key, spec.priority)
        held_rooms = [(item.rows, item.amounts) for item in held]
        with hiding(self.state.snapshot, nominated + kept, held_rooms):
            placed = self.placer(self.state.snapshot, request, max_tries=self.settings.placement.max_domain_tries)
        placement_ms = round((time.perf_counter() - started) * 1000, 3)
        self.metrics.placement_duration.observe(placement_ms / 1000)
        if isinstance(placed, Infeasible):
            if missing:
                existing = self._existing_fit(spec, request, placed, missing)
                if existing is not None:
                    return existing
            message = placed.message
            if missing:  # the room was sought for members that do not exist yet, too: say so
                message += f" It also waits for {absent(spec, missing)}.{_gated(spec)}"
            if placed.unresolvable:
                return Outcome(
                    code=Code.UNRESOLVABLE, message=message, pods=pods, each_pod=True, placement_ms=placement_ms
                )
            if held:
                message += held_back_note(held)
            if kept or len(self.permit):
                message += self.whose_room.note(spec, request, nominated, held_rooms)
            outcome = Outcome(
                code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake, placement_ms=placement_ms
            )
            if missing:
                return outcome
            if self.evictor is not None:
                outcome = self._preempt(spec, request, message, pods, wake, held=[(h.rows, h.amounts) for h in held])
            return self._starving(spec, request, outcome)
        outcome = self._assume(spec, placed, pods, wake, placement_ms)
        if outcome.code is Code.UNSCHEDULABLE and self.evictor is not None and not missing and request.is_leaf:
            # Its minimum runs and extras find no room: they preempt lower priorities as any pod would, one
            # more at a time (the gang's own minimum is never a victim of it, equal priorities never are).
            outcome = self._preempt(spec, _one_more(request), outcome.message, pods, wake, held=held_rooms)
        return outcome

    def _starving(self, spec: GangSpec, request: GangRequest, outcome: Outcome) -> Outcome:
        """A gang that found no room (and no victims) and has waited too long may reserve a domain; one that
        holds a reservation says so (see ``starvation.py``)."""
        if outcome.code is not Code.UNSCHEDULABLE or not outcome.attempt or not self.starvation.starving(spec):
            return outcome
        gone = self.starvation.lost_nodes(spec.key)
        if gone is not None:
            log.info("domain reservation released: some of its nodes are gone", gang=spec.key, domain=gone.where)
            self.metrics.starvation_released.labels("nodes_gone").inc()
        made, displaced = self.starvation.claim(spec, request)
        if displaced is not None:
            log.info("domain reservation displaced by a more important gang", gang=displaced.gang, by=spec.key)
            self.metrics.starvation_released.labels("displaced").inc()
            self.queue.wake(displaced.gang)  # it waits in line again
        held = self.starvation.get(spec.key)
        if held is None:
            return outcome
        return replace(outcome, message=f"{outcome.message} {holding_note(self.starvation, held)}", reserved=made)

    def _preempt(
        self,
        spec: GangSpec,
        request: GangRequest,
        message: str,
        pods: tuple[str, ...],
        wake: Wake,
        *,
        held: list[tuple[IntArray, IntArray]],
    ) -> Outcome:
        """The gang does not fit: wait for victims already going, or choose new ones, or say why not."""
        nomination = self.nominations.get(spec.key)
        if nomination is None and spec.key not in self.nominations.given_up:
            terminating, named, room = terminating_for(spec, self.state)
            if terminating:
                grace = longest_grace(self.state, terminating)
                nomination = self.nominations.adopt(
                    spec.key, spec.priority, terminating, named, room, grace_seconds=grace
                )
        if nomination is not None:
            going = [pod for pod in nomination.victims if self.state.exists(pod)]
            if going:
                message = (
                    f"{message} It preempted pods in {nomination.domain} and waits for {len(going)} of them to "
                    "terminate."
                )
                return Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, wake=wake, attempt=False)
            log.info("nomination dropped: the room its victims freed is not enough any more", gang=spec.key)
            self._drop_nomination(spec)
        found = self.preemption.plan(spec, request, held)
        if isinstance(found, NoVictims):
            if found.considered:
                result = "not_allowed" if found.reason.startswith("it may not") else "no_victims"
                self.metrics.preemption_attempts.labels(result).inc()
                message = f"{message} Preemption cannot help: {found.reason}."
            return Outcome(
                code=Code.UNSCHEDULABLE,
                message=message,
                pods=pods,
                each_pod=True,
                wake=wake,
            )
        return Outcome(code=Code.PREEMPTING, message=message, pods=pods, wake=wake, victims=found)

    def _assume(
        self, spec: GangSpec, placed: Placement, pods: tuple[str, ...], wake: Wake, placement_ms: float
    ) -> Outcome:
        """Take the placement's room at once (every later gang sees it): the members' places, and the room
        held for members not created yet, which makes the gang wait for them."""
        self.state.reserve(spec.key, placed.assignments)
        log.info(
            "placed",
            gang=spec.key,
            pods=len(placed.assignments),
            placeholders=sum(room.count for room in placed.held),
            nodes=len({a.node for a in placed.assignments} | {room.node for room in placed.held}),
            domains={choice.gang: f"{choice.key}={choice.value}" for choice in placed.domains},
            unplaced=len(placed.unplaced),
            placement_ms=placement_ms,
        )
        if placed.held:
            reservation = self.permit.hold(spec, placed.held)
            for key, placeholder in reservation.placeholders.items():
                self.state.hold(spec.key, key, placeholder.node, placeholder.shape, placeholder.requests)
            return self._holding(spec, reservation)
        if not placed.assignments:
            # The minimum already runs; the extra members still find no room inside the gang's domains.
            message = (
                f"Gang {spec.key} runs with its minimum; {len(placed.unplaced)} extra member(s) wait for room "
                "inside the domains the gang already uses."
            )
            return Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake)
        job = BindJob(spec.key, tuple((a.pod, a.node) for a in placed.assignments), spec.created)
        return Outcome(
            code=Code.SCHEDULED,
            message=f"{len(placed.assignments)} pod(s) placed",
            job=job,
            wake=wake,
            extras_wait=bool(placed.unplaced),
            placement_ms=placement_ms,
        )

    def _existing_fit(self, spec: GangSpec, request: GangRequest, failed: Infeasible, missing: int) -> Outcome | None:
        """The gang did not fit with room for its missing members shaped like their siblings, node
        constraints included. If it fits with that room asked by requests alone, the constraints copied
        onto members that do not exist yet were the obstacle (Kueue may give each pod its own node): a
        guess, not a lack of room. The gang waits for them, holding nothing, and is not called
        unschedulable (cluster-autoscaler would add nodes for it)."""
        if not any(
            part.placeholder_shape and part.placeholder_shape.constraints != NodeConstraints()
            for part in request.walk()
        ):
            return None
        loose = _loose_placeholders(request)
        trial = self.placer(self.state.snapshot, loose, max_tries=self.settings.placement.max_domain_tries)
        if isinstance(trial, Infeasible):
            return None
        message = (
            f"Gang {spec.key} waits for {absent(spec, missing)}. Room for them cannot be held now where their "
            f"siblings' node constraints would put them ({failed.reason}); the gang is placed once they exist."
            f"{_gated(spec)}"
        )
        return Outcome(
            code=Code.UNSCHEDULABLE,
            message=message,
            pods=spec.pods,
            wake=Wake(nodes=True, shapes=frozenset(m.shape for m in spec.request.members()), pods=missing),
            reason=Reason.GANG_WAITING,
            condition=GANG_WAITING,
        )

    def _unknown_members(
        self, spec: GangSpec, pods: tuple[str, ...], wake: Wake, trial: GangRequest | None, shortfalls: list[Shortfall]
    ) -> Outcome:
        """Parts of the gang have no member yet, so no room can be held for them: the gang waits, holding
        nothing. What exists is placed on trial (not kept), so that a gang that would not fit anyway says
        so, and cluster-autoscaler only hears ``Unschedulable`` when more room would help."""
        absent = describe(shortfalls)
        if trial is not None:
            placed = self.placer(self.state.snapshot, trial, max_tries=self.settings.placement.max_domain_tries)
            if isinstance(placed, Infeasible):
                message = f"{placed.message} It also waits for members that do not exist yet: {absent}.{_gated(spec)}"
                return Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake)
        exists = " The members that exist fit now." if trial is not None else ""
        message = f"Gang {spec.key} waits for members that do not exist yet: {absent}.{exists}{_gated(spec)}"
        return Outcome(code=Code.WAIT, message=message, pods=spec.pods)

    def _pinned(self, request: GangRequest) -> GangRequest:
        """The request with every member that is bound or assumed pinned to its node."""
        if request.is_leaf:
            members = tuple(replace(member, node=self.state.placed_node(member.key)) for member in request.pods)
            return replace(request, pods=members)
        return replace(request, children=tuple(self._pinned(child) for child in request.children))

    def _allocatable(self) -> dict[str, int]:
        snapshot = self.state.snapshot
        totals = snapshot.allocatable.sum(axis=0)
        return {name: int(total) for name, total in zip(snapshot.resources, totals, strict=True)}

    # -- permit -------------------------------------------------------------------------------

    def _holding(self, spec: GangSpec, reservation: Reservation, *, attempt: bool = True) -> Outcome:
        message = (
            f"Gang {spec.key} holds room for {absent(spec, reservation.missing)}; it binds when they arrive, or "
            f"releases the room in {reservation.deadline - self.clock.monotonic():.0f}s.{_gated(spec)}"
        )
        return Outcome(code=Code.WAIT, message=message, pods=spec.pods, attempt=attempt)

    def _arrivals(self, spec: GangSpec) -> Outcome | None:
        """Members that arrived take their placeholders' places; None when they do not match (start over)."""
        leaf_of = {member.key: leaf.key for leaf in spec.request.walk() if leaf.is_leaf for member in leaf.pods}
        arrivals = [(member.key, leaf_of.get(member.key, ""), member.shape) for member in self._unplaced(spec)]
        moves = self.permit.arrive(spec.key, arrivals)
        if moves is None:
            return None
        for move in moves:
            if move.left is not None:
                self.state.hold(spec.key, move.placeholder, move.node, move.left.shape, move.left.requests)
            else:
                self.state.unreserve(move.placeholder)
            self.state.reserve(spec.key, [Assignment(pod=move.member, node=move.node, shape=move.shape)])
        reservation = self.permit.reservation(spec.key)
        if not self._meets_minimum(spec.request):
            if reservation.placeholders:
                # Still waiting; what it waits for may have changed (a member arrived, a pod got or lost gates).
                return self._holding(spec, reservation, attempt=False)
            # Every placeholder is taken and the minimum still lacks members (one was deleted, or the
            # minimum was raised): the reservation no longer fits the gang; it is placed afresh.
            return None
        for placeholder in self.permit.release(spec.key):  # complete (room left over: the minimum was lowered)
            self.state.unreserve(placeholder)
        placed = tuple(
            (pod, node)
            for pod in spec.pods
            if self.state.bound_node(pod) is None and (node := self.state.placed_node(pod)) is not None
        )
        log.info("permitted", gang=spec.key, pods=len(placed))
        return Outcome(code=Code.SCHEDULED, message="all members placed", job=BindJob(spec.key, placed, spec.created))

    def _timeout(self, reservation: Reservation) -> None:
        key = reservation.gang
        missing = reservation.missing
        self._release(key)
        spec = self.state.index.get(key)
        timeout = spec.timeout.seconds if isinstance(spec, GangSpec) else 0.0
        cooldown = self.permit.timed_out(key, timeout)
        log.info("gang timed out", gang=key, missing=missing, cooldown_s=round(cooldown, 1))
        if isinstance(spec, GangSpec):
            message = (
                f"Gang {key} timed out waiting for {absent(spec, missing)}; the room it held is released, and it "
                f"holds room again in {cooldown:.0f} s.{_gated(spec)}"
            )
            outcome = Outcome(
                code=Code.UNSCHEDULABLE,
                message=message,
                pods=spec.pods,
                reason=Reason.GANG_TIMEOUT,
                condition=GANG_WAITING,  # it still lacks members; more room would not help it
                wake=Wake(nodes=True),
                attempt=False,
            )
            self._record(spec, outcome)

    def _release(self, key: GangKey) -> None:
        """Drop a gang's reservation and whatever it assumed that is not bound."""
        for placeholder in self.permit.release(key):
            self.state.unreserve(placeholder)
        self.state.release_gang(key)

    # -- recording ------------------------------------------------------------------------------

    def _record(self, gang: GangSpec | GangError, outcome: Outcome) -> None:
        """The one place a decision leaves the cycle: the queue, metrics, the log, conditions, Events and
        group status (upstream's FailureHandler, and what follows a successful cycle)."""
        key = gang.key
        objects = gang.objects if isinstance(gang, GangSpec) else (gang.subject,)
        pods = outcome.pods
        code = outcome.code
        if outcome.attempt:
            self.metrics.attempts.labels(code.value if code is not Code.UNRESOLVABLE else "unschedulable").inc()
        if code in (Code.PLACED, Code.SCHEDULED):
            self.permit.forget(key)  # its timeouts in a row end
            self.vacancies.filled(key)
        if code is Code.PLACED:
            self.nominations.bound(key)
            self._unreserve(key, "bound")
            self.queue.done(key)
            return
        if code in (Code.PREEMPTING, Code.UNRESOLVABLE):
            self._unreserve(key, code.value)  # it makes room by preempting, or no room could ever come
        if code is Code.PREEMPTING:
            assert isinstance(gang, GangSpec) and outcome.victims is not None
            self._preempting(gang, outcome.victims, outcome)
            return
        if code is Code.SCHEDULED:
            assert isinstance(gang, GangSpec) and outcome.job is not None
            nomination = self.nominations.binding(key)
            if nomination is not None:
                self.metrics.preemption_to_bind.observe(max(0.0, self.clock.monotonic() - nomination.decided))
            self.binder.submit(outcome.job)
            self._unreserve(key, "bound")
            self.reporter.group(gang, scheduled=True, message=outcome.message)
            if outcome.extras_wait:  # extras that did not fit wait, inside the gang's domains, for room
                self.queue.failed(key, outcome.wake)
            else:
                self.queue.binding(key)
            return
        self._clear_stale(key, gang.pods)
        if code in (Code.WAIT, Code.INVALID):
            self._unreserve(key, code.value)
            self.queue.remove(key)  # a change of the gang (a member arrives, an object is fixed) brings it back
            if code is Code.WAIT:
                log.info("waiting for members", gang=key, why=outcome.message)
            condition = GANG_WAITING if code is Code.WAIT else SCHEDULER_ERROR
            event_type = "Normal" if code is Code.WAIT else "Warning"
        else:
            if isinstance(gang, GangSpec) and key not in self.queue:
                # Out of the queue while it waited for members (its reservation timed out): known again, to
                # back off like any gang that found no room.
                self.queue.add(key, gang.priority, gang.created)
            wake = outcome.wake if code is Code.UNSCHEDULABLE else Wake(nodes=True)
            # Not backed off past the moment it may reserve room (it has waited long enough by then).
            at_most = self.starvation.until_starving(gang) if isinstance(gang, GangSpec) else None
            backoff = self.queue.failed(key, wake, at_most=at_most)
            log.info(
                "unschedulable",
                gang=key,
                pods=len(pods),
                backoff_s=round(backoff, 2),
                reason=outcome.message,
                placement_ms=outcome.placement_ms,
            )
            condition, event_type = outcome.condition or UNSCHEDULABLE, "Warning"
        if outcome.reported:
            return
        if outcome.reserved is not None and isinstance(gang, GangSpec):
            self._reserving(gang, outcome.reserved)
        reason = outcome.reason or _REASONS[code]
        if reason is Reason.GANG_WAITING:
            event_type = "Normal"
        self.reporter.pending(pods, condition, outcome.message)
        if outcome.each_pod:
            for pod in pods:
                self.reporter.event(self.reporter.pod_subject(pod), reason, outcome.message, type=event_type)
        groups = [ref for ref in objects if ref.kind != "Pod"]
        # The gang's own Event: on its group object, or (when it has none, and each pod has had its own)
        # on its first pod.
        subjects = [self.reporter.gang(groups, () if outcome.each_pod else pods)]
        for subject in subjects:
            self.reporter.event(subject, reason, outcome.message, type=event_type)
        if isinstance(gang, GangSpec):
            # A gang that waits for members is Pending (scheduler-plugins, Volcano), but not Unschedulable: each
            # source's word for that speaks of room (Volcano's says NotEnoughResources), which it does not lack.
            scheduled = self._meets_minimum(gang.request)
            self.reporter.group(gang, scheduled=scheduled, message=outcome.message, waiting=condition == GANG_WAITING)

    def _reserving(self, spec: GangSpec, held: DomainReservation) -> None:
        self.metrics.starvation_reserved.inc()
        note = reserving_note(self.starvation, held)
        log.info("domain reserved", gang=spec.key, domain=held.where, nodes=len(held.nodes), why=note)
        # On its group object, else on a pod still waiting: a running member's Events are about that member.
        waiting = [member.key for member in self._unplaced(spec)] or list(spec.pods)
        subject = self.reporter.gang(spec.objects, waiting)
        self.reporter.event(subject, Reason.RESERVING, note, type="Normal", action="Reserving")

    def _unreserve(self, gang: GangKey, reason: str) -> None:
        """The gang needs no domain reservation any more: it bound, went, or waits for something else."""
        held = self.starvation.forget(gang)
        if held is None:
            return
        self.metrics.starvation_released.labels(reason).inc()
        if reason == "bound":
            self.metrics.starvation_to_bind.observe(max(0.0, self.clock.monotonic() - held.decided))
        log.info("domain reservation released", gang=gang, domain=held.where, reason=reason)
        self._next_in_line(held)

    def _next_in_line(self, ended: DomainReservation) -> None:
        """A reservation ended: the most important gang refused one at its level is tried now, to take it."""
        gang = self.starvation.next_in_line(ended.level)
        if gang is not None:
            self.queue.wake(gang)

    def _drop_nomination(self, spec: GangSpec) -> None:
        self.nominations.drop(spec.key)
        self._clear_stale(spec.key, spec.pods)

    def _clear_stale(self, gang: GangKey, pods: Iterable[str]) -> None:
        """Clear ``nominatedNodeName`` on pending pods of a gang that holds no nomination (any more): the
        room would otherwise stay hidden from everyone else until the pods are gone."""
        if self.evictor is None or gang in self.nominations:
            return
        nominated = self.state.nominated
        self._clearing = {pod for pod in self._clearing if pod in nominated}  # cleared ones the watch showed
        stale = [
            pod
            for pod in pods
            if pod in nominated and pod not in self._clearing and self.state.placed_node(pod) is None
        ]
        if stale:
            self._clearing.update(stale)
            self.evictor.submit(EvictJob(gang, (), tuple((pod, "") for pod in stale), ""))

    def _finish_evictions(self) -> None:
        """Finish the evictions the API shows begun (victims marked) that nobody here carries out: an earlier
        leader's, cut off with its lease. Their units go whole (``preemption/evictions.py``)."""
        if self.evictor is None:
            return
        for preemptor, domain, victims in self.evictions.unfinished():
            log.info("finishing an eviction begun earlier", preemptor=preemptor, pods=[v.pod for v in victims])
            self.metrics.preemption_resumed.inc(len(victims))
            spec = self.state.index.get(preemptor)
            subject = self.reporter.gang(spec.objects, spec.pods) if isinstance(spec, GangSpec) else None
            self.evictor.submit(EvictJob(preemptor, victims, (), domain, subject))

    def _preempting(self, spec: GangSpec, victims: Victims, outcome: Outcome) -> None:
        assert self.evictor is not None
        pods = victims.pods
        going = frozenset(pod.key for pod in pods)
        self.nominations.nominate(
            spec.key,
            spec.priority,
            victims.placement,
            going,
            victims.domain,
            grace_seconds=longest_grace(self.state, going),
        )
        evict = tuple(self.evictions.victim(pod.key) for pod in pods)
        self.evictions.begin(evict)
        subject = self.reporter.gang(spec.objects, spec.pods)
        nominated = tuple(victims.placement.nodes().items())
        self.evictor.submit(EvictJob(spec.key, evict, nominated, victims.domain, subject))
        self.metrics.preemption_attempts.labels("preempted").inc()
        for reason, count in victims_by_reason(victims).items():
            if count:
                self.metrics.preemption_victims.labels(reason).inc(count)
        note = preempting_note(victims)
        log.info("preempting", gang=spec.key, domain=victims.domain, victims=len(pods), by_gang=victims.by_gang())
        self.queue.failed(spec.key, outcome.wake)
        self.reporter.pending(outcome.pods, UNSCHEDULABLE, f"{outcome.message} {note}")
        self.reporter.event(subject, Reason.PREEMPTING, note, type="Normal", action="Preempting")

    def _meets_minimum(self, part: GangRequest) -> bool:
        """Whether the members already bound or assumed satisfy every minimum of ``part``."""
        placed = {member.key for member in part.members() if self.state.placed_node(member.key) is not None}
        return part.satisfied_by(placed)

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
        due = (
            self.queue.next_ready(),
            self.permit.next_deadline(),
            self.state.next_expiry(),
            self.nominations.next_deadline(),
            self.starvation.next_deadline(),
            self.vacancies.next_deadline(),
        )
        deadlines = [d for d in due if d is not None]
        timeout = max(0.0, min(deadlines) - self.clock.monotonic()) if deadlines else 5.0
        if not self._poke.is_set():
            with anyio.move_on_after(timeout):
                await self._poke.wait()
        self._poke = anyio.Event()


def _one_more(leaf: GangRequest) -> GangRequest:
    """A leaf whose minimum is met, asked for one more of its unplaced pods."""
    placed = sum(1 for member in leaf.pods if member.node is not None)
    return replace(leaf, min_pods=max(leaf.min_pods, min(placed + 1, len(leaf.pods))))


def _times(count: int) -> str:
    return "once" if count == 1 else "twice" if count == 2 else f"{count} times"


def _gated(spec: GangSpec) -> str:
    """`` 3 of 4 members are held by scheduling gates: example.com/quota.`` (empty when none is)."""
    if not spec.gated:
        return ""
    total = sum(1 for _ in spec.request.members()) + spec.gated
    return f" {spec.gated} of {total} members are held by scheduling gates: {', '.join(spec.gates)}."


#: The Event reason of each code, unless the outcome names another.
_REASONS = {
    Code.WAIT: Reason.GANG_WAITING,
    Code.INVALID: Reason.INVALID_GANG,
    Code.UNSCHEDULABLE: Reason.FAILED_SCHEDULING,
    Code.UNRESOLVABLE: Reason.FAILED_SCHEDULING,
}


def _problem(error: GangError) -> Outcome:
    """A gang that cannot be compiled: it waits for an object, or must be fixed."""
    code = Code.WAIT if error.problem is Problem.WAITING else Code.INVALID
    return Outcome(code=code, message=error.message, pods=error.pods, each_pod=True)


def _loose_placeholders(request: GangRequest) -> GangRequest:
    """``request`` with its placeholders asking for room by their requests alone, anywhere."""
    if request.is_leaf:
        shape = request.placeholder_shape
        return replace(request, placeholder_shape=PodShape(requests=shape.requests)) if shape else request
    return replace(request, children=tuple(_loose_placeholders(child) for child in request.children))
