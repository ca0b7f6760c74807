"""Many gangs of MIG partitions of every profile, and of shares of GPUs shared by memory, arriving over time
and ending, on a small cluster (the simulated clock, seeded): every bind is checked by the oracle, so that no
counter of a GPU is ever consumed beyond its value and no shared GPU beyond its memory, whatever the mix."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from scheduler.gangs import GangSettings
from scheduler.ports.sim import ClusterShape
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.oracle import InvariantMonitor
from tests.scheduler.support import gpu_pod, pfn

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")


def template(name: str, namespace: str, exactly: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}  # fmt: skip


def workload(seed: int, how: str) -> list[tuple[float, list[dict[str, Any]]]]:
    """Gangs of 1-3 pods, each pod one claim of a random profile (``mig``) or of 10-50Gi of a shared GPU
    (``shared``), arriving over ten minutes and each running 1-5 minutes."""
    rng = random.Random(seed)
    arrivals: list[tuple[float, list[dict[str, Any]]]] = [
        (0.0, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}])
    ]
    for gang in range(24):
        size = rng.randint(1, 3)
        name = f"g{gang}"
        if how == "mig":
            profile = rng.choice(PROFILES)
            selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
            exactly = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": selector}}]}
        else:
            exactly = {
                "deviceClassName": "gpu.nvidia.com",
                "capacity": {"requests": {"memory": f"{rng.choice((10, 20, 30, 50))}Gi"}},
            }
        objects: list[dict[str, Any]] = [template(name, "ml", exactly)]
        for member in range(size):
            annotations = {**pfn(name, size), "simulate.phalanx.dev/run-seconds": str(rng.randint(60, 300))}
            objects.append(gpu_pod(f"{name}-{member}", "ml", gpus=0, annotations=annotations, restartPolicy="Never",
                                   resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": name}]))  # fmt: skip
        arrivals.append((rng.uniform(0, 600), objects))
    return arrivals


@pytest.mark.parametrize("how", ["mig", "shared"])
@pytest.mark.parametrize("seed", [1, 2])
def test_no_counter_or_shared_capacity_is_ever_overcommitted_whatever_the_mix(how: str, seed: int) -> None:
    simulation = Simulation(Settings(levels=LEVELS), seed=seed)
    objects = ClusterShape.parse(f"blocks=1,racks=2,nodes=2,gpus=0,dra=gpu.nvidia.com:2:{how}").manifests()
    simulation.add_nodes([obj for obj in objects if obj["kind"] == "Node"])
    simulation.add_objects([obj for obj in objects if obj["kind"] != "Node"], source="cluster")
    for at, arriving in sorted(workload(seed, how), key=lambda item: item[0]):
        simulation.add_objects(arriving, at=at, source="stress")
    monitor = InvariantMonitor(simulation.store, gang_settings=GangSettings(levels=LEVELS))
    report = anyio.run(lambda: simulation.run(timeout=120))
    assert not report.timed_out
    assert monitor.checks["devices"] >= 20  # most pods bound, each checked
    monitor.check_gangs()
    monitor.assert_clean()
