"""What one scheduling cycle decided about one gang, as a value (kube-scheduler's ``ScheduleResult`` and
``Status``, for gangs), and the words it is told in.

The cycle computes an :class:`Outcome`; one place (``Cycle.record``) turns it into everything outside the
cycle: the queue's next move, metrics, the log, pod conditions, Events and group status. Everything here is
a value the stages return and the writers read, so this module sits at the bottom of the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Protocol

from scheduler.gangs import GangKey, GangSpec, ObjectRef
from topology import PodShape
from topology.preemption import Victims

#: The ``PodScheduled=False`` condition's reasons: room is missing (cluster-autoscaler acts on it), the
#: gang's definition must be fixed, or the gang waits for members (room would not help it).
UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"
GANG_WAITING = "GangWaiting"


class Reason(StrEnum):
    """Reasons of the Events Phalanx writes (what ``kubectl get events`` shows in its REASON column)."""

    SCHEDULED = "Scheduled"  # Normal, on each pod bound (kube-scheduler's word)
    FAILED_SCHEDULING = "FailedScheduling"  # Warning: no room now (kube-scheduler's word)
    GANG_WAITING = "GangWaiting"  # Normal: the gang waits for members (not created, or gated)
    GANG_TIMEOUT = "GangTimeout"  # Warning: it waited for members longer than its timeout; its room is released
    INVALID_GANG = "InvalidGang"  # Warning: the gang's definition must be fixed
    FAILED_BINDING = "FailedBinding"  # Warning: the API server refused a bind
    PREEMPTING = "Preempting"  # Normal, on the preemptor gang: which pods of which gangs it evicts, and where
    PREEMPTED = "Preempted"  # Normal, on each victim and its group object (kube-scheduler's word)
    FAILED_PREEMPTION = "FailedPreemption"  # Warning, on the preemptor: a victim could not be deleted
    RESERVING = "Reserving"  # Normal, on a gang that waited too long: the domain whose freeing room it reserves


@dataclass(frozen=True, slots=True)
class Subject:
    """What an Event is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Wake:
    """What could make a failed gang fit: node changes, and room for one of these shapes."""

    nodes: bool = True
    shapes: frozenset[PodShape] = frozenset()
    pods: int = 1  # members still to place: how much freed room the gang needs


@dataclass(frozen=True, slots=True)
class BindJob:
    gang: GangKey
    pods: tuple[tuple[str, str], ...]  # (pod, node)
    created: float  # the gang's first creation (wall seconds), for end-to-end latency


class Code(Enum):
    """The kind of decision, and with it what the queue does with the gang."""

    #: Placed: handed to the binder. The queue keeps it aside until its binding shows up as a change of
    #: the gang; if extras did not fit, it backs off and is tried again for them.
    SCHEDULED = "scheduled"
    #: Waits for members (not created yet, or gated), holding room for them or not: out of the queue
    #: until the gang changes (a member arrives) or its hold times out.
    WAIT = "waiting"
    #: No room now: backs off, and is woken early by room freed for one of its shapes or a node change.
    UNSCHEDULABLE = "unschedulable"
    #: No room could ever come from pods finishing (more than the whole cluster holds, a label no node
    #: carries): backs off, and only a change of nodes wakes it early.
    UNRESOLVABLE = "unresolvable"
    #: Its definition must be fixed: out of the queue until one of its objects changes.
    INVALID = "invalid"
    #: No room now, but evicting lower-priority victims makes room: they are evicted and the gang is
    #: nominated to the room; it backs off, woken early when room frees for one of its shapes (its victims
    #: going) or when its nomination times out.
    PREEMPTING = "preempting"
    #: Nothing to decide: every member is bound or being bound. The queue forgets it and its failures.
    PLACED = "placed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    code: Code
    #: What the pods' ``PodScheduled=False`` condition and the Events say (unused when scheduled).
    message: str = ""
    #: The pods the decision is about (their condition says ``message``); empty for SCHEDULED.
    pods: tuple[str, ...] = ()
    #: The Event's reason, when not the code's own (a hold that timed out says GangTimeout).
    reason: Reason | None = None
    #: The PodScheduled condition's reason, when not the code's own: a gang that backs off only because it
    #: lacks members says GangWaiting, not Unschedulable (which cluster-autoscaler acts on).
    condition: str | None = None
    #: The Event goes on each of ``pods`` too, not only on the gang's group object (or first pod).
    each_pod: bool = False
    #: What may wake an UNSCHEDULABLE gang early (shapes that need room, how many pods).
    wake: Wake = field(default_factory=Wake)
    #: SCHEDULED: the pods to bind and where.
    job: BindJob | None = None
    #: PREEMPTING: whom to evict, and where the gang goes once they are gone.
    victims: Victims | None = None
    #: UNSCHEDULABLE: the gang has waited too long and this decision reserved a domain for it; what its
    #: Reserving Event says.
    reserving: str = ""
    #: The preemption post-filter's result, for ``phalanx_preemption_attempts_total`` (empty when it was not
    #: asked, or did not consider preempting): preempted, not_allowed or no_victims.
    preemption: str = ""
    #: SCHEDULED with extras left over: the gang is tried again for them.
    extras_wait: bool = False
    placement_ms: float = 0.0
    #: The user has been told by an Event already (the binder's FailedBinding on the refused pod): the queue,
    #: metrics, the log and the pods' PodScheduled condition follow, no Event.
    reported: bool = False
    #: Whether it counts as a scheduling attempt (``phalanx_schedule_attempts_total``): a waiting gang
    #: whose members arrive one by one, or whose hold times out, has made no new attempt.
    attempt: bool = True


class JobSink(Protocol):
    """Where placed gangs go to be bound (the binding cycle, ``binding.Binder``)."""

    def submit(self, job: BindJob) -> None: ...

    def idle(self) -> bool:
        """Whether no gang is being bound: the loop hands a gang to an idle binder at once."""
        ...

    def starting(self) -> bool:
        """Whether this lead's start is on (no gang's binding ended since the binder began, for at most a
        second): the loop yields often meanwhile, so that the first bindings go out and their answers are read
        at once.
        """
        ...


class DecisionRecorder(Protocol):
    """Where decisions go to be told (``reporting.Reporter``): recorded at once, written later."""

    def pending(self, pods: Iterable[str], reason: str, message: str) -> None: ...

    def event(
        self, subject: Subject | None, reason: Reason, note: str, *, type: str = "Warning", action: str = "Scheduling"
    ) -> None: ...

    def pod_subject(self, pod: str) -> Subject | None: ...

    def gang(self, objects: Sequence[ObjectRef], pods: Sequence[str]) -> Subject | None: ...

    def group(self, spec: GangSpec, *, scheduled: bool, message: str, waiting: bool = False) -> None: ...
