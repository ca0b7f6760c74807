"""A gang that cannot be placed only because members do not exist yet is waiting, not short of room.

``Unschedulable`` is what cluster-autoscaler acts on: said of a gang that only waits for its pods, it
buys nodes nobody needs. And the message names parts as the user's objects do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.ports.sim import read_manifest_file
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import cluster, eventually, gpu_pod, pfn, phalanx

EXAMPLE = Path(__file__).parents[2] / "examples" / "volcano" / "kthena-prefill-decode.yaml"


def kthena_without(role_id: str) -> list[dict[str, Any]]:
    """The Kthena example with the pods of one role replica not created yet."""
    return [
        obj
        for obj in read_manifest_file(str(EXAMPLE))
        if ((obj["metadata"].get("labels") or {}).get("modelserving.volcano.sh/role-id") != role_id)
    ]


async def test_a_volcano_subgroup_with_no_pods_yet_makes_the_gang_wait_on_an_empty_cluster() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where) as app:
        for obj in kthena_without("prefill-1"):
            where.create(obj)
        condition = await eventually(lambda: where.condition("serving/sample-0-prefill-0-0"), what="a decision")
        assert (condition["status"], condition["reason"]) == ("False", "GangWaiting")
        assert condition["message"] == (
            "Gang volcano:serving/sample-0 waits for members that do not exist yet: 2 pods of "
            "serving/sample-0/prefill (subgroup 2 of 2). The members that exist fit now."
        )
        events = await eventually(lambda: where.events("GangWaiting"), what="its Event")
        assert {e["regarding"]["kind"] for e in events} == {"PodGroup"}
        assert not where.events("FailedScheduling") and where.bound() == {}
        assert not app.state.assumed  # nothing is held for pods whose needs nobody knows yet

        for obj in read_manifest_file(str(EXAMPLE)):  # the missing replica is created: the gang binds
            if obj["metadata"].get("labels", {}).get("modelserving.volcano.sh/role-id") == "prefill-1":
                where.create(obj)
        pods = [obj for obj in read_manifest_file(str(EXAMPLE)) if obj["kind"] == "Pod"]
        await eventually(lambda: len(where.bound()) == len(pods), what="the whole gang bound")
        await check_invariants(where)


async def test_a_gang_that_waits_for_members_and_would_not_fit_says_both() -> None:
    async with cluster("blocks=1,racks=2,nodes=1,gpus=8") as where, phalanx(where):
        for obj in kthena_without("prefill-1"):
            where.create(obj)
        condition = await eventually(lambda: where.condition("serving/sample-0-prefill-0-0"), what="a decision")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"].endswith(
            "It also waits for members that do not exist yet: 2 pods of serving/sample-0/prefill (subgroup 2 of 2)."
        )
        assert "missing" not in condition["message"]


async def test_a_48_pod_gang_gathering_its_members_writes_one_waiting_event_not_one_per_arrival() -> None:
    """Issue 25: `kubectl describe` of a 48-pod Job's first pod listed 33 GangWaiting Events, one per count of
    missing members, though the gang bound 1.5 s after it was applied."""
    async with cluster("blocks=1,racks=2,nodes=8,gpus=8") as where, phalanx(where):
        for i in range(47):  # arriving one by one, as a Job controller creates them, each one seen
            where.create(gpu_pod(f"job-{i}", gpus=1, annotations=pfn("job", 48)))
            await eventually(lambda i=i: f" {47 - i} member(s)" in (where.condition("team/job-0") or {}).get(
                "message", ""), what=f"the gang told it lacks {47 - i}")  # fmt: skip
        where.create(gpu_pod("job-47", gpus=1, annotations=pfn("job", 48)))
        await eventually(lambda: len(where.bound()) == 48, what="the gang bound")
        waiting = [e for e in where.events("GangWaiting") if e["regarding"]["name"] == "job-0"]
        assert len(waiting) <= 1, [e["note"] for e in waiting]
        await check_invariants(where)


async def test_a_gang_whose_declared_resources_no_cluster_could_hold_says_that_before_anything_about_held_room() -> (
    None
):
    """Issue 25: a 160-GPU group on a 128-GPU cluster was first told "room held for waiting gangs is at its
    limit" (another gang held room) instead of that the cluster could never hold it."""
    async with cluster("blocks=1,racks=2,nodes=8,gpus=8") as where, phalanx(where) as app:
        for i in range(3):
            where.create(gpu_pod(f"hold-{i}", annotations=pfn("hold", 10)))
        await eventually(lambda: app.permit.waiting, what="another gang holding room")
        where.create({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": {"name": "big", "namespace": "team"},
                      "spec": {"minMember": 20, "minResources": {"nvidia.com/gpu": "160"}}})  # fmt: skip
        for i in range(3):
            where.create(gpu_pod(f"big-{i}", gpus=2, labels={"scheduling.x-k8s.io/pod-group": "big"}))
        condition = await eventually(lambda: where.condition("team/big-0"), what="the big gang told")
        said = "Gang scheduler-plugins:team/big declares minResources more than the cluster's nodes have"
        assert condition["message"].startswith(f"{said}: nvidia.com/gpu 160 (allocatable: 128)")


async def test_a_volcano_group_placed_in_steps_says_how_many_of_its_pods_are_placed_in_all() -> None:
    """A Volcano PodGroup of 8 bound pods said "1 pod(s) placed" in its condition: the last step's count."""
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "grow", "namespace": "team"},
        "spec": {"minMember": 2},
    }
    named = {"scheduling.k8s.io/group-name": "grow"}
    groups = ("scheduling.volcano.sh/v1beta1", "PodGroup")
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where):
        where.create(group)
        for i in range(2):
            where.create(gpu_pod(f"grow-{i}", gpus=1, annotations=named))
        await eventually(lambda: len(where.bound()) == 2, what="the minimum bound")
        where.create(gpu_pod("grow-2", gpus=1, annotations=named))

        def said() -> str:
            found = where.store.get(where.store.resource(*groups), "team", "grow")
            scheduled = [c for c in (found.get("status") or {}).get("conditions") or [] if c["type"] == "Scheduled"]
            return str(scheduled[0].get("message", "")) if scheduled else ""

        await eventually(lambda: said() == "1 more pod(s) placed, 3 in all", what=lambda: f"the condition: {said()}")
        await check_invariants(where)
