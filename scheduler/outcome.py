"""What one scheduling cycle decided about one gang, as a value (kube-scheduler's ``ScheduleResult`` and
``Status``, for gangs).

The cycle computes an :class:`Outcome`; one place (``SchedulingLoop._record``) turns it into everything
outside the cycle: the queue's next move, metrics, the log, pod conditions, Events and group status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from scheduler.binding import BindJob
from scheduler.queue import Wake
from scheduler.reporting import Reason
from scheduler.starvation import DomainReservation
from topology.preemption import Victims


class Code(Enum):
    """The kind of decision, and with it what the queue does with the gang."""

    #: Placed: handed to the binder. The queue keeps it aside until its binding shows up as a change of
    #: the gang; if extras did not fit, it backs off and is tried again for them.
    SCHEDULED = "scheduled"
    #: Waits for members (not created yet, or gated), holding room for them or not: out of the queue
    #: until the gang changes (a member arrives) or its reservation times out.
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
    #: The Event's reason, when not the code's own (a timed-out reservation says GangTimeout).
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
    #: UNSCHEDULABLE: the domain reservation this decision made for the gang (it has waited too long).
    reserved: DomainReservation | None = None
    #: SCHEDULED with extras left over: the gang is tried again for them.
    extras_wait: bool = False
    placement_ms: float = 0.0
    #: The user has been told already (the binder's FailedBinding Event on the refused pod): only the queue,
    #: metrics and the log follow.
    reported: bool = False
    #: Whether it counts as a scheduling attempt (``phalanx_schedule_attempts_total``): a waiting gang
    #: whose members arrive one by one, or whose reservation times out, has made no new attempt.
    attempt: bool = True
