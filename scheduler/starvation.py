"""Large gangs do not starve: the room freeing up in one domain is kept for the gang at the head of the line.

On a busy cluster a 64-GPU gang can wait forever while 1-GPU jobs take each GPU that frees up: each of
them fits at once, and it never does. So when a gang has waited ``starvation.reserveAfterSeconds`` and
still does not fit, it may *reserve* a domain (EASY backfilling, with a gang for a job):

- **Where.** At its required level (else its preferred one, else the narrowest level with a domain that
  could ever hold it; the whole cluster last), the domain where it would fit soonest and the nodes there
  to drain (:func:`topology.drain.choose_drain`): those expected to be empty first (by their pods'
  deadlines, else by the runtimes learned of pods like theirs, ``runtimes.py``), then fewest of its main
  resource still in use, lowest priority first. A composite whose parts require domains of their own
  drains part by part inside its own domain (:func:`topology.drain.choose_parts_drain`).
- **Who.** At most ``starvation.maxReservations`` per level. A gang ranked ahead of the least important
  reserving gang in the queue's order (priority, then age) takes its place; anyone else waits its turn.
- **What it reserves.** On each of those nodes, the free room the gang will take there (never more): gangs
  of its priority or lower do not see it. Room it does not need stays everyone's. A gang may still use
  the reserved room if it is sure to have finished before the reserved gang could start (the *shadow time*):
  by its pods' ``activeDeadlineSeconds`` against the deadlines of the pods that must leave those nodes,
  or, where pods set none, by the runtimes learned, with ``starvation.backfillConfidence`` (unknown, so
  never, while nothing was learned). Gangs of higher priority are not held back.
- **Until.** The gang binds, is deleted or changes into something that does not wait for room, or
  ``starvation.maxReserveSeconds`` pass without it binding: then the domain is marked tried and the next
  one is reserved at the gang's next attempt. It moves sooner to a domain of its level with at most half
  as much still in use, and at once when some of its nodes are gone. Nothing is written to the API to
  keep a reservation: a new leader rebuilds it from the same state by the same rule at the gang's first
  attempt.
- **Pinned.** Members already running pin the domain (the rest must join them); a composite whose parts
  require domains makes no reservation once some of it runs (where it runs pins its part, which the
  parts' drain does not follow).

Not to be confused with the room a gang *holds* for members that do not exist yet (``permit/``), nor with
room the cycle *assumes* for a placement (``state/assumptions.py``).

As a stage of the cycle (``stages.py``) it is a pre-filter (the reserved room hidden from the gangs it
holds back) and the last post-filter (a reservation for a gang that has waited too long). Every
reservation that ends, and why, whichever rule ended it, is followed up where it ended (:meth:`Starvation.recorded`,
``told``, ``due``): counted, logged, the gang whose reservation expired or was displaced tried again, and
the gang next in line at the level of one that ended for any other reason tried now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

import numpy as np
import structlog

from scheduler.clock import Clock
from scheduler.decision import Code, DecisionRecorder, Outcome, Reason
from scheduler.gangs import GangError, GangKey, GangSpec
from scheduler.gangs.fields import timestamp
from scheduler.metrics import Metrics
from scheduler.queue import order
from scheduler.runtimes import Estimate
from scheduler.settings import StarvationSettings
from scheduler.stages import Due, GangNews, Hidden, Rooms, Stage, Tried
from scheduler.state import ClusterView, RunningPod
from topology import HOSTNAME, GangRequest, PodShape, Snapshot
from topology.domains import FloatArray, IntArray
from topology.drain import DrainPlan, Level, choose_drain, choose_parts_drain, minimum_shapes, parts_constrained
from topology.fit import cumsum_by_group
from topology.quantities import RequestItems
from topology.quantities import amount_words as counted
from topology.reasons import short_name

log = structlog.get_logger("phalanx.starvation")

_NEVER = np.iinfo(np.int64).max
#: How long a runtime estimate is used before it is made again: what was learned moves slowly, and making
#: it sorts every kind's runtimes (the ages it is applied to are always the current ones).
_ESTIMATE_SECONDS = 60.0
#: A backoff cut short to the moment a gang may reserve ends this much later, so that clock arithmetic
#: never tries it a hair too early.
_MARGIN = 0.001


@dataclass(frozen=True, slots=True)
class DomainReservation:
    gang: GangKey
    priority: int
    #: The gang's place in the queue's order (smaller goes first): who may take a level's reservation.
    rank: tuple[int, float, GangKey]
    level: Level
    domain: str
    #: The nodes to drain, and what the gang's minimum takes on each.
    nodes: tuple[str, ...]
    demand: tuple[RequestItems, ...]
    #: The gang's main resource and how much of it the gang asks for (what messages count in).
    resource: str
    wanted: int
    decided: float  # monotonic
    deadline: float  # monotonic

    @property
    def where(self) -> str:
        """``rack r3``, or ``nodes across the cluster``."""
        return f"{short_name(self.level)} {self.domain}" if self.level is not None else "nodes across the cluster"


@dataclass(frozen=True, slots=True)
class Ended:
    """A reservation that ended, and why: the ``reason`` of ``phalanx_starvation_reservations_released_total``
    (bound, deleted, expired, displaced, nodes_gone, or the code of a decision that needs no reservation)."""

    reservation: DomainReservation
    why: str


@dataclass(frozen=True, slots=True)
class ReservedRoom:
    """Room one reservation keeps from one placement: node rows and what its gang will take on each."""

    reservation: DomainReservation
    rows: IntArray
    amounts: IntArray


class Starvation(Stage):
    """The standing domain reservations and the rules above, and the stage that makes them."""

    def __init__(
        self,
        settings: StarvationSettings,
        state: ClusterView,
        clock: Clock,
        levels: Iterable[str],
        *,
        metrics: Metrics,
        reporter: DecisionRecorder,
    ) -> None:
        self.settings = settings
        self.state = state
        self.clock = clock
        self.metrics = metrics
        self.reporter = reporter
        #: Levels from the narrowest to the widest, then the whole cluster.
        self.narrowest_first: tuple[Level, ...] = (*reversed(tuple(levels)), None)
        self._by_gang: dict[GangKey, DomainReservation] = {}
        #: Domains a gang held without binding (``maxReserveSeconds``), not chosen again until all have been.
        self._tried: dict[GangKey, set[tuple[Level, str]]] = {}
        #: Starving gangs refused a reservation because their level had its count: woken in order of rank
        #: when one there ends, so that the next turn goes to the head of the line, not to whoever is next tried.
        self._in_line: dict[Level, dict[GangKey, tuple[int, float, GangKey]]] = {}
        #: Per snapshot generation: each reservation's rows and demand, and each gang's level.
        self._layouts: dict[GangKey, tuple[int, IntArray, IntArray]] = {}
        self._levels: dict[GangKey, tuple[object, Level, bool]] = {}
        #: Shadow times, worked out once per sync of the loop (pods on the drained nodes change in between).
        self._shadows: dict[GangKey, float] = {}
        #: When pods without a deadline are expected to end, learned from those that did (``runtimes.py``),
        #: and when it was worked out (wall seconds): it is made again at most every ``_ESTIMATE_SECONDS``.
        self._estimate: tuple[Estimate, float] | None = None
        #: The running pods' slots, kinds and ages (nan where no start is known), once per sync.
        self._lifetimes: tuple[IntArray, IntArray, FloatArray] | None = None
        self._ended: list[Ended] = []

    def __len__(self) -> int:
        return len(self._by_gang)

    def __contains__(self, gang: object) -> bool:
        return gang in self._by_gang

    def get(self, gang: GangKey) -> DomainReservation | None:
        return self._by_gang.get(gang)

    def standing(self) -> list[DomainReservation]:
        return sorted(self._by_gang.values(), key=lambda reservation: reservation.rank)

    def refresh(self) -> None:
        """The cluster changed (a sync of the loop): shadow times and guesses are worked out again when asked."""
        self._shadows.clear()
        self._lifetimes = None

    def _guessed(self) -> tuple[Estimate, IntArray, IntArray, FloatArray]:
        """The runtime estimate, and every running pod's slot, kind and age (nan where it has not started)."""
        now = self.clock.wall()
        if self._lifetimes is None:
            slots, kinds, started = self.state.running.lifetimes(self.state.started)
            self._lifetimes = (slots, kinds, np.maximum(now - started, 0.0))
        slots, kinds, ages = self._lifetimes
        if self._estimate is None or now - self._estimate[1] >= _ESTIMATE_SECONDS or now < self._estimate[1]:
            self._estimate = (self.state.runtimes.estimate(kinds, ages, now), now)
        return self._estimate[0], slots, kinds, ages

    def expected_end(self, kind: int, age: float, *, early: bool = False) -> float:
        """When a pod of ``kind`` that has run ``age`` seconds is expected to end (wall seconds; inf: no
        guess); ``early``: as soon as it plausibly could (see ``runtimes.py``, Backfill)."""
        estimate = self._guessed()[0]
        share = 1.0 - self.settings.backfill_confidence if early else None
        return float(estimate.ends(np.array([kind]), np.array([age]), self.clock.wall(), share=share)[0])

    def runtime(self, spec: GangSpec) -> float | None:
        """How long the gang may run once started: the longest ``activeDeadlineSeconds`` of its pods, or, for
        a pod with none, the runtime its kind does not outlast with ``starvation.backfillConfidence``; None
        when one of them could run for as long as anyone knows."""
        longest = 0.0
        for member in spec.request.members():
            record = self.state.pod(member.key)
            if record is None:
                return None
            limit = record.runtime_limit
            if limit is None:
                kind = self.state.runtime_kind(member.key)
                limit = self._guessed()[0].runtime(kind, self.settings.backfill_confidence)
                if limit is None:
                    return None
            longest = max(longest, limit)
        return longest

    # -- the stage -------------------------------------------------------------------------------

    def hide(self, spec: GangSpec, *, missing: int) -> Hidden | None:
        """The room reservations keep from ``spec`` (:meth:`reserved_from`). A gang that waits for members
        cannot promise when it ends: it starts when the last one arrives."""
        if not self._by_gang:
            return None
        reserved = self.reserved_from(spec.key, spec.priority, None if missing else self.runtime(spec))
        if not reserved:
            return None
        return Hidden(rooms=[(item.rows, item.amounts) for item in reserved], note=held_back_note(reserved))

    def post_filter(self, tried: Tried) -> Outcome:
        """The last post-filter: a gang that found no room (and no victims) may reserve (:meth:`consider`);
        extras that find no room never do."""
        return tried.failed if tried.extras else self.consider(tried.spec, tried.request, tried.failed)

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> list[GangKey]:
        """A gang placed needs its reservation no more, nor does one that makes room otherwise, waits for
        something else or never fits; a reservation made is told (a Reserving Event)."""
        code = outcome.code
        if code in (Code.PLACED, Code.SCHEDULED):
            self.drop(gang.key, "bound")
        elif code is not Code.UNSCHEDULABLE:
            self.drop(gang.key, code.value)
        if outcome.reserving and isinstance(gang, GangSpec):
            self.metrics.starvation_reserved.inc()
            log.info("domain reserved", gang=gang.key, why=outcome.reserving)
            # On its group object, else on a pod still waiting: a running member's Events are about that member.
            waiting = [member.key for member in self.state.unplaced(gang.request)] or list(gang.pods)
            subject = self.reporter.gang(gang.objects, waiting)
            self.reporter.event(subject, Reason.RESERVING, outcome.reserving, type="Normal", action="Reserving")
        return self._follow_ended()

    def told(self, gang: GangKey, news: GangNews) -> list[GangKey]:
        if news is GangNews.DELETED:
            self.drop(gang, "deleted")
        elif news is GangNews.DONE:
            self.drop(gang, "bound")
        return self._follow_ended()

    def due(self) -> Due:
        """Shadow times are worked out again when next asked (the cluster changed); reservations held too
        long end."""
        self.refresh()
        self.expired()
        return Due(wake=self._follow_ended())

    def retry_within(self, spec: GangSpec) -> float | None:
        """Not backed off past the moment it may reserve room (it has waited long enough by then)."""
        return self.until_starving(spec)

    def room_freed(self, nodes: set[str]) -> list[GangKey]:
        """Room freed on a reservation's nodes may be what its gang waits for."""
        return self.touching(nodes)

    def kept_from_wakes(self) -> list[tuple[Rooms, int]]:
        return [((item.rows, item.amounts), item.reservation.priority) for item in self.reserved_from_wakes()]

    def lost_lead(self) -> None:
        self.clear()  # a new leader rebuilds reservations from the same state

    def _follow_ended(self) -> list[GangKey]:
        """Count and log each reservation that ended; returns the gangs to try now: one whose reservation
        expired or was displaced (it reserves the next domain if it still does not fit, or waits in line),
        and the gang next in line at its level (to take its place)."""
        wake = []
        for ended in self.take_ended():
            held, why = ended.reservation, ended.why
            self.metrics.starvation_released.labels(why).inc()
            if why == "bound":
                self.metrics.starvation_to_bind.observe(max(0.0, self.clock.monotonic() - held.decided))
            log.info("domain reservation released", gang=held.gang, domain=held.where, reason=why)
            if why in ("expired", "displaced"):
                wake.append(held.gang)
            if why not in ("displaced", "nodes_gone"):  # those were taken by a gang at once
                following = self.next_in_line(held.level)
                if following is not None:
                    wake.append(following)
        return wake

    # -- who reserves what -------------------------------------------------------------------------

    def starving(self, spec: GangSpec) -> bool:
        """Whether the gang has waited long enough to reserve (since its creation, a leader change or not)."""
        return self.settings.enabled and self.clock.wall() - spec.created >= self.settings.reserve_after_seconds

    def until_starving(self, spec: GangSpec) -> float | None:
        """Seconds until the gang may reserve (its backoff should not outlast them); None if it may now, or
        never."""
        if not self.settings.enabled:
            return None
        left = spec.created + self.settings.reserve_after_seconds - self.clock.wall()
        return left + _MARGIN if left > 0 else None

    def next_in_line(self, level: Level) -> GangKey | None:
        """The most important starving gang refused a reservation at ``level`` (taken out of the line)."""
        line = self._in_line.get(level)
        if not line:
            return None
        gang = min(line, key=lambda key: line[key])
        del line[gang]
        return gang

    def claim(self, spec: GangSpec, request: GangRequest) -> tuple[DomainReservation | None, DomainReservation | None]:
        """Reserve a domain for a starving gang that did not fit, if it may have one now: returns the new
        reservation (or None) and the one it displaced (or None). A gang that has one keeps it."""
        if spec.key in self._by_gang:
            return self._closer(spec, request), None
        if parts_constrained(request) and _any_placed(request):
            return None, None
        snapshot = self.state.snapshot
        shapes = minimum_shapes(request)
        level, fits = self._level(spec.key, request, shapes)
        if not fits:
            return None, None
        within = _pinned_domain(snapshot, request)
        rank = order(spec.priority, spec.created, spec.key)
        same_level = [held for held in self._by_gang.values() if held.level == level]
        displaced = None
        if len(same_level) >= self.settings.max_reservations:
            displaced = max(same_level, key=lambda held: held.rank)
            if not rank < displaced.rank:
                self._in_line.setdefault(level, {})[spec.key] = rank
                return None, None
        taken = self._taken(snapshot, request, exclude=displaced.gang if displaced else None)
        priorities, ready = self._nodes_now(snapshot)
        tried = self._tried.setdefault(spec.key, set())
        plan = self._drain(request, shapes, level, priorities, ready, taken=taken, skip=tried, within=within)
        if plan is None and tried:  # every domain may have had its turn: then the round starts again
            plan = self._drain(request, shapes, level, priorities, ready, taken=taken, skip=(), within=within)
            if plan is not None:
                tried.clear()
        if plan is None:
            return None, None
        if displaced is not None:
            self.end(displaced.gang)
            self._ended.append(Ended(displaced, "displaced"))
        self._in_line.get(level, {}).pop(spec.key, None)
        reservation = self._reservation(spec, rank, plan, snapshot)
        self._by_gang[spec.key] = reservation
        self._layouts[spec.key] = (snapshot.generation, plan.rows, plan.demand)
        return reservation, displaced

    def _closer(self, spec: GangSpec, request: GangRequest) -> DomainReservation | None:
        """The gang's reservation moved to another domain of its level where at most half as much is still
        in use as on the nodes it holds (room elsewhere drained faster); None when it stays."""
        held = self._by_gang[spec.key]
        in_use = self.in_use(held)
        if not in_use:
            return None
        snapshot = self.state.snapshot
        priorities, ready = self._nodes_now(snapshot)
        plan = self._drain(
            request,
            minimum_shapes(request),
            held.level,
            priorities,
            ready,
            taken=self._taken(snapshot, request, exclude=spec.key),
            skip=self._tried.get(spec.key, set()),
            within=_pinned_domain(snapshot, request),
        )
        if plan is None or plan.domain == held.domain or 2 * plan.in_use > in_use:
            return None
        self.end(spec.key)
        moved = replace(self._reservation(spec, held.rank, plan, snapshot), deadline=held.deadline)
        self._by_gang[spec.key] = moved
        self._layouts[spec.key] = (snapshot.generation, plan.rows, plan.demand)
        return moved

    def _drain(
        self,
        request: GangRequest,
        shapes: Counter[PodShape],
        level: Level,
        priorities: IntArray,
        ready: FloatArray | None,
        *,
        taken: IntArray | None,
        skip: Collection[tuple[Level, str]],
        within: str | None,
    ) -> DrainPlan | None:
        """Where the gang would fit soonest at ``level``: one drain for its pods, or, for a composite whose
        parts each require a domain, one per part inside the domain chosen."""
        snapshot = self.state.snapshot
        if parts_constrained(request):
            return choose_parts_drain(
                snapshot, request, level, node_priority=priorities, node_ready=ready, taken=taken, skip=skip
            )
        return choose_drain(
            snapshot, shapes, (level,), node_priority=priorities, node_ready=ready, taken=taken, skip=skip,
            within=within,
        )  # fmt: skip

    def _level(self, gang: GangKey, request: GangRequest, shapes: Counter[PodShape]) -> tuple[Level, bool]:
        """The level the gang reserves at, and whether any domain there could ever hold it (cached until the
        nodes or what the gang asks change)."""
        snapshot = self.state.snapshot
        key = (snapshot.generation, frozenset(shapes.items()), request.required, request.preferred)
        cached = self._levels.get(gang)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        if request.required is not None:
            levels: tuple[Level, ...] = (request.required,)
        elif request.preferred is not None:
            levels = (request.preferred, *(level for level in self.narrowest_first if level != request.preferred))
        else:
            levels = self.narrowest_first
        anything = np.zeros(snapshot.n_nodes, dtype=np.int64)  # what runs where does not decide the level
        if parts_constrained(request):  # the composite's own level (its parts' are theirs)
            if request.required is not None:
                levels = (request.required,)
            else:
                levels = (request.preferred, None) if request.preferred is not None else (None,)
            plans = (choose_parts_drain(snapshot, request, level, node_priority=anything) for level in levels)
            plan = next((plan for plan in plans if plan is not None), None)
        else:
            plan = choose_drain(snapshot, shapes, levels, node_priority=anything)
        found = (plan.level, True) if plan is not None else (None, False)
        self._levels[gang] = (key, *found)
        return found

    def _nodes_now(self, snapshot: Snapshot) -> tuple[IntArray, FloatArray]:
        """Per node, the highest priority running there and when every pod there will have ended
        (``RunningPods``): at the latest from their deadlines, else as their kind's runtimes suggest (or
        never). Pods placed and not bound yet count too: they start about now."""
        now = self.clock.wall()
        priorities = self.state.running.cheapest(snapshot, _NEVER)[0]
        estimate, slots, kinds, ages = self._guessed()
        guessed = estimate.ends(kinds, np.nan_to_num(ages, nan=0.0), now)  # not started yet: starts about now
        ready = self.state.running.ready_at(snapshot, now, guessed=(slots, guessed))
        for pod, assumption in self.state.assumed.items():
            row = snapshot.index_of(assumption.node)
            if row is None:
                continue
            record = self.state.pod(pod)
            limit = record.runtime_limit if record is not None else None
            if limit is not None:
                ends = now + limit
            else:
                ends = self.expected_end(self.state.runtime_kind(pod), 0.0) if record is not None else float("inf")
            ready[row] = max(ready[row], ends)
            priorities[row] = max(priorities[row], record.priority if record is not None else 0)
        return priorities, ready

    def _taken(self, snapshot: Snapshot, request: GangRequest, *, exclude: GangKey | None) -> IntArray | None:
        """Room that draining cannot give the gang, as a (n_nodes, n_resources) array: what other reservations
        keep for their gangs, and what the gang's own placed members take (they stay where they are: a node
        full of its own member is no room for its missing one)."""
        others = [gang for gang in self._by_gang if gang != exclude]
        placed = [member for member in request.members() if member.node is not None]
        if not others and not placed:
            return None
        taken = np.zeros_like(snapshot.allocatable)
        for gang in others:
            rows, demand = self._layout(gang)
            np.add.at(taken, rows, demand)
        for member in placed:
            row = snapshot.index_of(member.node) if member.node is not None else None
            if row is not None:
                taken[row] += snapshot.request_vector(member.shape.requests).vector
        return taken

    def _reservation(
        self, spec: GangSpec, rank: tuple[int, float, GangKey], plan: DrainPlan, snapshot: Snapshot
    ) -> DomainReservation:
        now = self.clock.monotonic()
        names = snapshot.names
        resources = snapshot.resources
        demand = tuple(
            tuple((resources[column], int(amount)) for column, amount in enumerate(row.tolist()) if amount)
            for row in plan.demand
        )
        return DomainReservation(
            gang=spec.key,
            priority=spec.priority,
            rank=rank,
            level=plan.level,
            domain=plan.domain,
            nodes=tuple(names[row] for row in plan.rows.tolist()),
            demand=demand,
            resource=plan.resource,
            wanted=plan.wanted,
            decided=now,
            deadline=now + self.settings.max_reserve_seconds,
        )

    # -- ending ------------------------------------------------------------------------------------

    def end(self, gang: GangKey) -> DomainReservation | None:
        """The gang's reservation ends (it bound, was deleted, or was displaced); the domains it tried are
        forgotten only when the gang is (see :meth:`drop`)."""
        self._layouts.pop(gang, None)
        self._shadows.pop(gang, None)
        return self._by_gang.pop(gang, None)

    def drop(self, gang: GangKey, why: str) -> None:
        """The gang needs no reservation any more (``why``: bound, deleted, or the code of a decision that
        needs none)."""
        self._tried.pop(gang, None)
        self._levels.pop(gang, None)
        for line in self._in_line.values():
            line.pop(gang, None)
        held = self.end(gang)
        if held is not None:
            self._ended.append(Ended(held, why))

    def take_ended(self) -> list[Ended]:
        """The reservations ended since last asked, and why."""
        ended, self._ended = self._ended, []
        return ended

    def lost_nodes(self, gang: GangKey) -> None:
        """Release the gang's reservation if some of its nodes are gone (it is made afresh at once)."""
        held = self._by_gang.get(gang)
        snapshot = self.state.snapshot
        if held is not None and any(snapshot.index_of(node) is None for node in held.nodes):
            self.end(gang)
            self._ended.append(Ended(held, "nodes_gone"))

    def consider(self, spec: GangSpec, request: GangRequest, failed: Outcome) -> Outcome:
        """A gang that found no room (and no victims) and has waited too long may reserve a domain; one that
        has a reservation says so. ``failed`` is the cycle's answer so far; returned as it is otherwise."""
        if failed.code is not Code.UNSCHEDULABLE or not failed.attempt or not self.starving(spec):
            return failed
        self.lost_nodes(spec.key)
        made, _ = self.claim(spec, request)
        held = self.get(spec.key)
        if held is None:
            return failed
        reserving = reserving_note(self, made) if made is not None else ""
        return replace(failed, message=f"{failed.message} {reservation_note(self, held)}", reserving=reserving)

    def expired(self) -> list[DomainReservation]:
        """Reservations held ``maxReserveSeconds`` without their gang binding, released; their domains are
        marked tried so that the gang's next reservation goes elsewhere."""
        now = self.clock.monotonic()
        late = [held for held in self._by_gang.values() if held.deadline <= now]
        for held in late:
            self.end(held.gang)
            self._tried.setdefault(held.gang, set()).add((held.level, held.domain))
            self._ended.append(Ended(held, "expired"))
        return late

    def next_deadline(self) -> float | None:
        return min((held.deadline for held in self._by_gang.values()), default=None)

    def clear(self) -> None:
        """Forget everything (leadership lost: another replica schedules now)."""
        self._by_gang.clear()
        self._tried.clear()
        self._in_line.clear()
        self._layouts.clear()
        self._levels.clear()
        self._shadows.clear()
        self._ended.clear()
        self._estimate = None
        self._lifetimes = None

    # -- what others see ---------------------------------------------------------------------------

    def reserved_from(self, gang: GangKey | None, priority: int, runtime: float | None) -> list[ReservedRoom]:
        """The room ``gang`` may not take: on each reservation's nodes, what its gang will take there (as
        nominated room is hidden: free room below it reads as none, and room that frees up later is the
        reservation's too), unless ``gang`` ranks above it by priority, or ``runtime`` (:meth:`runtime`: its
        pods' deadlines, or their kinds' runtimes) ends before the reservation could start."""
        if not self._by_gang:
            return []
        now = self.clock.wall()
        found = []
        for held in self._by_gang.values():
            if held.gang == gang or priority > held.priority:
                continue
            shadow = self.shadow(held)
            if runtime is not None and shadow < float("inf") and now + runtime <= shadow:
                continue  # it will have finished before the reservation could start: EASY backfilling
            rows, demand = self._layout(held.gang)
            if len(rows):
                found.append(ReservedRoom(held, rows, demand))
        return found

    def reserved_from_wakes(self) -> list[ReservedRoom]:
        """The reserved room that freed capacity must not be counted in when it wakes waiting gangs (it would
        wake them to fail again): all of it, but for reservations whose shadow time is known, where a
        short enough gang may still backfill."""
        reserved = self.reserved_from(None, -_NEVER, None)
        return [held for held in reserved if self.shadow(held.reservation) == float("inf")]

    def touching(self, nodes: set[str]) -> list[GangKey]:
        """Gangs with a reservation on any of ``nodes`` (room freed there may be what they wait for)."""
        return [held.gang for held in self._by_gang.values() if not nodes.isdisjoint(held.nodes)]

    def in_use(self, held: DomainReservation) -> int:
        """How much of the gang's main resource is still taken on the nodes it needs (beyond what is free)."""
        snapshot = self.state.snapshot
        rows, demand = self._layout(held.gang)
        column = snapshot.resources.index(held.resource) if held.resource in snapshot.resources else None
        if column is None or not len(rows):
            return 0
        short = demand[:, column] - np.maximum(snapshot.free[rows, column], 0)
        return int(np.clip(short, 0, None).sum())

    def shadow(self, held: DomainReservation) -> float:
        """The moment (wall seconds) by which the reserved gang's nodes will have room for it: at the latest,
        from the deadlines of the pods on them; for a pod with none, as early as its kind's runtimes say it
        plausibly ends (unknown, infinite, when nothing was learned)."""
        cached = self._shadows.get(held.gang)
        if cached is None:
            cached = self._shadows[held.gang] = self._shadow(held)
        return cached

    def _shadow(self, held: DomainReservation) -> float:
        snapshot = self.state.snapshot
        now = self.clock.wall()
        rows, demand = self._layout(held.gang)
        if not len(rows):
            return now
        names = snapshot.names
        node_of, ends, vectors = [], [], []
        for i, row in enumerate(rows.tolist()):
            for pod in snapshot.pods_on(names[row]):
                record = self.state.pod(pod)
                assumed = self.state.assumed.get(pod)
                requests = record.requests if record is not None else assumed.requests if assumed else {}
                node_of.append(i)
                ends.append(max(now, self._ends(pod, record, now, early=True)) if record is not None else float("inf"))
                vectors.append(snapshot.request_vector(tuple(sorted(requests.items()))).vector)
        free = np.maximum(snapshot.free[rows], 0)
        ready = np.where((free >= demand).all(axis=1), now, float("inf"))
        if node_of:
            nodes = np.array(node_of, dtype=np.int64)
            order = np.lexsort((np.array(ends), nodes))
            by_node, when = nodes[order], np.array(ends)[order]
            starts = np.searchsorted(by_node, np.arange(len(rows)))
            released = np.stack(
                [cumsum_by_group(column, starts, by_node) for column in np.stack(vectors)[order].T], axis=1
            )
            enough = (free[by_node] + released >= demand[by_node]).all(axis=1)
            np.minimum.at(ready, by_node[enough], when[enough])
        return float(ready.max())

    def _ends(self, pod: str, record: RunningPod, now: float, *, early: bool) -> float:
        """When a pod will have ended: by its deadline if it has one, else when its kind's runtimes suggest."""
        bound = record.ends_by(now)
        if bound < float("inf"):
            return bound
        started = timestamp(record.start) if record.node is not None else None  # placed, not bound: starts now
        age = 0.0 if started is None else max(now - started, 0.0)
        return self.expected_end(self.state.runtime_kind(pod), age, early=early)

    def _layout(self, gang: GangKey) -> tuple[IntArray, IntArray]:
        """A reservation's node rows and demand on this snapshot (nodes gone since are left out)."""
        snapshot = self.state.snapshot
        cached = self._layouts.get(gang)
        if cached is not None and cached[0] == snapshot.generation:
            return cached[1], cached[2]
        held = self._by_gang[gang]
        rows, demand = [], []
        for node, requests in zip(held.nodes, held.demand, strict=True):
            row = snapshot.index_of(node)
            if row is not None:
                rows.append(row)
                demand.append(snapshot.request_vector(requests).vector)
        width = len(snapshot.resources)
        layout = (
            np.array(rows, dtype=np.int64),
            np.stack(demand) if demand else np.zeros((0, width), dtype=np.int64),
        )
        self._layouts[gang] = (snapshot.generation, *layout)
        return layout


def _any_placed(request: GangRequest) -> bool:
    """Whether some member runs already: in a composite whose parts require domains, where it runs pins
    where its part goes, which the parts' drain does not follow (such a gang reserves nothing)."""
    return any(member.node is not None for member in request.members())


def _pinned_domain(snapshot: Snapshot, request: GangRequest) -> str | None:
    """The domain of the gang's required level where its members already run (its other members must
    join them there), if any do."""
    if request.required is None:
        return None
    column = snapshot.label(request.required)
    for member in request.members():
        row = snapshot.index_of(member.node) if member.node is not None else None
        if row is not None and column.ids[row] >= 0:
            return str(column.values[int(column.ids[row])])
    return None


def amount_words(resource: str, amount: int) -> str:
    """``64 GPUs``, ``12 CPUs``, ``256Gi of memory``, ``16 devices of class gpu.nvidia.com``: an amount of a
    resource for a sentence."""
    if resource.endswith("/gpu"):
        return f"{amount} GPU" if amount == 1 else f"{amount} GPUs"
    if resource == "cpu":
        cores = amount / 1000
        return f"{cores:g} CPU" if cores == 1 else f"{cores:g} CPUs"
    if resource in ("memory", "ephemeral-storage"):
        return f"{amount / 2**30:g}Gi of {resource}"
    return counted(amount, resource)  # devices by their class


def _still_in_use(starvation: Starvation, held: DomainReservation) -> str:
    """``24 GPUs there are still in use`` (what has to finish before the gang fits there)."""
    in_use = starvation.in_use(held)
    if not in_use:
        return "the room it needs there is free"
    verb = "is" if in_use == 1 and held.resource.endswith("/gpu") else "are"
    return f"{amount_words(held.resource, in_use)} there {verb} still in use"


def reserves_words(starvation: Starvation, held: DomainReservation) -> str:
    """``reserves rack r3 for its 64 GPUs; 24 GPUs there are still in use``."""
    wanted = amount_words(held.resource, held.wanted)
    return f"reserves {held.where} for its {wanted}; {_still_in_use(starvation, held)}"


def reservation_note(starvation: Starvation, held: DomainReservation) -> str:
    """``It ... reserves rack r3 for its 64 GPUs; 24 GPUs there are still in use`` and until when."""
    now = starvation.clock.monotonic()
    left = max(0.0, held.deadline - now)
    # Said the same way by the scheduler that just made it and by `explain`'s fresh pass, which cannot know
    # when the running scheduler made it; later the scheduler counts down.
    until = f"for up to {left:.0f}s" if held.decided >= now else f"for another {left:.0f}s at most"
    words = reserves_words(starvation, held)
    return f"It has waited longer than starvation.reserveAfterSeconds and {words} (reserved {until})."


def _room_on(item: ReservedRoom) -> str:
    """``room on 3 nodes of rack r3``, ``room on node n7``."""
    reservation = item.reservation
    if reservation.level == HOSTNAME:
        return f"room on {reservation.where}"
    nodes = len(item.rows)
    return f"room on {nodes} node{'s' if nodes != 1 else ''} of {reservation.where}"


def reserving_note(starvation: Starvation, held: DomainReservation) -> str:
    """The Reserving Event: ``Gang x reserves block b3 for its 64 GPUs; 24 GPUs there are still in use. ...``"""
    nodes = "it" if held.level == HOSTNAME else f"{len(held.nodes)} node{'s' if len(held.nodes) != 1 else ''} there"
    return (
        f"Gang {held.gang} {reserves_words(starvation, held)}. It has waited longer than "
        "starvation.reserveAfterSeconds: the room "
        f"freeing up on {nodes} is kept for it for up to {starvation.settings.max_reserve_seconds:.0f}s, and other "
        "gangs use it only if they are sure to end first (by their activeDeadlineSeconds, or as pods like theirs "
        "have been seen to)."
    )


def held_back_note(held: list[ReservedRoom]) -> str:
    """Why room the gang could otherwise use is not its: the reservations that keep it, in words."""
    parts = [
        f"{_room_on(item)} is reserved for gang {item.reservation.gang}, which has waited too long" for item in held
    ]
    joined = "; ".join(parts)
    return (
        f" {joined[0].upper()}{joined[1:]} (a gang may use it if it is sure to end before that gang could start: "
        "its pods' activeDeadlineSeconds say so, or pods like them have been seen to end in time)."
    )
