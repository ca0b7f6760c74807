"""Workload objects as people write them, and a run of ``Simulation`` over them under the invariant monitor."""

from __future__ import annotations

from typing import Any

import anyio

from scheduler.gangs.gang_settings import GangSettings
from scheduler.ports.sim import ClusterShape, Store
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.oracle import InvariantMonitor
from scheduler.simulation.report import Report

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
PFN = "gang-scheduling.preferred.jp/gang"
RUN_SECONDS = "simulate.phalanx.dev/run-seconds"
Manifest = dict[str, Any]


def pod_spec(gpus: int, **spec: Any) -> Manifest:
    return {
        "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        **spec,
    }


def template(gpus: int, *, annotations: dict[str, str] | None = None, **spec: Any) -> Manifest:
    return {"metadata": {"annotations": annotations or {}}, "spec": pod_spec(gpus, **spec)}


def gang(name: str, size: int, **extra: str) -> dict[str, str]:
    """PFN's gang annotations."""
    return {f"{PFN}-name": name, f"{PFN}-size": str(size), **extra}


def job(
    name: str, pods: int, gpus: int, *, namespace: str = "ml", annotations: dict[str, str] | None = None, **spec: Any
) -> Manifest:
    body = {"parallelism": pods, "completions": pods, **spec}
    body["template"] = template(gpus, annotations=annotations, restartPolicy="Never")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace}, "spec": body}


def lws(name: str, groups: int, size: int, gpus: int, *, namespace: str = "serving", **spec: Any) -> Manifest:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": size, "workerTemplate": template(gpus)}, **spec},
    }


def bare_pod(namespace: str, name: str, gpus: int, *, annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None, **spec: Any) -> Manifest:  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}, "labels": labels or {}},
        "spec": pod_spec(gpus, **spec),
    }


def simulate(
    *workloads: tuple[list[Manifest], float | None],
    shape: str = "blocks=1,racks=2,nodes=4,gpus=8",
    controller_gangs: bool = True,
    until: float = 30 * 86400.0,
    kubelets: bool = True,
) -> tuple[Simulation, Report]:
    """Run the objects (each list arriving at its time, or before the run with None) on a cluster of
    ``shape``; every invariant is checked at every change, and the run must leave none broken."""
    simulation = Simulation(Settings(levels=LEVELS), controller_gangs=controller_gangs, until=until, kubelets=kubelets)
    simulation.add_nodes(ClusterShape.parse(shape).node_manifests())
    monitor = InvariantMonitor(simulation.store, gang_settings=GangSettings(levels=LEVELS))
    for objects, at in workloads:
        simulation.add_objects(objects, at=at)
    report = anyio.run(lambda: simulation.run(timeout=120))
    monitor.assert_clean()
    assert not report.timed_out
    return simulation, report


def pods(store: Store) -> dict[str, Manifest]:
    return {
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}": pod
        for pod in store.objects(store.resource("v1", "Pod"))
    }
