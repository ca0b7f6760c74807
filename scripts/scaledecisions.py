"""``bench_placement.py --scale``: Phalanx's decisions on clusters of 5,120, 20,480 and 65,536 nodes.

Each size is built in a process of its own (scripts/scalecluster.py: 500,000 running pods per 65,536 nodes,
half of them Phalanx's gangs), by feeding every node and pod to the scheduler's own state as watch events
(``ClusterState.apply``), as a starting scheduler's lists do; then, on that state:

  block_1000   a gang of 1,000 one-GPU pods that requires one block (PFN annotations, pending): the time to
               find the half-empty block it fits in and fill it (not committed; the same decision repeated);
  basic_3pod   500 gangs of 3 one-GPU pods, no constraint, placed one after another, each committed, then
               taken back (rounds of them, each from the cluster as built): pods per second of decisions;
  preempt_64   a gang of 8 pods of 8 GPUs that requires one rack, priority 1000, where no node has 8 GPUs
               free: the time to choose its victims (``PreemptionPlanner.plan``, as the scheduler calls it).

Beside them: the seconds the state took to take in every object, and the process's peak resident memory.
"""

from __future__ import annotations

import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import scalecluster
from bench_placement import Run, gangs, sequence

from scheduler.clock import ManualClock
from scheduler.gangs import GangSpec
from scheduler.ports.port import NODES, PODS, Change
from scheduler.preemption.evictions import Evictions
from scheduler.preemption.nominations import Nominations
from scheduler.preemption.planner import PreemptionPlanner
from scheduler.settings import Settings
from scheduler.state import ClusterState
from scheduler.vacancies import Vacancies
from topology import Placement, place
from topology.preemption import Victims

LEVELS = (scalecluster.BLOCK, scalecluster.RACK, "kubernetes.io/hostname")


def pending_gang(name: str, size: int, gpus: int, required: str, priority: int = 0) -> list[dict[str, Any]]:
    annotations = {
        f"{scalecluster.PFN}-name": name,
        f"{scalecluster.PFN}-size": str(size),
        "scheduling.phalanx.dev/topology-required": required,
    }
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{i}",
                "namespace": "bench",
                "uid": f"{name}-{i}",
                "annotations": annotations,
                "creationTimestamp": "2026-11-27T00:00:00Z",
            },
            "spec": {"schedulerName": "phalanx", "priority": priority, "containers": [container]},
        }
        for i in range(size)
    ]


def spec_of(state: ClusterState, name: str) -> GangSpec:
    state.index.take_changed()
    found = state.index.get(next(key for key in state.index.results() if str(key).endswith(f"bench/{name}")))
    assert isinstance(found, GangSpec), found
    return found


def timed(repeat: int, decide: Any) -> tuple[list[float], Any]:
    times, answer = [], None
    for _ in range(repeat):
        gc.collect()  # what building the cluster left to collect is not the decision's cost
        started = time.perf_counter()
        answer = decide()
        times.append((time.perf_counter() - started) * 1000)
    return times, answer


def basic_round(state: ClusterState, number: int) -> Run:
    """500 gangs of 3 placed one after another, each committed; then taken back, so that every round starts
    from the cluster as built (the smallest holds 1,898 free GPUs)."""
    requests = gangs(500, 3, 1, prefix=f"round{number}")
    run = sequence(state.snapshot, requests)
    for request in requests:
        for member in request.pods:
            state.snapshot.forget(member.key)
    return run


def one_size(n_nodes: int, repeat: int) -> dict[str, Any]:
    settings = Settings(levels=LEVELS)
    state = ClusterState(settings, ManualClock(start=1_800_000_000.0))
    nodes, pods = scalecluster.objects(n_nodes)
    started = time.perf_counter()
    for node in nodes:
        state.apply(NODES, Change("ADDED", node))
    for pod in pods:
        state.apply(PODS, Change("ADDED", pod))
    state.index.take_changed()
    _ = state.snapshot.free  # the arrays a first decision builds
    build_s = time.perf_counter() - started

    for pod in pending_gang("big", 1000, 1, scalecluster.BLOCK):
        state.apply(PODS, Change("ADDED", pod))
    big = spec_of(state, "big")
    tries = settings.placement.max_domain_tries
    block_ms, placed = timed(repeat, lambda: place(state.snapshot, big.request, max_tries=tries))
    assert isinstance(placed, Placement), placed

    for pod in pending_gang("prod", 8, 8, scalecluster.RACK, priority=1000):
        state.apply(PODS, Change("ADDED", pod))
    prod = spec_of(state, "prod")
    planner = PreemptionPlanner(
        state, settings, Nominations(state.clock, 300), Evictions(state), Vacancies(state, 0)
    )
    preempt_ms, victims = timed(repeat, lambda: planner.plan(prod, prod.request))
    assert isinstance(victims, Victims), victims

    basic = [basic_round(state, r) for r in range(max(1, repeat // 5))]
    return {
        "nodes": n_nodes,
        "pods": scalecluster.pods_for(n_nodes),
        "build_s": round(build_s, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "block_1000_ms": round(statistics.median(block_ms), 2),
        "block_1000_domain": placed.domain_of(big.request.key),
        "basic_3pod_pods_per_s": round(statistics.median(run.pods_per_s for run in basic)),
        "basic_3pod_ms_p50": round(statistics.median(statistics.median(run.ms_per_gang) for run in basic), 3),
        "preempt_64_ms": round(statistics.median(preempt_ms), 2),
        "preempt_64_victims": len(victims.pods),
    }


def run(repeat: int, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Each size in a fresh process, so that one's memory and caches are not the next one's."""
    found = []
    for n_nodes in sizes:
        completed = subprocess.run(
            [sys.executable, __file__, str(n_nodes), str(repeat)], capture_output=True, text=True, check=False
        )
        if completed.returncode != 0:
            raise RuntimeError(f"the {n_nodes}-node run failed:\n{completed.stderr[-2000:]}")
        found.append(json.loads(completed.stdout))
    return found


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'nodes':>7} {'pods':>8} {'build s':>8} {'peak MB':>8} {'block_1000 ms':>14} {'basic_3pod pods/s':>18} "
        f"{'preempt_64 ms':>14} {'victims':>8}"
    ]
    for row in rows:
        lines.append(
            f"{row['nodes']:>7} {row['pods']:>8} {row['build_s']:>8.1f} {row['peak_rss_mb']:>8} "
            f"{row['block_1000_ms']:>14.2f} {row['basic_3pod_pods_per_s']:>18} {row['preempt_64_ms']:>14.2f} "
            f"{row['preempt_64_victims']:>8}"
        )
    top = rows[-1]
    lines.append(
        f"goals at {top['nodes']:,} nodes: block_1000 <= 20 ms ({top['block_1000_ms']}), basic_3pod >= 4,000 pods/s "
        f"({top['basic_3pod_pods_per_s']}), preempt_64 <= 50 ms ({top['preempt_64_ms']})"
    )
    return lines


if __name__ == "__main__":
    print(json.dumps(one_size(int(sys.argv[1]), int(sys.argv[2]))))
