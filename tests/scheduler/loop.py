"""The scheduling loop alone, on a simulated clock: pods go into ClusterState as watch events would, binds
land at once (with the kubelet's startTime), and what the loop decides (each ``Outcome``) and tells users
is recorded. For the cycle's decisions, and for rules that play out over minutes and hours of cluster time
(holds, starvation, backfill), in milliseconds and exactly."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.clock import ManualClock
from scheduler.decision import BindJob, Outcome, Reason, Subject
from scheduler.gangs import GangError, GangSpec, ObjectRef
from scheduler.loop import NullRecorder, scheduling_loop
from scheduler.metrics import Metrics
from scheduler.ports.port import NODES, PODS, Change
from scheduler.ports.sim.builders import ClusterShape
from scheduler.preemption.evictions import EvictJob
from scheduler.reporting import rfc3339
from scheduler.settings import LeaderSettings, QueueSettings, Settings, StarvationSettings
from scheduler.state import ClusterState

RACK = "example.com/rack"
LEVELS = ("example.com/block", RACK, "kubernetes.io/hostname")
PFN = "gang-scheduling.preferred.jp/gang"


@dataclass
class Told:
    """What the loop told users: each pod's pending message, and the Events (reason, note)."""

    pending: dict[str, str] = field(default_factory=dict)
    #: Each pod's PodScheduled=False reason (Unschedulable, GangWaiting, SchedulerError).
    conditions: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)
    #: (reason, what the Event is about: a pod's key or a group object), for each Event with a subject.
    about: list[tuple[str, object]] = field(default_factory=list)

    def pending_message(self, pods: Iterable[str], reason: str, message: str) -> None:
        for pod in pods:
            self.pending[pod] = message
            self.conditions[pod] = reason


class _Recorder(NullRecorder):
    """Records what the loop told users; pods and group objects stand for their Events' subjects."""

    def __init__(self, told: Told) -> None:
        self.told = told

    def pending(self, pods: Iterable[str], reason: str, message: str) -> None:
        self.told.pending_message(pods, reason, message)

    def event(
        self, subject: Subject | None, reason: Reason, note: str, *, type: str = "Warning", action: str = "Scheduling"
    ) -> None:
        self.told.events.append((str(reason), note))
        if subject is not None:
            self.told.about.append((str(reason), subject))

    def pod_subject(self, pod: str) -> Subject | None:
        return pod  # type: ignore[return-value]  # the key stands for the pod

    def gang(self, objects: Sequence[ObjectRef], pods: Sequence[str]) -> Subject | None:
        return objects[0] if objects else pods[0] if pods else None  # type: ignore[return-value]


class _Evictor:
    """Records preemptions (nothing is deleted: a test decides when victims are gone)."""

    def __init__(self) -> None:
        self.jobs: list[EvictJob] = []

    def submit(self, job: EvictJob) -> None:
        self.jobs.append(job)


class _Binder:
    def __init__(self) -> None:
        self.jobs: list[BindJob] = []

    def submit(self, job: BindJob) -> None:
        self.jobs.append(job)

    def idle(self) -> bool:
        return True

    def starting(self) -> bool:
        return False


def settings(**starvation: Any) -> Settings:
    return Settings(
        levels=LEVELS,
        leader_election=LeaderSettings(enabled=False, identity="loop"),
        queue=QueueSettings(initial_backoff_seconds=1.0, max_backoff_seconds=60.0),
        starvation=replace(StarvationSettings(), **starvation),
    )


class Loop:
    """A cluster of ``racks`` racks of ``nodes`` 8-GPU nodes, one block, and the loop scheduling it."""

    def __init__(
        self, *, racks: int = 2, nodes: int = 4, config: Settings | None = None, preemption: bool = False
    ) -> None:
        self.settings = config or settings()
        self.clock = ManualClock()
        self.state = ClusterState(self.settings, self.clock)
        self.told = Told()
        self.binder = _Binder()
        self.evictor = _Evictor()
        self.loop = scheduling_loop(
            settings=self.settings,
            state=self.state,
            clock=self.clock,
            queue_rng=random.Random(0),
            permit_rng=random.Random(1),
            binder=self.binder,
            reporter=_Recorder(self.told),
            metrics=Metrics(),
            evictor=self.evictor if preemption else None,
        )
        self.queue = self.loop.queue
        #: Every decision the cycle recorded, in order: (gang, its Outcome).
        self.decisions: list[tuple[str, Outcome]] = []
        record = self.loop.cycle.record

        def recorded(gang: GangSpec | GangError, outcome: Outcome) -> None:
            self.decisions.append((str(gang.key), outcome))
            record(gang, outcome)

        self.loop.cycle.record = recorded  # type: ignore[method-assign]
        self.pods: dict[str, dict[str, Any]] = {}
        self.bound_at: dict[str, float] = {}  # pod -> when it was bound (monotonic)
        self._runs: dict[str, float] = {}  # pod -> how long it runs once bound
        self._finishes: list[tuple[float, str]] = []  # heap of (monotonic time, pod)
        for node in ClusterShape(blocks=1, racks=racks, nodes=nodes, gpus=8).node_manifests():
            self.state.apply(NODES, Change("ADDED", node))

    def submit(
        self,
        name: str,
        gpus: int = 8,
        *,
        gang: tuple[str, int] | None = None,
        rack: bool = False,
        priority: int = 0,
        deadline: float | None = None,
        node: str | None = None,
        runs: float | None = None,
        preempts: bool = True,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        cpu: str | None = None,
        **extra: Any,
    ) -> str:
        """A pod of ``gpus`` GPUs (of a PFN gang ``(name, size)``), created now; ``node``: already running
        there (bound by someone else, started now); ``runs``: it finishes this long after it is bound; ``extra``:
        more fields of its spec (``schedulingGates``, ``terminationGracePeriodSeconds``)."""
        annotations = {**({f"{PFN}-name": gang[0], f"{PFN}-size": str(gang[1])} if gang else {}), **(annotations or {})}
        if rack:
            annotations["scheduling.phalanx.dev/topology-required"] = RACK
        spec: dict[str, Any] = {
            "schedulerName": "phalanx" if node is None else "default-scheduler",
            "priority": priority,
            "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
            **extra,
        }
        if cpu is not None:
            spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
        if deadline is not None:
            spec["activeDeadlineSeconds"] = math.ceil(deadline)
        if not preempts:
            spec["preemptionPolicy"] = "Never"
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": "ml",
                "name": name,
                "uid": name,
                "creationTimestamp": rfc3339(self.clock.wall()),
                "annotations": annotations,
                **({"labels": labels} if labels else {}),
            },
            "spec": spec,
        }
        key = f"ml/{name}"
        self.pods[key] = pod
        if runs is not None:
            self._runs[key] = runs
        self.state.apply(PODS, Change("ADDED", pod))
        if node is not None:
            self.bind(key, node)
        return key

    def settle(self) -> None:
        """Run cycles until nothing more happens now, binding what the loop placed."""
        while True:
            self.loop.sync()
            while self.loop.step():
                pass
            jobs, self.binder.jobs = self.binder.jobs, []
            if not jobs:
                return
            for job in jobs:
                for pod, node in job.pods:
                    self.bind(pod, node)

    def advance(self, seconds: float) -> None:
        """Move the clock on, then settle (backoffs that end meanwhile are tried then)."""
        self.clock.advance(seconds)
        self.settle()

    def run_until(self, moment: float) -> None:
        """Move the clock to ``moment`` (monotonic seconds) event by event: pods finish when their run ends,
        gangs are tried when their backoff ends, reservations expire."""
        self.settle()  # what is ready now is tried now
        while True:
            finish = self._finishes[0][0] if self._finishes else None
            due = [
                when
                for when in (
                    finish,
                    self.queue.next_ready(),
                    self.loop.starvation.next_deadline(),
                    self.loop.permit.next_deadline(),
                )
                if when is not None and when <= moment
            ]
            self.clock.advance(max(0.0, (min(due) if due else moment) - self.clock.monotonic()))
            while self._finishes and self._finishes[0][0] <= self.clock.monotonic():
                _, pod = heapq.heappop(self._finishes)
                if pod in self.pods:
                    self.finish(pod)
            self.settle()
            if not due:
                return

    def outcomes(self, gang: str) -> list[Outcome]:
        """The decisions recorded about ``gang`` (its key, ``pfn:ml/name``), in order."""
        return [outcome for key, outcome in self.decisions if key == gang]

    def fail(self, pod: str) -> None:
        """The pod's containers failed (``status.phase: Failed``): it stays, its room is free."""
        obj = self.pods[pod]
        obj["status"] = {**obj.get("status", {}), "phase": "Failed"}
        self.state.apply(PODS, Change("MODIFIED", obj))

    def terminate(self, *pods: str) -> None:
        """The pods are marked for deletion (their grace period runs; they are not gone yet)."""
        for pod in pods:
            obj = self.pods[pod]
            obj["metadata"] = {**obj["metadata"], "deletionTimestamp": rfc3339(self.clock.wall())}
            self.state.apply(PODS, Change("MODIFIED", obj))

    def finish(self, *pods: str) -> None:
        for pod in pods:
            self.state.apply(PODS, Change("DELETED", self.pods.pop(pod)))

    def bound(self) -> dict[str, str]:
        return {key: pod["spec"]["nodeName"] for key, pod in self.pods.items() if pod["spec"].get("nodeName")}

    def on(self, node: str) -> list[str]:
        return sorted(key for key, where in self.bound().items() if where == node)

    def bind(self, pod: str, node: str) -> None:
        """The watch shows ``pod`` bound to ``node`` and running."""
        obj = self.pods[pod]
        obj["spec"] = {**obj["spec"], "nodeName": node}
        obj["status"] = {"phase": "Running", "startTime": rfc3339(self.clock.wall())}
        self.state.apply(PODS, Change("MODIFIED", obj))
        self.bound_at[pod] = self.clock.monotonic()
        if pod in self._runs:
            heapq.heappush(self._finishes, (self.clock.monotonic() + self._runs[pod], pod))
