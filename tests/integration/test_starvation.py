"""A domain reservation on a real kube-apiserver: the Reserving Event as ``kubectl describe`` lists it, the
pods' condition, the metric, and the bind onto the drained nodes once what ran there is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.controlplane import ControlPlane
from tests.integration.conftest import FAST
from tests.integration.support import (
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    pod_scheduled,
    pods,
)
from tests.scheduler.support import gpu_pod, pfn

RACK = "example.com/rack"
#: A scheduler of its own, whose gangs reserve at their first failed attempt (the five minutes are not
#: waited out in a test); the session's scheduler does not see these pods.
OWN = (
    *FAST,
    "leaderElection.name=phalanx-starving",
    "schedulerNames=[phalanx-starving]",
    "starvation.reserveAfterSeconds=0",
)
#: The gang may use racks b0-r0 and b0-r1 only.
TWO_RACKS = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": RACK, "operator": "In", "values": ["b0-r0", "b0-r1"]}]}]
        }
    }
}


def busy(plane: ControlPlane) -> dict[str, str]:
    """A pod of another scheduler on each node of the two racks: 2 GPUs each, but 1 on b0-r1-n0 and n1."""
    placed = {}
    for rack in ("b0-r0", "b0-r1"):
        for i in range(8):
            node = f"{rack}-n{i}"
            gpus = 1 if rack == "b0-r1" and i < 2 else 2
            plane.apply(gpu_pod(f"busy-{node}", "starve", gpus=gpus, scheduler="default-scheduler", nodeName=node))
            placed[f"starve/busy-{node}"] = node
    return placed


def member(name: str) -> dict[str, Any]:
    annotations = {**pfn("big", 2), "scheduling.phalanx.dev/topology-required": RACK}
    return gpu_pod(name, "starve", annotations=annotations, scheduler="phalanx-starving", affinity=TWO_RACKS)


def test_a_gang_that_waited_holds_the_rack_it_would_fit_soonest_and_binds_there(
    plane: ControlPlane, workdir: Path, phalanx_kubeconfig: Path
) -> None:
    ensure_namespace(plane, "starve")
    process = PhalanxProcess(workdir, phalanx_kubeconfig, name="starving-0", overrides=OWN)
    try:
        process.wait_ready()
        running = busy(plane)
        for name in ("big-0", "big-1"):
            plane.apply(member(name))
        first = pods(plane, "starve")["starve/big-0"]
        reserving = eventually(
            lambda: [e for e in described_events(plane, first) if e["reason"] == "Reserving"],
            what="the Reserving Event on the gang's first pod",
        )
        assert reserving[0]["type"] == "Normal"
        assert reserving[0]["message"].startswith(
            "Gang pfn:starve/big reserves rack b0-r1 for its 16 GPUs; 2 GPUs there are still in use."
        )
        condition = eventually(
            lambda: (c := pod_scheduled(pods(plane, "starve")["starve/big-1"]))
            and "reserves rack" in c["message"]
            and c,
            what="the reservation in the pods' PodScheduled condition",
        )
        assert condition["reason"] == "Unschedulable"
        assert "reserves rack b0-r1 for its 16 GPUs; 2 GPUs there are still in use" in condition["message"]
        eventually(
            lambda: process.metric("phalanx_starvation_reservations", f'level="{RACK}"') == 1,
            what="the reservation metric",
        )

        immediately = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        for pod in ("starve/busy-b0-r1-n0", "starve/busy-b0-r1-n1"):  # what ran on the drained nodes ends
            plane.call("DELETE", f"/api/v1/namespaces/starve/pods/{pod.split('/')[1]}", immediately)
            running.pop(pod)

        placed = eventually(
            lambda: (b := bound(plane, "starve")) and {"starve/big-0", "starve/big-1"} <= b.keys() and b,
            what="the gang bound",
        )
        assert {placed["starve/big-0"], placed["starve/big-1"]} == {"b0-r1-n0", "b0-r1-n1"}
        eventually(
            lambda: process.metric("phalanx_starvation_reservations_released_total", 'reason="bound"') == 1,
            what="the reservation released on binding",
        )
    finally:
        process.stop()
