"""Room a preemptor waits for while its victims terminate.

A nomination says: gang G (priority p) evicted these pods and will go to these nodes once they are gone.
Until then, and until its deadline, placements of gangs with priority ``<= p`` other than G see that room
as taken (``stages.hiding``), as kube-scheduler adds nominated pods of equal or higher priority when it
filters a node; gangs of higher priority see it free and may take it. Its victims are never chosen again
by anyone, even after the nomination ends (``evictions.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.clock import Clock
from scheduler.gangs import GangKey, GangSpec
from scheduler.state import ClusterView
from topology import Placement
from topology.quantities import RequestItems


@dataclass(frozen=True, slots=True)
class Nomination:
    gang: GangKey
    priority: int
    #: Where each preemptor pod goes (``status.nominatedNodeName``).
    nodes: tuple[tuple[str, str], ...]
    #: The requests each of those pods takes there.
    room: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    victims: frozenset[str]
    domain: str
    decided: float  # monotonic
    deadline: float  # monotonic


class Nominations:
    def __init__(self, clock: Clock, timeout_seconds: float) -> None:
        self.clock = clock
        self.timeout_seconds = timeout_seconds
        self._by_gang: dict[GangKey, Nomination] = {}
        #: Gangs whose nomination timed out: pods still terminating for them no longer hold them back.
        self.given_up: set[GangKey] = set()
        #: Nominations of gangs placed and being bound: their own assumed pods hold the room now. A bind the
        #: API refuses puts the nomination back (:meth:`resume`), so that the room stays theirs.
        self._binding: dict[GangKey, Nomination] = {}

    def __len__(self) -> int:
        return len(self._by_gang)

    def __contains__(self, gang: object) -> bool:
        return gang in self._by_gang

    def nominate(
        self,
        gang: GangKey,
        priority: int,
        placement: Placement,
        victims: frozenset[str],
        domain: str,
        *,
        grace_seconds: float = 0.0,
    ) -> Nomination:
        """Record a preemption. Its deadline is the timeout, or twice the victims' longest grace period when
        that is longer: victims that checkpoint for ten minutes are not "stuck"."""
        now = self.clock.monotonic()
        nomination = Nomination(
            gang=gang,
            priority=priority,
            nodes=tuple((a.pod, a.node) for a in placement.assignments),
            room=tuple((a.node, a.shape.requests) for a in placement.assignments),
            victims=victims,
            domain=domain,
            decided=now,
            deadline=now + max(self.timeout_seconds, 2 * grace_seconds),
        )
        self._by_gang[gang] = nomination
        return nomination

    def adopt(
        self,
        gang: GangKey,
        priority: int,
        victims: frozenset[str],
        nodes: tuple[tuple[str, str], ...],
        room: tuple[tuple[str, tuple[tuple[str, int], ...]], ...],
        *,
        grace_seconds: float = 0.0,
    ) -> Nomination:
        """A preemption found under way, decided before this process led (its preemptor's pods carry
        ``nominatedNodeName`` and pods are terminating there): waited for, with a fresh timeout, its room
        (each pod's requests on its nominated node) hidden from lower priorities as before."""
        now = self.clock.monotonic()
        nomination = Nomination(
            gang=gang,
            priority=priority,
            nodes=nodes,
            room=room,
            victims=victims,
            domain="the nodes it is nominated to",
            decided=now,
            deadline=now + max(self.timeout_seconds, 2 * grace_seconds),
        )
        self._by_gang[gang] = nomination
        return nomination

    def get(self, gang: GangKey) -> Nomination | None:
        return self._by_gang.get(gang)

    def drop(self, gang: GangKey) -> Nomination | None:
        """Forget the gang's nomination (it was deleted, or its plan no longer holds)."""
        self.given_up.discard(gang)
        self._binding.pop(gang, None)
        return self._by_gang.pop(gang, None)

    def binding(self, gang: GangKey) -> Nomination | None:
        """The gang is placed and its binds are under way: its nomination waits aside."""
        nomination = self._by_gang.pop(gang, None)
        if nomination is not None:
            self._binding[gang] = nomination
        return nomination

    def resume(self, gang: GangKey) -> None:
        """Its binds were refused or lost: the room is the gang's again, until the nomination's deadline."""
        nomination = self._binding.pop(gang, None)
        if nomination is not None:
            self._by_gang[gang] = nomination

    def bound(self, gang: GangKey) -> None:
        self._binding.pop(gang, None)

    def clear(self) -> None:
        self._by_gang.clear()
        self._binding.clear()
        self.given_up.clear()

    def expired(self) -> list[Nomination]:
        """Nominations past their deadline, removed."""
        now = self.clock.monotonic()
        late = [nomination for nomination in self._by_gang.values() if nomination.deadline <= now]
        for nomination in late:
            del self._by_gang[nomination.gang]
            self.given_up.add(nomination.gang)
        return late

    def next_deadline(self) -> float | None:
        return min((nomination.deadline for nomination in self._by_gang.values()), default=None)

    def hidden_from(self, state: ClusterView, gang: GangKey, priority: int) -> list[tuple[str, RequestItems]]:
        """The room ``gang`` may not take: nominated for other gangs of equal or higher priority, as this
        process decided it and as the API shows it (pods' ``status.nominatedNodeName``), each pod once."""
        room: dict[str, tuple[str, RequestItems]] = {}
        for nomination in self._by_gang.values():
            if nomination.gang != gang and nomination.priority >= priority:
                for (pod, _), (node, requests) in zip(nomination.nodes, nomination.room, strict=True):
                    room[pod] = (node, requests)
        for pod, (node, wanted, pod_priority) in state.nominated.items():
            if pod in room:
                continue
            owner = state.index.gang_of(pod)
            if owner == gang:
                continue
            spec = state.index.get(owner) if owner is not None else None
            if (spec.priority if isinstance(spec, GangSpec) else pod_priority) >= priority:  # the gang's priority
                room[pod] = (node, tuple(sorted(wanted.items())))
        return list(room.values())
