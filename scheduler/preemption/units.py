"""Running pods as units of eviction, and who may be a victim of whom.

- A gang of Phalanx's is one unit as a whole (every bound pod of it), at its gang's priority. Its pods
  beyond a leaf's minimum are also units of one each, *surplus*, which the search takes first; the
  rest of the gang never goes without all of it. A gang whose upstream group object says
  ``disruptionMode: PodGroup`` is only ever evicted whole.
- Any other pod (a plain pod, another scheduler's pod) is a unit of one at its own priority: priority is
  cluster-wide, as in kube-scheduler.
- Only units of strictly lower priority than the preemptor are returned; pods already being deleted,
  or whose deletion Phalanx has just asked for, are not (their room is on its way).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set

from scheduler.gangs import GangError, GangKey, GangSpec, Source
from scheduler.gangs.pods import PHALANX_GROUP, UPSTREAM_GROUP
from scheduler.state import ClusterView
from topology import GangRequest
from topology.domains import IntArray
from topology.preemption import Unit, VictimPod

#: ``disruptionMode`` values that mean "the whole group goes, or nothing": 1.36's enum ``PodGroup`` (and the
#: KEP reviewers' names); ``Pod``, ``Single`` and ``Basic`` allow one pod at a time. 1.37 makes the mode a
#: union, ``{all: {}}`` or ``{single: {}}`` (:func:`whole_only`).
WHOLE_GROUP_MODES = frozenset({"PodGroup", "All", "Group"})


def whole_only(mode: object) -> bool:
    """Whether a group's ``disruptionMode`` (1.36's string, 1.37's union) lets it be evicted only whole."""
    if isinstance(mode, Mapping):
        return mode.get("all") is not None
    return isinstance(mode, str) and mode in WHOLE_GROUP_MODES


def evicted_whole(spec: GangSpec, state: ClusterView) -> bool:
    """Whether one of the gang's upstream (or Phalanx's) group objects lets it be evicted only whole."""
    for ref in spec.objects:
        if ref.group not in (UPSTREAM_GROUP, PHALANX_GROUP):
            continue
        group = state.index.group(ref)
        if group is not None and whole_only(group.spec.get("disruptionMode")):
            return True
    return False


def never_preempts(spec: GangSpec, state: ClusterView) -> str | None:
    """Why the gang may not preempt (``preemptionPolicy: Never`` on a pod or its group's PriorityClass)."""
    for member in spec.request.members():
        info = state.index.pod(member.key)
        pod_spec = info.raw.get("spec") if info is not None else None
        if isinstance(pod_spec, dict) and pod_spec.get("preemptionPolicy") == "Never":
            return f"its pod {member.key} has preemptionPolicy Never"
    for ref in spec.objects:
        group = state.index.group(ref)
        name = group.spec.get("priorityClassName") if group is not None else None
        if isinstance(name, str) and state.index.never_preempts(name):
            return f"its PriorityClass {name} has preemptionPolicy Never"
    return None


class UnitSource:
    """The units a preemptor of ``priority`` may evict, on given node rows (``topology.UnitSource``)."""

    def __init__(self, state: ClusterView, preemptor: GangKey, priority: int, in_flight: Set[str]) -> None:
        self.state = state
        self.preemptor = preemptor
        self.priority = priority
        self.in_flight = in_flight
        self._gangs: dict[GangKey, list[Unit]] = {}
        self._requests: dict[int, tuple[tuple[str, int], ...]] = {}  # ClusterView shares one dict per request

    def __call__(self, rows: IntArray) -> list[Unit]:
        state = self.state
        units: list[Unit] = []
        seen: set[GangKey] = set()
        for pod in state.running.on_rows(state.snapshot, rows, self.priority):
            if pod in self.in_flight:
                continue
            gang = state.index.gang_of(pod)
            result = state.index.get(gang) if gang is not None else None
            if gang is not None and isinstance(result, GangSpec) and result.source is not Source.POD:
                if gang not in seen:
                    seen.add(gang)
                    units.extend(self._gang_units(result))
                continue
            if gang is not None and isinstance(result, GangError) and len(result.pods) > 1:
                # A gang whose definition is broken now (its group deleted or invalid) still runs as a
                # gang: it goes whole or not at all, at the highest priority among its pods.
                if gang not in seen:
                    seen.add(gang)
                    units.extend(self._broken_gang_unit(gang, result))
                continue
            victim = self._victim(pod)
            record = state.pod(pod)
            if victim is not None and record is not None:
                units.append(Unit(f"pod {pod}", (victim,), record.priority, record.started, pod))
        return units

    def _gang_units(self, spec: GangSpec) -> list[Unit]:
        if spec.key == self.preemptor or spec.priority >= self.priority:
            return []
        cached = self._gangs.get(spec.key)
        if cached is None:
            cached = self._gangs[spec.key] = list(self._build_gang_units(spec))
        return cached

    def _build_gang_units(self, spec: GangSpec) -> Iterator[Unit]:
        if any(member.key in self.state.assumed for member in spec.request.members()):
            return  # being bound, or holding room for members: what "whole" means is still changing
        victims = {member.key: victim for member in spec.request.members() if (victim := self._victim(member.key))}
        if not victims:
            return
        started = {key: self._started(key) for key in victims}
        yield Unit(f"gang {spec.key}", tuple(victims.values()), spec.priority, max(started.values()), str(spec.key))
        if evicted_whole(spec, self.state):
            return
        surplus = [key for leaf in _leaves(spec.request) for key in _beyond_minimum(leaf, victims, started)]
        if not spec.request.satisfied_by(set(victims) - set(surplus)):
            return  # already below its minimum: only the whole gang may go
        for key in surplus:
            yield Unit(f"pod {key}", (victims[key],), spec.priority, started[key], str(spec.key), surplus=True)

    def _broken_gang_unit(self, gang: GangKey, error: GangError) -> list[Unit]:
        if gang == self.preemptor or any(pod in self.state.assumed for pod in error.pods):
            return []
        records = [(pod, self.state.pod(pod)) for pod in error.pods]
        priority = max((record.priority for _, record in records if record is not None), default=0)
        if priority >= self.priority:
            return []
        victims = [victim for pod, _ in records if (victim := self._victim(pod)) is not None]
        if not victims:
            return []
        started = max(self._started(victim.key) for victim in victims)
        return [Unit(f"gang {gang}", tuple(victims), priority, started, str(gang))]

    def _victim(self, pod: str) -> VictimPod | None:
        """The pod as a victim, if it runs and is not going already."""
        record = self.state.pod(pod)
        if record is None or record.node is None or record.finished or record.deleting or pod in self.in_flight:
            return None
        namespace = pod.split("/", 1)[0]
        budgets = self.state.budgets.covering(namespace, record.labels or {}) if len(self.state.budgets) else ()
        requests = self._requests.get(id(record.requests))
        if requests is None:
            requests = self._requests[id(record.requests)] = tuple(sorted(record.requests.items()))
        return VictimPod(pod, record.node, requests, budgets)

    def _started(self, pod: str) -> float:
        record = self.state.pod(pod)
        return record.started if record is not None else 0.0


def _leaves(request: GangRequest) -> Iterator[GangRequest]:
    return (part for part in request.walk() if part.is_leaf)


def _beyond_minimum(leaf: GangRequest, running: dict[str, VictimPod], started: dict[str, float]) -> list[str]:
    """The leaf's running pods beyond its minimum, the most recently started (least work lost) first."""
    mine = sorted((key for key in (m.key for m in leaf.pods) if key in running), key=lambda k: (-started[k], k))
    return mine[: max(0, len(mine) - leaf.min_pods)]
