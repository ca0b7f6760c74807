"""What Phalanx assumed: room taken in the snapshot for the pods (and placeholders) it placed, before the
watch shows them bound (the pod states are drawn in ``cluster_state.py``).

An assumption with no deadline never expires: its binding is still in flight or in permit. Once the bind
call succeeded it waits for the watch, ``binding.assumeTimeoutSeconds`` at most; a heap of deadlines keeps
expiry proportional to what expires, not to the thousands of binds in flight.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

import structlog

from scheduler.clock import Clock
from scheduler.devices.accounting import DeviceAccounting
from scheduler.gangs import GangKey
from scheduler.state.changes import Changes
from scheduler.state.records import Assumption, RunningPod
from topology import Assignment, PodShape, Snapshot

log = structlog.get_logger("phalanx.state")


class Assumptions:
    def __init__(
        self,
        *,
        snapshot: Snapshot,
        clock: Clock,
        timeout_seconds: float,
        pods: Mapping[str, RunningPod],
        accounting: DeviceAccounting,
        changes: Changes,
    ) -> None:
        """``pods`` is what the watch says of each pod (written by the pod applier, read here)."""
        self.by_pod: dict[str, Assumption] = {}
        self._snapshot = snapshot
        self._clock = clock
        self._timeout_seconds = timeout_seconds
        self._pods = pods
        self._accounting = accounting
        self._changes = changes
        self._expiries: list[tuple[float, str]] = []  # heap of (deadline, pod); stale entries are skipped
        self._sending: set[str] = set()  # pods whose bind request is out, its answer not read yet
        self._released: set[str] = set()  # of those, the ones their gang gave up meanwhile: forgotten once answered

    def assume(self, gang: GangKey, assignments: Iterable[Assignment]) -> None:
        """Assume each assignment: its capacity is taken at once for every later placement."""
        for assignment in assignments:
            requests = dict(assignment.shape.requests)
            self.by_pod[assignment.pod] = Assumption(assignment.node, requests, gang, assignment.shape)
            self._snapshot.assume(assignment.pod, assignment.node, requests)

    def assume_room(self, gang: GangKey, key: str, node: str, shape: PodShape, requests: dict[str, int]) -> None:
        """Assume room that no pod owns yet (a gang's placeholders on one node, whatever their count)."""
        self.by_pod[key] = Assumption(node, requests, gang, shape)
        self._snapshot.assume(key, node, requests)

    def forget(self, pod: str) -> None:
        """Give back what was assumed for a pod or placeholder (idempotent). A pod the watch already shows
        bound there keeps counting: it is bound, whatever happened to the assumption."""
        assumption = self.by_pod.pop(pod, None)
        if assumption is None:
            return
        for claim in self._accounting.claims_of(pod):
            self._accounting.count_on_its_own(claim)  # what it carried for a shared claim is the claim's again
        record = self._pods.get(pod)
        if record is not None and record.node == assumption.node and not record.finished:
            return
        self._snapshot.forget(pod)
        self._changes.freed.add(assumption.node)

    def forget_gang(self, gang: GangKey) -> None:
        """Forget what a gang assumed that is not being bound (a placement, or the room it kept, given up).
        A pod whose bind request is out keeps its room until the answer is read (:meth:`sent`): the server may
        bind it yet, and room given to another gang meanwhile would be the node's twice."""
        for pod, assumption in list(self.by_pod.items()):
            if assumption.gang == gang and assumption.deadline is None:
                if pod in self._sending:
                    self._released.add(pod)
                else:
                    self.forget(pod)

    def sending(self, pods: Iterable[str]) -> None:
        """Their bind requests are being sent."""
        self._sending.update(pods)

    def sent(self, pods: Iterable[str]) -> None:
        """Their bind requests were answered (and :meth:`binding_done` told for those bound). One its gang gave
        up meanwhile is forgotten now, unless it was bound: then it waits for the watch as any bound pod."""
        for pod in pods:
            self._sending.discard(pod)
            if pod in self._released:
                self._released.discard(pod)
                assumption = self.by_pod.get(pod)
                if assumption is not None and assumption.deadline is None:
                    self.forget(pod)

    def forget_all(self) -> None:
        for pod in list(self.by_pod):
            self.forget(pod)

    def binding_done(self, pod: str) -> None:
        """The bind call succeeded: the assumption now waits for the watch, but not forever."""
        assumption = self.by_pod.get(pod)
        if assumption is not None:
            assumption.deadline = self._clock.monotonic() + self._timeout_seconds
            heapq.heappush(self._expiries, (assumption.deadline, pod))

    def _is_current(self, entry: tuple[float, str]) -> bool:
        assumption = self.by_pod.get(entry[1])
        return assumption is not None and assumption.deadline == entry[0]

    def next_expiry(self) -> float | None:
        """When the earliest unconfirmed bind's assumption runs out, if any is waiting for the watch."""
        while self._expiries and not self._is_current(self._expiries[0]):
            heapq.heappop(self._expiries)
        return self._expiries[0][0] if self._expiries else None

    def expire(self) -> list[str]:
        """Forget assumptions whose bind the watch never confirmed in time; returns the pods."""
        now = self._clock.monotonic()
        late = []
        while self._expiries and self._expiries[0][0] <= now:
            entry = heapq.heappop(self._expiries)
            if self._is_current(entry):
                late.append(entry[1])
        for pod in late:
            log.warning(
                "assumed pod was never confirmed bound; releasing its capacity", pod=pod, node=self.by_pod[pod].node
            )
            self.forget(pod)
        return late
