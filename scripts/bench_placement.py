#!/usr/bin/env python3
"""Placement engine benchmark (issue 2): how fast `topology.place` answers, at cluster sizes that matter.

Clusters have 8-GPU nodes (64 CPU, 512Gi), 32 nodes per rack and 8 racks per block. Scenarios:

  basic_3pod_5k           5,120 nodes; 3,000 gangs of 3 one-GPU pods, no constraint, placed one after
                          another on one snapshot (each placement is committed).       target >= 4,000 pods/s
  rack_4pod_5k            same cluster; 2,000 gangs of 4 one-GPU pods that require one rack, every rack
                          considered.                                                   target >= 3,000 pods/s
  block_1000pod_20k       20,480 nodes half full in a fragmented pattern; one gang of 1,000 eight-GPU pods
                          that requires one block. A block has 256 nodes, so this gang cannot fit anywhere:
                          the figure is the time to prove it and explain why.           target <= 50 ms/gang
  block_1000pod_20k_fit   the same cluster and constraint with 1,000 one-GPU pods, which fit in the blocks
                          whose fragments add up to enough room: the time to find one and fill it.
                                                                                        target <= 50 ms/gang
  growth                  basic_3pod at 1,280 / 5,120 / 20,480 nodes; per-gang time must grow no faster
                          than the node count.

Every figure is the median over --repeat runs. --json prints one JSON object keyed by scenario name.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from benchinfo import machine

from topology import GangRequest, Member, NodeRecord, Placement, PodShape, Snapshot, Topology, place

BLOCK, RACK, HOSTNAME, GPU = "example.com/block", "example.com/rack", "kubernetes.io/hostname", "nvidia.com/gpu"
NODES_PER_RACK, RACKS_PER_BLOCK = 32, 8


def build_cluster(n_nodes: int, *, half_full_seed: int | None = None) -> Snapshot:
    """``n_nodes`` 8-GPU nodes; with a seed, each node already runs 0, 2, 4, 6 or 8 GPUs' worth of pods."""
    records = []
    for i in range(n_nodes):
        rack, block = i // NODES_PER_RACK, i // (NODES_PER_RACK * RACKS_PER_BLOCK)
        name = f"node-{i:05d}"
        records.append(
            NodeRecord(
                name=name,
                labels={BLOCK: f"block-{block:03d}", RACK: f"rack-{rack:04d}", HOSTNAME: name},
                allocatable={"cpu": 64_000, "memory": 512 << 30, "pods": 110, GPU: 8},
            )
        )
    snapshot = Snapshot(records, topology=Topology(levels=(BLOCK, RACK, HOSTNAME)))
    if half_full_seed is not None:
        used = np.random.default_rng(half_full_seed).choice([0, 2, 4, 6, 8], size=n_nodes)
        for i, gpus in enumerate(used.tolist()):
            if gpus:
                snapshot.assume(f"other/pod-{i}", f"node-{i:05d}", {GPU: gpus, "cpu": 4000 * gpus, "pods": 1})
    _ = snapshot.free  # build the arrays outside the timed part
    return snapshot


def gangs(count: int, size: int, gpus: int, *, required: str | None = None, prefix: str = "team") -> list[GangRequest]:
    shape = PodShape.of({GPU: gpus, "cpu": 1000 * gpus, "memory": (16 << 30) * gpus})
    return [
        GangRequest.leaf(
            f"{prefix}/g{i}", [Member(key=f"{prefix}/g{i}-{j}", shape=shape) for j in range(size)], required=required
        )
        for i in range(count)
    ]


@dataclass
class Run:
    pods_per_s: float
    ms_per_gang: list[float]
    placed: int
    note: str = ""


def sequence(snapshot: Snapshot, requests: Sequence[GangRequest]) -> Run:
    """Place gangs one after another, committing each placement, timing every call."""
    per_gang: list[float] = []
    placed = 0
    start = time.perf_counter()
    for request in requests:
        t0 = time.perf_counter()
        result = place(snapshot, request)
        if isinstance(result, Placement):
            snapshot.assume_placement(result)
            placed += len(result.assignments)
        per_gang.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - start
    return Run(pods_per_s=placed / elapsed, ms_per_gang=per_gang, placed=placed)


def repeated_single(snapshot: Snapshot, request: GangRequest, times: int) -> Run:
    """Place one gang ``times`` times on the same snapshot (not committed), timing each answer."""
    per_gang: list[float] = []
    result = place(snapshot, request)  # warm the per-generation caches, as a running scheduler has them
    for _ in range(times):
        t0 = time.perf_counter()
        result = place(snapshot, request)
        per_gang.append((time.perf_counter() - t0) * 1000)
    placed = len(result.assignments) if isinstance(result, Placement) else 0
    note = (
        f"placed in {result.domain_of(request.key)}"
        if isinstance(result, Placement)
        else f"infeasible: {result.reason}"
    )
    p50 = statistics.median(per_gang) / 1000
    return Run(pods_per_s=placed / p50 if placed else 0.0, ms_per_gang=per_gang, placed=placed, note=note)


@dataclass
class Figure:
    name: str
    nodes: int
    gangs: int
    pods_per_gang: int
    pods_per_s: float
    p50: float
    p99: float
    target: str
    met: bool
    note: str = ""

    def as_json(self) -> dict[str, object]:
        return {
            "nodes": self.nodes,
            "gangs": self.gangs,
            "pods_per_gang": self.pods_per_gang,
            "pods_per_s": round(self.pods_per_s, 1),
            "ms_per_gang_p50": round(self.p50, 4),
            "ms_per_gang_p99": round(self.p99, 4),
            "target": self.target,
            "met": self.met,
            **({"note": self.note} if self.note else {}),
        }


def median_of(runs: list[Run]) -> tuple[float, float, float]:
    return (
        statistics.median(run.pods_per_s for run in runs),
        statistics.median(float(np.percentile(run.ms_per_gang, 50)) for run in runs),
        statistics.median(float(np.percentile(run.ms_per_gang, 99)) for run in runs),
    )


def measure(repeat: int, make: Callable[[], Run]) -> list[Run]:
    return [make() for _ in range(repeat)]


Check = tuple[str, Callable[[Figure, float], bool]]


@dataclass
class Scenario:
    name: str
    nodes: int
    gangs: int
    pods_per_gang: int
    check: Check | None
    bound: float
    make: Callable[[], Run]

    def run(self, repeat: int) -> Figure:
        runs = measure(repeat, self.make)
        pods_per_s, p50, p99 = median_of(runs)
        figure = Figure(
            self.name, self.nodes, self.gangs, self.pods_per_gang, pods_per_s, p50, p99, "", True, runs[0].note
        )
        if self.check is not None:
            words, holds = self.check
            figure.target = words.format(f"{self.bound:g}")
            figure.met = holds(figure, self.bound)
        return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true", help="a reduced run that finishes in well under a minute")
    parser.add_argument("--repeat", type=int, default=None, help="runs per scenario (default 3, quick 1)")
    scale_help = "decisions on 5,120, 20,480 and 65,536 nodes with 500,000 pods per 65,536 (scripts/scaledecisions.py)"
    parser.add_argument("--scale", action="store_true", help=scale_help)
    args = parser.parse_args(argv)
    if args.scale:
        return scale_report(args)
    repeat = args.repeat or (1 if args.quick else 3)
    scale = 3 if args.quick else 1
    single_times = 10 if args.quick else 30
    log = sys.stderr if args.json else sys.stdout

    print(
        f"command: {' '.join(['scripts/bench_placement.py', *(argv if argv is not None else sys.argv[1:])])}", file=log
    )
    print(f"machine: {machine()}", file=log)
    print(f"runs per scenario: {repeat} (figures are medians)\n", file=log)

    n_basic, n_rack = 3000 // scale, 2000 // scale
    fragmented = build_cluster(20480, half_full_seed=7)
    throughput = (">= {} pods/s", lambda figure, floor: figure.pods_per_s >= floor)
    latency = ("<= {} ms/gang", lambda figure, ceiling: figure.p50 <= ceiling)
    scenarios = [
        Scenario(
            "basic_3pod_5k",
            5120,
            n_basic,
            3,
            throughput,
            4000,
            lambda: sequence(build_cluster(5120), gangs(n_basic, 3, 1)),
        ),
        Scenario(
            "rack_4pod_5k",
            5120,
            n_rack,
            4,
            throughput,
            3000,
            lambda: sequence(build_cluster(5120), gangs(n_rack, 4, 1, required=RACK)),
        ),
        Scenario(
            "block_1000pod_20k",
            20480,
            1,
            1000,
            latency,
            50,
            lambda: repeated_single(fragmented, gangs(1, 1000, 8, required=BLOCK)[0], single_times),
        ),
        Scenario(
            "block_1000pod_20k_fit",
            20480,
            1,
            1000,
            latency,
            50,
            lambda: repeated_single(fragmented, gangs(1, 1000, 1, required=BLOCK)[0], single_times),
        ),
    ]
    figures = [scenario.run(repeat) for scenario in scenarios]
    growth = [
        Scenario(
            f"growth_{nodes}",
            nodes,
            n_basic,
            3,
            None,
            0,
            lambda nodes=nodes: sequence(build_cluster(nodes), gangs(n_basic, 3, 1)),
        ).run(repeat)
        for nodes in (1280, 5120, 20480)
    ]
    time_ratio = growth[-1].p50 / growth[0].p50
    node_ratio = growth[-1].nodes / growth[0].nodes

    result: dict[str, object] = {figure.name: figure.as_json() for figure in figures}
    result["growth"] = {
        "nodes": [figure.nodes for figure in growth],
        "pods_per_s": [round(figure.pods_per_s, 1) for figure in growth],
        "ms_per_gang_p50": [round(figure.p50, 4) for figure in growth],
        "ms_per_gang_p99": [round(figure.p99, 4) for figure in growth],
        "time_ratio": round(time_ratio, 2),
        "node_ratio": node_ratio,
        "target": "time_ratio <= node_ratio",
        "met": time_ratio <= node_ratio,
    }
    result["machine"] = machine()
    result["repeat"] = repeat
    result["quick"] = args.quick

    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    header = (
        f"{'scenario':<22} {'nodes':>6} {'gangs':>6} {'pods/gang':>9} {'pods/s':>9} {'p50 ms':>8} {'p99 ms':>8}  target"
    )
    print(header)
    print("-" * len(header) + "-" * 12)
    for figure in [*figures, *growth]:
        verdict = ("ok" if figure.met else "MISSED") if figure.target else ""
        print(
            f"{figure.name:<22} {figure.nodes:>6} {figure.gangs:>6} {figure.pods_per_gang:>9} "
            f"{figure.pods_per_s:>9.0f} {figure.p50:>8.3f} {figure.p99:>8.3f}  {figure.target} {verdict}"
        )
    for figure in figures:
        if figure.note:
            print(f"  {figure.name}: {figure.note}")
    print(
        f"  growth: per-gang p50 grew {time_ratio:.2f}x for {node_ratio:.0f}x the nodes "
        f"({'ok' if time_ratio <= node_ratio else 'MISSED'})"
    )
    return 0


def scale_report(args: argparse.Namespace) -> int:
    import scalecluster  # noqa: PLC0415
    import scaledecisions  # noqa: PLC0415

    repeat = args.repeat or (5 if args.quick else 21)
    sizes = scalecluster.SIZES[:2] if args.quick else scalecluster.SIZES
    log = sys.stderr if args.json else sys.stdout
    print(f"command: scripts/bench_placement.py {' '.join(sys.argv[1:])}", file=log)
    print(f"machine: {machine()}", file=log)
    print(f"decisions timed per size: {repeat} (figures are medians)\n", file=log)
    rows = scaledecisions.run(repeat, sizes)
    if args.json:
        print(json.dumps({"sizes": rows, "machine": machine(), "repeat": repeat}, indent=2))
        return 0
    print("\n".join(scaledecisions.report(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
