#!/usr/bin/env python3
"""SimCluster benchmark (issue 4): how fast the store takes writes and streams them to watchers.

  in_process   20,480 nodes and 100,000 pods created in the store while two watchers (one on nodes and
               pods each... two on each) consume every event: objects/s and events/s from the first
               create to the last event seen. Target: > 50,000 object events/s, so that the store is
               never what limits the scheduler.
  http_watch   the same objects written into the store while two clients watch them over HTTP
               (newline-delimited JSON through aiohttp, parsed as raw JSON as Phalanx's informers do).
  http_create  pods created with one POST each through kubernetes_asyncio (requests/s).

Server and clients share one event loop and one core here, so the HTTP figures include both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchinfo import machine
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.ports.sim.builders import ClusterShape
from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.store import Store, Watch

WATCHERS = 2


def make_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i:06d}",
            "namespace": "bench",
            "labels": {"app": f"job-{i // 8}"},
            "annotations": {
                "gang-scheduling.preferred.jp/gang-name": f"job-{i // 8}",
                "gang-scheduling.preferred.jp/gang-size": "8",
            },
        },
        "spec": {
            "schedulerName": "phalanx",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {
                        "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


def node_manifests(count: int) -> list[dict[str, Any]]:
    racks = max(1, count // 32)
    return ClusterShape(blocks=max(1, racks // 8), racks=min(8, racks), nodes=32).node_manifests()[:count]


async def write_all(store: Store, nodes: list[dict[str, Any]], pods: int) -> None:
    node_resource, pod_resource = store.resource("v1", "Node"), store.resource("v1", "Pod")
    for i, node in enumerate(nodes):
        store.create(node_resource, None, node)
        if i % 512 == 0:
            await asyncio.sleep(0)  # let the watchers drain as a real server would interleave
    for i in range(pods):
        store.create(pod_resource, "bench", make_pod(i))
        if i % 512 == 0:
            await asyncio.sleep(0)


async def drain_in_process(stream: Watch, expected: int) -> None:
    seen = 0
    while seen < expected:
        event = await stream.next()
        assert event is not None
        seen += 1


async def in_process(n_nodes: int, n_pods: int) -> dict[str, float]:
    store = Store(history=1024)
    store.ensure_namespace("bench")
    nodes = node_manifests(n_nodes)
    watches = [
        store.watch(store.resource("v1", kind), None, resource_version=str(store.resource_version))
        for kind in ("Node", "Pod")
        for _ in range(WATCHERS)
    ]
    start = time.perf_counter()
    drains = [
        asyncio.create_task(drain_in_process(w, len(nodes) if w.resource.kind == "Node" else n_pods)) for w in watches
    ]
    await write_all(store, nodes, n_pods)
    await asyncio.gather(*drains)
    elapsed = time.perf_counter() - start
    objects = len(nodes) + n_pods
    return {
        "objects": objects,
        "seconds": elapsed,
        "objects_per_s": objects / elapsed,
        "events_per_s": WATCHERS * objects / elapsed,
    }


async def drain_http(api: ApiClient, path: str, version: str, expected: int) -> None:
    response = await api.rest_client.pool_manager.get(
        f"{api.configuration.host}{path}?watch=1&resourceVersion={version}&allowWatchBookmarks=true"
    )
    seen = 0
    async for line in response.content:
        if json.loads(line)["type"] != "BOOKMARK":
            seen += 1
            if seen == expected:
                break
    response.release()


async def http_watch(n_nodes: int, n_pods: int) -> dict[str, float]:
    store = Store(history=1024)
    store.ensure_namespace("bench")
    nodes = node_manifests(n_nodes)
    server = SimServer(store)
    url = await server.start()
    async with ApiClient(Configuration(host=url)) as api:
        version = str(store.resource_version)
        start = time.perf_counter()
        drains = [asyncio.create_task(drain_http(api, "/api/v1/nodes", version, len(nodes))) for _ in range(WATCHERS)]
        drains += [asyncio.create_task(drain_http(api, "/api/v1/pods", version, n_pods)) for _ in range(WATCHERS)]
        await asyncio.sleep(0.2)  # the watch requests reach the server before the first write
        start = time.perf_counter()
        await write_all(store, nodes, n_pods)
        await asyncio.gather(*drains)
        elapsed = time.perf_counter() - start
    await server.stop()
    objects = len(nodes) + n_pods
    return {
        "objects": objects,
        "seconds": elapsed,
        "objects_per_s": objects / elapsed,
        "events_per_s": WATCHERS * objects / elapsed,
    }


async def http_create(n_pods: int) -> dict[str, float]:
    store = Store(history=1024)
    store.ensure_namespace("bench")
    server = SimServer(store)
    url = await server.start()
    async with ApiClient(Configuration(host=url)) as api:
        core = client.CoreV1Api(api)
        semaphore = asyncio.Semaphore(32)

        async def create(i: int) -> None:
            async with semaphore:
                await core.create_namespaced_pod("bench", make_pod(i), _preload_content=False)

        start = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(n_pods)))
        elapsed = time.perf_counter() - start
    await server.stop()
    return {"objects": n_pods, "seconds": elapsed, "objects_per_s": n_pods / elapsed}


async def median(repeat: int, run: Callable[[], Awaitable[dict[str, float]]]) -> dict[str, float]:
    runs = [await run() for _ in range(repeat)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    n_nodes, n_pods = (2048, 10_000) if args.quick else (20_480, 100_000)
    creates = 1_000 if args.quick else 5_000
    return {
        "in_process": await median(args.repeat, lambda: in_process(n_nodes, n_pods)),
        "http_watch": await median(args.repeat, lambda: http_watch(n_nodes, n_pods)),
        "http_create": await median(args.repeat, lambda: http_create(creates)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true", help="a tenth of the objects, one run")
    parser.add_argument("--repeat", type=int, default=None, help="runs per scenario (default 3, quick 1)")
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    log = sys.stderr if args.json else sys.stdout
    print(
        f"command: scripts/bench_simcluster.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip(),
        file=log,
    )
    print(f"machine: {machine()}", file=log)
    print(f"runs per scenario: {args.repeat} (figures are medians), {WATCHERS} watchers per resource\n", file=log)
    result = asyncio.run(main_async(args))
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'scenario':<12} {'objects':>8} {'seconds':>8} {'objects/s':>10} {'events/s':>10}")
    for name in ("in_process", "http_watch", "http_create"):
        row = result[name]
        events = f"{row['events_per_s']:>10.0f}" if "events_per_s" in row else f"{'-':>10}"
        print(f"{name:<12} {row['objects']:>8.0f} {row['seconds']:>8.2f} {row['objects_per_s']:>10.0f} {events}")
    verdict = "ok" if result["in_process"]["events_per_s"] > 50_000 else "MISSED"
    print(f"  in_process target > 50,000 object events/s: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
