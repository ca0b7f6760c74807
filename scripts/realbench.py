"""``scripts/bench_e2e.py --real``: Phalanx and kube-scheduler side by side on one real kube-apiserver.

Three measurements on the same server (a fresh etcd and kube-apiserver v1.36 from KUBEBUILDER_ASSETS for
each, audit off, 256 nodes of 8 GPUs created with their status):

  phalanx         2,000 one-GPU pods in 250 PFN gangs of 8, created first, then bound by ``phalanx run``
                  (a separate process, leader election off, client writes limited to 5,000/s);
  kube-scheduler  2,000 plain one-GPU pods, created first, then bound by the reference kube-scheduler
                  from the same assets (client QPS and burst 5,000, leader election off);
  raw binding     the same 2,000 plain pods, created first, then bound by a bare client: one
                  ``pods/binding`` POST each, 64 in flight, no scheduling at all. The server's limit.

Each figure is pods per second over the bind window, from the first bind to the last, as a watch of the
pods sees them (so that process start-up, which differs, is not counted); the time from starting the
scheduler to its last bind is printed beside it.

With ``dra`` (``bench_e2e.py --real --dra``), devices instead of GPUs: 128 nodes that each publish 8 GPUs
through a DRA driver (a ResourceSlice each, one DeviceClass), and 1,000 plain pods that each claim one
device through a ResourceClaimTemplate. kube-controller-manager's resourceclaim controller runs beside the
server and makes every pod's claim before the scheduler starts; then Phalanx or kube-scheduler (its DRA
plugin is on by default in 1.36) allocates each claim (``status.allocation``, ``reservedFor``) and binds.
The pods differ only in ``schedulerName``. After the last bind, every claim is checked: allocated on its
pod's node, reserved for it, no device given twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.ports.sim import ClusterShape  # noqa: E402
from scripts.controlplane import HOW_TO_GET, ControlPlane, assets_dir, dying_with_parent, free_port  # noqa: E402

NODES = "blocks=1,racks=8,nodes=32,gpus=8"  # 256 nodes of 8 GPUs
DRA_NODES = "blocks=1,racks=4,nodes=32,gpus=0,dra=gpu.nvidia.com:8"  # 128 nodes of 8 devices
RESOURCE = "/apis/resource.k8s.io/v1"
PODS = 2000  # a window of 2-4 s: long enough that start-up effects (new connections) weigh little
DRA_PODS = 1000  # the DRA nodes hold 1,024 devices
QUICK_PODS = 256
GANG = 8
CLIENT_QPS = 5000
PFN = "gang-scheduling.preferred.jp/gang"


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    pods: int
    window_s: float  # first bind to last bind
    total_s: float  # scheduler (or binder) start to last bind
    #: Cores each process used over the bind window (CPU seconds / window): what the two cores went to.
    cores: dict[str, float] = field(default_factory=dict)

    @property
    def pods_per_s(self) -> float:
        return (self.pods - 1) / self.window_s if self.window_s > 0 else float("inf")


class Api:
    """An aiohttp session as the cluster admin; what the benchmark itself does on the server."""

    def __init__(self, plane: ControlPlane, session: aiohttp.ClientSession) -> None:
        self.plane = plane
        self.session = session
        self.ssl: ssl.SSLContext = plane.ssl_context()
        self.headers = {"Authorization": f"Bearer {plane.admin_token}"}

    async def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        headers = {**self.headers, "Content-Type": content_type}
        data = None if body is None else json.dumps(body)
        async with self.session.request(
            method, self.plane.url + path, data=data, headers=headers, ssl=self.ssl
        ) as answer:
            text = await answer.text()
            if answer.status >= 300:
                raise RuntimeError(f"{method} {path}: {answer.status} {text[:300]}")
            return json.loads(text) if text else {}


async def gather_limited(calls: list[Callable[[], Any]], limit: int) -> None:
    slots = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Any]) -> None:
        async with slots:
            await call()

    await asyncio.gather(*(one(call) for call in calls))


async def prepare(api: Api, pods: list[dict[str, Any]], *, dra: bool = False) -> None:
    """Nodes (created, then their status written as a kubelet would), with ``dra`` their devices, the
    namespace (and the claim template), then every pod."""
    objects = ClusterShape.parse(DRA_NODES if dra else NODES).manifests()
    nodes = [obj for obj in objects if obj["kind"] == "Node"]

    async def node(manifest: dict[str, Any]) -> None:
        await api.call("POST", "/api/v1/nodes", {k: v for k, v in manifest.items() if k != "status"})
        await api.call(
            "PATCH",
            f"/api/v1/nodes/{manifest['metadata']['name']}/status",
            {"status": manifest["status"]},
            content_type="application/strategic-merge-patch+json",
        )

    await gather_limited([lambda m=m: node(m) for m in nodes], 32)
    devices = [obj for obj in objects if obj["kind"] != "Node"]
    plurals = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}
    await gather_limited([lambda o=o: api.call("POST", f"{RESOURCE}/{plurals[o['kind']]}", o) for o in devices], 32)
    await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
    if dra:
        await api.call("POST", f"{RESOURCE}/namespaces/bench/resourceclaimtemplates", ONE_DEVICE)
    await gather_limited([lambda p=p: api.call("POST", "/api/v1/namespaces/bench/pods", p) for p in pods], 32)


#: What each pod of the DRA scenario claims: one device of NVIDIA's driver.
ONE_DEVICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": "bench"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
}


async def claims_made(api: Api, count: int) -> None:
    """Wait until the resourceclaim controller has made every pod's claim and named it in the pod's status."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        listing = await api.call("GET", "/api/v1/namespaces/bench/pods")
        named = sum(1 for item in listing["items"] if (item.get("status") or {}).get("resourceClaimStatuses"))
        if named == count:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the resourceclaim controller named {named} of {count} claims in 300 s")


async def check_claims(api: Api) -> None:
    """Every claim allocated on its pod's node and reserved for it, no device given twice."""
    pods = {item["metadata"]["uid"]: item for item in (await api.call("GET", "/api/v1/namespaces/bench/pods"))["items"]}
    claims = (await api.call("GET", f"{RESOURCE}/namespaces/bench/resourceclaims"))["items"]
    given: set[tuple[str, str]] = set()
    for claim in claims:
        status = claim.get("status") or {}
        if not status.get("allocation") or len(status.get("reservedFor") or []) != 1:
            raise RuntimeError(f"claim {claim['metadata']['name']} is not allocated for one pod: {status}")
        (owner,) = status["reservedFor"]
        node = pods[owner["uid"]]["spec"].get("nodeName")
        if node is None:
            bound = sum(1 for item in pods.values() if item["spec"].get("nodeName"))
            raise RuntimeError(
                f"claim {claim['metadata']['name']} is reserved for {owner['name']}, which is not bound "
                f"({bound} of {len(pods)} pods are)"
            )
        results = status["allocation"]["devices"]["results"]
        if {result["pool"] for result in results} != {node}:
            raise RuntimeError(f"claim {claim['metadata']['name']} is allocated off its pod's node {node}")
        given |= {(result["pool"], result["device"]) for result in results}
    if len(given) != len(claims):
        raise RuntimeError(f"{len(claims)} claims were given {len(given)} devices: one device twice")


def pod(name: str, scheduler: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


def dra_pod(name: str, scheduler: str) -> dict[str, Any]:
    """A plain pod that claims one device through :data:`ONE_DEVICE`, and asks no GPUs of its node."""
    made = pod(name, scheduler)
    container = made["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1", "memory": "4Gi"}, "claims": [{"name": "gpu"}]}
    made["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return made


def dra_pods(scheduler: str, count: int = DRA_PODS) -> list[dict[str, Any]]:
    return [dra_pod(f"p{i:04d}", scheduler) for i in range(count)]


def gang_pods(count: int = PODS) -> list[dict[str, Any]]:
    return [
        pod(f"g{i // GANG:03d}-{i % GANG}", "phalanx", {f"{PFN}-name": f"g{i // GANG:03d}", f"{PFN}-size": str(GANG)})
        for i in range(count)
    ]


def plain_pods(scheduler: str, count: int = PODS) -> list[dict[str, Any]]:
    return [pod(f"p{i:04d}", scheduler) for i in range(count)]


async def watch_pods(api: Api, version: str, started: asyncio.Event, seen: Callable[[dict[str, Any]], bool]) -> None:
    """Watch the benchmark's pods from ``version``, calling ``seen`` with each changed pod until it returns
    True. A watch the server ends is started again from the last version seen."""
    url = api.plane.url + "/api/v1/namespaces/bench/pods"
    while True:
        params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "600", "allowWatchBookmarks": "true"}
        async with api.session.get(url, params=params, headers=api.headers, ssl=api.ssl, timeout=None) as answer:
            started.set()
            async for line in answer.content:
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise RuntimeError(f"the watch of the benchmark's pods failed: {obj}")
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK" and seen(obj):
                    return


def cpu_seconds(pid: int) -> float | None:
    """CPU time a process has used (user and system, from /proc); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def watch_binds(
    api: Api, version: str, count: int, started: asyncio.Event, mark: Callable[[], None] = lambda: None
) -> list[float]:
    """Monotonic times at which the watch saw each pod get its node, until ``count`` have; ``mark`` is called
    at the first bind and at the last."""
    bound: dict[str, float] = {}

    def seen(obj: dict[str, Any]) -> bool:
        name = obj["metadata"]["name"]
        if (obj.get("spec") or {}).get("nodeName") and name not in bound:
            bound[name] = time.monotonic()
            if len(bound) in (1, count):
                mark()
        return len(bound) == count

    await watch_pods(api, version, started, seen)
    return sorted(bound.values())


@asynccontextmanager
async def control_plane(
    assets: Path, pods: list[dict[str, Any]], *, dra: bool = False
) -> AsyncIterator[tuple[ControlPlane, Api, str]]:
    """A fresh server with the nodes and ``pods`` created (with ``dra``, their devices and every pod's claim
    too); yields it, an admin client and the list version."""
    with tempfile.TemporaryDirectory(prefix="bench-real-") as folder:
        controllers = ("resourceclaim-controller",) if dra else ()
        plane = ControlPlane.start(assets, Path(folder) / "plane", audit=False, controllers=controllers)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128)) as session:
                api = Api(plane, session)
                await prepare(api, pods, dra=dra)
                if dra:
                    await claims_made(api, len(pods))
                listing = await api.call("GET", "/api/v1/namespaces/bench/pods?limit=1")
                yield plane, api, str(listing["metadata"]["resourceVersion"])
        finally:
            plane.stop()


@dataclass
class Binder:
    """Whatever binds the pods in one measurement: ``ended`` completes when it stops by itself (a process
    that exits, or the bare client once every bind is sent), ``stop`` ends it, ``log`` is where it writes."""

    ended: asyncio.Task[Any]
    stop: Callable[[], Any]
    log: Path | None = None
    pid: int | None = None  # a process's, whose CPU time can be read


async def measure(
    name: str,
    assets: Path,
    pods: list[dict[str, Any]],
    start: Callable[[ControlPlane, Api, Path], Any],
    *,
    dra: bool = False,
) -> Figure:
    """Create ``pods``, then call ``start`` (which starts whatever binds them and returns its
    :class:`Binder`), and time the binds as a watch sees them. A binder that fails or exits before the last
    bind ends the measurement with what it said, instead of a wait for binds that will not come."""
    async with control_plane(assets, pods, dra=dra) as (plane, api, version):
        watching = asyncio.Event()
        processes = {server: plane.processes[server].pid for server in ("kube-apiserver", "etcd")}
        processes["benchmark (its watch; the bare client's binds)"] = os.getpid()
        readings: list[dict[str, float]] = []

        def mark() -> None:
            seconds = {process: cpu_seconds(pid) for process, pid in processes.items()}
            readings.append({process: used for process, used in seconds.items() if used is not None})

        watcher = asyncio.create_task(watch_binds(api, version, len(pods), watching, mark))
        await watching.wait()
        with tempfile.TemporaryDirectory(prefix="bench-run-") as folder:
            began = time.monotonic()
            binder: Binder = await start(plane, api, Path(folder))
            if binder.pid is not None:
                processes[name] = binder.pid
            try:
                await asyncio.wait({watcher, binder.ended}, timeout=900, return_when=asyncio.FIRST_COMPLETED)
                if not watcher.done():
                    if binder.ended.done():
                        code = binder.ended.result()  # the bare client's error, if it had one
                        if binder.log is not None and code != 0:  # a process that failed before the last bind
                            tail = binder.log.read_text(errors="replace")[-2000:]
                            raise RuntimeError(f"{name} exited before binding every pod; its log ends:\n{tail}")
                    # Otherwise it ended well (a client's last answer can come before the watch shows the bind):
                    times = await asyncio.wait_for(watcher, timeout=60)
                times = watcher.result()
            finally:
                watcher.cancel()
                await binder.stop()
            if dra:
                await check_claims(api)
    window = times[-1] - times[0]
    both = [process for process in readings[0] if process in readings[-1]] if readings else []
    cores = {process: (readings[-1][process] - readings[0][process]) / window for process in both}
    return Figure(name, len(pods), window, times[-1] - began, cores if window > 0 and len(readings) == 2 else {})


def process_binder(command: list[str], log_path: Path, **options: Any) -> Binder:
    """A scheduler process, its output in ``log_path``, killed with the benchmark if that dies."""
    log = log_path.open("wb")
    process = subprocess.Popen(dying_with_parent(command), stdout=log, stderr=subprocess.STDOUT, **options)

    async def stop() -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait)
        log.close()

    return Binder(asyncio.create_task(asyncio.to_thread(process.wait)), stop, log_path, process.pid)


async def start_phalanx(plane: ControlPlane, api: Api, folder: Path, *, profile: Path | None = None) -> Binder:
    kubeconfig = plane.kubeconfig(folder / "kubeconfig")
    entry = [str(ROOT / "scripts" / "profiled.py"), str(profile)] if profile else ["-m", "scheduler.frontends.cli"]
    command = [
        sys.executable, *entry, "run", "--kubeconfig", str(kubeconfig),
        "--config", str(ROOT / "manifests" / "phalanx.yaml"), "--no-leader-elect",
        "--metrics-address", f"127.0.0.1:{free_port()}", "--log-level", "warning",
        "--set", f"binding.writesPerSecond={CLIENT_QPS}", "--set", f"binding.burst={CLIENT_QPS}",
    ]  # fmt: skip
    return process_binder(command, folder / "phalanx.log", cwd=ROOT)


async def start_kube_scheduler(plane: ControlPlane, api: Api, folder: Path) -> Binder:
    kubeconfig = plane.kubeconfig(folder / "kubeconfig")
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": CLIENT_QPS, "burst": CLIENT_QPS},
        "leaderElection": {"leaderElect": False},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    assets = assets_dir()
    assert assets is not None
    command = [str(assets / "kube-scheduler"), f"--config={folder / 'config.yaml'}", "--secure-port=0", "-v=0"]
    return process_binder(command, folder / "kube-scheduler.log")


async def start_raw_binder(plane: ControlPlane, api: Api, folder: Path) -> Binder:
    """Bind every pod to the nodes in turn (8 a node), 64 requests in flight: no scheduling, no Events."""
    nodes = [n["metadata"]["name"] for n in ClusterShape.parse(NODES).node_manifests()]
    listing = await api.call("GET", "/api/v1/namespaces/bench/pods")
    count = len(listing["items"])

    def bind(i: int) -> Callable[[], Any]:
        name = f"p{i:04d}"
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i // GANG]}}  # fmt: skip
        return lambda: api.call("POST", f"/api/v1/namespaces/bench/pods/{name}/binding", body)

    task = asyncio.create_task(gather_limited([bind(i) for i in range(count)], 64))

    async def stop() -> None:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    return Binder(task, stop)


def start_client(client: str, cpu: list[float]) -> Callable[[ControlPlane, Api, Path], Any]:
    """Start a bare binding client of ``bindclients.py``; once it is done, its CPU per bind goes to ``cpu``."""

    async def start(plane: ControlPlane, api: Api, folder: Path) -> Binder:
        kubeconfig = plane.kubeconfig(folder / "kubeconfig")
        command = [sys.executable, str(ROOT / "scripts" / "bindclients.py"), client, str(kubeconfig)]
        binder = process_binder(command, folder / "client.log", cwd=ROOT)
        terminate = binder.stop

        async def stop() -> None:  # the last answers are still on their way when the watch sees the last bind
            await asyncio.wait({binder.ended}, timeout=60)
            await terminate()
            said = binder.log.read_text(errors="replace") if binder.log else ""
            cpu.extend(float(line.split("=", 1)[1]) for line in said.splitlines() if line.startswith("cpu_ms"))

        return Binder(binder.ended, stop, binder.log, binder.pid)

    return start


async def clients(repeat: int, *, pods: int = PODS) -> dict[str, Any]:
    """``bench_e2e.py --real --clients``: the bare clients of ``bindclients.py``, interleaved runs."""
    import bindclients  # noqa: PLC0415

    assets = assets_dir()
    if assets is None:
        raise SystemExit(f"bench_e2e.py --real --clients: KUBEBUILDER_ASSETS is not set; {HOW_TO_GET}")
    measured = [client for client in bindclients.CLIENTS if bindclients.available(client)]
    runs: dict[str, list[Figure]] = {client: [] for client in measured}
    cpu: dict[str, list[float]] = {client: [] for client in measured}
    for _ in range(repeat):
        for client in measured:
            figure = await measure(client, assets, plain_pods("nobody", pods), start_client(client, cpu[client]))
            runs[client].append(figure)
    result: dict[str, Any] = {}
    for client in bindclients.CLIENTS:
        if client not in runs:
            result[client] = None
            continue
        rates = sorted(figure.pods_per_s for figure in runs[client])
        result[client] = {
            "pods": pods,
            "pods_per_s": round(rates[len(rates) // 2], 1),
            "runs_pods_per_s": [round(figure.pods_per_s, 1) for figure in runs[client]],
            "cpu_ms_per_bind": round(statistics.median(cpu[client]), 3) if cpu[client] else None,
        }
    return result


#: Where a scheduler's CPU goes, by the task that spends it (cProfile's cumulative time of each, which for
#: a coroutine counts only the time it runs, not the time it waits).
ACTIVITIES = {
    "binding (pods/binding requests)": "binding.py:{}(_bind_one)",
    "allocating claims (PreBind)": "binding.py:{}(_allocate_claims)",
    "placing gangs (scheduling cycles)": "cycle.py:{}(once)",
    "folding cluster news into the queue": "loop.py:{}(sync)",
    "watch events (informers)": "informers.py:{}(_watch)",
    "first lists (informers)": "informers.py:{}(_list)",
    "Events and status (reporter)": "reporting.py:{}(flush)",
}


def profile_summary(path: Path) -> str:
    import pstats  # noqa: PLC0415

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = max(cumulative for (_, _, _, cumulative, _) in stats.values())
    lines = [f"  CPU of the whole process (start-up, imports and all): {total:.2f} s"]
    for label, pattern in ACTIVITIES.items():
        prefix, _, name = pattern.partition("{}")
        spent = sum(
            cumulative
            for (filename, line, function), (_, _, _, cumulative, _) in stats.items()
            if filename.endswith(prefix.rstrip(":")) and f"({function})" == name.lstrip(":")
        )
        lines.append(f"  {label:<40} {spent:6.2f} s  {spent / total:4.0%}")
    return "\n".join(lines)


async def run(repeat: int, profile: bool, *, pods: int = PODS, dra: bool = False) -> dict[str, Any]:
    assets = assets_dir()
    if assets is None:
        raise SystemExit(f"bench_e2e.py --real: KUBEBUILDER_ASSETS is not set; {HOW_TO_GET}")
    compare = os.access(assets / "kube-scheduler", os.X_OK)  # setup-envtest's directories have none
    if dra and not compare:
        raise SystemExit("bench_e2e.py --real --dra: KUBEBUILDER_ASSETS has no kube-scheduler to compare with")
    runs: dict[str, list[Figure]] = {"phalanx": [], "kube-scheduler": [], "raw binding": []}
    for _ in range(repeat):
        if dra:  # binding without allocating the claims would measure nothing DRA does: no raw figure
            runs["kube-scheduler"].append(
                await measure(
                    "kube-scheduler", assets, dra_pods("default-scheduler", pods), start_kube_scheduler, dra=True
                )
            )
            runs["phalanx"].append(await measure("phalanx", assets, dra_pods("phalanx", pods), start_phalanx, dra=True))
            continue
        runs["raw binding"].append(await measure("raw binding", assets, plain_pods("nobody", pods), start_raw_binder))
        if compare:
            runs["kube-scheduler"].append(
                await measure("kube-scheduler", assets, plain_pods("default-scheduler", pods), start_kube_scheduler)
            )
        runs["phalanx"].append(await measure("phalanx", assets, gang_pods(pods), start_phalanx))
    result: dict[str, Any] = {"kube-scheduler": None} if not compare else {}
    for name, figures in runs.items():
        if not figures:
            continue
        ordered = sorted(figures, key=lambda f: f.pods_per_s)
        middle = ordered[len(ordered) // 2]
        result[name] = {
            "pods": middle.pods,
            "pods_per_s": round(middle.pods_per_s, 1),
            "window_s": round(middle.window_s, 3),
            "start_to_last_bind_s": round(middle.total_s, 3),
            "runs_pods_per_s": [round(f.pods_per_s, 1) for f in figures],
            "cores_in_window": {process: round(cores, 2) for process, cores in middle.cores.items()},
        }
    if profile:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "phalanx.prof"

            async def profiled(plane: ControlPlane, api: Api, run_folder: Path) -> Binder:
                return await start_phalanx(plane, api, run_folder, profile=path)

            profiled_pods = dra_pods("phalanx", pods) if dra else gang_pods(pods)
            await measure("phalanx (profiled)", assets, profiled_pods, profiled, dra=dra)
            result["profile"] = profile_summary(path)
    return result
