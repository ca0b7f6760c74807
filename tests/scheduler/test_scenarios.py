"""The scheduler end to end: kubernetes_asyncio over HTTP against SimCluster, asserting end states and Events."""

import pytest

from scheduler import informers
from scheduler.ports.sim import FaultRule, Faults
from scheduler.ports.sim.builders import node_manifest
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import WAKES_ONLY, cluster, eventually, gpu_pod, pfn, phalanx


def capacity_node(name: str, rack: str = "b0-r0", block: str = "b0") -> dict:  # type: ignore[type-arg]
    return node_manifest(
        name,
        labels={"example.com/block": block, "example.com/rack": rack},
        capacity={"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
    )


async def test_a_gang_of_four_where_three_fit_binds_nothing_then_all_as_soon_as_a_node_is_added() -> None:
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(3)]) as where, phalanx(where, WAKES_ONLY):
        for i in range(4):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 4)))
        condition = await eventually(lambda: where.condition("team/w0"), what="PodScheduled condition")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"] == (
            "3/3 nodes are available. Gang team/train needs 4 pods; the cluster could hold at most 3 of this shape "
            "even if it were empty: each node holds at most 1 (nvidia.com/gpu 8 of 8)."
        )
        await eventually(lambda: where.events("FailedScheduling"), what="FailedScheduling Event")
        assert where.bound() == {}
        where.store.restore(where.store.resource("v1", "Node"), capacity_node("n3"))
        await eventually(lambda: len(where.bound()) == 4, what="all four bound, woken by the node")
        await check_invariants(where)


async def test_a_partial_gang_holds_room_and_binds_when_its_last_member_arrives() -> None:
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(4)]) as where, phalanx(where) as app:
        for i in range(3):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 4)))
        await eventually(lambda: app.permit.waiting, what="a reservation")
        # Once all three are seen (a first one seen alone is told it would hold more room than it may).
        holds_for_one = "holds room for 1 member(s) that do not exist yet"
        await eventually(lambda: any(holds_for_one in e["note"] for e in where.events("GangWaiting")), what="its Event")
        where.create(gpu_pod("other", annotations=pfn("other", 1)))  # the held room is not free for others
        await eventually(lambda: where.condition("team/other"), what="the other gang pending")
        assert where.bound() == {}
        where.create(gpu_pod("w3", annotations=pfn("train", 4)))
        bound = await eventually(lambda: len(where.bound()) == 4 and where.bound(), what="the gang bound")
        assert set(bound) == {f"team/w{i}" for i in range(4)}
        await check_invariants(where)


def plugins_group(name: str, min_member: int) -> dict:  # type: ignore[type-arg]
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"minMember": min_member},
    }


async def test_a_scheduler_plugins_group_of_five_with_min_three_binds_the_three_that_fit() -> None:
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(3)]) as where, phalanx(where):
        where.create(plugins_group("etl", 3))
        for i in range(5):
            where.create(gpu_pod(f"etl-{i}", labels={"scheduling.x-k8s.io/pod-group": "etl"}))
        await eventually(lambda: len(where.bound()) == 3, what="three bound")
        pending = [f"team/etl-{i}" for i in range(5)]
        await eventually(
            lambda: sum(1 for pod in pending if (where.condition(pod) or {}).get("status") == "False") == 2,
            what="two pending",
        )
        groups = where.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
        status = await eventually(lambda: where.store.get(groups, "team", "etl").get("status"), what="group status")
        assert status["phase"] == "Scheduled" and set(status) == {"phase", "scheduleStartTime"}
        await check_invariants(where)


async def test_pods_of_other_schedulers_use_capacity_and_are_never_touched() -> None:
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(2)]) as where, phalanx(where):
        foreign = gpu_pod("theirs", scheduler="default-scheduler", nodeName="n0")
        where.create(foreign)
        where.create(gpu_pod("pending-theirs", scheduler="default-scheduler"))
        for i in range(2):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
        await eventually(lambda: where.condition("team/w0"), what="the gang pending")
        assert set(where.bound()) == {"team/theirs"}
        where.store.delete(where.store.resource("v1", "Pod"), "team", "theirs")
        await eventually(lambda: {"team/w0", "team/w1"} <= set(where.bound()), what="the gang bound once room is freed")
        assert "team/pending-theirs" not in where.bound()
        await check_invariants(where)


async def test_an_invalid_gang_stays_pending_with_its_reason_while_others_bind() -> None:
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(2)]) as where, phalanx(where):
        bad = pfn("broken", 2)
        bad["gang-scheduling.preferred.jp/gang-size"] = "two"
        where.create(gpu_pod("bad", annotations=bad))
        where.create(gpu_pod("good", annotations=pfn("fine", 1)))
        await eventually(lambda: "team/good" in where.bound(), what="the valid gang bound")
        condition = await eventually(lambda: where.condition("team/bad"), what="the invalid pod's condition")
        assert (condition["reason"], condition["message"]) == (
            "SchedulerError",
            "Pod team/bad: metadata.annotations[gang-scheduling.preferred.jp/gang-size] is 'two'; "
            "the gang size must be an integer of at least 1",
        )
        event = await eventually(lambda: where.events("InvalidGang"), what="InvalidGang Event")
        assert event[0]["type"] == "Warning" and event[0]["regarding"]["name"] == "bad"
        assert "team/bad" not in where.bound()
        await check_invariants(where)


async def test_a_paged_list_counts_every_bound_pod_on_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informers, "PAGE", 2)  # nodes and pods both arrive over several pages
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(5)]) as where:
        for i in range(4):  # another scheduler's pods fill four of the five nodes before Phalanx starts
            where.create(gpu_pod(f"other-{i}", scheduler="other", nodeName=f"n{i}"))
        async with phalanx(where):
            for i in range(2):
                where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
            condition = await eventually(lambda: where.condition("team/w0"), what="PodScheduled condition")
            assert condition["message"].startswith("1/5 nodes are available: 4 Insufficient nvidia.com/gpu.")
            assert where.bound().keys() == {f"team/other-{i}" for i in range(4)}
            await check_invariants(where)


async def test_a_paged_list_whose_next_page_fails_starts_again_and_misses_no_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next page is asked for while one is applied; when that request fails (an expired continue token,
    a server error), the list starts again, as when it failed in turn, and every pod is counted."""
    monkeypatch.setattr(informers, "PAGE", 2)
    faults = Faults(seed=3, rules=[FaultRule(verbs=frozenset({"list"}), resources=frozenset({"pods"}),
                                             error_rate=0.3, codes=(410, 500))])  # fmt: skip
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(5)], faults=faults) as where:
        for i in range(4):
            where.create(gpu_pod(f"other-{i}", scheduler="other", nodeName=f"n{i}"))
        async with phalanx(where):
            for i in range(2):
                where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
            condition = await eventually(lambda: where.condition("team/w0"), what="PodScheduled condition")
            assert condition["message"].startswith("1/5 nodes are available: 4 Insufficient nvidia.com/gpu.")
            assert faults.injected, "no list failed: the test did not test a failed page"
            await check_invariants(where)


async def test_extras_and_a_replacement_join_a_running_gang_only_inside_its_required_rack() -> None:
    r0 = [capacity_node(f"n{i}", rack="b0-r0") for i in range(3)]
    r1 = [capacity_node(f"m{i}", rack="b0-r1") for i in range(4)]
    async with cluster(nodes=r0 + r1) as where, phalanx(where) as app:
        foreign = {"n2", "m0", "m1", "m2", "m3"}  # only n0 and n1 are free: rack r0 fits the minimum of two
        for node in sorted(foreign):
            where.create(gpu_pod(f"other-{node}", scheduler="other", nodeName=node))
        group = plugins_group("etl", 2)
        group["metadata"]["annotations"] = {"scheduling.phalanx.dev/topology-required": "example.com/rack"}
        where.create(group)
        for i in range(4):
            where.create(gpu_pod(f"etl-{i}", labels={"scheduling.x-k8s.io/pod-group": "etl"}))
        await eventually(lambda: len(gang_nodes(where)) == 2, what="the minimum bound")
        assert set(gang_nodes(where).values()) == {"n0", "n1"}

        def failed_attempts() -> float:
            return app.metrics.registry.value("phalanx_schedule_attempts_total", {"result": "unschedulable"})

        async def free(node: str) -> None:
            before = failed_attempts()
            where.store.delete(where.store.resource("v1", "Pod"), "team", f"other-{node}")
            await eventually(lambda: failed_attempts() > before, what=f"the gang tried again after {node} was freed")

        for node in ("m0", "m1", "m2", "m3"):  # a whole empty rack, but not the gang's
            await free(node)
        assert set(gang_nodes(where).values()) == {"n0", "n1"}
        await free("n2")  # room in the gang's rack: one extra joins
        await eventually(lambda: "n2" in gang_nodes(where).values(), what="an extra bound in rack r0")

        pods = where.store.resource("v1", "Pod")
        extra = next(f"etl-{i}" for i in range(4) if f"team/etl-{i}" not in gang_nodes(where))
        where.delete_pod(f"team/{extra}")  # the gang now has no pending member
        replaced = next(pod for pod, node in gang_nodes(where).items() if node == "n0")
        where.delete_pod(replaced)  # a member fails; its node is taken by others
        where.create(gpu_pod("other-n0", scheduler="other", nodeName="n0"))
        where.create(gpu_pod("etl-4", labels={"scheduling.x-k8s.io/pod-group": "etl"}))
        condition = await eventually(lambda: where.condition("team/etl-4"), what="the replacement pending")
        assert "inside the domains the gang already uses" in condition["message"]
        assert sorted(gang_nodes(where).values()) == ["n1", "n2"]  # not on the empty rack r1
        where.store.delete(pods, "team", "other-n0")
        await eventually(lambda: gang_nodes(where).get("team/etl-4") == "n0", what="the replacement bound on n0")
        await check_invariants(where)


def gang_nodes(where) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {pod: node for pod, node in where.bound().items() if pod.startswith("team/etl-")}


async def test_a_gang_too_big_for_the_cluster_that_also_lacks_members_says_both() -> None:
    async with cluster(nodes=[capacity_node(f"n{i}") for i in range(4)]) as where, phalanx(where):
        for i in range(2):  # half the cluster runs pods of another scheduler
            where.create(gpu_pod(f"other-{i}", scheduler="other", nodeName=f"n{i}"))
        where.create(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "big", "namespace": "team"},
                "spec": {"minMember": 3},
            }
        )
        where.create(gpu_pod("big-0", labels={"scheduling.x-k8s.io/pod-group": "big"}))
        condition = await eventually(lambda: where.condition("team/big-0"), what="the pending condition")
        assert condition["message"] == (
            "2/4 nodes are available: 2 Insufficient nvidia.com/gpu. Gang team/big needs 3 pods; the cluster fits 2: "
            "each node holds at most 1 (nvidia.com/gpu 8 of 8). "
            "It also waits for 2 member(s) that do not exist yet."
        )
        await check_invariants(where)
