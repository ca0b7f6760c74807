"""Pods held by ``spec.schedulingGates``, as Kueue holds them: not members until released, never touched,
counted in what their gang says, and placed at once when the gates go (where a released nodeSelector says).
"""

from __future__ import annotations

from typing import Any

from scheduler.ports.sim import MERGE_PATCH
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import WAKES_ONLY, Cluster, cluster, eventually, gpu_pod, labels_of, pfn, phalanx

QUOTA = [{"name": "example.com/quota"}]
TOPOLOGY = [{"name": "kueue.x-k8s.io/topology"}]


def release(where: Cluster, pod: str, **spec: Any) -> None:
    """Remove the pod's gates (and set what else the releasing controller writes), in one update."""
    namespace, name = pod.split("/")
    body = {"spec": {"schedulingGates": None, **spec}}
    where.store.patch(where.store.resource("v1", "Pod"), namespace, name, body, MERGE_PATCH)


def about(where: Cluster, name: str) -> list[dict[str, Any]]:
    return [event for event in where.events() if event["regarding"].get("name") == name]


async def test_gated_members_are_counted_never_touched_and_the_gang_binds_once_they_are_released() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where, WAKES_ONLY) as app:
        where.create(gpu_pod("train-0", annotations=pfn("train", 4, timeout=100)))
        for i in range(1, 4):
            where.create(gpu_pod(f"train-{i}", annotations=pfn("train", 4, timeout=100), schedulingGates=QUOTA))
        condition = await eventually(lambda: where.condition("team/train-0"), what="the free member's condition")
        assert (condition["status"], condition["reason"]) == ("False", "GangWaiting")
        assert condition["message"].startswith(
            "Gang pfn:team/train holds room for 3 member(s) held by scheduling gates; it binds when they arrive, "
            "or releases the room in "
        )
        assert condition["message"].endswith("3 of 4 members are held by scheduling gates: example.com/quota.")
        await eventually(lambda: about(where, "train-0"), what="the gang's Event")
        for i in range(1, 4):  # the API server's own condition stays; Phalanx wrote nothing about them
            assert where.condition(f"team/train-{i}")["reason"] == "SchedulingGated"  # type: ignore[index]
            assert about(where, f"train-{i}") == []
        assert where.bound() == {}

        for i in range(1, 4):
            release(where, f"team/train-{i}")
        # At once: woken by the release, not after its (ten-minute) backoff or the gang's timeout.
        await eventually(lambda: len(where.bound()) == 4, what="the whole gang bound")
        assert not app.permit.waiting
        await check_invariants(where)


async def test_the_kueue_pattern_pods_released_with_a_rack_selector_land_in_that_rack() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where) as app:
        where.create(gpu_pod("elsewhere", gpus=8, scheduler="other", nodeName="b0-r0-n0"))  # b0-r0 is tighter
        for i in range(3):
            where.create(gpu_pod(f"tas-{i}", annotations=pfn("tas", 3), schedulingGates=TOPOLOGY))
        where.create(gpu_pod("sentinel", gpus=1))  # once it is bound, Phalanx has seen the gated pods before it
        await eventually(lambda: "team/sentinel" in where.bound(), what="the sentinel bound")
        assert not any(about(where, f"tas-{i}") for i in range(3)) and not app.state.index.gang_of("team/tas-0")
        for i in range(3):  # as Kueue's TAS does: the topology assignment becomes a nodeSelector
            release(where, f"team/tas-{i}", nodeSelector={"example.com/rack": "b0-r1"})
        placed = await eventually(lambda: len(where.bound()) == 5 and where.bound(), what="the gang bound")
        tas = [node for pod, node in placed.items() if pod.startswith("team/tas-")]
        assert labels_of(where, tas, "example.com/rack") == {"b0-r1"}
        await check_invariants(where)
