"""The stages of the cycle, registered: one line each, in the order every extension point calls them.

A stage is one module whose class is a :class:`~scheduler.stages.Stage` and serves the extension points
it has the method of (``stages.py``: ``hide`` makes it a pre-filter, ``post_filter`` a post-filter). A new
policy is its module and its line in :func:`register`; the cycle and the loop call the points, never a
stage by name. The permit stage is the one the cycle calls by name: it places the arrivals of gangs that
wait for members before any placement.
"""

from __future__ import annotations

from typing import TypeVar

from scheduler.clock import Clock
from scheduler.decision import DecisionRecorder
from scheduler.journal import Journal
from scheduler.metrics import Metrics
from scheduler.permit.holds import Permit
from scheduler.permit.stage import PermitStage
from scheduler.preemption.evictions import EvictionSink
from scheduler.preemption.postfilter import Preemption
from scheduler.settings import Settings
from scheduler.stages import HidesRoom, PostFilter, Stage
from scheduler.starvation import Starvation
from scheduler.state import ClusterView
from scheduler.vacancies import Vacancies
from scheduler.whose_room import WhoseRoom
from topology import Placer

S = TypeVar("S", bound=Stage)


class Stages:
    """The registered stages, and those at each extension point, in registration order."""

    def __init__(self, stages: tuple[Stage, ...], whose_room: WhoseRoom) -> None:
        self.all = stages
        self.pre_filters: tuple[HidesRoom, ...] = tuple(stage for stage in stages if isinstance(stage, HidesRoom))
        self.post_filters: tuple[PostFilter, ...] = tuple(stage for stage in stages if isinstance(stage, PostFilter))
        self.permit = self.one(PermitStage)
        #: What the cycle adds to a failure when room held or kept for others is what the gang lacks.
        self.whose_room = whose_room

    def find(self, kind: type[S]) -> S | None:
        """The registered stage of ``kind``, if there is one."""
        return next((stage for stage in self.all if isinstance(stage, kind)), None)

    def one(self, kind: type[S]) -> S:
        """The registered stage of ``kind``; one must be registered."""
        stage = self.find(kind)
        if stage is None:
            raise LookupError(f"no {kind.__name__} stage is registered")
        return stage


def register(
    *,
    settings: Settings,
    state: ClusterView,
    clock: Clock,
    permit: Permit,
    placer: Placer,
    reporter: DecisionRecorder,
    metrics: Metrics,
    evictor: EvictionSink | None,
) -> Stages:
    """Every stage of the cycle. Without an ``evictor`` nothing is preempted (the replay benchmark has no API
    to evict through), but the room the API shows nominated is still hidden (``Preemption.hide``)."""
    vacancies = Vacancies(state, settings.permit.replacement_grace_seconds)
    stages = (
        PermitStage(state=state, permit=permit, placer=placer, settings=settings, clock=clock),
        vacancies,
        Preemption(state, settings, vacancies=vacancies, evictor=evictor, reporter=reporter, metrics=metrics),
        Starvation(settings.starvation, state, clock, settings.levels, metrics=metrics, reporter=reporter),
        Journal(clock),  # last: told each decision once the policies acted on it
    )
    whose_room = WhoseRoom(
        state=state, permit=permit, vacancies=vacancies, placer=placer, settings=settings, clock=clock
    )
    return Stages(stages, whose_room)
