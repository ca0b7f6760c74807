"""A gang that cannot be placed only because members do not exist yet is waiting, not short of room.

``Unschedulable`` is what cluster-autoscaler acts on: said of a gang that only waits for its pods, it
buys nodes nobody needs. And the message names parts as the user's objects do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.ports.sim import read_manifest_file
from tests.scheduler.invariants import check_invariants
from tests.scheduler.support import cluster, eventually, phalanx

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
        check_invariants(where)


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
