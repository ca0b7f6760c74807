"""Large gangs do not starve: the scheduling loop's domain reservations and backfill, on a simulated clock."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from scheduler.ports.port import NODES, PODS, ApiResource, Change
from scheduler.settings import SettingsError, parse_settings
from tests.scheduler.loop import RACK, Loop, settings

START = 0.0


def busy_rack(loop: Loop, rack: str, gpus: list[int], *, deadline: float | None = None) -> list[str]:
    """Pods of another scheduler running on the rack's nodes, ``gpus[i]`` GPUs on node i; with a
    ``deadline``, the kubelet stops them then."""
    return [
        loop.submit(f"{rack}-busy-{i}", used, node=f"b0-{rack}-n{i}", deadline=deadline, runs=deadline)
        for i, used in enumerate(gpus)
        if used
    ]


def big_gang(
    loop: Loop, name: str = "big", pods: int = 4, *, priority: int = 0, runs: float | None = None, preempts: bool = True
) -> list[str]:
    return [
        loop.submit(f"{name}-{i}", 8, gang=(name, pods), rack=True, priority=priority, runs=runs, preempts=preempts)
        for i in range(pods)
    ]


def test_a_64_gpu_gang_behind_a_stream_of_small_jobs_binds_within_bounded_time() -> None:
    """Two racks of eight 8-GPU nodes, and a stream of 1- and 2-GPU jobs (5 to 20 minutes each) that keeps
    them nearly full. A 64-GPU gang that needs a whole rack arrives ten minutes in. Without a reservation it
    is still waiting an hour later: whenever a GPU frees up, a small job that fits takes it. With one, it
    reserves a rack once it has waited five minutes and binds when the jobs running there then have
    finished: within 5 + 20 minutes (and a minute of slack)."""

    def arrives(loop: Loop) -> list[str]:
        return big_gang(loop, pods=8, runs=1800)

    assert wait_behind_small_jobs(arrives, starvation=False) is None
    waited = wait_behind_small_jobs(arrives, starvation=True)
    assert waited is not None and waited <= 300 + 1200 + 60


def wait_behind_small_jobs(arrives: Callable[[Loop], list[str]], *, starvation: bool) -> float | None:
    """Two racks of eight 8-GPU nodes kept nearly full by a stream of 1- and 2-GPU jobs (5 to 20 minutes
    each); what ``arrives`` makes ten minutes in: seconds until its last pod bound (None: not within the hour
    after it arrived, over twice the bound the tests hold a reservation to)."""
    loop = Loop(racks=2, nodes=8, config=settings(enabled=starvation))
    rng = random.Random(7)
    pods: list[str] = []
    for second in range(0, 603 + 3600, 9):
        loop.run_until(second)
        if pods and all(pod in loop.bound_at for pod in pods):
            return max(loop.bound_at[pod] for pod in pods) - 603
        loop.submit(f"small-{second}", rng.choice([1, 1, 2]), runs=rng.uniform(300, 1200))
        if second == 603:
            pods = arrives(loop)
    return None


def reservation(loop: Loop, gang: str = "pfn:ml/big") -> str | None:
    held = loop.loop.starvation.get(gang)  # type: ignore[arg-type]
    return held.where if held is not None else None


def released(loop: Loop, reason: str) -> float:
    return loop.loop.metrics.starvation_released.labels(reason).value


def test_a_gang_that_waited_too_long_holds_the_rack_with_least_in_use_and_says_so() -> None:
    loop = Loop()
    busy = busy_rack(loop, "r0", [8, 8, 8, 4]) + busy_rack(loop, "r1", [4, 4, 6, 6])
    big = big_gang(loop)
    loop.settle()
    assert reservation(loop) is None  # it has not waited five minutes yet
    assert not [note for reason, note in loop.told.events if reason == "Reserving"]

    loop.run_until(301)  # its backoff ends when it may reserve, not later

    assert reservation(loop) == "rack b0-r1"
    assert "reserves rack b0-r1 for its 32 GPUs; 20 GPUs there are still in use" in loop.told.pending[big[0]]
    (note,) = [note for reason, note in loop.told.events if reason == "Reserving"]
    assert note.startswith("Gang pfn:ml/big reserves rack b0-r1 for its 32 GPUs; 20 GPUs there are still in use.")
    # A 4-GPU job still finds the room the big gang does not need (rack r0); the next one finds none.
    first, second = loop.submit("four-a", 4), loop.submit("four-b", 4)
    loop.settle()
    assert loop.bound().get(first) == "b0-r0-n3"
    assert second not in loop.bound()
    assert "room on 4 nodes of rack b0-r1 is reserved for gang pfn:ml/big" in loop.told.pending[second].lower()

    loop.finish(*busy[4:])  # what ran on rack r1 ends
    loop.settle()

    assert {loop.bound()[pod] for pod in big} == {f"b0-r1-n{i}" for i in range(4)}
    assert reservation(loop) is None and released(loop, "bound") == 1


@pytest.mark.parametrize("all_bounded", [True, False], ids=["every-pod-has-a-deadline", "one-pod-may-run-forever"])
def test_a_job_sure_to_end_before_the_reservation_could_start_backfills_its_room(all_bounded: bool) -> None:
    # Rack r0 is full; on rack r1 the reserved gang waits for pods that end by t=1000 (their deadlines).
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6], deadline=1000)
    if not all_bounded:
        loop.submit("forever", 1, node="b0-r1-n3")
    big = big_gang(loop)
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"

    short = loop.submit("short", 4, deadline=600, runs=600)  # ends by t=900
    long = loop.submit("long", 4, deadline=900)  # could run until t=1200
    unbounded = loop.submit("unbounded", 4)
    loop.settle()

    assert (short in loop.bound()) is all_bounded
    assert long not in loop.bound() and unbounded not in loop.bound()
    loop.run_until(1000)
    if all_bounded:
        assert [loop.bound_at.get(pod) for pod in big] == [1000] * 4  # the backfilled job did not delay it


def test_gangs_of_higher_priority_are_not_held_back() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop)
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"

    urgent, equal = loop.submit("urgent", 4, priority=100), loop.submit("equal", 4)
    loop.settle()

    assert urgent in loop.bound() and equal not in loop.bound()


def test_a_preemptor_below_the_reserved_gang_does_not_evict_pods_on_the_room_it_holds() -> None:
    # Rack r1 would cost two evictions (two 4-GPU pods free two nodes), rack r0 four; but r1's room is held
    # for a gang of higher priority that may not preempt, so evicting there would free room for it, not for
    # the preemptor.
    loop = Loop(preemption=True)
    for i in range(4):
        for half in range(2):
            loop.submit(f"r0-{i}-{half}", 4, node=f"b0-r0-n{i}")
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop, priority=5, preempts=False)
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"

    big_gang(loop, "mid", pods=2, priority=3)
    loop.settle()

    (job,) = loop.evictor.jobs
    assert job.preemptor == "pfn:ml/mid" and job.domain == "rack b0-r0"
    assert len(job.victims) == 4


def test_a_reservation_that_did_not_help_in_time_moves_to_the_next_rack() -> None:
    loop = Loop(config=settings(max_reserve_seconds=600))
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop)
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"

    loop.run_until(902)  # 600 s after it reserved

    assert reservation(loop) == "rack b0-r0"
    assert released(loop, "expired") == 1
    where = [note.split(" for its")[0] for reason, note in loop.told.events if reason == "Reserving"]
    assert where == ["Gang pfn:ml/big reserves rack b0-r1", "Gang pfn:ml/big reserves rack b0-r0"]
    loop.run_until(1503)
    assert reservation(loop) == "rack b0-r1"  # every rack has had its turn: the round starts again


def test_one_reservation_per_level_goes_to_the_head_of_the_line() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    r1 = busy_rack(loop, "r1", [4, 4, 6, 6])
    first = big_gang(loop, "first")
    loop.clock.advance(10)
    big_gang(loop, "second")
    loop.run_until(321)
    assert reservation(loop, "pfn:ml/first") == "rack b0-r1"
    assert reservation(loop, "pfn:ml/second") is None  # the rack level has its one reservation

    loop.finish(*r1)
    loop.settle()

    assert all(pod in loop.bound() for pod in first)
    assert reservation(loop, "pfn:ml/second") == "rack b0-r0"  # its turn, at once


def test_a_more_important_gang_takes_the_level_s_reservation() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop, "batch")
    loop.clock.advance(10)
    big_gang(loop, "urgent", priority=100)
    loop.run_until(321)

    assert reservation(loop, "pfn:ml/urgent") == "rack b0-r1"
    assert reservation(loop, "pfn:ml/batch") is None
    assert released(loop, "displaced") == 1


def test_a_new_leader_rebuilds_the_reservation_from_the_same_state() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 4])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop)
    loop.run_until(301)
    before = loop.loop.starvation.get("pfn:ml/big")  # type: ignore[arg-type]

    loop.loop.starvation.clear()  # leadership lost: nothing of it survives in memory
    loop.loop.requeue_all()  # the next leader's first pass
    loop.settle()

    after = loop.loop.starvation.get("pfn:ml/big")  # type: ignore[arg-type]
    assert before is not None and after is not None
    assert (after.where, after.nodes, after.demand) == (before.where, before.nodes, before.demand)


def test_a_deleted_gang_releases_its_reservation_and_a_gang_that_can_never_fit_makes_none() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big = big_gang(loop)
    too_big = big_gang(loop, "huge", pods=5)  # five whole nodes in one rack of four
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"
    assert reservation(loop, "pfn:ml/huge") is None
    assert too_big[0] not in loop.bound()

    loop.finish(*big)
    loop.settle()

    assert len(loop.loop.starvation) == 0 and released(loop, "deleted") == 1


def test_starvation_settings_are_checked() -> None:
    configured = parse_settings({"starvation": {"reserveAfterSeconds": 60, "maxReservations": 2}}).starvation
    kept = (configured.reserve_after_seconds, configured.max_reservations, configured.max_reserve_seconds)
    assert kept == (60, 2, 1800)
    with pytest.raises(SettingsError, match="maxReservations and maxReserveSeconds must be positive"):
        parse_settings({"starvation": {"maxReservations": 0}})
    with pytest.raises(SettingsError, match="did you mean 'reserveAfterSeconds'"):
        parse_settings({"starvation": {"reserveAfterSecond": 60}})


def test_a_gang_still_waiting_for_members_cannot_backfill_it_could_end_too_late() -> None:
    # The reservation could start at t=1000. A two-pod gang with 600-second deadlines whose second member
    # comes later would start only then: it may not take the held room on the strength of its deadline.
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6], deadline=1000)
    big = big_gang(loop)
    loop.run_until(301)
    first = loop.submit("pair-0", 4, gang=("pair", 2), deadline=600, runs=600)
    loop.settle()
    assert not loop.loop.permit.holds("pfn:ml/pair")  # type: ignore[arg-type]
    loop.run_until(500)
    loop.submit("pair-1", 4, gang=("pair", 2), deadline=600, runs=600)
    loop.run_until(1000)
    assert [loop.bound_at.get(pod) for pod in big] == [1000] * 4
    assert first not in loop.bound() or loop.bound_at[first] >= 1000


def test_a_gang_whose_members_run_in_one_rack_reserves_that_rack() -> None:
    loop = Loop()
    busy_rack(loop, "r1", [4, 4, 4, 4])
    big = big_gang(loop)  # only rack r0 holds it
    loop.settle()
    node = loop.bound()[big[3]]
    loop.finish(big[3])  # one member dies; another scheduler's pod takes its node
    loop.submit("squatter", 8, node=node, deadline=600, runs=600)
    loop.run_until(400)
    loop.submit("big-3", 8, gang=("big", 4), rack=True)  # recreated: its gang is old enough to reserve

    loop.settle()

    assert reservation(loop) == "rack b0-r0"  # where its other members run: no room elsewhere helps it


def test_a_reservation_whose_nodes_are_gone_is_made_again_elsewhere() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 4])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop)
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"

    for i in range(4):  # rack r1 is taken out of the cluster
        loop.state.apply(NODES, Change("DELETED", {"metadata": {"name": f"b0-r1-n{i}"}}))
    loop.advance(1)

    assert reservation(loop) == "rack b0-r0"
    assert released(loop, "nodes_gone") == 1


def test_freed_room_wakes_a_gang_of_higher_priority_at_once() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    r1 = busy_rack(loop, "r1", [8, 8, 8, 4])
    big_gang(loop)
    loop.run_until(301)
    urgent = loop.submit("urgent", 8, priority=100)
    loop.run_until(600)  # it has failed often enough to back off for a minute
    assert urgent not in loop.bound()

    loop.finish(r1[0])  # a node of the reserved rack empties
    loop.settle()

    assert loop.bound().get(urgent) == "b0-r1-n0"


def test_a_gang_made_smaller_reserves_once_a_rack_could_hold_it() -> None:
    loop = Loop()
    busy_rack(loop, "r0", [8, 8, 8, 8])
    busy_rack(loop, "r1", [4, 4, 6, 6])
    huge = big_gang(loop, "huge", pods=5)  # five whole nodes in one rack of four
    loop.run_until(301)
    assert reservation(loop, "pfn:ml/huge") is None

    loop.finish(huge[4])
    for pod in huge[:4]:  # its size is lowered to four
        loop.pods[pod]["metadata"]["annotations"]["gang-scheduling.preferred.jp/gang-size"] = "4"
        loop.state.apply(PODS, Change("MODIFIED", loop.pods[pod]))
    loop.advance(1)

    assert reservation(loop, "pfn:ml/huge") == "rack b0-r1"


COMPOSITES = ApiResource("scheduling.phalanx.dev", "v1alpha1", "compositepodgroups", "CompositePodGroup")
PLUGIN_GROUPS = ApiResource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")


def composite_service(
    loop: Loop, name: str = "svc", *, parts: int = 2, pods: int = 4, runs: float | None = None
) -> list[str]:
    """A CompositePodGroup needing all of its ``parts`` (scheduler-plugins PodGroups of ``pods`` 8-GPU pods),
    each in a rack of its own choosing, the whole in one block."""
    meta = {"namespace": "ml", "name": name}
    composite = {
        "apiVersion": "scheduling.phalanx.dev/v1alpha1",
        "kind": "CompositePodGroup",
        "metadata": meta,
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": parts}},
                 "schedulingConstraints": {"topology": [{"key": "example.com/block"}]}},
    }  # fmt: skip
    loop.state.apply(COMPOSITES, Change("ADDED", composite))
    members = []
    for part in range(parts):
        group = f"{name}-{part}"
        loop.state.apply(PLUGIN_GROUPS, Change("ADDED", {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"namespace": "ml", "name": group,
                         "annotations": {"scheduling.phalanx.dev/parent": name,
                                         "scheduling.phalanx.dev/topology-required": RACK}},
            "spec": {"minMember": pods},
        }))  # fmt: skip
        members += [
            loop.submit(f"{group}-{i}", 8, labels={"scheduling.x-k8s.io/pod-group": group}, runs=runs)
            for i in range(pods)
        ]
    return members


def test_a_composite_whose_parts_need_a_rack_each_reserves_a_rack_per_part_in_one_block() -> None:
    """Two racks of one block: r0 nearly full, r1 half busy. A service of two 2-pod parts, each required in
    a rack of its own choosing: its reservation holds, inside the block, the nodes each part would take."""
    loop = Loop(racks=2, nodes=4)
    busy_rack(loop, "r0", [8, 8, 8, 4])
    busy_rack(loop, "r1", [4, 4, 4, 4])
    members = composite_service(loop, parts=2, pods=2)
    loop.settle()
    assert all(member not in loop.bound() for member in members)

    loop.run_until(301)

    held = loop.loop.starvation.get("phalanx:ml/svc")  # type: ignore[arg-type]
    assert held is not None and held.where == "block b0"
    # Each part needs two whole nodes: r1's two first, then r1's other two (8 GPUs in use, where r0's best
    # two have 12).
    assert sorted(held.nodes) == [f"b0-r1-n{i}" for i in range(4)]
    assert held.wanted == 32


def test_a_composite_behind_a_stream_of_small_jobs_binds_within_the_bound_of_a_plain_gang() -> None:
    """As the 64-GPU gang above, but a service of two 4-pod parts, each required in a rack of one block:
    it binds within 5 + 20 minutes (and a minute of slack) of arriving, as the plain gang does."""

    def arrives(loop: Loop) -> list[str]:
        return composite_service(loop, parts=2, pods=4, runs=1800)

    assert wait_behind_small_jobs(arrives, starvation=False) is None
    waited = wait_behind_small_jobs(arrives, starvation=True)
    assert waited is not None and waited <= 300 + 1200 + 60


def test_a_reservation_moves_to_a_rack_that_drained_faster() -> None:
    loop = Loop()
    long_ones = [loop.submit(f"r0-long-{i}", 1, node=f"b0-r0-n{i}") for i in range(4)]
    short_ones = [loop.submit(f"r0-short-{i}", 7, node=f"b0-r0-n{i}") for i in range(4)]
    busy_rack(loop, "r1", [4, 4, 6, 6])
    big_gang(loop)
    loop.run_until(301)
    assert reservation(loop) == "rack b0-r1"  # 20 GPUs in use on the nodes it needs, against 32 on r0

    loop.finish(*short_ones)  # rack r0 is down to 4 GPUs in use: at most half of r1's 20
    loop.run_until(400)

    assert reservation(loop) == "rack b0-r0"
    assert [note.split(";")[0] for reason, note in loop.told.events if reason == "Reserving"] == [
        "Gang pfn:ml/big reserves rack b0-r1 for its 32 GPUs",
        "Gang pfn:ml/big reserves rack b0-r0 for its 32 GPUs",
    ]
    assert long_ones[0] in loop.bound()


def test_a_gang_missing_one_member_reserves_the_node_its_own_members_do_not_fill() -> None:
    """Issue 25: a rack-bound gang of four ran in a rack; a member failed and another scheduler's pod took its
    node before the replacement came. The reservation went to a node the gang's own member fills (which
    would never drain for it); it must go to the intruder's node."""
    loop = Loop(racks=2, nodes=4)
    members = big_gang(loop)
    loop.settle()
    rack = {loop.bound()[member].rsplit("-", 1)[0] for member in members}
    assert len(rack) == 1
    lost = members[3]
    freed = loop.bound()[lost]
    loop.finish(lost)
    loop.submit("intruder", 8, node=freed)  # another scheduler's pod, running there for good
    other_rack = "b0-r0" if rack == {"b0-r1"} else "b0-r1"
    busy_rack(loop, other_rack.split("-")[1], [8, 8, 8, 8])  # the other rack is full too
    loop.submit("big-4", 8, gang=("big", 4), rack=True)
    loop.run_until(START + 400)
    held = loop.loop.starvation.get("pfn:ml/big")  # type: ignore[arg-type]
    assert held is not None
    assert held.nodes == (freed,), f"reserved {held.nodes}; its own members run on the others"
    # Its Reserving Event is about the member still waiting, not about a running one.
    assert [subject for reason, subject in loop.told.about if reason == "Reserving"] == ["ml/big-4"]
