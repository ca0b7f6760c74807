"""Preemption as a stage of the cycle: for a gang that found no room, victims (or why none), as a value.

As kube-scheduler's ``defaultpreemption`` returns its nomination, :meth:`Preemption.post_filter` returns
an :class:`Outcome`: PREEMPTING with the victims, or the placement's own UNSCHEDULABLE with what
preemption says. Once the cycle recorded it, :meth:`Preemption.recorded` carries it out: the nomination
and the ledger at once (:meth:`Preemption.begin`), the API writes handed to the evictor (off the cycle),
the preemptor's Event. The stage owns the nominations (``nominations.py``, hidden from gangs below the
preemptor: its pre-filter) and the ledger of evictions begun (``evictions.py``). Without an evictor (the
replay has no API to evict through) it preempts nothing and clears nothing, but its pre-filter still hides
the room the API shows nominated (pods' ``status.nominatedNodeName``, another scheduler's or an earlier
leader's).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import structlog

from scheduler.decision import Code, DecisionRecorder, Outcome, Reason
from scheduler.gangs import GangError, GangKey, GangSpec
from scheduler.metrics import Metrics
from scheduler.preemption.evictions import Evictions, EvictionSink, EvictJob
from scheduler.preemption.nominations import Nominations
from scheduler.preemption.planner import (
    PreemptionPlanner,
    longest_grace,
    preempting_note,
    terminating_for,
    victims_by_reason,
)
from scheduler.settings import Settings
from scheduler.stages import Due, GangNews, Hidden, Stage, Tried
from scheduler.state import ClusterView
from scheduler.vacancies import Vacancies
from topology import GangRequest
from topology.preemption import NoVictims, Victims

log = structlog.get_logger("phalanx.preemption")


class Preemption(Stage):
    def __init__(
        self,
        state: ClusterView,
        settings: Settings,
        *,
        vacancies: Vacancies,
        evictor: EvictionSink | None,
        reporter: DecisionRecorder,
        metrics: Metrics,
    ) -> None:
        self.state = state
        self.evictor = evictor
        self.reporter = reporter
        self.metrics = metrics
        self.nominations = Nominations(state.clock, settings.preemption.nomination_timeout_seconds)
        self.evictions = Evictions(state)
        self.planner = PreemptionPlanner(state, settings, self.nominations, self.evictions, vacancies)
        self._clearing: set[str] = set()  # pods whose nominatedNodeName is being cleared

    def hide(self, spec: GangSpec, *, missing: int) -> Hidden | None:
        """The room nominated to other preemptors of equal or higher priority (``Nominations.hidden_from``)."""
        room = self.nominations.hidden_from(self.state, spec.key, spec.priority)
        return Hidden(nodes=room) if room else None

    def post_filter(self, tried: Tried) -> Outcome:
        """The gang does not fit (``tried.failed`` says why): wait for victims already going, or choose new
        ones, or say why not. A gang whose minimum runs and whose extras find no room preempts lower
        priorities for them as any pod would, one more at a time (its own minimum is never a victim of it,
        equal priorities never are)."""
        spec, request, failed = tried.spec, tried.request, tried.failed
        if self.evictor is None:
            return failed
        if tried.extras:
            if not request.is_leaf:
                return failed
            request = _one_more(request)
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
            self.nominations.drop(spec.key)  # its pods' nominatedNodeName is cleared by recorded, or by begin
        found = self.planner.plan(spec, request, tried.rooms)
        if isinstance(found, NoVictims):
            result = ""
            if found.considered:
                result = "not_allowed" if found.reason.startswith("it may not") else "no_victims"
                message = f"{message} Preemption cannot help: {found.reason}."
            return Outcome(
                code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake, preemption=result
            )
        message = f"{message} {preempting_note(found)}"
        return Outcome(
            code=Code.PREEMPTING, message=message, pods=pods, wake=wake, victims=found, preemption="preempted"
        )

    def begin(self, spec: GangSpec, victims: Victims) -> EvictJob:
        """The gang preempts: it is nominated to the room, and its victims are in the ledger, from now on.
        Returns the evictor's job (its Events' subject left to :meth:`_preempt`): the victims, and each pending
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

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> tuple[GangKey, ...]:
        """A preemption recorded is carried out; a gang placed is no longer nominated (once bound); a gang
        that failed otherwise has its pods' stale nominations cleared."""
        code = outcome.code
        if code is Code.PLACED:
            self.nominations.bound(gang.key)
        elif code is Code.SCHEDULED:
            nomination = self.nominations.binding(gang.key)
            if nomination is not None:
                self.metrics.preemption_to_bind.observe(max(0.0, self.state.clock.monotonic() - nomination.decided))
        elif code is Code.PREEMPTING:
            assert isinstance(gang, GangSpec) and outcome.victims is not None
            self._preempt(gang, outcome.victims)
        else:
            self.clear_stale(gang.key, gang.pods)
        return ()

    def told(self, gang: GangKey, news: GangNews) -> tuple[GangKey, ...]:
        if news in (GangNews.DELETED, GangNews.INVALID):
            self.nominations.drop(gang)
        elif news is GangNews.DONE:
            self.nominations.bound(gang)
        elif news is GangNews.GIVEN_BACK:
            self.nominations.resume(gang)
        return ()

    def due(self) -> Due:
        """Nominations that timed out (their gangs are tried again, their pods' nominations cleared), and the
        evictions an earlier leader began and did not finish, handed to the evictor."""
        again = []
        for nomination in self.nominations.expired():
            log.info("nomination timed out; the gang is evaluated again", gang=nomination.gang)
            spec = self.state.index.get(nomination.gang)
            if isinstance(spec, GangSpec):
                self.clear_stale(spec.key, spec.pods)
                again.append(spec)
        evictor = self.evictor
        if evictor is not None:
            for job in self.unfinished():
                self.metrics.preemption_resumed.inc(len(job.victims))
                spec = self.state.index.get(job.preemptor)
                subject = self.reporter.gang(spec.objects, spec.pods) if isinstance(spec, GangSpec) else None
                evictor.submit(replace(job, subject=subject))
        return Due(again=again)

    def next_deadline(self) -> float | None:
        return self.nominations.next_deadline()

    def lost_lead(self) -> None:
        """A new leader evaluates every gang afresh, and reads what was begun from the marks."""
        self.nominations.clear()
        self.evictions.clear()

    def clear_stale(self, gang: GangKey, pods: Iterable[str]) -> None:
        """Clear ``nominatedNodeName`` on pending pods of a gang that holds no nomination (any more)."""
        if self.evictor is None:
            return
        stale = self.stale(gang, pods)
        if stale:
            self.evictor.submit(EvictJob(gang, (), tuple((pod, "") for pod in stale), ""))

    def _preempt(self, spec: GangSpec, victims: Victims) -> None:
        """Begin the preemption the cycle recorded: the evictor's job, the victims counted, the Event."""
        assert self.evictor is not None  # nothing preempts without one (post_filter)
        subject = self.reporter.gang(spec.objects, spec.pods)
        self.evictor.submit(replace(self.begin(spec, victims), subject=subject))
        for reason, count in victims_by_reason(victims).items():
            if count:
                self.metrics.preemption_victims.labels(reason).inc(count)
        self.reporter.event(subject, Reason.PREEMPTING, preempting_note(victims), type="Normal", action="Preempting")

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


def _one_more(leaf: GangRequest) -> GangRequest:
    """A leaf whose minimum is met, asked for one more of its unplaced pods."""
    placed = sum(1 for member in leaf.pods if member.node is not None)
    return replace(leaf, min_pods=max(leaf.min_pods, min(placed + 1, len(leaf.pods))))
