"""The scheduling loop: cluster news folded into the queue, then cycles, then a wait for the next news.

:meth:`SchedulingLoop.run` interleaves cycles (``cycle.py``) with the informers and the binder: it folds
cluster news into the queue (gangs changed, capacity freed, nodes changed), asks every stage what ran out
(holds, nominations, vacancies, domain reservations: ``Stage.due``), runs a batch of cycles, and yields.

:func:`scheduling_loop` builds it, with the stages ``registry.py`` registers; the process (``app.py``),
the tests and the replay benchmark all build it here, each with its own binder, evictor and recorder
(``NullRecorder`` tells nobody anything).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

import anyio
import numpy as np
import structlog
from anyio.abc import TaskStatus

from scheduler.clock import Clock
from scheduler.cycle import Cycle
from scheduler.decision import Code, DecisionRecorder, JobSink, Outcome, Reason, Subject, Wake
from scheduler.gangs import GangKey, GangSpec, ObjectRef
from scheduler.metrics import Gauge, Metrics
from scheduler.permit.holds import Permit
from scheduler.preemption.evictions import EvictionSink
from scheduler.preemption.nominations import Nominations
from scheduler.preemption.postfilter import Preemption
from scheduler.queue import GangQueue
from scheduler.registry import Stages, register
from scheduler.settings import Settings
from scheduler.stages import GangNews, hiding
from scheduler.starvation import Starvation
from scheduler.state import ClusterState
from topology import Placer, PodShape, place
from topology.fit import pods_per_node, shape_fit

log = structlog.get_logger("phalanx.loop")

#: Cycles run back to back before the loop yields to informers and binders.
BATCH = 64
#: While a lead starts (``JobSink.starting``), the most wall seconds a batch runs: a binding's request and
#: answer each need the loop to yield, and a whole batch takes about 0.1 s.
STARTING_SLICE_S = 0.005


class SchedulingLoop:
    def __init__(self, cycle: Cycle, state: ClusterState) -> None:
        """``state`` is the cycle's, whole: the loop alone folds its news and expiries into the queue."""
        self.cycle = cycle
        self.state = state
        self.queue = cycle.queue
        self.permit = cycle.permit
        self.metrics = cycle.metrics
        self.clock = cycle.clock
        self._poke = anyio.Event()
        self._held_labels: set[str] = set()
        self._reservation_levels: set[str] = set()
        self._freed_since_told = False  # room freed since the unresolvable gangs were last read again
        self._tell_again_at = 0.0
        self._shown: dict[tuple[int, str | None], float] = {}  # (gauge, label) -> the value it shows

    @property
    def cycles(self) -> int:
        return self.cycle.count

    @property
    def stages(self) -> Stages:
        return self.cycle.stages

    @property
    def starvation(self) -> Starvation:
        """The reservations standing (what the gauges show, and what ``explain`` and the tests read)."""
        return self.stages.one(Starvation)

    @property
    def nominations(self) -> Nominations:
        """The preemption stage's nominations (what the process and the tests read)."""
        return self.stages.one(Preemption).nominations

    def poke(self) -> None:
        """Something changed (informers call this after applying events): run soon."""
        self._poke.set()

    def step(self) -> bool:
        """Run one cycle for the best ready gang; False when none is ready."""
        return self.cycle.once()

    def place_again(self, gang: GangKey, why: str) -> None:
        """The binder gives a gang back because the cluster changed under it: place it again now."""
        self.cycle.wake(self.cycle.tell(gang, GangNews.GIVEN_BACK))
        self.cycle.requeue(gang)
        self.poke()

    def bind_refused(self, gang: GangKey, why: str) -> None:
        """The API server refused to bind the gang's members: a failed attempt like any other. The gang backs
        off (a change to its pods or to the nodes wakes it sooner), never placed again at once."""
        spec = self.state.index.get(gang)
        self.cycle.wake(self.cycle.tell(gang, GangNews.GIVEN_BACK))
        self.cycle.requeue(gang)
        if isinstance(spec, GangSpec) and gang in self.queue:
            refused = f"binding refused: {why}"
            waiting = tuple(member.key for member in self.state.unplaced(spec.request))
            outcome = Outcome(
                code=Code.UNSCHEDULABLE, message=refused, pods=waiting, wake=Wake(nodes=True), reported=True
            )
            self.cycle.record(spec, outcome)
        self.poke()  # the loop may be idle until a later deadline: this backoff ends sooner

    def requeue_all(self) -> None:
        """Put every known gang that needs anything in the queue (on becoming the leader)."""
        for key in list(self.state.index.results()):
            self.cycle.requeue(key)

    def lost_lead(self) -> None:
        """Another replica schedules now: everything decided but not written is dropped. A new leader
        evaluates every gang afresh from what the API says; victims already terminating are not chosen
        again, and the marks tell it which evictions were begun."""
        for stage in self.stages.all:
            stage.lost_lead()
        self.state.forget_assumptions()

    # -- folding cluster news into the queue ------------------------------------------------------

    def sync(self) -> None:
        state, queue, cycle = self.state, self.queue, self.cycle
        state.refresh_devices()  # before the gangs changed are taken: what a pod asks may change with it
        for key in state.index.take_changed():
            cycle.requeue(key)
        state.expire()
        given_back: set[str] = set()  # room a stage kept and keeps no more (a vacancy never filled)
        for stage in self.stages.all:
            due = stage.due()
            for spec, outcome in due.decided:
                cycle.record(spec, outcome)
            for key in due.requeue:
                cycle.requeue(key)
            for spec in due.again:
                queue.add(spec.key, spec.priority, spec.created)
            cycle.wake(due.wake)
            given_back |= due.freed
        freed, nodes_changed = state.take_signals()
        freed |= given_back
        if nodes_changed:
            queue.wake_nodes()
        self._tell_unresolvable_again(bool(freed))
        if freed:
            cycle.wake(gang for stage in self.stages.all for gang in stage.room_freed(freed))
            kept = [item for stage in self.stages.all for item in stage.kept_from_wakes()]
            with hiding(state.snapshot, [], [room for room, _ in kept]):
                queue.wake_capacity(lambda shape: self._room(shape, freed))
            if kept:  # gangs of higher priority than the room is kept for are not held back by it
                above = min(priority for _, priority in kept)
                queue.wake_capacity(lambda shape: self._room(shape, freed), above=above)
        self._gauges()

    def _tell_unresolvable_again(self, freed: bool) -> None:
        """Read again, at most once per ``reporting.eventIntervalSeconds``, the gangs that cannot fit even in an
        empty domain once room was freed: nothing frees enough for them, but their reason ("18/64 nodes are
        available") counts what is free, and must say it as it is when it is shown."""
        self._freed_since_told = self._freed_since_told or freed
        now = self.clock.monotonic()
        if not self._freed_since_told or not self.cycle.unresolvable or now < self._tell_again_at:
            return
        self._freed_since_told = False
        self._tell_again_at = now + self.cycle.settings.reporting.event_interval_seconds
        for key in sorted(self.cycle.unresolvable):
            self.cycle.requeue(key)

    def _room(self, shape: PodShape, nodes: Iterable[str]) -> int:
        """Pods of ``shape`` the given nodes can take now."""
        snapshot = self.state.snapshot
        rows = np.array([row for row in (snapshot.index_of(name) for name in nodes) if row is not None], dtype=np.int64)
        if not len(rows):
            return 0
        return int(pods_per_node(snapshot.free, shape_fit(snapshot, shape), rows).sum())

    def _gauges(self) -> None:
        for name, count in self.queue.depth().items():
            self._show(self.metrics.queue_depth, name, count)
        self._show(self.metrics.waiting_gangs, None, len(self.permit))
        levels: dict[str, int] = dict.fromkeys(self._reservation_levels, 0)  # a level with none left reads 0
        for reservation in self.starvation.standing():
            level = reservation.level or "cluster"
            levels[level] = levels.get(level, 0) + 1
        for level, count in levels.items():
            self._show(self.metrics.starvation_reservations, level, count)
        self._reservation_levels |= levels.keys()
        held = self.permit.held()
        for name in self._held_labels - held.keys():
            self._show(self.metrics.reserved, name, 0)  # a resource no longer held reads 0, not its last value
        for name, amount in held.items():
            # Base units, as the metric's help says: cores for cpu (held internally in millicores).
            self._show(self.metrics.reserved, name, amount / 1000 if name == "cpu" else amount)
        self._held_labels |= held.keys()

    def _show(self, gauge: Gauge, label: str | None, value: float) -> None:
        """Set a gauge (this loop alone sets these) only when its value changed: the loop folds news far more
        often than they change, and a labelled child's look-up costs more than the comparison."""
        key = (id(gauge), label)
        if self._shown.get(key) == value:
            return
        self._shown[key] = value
        (gauge if label is None else gauge.labels(label)).set(value)

    # -- the loop -----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            self.sync()
            done, binder = 0, self.cycle.binder
            ends = self.clock.monotonic() + STARTING_SLICE_S if binder.starting() else math.inf
            while done < BATCH:
                idle = binder.idle()
                if not self.step():
                    break
                done += 1
                if idle and not binder.idle():
                    break  # the binder had nothing to do: it starts on the gang just placed, not 64 gangs later
                if self.clock.monotonic() >= ends:
                    break
            if done:
                await anyio.sleep(0)  # let informers and binders run between batches
                continue
            await self._idle()

    async def _idle(self) -> None:
        """Wait for a poke, or for the next moment something is due (a backoff, a permit timeout)."""
        due = (
            self.queue.next_ready(),
            self.state.next_expiry(),
            *(stage.next_deadline() for stage in self.stages.all),
        )
        deadlines = [d for d in due if d is not None]
        timeout = max(0.0, min(deadlines) - self.clock.monotonic()) if deadlines else 5.0
        if not self._poke.is_set():
            with anyio.move_on_after(timeout):
                await self._poke.wait()
        self._poke = anyio.Event()


def scheduling_loop(
    *,
    settings: Settings,
    state: ClusterState,
    clock: Clock,
    queue_rng: random.Random,
    permit_rng: random.Random,
    binder: JobSink,
    reporter: DecisionRecorder,
    metrics: Metrics,
    evictor: EvictionSink | None = None,
    placer: Placer = place,
) -> SchedulingLoop:
    """The loop over ``state``, its queue and permit drawing their jitter from their own generators (so
    that a seeded run, as the replay's, draws the same whatever else draws). ``placer`` is the
    placement algorithm (``topology.place``, or a baseline the replay compares it with). Without an
    ``evictor`` nothing is preempted (the replay has no API to evict through)."""
    queue = GangQueue(settings.queue, clock, queue_rng)
    permit = Permit(settings.permit, clock, permit_rng)
    stages = register(
        settings=settings,
        state=state,
        clock=clock,
        permit=permit,
        placer=placer,
        reporter=reporter,
        metrics=metrics,
        evictor=evictor,
    )
    cycle = Cycle(
        settings=settings,
        state=state,
        queue=queue,
        permit=permit,
        binder=binder,
        reporter=reporter,
        clock=clock,
        metrics=metrics,
        placer=placer,
        stages=stages,
    )
    return SchedulingLoop(cycle, state)


class NullRecorder:
    """A recorder that tells nobody anything (a replay's decisions are measured, not told)."""

    def pending(self, pods: Iterable[str], reason: str, message: str) -> None:
        pass

    def event(
        self, subject: Subject | None, reason: Reason, note: str, *, type: str = "Warning", action: str = "Scheduling"
    ) -> None:
        pass

    def pod_subject(self, pod: str) -> Subject | None:
        return None

    def gang(self, objects: Sequence[ObjectRef], pods: Sequence[str]) -> Subject | None:
        return None

    def group(self, spec: GangSpec, *, scheduled: bool, message: str, waiting: bool = False) -> None:
        pass
