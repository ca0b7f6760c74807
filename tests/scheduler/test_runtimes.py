"""Runtimes learned from pods that ended: the survival estimate, what the state learns from, and how a
starving gang's reservation and backfill use it when pods set no deadline."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.clock import ManualClock
from scheduler.ports.port import PODS, Change
from scheduler.reporting import rfc3339
from scheduler.runtimes import MIN_RUNTIMES, Runtimes, Survival
from scheduler.state import ClusterState
from tests.scheduler.loop import Loop, settings
from tests.scheduler.test_starvation import big_gang, reservation


def test_a_pod_is_expected_to_run_the_mean_of_the_runtimes_longer_than_its_age() -> None:
    survival = Survival.estimate(np.array([10.0, 20.0, 30.0, 40.0]), np.zeros(0))

    left = survival.remaining(np.array([0.0, 15.0, 35.0, 45.0]))

    # From 0: the mean, 25. At 15: (20+30+40)/3 - 15. At 35: 40 - 35. Older than every runtime seen: as
    # long again as it has run.
    assert left.tolist() == pytest.approx([25.0, 15.0, 5.0, 45.0])
    assert survival.quantile(0.5) == 20.0 and survival.quantile(0.9) == 40.0 and survival.quantile(1.0) == 40.0


def test_pods_still_running_make_the_guess_longer_where_only_short_runtimes_have_ended() -> None:
    """Half the pods ended after 10 s; the other half have run 100 s and still run. Counting only those that
    ended, a pod 50 s old is as old as nothing seen (guess: 50 s more); counted as censored, the still
    running half puts the rest of the distribution past 100 s."""
    ended = np.full(20, 10.0)
    running = np.full(20, 100.0)

    naive = Survival.estimate(ended, np.zeros(0)).remaining(np.array([5.0, 50.0]))
    censored = Survival.estimate(ended, running).remaining(np.array([5.0, 50.0]))

    assert naive.tolist() == pytest.approx([5.0, 50.0])
    # At 5 s: half end at 10, half are put at twice the longest age seen (200): 105 - 5. At 50 s: 150 more.
    assert censored.tolist() == pytest.approx([100.0, 150.0])


def _pod(name: str, *, node: str | None, start: float | None, phase: str = "Running", **status: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name, "uid": name, "creationTimestamp": rfc3339(0.0)},
        "spec": {
            "schedulerName": "default-scheduler",
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": phase, **({"startTime": rfc3339(start)} if start is not None else {}), **status},
    }


def _learned(state: ClusterState) -> list[float]:
    return sorted(runtime for runtimes in state.runtimes._ended for _, runtime in runtimes)


def test_the_state_learns_runtimes_from_pods_deleted_or_finished_but_not_from_victims() -> None:
    clock = ManualClock(start=0.0)
    state = ClusterState(settings(), clock)
    state.apply(PODS, Change("ADDED", _pod("deleted", node="n0", start=100.0)))
    state.apply(PODS, Change("ADDED", _pod("finished", node="n0", start=100.0)))
    state.apply(PODS, Change("ADDED", _pod("victim", node="n0", start=100.0)))
    clock.advance(400.0)  # wall 400
    finished_at = {"containerStatuses": [{"state": {"terminated": {"finishedAt": rfc3339(350.0)}}}]}
    state.apply(PODS, Change("MODIFIED", _pod("finished", node="n0", start=100.0, phase="Succeeded", **finished_at)))
    state.apply(PODS, Change("MODIFIED", _pod("finished", node="n0", start=100.0, phase="Succeeded", **finished_at)))
    victim = _pod("victim", node="n0", start=100.0)
    victim["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "phalanx: x"}
    ]
    state.apply(PODS, Change("MODIFIED", victim))
    state.apply(PODS, Change("DELETED", victim))
    state.apply(PODS, Change("DELETED", _pod("deleted", node="n0", start=100.0)))
    # A new leader's list: a pod that finished long ago says when; one that does not say is no runtime.
    state.apply(PODS, Change("ADDED", _pod("history", node="n0", start=0.0, phase="Succeeded", **finished_at)))
    state.apply(PODS, Change("ADDED", _pod("unknown", node="n0", start=0.0, phase="Failed")))

    # deleted at 400 after starting at 100; finished at 350 (counted once); history 0 to 350.
    assert _learned(state) == [250.0, 300.0, 350.0]


def learn(loop: Loop, gpus: int, seconds: float) -> None:
    """Pods of ``gpus`` GPUs (of another scheduler), one per node at a time, each run ``seconds`` and end,
    until ``MIN_RUNTIMES`` have."""
    nodes = [f"b0-r{rack}-n{node}" for rack in range(2) for node in range(4)]
    for i in range(MIN_RUNTIMES):
        loop.submit(f"learn-{gpus}-{i}", gpus, node=nodes[i % len(nodes)], runs=seconds)
        if i % len(nodes) == len(nodes) - 1 or i == MIN_RUNTIMES - 1:
            loop.run_until(loop.clock.monotonic() + seconds)


def test_a_starving_gang_reserves_the_rack_expected_to_empty_first_not_the_one_with_least_in_use() -> None:
    """Pods of 1 GPU have been seen to run a minute; pods of 2 GPUs, an hour and a half. Rack r0 runs four
    2-GPU pods (8 GPUs in use), rack r1 twenty-four 1-GPU pods (24 in use); none says when it ends. Learning
    nothing, the gang holds r0, where least is in use, for hours; with what was learned it holds r1."""

    def reserved(history: int) -> str | None:
        loop = Loop(config=settings(runtime_history=history))
        learn(loop, 1, 60.0)
        learn(loop, 2, 5400.0)
        for node in range(4):
            loop.submit(f"long-{node}", 2, node=f"b0-r0-n{node}")
            for i in range(6):
                loop.submit(f"short-{node}-{i}", 1, node=f"b0-r1-n{node}")
        big_gang(loop)
        loop.run_until(loop.clock.monotonic() + 301)
        return reservation(loop)

    assert reserved(0) == "rack b0-r0"
    assert reserved(1000) == "rack b0-r1"


def _reserve_rack_r1(loop: Loop) -> None:
    """Rack r0 full of 2-GPU pods (seen to run 90 minutes), rack r1 of 1-GPU pods (seen to run 10 minutes)
    that started moments ago: the starving gang holds r1, which is expected to empty first."""
    learn(loop, 1, 600.0)
    learn(loop, 2, 5400.0)
    for node in range(4):
        for i in range(4):
            loop.submit(f"long-{node}-{i}", 2, node=f"b0-r0-n{node}")
            loop.submit(f"short-{node}-{i}", 1, node=f"b0-r1-n{node}")
    big_gang(loop)
    loop.run_until(loop.clock.monotonic() + 11)
    assert reservation(loop) == "rack b0-r1"


def test_a_job_without_deadline_backfills_reserved_room_only_if_its_kind_ends_in_time() -> None:
    """A 3-GPU job, of a kind seen to run 30 s, may use the held room of rack r1: it ends well before r1 is
    expected to empty. A 2-GPU job (seen to run 90 minutes) may not."""
    loop = Loop(config=settings(reserve_after_seconds=10.0))
    learn(loop, 3, 30.0)
    _reserve_rack_r1(loop)

    three = loop.submit("three-gpus", 3)
    two = loop.submit("two-gpus", 2)
    loop.settle()

    assert loop.bound().get(three, "").startswith("b0-r1-")
    assert two not in loop.bound()
    assert "is reserved for gang pfn:ml/big" in loop.told.pending[two]


@pytest.mark.parametrize(("confidence", "backfills"), [(None, False), (0.9, True)], ids=["default", "0.9"])
def test_a_kind_seen_to_run_long_once_in_21_runs_does_not_backfill_at_the_default_confidence(
    confidence: float | None, backfills: bool
) -> None:
    """3-GPU pods have ended after 30 s twenty times and after 90 minutes once. At the default
    ``backfillConfidence`` (0.99) that one long run is enough to keep a 3-GPU job out of the held room (jobs
    come in bursts that run alike, and one let in holds the room as long as it runs); at 0.9 it is let in."""
    chosen = {} if confidence is None else {"backfill_confidence": confidence}
    loop = Loop(config=settings(reserve_after_seconds=10.0, **chosen))
    learn(loop, 3, 30.0)
    loop.submit("learn-3-long", 3, node="b0-r0-n0", runs=5400.0)
    loop.run_until(loop.clock.monotonic() + 5400.0)
    _reserve_rack_r1(loop)

    three = loop.submit("three-gpus", 3)
    loop.settle()

    assert loop.bound().get(three, "").startswith("b0-r1-") is backfills
    if not backfills:
        assert "is reserved for gang pfn:ml/big" in loop.told.pending[three]


def test_the_early_end_is_a_quantile_of_the_time_left_at_the_pod_s_age() -> None:
    survival = Survival.estimate(np.arange(1.0, 101.0), np.zeros(0))  # ran 1, 2, ..., 100 s

    early = survival.remaining_within(np.array([0.0, 50.0, 200.0]), 0.1)

    # A tenth of new pods end within 10 s; a tenth of those 50 s old within 5 s more; past what was seen,
    # a tenth of its age.
    assert early.tolist() == pytest.approx([10.0, 5.0, 20.0])


def test_only_pods_started_since_the_oldest_runtime_kept_count_as_still_running() -> None:
    """The runtimes kept are those of the last pods to end; a pod running since before the first of them
    started is of the runs that the forgotten runtimes saw end, and would make survival look longer."""
    runtimes = Runtimes(history=MIN_RUNTIMES)
    kind = runtimes.kind("ml", 0, object())
    for i in range(MIN_RUNTIMES):
        runtimes.ended(kind, 1000.0 + i, 10.0)

    # At t=2000: a pod running since t=0 (age 2000), one since t=1500 (age 500).
    survival = runtimes.estimate(np.array([kind, kind]), np.array([2000.0, 500.0]), now=2000.0).own[kind]

    assert survival.longest_seen == 500.0
    assert survival.remaining(np.array([0.0])).tolist() == pytest.approx([(20 * 10 + 1 * 1000) / 21])
