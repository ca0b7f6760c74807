"""Preemption as the cycle's post-filter: for a gang that found no room, victims (or why none), as a value.

As kube-scheduler's ``defaultpreemption`` returns its nomination, :meth:`Preemption.post_filter` returns
an :class:`Outcome`: PREEMPTING with the victims, or the placement's own UNSCHEDULABLE with what
preemption says. Carrying it out is :meth:`Preemption.begin` (the nomination and the ledger, at once) and
the evictor's (the API writes, off the cycle), which the cycle's ``record`` starts. The stage owns the
nominations (``nominations.py``) and the ledger of evictions begun (``evictions.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import structlog

from scheduler.clock import Clock
from scheduler.decision import Code, Outcome
from scheduler.gangs import GangKey, GangSpec
from scheduler.preemption.evictions import Evictions, EvictJob
from scheduler.preemption.nominations import Nominations
from scheduler.preemption.planner import PreemptionPlanner, longest_grace, terminating_for
from scheduler.settings import Settings
from scheduler.state import ClusterState
from scheduler.vacancies import Vacancies
from topology import GangRequest
from topology.domains import IntArray
from topology.preemption import NoVictims, Victims

log = structlog.get_logger("phalanx.preemption")


class Preemption:
    def __init__(self, *, state: ClusterState, settings: Settings, clock: Clock, vacancies: Vacancies) -> None:
        self.state = state
        self.nominations = Nominations(clock, settings.preemption.nomination_timeout_seconds)
        self.evictions = Evictions(state)
        self.planner = PreemptionPlanner(state, settings, self.nominations, self.evictions, vacancies)
        self._clearing: set[str] = set()  # pods whose nominatedNodeName is being cleared

    def post_filter(
        self,
        spec: GangSpec,
        request: GangRequest,
        failed: Outcome,
        *,
        held: list[tuple[IntArray, IntArray]],
    ) -> Outcome:
        """The gang does not fit (``failed`` says why): wait for victims already going, or choose new ones, or
        say why not."""
        message, pods, wake = failed.message, failed.pods, failed.wake
        nomination = self.nominations.get(spec.key)
        if nomination is None and spec.key not in self.nominations.given_up:
            terminating, named, room = terminating_for(spec, self.state)
            if terminating:
                grace = longest_grace(self.state, terminating)
                nomination = self.nominations.adopt(
                    spec.key, spec.priority, terminating, named, room, grace_seconds=grace
                )
        if nomination is not None:
            going = [pod for pod in nomination.victims if self.state.exists(pod)]
            if going:
                message = (
                    f"{message} It preempted pods in {nomination.domain} and waits for {len(going)} of them to "
                    "terminate."
                )
                return Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, wake=wake, attempt=False)
            log.info("nomination dropped: the room its victims freed is not enough any more", gang=spec.key)
            self.nominations.drop(spec.key)  # its pods' nominatedNodeName is cleared by record, or by begin
        found = self.planner.plan(spec, request, held)
        if isinstance(found, NoVictims):
            result = ""
            if found.considered:
                result = "not_allowed" if found.reason.startswith("it may not") else "no_victims"
                message = f"{message} Preemption cannot help: {found.reason}."
            return Outcome(
                code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake, preemption=result
            )
        return Outcome(
            code=Code.PREEMPTING, message=message, pods=pods, wake=wake, victims=found, preemption="preempted"
        )

    def for_extras(
        self, spec: GangSpec, request: GangRequest, failed: Outcome, *, held: list[tuple[IntArray, IntArray]]
    ) -> Outcome:
        """A gang whose minimum runs and whose extras find no room preempts lower priorities for them as any
        pod would, one more at a time (its own minimum is never a victim of it, equal priorities never are)."""
        return self.post_filter(spec, _one_more(request), failed, held=held)

    def begin(self, spec: GangSpec, victims: Victims) -> EvictJob:
        """The gang preempts: it is nominated to the room, and its victims are in the ledger, from now on.
        Returns the evictor's job (its Events' subject left to the cycle): the victims, and each pending
        pod's ``nominatedNodeName``, the new node or cleared for a pod an earlier nomination named that this
        one does not (one job, so the two writes cannot cross)."""
        pods = victims.pods
        going = frozenset(pod.key for pod in pods)
        leftover = self.stale(spec.key, spec.pods)  # a nomination dropped in post_filter left these named
        self.nominations.nominate(
            spec.key,
            spec.priority,
            victims.placement,
            going,
            victims.domain,
            grace_seconds=longest_grace(self.state, going),
        )
        evict = tuple(self.evictions.victim(pod.key) for pod in pods)
        self.evictions.begin(evict)
        log.info("preempting", gang=spec.key, domain=victims.domain, victims=len(pods), by_gang=victims.by_gang())
        nominated = dict(victims.placement.nodes())
        self._clearing.difference_update(nominated)  # named again: not being cleared
        cleared = tuple((pod, "") for pod in leftover if pod not in nominated)
        return EvictJob(spec.key, evict, (*nominated.items(), *cleared), victims.domain)

    def stale(self, gang: GangKey, pods: Iterable[str]) -> tuple[str, ...]:
        """Pending pods of a gang that holds no nomination (any more) whose ``nominatedNodeName`` must be
        cleared: the room would otherwise stay hidden from everyone else until the pods are gone. Each is
        named once, until the watch shows it cleared."""
        if gang in self.nominations:
            return ()
        nominated = self.state.nominated
        self._clearing = {pod for pod in self._clearing if pod in nominated}  # cleared ones the watch showed
        stale = tuple(
            pod
            for pod in pods
            if pod in nominated and pod not in self._clearing and self.state.placed_node(pod) is None
        )
        self._clearing.update(stale)
        return stale

    def unfinished(self) -> Iterator[EvictJob]:
        """The evictions the API shows begun (victims marked) that nobody here carries out: an earlier
        leader's, cut off with its lease. Their units go whole (``evictions.py``)."""
        if not self.state.marked_victims:
            return
        for preemptor, domain, victims in self.evictions.unfinished():
            log.info("finishing an eviction begun earlier", preemptor=preemptor, pods=[v.pod for v in victims])
            yield EvictJob(preemptor, victims, (), domain)

    def clear(self) -> None:
        """The lead is lost: a new leader evaluates every gang afresh, and reads what was begun from the marks."""
        self.nominations.clear()
        self.evictions.clear()


def _one_more(leaf: GangRequest) -> GangRequest:
    """A leaf whose minimum is met, asked for one more of its unplaced pods."""
    placed = sum(1 for member in leaf.pods if member.node is not None)
    return replace(leaf, min_pods=max(leaf.min_pods, min(placed + 1, len(leaf.pods))))
