"""Preemption end to end: kubernetes_asyncio over HTTP against SimCluster, asserting what an operator sees."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.ports.sim import MERGE_PATCH, FaultRule, Faults
from scheduler.ports.sim.builders import node_manifest
from scheduler.preemption import evictor
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import Cluster, cluster, eventually, gpu_pod, pfn, phalanx

RACK = "example.com/rack"


def rack_node(name: str, rack: str) -> dict[str, Any]:
    return node_manifest(
        name,
        labels={"example.com/block": "b0", RACK: rack},
        capacity={"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
    )


def two_racks() -> list[dict[str, Any]]:
    return [rack_node(f"{rack}-n{i}", rack) for rack in ("r0", "r1") for i in range(2)]


def priority_class(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
            **extra}  # fmt: skip


def member(name: str, gang: str, size: int, priority: str, *, rack: bool = False, **spec: Any) -> dict[str, Any]:
    annotations = pfn(gang, size)
    if rack:
        annotations["scheduling.phalanx.dev/topology-required"] = RACK
    return gpu_pod(name, annotations=annotations, priorityClassName=priority, **spec)


def classes(where: Cluster) -> None:
    where.create(priority_class("batch", 10))
    where.create(priority_class("production", 1000))
    where.create(priority_class("polite", 1000, preemptionPolicy="Never"))


async def fill_with_batch(where: Cluster, **spec: Any) -> None:
    """Two low-priority gangs of two 8-GPU pods, one per rack: the cluster is full."""
    for gang in ("batch-a", "batch-b"):
        for i in range(2):
            where.create(member(f"{gang}-{i}", gang, 2, "batch", rack=True, **spec))
    await eventually(lambda: len(where.bound()) == 4, what="the batch gangs bound")


def terminating(where: Cluster) -> set[str]:
    """Pods marked for deletion and not gone yet (no kubelet finishes them unless the test does)."""
    return {key for key, pod in where.pods().items() if pod["metadata"].get("deletionTimestamp")}


async def production_gang_preempts(where: Cluster) -> list[str]:
    """A production gang of two 8-GPU pods that requires one rack arrives; its victims, once marked."""
    for i in range(2):
        where.create(member(f"prod-{i}", "prod", 2, "production", rack=True))
    return sorted(await eventually(lambda: terminating(where), what="victims marked for deletion"))


def conditions(where: Cluster, pod: str, kind: str) -> list[dict[str, Any]]:
    return [c for c in (where.pods()[pod].get("status") or {}).get("conditions") or [] if c["type"] == kind]


async def test_a_production_gang_evicts_one_whole_batch_gang_in_one_rack_and_binds_there() -> None:
    async with cluster(nodes=two_racks(), graceful=True) as where, phalanx(where) as app:
        classes(where)
        await fill_with_batch(where)
        victims = set(await production_gang_preempts(where))
        assert victims in ({"team/batch-a-0", "team/batch-a-1"}, {"team/batch-b-0", "team/batch-b-1"})
        for victim in victims:
            (target,) = conditions(where, victim, "DisruptionTarget")
            assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
            assert target["message"] == "phalanx: preempted by gang pfn:team/prod to make room in rack " + (
                "r0" if "batch-a" in victim else "r1"
            )
        preempting = await eventually(lambda: where.events("Preempting"), what="Preempting Event")
        assert preempting[0]["type"] == "Normal"
        assert preempting[0]["regarding"]["name"] == "prod-0"
        victim_gang = "pfn:team/" + next(iter(victims)).split("/")[1][:7]
        assert "Preempting 2 pods of lower priority in rack r" in preempting[0]["note"]
        assert f"(2 of {victim_gang})" in preempting[0]["note"]
        await eventually(
            lambda: all(
                (where.pods()[f"team/prod-{i}"].get("status") or {}).get("nominatedNodeName") for i in range(2)
            ),
            what="nominatedNodeName on the preemptor's pods",
        )
        freed = {where.pods()[victim]["spec"]["nodeName"] for victim in victims}
        assert {where.pods()[f"team/prod-{i}"]["status"]["nominatedNodeName"] for i in range(2)} == freed
        assert not any(pod.startswith("team/prod") for pod in where.bound())  # the victims still terminate
        for victim in victims:
            where.finish_termination(victim)
        await eventually(lambda: {"team/prod-0", "team/prod-1"} <= set(where.bound()), what="the preemptor bound")
        prod_nodes = {where.bound()[f"team/prod-{i}"] for i in range(2)}
        assert len({node.split("-")[0] for node in prod_nodes}) == 1  # one rack
        preempted = await eventually(lambda: where.events("Preempted"), what="Preempted Events")
        assert {event["regarding"]["name"] for event in preempted} == {victim.split("/")[1] for victim in victims}
        assert app.metrics.registry.value("phalanx_preemption_victims_total", {"reason": "gang"}) == 2
        assert app.metrics.registry.value("phalanx_preemption_to_bind_seconds_count") == 1
        # The other batch gang is untouched, whole.
        survivors = {key for key in where.bound() if key.startswith("team/batch")}
        assert len(survivors) == 2 and len({key[:-2] for key in survivors}) == 1
        await check_invariants(where)


async def test_equal_priority_never_preempts_and_preemption_policy_never_says_so() -> None:
    async with cluster(nodes=two_racks()) as where, phalanx(where):
        classes(where)
        await fill_with_batch(where)
        where.create(member("peer-0", "peer", 1, "batch"))
        where.create(member("polite-0", "polite", 1, "polite"))
        peer = await eventually(lambda: where.condition("team/peer-0"), what="the peer pending")
        polite = await eventually(lambda: where.condition("team/polite-0"), what="the polite gang pending")
        assert "Preemption" not in peer["message"]  # nothing runs below its priority: nothing to say
        assert polite["message"].endswith(
            "Preemption cannot help: it may not preempt: its pod team/polite-0 has preemptionPolicy Never."
        )
        assert len(where.bound()) == 4 and not where.events("Preempting")
        await check_invariants(where)


async def test_the_surplus_of_an_elastic_gang_goes_first_and_its_minimum_stays() -> None:
    nodes = [rack_node(f"r0-n{i}", "r0") for i in range(4)]
    async with cluster(nodes=nodes) as where, phalanx(where):
        classes(where)
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "elastic", "namespace": "team"},
            "spec": {"minMember": 2},
        }
        where.create(group)
        for i in range(4):
            where.create(
                gpu_pod(f"elastic-{i}", labels={"scheduling.x-k8s.io/pod-group": "elastic"}, priorityClassName="batch")
            )
        await eventually(lambda: len(where.bound()) == 4, what="the elastic gang bound whole")
        for i in range(2):
            where.create(member(f"prod-{i}", "prod", 2, "production"))
        await eventually(lambda: {"team/prod-0", "team/prod-1"} <= set(where.bound()), what="the preemptor bound")
        elastic = [key for key in where.bound() if key.startswith("team/elastic")]
        assert len(elastic) == 2  # exactly its minimum is left running
        await check_invariants(where)


async def test_nominated_room_is_not_taken_by_a_lower_priority_gang_while_victims_terminate() -> None:
    async with cluster(nodes=two_racks(), graceful=True) as where, phalanx(where):
        classes(where)
        where.create(priority_class("middle", 500, preemptionPolicy="Never"))
        await fill_with_batch(where)
        victims = await production_gang_preempts(where)
        # One victim is gone: its node is free, but the preemptor needs both. A middle-priority gang that
        # fits on that one node may not take it.
        where.finish_termination(victims[0])
        where.create(member("middle-0", "middle", 1, "middle"))
        condition = await eventually(lambda: where.condition("team/middle-0"), what="the middle gang tried")
        assert condition["reason"] == "Unschedulable"
        assert "team/middle-0" not in where.bound()
        where.finish_termination(victims[1])
        await eventually(lambda: {"team/prod-0", "team/prod-1"} <= set(where.bound()), what="the preemptor bound")
        assert "team/middle-0" not in where.bound()
        await check_invariants(where)


async def test_a_higher_priority_gang_may_take_nominated_room() -> None:
    async with cluster(nodes=two_racks(), graceful=True) as where, phalanx(where):
        classes(where)
        where.create(priority_class("critical", 5000, preemptionPolicy="Never"))
        await fill_with_batch(where)
        victims = await production_gang_preempts(where)
        where.finish_termination(victims[0])
        where.create(member("critical-0", "critical", 1, "critical"))
        await eventually(lambda: "team/critical-0" in where.bound(), what="the critical gang bound in nominated room")
        await check_invariants(where)


@pytest.mark.parametrize(
    ("version", "mode", "left"),
    [
        ("v1alpha2", None, 2),
        ("v1alpha2", "Pod", 2),
        ("v1alpha2", "PodGroup", 0),  # 1.36: an enum
        ("v1beta1", {"single": {}}, 2),  # 1.37: a union
        ("v1beta1", {"all": {}}, 0),
    ],
)
async def test_an_upstream_pod_group_s_disruption_mode_decides_whether_its_surplus_may_go_alone(
    version: str, mode: str | dict[str, Any] | None, left: int
) -> None:
    nodes = [rack_node(f"r0-n{i}", "r0") for i in range(4)]
    async with cluster(nodes=nodes) as where, phalanx(where):
        classes(where)
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
        if mode is not None:
            spec["disruptionMode"] = mode
        where.create({"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
                      "metadata": {"name": "elastic", "namespace": "team"}, "spec": spec})  # fmt: skip
        for i in range(4):
            where.create(
                gpu_pod(f"elastic-{i}", priorityClassName="batch", schedulingGroup={"podGroupName": "elastic"})
            )
        await eventually(lambda: len(where.bound()) == 4, what="the elastic group bound whole")
        for i in range(2):
            where.create(member(f"prod-{i}", "prod", 2, "production"))
        await eventually(lambda: {"team/prod-0", "team/prod-1"} <= set(where.bound()), what="the preemptor bound")
        assert len([key for key in where.bound() if key.startswith("team/elastic")]) == left
        await check_invariants(where)


async def test_a_group_whose_priority_class_never_preempts_says_so_and_evicts_nothing() -> None:
    async with cluster(nodes=two_racks()) as where, phalanx(where):
        classes(where)
        await fill_with_batch(where)
        where.create({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                      "metadata": {"name": "polite", "namespace": "team"},
                      "spec": {"minMember": 1, "priorityClassName": "polite"}})  # fmt: skip
        where.create(gpu_pod("polite-0", annotations={"scheduling.k8s.io/group-name": "polite"}))
        condition = await eventually(lambda: where.condition("team/polite-0"), what="the polite gang pending")
        assert condition["message"].endswith(
            "Preemption cannot help: it may not preempt: its PriorityClass polite has preemptionPolicy Never."
        )
        assert len(where.bound()) == 4 and not where.events("Preempting")
        await check_invariants(where)


async def test_a_running_gang_whose_group_was_deleted_is_still_evicted_whole() -> None:
    nodes = [rack_node(f"r0-n{i}", "r0") for i in range(2)]
    async with cluster(nodes=nodes) as where, phalanx(where):
        classes(where)
        group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "train", "namespace": "team"}, "spec": {"minMember": 2}}  # fmt: skip
        where.create(group)
        for i in range(2):
            where.create(gpu_pod(f"train-{i}", labels={"scheduling.x-k8s.io/pod-group": "train"},
                                 priorityClassName="batch"))  # fmt: skip
        await eventually(lambda: len(where.bound()) == 2, what="the gang bound")
        groups = where.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
        where.monitor.user_deleted("team/train-0")  # the user breaks its definition: its minimum is theirs
        where.store.delete(groups, "team", "train")
        where.create(member("prod-0", "prod", 1, "production"))
        await eventually(lambda: "team/prod-0" in where.bound(), what="the preemptor bound")
        assert not any(key.startswith("team/train") for key in where.pods())  # both went, not one
        await check_invariants(where)


async def test_a_stale_nomination_is_cleared_so_its_room_is_not_held_forever() -> None:
    nodes = [rack_node(f"r0-n{i}", "r0") for i in range(2)]
    async with cluster(nodes=nodes) as where:
        classes(where)
        where.create(priority_class("system", 5000))
        where.create(gpu_pod("infra-0", scheduler="default-scheduler", priorityClassName="system", nodeName="r0-n0"))
        where.create(gpu_pod("infra-1", scheduler="default-scheduler", priorityClassName="system",
                             nodeName="r0-n1", gpus=4))  # fmt: skip
        # An earlier leader nominated prod-0 to r0-n1; nothing terminates there and nothing can be preempted.
        where.create(member("prod-0", "prod", 1, "production"))
        where.store.patch(where.store.resource("v1", "Pod"), "team", "prod-0",
                          {"status": {"nominatedNodeName": "r0-n1"}},
                          "application/strategic-merge-patch+json", subresource="status")  # fmt: skip
        async with phalanx(where):
            where.create(member("small-0", "small", 1, "batch", gpus=4))
            await eventually(lambda: "team/small-0" in where.bound(), what="the batch pod bound in the room")
            await eventually(
                lambda: not (where.pods()["team/prod-0"].get("status") or {}).get("nominatedNodeName"),
                what="the stale nomination cleared",
            )
            await check_invariants(where)


async def test_victims_whose_deletion_fails_for_a_while_still_all_go(monkeypatch: pytest.MonkeyPatch) -> None:
    # Half the writes fail: with the deployed backoff (up to 10 s a retry) a run of failures could outlast any
    # bound a loaded machine meets. The pace of retries is not what is tested here.
    monkeypatch.setattr(evictor, "_LAST_RETRY", 0.5)
    faults = Faults(seed=4)
    async with cluster(nodes=two_racks(), faults=faults) as where, phalanx(where) as app:
        classes(where)
        await fill_with_batch(where)
        faults.rules.append(FaultRule(verbs=frozenset({"delete", "patch"}), error_rate=0.5, codes=(500, 503, 409)))
        for i in range(2):
            where.create(member(f"prod-{i}", "prod", 2, "production", rack=True))
        await eventually(lambda: {"team/prod-0", "team/prod-1"} <= set(where.bound()),
                         what="the preemptor bound")  # fmt: skip
        assert faults.injected, "no deletion failed: the test proves nothing"
        survivors = [key for key in where.bound() if key.startswith("team/batch")]
        assert len(survivors) == 2 and len({key[:-2] for key in survivors}) == 1  # one whole gang left
        assert app.metrics.registry.value("phalanx_preemption_victims_total", {"reason": "gang"}) == 2
        await check_invariants(where)


async def test_a_victim_whose_delete_keeps_failing_is_deleted_once_it_can_be_and_is_nobody_else_s_victim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 24, made deterministic: the preemptor needs two of the three nodes of a batch gang; the DELETE of
    its third pod fails until the test lifts the fault. The preemptor binds on the two freed nodes while the
    third pod still runs (its gang below its minimum, mid-eviction). The evictor keeps at it; no later
    preemptor takes that pod as a unit of its own; once the API accepts the DELETE, the gang is gone whole."""
    monkeypatch.setattr(evictor, "_LAST_RETRY", 0.5)  # the retries' pace is not what is tested
    faults = Faults(seed=1)
    async with cluster(nodes=two_racks(), faults=faults) as where, phalanx(where) as app:
        classes(where)
        where.create(member("keeper-0", "keeper", 1, "production", nodeName="r1-n1"))
        for i in range(3):
            where.create(member(f"wide-{i}", "wide", 3, "batch"))
        await eventually(lambda: len(where.bound()) == 4, what="the cluster full")
        stuck = "team/wide-2"
        faults.failing[("delete", stuck)] = 503
        for i in range(2):
            where.create(member(f"prod-{i}", "prod", 2, "production"))
        await eventually(
            lambda: {"team/prod-0", "team/prod-1"} <= set(where.bound()),
            what="the preemptor bound on the two nodes freed",
        )
        assert stuck in where.bound() and not app.evictor.idle  # mid-eviction: its gang is below its minimum
        stuck_node = where.bound()[stuck]
        where.create(member("late-0", "late", 1, "production"))
        late = await eventually(lambda: where.condition("team/late-0"), what="the late gang pending")
        assert "1 pod of lower priority is being evicted for other gangs already" in late["message"]
        assert app.metrics.registry.value("phalanx_preemption_attempts_total", {"result": "preempted"}) == 1
        del faults.failing[("delete", stuck)]
        await eventually(lambda: "team/late-0" in where.bound(), what="the late gang bound where it went")
        assert where.bound()["team/late-0"] == stuck_node
        assert not any(key.startswith("team/wide") for key in where.bound())
        await eventually(lambda: app.evictor.idle, what="the evictor done")
        await check_invariants(where)


def mark_as_victim(where: Cluster, pod: str, preemptor: str = "pfn:prod/llm") -> None:
    """Write the condition a leader's evictor writes first, as if that leader then lost its lease."""
    namespace, name = pod.split("/")
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": f"phalanx: preempted by gang {preemptor} to make room in rack r0",
        "lastTransitionTime": "2026-11-25T10:00:00Z",
    }
    where.store.patch(
        where.store.resource("v1", "Pod"),
        namespace,
        name,
        {"status": {"conditions": [condition]}},
        MERGE_PATCH,
        subresource="status",
    )


async def test_a_new_leader_finishes_the_evictions_its_predecessor_began_whole_units_and_surplus_alone() -> None:
    async with cluster(nodes=two_racks(), graceful=True) as where:
        classes(where)
        nodes = ["r0-n0", "r0-n1", "r1-n0", "r1-n1"]
        for i in range(3):  # a gang that must run whole, one of whose pods a leader marked before it died
            where.create(member(f"wide-{i}", "wide", 3, "batch", nodeName=nodes[i], gpus=4))
        for i in range(3):  # an elastic gang (minimum 2) whose surplus pod was marked
            where.create(member(f"elastic-{i}", "elastic", 2, "batch", nodeName=nodes[i], gpus=4))
        where.create(member("plain-0", "plain", 1, "batch", nodeName="r1-n1"))
        mark_as_victim(where, "team/wide-0")
        mark_as_victim(where, "team/elastic-2")
        async with phalanx(where) as app:
            going = {"team/wide-0", "team/wide-1", "team/wide-2", "team/elastic-2"}
            await eventually(
                lambda: terminating(where) == going,
                what=lambda: f"the whole marked gang and the surplus pod going, not {terminating(where)}",
            )
            # A mark that lands after this leader took over (the old one's write was still in flight).
            mark_as_victim(where, "team/plain-0")
            await eventually(lambda: "team/plain-0" in terminating(where), what="the late-marked pod")
            assert app.metrics.registry.value("phalanx_preemption_victims_resumed_total") == 5
            await eventually(lambda: len(where.events("Preempted")) == 5, what="a Preempted Event on each pod")
            preempted = {event["regarding"]["name"] for event in where.events("Preempted")}
            assert preempted == {"wide-0", "wide-1", "wide-2", "elastic-2", "plain-0"}
            await eventually(lambda: app.evictor.idle, what="the evictor done")
            assert terminating(where) == {*going, "team/plain-0"}
        await check_invariants(where)


@pytest.mark.parametrize("policy", [{"gang": {"minCount": 3}}, {"basic": {}}])
async def test_members_beyond_a_gang_s_minimum_preempt_lower_priorities_as_any_pod_would(
    policy: dict[str, Any],
) -> None:
    """Issue 25, from upstream's own gang tests: a gang of 4 (minCount 3) on a node full of lower-priority
    pods evicted 3, bound 3, and left its 4th waiting for ever beside a pod it could have evicted; a `basic`
    group (no gang) never preempted at all."""
    async with cluster(nodes=[rack_node("r0-n0", "r0")]) as where, phalanx(where):
        classes(where)
        for i in range(8):
            where.create(gpu_pod(f"small-{i}", gpus=1, scheduler="default-scheduler", nodeName="r0-n0",
                                 priorityClassName="batch"))  # fmt: skip
        group = {"name": "four", "namespace": "team"}
        # The group's own class: a 1.36 server gives a PodGroup without one priority 0, whatever its pods say.
        where.create({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": group,
                      "spec": {"schedulingPolicy": policy, "priorityClassName": "production"}})  # fmt: skip
        for i in range(4):
            where.create(gpu_pod(f"four-{i}", gpus=1, priorityClassName="production",
                                 schedulingGroup={"podGroupName": "four"}))  # fmt: skip

        def all_bound() -> bool:
            for key in terminating(where):  # a kubelet finishes each victim
                where.finish_termination(key)
            return {f"team/four-{i}" for i in range(4)} <= set(where.bound())

        await eventually(all_bound, what=lambda: f"all four bound, got {sorted(where.bound())}")
        assert len([key for key in where.bound() if key.startswith("team/small")]) == 4  # no more victims than needed
        await check_invariants(where)


async def test_a_new_leader_finishes_a_group_that_goes_only_whole_even_when_its_minimum_would_stay() -> None:
    async with cluster(nodes=two_racks(), graceful=True) as where:
        classes(where)
        where.create({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                      "metadata": {"name": "whole", "namespace": "team"},
                      "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}},
                               "priorityClassName": "batch"}})  # fmt: skip
        for i, node in enumerate(["r0-n0", "r0-n1", "r1-n0"]):
            where.create(gpu_pod(f"whole-{i}", priorityClassName="batch", nodeName=node,
                                 schedulingGroup={"podGroupName": "whole"}))  # fmt: skip
        mark_as_victim(where, "team/whole-0")  # the old leader marked one of three, then lost its lease
        async with phalanx(where) as app:
            going = {"team/whole-0", "team/whole-1", "team/whole-2"}
            await eventually(lambda: terminating(where) == going, what=lambda: f"all three going: {terminating(where)}")
            await eventually(lambda: app.evictor.idle, what="the evictor done")
        await check_invariants(where)
