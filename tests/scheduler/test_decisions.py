"""The cycle's decisions, as the Outcomes it records, on the simulated clock (``tests/scheduler/loop.py``).

Each story drives the real loop (queue, cycle, permit, post-filters) over ClusterState with no API in
between, and asserts the decision the cycle made: its code, who it is about, what it says and what
follows (a bind job, victims, a reservation). The real-time tests over HTTP keep what only I/O shows
(writes refused, retried, raced); the rules are here, exact and fast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from scheduler.decision import GANG_WAITING, Code, Outcome, Reason
from scheduler.settings import PermitSettings, PreemptionSettings
from tests.scheduler.loop import RACK, Loop, settings


def codes(outcomes: list[Outcome]) -> list[Code]:
    return [outcome.code for outcome in outcomes]


def test_a_gang_that_fits_is_scheduled_whole_then_found_placed_once_bound() -> None:
    loop = Loop(racks=2, nodes=4)
    pods = [loop.submit(f"w-{i}", 8, gang=("w", 4), rack=True) for i in range(4)]
    loop.settle()
    first, *rest = loop.outcomes("pfn:ml/w")
    assert first.code is Code.SCHEDULED and first.job is not None
    assert sorted(pod for pod, _ in first.job.pods) == sorted(pods)
    assert len({loop.bound()[pod].rsplit("-", 1)[0] for pod in pods}) == 1  # one rack
    assert not first.extras_wait and first.attempt and first.placement_ms > 0
    assert codes(rest) in ([], [Code.PLACED])


def test_a_gang_larger_than_the_cluster_is_unresolvable_and_told_on_each_pod() -> None:
    loop = Loop(racks=1, nodes=2)
    for i in range(3):
        loop.submit(f"big-{i}", 8, gang=("big", 3))
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/big")
    assert outcome.code is Code.UNRESOLVABLE and outcome.each_pod
    assert set(outcome.pods) == {f"ml/big-{i}" for i in range(3)}
    assert "needs 3 pods; the cluster could hold at most 2 of this shape even if it were empty" in outcome.message


def test_a_rack_bound_gang_larger_than_any_rack_is_unresolvable_though_the_cluster_could_hold_it() -> None:
    loop = Loop(racks=2, nodes=2)
    for i in range(3):
        loop.submit(f"r-{i}", 8, gang=("r", 3), rack=True)
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/r")
    assert outcome.code is Code.UNRESOLVABLE
    assert RACK in outcome.message


def test_a_gang_with_no_room_now_backs_off_unschedulable_and_wakes_for_its_shape() -> None:
    loop = Loop(racks=1, nodes=2)
    loop.submit("other", 8, node="b0-r0-n0")
    for i in range(2):
        loop.submit(f"g-{i}", 8, gang=("g", 2))
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/g")
    assert outcome.code is Code.UNSCHEDULABLE and outcome.reason is None and outcome.condition is None
    assert outcome.wake.pods == 2 and len(outcome.wake.shapes) == 1 and outcome.wake.nodes
    assert outcome.preemption == ""  # nothing runs below its priority: preemption was not considered
    loop.finish("ml/other")
    loop.settle()
    assert codes(loop.outcomes("pfn:ml/g"))[1] is Code.SCHEDULED  # the freed room woke it, no backoff waited


def test_a_gang_lacking_a_member_holds_room_then_is_permitted_when_it_arrives() -> None:
    loop = Loop(racks=1, nodes=4)
    for i in range(2):
        loop.submit(f"p-{i}", 8, gang=("p", 3))
    loop.settle()
    (holding,) = loop.outcomes("pfn:ml/p")
    assert holding.code is Code.WAIT
    assert "holds room for 1 member(s) that do not exist yet; it binds when they arrive" in holding.message
    loop.submit("p-2", 8, gang=("p", 3))
    loop.settle()
    permitted = loop.outcomes("pfn:ml/p")[1]
    assert permitted.code is Code.SCHEDULED and permitted.job is not None
    assert sorted(pod for pod, _ in permitted.job.pods) == ["ml/p-0", "ml/p-1", "ml/p-2"]
    assert permitted.message == "all members placed"


def test_a_hold_that_times_out_is_a_gang_timeout_then_the_gang_cools_down_holding_nothing() -> None:
    loop = Loop(racks=1, nodes=4)
    for i in range(2):
        loop.submit(f"t-{i}", 8, gang=("t", 3))
    loop.settle()
    loop.run_until(loop.loop.permit.next_deadline() or 0.0)
    timed_out = loop.outcomes("pfn:ml/t")[1]
    assert timed_out.code is Code.UNSCHEDULABLE
    assert (timed_out.reason, timed_out.condition, timed_out.attempt) == (Reason.GANG_TIMEOUT, GANG_WAITING, False)
    loop.advance(2)
    cooling = loop.outcomes("pfn:ml/t")[2]
    assert cooling.code is Code.WAIT and cooling.reason is Reason.GANG_WAITING
    assert "(once in a row), and holds room again in " in cooling.message
    assert not loop.loop.permit.waiting


def test_a_gang_whose_hold_would_pass_the_held_share_waits_unschedulable_without_holding() -> None:
    config = replace(settings(), permit=replace(PermitSettings(), max_reserved_share=0.25))
    loop = Loop(racks=1, nodes=4, config=config)
    for i in range(2):
        loop.submit(f"s-{i}", 8, gang=("s", 4))  # two members missing: 16 of 32 GPUs held, past 25%
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/s")
    assert outcome.code is Code.UNSCHEDULABLE and outcome.condition == GANG_WAITING
    assert "room held for waiting gangs is at its limit (25% of the cluster)" in outcome.message
    assert not loop.loop.permit.waiting


def test_an_invalid_gang_is_invalid_and_leaves_the_queue_while_a_plain_pod_binds() -> None:
    loop = Loop(racks=1, nodes=2)
    loop.submit("bad", 8, annotations={"gang-scheduling.preferred.jp/gang-name": "bad"})  # no size
    plain = loop.submit("plain", 8)
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/bad")
    assert outcome.code is Code.INVALID and outcome.each_pod
    assert "gang-size" in outcome.message
    assert "pfn:ml/bad" not in loop.queue
    assert plain in loop.bound()


@dataclass(frozen=True)
class Preemption:
    """A full cluster of low-priority pods (``victim_priority``), and a gang of ``priority`` arriving."""

    name: str
    priority: int
    victim_priority: int
    preempts: bool
    code: Code
    result: str  # the post-filter's result (phalanx_preemption_attempts_total)
    says: str


PREEMPTION = [
    Preemption("lower priorities are evicted", 100, 0, True, Code.PREEMPTING, "preempted", ""),
    Preemption("equal priorities never are", 0, 0, True, Code.UNSCHEDULABLE, "", ""),
    Preemption("preemptionPolicy Never says so", 100, 0, False, Code.UNSCHEDULABLE, "not_allowed",
               "Preemption cannot help: it may not preempt"),
]  # fmt: skip


@pytest.mark.parametrize("case", PREEMPTION, ids=lambda case: case.name)
def test_a_gang_that_does_not_fit_goes_through_the_preemption_post_filter(case: Preemption) -> None:
    loop = Loop(racks=1, nodes=2, preemption=True)
    for node in range(2):
        loop.submit(f"low-{node}", 8, node=f"b0-r0-n{node}", priority=case.victim_priority)
    for i in range(2):
        loop.submit(f"hi-{i}", 8, gang=("hi", 2), priority=case.priority, preempts=case.preempts)
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/hi")
    assert (outcome.code, outcome.preemption) == (case.code, case.result)
    assert outcome.message.startswith("0/2 nodes are available")  # what placement found, first
    assert case.says in outcome.message and ("Preemption cannot help" in outcome.message) == bool(case.says)
    if case.code is Code.PREEMPTING:
        assert outcome.victims is not None
        assert sorted(pod.key for pod in outcome.victims.pods) == ["ml/low-0", "ml/low-1"]
        (job,) = loop.evictor.jobs
        assert sorted(victim.pod for victim in job.victims) == ["ml/low-0", "ml/low-1"]
        assert loop.told.events[-1][0] == "Preempting"
    else:
        assert not loop.evictor.jobs


def test_a_preemptor_waits_for_its_victims_without_a_new_attempt_then_binds_where_they_were() -> None:
    loop = Loop(racks=1, nodes=2, preemption=True)
    for node in range(2):
        loop.submit(f"low-{node}", 8, node=f"b0-r0-n{node}")
    for i in range(2):
        loop.submit(f"hi-{i}", 8, gang=("hi", 2), priority=100)
    loop.settle()
    loop.advance(5)  # its backoff ends while the victims still run
    waiting = loop.outcomes("pfn:ml/hi")[1]
    assert waiting.code is Code.UNSCHEDULABLE and not waiting.attempt
    assert "waits for 2 of them to terminate" in waiting.message
    loop.finish("ml/low-0", "ml/low-1")
    loop.settle()
    assert loop.outcomes("pfn:ml/hi")[-1].code in (Code.SCHEDULED, Code.PLACED)
    assert {loop.bound()["ml/hi-0"], loop.bound()["ml/hi-1"]} == {"b0-r0-n0", "b0-r0-n1"}


def test_preemption_disabled_says_so_and_considers_nothing() -> None:
    config = replace(settings(), preemption=replace(PreemptionSettings(), enabled=False))
    loop = Loop(racks=1, nodes=1, preemption=True, config=config)
    loop.submit("low", 8, node="b0-r0-n0")
    loop.submit("hi", 8, gang=("hi", 1), priority=100)
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/hi")
    assert (outcome.code, outcome.preemption) == (Code.UNSCHEDULABLE, "")
    assert not loop.evictor.jobs


def test_a_starving_gang_that_cannot_preempt_reserves_a_domain_and_says_so() -> None:
    loop = Loop(racks=2, nodes=2, config=settings(reserve_after_seconds=60.0))
    loop.submit("small", 4, node="b0-r0-n0", runs=3600)
    loop.submit("other", 4, node="b0-r1-n0", runs=7200)
    for i in range(2):
        loop.submit(f"big-{i}", 8, gang=("big", 2), rack=True)
    loop.settle()
    assert loop.outcomes("pfn:ml/big")[0].reserving == ""  # it has not waited long enough yet
    loop.run_until(120.0)
    reserving = [outcome for outcome in loop.outcomes("pfn:ml/big") if outcome.reserving]
    assert len(reserving) == 1 and reserving[0].code is Code.UNSCHEDULABLE
    assert "b0-r0" in reserving[0].reserving  # the rack that empties first
    assert ("Reserving", reserving[0].reserving) in loop.told.events


def test_a_refused_bind_is_an_unschedulable_decision_whose_event_the_binder_wrote() -> None:
    loop = Loop(racks=1, nodes=2)
    for i in range(2):
        loop.submit(f"b-{i}", 8, gang=("b", 2))
    loop.loop.sync()
    assert loop.loop.step()
    (job,) = loop.binder.jobs
    loop.binder.jobs.clear()
    for pod, _ in job.pods:  # the binder's first request is refused: nothing is bound, nothing kept assumed
        loop.state.forget(pod)
    events = len(loop.told.events)
    loop.loop.bind_refused("pfn:ml/b", "admission webhook denied the request")  # type: ignore[arg-type]
    refused = loop.outcomes("pfn:ml/b")[-1]
    assert refused.code is Code.UNSCHEDULABLE and refused.reported
    assert refused.message == "binding refused: admission webhook denied the request"
    assert len(loop.told.events) == events  # the binder's FailedBinding Event said it; the pods' condition too:
    assert loop.told.pending == dict.fromkeys(("ml/b-0", "ml/b-1"), refused.message)
    assert "pfn:ml/b" in loop.queue and loop.queue.next_ready() is not None  # backs off, never placed at once
    assert not loop.loop.step()


def test_a_victim_that_never_terminates_lets_the_nomination_time_out_and_is_not_chosen_again() -> None:
    loop = Loop(racks=2, nodes=2, preemption=True)
    for gang in ("batch-a", "batch-b"):
        for i in range(2):
            loop.submit(f"{gang}-{i}", 8, gang=(gang, 2), rack=True, priority=10, terminationGracePeriodSeconds=1)
    loop.settle()
    loop.submit("prod-0", 8, gang=("prod", 1), rack=True, priority=1000)
    loop.settle()
    (first,) = loop.evictor.jobs
    assert len(first.victims) == 2  # a whole gang, though one pod's room would do
    loop.terminate(*(victim.pod for victim in first.victims))  # marked for deletion, and never gone
    deadline = loop.loop.nominations.next_deadline()
    assert deadline is not None
    loop.run_until(deadline + 10)
    decided = [outcome for outcome in loop.outcomes("pfn:ml/prod") if outcome.code is Code.PREEMPTING]
    assert len(decided) == 2  # evaluated again after the timeout
    second = {victim.pod for victim in loop.evictor.jobs[-1].victims}
    firsts = {victim.pod for victim in first.victims}
    everyone = {f"ml/batch-{gang}-{i}" for gang in "ab" for i in range(2)}
    assert second == everyone - firsts  # the other gang: those still terminating are not chosen again
    loop.finish(*(victim.pod for victim in first.victims), *second)
    loop.settle()
    assert "ml/prod-0" in loop.bound()
