"""What happened to every pod of a simulation, and when: created, bound (to which node), ended.

It watches the store's writes as they are made, on the simulation's clock (seconds since the run's
start), so that a report can say when each gang arrived, was bound and finished, and draw the GPUs in use
over time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.devices.claims import pod_claims
from scheduler.devices.expressions import milli
from scheduler.devices.slices import Pools
from scheduler.gangs.pods import FINISHED_PHASES
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import Obj, Store
from topology import SpecError, pod_demand


@dataclass(slots=True)
class PodHistory:
    created: float
    #: Whole GPUs, or part of one for a MIG partition or a share of a GPU shared by capacity.
    gpus: float
    scheduler: str = ""
    node: str | None = None
    #: When the pod was bound during the run (None: never, or it was already on its node when loaded).
    bound: float | None = None
    #: When it ended (Succeeded, Failed) or was deleted while on a node.
    ended: float | None = None
    phase: str | None = None


class History:
    def __init__(self, store: Store, now: Callable[[], float]) -> None:
        self.now = now
        self.pods: dict[str, PodHistory] = {}
        #: (seconds, GPUs in use on nodes) at every change.
        self.usage: list[tuple[float, float]] = [(now(), 0)]
        self._in_use = 0.0
        self._fresh: list[str] = []
        self._created: list[str] = []
        self._storage = store.resource("v1", "Pod").storage
        self._store = store
        self._parts: GpuParts | None = None  # of the slices as they are; read again when one changes
        store.observe(self._observe)

    def parts(self) -> GpuParts:
        if self._parts is None:
            self._parts = gpu_parts(self._store)
        return self._parts

    def _observe(self, storage: tuple[str, str], kind: str, obj: Obj, previous: Obj | None) -> None:
        if storage == SLICES:
            self._parts = None
        if storage != self._storage:
            return
        metadata = obj.get("metadata") or {}
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        now = self.now()
        record = self.pods.get(key)
        if record is None or (kind == "ADDED" and previous is None):
            scheduler = str((obj.get("spec") or {}).get("schedulerName") or "")
            record = self.pods[key] = PodHistory(created=now, gpus=pod_gpus(obj), scheduler=scheduler)
            self._created.append(key)
            node = (obj.get("spec") or {}).get("nodeName")
            if node and (obj.get("status") or {}).get("phase") not in FINISHED_PHASES:
                record.node = node  # already running when loaded
                self._use(now, record.gpus)
            return
        running = record.node is not None and record.ended is None
        node = (obj.get("spec") or {}).get("nodeName")
        if kind != "DELETED" and node and record.node is None:
            record.node, record.bound = node, now
            # Its claims are allocated by now.
            record.gpus = pod_gpus(obj) + claimed_gpus(self._store, obj, self.parts())
            self._fresh.append(key)
            self._use(now, record.gpus)
            running = True
        phase = (obj.get("status") or {}).get("phase")
        if running and (kind == "DELETED" or phase in FINISHED_PHASES):
            record.ended, record.phase = now, phase if phase in FINISHED_PHASES else "Deleted"
            self._use(now, -record.gpus)

    def _use(self, now: float, gpus: float) -> None:
        if not gpus:
            return
        self._in_use += gpus
        if self.usage and self.usage[-1][0] == now:
            self.usage[-1] = (now, self._in_use)
        else:
            self.usage.append((now, self._in_use))

    def take_changed(self) -> list[str]:
        """The pods created or bound since the last call."""
        fresh, self._fresh, self._created = [*self._created, *self._fresh], [], []
        return fresh

    def bound_at(
        self, pods: Iterable[str], satisfied: Callable[[set[str]], bool], *, arrived_bound: bool = False
    ) -> float | None:
        """When the first moment came at which the pods bound so far satisfied ``satisfied`` (a gang's
        minimum), or None; ``arrived_bound``: a pod that arrived on its node (bound by someone else before the
        run) counts from its arrival. Satisfaction only grows as pods are added, so a binary search finds it."""
        times = sorted(
            (record.bound if record.bound is not None else record.created, pod)
            for pod in pods
            if (record := self.pods.get(pod)) is not None
            and (record.bound is not None or (arrived_bound and record.node is not None))
        )
        if not times or not satisfied({pod for _, pod in times}):
            return None
        low, high = 0, len(times) - 1
        while low < high:
            middle = (low + high) // 2
            if satisfied({pod for _, pod in times[: middle + 1]}):
                high = middle
            else:
                low = middle + 1
        return times[low][0]

    def arrived(self, pods: Iterable[str]) -> float | None:
        return min((self.pods[pod].created for pod in pods if pod in self.pods), default=None)

    def finished(self, pods: Iterable[str]) -> float | None:
        """When the last of ``pods`` ended, if every one of them ran and ended."""
        records = [self.pods.get(pod) for pod in pods]
        if not records or any(record is None or record.ended is None or record.bound is None for record in records):
            return None
        return max(record.ended for record in records if record is not None and record.ended is not None)


#: DRA drivers whose devices are GPUs (NVIDIA's ``gpu.nvidia.com``, AMD's ``gpu.amd.com``, Intel's ...).
GPU_DRIVERS = "gpu."


SLICES = ("resource.k8s.io", "resourceslices")
DeviceId = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class GpuParts:
    """GPU devices that are part of a GPU: the part of its GPU each MIG partition is (the largest share of a
    counter it consumes), and the capacities of each GPU that claims share (thousandths)."""

    partitions: Mapping[DeviceId, float]
    shared: Mapping[DeviceId, Mapping[str, int]]

    def of(self, result: Mapping[str, Any]) -> float:
        """How much of a GPU one result of an allocation is."""
        device = (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
        if device in self.partitions:
            return self.partitions[device]
        capacity = self.shared.get(device)
        if capacity is None:
            return 1.0
        consumed = result.get("consumedCapacity") or {}
        parts = [milli(str(consumed[name])) / total for name, total in capacity.items() if name in consumed and total]
        return max(parts, default=1.0)


def gpu_parts(store: Store) -> GpuParts:
    pools = Pools()
    for published in store.objects(store.resource("resource.k8s.io/v1", "ResourceSlice")):
        pools.apply("ADDED", published)
    counters = pools.counters()
    partitions, shared = {}, {}
    for device in pools.devices():
        if not device.driver.startswith(GPU_DRIVERS):
            continue
        sharing = device.sharing
        if sharing.consumes:
            partitions[device.id] = max(
                (amount / total
                 for counter_set, used in sharing.consumes
                 for name, amount in used
                 if (total := counters.get((device.driver, device.pool, counter_set), {}).get(name, 0))),
                default=1.0,
            )  # fmt: skip
        elif sharing.shared:
            shared[device.id] = {name: capacity.value.milli for name, capacity in (sharing.capacity or {}).items()}
    return GpuParts(partitions, shared)


def claimed_gpus(store: Store, pod: Mapping[str, Any], parts: GpuParts | None = None) -> float:
    """GPUs allocated to the pod's ResourceClaims (devices of a GPU driver), as far as they are allocated: a MIG
    partition or a share of a GPU counts as the part of its GPU it is (``parts``)."""
    parts = parts if parts is not None else gpu_parts(store)
    claims = pod_claims(pod)
    if not claims:
        return 0
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    resource = store.resource("resource.k8s.io/v1", "ResourceClaim")
    total = 0.0
    for named in claims:
        try:
            claim = store.get(resource, namespace, named.claim) if named.claim else None
        except ApiError:
            continue  # not made yet, or gone
        results = ((((claim or {}).get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
        gpus = (result for result in results or () if str(result.get("driver", "")).startswith(GPU_DRIVERS))
        total += sum(parts.of(result) for result in gpus)
    return total


def slice_gpus(store: Store) -> dict[str, int]:
    """Per node, the GPUs its ResourceSlices publish (devices of a GPU driver): each counter set of a pool of
    partitions is one GPU, its partitions none."""
    found: dict[str, int] = {}
    for published in store.objects(store.resource("resource.k8s.io/v1", "ResourceSlice")):
        spec = published.get("spec") or {}
        node = spec.get("nodeName")
        if node and str(spec.get("driver", "")).startswith(GPU_DRIVERS):
            whole = [device for device in spec.get("devices") or [] if not device.get("consumesCounters")]
            found[node] = found.get(node, 0) + len(whole) + len(spec.get("sharedCounters") or [])
    return found


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod requests: every extended resource named ``<vendor>/gpu``."""
    try:
        requests = pod_demand(pod)
    except SpecError:
        return 0
    return sum(amount for name, amount in requests.items() if name.endswith("/gpu"))
