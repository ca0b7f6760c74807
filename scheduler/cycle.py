"""One scheduling cycle: place a gang whole, assume, permit, or a post-filter (docs/architecture.md).

For the gang at the head of the queue, all synchronous (it never awaits the API while it holds the
snapshot), a pipeline of stages that each return a value:

1. an invalid gang, or one waiting for an object, is told so and leaves the queue until an object changes;
2. a gang holding room for missing members gives each arrived member a placeholder's place, and is
   permitted once none is missing (``permit/stage.py``);
3. otherwise its bound or assumed members are pinned where they are, placeholders stand for members not
   created yet, and the placer (``topology.place``) decides, with the room the pre-filters name (others'
   nominations, vacancies, reservations) hidden from it;
4. a placement is assumed at once (every later gang sees it), then held for missing members (permit) or
   handed to the binder; a gang that does not fit goes through the post-filters (preemption, then a
   domain reservation if it has waited too long).

The stages are registered in ``registry.py`` and called at the extension points of ``stages.py``; the
cycle names none but permit. The answer is an :class:`Outcome`, and :meth:`Cycle.record` is the one place a
decision leaves the cycle: every stage is told it (a preemption is carried out by its stage), then the
queue moves, metrics, the log, pod conditions, Events, group status, and the bind handed to the binder.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

import structlog

from scheduler.clock import Clock
from scheduler.decision import (
    GANG_WAITING,
    SCHEDULER_ERROR,
    UNSCHEDULABLE,
    BindJob,
    Code,
    DecisionRecorder,
    JobSink,
    Outcome,
    Reason,
    Wake,
)
from scheduler.gangs import (
    GangError,
    GangKey,
    GangSpec,
    Problem,
    beyond_cluster,
    min_resources_problem,
)
from scheduler.metrics import Metrics
from scheduler.permit.holds import Permit, with_placeholders
from scheduler.permit.missing import absent, gated, split_unknown
from scheduler.queue import GangQueue
from scheduler.registry import Stages
from scheduler.settings import Settings
from scheduler.stages import GangNews, Hidden, Tried, hidden_by_all, hiding
from scheduler.state import ClusterView
from topology import GangRequest, Infeasible, Member, Placement, Placer
from topology.quantities import DEVICES

log = structlog.get_logger("phalanx.cycle")


class Cycle:
    def __init__(
        self,
        *,
        settings: Settings,
        state: ClusterView,
        queue: GangQueue,
        permit: Permit,
        binder: JobSink,
        reporter: DecisionRecorder,
        clock: Clock,
        metrics: Metrics,
        placer: Placer,
        stages: Stages,
    ) -> None:
        self.settings = settings
        self.placer = placer
        self.state = state
        self.queue = queue
        self.permit = permit
        self.binder = binder
        self.reporter = reporter
        self.clock = clock
        self.metrics = metrics
        self.stages = stages
        self.permitting = stages.permit
        self.count = 0
        #: What each invalid gang was last told (its log line is written once per message, not per pod or pass).
        self._invalid: dict[GangKey, str] = {}
        #: Gangs that cannot fit even in an empty domain: only more nodes help them, so freed room does not
        #: wake them; the loop reads them again now and then, so that their numbers stay current.
        self.unresolvable: set[GangKey] = set()

    def once(self) -> bool:
        """Try the best ready gang; False when none is ready."""
        key = self.queue.pop()
        if key is None:
            return False
        self.count += 1
        result = self.state.index.get(key)
        if result is None:
            self.queue.remove(key)
            return True
        # Every line logged while deciding about the gang names it, whoever logs it (stages, placement's caller).
        with structlog.contextvars.bound_contextvars(gang=key):
            if isinstance(result, GangError):
                self.record(result, _problem(result))
            else:
                self.record(result, self.schedule(result))
        return True

    def schedule(self, spec: GangSpec) -> Outcome:
        """Decide about one gang."""
        if self.permit.holds(spec.key):
            arrived = self.permitting.arrivals(spec)
            if arrived is not None:
                return arrived
        unplaced = self.state.unplaced(spec.request)
        if not unplaced:
            return Outcome(code=Code.PLACED, attempt=False)
        pods = tuple(member.key for member in unplaced)
        request, missing = with_placeholders(self._pinned(spec.request))
        wake = Wake(nodes=True, shapes=frozenset(member.shape for member in unplaced), pods=len(unplaced))
        too_big = beyond_cluster(request, self.state.snapshot)
        if too_big is not None:  # only more nodes help; nothing is held
            message = too_big.message + self.state.device_note(_device_columns(request))
            message += f" It also waits for {absent(spec, missing)}.{gated(spec)}" if missing else ""
            return Outcome(code=Code.UNRESOLVABLE, message=message, pods=pods, each_pod=True)
        never = min_resources_problem(spec.key, spec.min_resources, self.state.snapshot, at_all=True)
        if never is not None:  # only more nodes help: evicting or holding room would be for nothing
            return Outcome(code=Code.UNRESOLVABLE, message=never, pods=pods, each_pod=True)
        trial, shortfalls = split_unknown(request)
        if shortfalls:
            return self.permitting.unknown_members(spec, pods, wake, trial, shortfalls)
        waits = self.permitting.before_placing(spec, request, missing, wake)
        if waits is not None:
            return waits
        return self._place(spec, request, pods, missing, wake)

    def _place(self, spec: GangSpec, request: GangRequest, pods: tuple[str, ...], missing: int, wake: Wake) -> Outcome:
        """Place the gang with the room the pre-filters name hidden; what does not fit goes through the
        post-filters."""
        hidden = [part for stage in self.stages.pre_filters if (part := stage.hide(spec, missing=missing))]
        problem = min_resources_problem(spec.key, spec.min_resources, self.state.snapshot)
        if problem is not None:
            # No search can succeed, but room can still be made: by preemption, or by a reservation for a
            # gang that has waited too long (the training-operator's and LWS's groups all declare minResources).
            failed = Outcome(code=Code.UNSCHEDULABLE, message=problem, pods=pods, each_pod=True, wake=wake)
            return failed if missing else self._post_filter(Tried(spec, request, failed, hidden))
        started = time.perf_counter()
        with hiding(self.state.snapshot, *hidden_by_all(hidden)):
            placed = self.placer(self.state.snapshot, request, max_tries=self.settings.placement.max_domain_tries)
        placement_ms = round((time.perf_counter() - started) * 1000, 3)
        outcome = self._placed(
            spec, request, placed, pods=pods, missing=missing, wake=wake, hidden=hidden, placement_ms=placement_ms
        )
        return replace(outcome, placement_ms=placement_ms)

    def _placed(
        self,
        spec: GangSpec,
        request: GangRequest,
        placed: Placement | Infeasible,
        *,
        pods: tuple[str, ...],
        missing: int,
        wake: Wake,
        hidden: list[Hidden],
        placement_ms: float,
    ) -> Outcome:
        """What follows the placement: assume it, or say why it failed and go through the post-filters."""
        if not isinstance(placed, Infeasible):
            assumed = self._assume(spec, placed, pods, wake, placement_ms)
            if assumed.code is Code.UNSCHEDULABLE and not missing:  # extras without room
                return self._post_filter(Tried(spec, request, assumed, hidden, extras=True))
            return assumed
        if missing:
            waits = self.permitting.existing_fit(spec, request, placed, missing)
            if waits is not None:
                return waits
        message = placed.message + self.state.device_note(_device_columns(request))
        if missing:  # the room was sought for members that do not exist yet, too: say so
            message += f" It also waits for {absent(spec, missing)}.{gated(spec)}"
        if placed.unresolvable:
            return Outcome(code=Code.UNRESOLVABLE, message=message, pods=pods, each_pod=True)
        message += "".join(part.note for part in hidden)
        if any(part.named_by_whose_room for part in hidden) or len(self.permit):
            others = [part for part in hidden if not part.named_by_whose_room]
            message += self.stages.whose_room.note(spec, request, others)
        failed = Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake)
        return failed if missing else self._post_filter(Tried(spec, request, failed, hidden))

    def _post_filter(self, tried: Tried) -> Outcome:
        """Each post-filter in turn, with the answer so far (preemption, then a reservation)."""
        for stage in self.stages.post_filters:
            tried = replace(tried, failed=stage.post_filter(tried))
        return tried.failed

    def _assume(
        self, spec: GangSpec, placed: Placement, pods: tuple[str, ...], wake: Wake, placement_ms: float
    ) -> Outcome:
        """Take the placement's room at once (every later gang sees it): the members' places, and the room
        held for members not created yet, which makes the gang wait for them."""
        self.state.assume(spec.key, placed.assignments)
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
            return self.permitting.hold(spec, placed)
        if not placed.assignments:
            # The minimum already runs; the extra members still find no room inside the gang's domains.
            message = (
                f"Gang {spec.key} runs with its minimum; {len(placed.unplaced)} extra member(s) wait for room "
                "inside the domains the gang already uses."
            )
            return Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake)
        job = BindJob(spec.key, tuple((a.pod, a.node) for a in placed.assignments), spec.created)
        # Only a group's status says this, of the gang as a whole, not only of the members placed last: counted for
        # gangs that have a group object, a pass over the members a gang of annotations need not pay.
        placed_now = len(placed.assignments)
        in_all = sum(self.state.placed_node(pod) is not None for pod in spec.pods) if spec.objects else placed_now
        message = (
            f"{placed_now} pod(s) placed"
            if in_all <= placed_now
            else f"{placed_now} more pod(s) placed, {in_all} in all"
        )
        return Outcome(
            code=Code.SCHEDULED,
            message=message,
            job=job,
            wake=wake,
            extras_wait=bool(placed.unplaced),
        )

    def _pinned(self, request: GangRequest) -> GangRequest:
        """The request with every member that is bound or assumed pinned to its node."""
        # Unchanged parts are kept as they are (a gang waiting to be placed has none bound or assumed): a
        # dataclass's replace costs microseconds, and this runs for every member at every attempt.
        if request.is_leaf:
            nodes = [self.state.placed_node(member.key) for member in request.pods]
            if all(node == member.node for node, member in zip(nodes, request.pods, strict=True)):
                return request
            members = tuple(
                member if node == member.node else Member(key=member.key, shape=member.shape, node=node)
                for node, member in zip(nodes, request.pods, strict=True)
            )
            return replace(request, pods=members)
        children = tuple(self._pinned(child) for child in request.children)
        if all(new is old for new, old in zip(children, request.children, strict=True)):
            return request
        return replace(request, children=children)

    # -- what follows a decision ----------------------------------------------------------------

    def requeue(self, key: GangKey) -> None:
        """The gang changed (or may have): back in the queue if it needs anything, else done with."""
        result = self.state.index.get(key)
        if result is None:
            wake = self.tell(key, GangNews.DELETED)
            self.queue.remove(key)
            self._invalid.pop(key, None)
            self.unresolvable.discard(key)
        elif isinstance(result, GangError):
            wake = self.tell(key, GangNews.INVALID)
            self.record(result, _problem(result))
        elif self.permit.holds(key) or self.state.unplaced(result.request):
            wake = []
            self.queue.add(key, result.priority, result.created)
        else:
            wake = self.tell(key, GangNews.DONE)
            self.queue.done(key)
        self.wake(wake)

    def tell(self, key: GangKey, news: GangNews) -> list[GangKey]:
        """Tell every stage what became of the gang; returns the gangs they would try now."""
        return [woken for stage in self.stages.all for woken in stage.told(key, news)]

    def wake(self, gangs: Iterable[GangKey]) -> None:
        for gang in gangs:
            self.queue.wake(gang)

    def record(self, gang: GangSpec | GangError, outcome: Outcome) -> None:
        """The one place a decision leaves the cycle: every stage is told it, then the queue, metrics, the
        log, conditions, Events and group status (upstream's FailureHandler, and what follows a successful
        cycle); last, the gangs the stages would try now are woken."""
        key, code = gang.key, outcome.code
        if code is Code.INVALID and self._invalid.get(key) != outcome.message:
            self._invalid[key] = outcome.message
            log.info("invalid gang", gang=key, pods=len(outcome.pods), why=outcome.message)
        elif code is not Code.INVALID:
            self._invalid.pop(key, None)
        (self.unresolvable.add if code is Code.UNRESOLVABLE else self.unresolvable.discard)(key)
        if outcome.attempt:
            self.metrics.attempts.labels(code.value if code is not Code.UNRESOLVABLE else "unschedulable").inc()
        if outcome.placement_ms:
            self.metrics.placement_duration.observe(outcome.placement_ms / 1000)
        if outcome.preemption:
            self.metrics.preemption_attempts.labels(outcome.preemption).inc()
        if outcome.reason is Reason.GANG_TIMEOUT:
            self.metrics.gang_timeouts.inc()
        wake = [woken for stage in self.stages.all for woken in stage.recorded(gang, outcome)]
        if code is Code.PLACED:
            self.queue.done(key)
        elif code is Code.SCHEDULED:
            assert isinstance(gang, GangSpec) and outcome.job is not None
            self._scheduled(gang, outcome, outcome.job)
        elif code is Code.PREEMPTING:
            self.queue.failed(key, outcome.wake)  # tried again once its victims are gone, or sooner
            self.reporter.pending(outcome.pods, UNSCHEDULABLE, outcome.message)
        else:
            self._failed(gang, outcome)
        self.wake(wake)

    def _scheduled(self, spec: GangSpec, outcome: Outcome, job: BindJob) -> None:
        self.binder.submit(job)
        self.reporter.group(spec, scheduled=True, message=outcome.message)
        if outcome.extras_wait:  # extras that did not fit wait, inside the gang's domains, for room
            self.queue.failed(spec.key, outcome.wake)
        else:
            self.queue.binding(spec.key)

    def _failed(self, gang: GangSpec | GangError, outcome: Outcome) -> None:
        """Waiting, invalid, or no room: the queue's move, then the pods' condition and the Events."""
        key, code, pods = gang.key, outcome.code, outcome.pods
        if code in (Code.WAIT, Code.INVALID):
            self.queue.remove(key)  # a change of the gang (a member arrives, an object is fixed) brings it back
            if code is Code.WAIT:
                log.info("waiting for members", gang=key, why=outcome.message)
            condition = GANG_WAITING if code is Code.WAIT else SCHEDULER_ERROR
            event_type = "Normal" if code is Code.WAIT else "Warning"
        else:
            if isinstance(gang, GangSpec) and key not in self.queue:
                # Out of the queue while it waited for members (its hold timed out): known again, to back off
                # like any gang that found no room.
                self.queue.add(key, gang.priority, gang.created)
            wake = outcome.wake if code is Code.UNSCHEDULABLE else Wake(nodes=True)
            at_most = self._retry_within(gang) if isinstance(gang, GangSpec) else None
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
            self.reporter.pending(pods, condition, outcome.message)
            return
        reason = outcome.reason or _REASONS[code]
        if reason is Reason.GANG_WAITING:
            event_type = "Normal"
        self.reporter.pending(pods, condition, outcome.message)
        if outcome.each_pod:
            for pod in pods:
                self.reporter.event(self.reporter.pod_subject(pod), reason, outcome.message, type=event_type)
        objects = gang.objects if isinstance(gang, GangSpec) else (gang.subject,)
        groups = [ref for ref in objects if ref.kind != "Pod"]
        # The gang's own Event: on its group object, or (when it has none, and each pod has had its own)
        # on its first pod.
        subject = self.reporter.gang(groups, () if outcome.each_pod else pods)
        self.reporter.event(subject, reason, outcome.message, type=event_type)
        if isinstance(gang, GangSpec):
            # A gang that waits for members is Pending (scheduler-plugins, Volcano), but not Unschedulable: each
            # source's word for that speaks of room (Volcano's says NotEnoughResources), which it does not lack.
            scheduled = self.state.meets_minimum(gang.request)
            self.reporter.group(gang, scheduled=scheduled, message=outcome.message, waiting=condition == GANG_WAITING)

    def _retry_within(self, spec: GangSpec) -> float | None:
        """The longest the gang may back off: until the first stage that will have something for it (a
        reservation, once it has waited long enough)."""
        limits = [limit for stage in self.stages.all if (limit := stage.retry_within(spec)) is not None]
        return min(limits, default=None)


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


def _device_columns(request: GangRequest) -> list[str]:
    """The columns of devices the gang's pods ask (for what keeps devices from them)."""
    return [name for member in request.members() for name, _ in member.shape.requests if name.startswith(DEVICES)]
