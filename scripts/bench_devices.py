#!/usr/bin/env python3
"""Devices benchmark (issue 27): what Dynamic Resource Allocation costs the scheduler.

  index      1,024 nodes (32 per rack, 8 racks per block) that each publish 8 GPUs through a DRA driver
             (a ResourceSlice of their own); the time to take every slice and the DeviceClass into
             ClusterState and to offer a first column (each selector evaluated once per device, 8,192).
  decision   a gang of 64 pods, each claiming 8 devices of one clique (matchAttribute), that requires one
             NVLink clique (a device attribute; here 8 cliques of 128 nodes, half a block each): the time of
             one placement (topology.place on the gang as the index compiled it), devices counted as
             every other resource.                              target: median <= 20 ms
  partitions the same with every GPU published as MIG partitions (``dra=gpu.nvidia.com:8:mig``: 13 partitions
             per GPU that share its counters, 106,496 devices) and pods claiming 8 ``1g.10gb`` partitions
             each: the index, the decision (target: median <= 20 ms), and PreBind's choice of the 512
             partitions (``devices.allocation.plan``, counters kept GPU by GPU).

--json prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.clock import ManualClock  # noqa: E402
from scheduler.devices.allocation import plan  # noqa: E402
from scheduler.gangs import GangSpec  # noqa: E402
from scheduler.ports.port import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Change  # noqa: E402
from scheduler.ports.sim import ClusterShape  # noqa: E402
from scheduler.settings import Settings  # noqa: E402
from scheduler.state import ClusterState  # noqa: E402
from scripts.benchinfo import machine  # noqa: E402
from topology import Infeasible, place  # noqa: E402

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
SHAPE = "blocks=4,racks=8,nodes=32,gpus=0,dra=gpu.nvidia.com:8"
MIG_SHAPE = SHAPE + ":mig"
#: What --quick runs of the partitions: 32 nodes, one clique of 16 still holds the gang (896 partitions).
QUICK_MIG_SHAPE = "blocks=1,racks=8,nodes=4,gpus=0,dra=gpu.nvidia.com:8:mig"
ONE_G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
CLIQUE = "gpu.nvidia.com/cliqueId"


def cluster(shape: str) -> list[dict[str, Any]]:
    """The shape's nodes and devices, each GPU in the clique of its half block (racks 0-3 or 4-7)."""
    objects = ClusterShape.parse(shape).manifests()
    for obj in objects:
        if obj["kind"] == "ResourceSlice":
            for device in obj["spec"].get("devices") or ():
                device["attributes"]["cliqueId"] = {"string": clique_of(obj["spec"]["nodeName"])}
    return objects


def clique_of(node: str) -> str:
    block, rack, _ = node.split("-")
    return f"{block}-{int(rack[1:]) // 4}"


def claim(name: str, *selectors: str) -> dict[str, Any]:
    exactly = {"deviceClassName": "gpu.nvidia.com", "count": 8,
               "selectors": [{"cel": {"expression": expression}} for expression in selectors]}  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml", "uid": name, "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}],
                                 "constraints": [{"matchAttribute": CLIQUE}]}}}  # fmt: skip


def pod(index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"w-{index}", "namespace": "ml", "uid": f"w-{index}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"gang-scheduling.preferred.jp/gang-name": "w",
                                         "gang-scheduling.preferred.jp/gang-size": "64",
                                         "scheduling.phalanx.dev/topology-required": CLIQUE}},
            "spec": {"schedulerName": "phalanx", "containers": [{"name": "main"}],
                     "resourceClaims": [{"name": "gpus", "resourceClaimName": f"w-{index}-gpus"}]}}  # fmt: skip


def run(repeat: int, shape: str, *selectors: str) -> dict[str, Any]:
    objects = cluster(shape)
    index_times, decision_times, prebind_times = [], [], []
    for _ in range(repeat):
        state = ClusterState(Settings(levels=LEVELS), ManualClock())
        gc.collect()
        started = time.perf_counter()
        for obj in objects:
            kind = obj["kind"]
            resource = NODES if kind == "Node" else DEVICE_CLASSES if kind == "DeviceClass" else RESOURCE_SLICES
            state.apply(resource, Change("ADDED", obj))
        for i in range(64):
            state.apply(RESOURCE_CLAIMS, Change("ADDED", claim(f"w-{i}-gpus", *selectors)))
            state.apply(PODS, Change("ADDED", pod(i)))
        state.index.take_changed()
        state.take_signals()  # the devices each node offers go into its record
        index_times.append(time.perf_counter() - started)
        spec = state.index.get("pfn:ml/w")  # type: ignore[arg-type]
        assert isinstance(spec, GangSpec), spec
        for _ in range(5):
            gc.collect()
            started = time.perf_counter()
            placed = place(state.snapshot, spec.request, max_tries=8)
            decision_times.append(time.perf_counter() - started)
            assert not isinstance(placed, Infeasible), placed
            assert len({clique_of(assignment.node) for assignment in placed.assignments}) == 1
        pods = [(pod(int(str(a.pod).rsplit("-", 1)[1])), a.node) for a in placed.assignments]
        for _ in range(3):
            gc.collect()
            started = time.perf_counter()
            writes = plan(state.devices, pods, state.own_allocatable, state.reaches)
            prebind_times.append(time.perf_counter() - started)
            assert not isinstance(writes, str), writes
            for write in writes:
                state.devices.put_back(write.devices, f"{write.namespace}/{write.name}")
    decision = statistics.median(decision_times) * 1000
    nodes = [obj for obj in objects if obj["kind"] == "Node"]
    return {
        "shape": shape,
        "nodes": len(nodes),
        "devices": sum(len(obj["spec"].get("devices") or ()) for obj in objects if obj["kind"] == "ResourceSlice"),
        "index_s": round(statistics.median(index_times), 3),
        "decision_ms": round(decision, 3),
        "prebind_ms": round(statistics.median(prebind_times) * 1000, 1),
        "target": "decision <= 20 ms",
        "met": decision <= 20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")
    parser.add_argument("--quick", action="store_true",
                        help="one run, the partitions on 32 nodes (under a few seconds)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=None, help="runs, each with five decisions (default 3)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    print(f"command: scripts/bench_devices.py {' '.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    print(f"machine: {machine()}", file=sys.stderr)
    print(f"runs: {repeat} (five decisions each; figures are medians)", file=sys.stderr)
    partitioned = QUICK_MIG_SHAPE if args.quick else MIG_SHAPE
    results = {"whole": run(repeat, SHAPE), "partitions": run(repeat, partitioned, ONE_G)}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for case, what in (("whole", "8 devices"), ("partitions", "8 1g.10gb partitions")):
        result = results[case]
        print(f"cluster: {result['shape']} ({result['nodes']:,} nodes, {result['devices']:,} devices)")
        print(f"  index    {result['index_s']:.3f} s to take every slice, class, claim and pod, and offer the devices")
        print(f"  decision {result['decision_ms']:.3f} ms for a 64-pod gang of {what} each in one clique "
              f"(target <= 20 ms: {'met' if result['met'] else 'missed'})")  # fmt: skip
        print(f"  prebind  {result['prebind_ms']:.1f} ms to choose the gang's {64 * 8} devices")
    return 0

if __name__ == "__main__":
    sys.exit(main())
