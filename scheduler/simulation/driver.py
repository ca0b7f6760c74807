"""The real scheduler on an in-memory cluster, run until nothing more can happen.

``phalanx simulate`` and ``phalanx dry-run`` both come here: the objects go into a SimCluster
:class:`Store`, a :class:`Phalanx` instance watches it through the same informers, queue, cycle,
permit and binder as in a cluster, and the run ends when the system is quiet:

- every task waits (informers on their watches, the loop on its next poke), so every event has been
  applied and every gang that could be tried has been;
- then time is moved on, on a virtual clock, to the next moment something is due: a hold that
  times out (its room goes to other gangs), a bind the watch never confirmed, or a preempted pod whose
  grace period ends (the simulated kubelet then deletes it, as a real one does once its containers stop).
  Backoffs are not worth waiting for here: in a closed cluster every event that could help a failed gang
  wakes it at once.
  A gang holds room for missing members once and times out once; when the only holds left are second
  ones, waiting longer would only repeat what happened.

What people deploy is expanded as its controllers would (:mod:`scheduler.simulation.controllers`): a Job,
JobSet, LeaderWorkerSet, PyTorchJob, TrainJob, Deployment or StatefulSet becomes its pods and group
objects, and its controller goes on acting as pods change (a Job starts its next pod when one succeeds).
Workloads may arrive later (``add_objects(at=...)``); bound pods start at once and end when their
``activeDeadlineSeconds`` or their ``simulate.phalanx.dev/run-seconds`` have passed
(:mod:`scheduler.simulation.kubelet`). Time moves to each of these moments in turn, up to ``until``
seconds after the start.

The result says, per pod and per gang, what was bound where and when, and why the rest is pending.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio
import orjson

from scheduler.app import Phalanx
from scheduler.clock import ManualClock
from scheduler.gangs import GangError, GangKey, GangSpec, Problem
from scheduler.gangs.pods import FINISHED_PHASES
from scheduler.ports.sim.adapter import SimCluster
from scheduler.ports.sim.builders import ManifestError, load
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import Store
from scheduler.settings import LeaderSettings, Settings
from scheduler.simulation.controllers import Api, Controller, Controllers, WorkloadError
from scheduler.simulation.history import History, claimed_gpus, pod_gpus, slice_gpus
from scheduler.simulation.kubelet import RUN_SECONDS, AnnotationError, Kubelets, run_seconds
from scheduler.simulation.report import (
    BOUND,
    DELETED,
    FAILED,
    FINISHED,
    INVALID,
    PARTIAL,
    PENDING,
    GangReport,
    Report,
    ReservationReport,
)
from scheduler.starvation import reserves_words
from topology import HOSTNAME

#: How far the clock may go when nothing says stop sooner (a Deployment whose pods have deadlines would
#: make new ones for ever).
DEFAULT_UNTIL = 30 * 86400.0
#: Pictures kept for ``simulate --serve``: past this many moments, the rest of the run is not shown.
MOST_FRAMES = 2000


def simulation_settings(settings: Settings) -> Settings:
    """The settings a run on the virtual clock needs: one instance, nothing served, and no client-side
    write limit (a token bucket on a clock that only moves when told would never refill)."""
    return replace(
        settings,
        leader_election=LeaderSettings(enabled=False, identity="phalanx-simulate"),
        binding=replace(settings.binding, writes_per_second=1e9, burst=1_000_000_000),
    )


class Simulation:
    """One SimCluster and the objects in it; :meth:`run` runs Phalanx on it once.

    ``controller_gangs``: the controllers that can create group objects for their pods (LeaderWorkerSet
    with its volcano provider, the training-operator with gang scheduling) are set up to, as for Phalanx.
    ``until``: seconds after the start beyond which the clock does not go. Without ``kubelets``, pods
    never start nor end: what ``dry-run`` and ``explain`` want, the scheduler's next moves on a snapshot,
    not the cluster's future.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        seed: int = 0,
        controller_gangs: bool = True,
        until: float = DEFAULT_UNTIL,
        kubelets: bool = True,
    ) -> None:
        self.settings = simulation_settings(settings)
        self.seed = seed
        self.until = until
        self.clock = ManualClock(start=float(int(time.time())))
        self.store = Store(seed=seed, clock=self.clock.wall, history=1_000_000, graceful=True)
        self.history = History(self.store, self.clock.monotonic)
        self.kubelets = Kubelets(self.store, self.clock.wall) if kubelets else None
        self.api = Api(self.store, self.clock.wall, random.Random(seed + 1), self.settings.scheduler_names[0])
        self.controllers = Controllers(self.api, gangs=controller_gangs)
        self._arrivals: list[tuple[float, int, list[_Arrival]]] = []
        self._preempted: dict[str, str] = {}
        self._victim_gangs: dict[str, str] = {}
        self._gangs_seen: dict[str, GangSpec | GangError] = {}
        self._gang_of_seen: dict[str, str] = {}
        self._members_seen: dict[str, set[str]] = {}
        self._bound_at_seen: dict[str, float] = {}
        self._until_reached = False
        self._later = False
        self._sequence = 0
        self._next_second: dict[float, float] = {}
        #: The live view's pictures over the run (``simulate --serve``): (simulated seconds, JSON), one per
        #: moment the cluster was quiet, when :meth:`record_frames` asked for them.
        self.frames: list[tuple[float, bytes]] | None = None
        self.frames_cut = False
        self._started = self.clock.monotonic()

    def record_frames(self) -> None:
        """Keep a picture of the cluster (``picture.py``) at every moment the run stops at, at most
        :data:`MOST_FRAMES`, for ``simulate --serve`` to play back."""
        self.frames = []

    @property
    def refused(self) -> list[str]:
        return self.api.refused

    def add_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        load(self.store, nodes, assume_ready=True)

    def add_objects(
        self,
        objects: Iterable[Mapping[str, Any]],
        *,
        at: float | None = None,
        source: str = "the workload",
        default_scheduler: bool = True,
    ) -> None:
        """Pods, group objects and the workload objects controllers expand, in order, one second apart (so
        that the queue sees that order).

        Without ``at`` they are all there before the run starts, as in a snapshot of a cluster. With it,
        they arrive during the run from ``at`` seconds after the start, one by one, as ``kubectl apply``
        creates them, and the scheduler sees each as it comes; a controller creates all of an object's
        first pods at once.

        With ``default_scheduler``, a pod (or pod template) that names no scheduler is Phalanx's, as
        ``--workload`` promises. Objects no controller here expands are refused, one line each in
        :attr:`refused`; one that cannot be expanded as given raises :class:`ManifestError` now, before
        anything runs.
        """
        given = list(objects)
        for obj in given:
            if Controllers.is_runtime(obj):
                self.controllers.runtimes.add(dict(obj))
        arrivals = []
        for obj in given:
            arrival = self._prepare(obj, source, default_scheduler)
            if arrival is not None:
                arrivals.append(arrival)
        if at is None:
            self._arrive(arrivals)
            return
        self._later = True
        # Files given for the same moment follow each other, in the order given; a file given for a later
        # moment arrives then, whatever is still arriving.
        start = self._next_second.get(at, at)
        self._next_second[at] = start + len(arrivals)
        for offset, arrival in enumerate(arrivals):
            heapq.heappush(self._arrivals, (start + offset, self._sequence, [arrival]))
            self._sequence += 1

    def _prepare(self, given: Mapping[str, Any], source: str, default_scheduler: bool) -> _Arrival | None:
        obj = dict(given)
        kind, api_version = str(obj.get("kind")), str(obj.get("apiVersion"))
        given_metadata = obj.get("metadata")
        metadata: Mapping[str, Any] = given_metadata if isinstance(given_metadata, Mapping) else {}
        if not metadata.get("name") and isinstance(metadata.get("generateName"), str):
            # As the API server names it when it is created (kubectl create -f with generateName).
            suffix = "".join(self.api.random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            obj["metadata"] = metadata = {**metadata, "name": metadata["generateName"] + suffix}
        name = str(metadata.get("name", "?"))
        try:
            _check_run_seconds(obj)
            if Controllers.is_runtime(obj):
                return None
            if self.controllers.expands(obj):
                return _Arrival(controller=self.controllers.parse(obj), source=source)
        except (AnnotationError, WorkloadError) as error:
            raise ManifestError(f"{source}: {error}") from None
        except (TypeError, ValueError, AttributeError, KeyError) as error:  # a shape the checks did not foresee
            raise ManifestError(
                f"{source}: {kind} {name!r}: cannot be expanded: {type(error).__name__}: {error}"
            ) from None
        if kind == "Pod" and default_scheduler and not (obj.get("spec") or {}).get("schedulerName"):
            obj = {**obj, "spec": {**(obj.get("spec") or {}), "schedulerName": self.settings.scheduler_names[0]}}
        try:
            self.store.resource(api_version, kind)
        except ApiError:
            self.api.refuse(f"{source}: {kind} {name!r} ({api_version}): not simulated")
            return None
        return _Arrival(obj=obj, source=source)

    def _arrive(self, arrivals: Iterable[_Arrival], *, spaced: bool = True) -> None:
        """Create the objects (``spaced``: one second apart, before the run); during the run, an object the
        API refuses is left out with a line in :attr:`refused`, as ``kubectl apply`` goes on past it."""
        for arrival in arrivals:
            if arrival.controller is not None:
                self.controllers.start(arrival.controller)
            elif arrival.obj is not None:
                try:
                    obj = arrival.obj
                    if obj.get("kind") == "Pod" and "priority" not in (obj.get("spec") or {}):
                        obj = self._admitted(obj)
                    load(self.store, [obj])
                except ManifestError as error:
                    if spaced:
                        raise
                    self.api.refuse(f"{arrival.source}: {error}")
            if spaced:
                self.clock.advance(1.0)

    def _admitted(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """``spec.priority`` from the pod's PriorityClass (declared earlier in the workload), as the API
        server's admission sets it: preemption compares priorities."""
        name = str((pod.get("metadata") or {}).get("name", "?"))
        try:
            return {**pod, "spec": self.store.admit_priority(name, pod.get("spec") or {})}
        except ApiError as error:
            raise ManifestError(f"Pod {name!r}: {error.message}") from None

    def _pods(self) -> list[dict[str, Any]]:
        return list(self.store.objects(self.store.resource("v1", "Pod")))

    async def run(
        self,
        *,
        advance_time: bool = True,
        timeout: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Report:
        """Run Phalanx until the cluster is quiet (see the module docstring), or ``timeout`` wall seconds."""
        app = Phalanx(
            self.settings, SimCluster(self.store), clock=self.clock, rng=random.Random(self.seed), serve=False
        )

        def evicted(pod: str, preemptor: GangKey) -> None:
            self._preempted[pod] = str(preemptor)
            own = app.state.index.gang_of(pod)
            if own is not None:
                self._victim_gangs[pod] = str(own)

        app.evictor.on_evicted = evicted
        started = time.perf_counter()
        timed_out = False
        async with anyio.create_task_group() as group:
            await group.start(app.run)
            if progress is not None:
                group.start_soon(self._tick, progress)
            with anyio.move_on_after(timeout) as limit:
                await self._until_quiet(app, advance_time, progress)
            timed_out = limit.cancelled_caught
            await app.reporter.flush()
            reservations = _reservations(app)  # read while it leads: stopping forgets them
            group.cancel_scope.cancel()
        return self._report(app, time.perf_counter() - started, timed_out, reservations)

    async def _until_quiet(self, app: Phalanx, advance_time: bool, progress: Callable[[int, int], None] | None) -> None:
        timed_out_once: set[GangKey] = set()
        while True:
            await _all_tasks_blocked()
            if progress is not None:
                progress(*self._progress())
            self._remember_gangs(app)
            self._frame(app)
            if not advance_time:
                return
            if self._react():
                continue
            fresh = {key: r.deadline for key, r in app.permit.waiting.items() if key not in timed_out_once}
            # The store and the controllers keep wall time; the scheduler's deadlines are monotonic.
            ending = self.kubelets.next_end() if self.kubelets is not None else None
            walls = [self.store.next_termination(), ending, self.controllers.next_due()]
            monotonic = [wall - self.clock.wall() + self.clock.monotonic() for wall in walls if wall is not None]
            arrival = self._arrivals[0][0] if self._arrivals else None
            timers = [d for d in (*fresh.values(), app.state.next_expiry()) if d is not None]
            events = [d for d in (arrival, *monotonic) if d is not None]
            if not timers and not events:
                return
            moment = min(timers + events)
            if moment > self.until:
                self._until_reached = True
                self.clock.advance(max(0.0, self.until - self.clock.monotonic()))
                return
            timed_out_once |= {key for key, deadline in fresh.items() if deadline <= moment}
            # Just past a scheduler's deadline, so that it has passed; exactly at an arrival or an ending.
            past = 0.001 if timers and min(timers) == moment else 0.0
            self.clock.advance(max(0.0, moment - self.clock.monotonic()) + past)
            self.store.finish_terminations()
            while self._arrivals and self._arrivals[0][0] <= self.clock.monotonic():
                self._arrive(heapq.heappop(self._arrivals)[2], spaced=False)
            app.scheduler.poke()

    def _frame(self, app: Phalanx) -> None:
        """The picture of this moment, replacing one taken earlier at the same moment."""
        if self.frames is None or self.frames_cut:
            return
        at = round(self.clock.monotonic() - self._started, 3)
        if self.frames and self.frames[-1][0] == at:
            self.frames.pop()
        elif len(self.frames) >= MOST_FRAMES:
            self.frames_cut = True
            return
        self.frames.append((at, orjson.dumps(app.pictures.take())))

    def _react(self) -> bool:
        """What the cluster's kubelets and controllers do now; True if they changed anything."""
        before = self.store.resource_version
        if self.kubelets is not None:
            self.kubelets.end_due()
            self.kubelets.start()
        self.controllers.reconcile()
        return self.store.resource_version != before

    def _remember_gangs(self, app: Phalanx) -> None:
        """Keep each gang's definition and every pod it ever had, from when its pods are created or bound:
        once they have all ended or gone it leaves the index (a Job's next pods make it again), and the
        report still tells its story from the start."""
        index = app.state.index
        for key in {key for pod in self.history.take_changed() if (key := index.gang_of(pod)) is not None}:
            result = index.get(key)
            if result is None:
                continue
            name = str(key)
            self._gangs_seen[name] = result
            self._gang_of_seen.update({str(pod): name for pod in result.pods})
            self._members_seen.setdefault(name, set()).update(str(pod) for pod in result.pods)
            if name not in self._bound_at_seen and isinstance(result, GangSpec):
                members = [member.key for member in result.request.members()]
                bound_at = self.history.bound_at(members, result.request.satisfied_by)
                if bound_at is not None:
                    self._bound_at_seen[name] = bound_at

    async def _tick(self, progress: Callable[[int, int], None]) -> None:
        while True:
            progress(*self._progress())
            await anyio.sleep(0.2)

    def _progress(self) -> tuple[int, int]:
        names = set(self.settings.scheduler_names)
        pods = [pod for pod in self._pods() if (pod.get("spec") or {}).get("schedulerName") in names]
        return sum(1 for pod in pods if (pod.get("spec") or {}).get("nodeName")), len(pods)

    # -- the report -----------------------------------------------------------------------------

    def _report(self, app: Phalanx, seconds: float, timed_out: bool, reservations: list[ReservationReport]) -> Report:
        names = set(self.settings.scheduler_names)
        nodes = list(self.store.objects(self.store.resource("v1", "Node")))
        node_labels = {node["metadata"]["name"]: dict(node["metadata"].get("labels") or {}) for node in nodes}
        node_gpus = {node["metadata"]["name"]: _gpus((node.get("status") or {}).get("allocatable")) for node in nodes}
        for name, gpus in slice_gpus(self.store).items():  # the GPUs DRA drivers publish
            if name in node_gpus:
                node_gpus[name] += gpus
        placement: dict[str, str] = {}
        gpus_by_pod: dict[str, float] = {}
        bound: dict[str, str] = {}
        pending: dict[str, str] = {}
        for pod in self._pods():
            key, spec = _key(pod), pod.get("spec") or {}
            node = spec.get("nodeName")
            if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
                continue
            if node:
                placement[key] = node
                gpus_by_pod[key] = pod_gpus(pod) + claimed_gpus(self.store, pod, self.history.parts())
            elif spec.get("schedulerName") in names:
                why = app.reporter.why_pending(key)
                pending[key] = why[1] if why else "not tried yet: the run ended first"
        # Bound by this run, whether it has ended or gone since; not a pod that came with its node set.
        bound.update(
            (key, record.node)
            for key, record in sorted(self.history.pods.items())
            if record.bound is not None and record.node is not None and record.scheduler in names
        )
        results = {**self._gangs_seen, **{str(key): result for key, result in app.state.index.results().items()}}
        results = dict(sorted(results.items()))
        existing = {_key(pod) for pod in self._pods()}
        gangs = [
            self._gang(key, result, placement=placement, node_labels=node_labels, pending=pending, existing=existing)
            for key, result in results.items()
        ]
        gang_of = {**self._gang_of_seen, **{str(pod): key for key, result in results.items() for pod in result.pods}}
        total_gpus = sum(node_gpus.values())
        used_gpus = sum(gpus_by_pod[pod] for pod, node in placement.items() if node in node_gpus)
        return Report(
            bound=bound,
            pending=pending,
            gangs=gangs,
            nodes=len(nodes),
            pods_bound=len(bound),
            gpu_allocation=used_gpus / total_gpus if total_gpus else 0.0,
            seconds=seconds,
            timed_out=timed_out,
            placement=placement,
            node_gpus=node_gpus,
            node_labels=node_labels,
            pod_gpus=gpus_by_pod,
            gang_of=gang_of,
            results=results,
            preempted=dict(self._preempted),
            victim_gangs=dict(self._victim_gangs),
            reservations=reservations,
            refused=list(self.refused),
            simulated_seconds=self.clock.monotonic(),
            timeline=self._later or any(record.ended is not None for record in self.history.pods.values()),
            until_reached=self._until_reached,
            not_arrived=len(self._arrivals),
            usage=list(self.history.usage),
            total_gpus=total_gpus,
        )

    def _gang(
        self,
        key: str,
        result: GangSpec | GangError,
        *,
        placement: Mapping[str, str],
        node_labels: Mapping[str, Mapping[str, str]],
        pending: Mapping[str, str],
        existing: Container[str],
    ) -> GangReport:
        history = self.history
        ever = self._members_seen.get(key, set()) | set(result.pods)
        gone = not any(pod in existing for pod in ever)
        if isinstance(result, GangError):
            bound = sum(1 for pod in result.pods if pod in placement)
            state = DELETED if gone else INVALID if result.problem is Problem.INVALID else PENDING
            return GangReport(key, state, bound, result.minimum or 0, {}, result.message, arrived=history.arrived(ever))
        members = [member.key for member in result.request.members()]
        placed = {pod for pod in members if pod in placement}
        finished_at = history.finished(ever) if not pending.keys() & ever else None
        ran = {pod for pod in members if (record := history.pods.get(pod)) is not None and record.node is not None}
        state = PENDING
        if gone and finished_at is None:
            # Deleted, by a person, their controller, or this run's preemption, before they all ended.
            state = DELETED
        elif finished_at is not None:
            # Its last pods (a Job's retries replace those before them) all succeeded, or not.
            succeeded = all(history.pods[pod].phase == "Succeeded" for pod in ran)
            state = FINISHED if succeeded else FAILED
        elif result.request.satisfied_by(placed):
            state = BOUND if len(placed) == len(members) else PARTIAL
        reason = next((pending[pod] for pod in members if pod in pending), "") if state in (PENDING, PARTIAL) else ""
        victims = {self._preempted[pod] for pod in ever if pod in self._preempted}
        if state == DELETED:
            reason = f"preempted for {', '.join(sorted(victims))}" if victims else "its pods were deleted"
        ended = state in (FINISHED, FAILED)
        where = (
            [history.pods[pod].node or "" for pod in sorted(ran)]
            if ended
            else [placement[pod] for pod in sorted(placed)]
        )
        return GangReport(
            key,
            state,
            len(ran) if ended else len(placed),
            result.request.minimum_pods(),
            _shared_domains(where, node_labels, self.settings.levels),
            reason,
            arrived=history.arrived(ever),
            bound_at=self._bound_at_seen.get(
                key, history.bound_at(members, result.request.satisfied_by, arrived_bound=state == BOUND)
            ),
            finished_at=finished_at,
        )


@dataclass(frozen=True, slots=True)
class _Arrival:
    """One object of a workload file, ready to arrive: as it is, or the controller that expands it."""

    obj: dict[str, Any] | None = None
    controller: Controller | None = None
    source: str = ""


def _check_run_seconds(obj: Mapping[str, Any]) -> None:
    """Every ``simulate.phalanx.dev/run-seconds`` in the object (a pod's, or its templates') is a number of
    seconds: checked when the object is given, not when a pod it makes starts."""
    owner = f"{obj.get('kind', '?')} {(obj.get('metadata') or {}).get('name', '?')}"
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            metadata = value.get("metadata")
            annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
            if isinstance(metadata, Mapping) and isinstance(annotations, Mapping) and RUN_SECONDS in annotations:
                run_seconds({"metadata": {**metadata, "name": metadata.get("name") or f"of {owner}"}})
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


async def _all_tasks_blocked() -> None:
    """Return once every other task waits on something (anyio's ``wait_all_tasks_blocked`` looks again only
    every 0.1 s on asyncio, and a run with a timeline waits for this once per arrival and per ending)."""
    try:
        this = asyncio.current_task()
    except RuntimeError:  # not on asyncio
        await anyio.wait_all_tasks_blocked()
        return
    spins = 0
    while True:
        await asyncio.sleep(0 if spins < 1000 else 0.001)  # a task in a worker thread: stop spinning
        spins += 1
        if all(task is this or _waiting(task) for task in asyncio.all_tasks()):
            return


def _waiting(task: asyncio.Task[Any]) -> bool:
    waiter = getattr(task, "_fut_waiter", None)  # what anyio's own check reads
    return waiter is not None and not waiter.done()


def _reservations(app: Phalanx) -> list[ReservationReport]:
    starvation = app.scheduler.starvation
    return [
        ReservationReport(str(held.gang), held.level, held.domain, held.nodes, reserves_words(starvation, held))
        for held in starvation.standing()
    ]


def _shared_domains(
    nodes: list[str], node_labels: Mapping[str, Mapping[str, str]], levels: Iterable[str]
) -> dict[str, str]:
    """The domain of each topology level (above the node) that holds every one of ``nodes``."""
    shared: dict[str, str] = {}
    if not nodes:
        return shared
    for level in levels:
        if level == HOSTNAME:
            continue
        values = {node_labels.get(node, {}).get(level) for node in nodes}
        if len(values) == 1 and None not in values:
            shared[level] = str(values.pop())
    return shared


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _gpus(resources: object) -> int:
    """GPUs in a resource list: every extended resource named ``<vendor>/gpu``."""
    if not isinstance(resources, Mapping):
        return 0
    total = 0
    for name, amount in resources.items():
        if str(name).endswith("/gpu"):
            try:
                total += int(str(amount))
            except ValueError:
                continue
    return total
