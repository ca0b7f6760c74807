"""Evictions begun: once a unit of eviction starts going, all of it goes.

Two things keep that promise beside the evictor's retries:

- the ledger (:meth:`Evictions.begin`, :meth:`Evictions.in_flight`): a victim is never chosen again, by
  anyone, from the moment its eviction is decided until the API shows it terminating or gone, whatever
  becomes of the nomination that chose it. Without it, the pod of a unit whose DELETE is still being
  retried looked like a gang running below its minimum, and a later preemptor took it as a unit of its own;
- :meth:`Evictions.unfinished`: pods the API shows marked as victims of ours (``DisruptionTarget``,
  ``ClusterView.marked_victims``) that no eviction here is deleting, because the leader that began it
  lost its lease. The evictor marks every victim of a job before it deletes any, so a mark is always
  there while a unit is half gone; the unit is finished with the rest of its gang when what would be left
  running is below the gang's minimum, or the gang is evicted only whole (``disruptionMode``), else alone
  (a gang's surplus, a plain pod).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from scheduler.decision import Subject
from scheduler.gangs import GangError, GangKey, GangSpec, ObjectRef, Source
from scheduler.preemption.units import evicted_whole
from scheduler.state import ClusterView


@dataclass(frozen=True, slots=True)
class Victim:
    pod: str
    uid: str
    #: The victim's group object, if its gang has one (its Preempted Event goes there too).
    group: ObjectRef | None


@dataclass(frozen=True, slots=True)
class EvictJob:
    preemptor: GangKey
    victims: tuple[Victim, ...]
    #: (pod, node) of the preemptor's pods, for ``status.nominatedNodeName`` ("" clears it).
    nominated: tuple[tuple[str, str], ...]
    #: Where the room is made ("rack b0-r3"), for the messages.
    domain: str
    #: What the preemptor's Events are about (its group object or first pod); told when a victim could
    #: not be deleted.
    subject: Subject | None = None


class EvictionSink(Protocol):
    """Where preemptions go to be carried out (``preemption.evictor.Evictor``)."""

    def submit(self, job: EvictJob) -> None: ...


def victim_message(scheduler_name: str, preemptor: GangKey | str, domain: str) -> str:
    """The victim condition's message; it starts with the scheduler's name, as kube-scheduler's does."""
    return f"{scheduler_name}: preempted by gang {preemptor} to make room in {domain}"


def read_victim_message(message: str) -> tuple[str, str]:
    """The preemptor and the domain a :func:`victim_message` names ("?" for what it does not say)."""
    _, _, said = message.partition(": preempted by gang ")
    preemptor, _, domain = said.partition(" to make room in ")
    return preemptor or "?", domain or "?"


class Evictions:
    def __init__(self, state: ClusterView) -> None:
        self.state = state
        self._begun: dict[str, str] = {}  # pod -> its uid when its eviction was decided

    def begin(self, victims: Iterable[Victim]) -> None:
        for victim in victims:
            self._begun[victim.pod] = victim.uid

    def in_flight(self) -> set[str]:
        """Victims whose eviction has begun and that the API does not show terminating or gone yet."""
        for pod, uid in list(self._begun.items()):
            record = self.state.pod(pod)
            if record is None or record.deleting or record.finished or record.uid != uid:
                del self._begun[pod]
        return set(self._begun)

    def clear(self) -> None:
        """The lead is lost: the evictor's writes stopped, and the next leader reads what was begun from the marks."""
        self._begun.clear()

    def victim(self, pod: str) -> Victim:
        """``pod`` as a victim: its uid (the DELETE's precondition) and its gang's group object, if any."""
        index = self.state.index
        gang = index.gang_of(pod)
        result = index.get(gang) if gang is not None else None
        group = result.objects[0] if isinstance(result, GangSpec) and result.objects else None
        return Victim(pod, self.state.uid(pod) or "", group)

    def unfinished(self) -> Iterator[tuple[GangKey, str, tuple[Victim, ...]]]:
        """Evictions the API shows begun that nobody here carries out: (preemptor, domain, victims) per unit,
        the preemptor and domain as the mark names them. Each is in flight once returned."""
        marked = self.state.marked_victims
        if not marked:
            return
        going = self.in_flight()
        done: set[str] = set()
        for pod in sorted(marked):
            if pod in going or pod in done:
                continue
            pods = self._unit_of(pod, going)
            done.update(pods)
            victims = tuple(self.victim(each) for each in pods)
            self.begin(victims)
            preemptor, domain = read_victim_message(marked[pod])
            yield GangKey(preemptor), domain, victims

    def _unit_of(self, pod: str, going: set[str]) -> list[str]:
        """The marked pod with what must go with it: the rest of its gang when that would be left running
        below the gang's minimum."""
        index = self.state.index
        gang = index.gang_of(pod)
        result = index.get(gang) if gang is not None else None
        if isinstance(result, GangSpec) and result.source is not Source.POD:
            running = [member.key for member in result.request.members() if self._running(member.key)]
        elif isinstance(result, GangError) and len(result.pods) > 1:  # a broken gang still goes whole
            running = [each for each in result.pods if self._running(each)]
        else:
            return [pod]
        if pod not in running:
            running.append(pod)
        marked = self.state.marked_victims
        staying = {each for each in running if each not in marked and each not in going}
        whole = isinstance(result, GangSpec) and evicted_whole(result, self.state)
        if isinstance(result, GangSpec) and not whole and result.request.satisfied_by(staying):
            return [each for each in running if each in marked and each not in going]
        return [each for each in running if each not in going]

    def _running(self, pod: str) -> bool:
        record = self.state.pod(pod)
        return record is not None and record.node is not None and not record.finished and not record.deleting
