#!/usr/bin/env python3
"""End-to-end scheduler benchmark (issue 5): pods per second from creation to bind, and memory.

  sim_8pod_5k      SimCluster in process, 5,120 nodes (8 GPUs, 32 per rack, 8 racks per block); 2,000 PFN
                   gangs of 8 one-GPU pods created at once; pods/s from the first creation to the last bind.
                   Target >= 2,000 pods/s.
  http_8pod_1k     SimCluster over HTTP in a separate process, 1,024 nodes; 500 gangs of 8 pods created
                   through the API by a third process; pods/s from the start of creation to the last bind.
                   Target >= 500 pods/s.
  bind_fanout_1k   one gang of 1,024 eight-GPU pods on 1,024 nodes over HTTP: seconds from the scheduler
                   being ready (pods already created) to the last bind.
  rss_20k_100k     peak resident memory of a `phalanx run` process watching 20,480 nodes and 100,000 bound
                   pods (served over HTTP by a separate process), once ready. Target <= 600 MB.

With --real, instead: Phalanx, the reference kube-scheduler and a bare binding client side by side on a
real kube-apiserver from KUBEBUILDER_ASSETS (see scripts/realbench.py). Targets: Phalanx's gang pods/s at
least 1.5x kube-scheduler's plain pods/s, and at least 80% of the raw binding rate.

The client-side write limit is raised to 20,000/s for the throughput scenarios, as upstream's scheduler
benchmarks raise theirs (the default 500/s would cap any figure at 500 pods/s by design). Events and
conditions are written as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml
from benchinfo import machine
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.app import Phalanx
from scheduler.logs import configure
from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.sim import ClusterShape, Store, load
from scheduler.ports.sim.adapter import SimCluster
from scheduler.settings import BindingSettings, LeaderSettings, ReportingSettings, ServerSettings, Settings
from scheduler.simulation.oracle import InvariantMonitor

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
SETTINGS = Settings(
    levels=LEVELS,
    leader_election=LeaderSettings(enabled=False, identity="bench"),
    binding=BindingSettings(writes_per_second=20_000, burst=20_000),
    reporting=ReportingSettings(status_interval_seconds=1.0),
)


def shape(nodes: int) -> ClusterShape:
    racks = max(1, nodes // 32)
    return ClusterShape(blocks=max(1, racks // 8), racks=min(8, racks), nodes=min(32, nodes))


def gang_pod(gang: int, member: int, size: int, gpus: int) -> dict[str, Any]:
    prefix = "gang-scheduling.preferred.jp/gang"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"g{gang:05d}-{member:04d}",
            "namespace": "bench",
            "annotations": {f"{prefix}-name": f"g{gang:05d}", f"{prefix}-size": str(size)},
        },
        "spec": {
            "schedulerName": "phalanx",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def bound_count(app: Phalanx) -> float:
    return app.metrics.registry.value("phalanx_api_writes_total", {"kind": "bind"}) or 0.0


async def wait_for(check: Any, timeout: float) -> None:
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.02)


@asynccontextmanager
async def running(app: Phalanx):  # type: ignore[no-untyped-def]
    async with anyio.create_task_group() as group:
        await group.start(app.run)
        if OPTIONS.watched:
            group.start_soon(watch, app)
        yield app
        group.cancel_scope.cancel()


#: ``--watched``: a browser's worth of polling of the live view during every run (each Phalanx serves it).
OPTIONS = argparse.Namespace(watched=False, asked=[])


def built(settings: Settings, port: Any) -> Phalanx:
    """The Phalanx a run measures: without its server, unless the live view is watched."""
    if not OPTIONS.watched:
        return Phalanx(settings, port, serve=False)
    return Phalanx(replace(settings, server=ServerSettings(address="127.0.0.1:0")), port)


async def watch(app: Phalanx) -> None:
    """Ask the live view for the cluster every second, as its page does every two (the picture is taken at
    most every ``server.viewIntervalSeconds``, 2 s, whoever asks)."""
    while app.health is None or not app.health.url:
        await anyio.sleep(0.05)
    async with aiohttp.ClientSession(base_url=app.health.url) as http:
        while True:
            asked = time.perf_counter()
            async with http.get("/api/cluster") as answer:
                await answer.read()
            OPTIONS.asked.append(time.perf_counter() - asked)
            await anyio.sleep(1.0)


def viewed(result: dict[str, float], app: Phalanx) -> dict[str, float]:
    """``result`` with, when watched, how often the view answered, its slowest answer (ms: it waits for the
    loop's batch of cycles) and the longest a picture took to take (ms of the loop's own time)."""
    if OPTIONS.watched and OPTIONS.asked:
        result["view_answers"] = len(OPTIONS.asked)
        result["view_answer_max_ms"] = max(OPTIONS.asked) * 1000
        result["view_picture_max_ms"] = app.pictures.longest_seconds * 1000
    OPTIONS.asked = []
    return result


async def sim_8pod(n_nodes: int, n_gangs: int) -> dict[str, float]:
    store = Store(history=max(50_000, n_gangs * 40))
    load(store, shape(n_nodes).node_manifests())
    store.ensure_namespace("bench")
    app = built(SETTINGS, SimCluster(store))
    pods = resource = store.resource("v1", "Pod")
    async with running(app):
        start = time.perf_counter()
        for gang in range(n_gangs):
            for member in range(8):
                store.create(resource, "bench", gang_pod(gang, member, 8, 1))
            if gang % 64 == 0:
                await anyio.sleep(0)
        await wait_for(lambda: bound_count(app) >= 8 * n_gangs, timeout=600)
        elapsed = time.perf_counter() - start
    del pods
    # The same invariant checker as the tests', over the final state (after the clock stopped: watching
    # every change would slow the run it measures): no node over-committed, no gang below its minimum.
    monitor = InvariantMonitor(store, gang_settings=SETTINGS.gang_settings())
    violations = monitor.check_nodes() + monitor.check_gangs()
    return viewed(
        {
            "nodes": n_nodes,
            "pods": 8 * n_gangs,
            "seconds": elapsed,
            "pods_per_s": 8 * n_gangs / elapsed,
            "invariant_violations": len(violations),
        },
        app,
    )


@asynccontextmanager
async def sim_server(*args: str, command: tuple[str, ...] = ("-m", "scheduler.ports.sim.apiserver")):  # type: ignore[no-untyped-def]
    process = subprocess.Popen([sys.executable, *command, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = await anyio.to_thread.run_sync(process.stdout.readline)
        if not line.startswith("serving "):
            raise RuntimeError(f"the SimCluster server did not start: {line!r}")
        yield line.split()[1], process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(process.wait)


def shape_arg(n_nodes: int) -> str:
    found = shape(n_nodes)
    return f"blocks={found.blocks},racks={found.racks},nodes={found.nodes},gpus=8"


async def create_gangs(url: str, n_gangs: int) -> None:
    """The pod creator's process: wait for "go" on stdin, then create the gangs' pods, 32 requests at a time."""
    async with ApiClient(Configuration(host=url)) as api:
        core = client.CoreV1Api(api)
        slots = anyio.Semaphore(32)

        async def create(gang: int, member: int) -> None:
            async with slots:
                response = await core.create_namespaced_pod(
                    "bench", gang_pod(gang, member, 8, 1), _preload_content=False
                )
                response.release()

        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        async with anyio.create_task_group() as group:
            for gang in range(n_gangs):
                for member in range(8):
                    group.start_soon(create, gang, member)


async def http_8pod(n_nodes: int, n_gangs: int) -> dict[str, float]:
    # The pods are created by a separate process, as controllers and kubectl create them in a cluster:
    # the figure is the scheduler's, not that of a client sharing its core.
    async with sim_server("--shape", shape_arg(n_nodes)) as (url, _), ApiClient(Configuration(host=url)) as api:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
        creator = subprocess.Popen(
            [sys.executable, __file__, "--create-gangs", url, str(n_gangs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert creator.stdin is not None and creator.stdout is not None
        try:
            if (await anyio.to_thread.run_sync(creator.stdout.readline)).strip() != "ready":
                raise RuntimeError("the pod creator did not start")
            app = built(SETTINGS, KubeCluster(client_for(url)))
            async with running(app):
                start = time.perf_counter()
                creator.stdin.write("go\n")
                creator.stdin.flush()
                await wait_for(lambda: bound_count(app) >= 8 * n_gangs, timeout=600)
                elapsed = time.perf_counter() - start
            await app.port.close()  # type: ignore[attr-defined]
        finally:
            await anyio.to_thread.run_sync(creator.wait)
    return viewed({"nodes": n_nodes, "pods": 8 * n_gangs, "seconds": elapsed, "pods_per_s": 8 * n_gangs / elapsed}, app)


async def bind_fanout(n_nodes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "gang.yaml"
        manifest.write_text(yaml.safe_dump_all([gang_pod(0, i, n_nodes, 8) for i in range(n_nodes)]))
        async with sim_server("--shape", shape_arg(n_nodes), "--manifests", str(manifest)) as (url, _):
            app = built(SETTINGS, KubeCluster(client_for(url)))
            async with running(app):
                start = time.perf_counter()
                await wait_for(lambda: bound_count(app) >= n_nodes, timeout=600)
                elapsed = time.perf_counter() - start
            await app.port.close()  # type: ignore[attr-defined]
    return viewed({"nodes": n_nodes, "pods": n_nodes, "seconds": elapsed, "pods_per_s": n_nodes / elapsed}, app)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def peak_rss(n_nodes: int, n_pods: int) -> dict[str, float]:
    async with sim_server("--shape", shape_arg(n_nodes), "--bound-pods", str(n_pods)) as (url, _):
        ready, _, peak_mb, _ = await phalanx_ready(url)
    return {"nodes": n_nodes, "pods": n_pods, "seconds": ready, "peak_rss_mb": peak_mb}


async def phalanx_ready(url: str) -> tuple[float, float, float, float]:
    """Start ``phalanx run`` against the server at ``url``; seconds until /readyz answers 200 (every watched
    kind listed), its resident memory then and at its peak, in MB, and the CPU seconds it had used."""
    with tempfile.TemporaryDirectory() as folder:
        kubeconfig = Path(folder) / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "sim",
                    "clusters": [{"name": "sim", "cluster": {"server": url}}],
                    "users": [{"name": "sim", "user": {}}],
                    "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
                }
            )
        )
        port = free_port()
        command = [
            sys.executable, "-m", "scheduler.frontends.cli", "run", "--kubeconfig", str(kubeconfig),
            "--no-leader-elect", "--metrics-address", f"127.0.0.1:{port}", "--log-level", "warning",
        ]  # fmt: skip
        process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        start = time.perf_counter()
        try:
            async with aiohttp.ClientSession() as session:
                with anyio.fail_after(600):
                    while True:
                        try:
                            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                                if response.status == 200:
                                    break
                        except aiohttp.ClientError:
                            pass
                        await anyio.sleep(0.2)
            ready = time.perf_counter() - start
            with open(f"/proc/{process.pid}/status") as status:
                lines = {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith("Vm")}
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / 100.0  # user and system time, in ticks of 1/100 s
        finally:
            process.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(process.wait)
    return ready, lines["VmRSS"] / 1024, lines["VmHWM"] / 1024, cpu


async def scale_http(n_nodes: int) -> dict[str, float]:
    """``phalanx run`` against the emulator's server (another process) holding a scale cluster."""
    import scalecluster  # noqa: PLC0415

    script = str(Path(__file__).with_name("scalecluster.py"))
    async with sim_server("serve", str(n_nodes), command=(script,)) as (url, _):
        ready, rss_mb, peak_mb, cpu = await phalanx_ready(url)
    pods = scalecluster.pods_for(n_nodes)
    return {"nodes": n_nodes, "pods": pods, "ready_s": ready, "rss_mb": rss_mb, "peak_rss_mb": peak_mb, "cpu_s": cpu}


async def scale_in_process(n_nodes: int) -> dict[str, float]:
    """Phalanx and the emulator in one process: the same lists without HTTP or JSON."""
    import scalecluster  # noqa: PLC0415

    store = scalecluster.store_of(n_nodes)
    app = Phalanx(SETTINGS, SimCluster(store), serve=False)
    start = time.perf_counter()
    async with running(app):
        await wait_for(lambda: app.ready()[0], timeout=600)
        elapsed = time.perf_counter() - start
    return {"nodes": n_nodes, "pods": scalecluster.pods_for(n_nodes), "ready_s": elapsed}


async def scale(repeat: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for n_nodes in sizes:
        result[f"http_{n_nodes}"] = await median(repeat, lambda n=n_nodes: scale_http(n))
        result[f"in_process_{n_nodes}"] = await median(repeat, lambda n=n_nodes: scale_in_process(n))
    return result


async def median(repeat: int, run: Any) -> dict[str, float]:
    runs = [await run() for _ in range(repeat)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    return {
        "sim_8pod_5k": await median(args.repeat, lambda: sim_8pod(1280 if quick else 5120, 250 if quick else 2000)),
        "http_8pod_1k": await median(args.repeat, lambda: http_8pod(256 if quick else 1024, 64 if quick else 500)),
        "bind_fanout_1k": await median(args.repeat, lambda: bind_fanout(256 if quick else 1024)),
        "rss_20k_100k": await median(1, lambda: peak_rss(2048 if quick else 20480, 10_000 if quick else 100_000)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true", help="smaller clusters, one run each (under a minute)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per scenario (default 3, quick 1)")
    parser.add_argument("--real", action="store_true", help="Phalanx vs kube-scheduler on a real kube-apiserver")
    parser.add_argument("--profile", action="store_true", help="with --real: one more Phalanx run under cProfile")
    dra_help = "with --real: pods that each claim one device through a template (128 DRA nodes)"
    parser.add_argument("--dra", action="store_true", help=dra_help)
    gangs_help = "with --real: v1alpha2 gangs, Phalanx against kube-scheduler 1.36's own gang scheduling"
    parser.add_argument("--upstream-gangs", action="store_true", help=gangs_help)
    only_help = "with --upstream-gangs: only these scenarios (burst, stream, saturation)"
    parser.add_argument("--only", nargs="+", choices=("burst", "stream", "saturation"), default=(), help=only_help)
    clients_help = "with --real: bare binding clients compared (aiohttp, Phalanx's port, httpx over HTTP/2)"
    parser.add_argument("--clients", action="store_true", help=clients_help)
    scale_help = "65,536 nodes and 500,000 running pods (and 5,120, 20,480): memory and time to ready"
    parser.add_argument("--scale", action="store_true", help=scale_help)
    watched_help = "the live view served and asked for the cluster every second during each run"
    parser.add_argument("--watched", action="store_true", help=watched_help)
    parser.add_argument("--create-gangs", nargs=2, metavar=("URL", "GANGS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    OPTIONS.watched = args.watched
    if args.create_gangs:
        asyncio.run(create_gangs(args.create_gangs[0], int(args.create_gangs[1])))
        return 0
    args.repeat = args.repeat or (1 if args.quick else 3)
    log = sys.stderr if args.json else sys.stdout
    print(f"command: scripts/bench_e2e.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip(), file=log)
    print(f"machine: {machine()}", file=log)
    print(f"runs per scenario: {args.repeat} (figures are medians)\n", file=log)
    configure("error")
    if args.real:
        return real(args)
    if args.scale:
        return scale_report(args)
    result = asyncio.run(main_async(args))
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    targets = {
        "sim_8pod_5k": (">= 2000 pods/s", lambda r: r["pods_per_s"] >= 2000 and not r["invariant_violations"]),
        "http_8pod_1k": (">= 500 pods/s", lambda r: r["pods_per_s"] >= 500),
        "rss_20k_100k": ("<= 600 MB", lambda r: r["peak_rss_mb"] <= 600),
    }
    print(f"{'scenario':<16} {'nodes':>6} {'pods':>7} {'seconds':>8} {'pods/s':>8}  result")
    for name, row in result.items():
        if name == "machine":
            continue
        target, holds = targets.get(name, ("", None))
        verdict = f"{target}: {'met' if holds(row) else 'MISSED'}" if holds else ""
        extra = f"peak RSS {row['peak_rss_mb']:.0f} MB" if "peak_rss_mb" in row else f"{row['pods_per_s']:>8.0f}"
        print(f"{name:<16} {row['nodes']:>6.0f} {row['pods']:>7.0f} {row['seconds']:>8.2f} {extra}  {verdict}")
        if "invariant_violations" in row:
            print(f"{'':<16} invariant violations after the run: {row['invariant_violations']:.0f}")
    return 0


def scale_report(args: argparse.Namespace) -> int:
    import scalecluster  # noqa: PLC0415

    sizes = scalecluster.SIZES[:2] if args.quick else scalecluster.SIZES
    result = asyncio.run(scale(args.repeat, sizes))
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(scalecluster.__doc__.split("\n\n")[1])
    print(f"\n{'nodes':>7} {'pods':>8} {'ready s (HTTP)':>15} {'its CPU s':>10} {'RSS MB':>7} {'peak MB':>8} "
          f"{'ready s (in process)':>21}")  # fmt: skip
    for n_nodes in sizes:
        http, local = result[f"http_{n_nodes}"], result[f"in_process_{n_nodes}"]
        print(
            f"{n_nodes:>7} {http['pods']:>8.0f} {http['ready_s']:>15.1f} {http['cpu_s']:>10.1f} {http['rss_mb']:>7.0f} "
            f"{http['peak_rss_mb']:>8.0f} {local['ready_s']:>21.1f}"
        )
    top = result[f"http_{sizes[-1]}"]
    print(f"goals at {sizes[-1]:,} nodes: RSS once ready <= 1,500 MB ({top['rss_mb']:.0f}), ready <= 60 s "
          f"({top['ready_s']:.1f})")  # fmt: skip
    return 0


def real(args: argparse.Namespace) -> int:
    import realbench  # noqa: PLC0415  (imports the test suite's control plane: only for --real)

    if args.upstream_gangs:
        return upstream_gangs(args)
    if args.clients:
        return binding_clients(args)

    full = realbench.DRA_PODS if args.dra else realbench.PODS
    pods = realbench.QUICK_PODS if args.quick else full
    result = asyncio.run(realbench.run(args.repeat, args.profile, pods=pods, dra=args.dra))
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if args.dra:
        print(f"server: kube-apiserver v1.36 from KUBEBUILDER_ASSETS with kube-controller-manager's resourceclaim "
              f"controller, {realbench.DRA_NODES} (128 nodes of 8 devices), audit off; every pod claims one device "
              "through a ResourceClaimTemplate")  # fmt: skip
    else:
        print(
            f"server: kube-apiserver v1.36 from KUBEBUILDER_ASSETS, {realbench.NODES} (256 nodes of 8 GPUs), audit off"
        )
    if args.quick:
        print(f"--quick: {pods} pods instead of {full}; the goals are for the full size")
    print(f"{'':<16} {'pods':>5} {'pods/s':>8} {'bind window s':>14} {'start to last bind s':>21}  runs (pods/s)")
    for name in ("phalanx", "kube-scheduler") if args.dra else ("phalanx", "kube-scheduler", "raw binding"):
        row = result[name]
        if row is None:
            print(f"{name:<16} not measured: KUBEBUILDER_ASSETS has no kube-scheduler binary")
            continue
        print(
            f"{name:<16} {row['pods']:>5} {row['pods_per_s']:>8.0f} {row['window_s']:>14.2f} "
            f"{row['start_to_last_bind_s']:>21.2f}  {row['runs_pods_per_s']}"
        )
    print(f"cores used over the bind window of the median run ({os.cpu_count()} on this machine):")
    for name in ("phalanx", "kube-scheduler") if args.dra else ("phalanx", "kube-scheduler", "raw binding"):
        if result[name] is not None:
            cores = result[name]["cores_in_window"]
            split = ", ".join(f"{process} {used:.2f}" for process, used in cores.items())
            print(f"  {name:<16} {sum(cores.values()):.2f}: {split}")
    phalanx = result["phalanx"]["pods_per_s"]
    if result["kube-scheduler"] is not None:
        versus = phalanx / result["kube-scheduler"]["pods_per_s"]
        print(f"phalanx / kube-scheduler: {versus:.2f}x (target >= 1.5x: {'met' if versus >= 1.5 else 'MISSED'})")
        whole = result["kube-scheduler"]["start_to_last_bind_s"] / result["phalanx"]["start_to_last_bind_s"]
        print(f"phalanx / kube-scheduler, start to last bind: {whole:.2f}x")
    if not args.dra:
        share = phalanx / result["raw binding"]["pods_per_s"]
        print(f"phalanx / raw binding:    {share:.0%} (target >= 80%: {'met' if share >= 0.8 else 'MISSED'})")
    if "profile" in result:
        print(f"\nwhere Phalanx's CPU goes (one more run under cProfile, which about doubles it):\n{result['profile']}")
    return 0


def binding_clients(args: argparse.Namespace) -> int:
    import realbench  # noqa: PLC0415

    pods = realbench.QUICK_PODS if args.quick else realbench.PODS
    result = asyncio.run(realbench.clients(args.repeat, pods=pods))
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"server: kube-apiserver v1.36 from KUBEBUILDER_ASSETS, {realbench.NODES}, audit off; {pods} plain pods, "
          "one pods/binding POST each, 64 in flight, by a client process of each kind")  # fmt: skip
    print(f"{'client':<20} {'pods/s':>8} {'client CPU ms/bind':>19}  runs (pods/s)")
    for name, row in result.items():
        if name == "machine":
            continue
        if row is None:
            print(f"{name:<20} not measured: pip install 'httpx[http2]' to measure it")
            continue
        cpu = f"{row['cpu_ms_per_bind']:.3f}" if row["cpu_ms_per_bind"] is not None else "-"
        print(f"{name:<20} {row['pods_per_s']:>8.0f} {cpu:>19}  {row['runs_pods_per_s']}")
    return 0


def upstream_gangs(args: argparse.Namespace) -> int:
    import gangbench  # noqa: PLC0415

    result = asyncio.run(gangbench.run(args.repeat, quick=args.quick, only=tuple(args.only)))
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("server: kube-apiserver v1.36 from KUBEBUILDER_ASSETS, 256 nodes of 8 GPUs in 8 racks, a fresh one each run;")
    print(f"kube-scheduler with --feature-gates={gangbench.FEATURE_GATES}")
    if args.quick:
        print("--quick: a tenth of the gangs; the goals are for the full size")
    print("\n".join(gangbench.report(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
