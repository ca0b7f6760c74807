#!/usr/bin/env python3
"""Timeline benchmark (issue 17): how fast `phalanx simulate` runs a day of workloads on its simulated clock.

  day   1,024 nodes (2 blocks x 16 racks x 32 nodes of 8 GPUs). Over 24 simulated hours, a training Job
        arrives every 2 minutes (720 Jobs: Indexed, one PFN gang each, 1-32 pods of 8 GPUs, each pod
        running 10 minutes to 4 hours, seeded) and a LeaderWorkerSet every hour (24 services of 2 groups
        of 4 pods of 8 GPUs, one Volcano PodGroup per group, running until the end). The whole run: the
        real scheduler, its informers and binder on SimCluster, the simulated controllers and kubelets.
        Reported: wall seconds, simulated hours per wall minute, pods created, bound and ended, and the
        median wait of the Jobs' gangs.

--quick: 128 nodes, 3 simulated hours, one run. --json prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from benchinfo import machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.logs import configure
from scheduler.ports.sim import ClusterShape
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
PFN = "gang-scheduling.preferred.jp/gang"
SIZES = (1, 1, 2, 2, 4, 4, 8, 16, 32)


def container(gpus: int) -> dict[str, Any]:
    return {
        "name": "main",
        "image": "registry.k8s.io/pause:3.9",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }


def training_job(index: int, rng: random.Random) -> dict[str, Any]:
    pods = rng.choice(SIZES)
    annotations = {f"{PFN}-name": f"train-{index}", f"{PFN}-size": str(pods),
                   "simulate.phalanx.dev/run-seconds": str(rng.randint(600, 4 * 3600))}  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"train-{index}", "namespace": "ml"},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [container(8)]},
            },
        },
    }


def service(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": f"llm-{index}", "namespace": "serving"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": {"containers": [container(8)]}}},
        },
    }


def day(racks: int, hours: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    simulation = Simulation(Settings(levels=LEVELS), seed=seed, until=hours * 3600)
    simulation.add_nodes(ClusterShape(blocks=2, racks=racks, nodes=32, gpus=8).node_manifests())
    jobs = int(hours * 30)
    for index in range(jobs):
        simulation.add_objects([training_job(index, rng)], at=index * 120.0, source="jobs")
    for index in range(int(hours)):
        simulation.add_objects([service(index)], at=index * 3600.0 + 1800.0, source="services")
    started = time.perf_counter()
    report = anyio.run(lambda: simulation.run(timeout=3600))
    seconds = time.perf_counter() - started
    history = simulation.history.pods.values()
    waits = [gang.wait for gang in report.gangs if gang.key.startswith("pfn:") and gang.wait is not None]
    return {
        "nodes": report.nodes,
        "simulated_hours": round(report.simulated_seconds / 3600, 2),
        "jobs": jobs,
        "services": int(hours),
        "pods_created": len(simulation.history.pods),
        "pods_bound": sum(1 for record in history if record.bound is not None),
        "pods_ended": sum(1 for record in history if record.ended is not None),
        "wall_seconds": round(seconds, 2),
        "simulated_hours_per_wall_minute": round(report.simulated_seconds / 3600 / (seconds / 60), 1),
        "median_job_wait_s": round(statistics.median(waits), 1) if waits else None,
        "timed_out": report.timed_out,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs with seeds 0, 1, ... (the median is reported)")
    parser.add_argument("--quick", action="store_true", help="128 nodes, 3 simulated hours, one run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure("error")
    command = "scripts/bench_timeline.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"command: {command}\nmachine: {machine()}\n", file=sys.stderr)
    racks, hours, runs = (2, 3.0, 1) if args.quick else (16, 24.0, args.runs)
    results = [day(racks, hours, seed) for seed in range(runs)]
    median = sorted(results, key=lambda result: result["wall_seconds"])[len(results) // 2]
    report = {"day": {**median, "runs": runs, "wall_seconds_each": [result["wall_seconds"] for result in results]}}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    d = report["day"]
    pods = f"{d['pods_created']:,} pods created, {d['pods_bound']:,} bound, {d['pods_ended']:,} ended"
    print(f"{d['nodes']:,} nodes, {d['jobs']} Jobs and {d['services']} LeaderWorkerSets over "
          f"{d['simulated_hours']} simulated hours: {pods}")  # fmt: skip
    speed = f"{d['simulated_hours_per_wall_minute']} simulated hours per wall minute"
    print(f"median of {runs} run(s): {d['wall_seconds']} s wall ({speed}); runs {d['wall_seconds_each']}; "
          f"median Job wait {d['median_job_wait_s']} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
