"""The cycle's extension points, and what a stage registered at them is told.

As kube-scheduler's framework calls plugins at extension points and never by name, the cycle
(``cycle.py``) calls the stages ``registry.py`` registers, at these points:

- **pre-filter** (:class:`HidesRoom`): before placement, the room the gang must see as taken because it
  is another's (nominated to a preemptor, kept for a lost member's replacement, reserved for a starving
  gang), as a :class:`Hidden`;
- **filter/place**: ``topology.Placer`` (``topology.place``, or a baseline the replay compares with);
- **post-filter** (:class:`PostFilter`): a gang that does not fit, in registration order (preemption,
  then a domain reservation); each answers with the :class:`~scheduler.decision.Outcome` so far, changed
  or not;
- **permit**: ``permit/stage.py``, for gangs that wait for members (it places their arrivals, so it is
  called before placement too);
- **bind**: the binder (``binding.py``), handed the ``BindJob`` of a SCHEDULED outcome.

And every stage (:class:`Stage`) is told what became of each decision (:meth:`Stage.recorded`) and of
each gang (:meth:`Stage.told`: deleted, invalid, done, given back by the binder), so that it drops what it
keeps for a gang; each answers with the gangs to try now. The loop asks every stage what ran out
(:meth:`Stage.due`) and when it is next due, and tells every stage when the lead is lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

import numpy as np

from scheduler.decision import Outcome
from scheduler.gangs import GangError, GangKey, GangSpec
from topology import GangRequest, Snapshot
from topology.domains import IntArray
from topology.quantities import RequestItems

#: Room on node rows: the rows, and what is taken on each (one row of amounts per row).
Rooms = tuple[IntArray, IntArray]


@dataclass(frozen=True, slots=True)
class Hidden:
    """Room one stage keeps from a gang's placement."""

    #: Room on named nodes: each node and what is taken there.
    nodes: Sequence[tuple[str, RequestItems]] = ()
    #: Room on node rows (a domain reservation's nodes).
    rooms: Sequence[Rooms] = ()
    #: Room whose owner may not need it after all (a vacancy, kept for a replacement that may never come):
    #: when a placement fails, ``whose_room.py`` gives it back once more, to name whose room the gang lacks.
    named_by_whose_room: bool = False
    #: What the gang's failure message says of it (empty: nothing, or ``whose_room`` says it).
    note: str = ""

    def __bool__(self) -> bool:
        return bool(self.nodes or self.rooms)


@dataclass(frozen=True, slots=True)
class Tried:
    """A gang's placement that failed, as the post-filters are handed it."""

    spec: GangSpec
    request: GangRequest
    #: The answer so far (UNSCHEDULABLE, with why), or what an earlier post-filter made of it.
    failed: Outcome
    #: The room every pre-filter hid: the room a post-filter may not count on either.
    hidden: Sequence[Hidden]
    #: The gang's minimum is placed and only extras found no room (they preempt one more at a time).
    extras: bool = False

    @property
    def rooms(self) -> list[Rooms]:
        return [room for hidden in self.hidden for room in hidden.rooms]


class GangNews(Enum):
    """What the cycle learned of a gang when it was given back to it (``Cycle.requeue``)."""

    DELETED = "deleted"
    #: Its objects no longer compile (``GangError``): it waits for a fix.
    INVALID = "invalid"
    #: Every member is bound or assumed, and none waits for room.
    DONE = "done"
    #: The binder gave it back: the cluster changed under it, or the API server refused a bind.
    GIVEN_BACK = "given back"


@dataclass(frozen=True, slots=True)
class Due:
    """What ran out in a stage since the loop last asked (``Stage.due``), for the loop to act on."""

    #: Gangs to look at again (``Cycle.requeue``): a hold's cooldown ended.
    requeue: Sequence[GangKey] = ()
    #: Decisions to record (``Cycle.record``): a hold that timed out.
    decided: Sequence[tuple[GangSpec, Outcome]] = ()
    #: Gangs back in the queue to be tried again: a nomination that timed out.
    again: Sequence[GangSpec] = ()
    #: Gangs to try now: the next in line for a reservation that ended.
    wake: Sequence[GangKey] = ()
    #: Nodes whose room the stage no longer keeps for anyone.
    freed: frozenset[str] = frozenset()


@runtime_checkable
class HidesRoom(Protocol):
    """A pre-filter: the room ``spec`` may not take, because it is another's (None: none)."""

    def hide(self, spec: GangSpec, *, missing: int) -> Hidden | None: ...


@runtime_checkable
class PostFilter(Protocol):
    """What follows a placement that failed: room made, or why not, as the outcome."""

    def post_filter(self, tried: Tried) -> Outcome: ...


class Stage:
    """What every registered stage is told; each hook does nothing unless the stage has something to do."""

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> Sequence[GangKey]:
        """The cycle recorded ``outcome`` for ``gang``; returns the gangs to try now."""
        return ()

    def told(self, gang: GangKey, news: GangNews) -> Sequence[GangKey]:
        """What became of ``gang``; returns the gangs to try now."""
        return ()

    def due(self) -> Due:
        """What ran out since the last call (the loop asks at each sync)."""
        return _NOTHING_DUE

    def room_freed(self, nodes: set[str]) -> Sequence[GangKey]:
        """Room was freed on ``nodes``: the gangs that wait for room there, to try now."""
        return ()

    def retry_within(self, spec: GangSpec) -> float | None:
        """The longest a gang that failed may back off before this stage has something for it (seconds)."""
        return None

    def kept_from_wakes(self) -> list[tuple[Rooms, int]]:
        """Room freed that must not wake gangs below a priority (each room and the priority): it is kept for a
        gang, which would only fail again."""
        return []

    def next_deadline(self) -> float | None:
        """When something the stage keeps runs out (monotonic), if anything does."""
        return None

    def lost_lead(self) -> None:
        """Another replica schedules now: drop what was decided here and not written."""


_NOTHING_DUE = Due()


@contextmanager
def hiding(snapshot: Snapshot, room: Iterable[tuple[str, RequestItems]], held: Iterable[Rooms] = ()) -> Iterator[None]:
    """Count ``room`` (nodes and what is taken on each) and ``held`` (node rows and amounts) as taken on
    ``snapshot.free`` for the duration; restored exactly after."""
    rows: list[IntArray] = []
    amounts: list[IntArray] = []
    for node, requests in room:
        row = snapshot.index_of(node)
        if row is not None:
            rows.append(np.array([row], dtype=np.int64))
            amounts.append(snapshot.request_vector(requests).vector[None, :])
    for held_rows, held_amounts in held:
        rows.append(held_rows)
        amounts.append(held_amounts)
    if not rows:
        yield
        return
    at = np.concatenate(rows)
    taken = np.concatenate(amounts)
    free = snapshot.free
    np.subtract.at(free, at, taken)
    try:
        yield
    finally:
        np.add.at(free, at, taken)


def hidden_by_all(hidden: Sequence[Hidden]) -> tuple[list[tuple[str, RequestItems]], list[Rooms]]:
    """The room every stage hid, as :func:`hiding` takes it."""
    return [node for part in hidden for node in part.nodes], [room for part in hidden for room in part.rooms]
