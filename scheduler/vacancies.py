"""Room a running gang's lost member leaves, kept for its replacement.

When a bound member of a gang that still runs fails or is deleted (not preempted: that room was made for
the preemptor), its controller makes a replacement, often after a backoff (the Job controller waits 10 s,
then 20 s, ...). Until then the freed node would go to the first pod that fits, and a rack-bound gang
would be left below its minimum with idle GPUs around it. So the room is a *vacancy* for
``permit.replacementGraceSeconds``: every placement of a gang of equal or lower priority sees it taken
(as nominated room, through ``stages.hiding``), higher priorities may take it, and the gang itself
fills it. It ends when the gang is placed again, when it no longer runs (the whole gang went), or at its
deadline. Nothing is written to the API: a new leader simply does not know of vacancies made before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from scheduler.decision import Code, Outcome
from scheduler.gangs import GangError, GangKey, GangSpec, Source
from scheduler.stages import Due, GangNews, Hidden, Stage
from scheduler.state import ClusterView
from topology.quantities import RequestItems

log = structlog.get_logger("phalanx.vacancies")


@dataclass(frozen=True, slots=True)
class Vacancy:
    gang: GangKey
    priority: int
    #: The member that left, where it ran, and what it took there.
    pod: str
    node: str
    requests: RequestItems
    deadline: float  # monotonic


class Vacancies(Stage):
    """The vacancies standing, and the stage that keeps them: a pre-filter (the room hidden) told when a gang
    is placed again or deleted."""

    def __init__(self, state: ClusterView, grace_seconds: float) -> None:
        self.state = state
        self.clock = state.clock
        self.grace_seconds = grace_seconds
        self._by_gang: dict[GangKey, list[Vacancy]] = {}

    def hide(self, spec: GangSpec, *, missing: int) -> Hidden | None:
        room = self.hidden_from(spec.key, spec.priority)
        return Hidden(nodes=room, named_by_whose_room=True) if room else None

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> tuple[GangKey, ...]:
        if outcome.code in (Code.PLACED, Code.SCHEDULED):
            self.filled(gang.key)
        return ()

    def told(self, gang: GangKey, news: GangNews) -> tuple[GangKey, ...]:
        if news is GangNews.DELETED:
            self.filled(gang)
        return ()

    def due(self) -> Due:
        """Keep the room of members that left since the last sync; give back what was kept too long."""
        self.keep()
        return Due(freed=frozenset(vacancy.node for vacancy in self.expired()))

    def lost_lead(self) -> None:
        self._by_gang.clear()  # a new leader keeps no room it did not see left

    def __len__(self) -> int:
        return sum(len(vacancies) for vacancies in self._by_gang.values())

    def left(self, gang: GangKey, priority: int, pod: str, node: str, requests: RequestItems) -> Vacancy | None:
        """A member of a gang that still runs left ``node``: keep its room for the replacement."""
        if self.grace_seconds <= 0:
            return None
        vacancy = Vacancy(gang, priority, pod, node, requests, self.clock.monotonic() + self.grace_seconds)
        self._by_gang.setdefault(gang, []).append(vacancy)
        return vacancy

    def keep(self) -> None:
        """Keep the room of each member of a running gang that left since last asked
        (``ClusterView.take_departures``) for its replacement."""
        state = self.state
        for departure in state.take_departures():
            gang = departure.gang
            spec = state.index.get(gang) if gang is not None else None
            if not isinstance(spec, GangSpec) or spec.source is Source.POD:
                continue
            if not any(state.bound_node(member.key) for member in spec.request.members()):
                self.filled(spec.key)  # the whole gang is going: nothing to replace
                continue
            self.left(spec.key, spec.priority, departure.pod, departure.node, departure.requests)
            log.info("room kept for a replacement", gang=spec.key, pod=departure.pod, node=departure.node)

    def filled(self, gang: GangKey) -> list[Vacancy]:
        """The gang was placed again, or runs no more: its vacancies end."""
        return self._by_gang.pop(gang, [])

    def expired(self) -> list[Vacancy]:
        """Vacancies past their deadline, removed."""
        now = self.clock.monotonic()
        late: list[Vacancy] = []
        for gang, vacancies in list(self._by_gang.items()):
            kept = [vacancy for vacancy in vacancies if vacancy.deadline > now]
            late.extend(vacancy for vacancy in vacancies if vacancy.deadline <= now)
            if kept:
                self._by_gang[gang] = kept
            else:
                del self._by_gang[gang]
        return late

    def next_deadline(self) -> float | None:
        return min((v.deadline for vacancies in self._by_gang.values() for v in vacancies), default=None)

    def kept_from(self, gang: GangKey, priority: int) -> dict[GangKey, list[Vacancy]]:
        """The vacancies ``gang`` may not take, by owner: other gangs' of equal or higher priority."""
        return {
            owner: vacancies
            for owner, vacancies in self._by_gang.items()
            if owner != gang and vacancies[0].priority >= priority
        }

    def hidden_from(self, gang: GangKey, priority: int) -> list[tuple[str, RequestItems]]:
        """The room of :meth:`kept_from`, as ``stages.hiding`` takes it."""
        return [(v.node, v.requests) for vacancies in self.kept_from(gang, priority).values() for v in vacancies]
