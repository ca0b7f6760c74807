"""Whether a gang that does not fit may preempt, and whom: the victim search of the post-filter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from scheduler.gangs import GangSpec
from scheduler.preemption.evictions import Evictions
from scheduler.preemption.nominations import Nominations
from scheduler.preemption.units import UnitSource, never_preempts
from scheduler.settings import Settings
from scheduler.stages import hiding
from scheduler.state import ClusterView
from scheduler.vacancies import Vacancies
from topology import GangRequest
from topology.domains import IntArray
from topology.preemption import CLUSTER, NoVictims, Victims, choose_victims


class PreemptionPlanner:
    def __init__(
        self,
        state: ClusterView,
        settings: Settings,
        nominations: Nominations,
        evictions: Evictions,
        vacancies: Vacancies,
    ) -> None:
        self.state = state
        self.settings = settings
        self.nominations = nominations
        self.evictions = evictions
        self.vacancies = vacancies

    def plan(
        self, spec: GangSpec, request: GangRequest, held: Iterable[tuple[IntArray, IntArray]] = ()
    ) -> Victims | NoVictims:
        """Victims whose eviction lets the gang's whole minimum fit, or why there are none.

        ``request`` is what placement was asked (members running pinned); the nominated room of other
        gangs of equal or higher priority, and ``held`` (room domain reservations keep from it), stay
        taken, exactly as in the placement that failed: evicting pods there would free room it may not use."""
        if not self.settings.preemption.enabled:
            return NoVictims("preemption is disabled (preemption.enabled: false)", considered=False)
        never = never_preempts(spec, self.state)
        if never is not None:
            return NoVictims(f"it may not preempt: {never}")
        snapshot = self.state.snapshot
        evictable = self.state.running.below(snapshot, spec.priority)
        if not evictable.any():
            return NoVictims(f"no running pod has a priority below its {spec.priority}", considered=False)
        in_flight = self.evictions.in_flight()
        units = UnitSource(self.state, spec.key, spec.priority, in_flight)
        hidden = self.nominations.hidden_from(self.state, spec.key, spec.priority)
        hidden += self.vacancies.hidden_from(spec.key, spec.priority)  # room kept for a lost member's replacement
        with hiding(snapshot, hidden, held):
            found = choose_victims(
                snapshot,
                request,
                evictable=evictable,
                node_cost=self.state.running.cheapest(snapshot, spec.priority),
                units_on=units,
                budgets=self.state.budgets.allowed() if len(self.state.budgets) else {},
                max_domains=self.settings.preemption.max_domains_tried,
                max_tries=self.settings.placement.max_domain_tries,
            )
        if isinstance(found, NoVictims) and in_flight:
            going = len(in_flight)
            found = replace(
                found,
                reason=f"{found.reason}; {going} pod{'s' if going != 1 else ''} of lower priority "
                f"{'are' if going != 1 else 'is'} being evicted for other gangs already, and the room freed is "
                "offered again once gone",
            )
        return found


Room = tuple[tuple[str, tuple[tuple[str, int], ...]], ...]


def terminating_for(spec: GangSpec, state: ClusterView) -> tuple[frozenset[str], tuple[tuple[str, str], ...], Room]:
    """Pods of lower priority still terminating on the nodes the gang's pods are nominated to: a
    preemption already under way (perhaps decided by an earlier leader), which is waited for, never
    repeated with new victims (kube-scheduler's rule for a nominated pod)."""
    nodes = set()
    named = []
    room = []
    for member in spec.request.members():
        info = state.index.pod(member.key)
        status = info.raw.get("status") if info is not None else None
        node = status.get("nominatedNodeName") if isinstance(status, dict) else None
        if isinstance(node, str) and node and state.placed_node(member.key) is None:
            nodes.add(node)
            named.append((member.key, node))
            room.append((node, member.shape.requests))
    going = set()
    for node in nodes:
        for pod in state.snapshot.pods_on(node):
            record = state.pod(pod)
            if record is not None and record.deleting and record.priority < spec.priority:
                going.add(pod)
    return frozenset(going), tuple(named), tuple(room)


def longest_grace(state: ClusterView, pods: frozenset[str]) -> float:
    """The longest grace period among pods about to terminate (what their nomination must wait)."""
    return max((record.grace for pod in pods if (record := state.pod(pod)) is not None), default=0.0)


def preempting_note(victims: Victims) -> str:
    """The preemptor's Event: which pods of which gangs go, and where."""
    counted = ", ".join(f"{count} of {gang}" for gang, count in sorted(victims.by_gang().items()))
    pods = len(victims.pods)
    where = f"in {victims.domain}"
    if victims.domain == CLUSTER:  # chosen anywhere: "bound there" names the nodes, as a domain would
        nodes = sorted({assignment.node for assignment in victims.placement.assignments})
        shown = ", ".join(nodes[:NODES_NAMED]) + (
            f" and {len(nodes) - NODES_NAMED} more" if len(nodes) > NODES_NAMED else ""
        )
        where = f"on node {shown}" if len(nodes) == 1 else f"on {len(nodes)} nodes ({shown})"
    return (
        f"Preempting {pods} pod{'s' if pods != 1 else ''} of lower priority {where} ({counted}); "
        f"the gang is bound there once they have terminated."
    )


#: How many of the preemptor's nodes its Event names when the victims were chosen in the whole cluster.
NODES_NAMED = 4


def victims_by_reason(victims: Victims) -> Mapping[str, int]:
    """Victim pods by the kind of unit they went as: a whole gang, a gang's surplus, or a plain pod."""
    counts = {"gang": 0, "surplus": 0, "pod": 0}
    for unit in victims.units:
        if unit.surplus:
            counts["surplus"] += len(unit.pods)
        elif unit.key.startswith("gang "):
            counts["gang"] += len(unit.pods)
        else:
            counts["pod"] += len(unit.pods)
    return counts
