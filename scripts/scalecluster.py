"""The clusters of the scale benchmarks (``bench_e2e.py --scale``, ``bench_placement.py --scale``).

GKE runs 65,536-node clusters; upstream kube-scheduler's design point is 5,000 nodes and 150,000 pods. Each
cluster here has 8-GPU nodes, 32 to a rack and 8 racks to a block, and 500,000 running pods per 65,536 nodes
(the same density at every size: 39,062 on 5,120 nodes, 156,250 on 20,480):

- every pod is running and asks one GPU, so the cluster is 95% full;
- every 16th block (the 16th, the 32nd, ...) is half empty (4 pods a node), the rest hold 7 or 8 pods a
  node: a gang of 1,000 pods that requires one block fits in one of the half-empty blocks, and nowhere else;
- half the pods are Phalanx's, in PFN gangs of 8 (priority 10): the gang index holds them as it would in
  a cluster where Phalanx schedules half the work; the other half are another scheduler's (priority 0).

``python scripts/scalecluster.py serve NODES [PODS]`` serves such a cluster over HTTP (the emulator's
server, lists paginated as a real server pages them) and prints ``serving <url>`` once it listens.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.ports.sim.builders import ClusterShape, load
from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.store import Store

SIZES = (5_120, 20_480, 65_536)
PODS_PER_NODE = 500_000 / 65_536
NODES_PER_BLOCK = 256
HALF_EMPTY_EVERY = 16
GANG = 8
PFN = "gang-scheduling.preferred.jp/gang"
BLOCK, RACK = "example.com/block", "example.com/rack"


def pods_for(nodes: int) -> int:
    return round(nodes * PODS_PER_NODE)


def shape(nodes: int) -> ClusterShape:
    if nodes % NODES_PER_BLOCK:
        raise ValueError(f"{nodes} nodes: a multiple of {NODES_PER_BLOCK} (a block) is needed")
    return ClusterShape(blocks=nodes // NODES_PER_BLOCK, racks=8, nodes=32, gpus=8)


def pods_per_node(nodes: int, pods: int) -> list[int]:
    """How many pods each node runs: 4 in every 16th block, 7 or 8 elsewhere, ``pods`` in all."""
    half_empty = [(i // NODES_PER_BLOCK) % HALF_EMPTY_EVERY == HALF_EMPTY_EVERY - 1 for i in range(nodes)]
    rest = pods - 4 * sum(half_empty)
    others = nodes - sum(half_empty)
    eights = rest - 7 * others
    if not 0 <= eights <= others:
        raise ValueError(f"{pods} pods do not fit 7 or 8 a node on {others} nodes")
    counts, seen = [], 0
    for empty in half_empty:
        if empty:
            counts.append(4)
        else:
            counts.append(8 if seen < eights else 7)
            seen += 1
    return counts


def running_pods(node_names: list[str], pods: int) -> Iterator[dict[str, Any]]:
    """The running pods, node by node; pods of a Phalanx gang are consecutive, so on one or two nodes."""
    index = 0
    for node, count in zip(node_names, pods_per_node(len(node_names), pods), strict=True):
        for _ in range(count):
            gang = index // GANG
            ours = gang % 2 == 0
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"run-{index:06d}",
                    "namespace": "load",
                    "uid": f"uid-{index:06d}",
                    "labels": {"app": f"svc-{gang % 997}"},
                    "annotations": {f"{PFN}-name": f"g{gang:05d}", f"{PFN}-size": str(GANG)} if ours else {},
                    "creationTimestamp": "2026-11-01T00:00:00Z",
                },
                "spec": {
                    "schedulerName": "phalanx" if ours else "default-scheduler",
                    "nodeName": node,
                    "priority": 10 if ours else 0,
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
                "status": {"phase": "Running", "startTime": "2026-11-01T00:01:00Z"},
            }
            index += 1


def objects(nodes: int, pods: int | None = None) -> tuple[list[dict[str, Any]], Iterator[dict[str, Any]]]:
    """The nodes and their running pods."""
    node_manifests = shape(nodes).node_manifests()
    names = [node["metadata"]["name"] for node in node_manifests]
    return node_manifests, running_pods(names, pods_for(nodes) if pods is None else pods)


def store_of(nodes: int, pods: int | None = None) -> Store:
    node_manifests, pod_manifests = objects(nodes, pods)
    store = Store(history=10_000)
    load(store, node_manifests)
    for namespace in ("default", "load", "bench", "phalanx-system", "kube-system"):
        store.ensure_namespace(namespace)
    load(store, pod_manifests)
    return store


async def serve(nodes: int, pods: int | None) -> None:
    server = SimServer(store_of(nodes, pods), bookmark_interval=60.0)
    url = await server.start("127.0.0.1", 0)
    print(f"serving {url}", flush=True)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            break
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("serve",))
    parser.add_argument("nodes", type=int)
    parser.add_argument("pods", type=int, nargs="?")
    args = parser.parse_args(argv)
    anyio.run(serve, args.nodes, args.pods)
    return 0


if __name__ == "__main__":
    sys.exit(main())
