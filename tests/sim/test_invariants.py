"""The invariant monitor catches each kind of violation the reliability tests rely on it to catch."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from scheduler.gangs import GangKey
from scheduler.gangs.gang_settings import GangSettings
from scheduler.ports.sim import ClusterShape, Store, load
from scheduler.simulation.oracle import InvariantMonitor
from scheduler.state import Assumption
from tests.scheduler.support import LEVELS, TALLY, Tally, cluster, gpu_pod, pfn

PODS_RESOURCE = ("v1", "Pod")


def watched(shape: str = "blocks=1,racks=1,nodes=2,gpus=8") -> tuple[Store, InvariantMonitor]:
    store = Store(seed=3)
    load(store, ClusterShape.parse(shape).node_manifests())
    store.ensure_namespace("team")
    return store, InvariantMonitor(store, gang_settings=GangSettings(levels=LEVELS))


def create(store: Store, pod: dict[str, Any]) -> None:
    store.create(store.resource(*PODS_RESOURCE), "team", pod)


def bind(store: Store, name: str, node: str) -> None:
    store.bind("team", name, {"target": {"name": node}})


def test_a_clean_run_has_no_violations_and_counts_its_checks() -> None:
    store, monitor = watched()
    for i in range(2):
        create(store, gpu_pod(f"w{i}", annotations=pfn("train", 2)))
        bind(store, f"w{i}", f"b0-r0-n{i}")
    assert monitor.check_gangs() == [] and monitor.violations == []
    assert monitor.checks["bind"] == 2 and monitor.checks["node capacity"] == 2


def test_a_bind_beyond_allocatable_is_caught_at_that_moment() -> None:
    store, monitor = watched()
    create(store, gpu_pod("a", gpus=6))
    create(store, gpu_pod("b", gpus=6))
    bind(store, "a", "b0-r0-n0")
    bind(store, "b", "b0-r0-n0")
    assert monitor.violations == ["node b0-r0-n0 over-committed: nvidia.com/gpu 12 > 8"]


def test_room_a_scheduler_still_assumes_counts_against_a_bind() -> None:
    store, monitor = watched()
    request = {"nvidia.com/gpu": 4}
    app: Any = SimpleNamespace(
        state=SimpleNamespace(assumed={"team/held": Assumption("b0-r0-n0", request, GangKey("pfn:team/h"), None)})  # type: ignore[arg-type]
    )
    monitor.apps.append(app)
    create(store, gpu_pod("held", gpus=4))
    create(store, gpu_pod("c", gpus=6))
    bind(store, "c", "b0-r0-n0")
    assert monitor.violations == ["node b0-r0-n0 over-committed: nvidia.com/gpu 10 > 8"]


def over_commit_beside(squatter: str, *, seen: bool) -> list[str]:
    """What the monitor says when Phalanx binds a pod beside ``squatter``, bound by another scheduler, on a full
    node; ``seen``: whether Phalanx had seen the squatter there."""
    store, monitor = watched()
    known = {f"team/{squatter}": "b0-r0-n0"} if seen else {}
    monitor.apps.append(SimpleNamespace(state=SimpleNamespace(assumed={}, bound_node=known.get)))  # type: ignore[arg-type]
    create(store, gpu_pod(squatter, scheduler="default-scheduler", nodeName="b0-r0-n0"))
    create(store, gpu_pod("ours"))
    bind(store, "ours", "b0-r0-n0")
    return monitor.violations


def test_an_over_commit_names_the_pods_bound_by_others_that_phalanx_had_not_seen() -> None:
    """A scheduler deciding from its cache cannot know of a bind it was not shown yet: the violation says so,
    so that the scenario that bound the pod itself is mended (``Cluster.create_bound``), not the scheduler."""
    assert over_commit_beside("squatter", seen=True) == ["node b0-r0-n0 over-committed: nvidia.com/gpu 16 > 8"]
    assert over_commit_beside("squatter", seen=False) == [
        "node b0-r0-n0 over-committed: nvidia.com/gpu 16 > 8"
        " (with pods bound by others that Phalanx had not seen when this bind landed: team/squatter)"
    ]


async def test_the_run_summary_counts_the_violations_monitors_found() -> None:
    before = (TALLY.violations, TALLY.provoked)
    async with cluster("blocks=1,racks=1,nodes=1,gpus=8", provoked=True) as where:
        for name in ("a", "b"):
            where.create(gpu_pod(name, gpus=6))
            where.store.bind("team", name, {"target": {"name": "b0-r0-n0"}})
        assert where.monitor.violations == ["node b0-r0-n0 over-committed: nvidia.com/gpu 12 > 8"]
    assert (TALLY.violations, TALLY.provoked) == (before[0] + 1, before[1] + 1)
    assert Tally(Counter(bind=2), violations=1).line() == "invariant checks: bind 2; violations 1"
    assert Tally(Counter(bind=2), violations=3, provoked=1).line() == (
        "invariant checks: bind 2; violations 2 (and 1 provoked on purpose by tests that check the monitor finds them)"
    )


def test_a_pod_of_another_scheduler_bound_is_a_violation_unless_announced() -> None:
    store, monitor = watched()
    create(store, gpu_pod("theirs", scheduler="default-scheduler"))
    create(store, gpu_pod("announced", scheduler="default-scheduler"))
    create(store, gpu_pod("placed", scheduler="default-scheduler", nodeName="b0-r0-n1"))  # created bound: fine
    monitor.others_may_bind("team/announced")
    bind(store, "theirs", "b0-r0-n0")
    bind(store, "announced", "b0-r0-n0")
    assert monitor.violations == ["pod team/theirs of scheduler default-scheduler was bound"]


def test_a_gang_below_its_minimum_is_reported_unless_the_user_deleted_members() -> None:
    store, monitor = watched("blocks=1,racks=1,nodes=4,gpus=8")
    for gang in ("half", "deleted"):
        for i in range(3):
            create(store, gpu_pod(f"{gang}-{i}", annotations=pfn(gang, 3)))
    bind(store, "half-0", "b0-r0-n0")
    for i in range(3):
        bind(store, f"deleted-{i}", f"b0-r0-n{i + 1}")
    monitor.user_deleted("team/deleted-2")
    store.delete(store.resource(*PODS_RESOURCE), "team", "deleted-2")
    assert monitor.check_gangs() == ["gang pfn:team/half: part team/half has 1 bound, below its minimum 3"]


def test_a_gang_with_a_member_bound_to_a_node_already_deleted_may_end_below_its_minimum() -> None:
    """A bind that raced the node's deletion: the scheduler placed the gang before it saw the node go, the
    server bound the first member there (as a real one binds to a node that is not there), and the rest
    was not bound. Losing the node is not the scheduler's doing; a gang half bound to nodes that exist is."""
    store, monitor = watched("blocks=1,racks=1,nodes=4,gpus=8")
    for gang in ("raced", "half"):
        for i in range(2):
            create(store, gpu_pod(f"{gang}-{i}", annotations=pfn(gang, 2)))
    store.delete(store.resource("v1", "Node"), None, "b0-r0-n0")
    bind(store, "raced-0", "b0-r0-n0")
    bind(store, "half-0", "b0-r0-n1")
    assert monitor.check_gangs() == ["gang pfn:team/half: part team/half has 1 bound, below its minimum 2"]


def test_a_pod_moved_or_bound_again_is_a_violation() -> None:
    """SimCluster refuses both (409 and 422), as the API server does; the monitor does not rely on it."""
    store, monitor = watched()
    create(store, gpu_pod("p", gpus=1))
    pods = store.resource(*PODS_RESOURCE)
    unbound = store.get(pods, "team", "p")
    bind(store, "p", "b0-r0-n0")
    bound = store.get(pods, "team", "p")
    moved = {**bound, "spec": {**bound["spec"], "nodeName": "b0-r0-n1"}}
    monitor._observe(pods.storage, "MODIFIED", moved, bound)
    monitor._observe(pods.storage, "MODIFIED", moved, unbound)
    assert monitor.violations == [
        "pod team/p moved from b0-r0-n0 to b0-r0-n1",
        "pod team/p bound twice: to b0-r0-n0 and to b0-r0-n1",
    ]


def classes(store: Store) -> None:
    for name, value in (("low", 1), ("high", 100)):
        store.create(
            store.resource("scheduling.k8s.io/v1", "PriorityClass"),
            None,
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value},
        )


def preempt(store: Store, victim: str, preemptor: str) -> None:
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": f"phalanx: preempted by gang {preemptor} to make room in the cluster",
    }
    store.patch(
        store.resource(*PODS_RESOURCE),
        "team",
        victim,
        {"status": {"conditions": [condition]}},
        "application/strategic-merge-patch+json",
        subresource="status",
    )


def test_a_victim_of_equal_or_higher_priority_is_caught() -> None:
    store, monitor = watched()
    classes(store)
    create(store, gpu_pod("important", annotations=pfn("important", 1), priorityClassName="high"))
    bind(store, "important", "b0-r0-n0")
    create(store, gpu_pod("lowly", annotations=pfn("lowly", 1), priorityClassName="low"))
    preempt(store, "important", "pfn:team/lowly")
    assert monitor.violations == ["pod team/important (priority 100) preempted by gang pfn:team/lowly of priority 1"]
    assert monitor.checks["preemption"] == 1


def test_a_lower_priority_bind_into_nominated_room_is_caught() -> None:
    store, monitor = watched()
    classes(store)
    create(store, gpu_pod("vip", annotations=pfn("vip", 1), priorityClassName="high"))
    store.patch(
        store.resource(*PODS_RESOURCE),
        "team",
        "vip",
        {"status": {"nominatedNodeName": "b0-r0-n0"}},
        "application/strategic-merge-patch+json",
        subresource="status",
    )
    create(store, gpu_pod("sneaky", annotations=pfn("sneaky", 1), priorityClassName="low", gpus=4))
    bind(store, "sneaky", "b0-r0-n0")
    assert monitor.violations == ["pod team/sneaky (priority 1) bound to b0-r0-n0 in room nominated for team/vip"]
