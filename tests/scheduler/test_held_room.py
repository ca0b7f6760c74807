"""Room held for members that do not exist yet (permit), on a simulated clock: a gang whose members never
come cools down between holds, and the pods it keeps out are told whose room it is."""

from __future__ import annotations

from dataclasses import replace

from scheduler.ports.port import PODS, Change
from scheduler.settings import PermitSettings, SettingsError, parse_settings
from scheduler.vacancies import Vacancies
from tests.scheduler.loop import Loop, settings


def test_a_gang_whose_last_member_never_comes_holds_room_for_a_shrinking_share_of_the_time() -> None:
    """A group of four whose Job makes three pods (its gang timeout 30 s + up to 30 s of jitter): it used to
    hold room again a backoff after each timeout, forever. Now each timeout in a row doubles the time before
    it may hold again, up to permit.maxCooldownSeconds (600)."""
    loop = Loop(racks=1, nodes=8)
    for i in range(3):
        loop.submit(f"mm-{i}", 8, gang=("mm", 4))
    loop.settle()
    gang = loop.loop.permit
    assert gang.holds(next(iter(gang.waiting)))
    key = next(iter(gang.waiting))
    held, step, hour = 0.0, 5.0, 3600.0
    for moment in range(int(step), int(2 * hour) + 1, int(step)):
        loop.run_until(float(moment))
        if moment > hour and gang.holds(key):
            held += step
    assert held / hour < 0.15, f"held room {held / hour:.0%} of the second hour"
    timeouts = [note for reason, note in loop.told.events if reason == "GangTimeout"]
    assert 5 <= len(timeouts) <= 20  # once every ~45 s without the cool-down: about 160
    assert "; the room it held is released, and it holds room again in " in timeouts[0]
    assert gang.timeouts[key] == len(timeouts)


def test_while_cooling_down_the_gang_says_when_it_holds_room_again_and_its_room_is_free_for_others() -> None:
    loop = Loop(racks=1, nodes=4)
    for i in range(3):
        loop.submit(f"mm-{i}", 8, gang=("mm", 4))
    loop.settle()
    assert len(loop.loop.permit) == 1
    loop.run_until(loop.loop.permit.next_deadline() or 0.0)  # the timeout
    assert not loop.loop.permit.waiting
    message = loop.told.pending["ml/mm-0"]
    assert message.startswith("Gang pfn:ml/mm timed out waiting for 1 member(s) that do not exist yet; the room ")
    assert "it held is released, and it holds room again in " in message
    loop.advance(2)  # its backoff ends: it is tried while it cools down, and holds nothing
    assert not loop.loop.permit.waiting
    message = loop.told.pending["ml/mm-0"]
    assert message.startswith("Gang pfn:ml/mm waits for 1 member(s) that do not exist yet; it held room for them ")
    assert "(once in a row), and holds room again in " in message
    other = loop.submit("deploy-0", 8)
    loop.settle()
    assert other in loop.bound()  # the room is free while the gang cools down
    # A member arrives while it cools down: the gang is complete, and binds at once.
    loop.submit("mm-3", 8, gang=("mm", 4))
    loop.finish(other)
    loop.settle()
    assert {f"ml/mm-{i}" for i in range(4)} <= set(loop.bound())
    assert not loop.loop.permit.timeouts  # bound: its timeouts in a row are forgotten


def test_a_pod_kept_out_by_room_held_for_missing_members_is_told_whose_room_it_is() -> None:
    loop = Loop(racks=1, nodes=4)
    for i in range(3):
        loop.submit(f"mm-{i}", 8, gang=("mm", 4))
    loop.settle()
    blocked = loop.submit("deploy-0", 8)
    loop.settle()
    assert blocked not in loop.bound()
    message = loop.told.pending[blocked]
    assert message.startswith("0/4 nodes are available")
    assert "Room on 1 node is held for gang pfn:ml/mm, which waits for 1 member(s) that do not exist yet " in message
    assert "(until they arrive, or " in message


def test_a_pod_that_would_not_fit_anyway_is_not_told_of_held_room() -> None:
    loop = Loop(racks=1, nodes=4)
    for i in range(3):
        loop.submit(f"mm-{i}", 8, gang=("mm", 4))
    loop.settle()
    blocked = [loop.submit(f"big-{i}", 8, gang=("big", 2)) for i in range(2)]
    loop.settle()
    assert "held for gang" not in loop.told.pending[blocked[0]]  # freeing the one held node would not be enough


def test_the_cool_down_cap_is_a_setting() -> None:
    assert parse_settings({"permit": {"maxCooldownSeconds": 120}}).permit.max_cooldown_seconds == 120
    try:
        parse_settings({"permit": {"maxCooldownSeconds": 0}})
    except SettingsError as error:
        assert "permit.maxCooldownSeconds" in str(error)
    else:
        raise AssertionError("a cool-down cap of 0 was accepted")


def rack_gang(loop: Loop, name: str = "train", size: int = 4) -> list[str]:
    """A gang of 8-GPU pods that requires one rack, bound in rack b0-r1 (rack b0-r0 is full)."""
    for i in range(4):
        loop.submit(f"other-{i}", 8, node=f"b0-r0-n{i}")
    members = [loop.submit(f"{name}-{i}", 8, gang=(name, size), rack=True) for i in range(size)]
    loop.settle()
    assert all(loop.bound()[member].startswith("b0-r1-") for member in members)
    return members


def test_the_room_of_a_member_that_failed_is_kept_for_its_replacement_and_told_to_whom_it_blocks() -> None:
    """Issue 25: a member failed; the Job controller makes its replacement about 10 s later; meanwhile an
    8-GPU Deployment pod took the freed node, and the rack-bound gang was stuck at 3 of 4."""
    loop = Loop(racks=2, nodes=4)
    members = rack_gang(loop)
    freed = loop.bound()[members[3]]
    loop.fail(members[3])
    deployment = loop.submit("web-0", 8)
    loop.settle()
    assert deployment not in loop.bound()
    message = loop.told.pending[deployment]
    assert (
        "Room on 1 node is kept for gang pfn:ml/train, whose member ml/train-3 failed or was deleted, for its "
        "replacement (60 s more)." in message
    )
    loop.advance(10)  # the Job controller's first backoff
    replacement = loop.submit("train-4", 8, gang=("train", 4), rack=True)
    loop.settle()
    assert loop.bound()[replacement] == freed
    assert deployment not in loop.bound()  # no room anywhere else; it waits for some, as before
    assert len(loop.loop.stages.one(Vacancies)) == 0


def test_a_member_deleted_as_kubectl_deletes_leaves_its_room_for_its_replacement() -> None:
    """``kubectl delete pod``: the API server first marks the pod (``deletionTimestamp``, a MODIFIED event), then
    removes it when its containers stopped. The mark took the pod out of its gang, so that its removal was
    nobody's departure: another pod took the room at once."""
    loop = Loop(racks=2, nodes=4)
    members = rack_gang(loop)
    freed = loop.bound()[members[3]]
    loop.terminate(members[3])
    loop.settle()
    loop.finish(members[3])
    deployment = loop.submit("web-0", 8)
    loop.settle()
    assert deployment not in loop.bound()
    assert "kept for gang pfn:ml/train, whose member ml/train-3 failed or was deleted" in loop.told.pending[deployment]
    replacement = loop.submit("train-4", 8, gang=("train", 4), rack=True)
    loop.settle()
    assert loop.bound()[replacement] == freed

    loop = Loop(racks=2, nodes=4)  # the whole Job deleted the same way: no room is kept
    members = rack_gang(loop)
    loop.terminate(*members)
    loop.settle()
    loop.finish(*members)
    loop.settle()
    assert len(loop.loop.stages.one(Vacancies)) == 0
    deployment = loop.submit("web-0", 8)
    loop.settle()
    assert deployment in loop.bound()


def test_room_kept_for_a_replacement_that_never_comes_is_free_again_after_the_grace_period() -> None:
    loop = Loop(racks=2, nodes=4)
    members = rack_gang(loop)
    freed = loop.bound()[members[3]]
    loop.finish(members[3])  # deleted, and nothing replaces it
    deployment = loop.submit("web-0", 8)
    loop.run_until(loop.clock.monotonic() + 59)
    assert deployment not in loop.bound()
    loop.run_until(loop.clock.monotonic() + 2)
    assert loop.bound().get(deployment) == freed  # woken when the room was given up, not after its backoff


def test_a_higher_priority_pod_may_take_room_kept_for_a_replacement() -> None:
    loop = Loop(racks=2, nodes=4)
    members = rack_gang(loop)
    freed = loop.bound()[members[3]]
    loop.fail(members[3])
    urgent = loop.submit("urgent-0", 8, priority=100)
    loop.settle()
    assert loop.bound().get(urgent) == freed


def test_no_room_is_kept_when_the_whole_gang_goes_or_when_the_member_was_preempted() -> None:
    loop = Loop(racks=2, nodes=4)
    members = rack_gang(loop)
    loop.finish(*members)  # the Job was deleted: every pod goes
    loop.settle()
    assert len(loop.loop.stages.one(Vacancies)) == 0
    deployment = loop.submit("web-0", 8)
    loop.settle()
    assert deployment in loop.bound()

    loop = Loop(racks=2, nodes=4)
    members = rack_gang(loop)
    victim = loop.pods[members[3]]
    message = "phalanx: preempted by gang pfn:ml/vip to make room in rack b0-r1"
    victim["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": message}
    ]
    loop.state.apply(PODS, Change("MODIFIED", victim))
    loop.finish(members[3])
    loop.settle()
    assert len(loop.loop.stages.one(Vacancies)) == 0  # that room was made for its preemptor


def test_the_replacement_grace_is_a_setting_and_zero_keeps_nothing() -> None:
    assert parse_settings({"permit": {"replacementGraceSeconds": 0}}).permit.replacement_grace_seconds == 0
    loop = Loop(racks=2, nodes=4, config=replace(settings(), permit=PermitSettings(replacement_grace_seconds=0)))
    members = rack_gang(loop)
    loop.fail(members[3])
    deployment = loop.submit("web-0", 8)
    loop.settle()
    assert deployment in loop.bound()


def held(loop: Loop, resource: str) -> float | None:
    """``phalanx_reserved{resource}`` as the loop publishes it (at each sync)."""
    loop.loop.sync()
    return loop.loop.metrics.registry.value("phalanx_reserved", {"resource": resource})


def test_a_partial_gang_times_out_and_releases_the_room_it_held_to_the_next_gang() -> None:
    loop = Loop(racks=1, nodes=4)
    timeout = {"gang-scheduling.preferred.jp/gang-schedule-timeout-seconds": "1"}
    for i in range(3):
        loop.submit(f"train-{i}", 8, gang=("train", 4), cpu="2", annotations=timeout)
    loop.settle()
    assert (held(loop, "nvidia.com/gpu"), held(loop, "cpu")) == (8, 2)  # cores, the base unit its help names
    others = [loop.submit(f"other-{i}", 8, gang=("other", 2)) for i in range(2)]
    loop.settle()
    assert not set(others) & set(loop.bound())  # three members and one member's held room take all four nodes
    loop.run_until(loop.loop.permit.next_deadline() or 0.0)
    note, *_ = [note for reason, note in loop.told.events if reason == "GangTimeout"]
    assert note.startswith("Gang pfn:ml/train timed out waiting for 1 member(s) that do not exist yet")
    loop.advance(2)  # the other gang's backoff: the released room woke it already, or wakes it now
    assert set(others) <= set(loop.bound())
    assert (held(loop, "nvidia.com/gpu"), held(loop, "cpu")) == (0, 0)


def test_running_out_of_time_while_members_are_gated_is_waiting_not_unschedulable() -> None:
    loop = Loop(racks=2, nodes=4)
    timeout = {"gang-scheduling.preferred.jp/gang-schedule-timeout-seconds": "1"}
    loop.submit("g-0", 8, gang=("g", 4), annotations=timeout)
    for i in range(1, 4):
        loop.submit(f"g-{i}", 8, gang=("g", 4), annotations=timeout, schedulingGates=[{"name": "example.com/quota"}])
    loop.settle()
    loop.run_until(loop.loop.permit.next_deadline() or 0.0)
    timed_out = loop.outcomes("pfn:ml/g")[-1]
    assert timed_out.message.startswith("Gang pfn:ml/g timed out waiting for 3 member(s) held by scheduling gates")
    assert timed_out.condition == "GangWaiting"  # not Unschedulable: room would not help
    assert loop.told.conditions["ml/g-0"] == "GangWaiting"  # the reason its PodScheduled condition is given
    assert not [event for event in loop.told.events if event[0] == "FailedScheduling"]
    attempts = loop.loop.metrics.registry.value
    assert not attempts("phalanx_schedule_attempts_total", {"result": "unschedulable"})  # no attempt failed
