"""``scripts/bench_e2e.py --real --upstream-gangs``: Phalanx against kube-scheduler 1.36's own gang scheduling.

Both schedulers get the same objects on the same kind of server: a fresh etcd and kube-apiserver v1.36 from
KUBEBUILDER_ASSETS for every run, 256 nodes of 8 GPUs (8 racks of 32), and gangs written in the API that
ships with Kubernetes, ``scheduling.k8s.io/v1alpha2``: a Workload with one PodGroupTemplate, a PodGroup made
from it (``schedulingPolicy.gang.minCount`` = the gang's size, with a rack constraint
``schedulingConstraints.topology[].key`` where the scenario asks one), and pods that join it with
``spec.schedulingGroup.podGroupName``. The pods differ only in ``schedulerName``. kube-scheduler is the
reference binary from the same assets with the feature gates GenericWorkload, GangScheduling and
TopologyAwareWorkloadScheduling on, as on the server (its default profile then holds GangScheduling,
TopologyPlacementGenerator and PodGroupPodsCount; no plugin configuration), client QPS and burst 5,000,
leader election off. Phalanx is ``phalanx run`` with manifests/phalanx.yaml, writes limited to 5,000/s.
Each scheduler talks to the server as a user of its own, so that the audit log tells its writes apart.

Scenarios, each run against both schedulers in turn (interleaved), a fresh server each:

  burst       every gang is created first, then the scheduler starts: the time from its start to its last
              bind and to its last write of any kind (binds, Events, conditions, group status; from the audit
              log, once the scheduler has written nothing for 5 s), and the racks each gang spans. Two sets:
              300 gangs of 3 with no constraint, and 200 gangs of 4 that each require one rack.
  stream      a busy cluster (half its GPUs held by pods already bound) and a warm scheduler (20 gangs
              placed first); then 200 gangs of 3 arrive at 10 a second. A gang's latency is from its last
              pod created (the create answered) to its last pod bound (as a watch sees it).
  saturation  fragmented nodes (each holds 3 to 7 of its 8 GPUs already) and more gangs than fit: 60 of 4
              pods of 4 GPUs and 40 of 8 pods of 2 GPUs. Once nothing has been bound for 10 s: gangs bound
              whole, gangs bound in part (must be 0), GPUs the gangs got, and the scheduler's CPU over the
              next 10 s, while nothing can change.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import realbench  # puts the project's root on the path, for the control plane's module
import yaml
from realbench import ROOT, Api, Binder, gather_limited, pod, process_binder, watch_pods

from scripts.controlplane import FEATURE_GATES, HOW_TO_GET, ControlPlane, assets_dir, free_port

SCHEDULERS = {"kube-scheduler": "default-scheduler", "phalanx": "phalanx"}
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
SCHEDULING = "/apis/scheduling.k8s.io/v1alpha2/namespaces/bench"
RACK = "example.com/rack"
QUIET_WRITES_S = 5.0
QUIET_BINDS_S = 10.0
CPU_WINDOW_S = 10.0


@dataclass(frozen=True, slots=True)
class GangSet:
    """Gangs of one shape: ``count`` gangs of ``size`` pods of ``gpus`` GPUs, each in one rack if ``rack``."""

    prefix: str
    count: int
    size: int
    gpus: int = 1
    rack: bool = False

    def names(self) -> list[str]:
        return [f"{self.prefix}{i:03d}" for i in range(self.count)]


def gang_objects(name: str, gangs: GangSet, scheduler: str) -> list[dict[str, Any]]:
    """A Workload, its PodGroup and the pods that join it, as a 1.36 user (or a Job controller) writes them."""
    policy = {"gang": {"minCount": gangs.size}}
    constraints = {"schedulingConstraints": {"topology": [{"key": RACK}]}} if gangs.rack else {}
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy, **constraints}]},
    }
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": "workers"}},
            "schedulingPolicy": policy,
            **constraints,
        },
    }
    pods = []
    for member in range(gangs.size):
        made = pod(f"{name}-{member}", scheduler)
        made["spec"]["schedulingGroup"] = {"podGroupName": name}
        resources = made["spec"]["containers"][0]["resources"]
        resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(gangs.gpus)
        pods.append(made)
    return [workload, group, *pods]


async def create_gang(api: Api, objects: list[dict[str, Any]]) -> None:
    """The Workload and PodGroup first (as a controller makes them), then the pods at once."""
    workload, group, *pods = objects
    await api.call("POST", f"{SCHEDULING}/workloads", workload)
    await api.call("POST", f"{SCHEDULING}/podgroups", group)
    await asyncio.gather(*(api.call("POST", "/api/v1/namespaces/bench/pods", p) for p in pods))


def filler(node: str, index: int) -> dict[str, Any]:
    """A one-GPU pod already bound to ``node`` (``spec.nodeName`` set when created): a cluster's other work."""
    made = pod(f"busy-{node}-{index}", "nobody")
    made["spec"]["nodeName"] = node
    return made


class Binds:
    """A watch of the benchmark's pods: when each got its node, and which node."""

    def __init__(self) -> None:
        self.at: dict[str, tuple[float, str]] = {}
        self.changed = asyncio.Event()

    async def watch(self, api: Api, version: str, started: asyncio.Event) -> None:
        await watch_pods(api, version, started, self._seen)

    def _seen(self, obj: dict[str, Any]) -> bool:
        node = (obj.get("spec") or {}).get("nodeName")
        name = obj["metadata"].get("name", "")
        if node and name not in self.at and not name.startswith("busy-"):
            self.at[name] = (time.monotonic(), node)
            self.changed.set()
        return False  # until cancelled

    async def until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{what}: not done after {timeout:.0f} s ({len(self.at)} pods bound)")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=left)

    async def quiet(self, seconds: float, timeout: float) -> None:
        """Until no pod has been bound for ``seconds`` (or ``timeout`` has passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = max((t for t, _ in self.at.values()), default=0.0)
            left = last + seconds - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, deadline - time.monotonic()))  # the bind times are the condition


@dataclass
class Run:
    """One scheduler against one server: starting it, and what it is."""

    name: str
    plane: ControlPlane
    api: Api
    binds: Binds
    folder: Path
    binder: Binder | None = None
    began: float = 0.0  # monotonic
    began_wall: float = 0.0
    pid: int = 0

    async def start(self) -> None:
        token = self.plane.tokens["reader"]
        kubeconfig = self.plane.kubeconfig(self.folder / "kubeconfig", token=token, user="reader")
        self.began, self.began_wall = time.monotonic(), time.time()
        if self.name == "phalanx":
            command = [
                sys.executable, "-m", "scheduler.frontends.cli", "run", "--kubeconfig", str(kubeconfig),
                "--config", str(ROOT / "manifests" / "phalanx.yaml"), "--no-leader-elect",
                "--metrics-address", f"127.0.0.1:{free_port()}", "--log-level", "warning",
                "--set", f"binding.writesPerSecond={realbench.CLIENT_QPS}",
                "--set", f"binding.burst={realbench.CLIENT_QPS}",
            ]  # fmt: skip
            self.binder = process_binder(command, self.folder / "phalanx.log", cwd=ROOT)
        else:
            config = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {
                    "kubeconfig": str(kubeconfig), "qps": realbench.CLIENT_QPS, "burst": realbench.CLIENT_QPS
                },
                "leaderElection": {"leaderElect": False},
            }  # fmt: skip
            (self.folder / "config.yaml").write_text(yaml.safe_dump(config))
            assets = assets_dir()
            assert assets is not None
            command = [str(assets / "kube-scheduler"), f"--config={self.folder / 'config.yaml'}",
                       f"--feature-gates={FEATURE_GATES}", "--secure-port=0", "-v=0"]  # fmt: skip
            self.binder = process_binder(command, self.folder / "kube-scheduler.log")
        assert self.binder.pid is not None
        self.pid = self.binder.pid

    def log_name(self) -> str:
        return "phalanx.log" if self.name == "phalanx" else "kube-scheduler.log"

    def alive(self) -> None:
        """Raise with the scheduler's last words if it has exited."""
        if self.binder is not None and self.binder.ended.done():
            tail = (self.folder / self.log_name()).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited; its log ends:\n{tail}")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s

    def writes(self) -> list[tuple[float, str]]:
        """The scheduler's writes so far, from the audit log: when each was answered (seconds after its
        start) and to what (resource, with its subresource)."""
        found = []
        for event in self.plane.audit():
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITES:
                continue
            if (event.get("user") or {}).get("username") != "reader":
                continue
            ref = event.get("objectRef") or {}
            what = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            answered = datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")).timestamp()
            found.append((answered - self.began_wall, what))
        return sorted(found)

    async def quiet_writes(self, timeout: float) -> list[tuple[float, str]]:
        """The scheduler's writes, once it has written nothing for :data:`QUIET_WRITES_S`."""
        deadline = time.monotonic() + timeout
        while True:
            self.alive()
            writes = self.writes()
            since = time.monotonic() - self.began - (writes[-1][0] if writes else 0.0)
            if since >= QUIET_WRITES_S or time.monotonic() >= deadline:
                return writes
            await asyncio.sleep(QUIET_WRITES_S - since)  # the audit log is the condition; nothing to wait on


async def server(
    assets: Path,
    folder: Path,
    *,
    audit: bool,
    busy: Callable[[list[str]], list[dict[str, Any]]] | None = None,
    gangs: Iterable[list[dict[str, Any]]] = (),
) -> tuple[ControlPlane, aiohttp.ClientSession, Api]:
    """A fresh server with 256 nodes, ``busy``'s pods bound on them and ``gangs`` created."""
    plane = ControlPlane.start(assets, folder / "plane", audit=audit)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128))
    api = Api(plane, session)
    try:
        await realbench.prepare(api, [])
        nodes = [n["metadata"]["name"] for n in realbench.ClusterShape.parse(realbench.NODES).node_manifests()]
        if busy is not None:
            made = busy(nodes)
            await gather_limited([lambda p=p: api.call("POST", "/api/v1/namespaces/bench/pods", p) for p in made], 32)
        await gather_limited([lambda g=g: create_gang(api, g) for g in gangs], 16)
    except BaseException:
        await session.close()
        plane.stop()
        raise
    return plane, session, api


async def watching(api: Api, binds: Binds) -> asyncio.Task[None]:
    listing = await api.call("GET", "/api/v1/namespaces/bench/pods?limit=1")
    started = asyncio.Event()
    task = asyncio.create_task(binds.watch(api, str(listing["metadata"]["resourceVersion"]), started))
    await started.wait()
    return task


def racks_spanned(binds: Binds, gang_names: Iterable[str], size: int) -> list[int]:
    return [len({binds.at[f"{name}-{m}"][1].rsplit("-", 1)[0] for m in range(size)}) for name in gang_names]


async def burst(assets: Path, scheduler: str, gangs: GangSet) -> dict[str, Any]:
    objects = [gang_objects(name, gangs, SCHEDULERS[scheduler]) for name in gangs.names()]
    pods = gangs.count * gangs.size
    async with scheduler_on(assets, scheduler, audit=True, gangs=objects) as run:
        await run.binds.until(lambda: len(run.binds.at) == pods or run.binder.ended.done(), 600, scheduler)  # type: ignore[union-attr]
        run.alive()
        writes = await run.quiet_writes(120)
        times = sorted(t for t, _ in run.binds.at.values())
        spans = racks_spanned(run.binds, gangs.names(), gangs.size)
        counts: dict[str, int] = {}
        for _, what in writes:
            counts[what] = counts.get(what, 0) + 1
        return {
            "first_bind_s": round(times[0] - run.began, 3),
            "last_bind_s": round(times[-1] - run.began, 3),
            "last_write_s": round(writes[-1][0], 3),
            "writes": counts,
            "writes_by_last_bind": sum(1 for t, _ in writes if t <= times[-1] - run.began),
            "racks_mean": round(statistics.fmean(spans), 3),
            "racks_max": max(spans),
            "in_one_rack": sum(1 for s in spans if s == 1),
        }


@asynccontextmanager
async def scheduler_on(
    assets: Path,
    scheduler: str,
    *,
    audit: bool,
    busy: Callable[[list[str]], list[dict[str, Any]]] | None = None,
    gangs: Iterable[list[dict[str, Any]]] = (),
) -> AsyncIterator[Run]:
    """A fresh server (see :func:`server`), its pods watched, and ``scheduler`` started on it; all stopped after."""
    with tempfile.TemporaryDirectory(prefix="bench-gangs-") as folder:
        plane, session, api = await server(assets, Path(folder), audit=audit, busy=busy, gangs=gangs)
        run = Run(scheduler, plane, api, Binds(), Path(folder))
        watch = await watching(api, run.binds)
        try:
            await run.start()
            yield run
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            if run.binder is not None:
                await run.binder.stop()
            await session.close()
            plane.stop()


def half_busy(nodes: list[str]) -> list[dict[str, Any]]:
    return [filler(node, i) for node in nodes for i in range(4)]


def fragmented(nodes: list[str]) -> list[dict[str, Any]]:
    dice = random.Random(28)
    return [filler(node, i) for node in nodes for i in range(dice.randint(3, 7))]


async def stream(
    assets: Path, scheduler: str, *, gangs: int = 200, rate: float = 10.0, warm: int = 20
) -> dict[str, Any]:
    shape = GangSet("s", gangs + warm, 3)
    names = shape.names()
    objects = [gang_objects(name, shape, SCHEDULERS[scheduler]) for name in names]
    async with scheduler_on(assets, scheduler, audit=False, busy=half_busy) as run:
        await gather_limited([lambda g=g: create_gang(run.api, g) for g in objects[:warm]], 16)
        await run.binds.until(lambda: len(run.binds.at) == warm * 3 or run.binder.ended.done(), 120, "warm-up")  # type: ignore[union-attr]
        run.alive()
        created: dict[str, float] = {}

        async def arrive(index: int, at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.monotonic()))  # the arrival schedule, not a synchronisation
            await create_gang(run.api, objects[index])
            created[names[index]] = time.monotonic()

        begin = time.monotonic() + 0.1
        await asyncio.gather(*(arrive(warm + i, begin + i / rate) for i in range(gangs)))
        total = (warm + gangs) * 3
        await run.binds.until(lambda: len(run.binds.at) == total or run.binder.ended.done(), 300, scheduler)  # type: ignore[union-attr]
        run.alive()
        latency = sorted(max(run.binds.at[f"{name}-{m}"][0] for m in range(3)) - created[name] for name in names[warm:])
        return {
            "p50_ms": round(1000 * latency[len(latency) // 2], 1),
            "p99_ms": round(1000 * latency[min(len(latency) - 1, int(len(latency) * 0.99))], 1),
            "max_ms": round(1000 * latency[-1], 1),
        }


SATURATION = (GangSet("w", 60, 4, gpus=4), GangSet("n", 40, 8, gpus=2))


async def saturation(assets: Path, scheduler: str, sets: tuple[GangSet, ...] = SATURATION) -> dict[str, Any]:
    objects = [gang_objects(name, s, SCHEDULERS[scheduler]) for s in sets for name in s.names()]
    async with scheduler_on(assets, scheduler, audit=False, busy=fragmented, gangs=objects) as run:
        await run.binds.until(lambda: bool(run.binds.at) or run.binder.ended.done(), 120, scheduler)  # type: ignore[union-attr]
        await run.binds.quiet(QUIET_BINDS_S, 300)
        run.alive()
        before = run.cpu_seconds()
        await asyncio.sleep(CPU_WINDOW_S)  # the window CPU is measured over
        idle_cores = (run.cpu_seconds() - before) / CPU_WINDOW_S
        whole = partial = gpus = 0
        for s in sets:
            for name in s.names():
                bound = sum(1 for m in range(s.size) if f"{name}-{m}" in run.binds.at)
                whole += bound == s.size
                partial += 0 < bound < s.size
                gpus += bound * s.gpus
        idle = round(idle_cores, 3)
        return {"gangs_bound": whole, "gangs_in_part": partial, "gpus": gpus, "idle_cpu_cores": idle}


@dataclass
class Plan:
    burst: tuple[GangSet, ...] = (GangSet("g", 300, 3), GangSet("r", 200, 4, rack=True))
    stream_gangs: int = 200
    saturation: tuple[GangSet, ...] = SATURATION
    scenarios: tuple[str, ...] = ("burst", "stream", "saturation")
    results: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)


QUICK = Plan(
    burst=(GangSet("g", 30, 3), GangSet("r", 20, 4, rack=True)),
    stream_gangs=20,
    saturation=(GangSet("w", 6, 4, gpus=4), GangSet("n", 4, 8, gpus=2)),
)


def label(gangs: GangSet) -> str:
    return f"{gangs.count} gangs of {gangs.size}" + (", one rack each" if gangs.rack else "")


async def run(repeat: int, *, quick: bool = False, only: tuple[str, ...] = ()) -> dict[str, Any]:
    assets = assets_dir()
    if assets is None:
        raise SystemExit(f"bench_e2e.py --real --upstream-gangs: KUBEBUILDER_ASSETS is not set; {HOW_TO_GET}")
    if not (assets / "kube-scheduler").exists():
        raise SystemExit("bench_e2e.py --real --upstream-gangs: KUBEBUILDER_ASSETS has no kube-scheduler")
    plan = QUICK if quick else Plan()
    scenarios = only or plan.scenarios
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for _ in range(repeat):
        for scheduler in SCHEDULERS:
            if "burst" in scenarios:
                for gangs in plan.burst:
                    results.setdefault(f"burst: {label(gangs)}", {}).setdefault(scheduler, []).append(
                        await burst(assets, scheduler, gangs)
                    )
            if "stream" in scenarios:
                results.setdefault("stream", {}).setdefault(scheduler, []).append(
                    await stream(assets, scheduler, gangs=plan.stream_gangs, warm=5 if quick else 20)
                )
            if "saturation" in scenarios:
                results.setdefault("saturation", {}).setdefault(scheduler, []).append(
                    await saturation(assets, scheduler, plan.saturation)
                )
    return {scenario: {name: summary(runs) for name, runs in by.items()} for scenario, by in results.items()}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every number over the runs, and each run's figures."""
    middle: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, int | float):
            middle[key] = statistics.median(r[key] for r in runs)
    middle["runs"] = runs
    return middle


def report(result: dict[str, Any]) -> list[str]:
    """The tables: each scenario's medians, Phalanx beside kube-scheduler, and the ratios the issue set goals for."""
    lines = []
    for scenario, by in result.items():
        if not scenario.startswith("burst"):
            continue
        lines.append(f"\n{scenario} (seconds from the scheduler's start; medians)")
        lines.append(f"{'':<16} {'first bind':>10} {'last bind':>10} {'last write':>11} {'writes':>7} "
                     f"{'racks/gang':>11} {'in 1 rack':>10}  runs (last write)")  # fmt: skip
        for name, row in by.items():
            writes = statistics.median(sum(r["writes"].values()) for r in row["runs"])
            lines.append(
                f"{name:<16} {row['first_bind_s']:>10.2f} {row['last_bind_s']:>10.2f} {row['last_write_s']:>11.2f} "
                f"{writes:>7.0f} {row['racks_mean']:>11.2f} {row['in_one_rack']:>10.0f}  "
                f"{[r['last_write_s'] for r in row['runs']]}"
            )
        if {"phalanx", "kube-scheduler"} <= by.keys():
            ratio = by["kube-scheduler"]["last_write_s"] / by["phalanx"]["last_write_s"]
            binds = by["kube-scheduler"]["last_bind_s"] / by["phalanx"]["last_bind_s"]
            lines.append(f"start to last write, kube-scheduler / phalanx: {ratio:.2f}x (goal >= 3x: "
                         f"{'met' if ratio >= 3 else 'MISSED'}); to last bind: {binds:.2f}x")  # fmt: skip
    if "stream" in result:
        lines.append("\nstream: one gang's latency, last pod created to last pod bound (ms; medians of runs)")
        lines.append(f"{'':<16} {'p50':>8} {'p99':>8} {'max':>8}  runs (p50)")
        for name, row in result["stream"].items():
            lines.append(f"{name:<16} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} {row['max_ms']:>8.1f}  "
                         f"{[r['p50_ms'] for r in row['runs']]}")  # fmt: skip
        if "phalanx" in result["stream"]:
            p50 = result["stream"]["phalanx"]["p50_ms"]
            lines.append(f"phalanx p50 {p50:.1f} ms (goal <= 50 ms: {'met' if p50 <= 50 else 'MISSED'})")
    if "saturation" in result:
        lines.append("\nsaturation: more gangs than fit on fragmented nodes (medians)")
        lines.append(f"{'':<16} {'gangs bound':>11} {'in part':>8} {'GPUs':>6} {'idle CPU (cores)':>17}  runs (gangs)")
        for name, row in result["saturation"].items():
            lines.append(f"{name:<16} {row['gangs_bound']:>11.0f} {row['gangs_in_part']:>8.0f} {row['gpus']:>6.0f} "
                         f"{row['idle_cpu_cores']:>17.3f}  {[r['gangs_bound'] for r in row['runs']]}")  # fmt: skip
    return lines
