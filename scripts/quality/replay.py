"""Replaying the Philly trace through the real queue and scheduling cycle, on a simulated clock.

Jobs become PFN gangs (a job of n GPUs is ceil(n/8) pods of up to 8 GPUs, the last one taking the
remainder). Their pods are applied to the scheduler's :class:`ClusterState` as watch events would be,
the ``SchedulingLoop`` syncs and runs its cycles exactly as in a cluster (queue order, backoff,
event-driven wake-ups, permit), and the binding cycle is replaced by one that binds at once: what is
measured is where and when gangs are placed, not the API. The placement algorithm is swapped for
each baseline through ``scheduling_loop(placer=...)``.

Time is an event list: arrivals, completions (a gang runs for its duration from the moment its last
pod is bound) and the queue's backoff expiries; the clock jumps from one to the next.

The window: every job submitted in ``days`` days from a seeded start (among windows with enough large
jobs); durations are clipped at ``MAX_DURATION``, and the submissions are compressed in time so that
the offered load (GPU-seconds asked over the window's GPU-seconds) is the target.
"""

from __future__ import annotations

import csv
import heapq
import math
import os
import random
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.clock import ManualClock
from scheduler.decision import BindJob
from scheduler.loop import NullRecorder, scheduling_loop
from scheduler.metrics import Metrics
from scheduler.ports.port import NODES, PODS, Change
from scheduler.ports.sim.builders import ClusterShape
from scheduler.reporting import rfc3339
from scheduler.settings import LeaderSettings, QueueSettings, Settings, StarvationSettings
from scheduler.state import ClusterState

from .baselines import Placer
from .workloads import BLOCK, GPUS_PER_NODE, LEVELS, RACK, ClusterSize

#: The trace, beside the repository (as the team's workspace lays it out) unless the environment says.
TRACE = Path(
    os.environ.get(
        "PHALANX_PHILLY_TRACE", Path(__file__).resolve().parents[3] / "shared" / "data" / "philly" / "philly.csv"
    )
)
MAX_DURATION = 2 * 3600.0
PFN = "gang-scheduling.preferred.jp/gang"
REQUIRED = "scheduling.phalanx.dev/topology-required"
RACK_GPUS = 32 * GPUS_PER_NODE
#: Windows start on days with at least this many jobs of 32+ GPUs in the window, so that the p95 of
#: large gangs is a figure and not one job.
MIN_LARGE_JOBS = 10
#: Share of the window before utilisation is measured: the cluster starts empty.
WARM_UP = 0.2


@dataclass(frozen=True, slots=True)
class Job:
    key: str
    arrival: float  # seconds since the epoch
    duration: float
    gpus: int


def read_trace(path: Path = TRACE) -> list[tuple[float, float, int]]:
    """(submission time, duration, GPUs) of every job, by submission time."""
    rows = []
    with path.open() as handle:
        for row in csv.DictReader(handle):
            submitted = datetime.fromisoformat(row["timestamp"]).timestamp()
            rows.append((submitted, float(row["duration"]), int(row["num_gpus"])))
    rows.sort()
    return rows


def window(
    trace: list[tuple[float, float, int]], seed: int, days: float, load: float, gpus: int, *, hours: float
) -> list[Job]:
    """The seeded window of ``days``, compressed to offer ``load`` of ``gpus``, repeated for ``hours``.

    Offered load is the GPU-seconds the jobs ask for (durations clipped at ``MAX_DURATION``) over the
    GPU-seconds of the time they arrive in. Durations are kept; only the time between submissions
    shrinks, as if the same users submitted faster. Philly's users kept about 500 GPUs busy, so on
    8,192 GPUs a window's jobs arrive within hours; it is replayed again after itself until ``hours``
    have passed, so that the cluster reaches a steady state and stays in it.
    """
    rng = random.Random(seed)
    times = np.array([row[0] for row in trace])
    large = np.array([row[2] >= 32 for row in trace])
    span = days * 86400.0
    starts = []
    for start in range(int(times[0]), int(times[-1] - span), 3600):
        first, last = np.searchsorted(times, [start, start + span])
        if large[first:last].sum() >= MIN_LARGE_JOBS:
            starts.append(start)
    if not starts:
        raise ValueError(f"no window of {days} days holds {MIN_LARGE_JOBS} jobs of 32+ GPUs")
    begin = float(rng.choice(starts))
    first, last = np.searchsorted(times, [begin, begin + span])
    chosen = trace[first:last]
    asked = sum(min(duration, MAX_DURATION) * count for _, duration, count in chosen)
    compressed = asked / (load * gpus)  # how long the window lasts once compressed, in seconds
    scale = compressed / span
    jobs: list[Job] = []
    offset, horizon = 0.0, hours * 3600.0
    while offset < horizon:
        for submitted, duration, count in chosen:
            arrival = offset + (submitted - begin) * scale
            if arrival >= horizon:
                break
            jobs.append(Job(f"j{len(jobs):06d}", arrival, max(1.0, min(duration, MAX_DURATION)), count))
        offset += compressed
    return jobs


class _ImmediateBinder:
    """Stands for the binding cycle: a permitted gang is bound as soon as the cycle hands it over."""

    def __init__(self) -> None:
        self.jobs: list[BindJob] = []

    def submit(self, job: BindJob) -> None:
        self.jobs.append(job)

    def idle(self) -> bool:
        return True

    def starting(self) -> bool:
        return False

    def take(self) -> list[BindJob]:
        jobs, self.jobs = self.jobs, []
        return jobs


@dataclass(slots=True)
class ReplayResult:
    waits: dict[str, float] = field(default_factory=dict)  # job -> queueing delay (s)
    jobs: dict[str, Job] = field(default_factory=dict)
    utilisation: float = 0.0
    unfinished: int = 0
    cycles: int = 0


def _pod(job: Job, index: int, gpus: int, now: float, *, deadline: bool) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "philly",
            "name": f"{job.key}-{index}",
            "uid": f"{job.key}-{index}",
            "creationTimestamp": rfc3339(now),
            "annotations": {
                f"{PFN}-name": job.key,
                f"{PFN}-size": str(math.ceil(job.gpus / GPUS_PER_NODE)),
                **_topology(job.gpus),
            },
        },
        "spec": {
            "schedulerName": "phalanx",
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }
    if deadline:
        # The trace's duration as the runtime bound, rounded up: startTime is written in whole seconds.
        pod["spec"]["activeDeadlineSeconds"] = math.ceil(job.duration) + 1
    return pod


def _topology(gpus: int) -> dict[str, str]:
    """Multi-node jobs need one rack (one block beyond a rack's 256 GPUs), as distributed training is
    deployed on such clusters; the trace itself says nothing about topology."""
    if gpus <= GPUS_PER_NODE:
        return {}
    return {REQUIRED: RACK if gpus <= RACK_GPUS else BLOCK}


def _pods(job: Job, now: float, *, deadline: bool) -> list[dict[str, Any]]:
    pods, left = [], job.gpus
    for index in range(math.ceil(job.gpus / GPUS_PER_NODE)):
        share = min(GPUS_PER_NODE, left)
        left -= share
        pods.append(_pod(job, index, share, now, deadline=deadline))
    return pods


class Replay:
    """``starvation``: domain reservations for gangs that waited too long (Phalanx's, issue 16; the
    baselines place without). ``deadlines``: every pod sets ``activeDeadlineSeconds`` from its job's
    duration, so that short jobs may backfill reserved room."""

    def __init__(
        self, size: ClusterSize, placer: Placer, *, seed: int = 0, starvation: bool = False, deadlines: bool = False
    ) -> None:
        self.size = size
        self.deadlines = deadlines
        self.settings = Settings(
            levels=LEVELS,
            leader_election=LeaderSettings(enabled=False, identity="replay"),
            # Capacity freed anywhere wakes the gangs it could help at once; the timer is a fallback.
            queue=QueueSettings(initial_backoff_seconds=1.0, max_backoff_seconds=600.0),
            starvation=StarvationSettings(enabled=starvation),
        )
        self.clock = ManualClock(start=0.0)
        self.state = ClusterState(self.settings, self.clock)
        metrics = Metrics()
        self.binder = _ImmediateBinder()
        self.scheduler = scheduling_loop(
            settings=self.settings,
            state=self.state,
            clock=self.clock,
            queue_rng=random.Random(seed),
            permit_rng=random.Random(seed + 1),
            binder=self.binder,
            reporter=NullRecorder(),
            metrics=metrics,
            placer=placer,
        )
        self.queue = self.scheduler.queue
        shape = ClusterShape(blocks=size.blocks, racks=size.racks, nodes=size.nodes, gpus=GPUS_PER_NODE)
        for node in shape.node_manifests():
            self.state.apply(NODES, Change("ADDED", node))

    def run(self, jobs: list[Job]) -> ReplayResult:
        result = ReplayResult(jobs={job.key: job for job in jobs})
        if not jobs:
            return result
        origin = jobs[0].arrival
        self.clock.advance(origin - self.clock.monotonic())
        events: list[tuple[float, int, str, str]] = [(job.arrival, i, "arrive", job.key) for i, job in enumerate(jobs)]
        heapq.heapify(events)
        sequence = len(events)
        pods_of: dict[str, list[dict[str, Any]]] = {}
        bound: dict[str, set[str]] = {}
        started: dict[str, float] = {}
        capacity = self.size.n_nodes * GPUS_PER_NODE
        end = jobs[-1].arrival
        warm = origin + WARM_UP * (end - origin)  # utilisation is measured once the cluster has filled
        busy, last_change, busy_seconds = 0, warm, 0.0
        while events:
            ready = self.queue.next_ready()
            moment = events[0][0]
            if ready is not None and ready < moment:
                moment = ready
            now = self.clock.monotonic()
            busy_seconds += busy * max(0.0, min(moment, end) - min(max(now, last_change), end))
            last_change = max(moment, last_change)
            self.clock.advance(max(0.0, moment - now))
            while events and events[0][0] <= moment:
                _, _, kind, key = heapq.heappop(events)
                if kind == "arrive":
                    pods_of[key] = _pods(result.jobs[key], self.clock.wall(), deadline=self.deadlines)
                    bound[key] = set()
                    for pod in pods_of[key]:
                        self.state.apply(PODS, Change("ADDED", pod))
                else:
                    for pod in pods_of.pop(key):
                        self.state.apply(PODS, Change("DELETED", pod))
                    busy -= result.jobs[key].gpus
            for key in self._settle(pods_of, bound):
                job = result.jobs[key]
                started[key] = self.clock.monotonic()
                result.waits[key] = started[key] - job.arrival
                busy += job.gpus
                sequence += 1
                heapq.heappush(events, (started[key] + job.duration, sequence, "finish", key))
        result.utilisation = busy_seconds / (capacity * max(end - warm, 1.0))
        result.unfinished = len(jobs) - len(result.waits)
        result.cycles = self.scheduler.cycles
        return result

    def _settle(self, pods_of: dict[str, list[dict[str, Any]]], bound: dict[str, set[str]]) -> list[str]:
        """Sync and cycle until nothing more happens now; returns the jobs whose last pod was bound."""
        complete: list[str] = []
        while True:
            self.scheduler.sync()
            while self.scheduler.step():
                pass
            jobs = self.binder.take()
            if not jobs:
                return complete
            for bind in jobs:
                job_key = str(bind.gang).split("/", 1)[1]
                for pod_key, node in bind.pods:
                    name = pod_key.split("/", 1)[1]
                    pod = next(p for p in pods_of[job_key] if p["metadata"]["name"] == name)
                    pod["spec"] = {**pod["spec"], "nodeName": node}
                    pod["status"] = {"phase": "Running", "startTime": rfc3339(self.clock.wall())}  # the kubelet's
                    self.state.apply(PODS, Change("MODIFIED", pod))
                    bound[job_key].add(name)
                if len(bound[job_key]) == len(pods_of[job_key]):
                    complete.append(job_key)


def stats(result: ReplayResult) -> dict[str, float]:
    """Queueing delay p50/p95 by gang size, waits longer than 10x the runtime, and utilisation."""
    buckets = {"1": (1, 1), "2-8": (2, 8), "9-31": (9, 31), "32plus": (32, 10**9)}
    figures: dict[str, float] = {"utilisation": result.utilisation, "unfinished": result.unfinished}
    for name, (low, high) in buckets.items():
        waits = [wait for key, wait in result.waits.items() if low <= result.jobs[key].gpus <= high]
        figures[f"p50_wait_{name}_s"] = float(np.percentile(waits, 50)) if waits else 0.0
        figures[f"p95_wait_{name}_s"] = float(np.percentile(waits, 95)) if waits else 0.0
        figures[f"jobs_{name}"] = len(waits)
    small = [wait for key, wait in result.waits.items() if result.jobs[key].gpus <= GPUS_PER_NODE]
    figures["p95_wait_small_s"] = float(np.percentile(small, 95)) if small else 0.0
    figures["p95_wait_32plus_s"] = figures["p95_wait_32plus_s"]
    figures["waited_10x_runtime"] = sum(
        1 for key, wait in result.waits.items() if wait > 10 * result.jobs[key].duration
    )
    return figures


def at_load(jobs: list[Job], load_factor: float) -> list[Job]:
    """The same jobs with durations scaled by ``load_factor`` (offered load scales with it)."""
    return [replace(job, duration=job.duration * load_factor) for job in jobs]
