"""The real scheduler on an in-memory cluster, run until nothing more can happen.

``phalanx simulate`` and ``phalanx dry-run`` both come here: the objects go into a SimCluster
:class:`Store`, a :class:`Phalanx` instance watches it through the same informers, queue, cycle,
permit and binder as in a cluster, and the run ends when the system is quiet:

- every task waits (informers on their watches, the loop on its next poke), so every event has been
  applied and every gang that could be tried has been;
- then time is moved on, on a virtual clock, to the next moment something is due: a reservation that
  times out (its room goes to other gangs), a bind the watch never confirmed, or a preempted pod whose
  grace period ends (the simulated kubelet then deletes it, as a real one does once its containers stop).
  Backoffs are not worth waiting for here: in a closed cluster every event that could help a failed gang
  wakes it at once.
  A gang holds a reservation for missing members once and times out once; when the only reservations
  left are second ones, waiting longer would only repeat what happened.

The result says, per pod and per gang, what was bound where and why the rest is pending.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from scheduler.app import Phalanx
from scheduler.clock import ManualClock
from scheduler.gangs import GangError, GangKey, GangSpec, Problem
from scheduler.ports.sim.adapter import SimCluster
from scheduler.ports.sim.builders import ManifestError, load
from scheduler.ports.sim.errors import ApiError
from scheduler.ports.sim.store import Store
from scheduler.settings import LeaderSettings, Settings
from scheduler.starvation import holds_words
from topology import HOSTNAME, SpecError, pod_requests

#: States of a gang in a report.
BOUND, PARTIAL, PENDING, INVALID = "Bound", "Partial", "Pending", "Invalid"
_FINISHED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class GangReport:
    key: str
    state: str
    bound: int
    min: int
    domains: dict[str, str]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "state": self.state,
            "bound": self.bound,
            "min": self.min,
            "domains": self.domains,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ReservationReport:
    """A domain held for a gang that waited too long (``starvation`` settings) when the run ended."""

    gang: str
    level: str | None
    domain: str
    nodes: tuple[str, ...]
    #: In words: ``holds rack b0-r1 for its 32 GPUs; 20 GPUs there are still in use``.
    holds: str

    def to_json(self) -> dict[str, Any]:
        return {"gang": self.gang, "level": self.level, "domain": self.domain, "nodes": list(self.nodes),
                "holds": self.holds}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Report:
    """What a run did: pods it bound (pod -> node), Phalanx's pods left pending (pod -> why), gangs."""

    bound: dict[str, str]
    pending: dict[str, str]
    gangs: list[GangReport]
    nodes: int
    pods_bound: int
    gpu_allocation: float
    seconds: float
    timed_out: bool = False
    #: The node each pod of the cluster runs on after the run (for maps and plots), and GPUs per node.
    placement: dict[str, str] = field(default_factory=dict, repr=False)
    node_gpus: dict[str, int] = field(default_factory=dict, repr=False)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    pod_gpus: dict[str, int] = field(default_factory=dict, repr=False)
    #: The gang of each of Phalanx's pods, and each gang's compiled definition (or what is wrong with it).
    gang_of: dict[str, str] = field(default_factory=dict, repr=False)
    results: dict[str, GangSpec | GangError] = field(default_factory=dict, repr=False)
    #: Pods this run preempted, and the gang each made room for; and the gang each belonged to (if any).
    preempted: dict[str, str] = field(default_factory=dict)
    victim_gangs: dict[str, str] = field(default_factory=dict, repr=False)
    #: Domains held for gangs that waited too long, when the run ended.
    reservations: list[ReservationReport] = field(default_factory=list)

    @property
    def reserved_nodes(self) -> dict[str, str]:
        """Node -> the gang whose reservation holds it."""
        return {node: held.gang for held in self.reservations for node in held.nodes}

    def to_json(self) -> dict[str, Any]:
        """The documented ``--output json`` shape (README, "phalanx simulate")."""
        return {
            "bound": dict(sorted(self.bound.items())),
            "pending": dict(sorted(self.pending.items())),
            "gangs": [gang.to_json() for gang in self.gangs],
            "preempted": dict(sorted(self.preempted.items())),
            "reservations": [held.to_json() for held in self.reservations],
            "stats": {
                "nodes": self.nodes,
                "pods_bound": self.pods_bound,
                "gpu_allocation": round(self.gpu_allocation, 4),
                "seconds": round(self.seconds, 3),
            },
        }


def simulation_settings(settings: Settings) -> Settings:
    """The settings a run on the virtual clock needs: one instance, nothing served, and no client-side
    write limit (a token bucket on a clock that only moves when told would never refill)."""
    return replace(
        settings,
        leader_election=LeaderSettings(enabled=False, identity="phalanx-simulate"),
        binding=replace(settings.binding, writes_per_second=1e9, burst=1_000_000_000),
    )


class Simulation:
    """One SimCluster and the objects in it; :meth:`run` runs Phalanx on it once."""

    def __init__(self, settings: Settings, *, seed: int = 0) -> None:
        self.settings = simulation_settings(settings)
        self.seed = seed
        self.clock = ManualClock(start=float(int(time.time())))
        self.store = Store(seed=seed, clock=self.clock.wall, history=1_000_000, graceful=True)
        self._bound_before: set[str] = set()
        self._preempted: dict[str, str] = {}
        self._victim_gangs: dict[str, str] = {}

    def add_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        load(self.store, nodes, assume_ready=True)

    def add_objects(self, objects: Iterable[Mapping[str, Any]], *, default_scheduler: bool = True) -> None:
        """Pods and group objects, in arrival order (one second apart, so the queue sees that order).

        With ``default_scheduler``, a pod that names no scheduler is Phalanx's, as ``--workload`` promises.
        """
        for given in objects:
            obj = given
            if obj.get("kind") == "Pod" and default_scheduler and not (obj.get("spec") or {}).get("schedulerName"):
                obj = {**obj, "spec": {**(obj.get("spec") or {}), "schedulerName": self.settings.scheduler_names[0]}}
            if obj.get("kind") == "Pod" and "priority" not in (obj.get("spec") or {}):
                obj = self._admitted(obj)
            load(self.store, [obj])
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
        self._bound_before = {_key(pod) for pod in self._pods() if (pod.get("spec") or {}).get("nodeName")}
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
            await anyio.wait_all_tasks_blocked()
            if progress is not None:
                progress(*self._progress())
            if not advance_time:
                return
            fresh = {key: r.deadline for key, r in app.permit.waiting.items() if key not in timed_out_once}
            terminating = self.store.next_termination()
            # The store stamps wall time; the scheduler's deadlines are monotonic: convert to one clock.
            kubelet = None if terminating is None else terminating - self.clock.wall() + self.clock.monotonic()
            due = [d for d in (*fresh.values(), app.state.next_expiry(), kubelet) if d is not None]
            if not due:
                return
            moment = min(due)
            timed_out_once |= {key for key, deadline in fresh.items() if deadline <= moment}
            self.clock.advance(max(0.0, moment - self.clock.monotonic()) + 0.001)
            self.store.finish_terminations()
            app.scheduler.poke()

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
        placement: dict[str, str] = {}
        pod_gpus: dict[str, int] = {}
        bound: dict[str, str] = {}
        pending: dict[str, str] = {}
        for pod in self._pods():
            key, spec = _key(pod), pod.get("spec") or {}
            if (pod.get("status") or {}).get("phase") in _FINISHED:
                continue
            node = spec.get("nodeName")
            if node:
                placement[key] = node
                pod_gpus[key] = _pod_gpus(pod)
                if key not in self._bound_before and spec.get("schedulerName") in names:
                    bound[key] = node
            elif spec.get("schedulerName") in names:
                why = app.reporter.why_pending(key)
                pending[key] = why[1] if why else "not tried yet: the run ended first"
        results = dict(sorted(app.state.index.results().items()))
        gangs = [self._gang(key, result, placement, node_labels, pending) for key, result in results.items()]
        gang_of = {str(pod): str(key) for key, result in results.items() for pod in result.pods}
        total_gpus = sum(node_gpus.values())
        used_gpus = sum(pod_gpus[pod] for pod, node in placement.items() if node in node_gpus)
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
            pod_gpus=pod_gpus,
            gang_of=gang_of,
            results={str(key): result for key, result in results.items()},
            preempted=dict(self._preempted),
            victim_gangs=dict(self._victim_gangs),
            reservations=reservations,
        )

    def _gang(
        self,
        key: GangKey,
        result: GangSpec | GangError,
        placement: Mapping[str, str],
        node_labels: Mapping[str, Mapping[str, str]],
        pending: Mapping[str, str],
    ) -> GangReport:
        if isinstance(result, GangError):
            bound = sum(1 for pod in result.pods if pod in placement)
            state = INVALID if result.problem is Problem.INVALID else PENDING
            return GangReport(str(key), state, bound, 0, {}, result.message)
        members = [member.key for member in result.request.members()]
        placed = {pod for pod in members if pod in placement}
        state = PENDING
        if result.request.satisfied_by(placed):
            state = BOUND if len(placed) == len(members) else PARTIAL
        reason = next((pending[pod] for pod in members if pod in pending), "") if state != BOUND else ""
        domains = _shared_domains([placement[pod] for pod in sorted(placed)], node_labels, self.settings.levels)
        return GangReport(str(key), state, len(placed), result.request.minimum_pods(), domains, reason)


def _reservations(app: Phalanx) -> list[ReservationReport]:
    starvation = app.scheduler.starvation
    return [
        ReservationReport(str(held.gang), held.level, held.domain, held.nodes, holds_words(starvation, held))
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


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    try:
        requests = pod_requests(pod)
    except SpecError:
        return 0
    return sum(amount for name, amount in requests.items() if name.endswith("/gpu"))
