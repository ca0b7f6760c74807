"""Room held for missing members follows its gang: it never binds a gang below its minimum when the gang
changed while it waited, and it says what it waits for in the gang's own terms (running out its time while
members are gated is still waiting: ``test_held_room.py``)."""

from __future__ import annotations

from typing import Any

from scheduler.app import Phalanx
from scheduler.ports.sim import MERGE_PATCH
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import Cluster, cluster, eventually, gpu_pod, pfn, phalanx

GROUP = "scheduling.x-k8s.io/pod-group"
TOPOLOGY = [{"name": "kueue.x-k8s.io/topology"}]


def podgroup(name: str, minimum: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"minMember": minimum},
    }


async def waiting_podgroup(where: Cluster, app: Phalanx, *, minimum_now: int) -> Any:
    """A PodGroup of minimum 4 whose 3 pods hold room for the fourth; then its minimum is changed."""
    where.create(podgroup("pg", 4))
    for i in range(3):
        where.create(gpu_pod(f"pg-{i}", labels={GROUP: "pg"}))
    await eventually(lambda: app.permit.waiting, what="a reservation")
    groups = where.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
    where.store.patch(groups, "team", "pg", {"spec": {"minMember": minimum_now}}, MERGE_PATCH)
    return groups


def says(where: Cluster, pod: str, text: str) -> bool:
    condition = where.condition(pod)
    return bool(condition and text in condition["message"])


async def test_a_member_deleted_while_the_gang_waits_is_waited_for_again() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where) as app:
        for i in range(3):
            where.create(gpu_pod(f"t-{i}", annotations=pfn("t", 4, timeout=100)))
        await eventually(lambda: app.permit.waiting, what="a reservation")
        where.delete_pod("team/t-0")
        where.create(gpu_pod("t-3", annotations=pfn("t", 4, timeout=100)))
        await eventually(lambda: says(where, "team/t-3", "holds room for 1 member(s)"), what="still one short")
        assert where.bound() == {}  # three members of a gang of four: nothing bound
        where.create(gpu_pod("t-4", annotations=pfn("t", 4, timeout=100)))
        await eventually(lambda: len(where.bound()) == 4, what="the gang of four bound")
        await check_invariants(where)


async def test_a_minimum_raised_while_the_gang_waits_is_what_it_waits_for() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where) as app:
        groups = await waiting_podgroup(where, app, minimum_now=6)
        where.create(gpu_pod("pg-3", labels={GROUP: "pg"}))
        await eventually(lambda: says(where, "team/pg-3", "holds room for 2 member(s)"), what="two short of six")
        assert where.bound() == {}
        # A gang that waits for members is Pending, as the README says (issue 25: it had no phase at all).
        await eventually(lambda: (where.store.get(groups, "team", "pg").get("status") or {}).get("phase") == "Pending",
                         what="the waiting group Pending")  # fmt: skip
        await check_invariants(where)


async def test_a_minimum_lowered_while_the_gang_waits_binds_it_at_once() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where) as app:
        await waiting_podgroup(where, app, minimum_now=3)
        await eventually(lambda: len(where.bound()) == 3, what="the three bound without waiting out the timeout")
        assert not app.permit.waiting and not [key for key in app.state.assumed if key.startswith("~placeholder")]
        await check_invariants(where)


async def test_members_released_with_their_own_hosts_one_by_one_wait_rather_than_look_impossible() -> None:
    """Kueue's TAS may give each pod its own node. Room for the others, guessed from the first one's node,
    cannot be held; that is no reason to call the gang unschedulable (cluster-autoscaler would act)."""
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where):
        for i in range(4):
            where.create(gpu_pod(f"tas-{i}", annotations=pfn("tas", 4), schedulingGates=TOPOLOGY))

        def release(i: int) -> None:
            body = {"spec": {"schedulingGates": None, "nodeSelector": {"kubernetes.io/hostname": f"b0-r1-n{i}"}}}
            where.store.patch(where.store.resource("v1", "Pod"), "team", f"tas-{i}", body, MERGE_PATCH)

        release(0)
        await eventually(lambda: says(where, "team/tas-0", "3 of 4 members are held by scheduling gates"))
        condition = where.condition("team/tas-0")
        assert condition is not None and condition["reason"] == "GangWaiting", condition
        assert not where.events("FailedScheduling")
        for i in range(1, 4):
            release(i)
        placed = await eventually(lambda: len(where.bound()) == 4 and where.bound(), what="the gang bound")
        assert placed == {f"team/tas-{i}": f"b0-r1-n{i}" for i in range(4)}
        await check_invariants(where)
