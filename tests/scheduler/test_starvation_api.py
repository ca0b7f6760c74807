"""A domain reservation as an operator sees it, through kubernetes_asyncio over HTTP: the Reserving Event
and the pods' condition on the gang that waited too long, the reason other gangs are held back, metrics,
and what ``phalanx explain`` and ``simulate`` show."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from scheduler.frontends.plot import plot
from scheduler.frontends.render import table
from scheduler.ports.sim.builders import node_manifest
from scheduler.settings import StarvationSettings
from scheduler.simulation.driver import Simulation
from tests.scheduler.support import FAST, LEVELS, Cluster, cluster, eventually, gpu_pod, pfn, phalanx

RACK = "example.com/rack"
#: Gangs reserve at their first failed attempt: the five minutes are not waited out in a test.
AT_ONCE = replace(FAST, starvation=StarvationSettings(reserve_after_seconds=0))


def rack_nodes() -> list[dict[str, Any]]:
    return [
        node_manifest(
            f"{rack}-n{i}",
            labels={"example.com/block": "b0", RACK: rack},
            capacity={"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
        )
        for rack in ("r0", "r1")
        for i in range(2)
    ]


def busy(where: Cluster) -> list[str]:
    """Pods of another scheduler: rack r0 has 8 + 7 GPUs in use, rack r1 has 4 + 4."""
    placed = {"r0-n0": 8, "r0-n1": 7, "r1-n0": 4, "r1-n1": 4}
    for node, gpus in placed.items():
        where.create(gpu_pod(f"busy-{node}", gpus=gpus, scheduler="default-scheduler", nodeName=node))
    return [f"team/busy-{node}" for node in placed]


def big(where: Cluster) -> list[str]:
    annotations = {**pfn("big", 2), "scheduling.phalanx.dev/topology-required": RACK}
    for i in range(2):
        where.create(gpu_pod(f"big-{i}", annotations=annotations))
    return ["team/big-0", "team/big-1"]


async def test_the_gang_that_waited_holds_a_rack_says_so_and_binds_there_when_it_empties() -> None:
    async with cluster(nodes=rack_nodes()) as where, phalanx(where, AT_ONCE) as app:
        running = busy(where)
        gang = big(where)
        note = await eventually(
            lambda: next((e["note"] for e in where.events("Reserving")), None), what="a Reserving Event"
        )
        assert note.startswith("Gang pfn:team/big reserves rack r1 for its 16 GPUs; 8 GPUs there are still in use.")
        event = where.events("Reserving")[0]
        assert (event["type"], event["regarding"]["name"], event["action"]) == ("Normal", "big-0", "Reserving")
        condition = await eventually(
            lambda: (c := where.condition(gang[0])) and "reserves rack" in c.get("message", "") and c,
            what="the reservation in the pods' condition",
        )
        assert condition["reason"] == "Unschedulable"  # cluster-autoscaler still reads what it expects
        assert "reserves rack r1 for its 16 GPUs; 8 GPUs there are still in use" in condition["message"]
        assert app.metrics.starvation_reservations.labels(RACK).value == 1

        # Another gang that needs the free GPUs of rack r1 waits, and says for whom.
        where.create(gpu_pod("small", gpus=4, annotations={"scheduling.phalanx.dev/topology-required": RACK}))
        message = await eventually(
            lambda: (where.condition("team/small") or {}).get("message", ""), what="small's condition"
        )
        assert "Room on 2 nodes of rack r1 is reserved for gang pfn:team/big" in message
        assert "team/small" not in where.bound()

        for pod in running[2:]:  # what ran on rack r1 ends
            where.delete_pod(pod)
        await eventually(lambda: all(pod in where.bound() for pod in gang), what="the big gang bound")
        assert {where.bound()[pod] for pod in gang} == {"r1-n0", "r1-n1"}
        assert app.scheduler.starvation.get("pfn:team/big") is None  # type: ignore[arg-type]
        assert app.metrics.starvation_released.labels("bound").value == 1


async def test_simulate_lists_the_reservation_and_marks_its_nodes_on_the_map(tmp_path: Path) -> None:
    simulation = Simulation(replace(AT_ONCE, levels=LEVELS))
    simulation.add_nodes(rack_nodes())
    placed = {"r0-n0": 8, "r0-n1": 7, "r1-n0": 4, "r1-n1": 4}
    running = [gpu_pod(f"busy-{n}", gpus=g, scheduler="default-scheduler", nodeName=n) for n, g in placed.items()]
    annotations = {**pfn("big", 2), "scheduling.phalanx.dev/topology-required": RACK}
    simulation.add_objects([*running, *(gpu_pod(f"big-{i}", annotations=annotations) for i in range(2))])

    report = await simulation.run()

    (held,) = report.reservations
    assert (held.gang, held.level, held.domain, held.nodes) == ("pfn:team/big", RACK, "r1", ("r1-n0", "r1-n1"))
    assert report.to_json()["reservations"] == [
        {
            "gang": "pfn:team/big",
            "level": RACK,
            "domain": "r1",
            "nodes": ["r1-n0", "r1-n1"],
            "reserves": "reserves rack r1 for its 16 GPUs; 8 GPUs there are still in use",
        }
    ]
    text = table(report, title="test", levels=LEVELS)
    assert "pfn:team/big reserves rack r1 for its 16 GPUs; 8 GPUs there are still in use: r1-n0 r1-n1" in text
    assert "  r1  [####____] [####____]" in text
    assert "[...] a node held for a gang that waited too long" in text
    plot(report, LEVELS, tmp_path / "racks.png")  # the held nodes outlined, and named in the legend
    assert (tmp_path / "racks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
