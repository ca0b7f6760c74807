"""The quality benchmark's parts: every baseline is a fair, all-or-nothing placer; the exact optimum is
exact; the replay measures waits as a stopwatch would."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from scripts.quality.baselines import algorithms
from scripts.quality.optimum import optimum
from scripts.quality.replay import Job, Replay, read_trace, stats, window
from scripts.quality.saturation import run_stream, stranded_gpus
from scripts.quality.workloads import (
    GPU,
    ClusterSize,
    Gang,
    Instance,
    cluster,
    elastic_instance,
    saturation_stream,
    small_instance,
)
from topology import Placement

SMALL = ClusterSize(2, 4, 8)


@pytest.mark.parametrize("name", list(algorithms()))
def test_every_algorithm_places_whole_gangs_within_capacity_and_inside_required_domains(name: str) -> None:
    snapshot = cluster(SMALL)
    gangs = saturation_stream(SMALL, seed=3, demand=1.2)
    placer = algorithms(3)[name]
    placed = 0
    for gang in gangs:
        request = gang.request()
        outcome = placer(snapshot, request)
        if not isinstance(outcome, Placement):
            continue
        assert len(outcome.assignments) == gang.pods and not outcome.unplaced
        if request.required:
            values = {snapshot.node(a.node).labels[request.required] for a in outcome.assignments}  # type: ignore[union-attr]
            assert len(values) == 1, f"{gang.key} spread over {values}"
        snapshot.assume_placement(outcome)
        assert (snapshot.free >= 0).all(), f"{name} over-committed a node with {gang.key}"
        placed += 1
    assert placed > len(gangs) // 3


def test_the_optimum_is_exact_and_no_algorithm_beats_it() -> None:
    # Two racks of two 8-GPU nodes; one node of each rack holds 6 GPUs of other pods. A 16-GPU gang that
    # must share a rack cannot fit; the 8-GPU one and the two 2-GPU ones can: the optimum is 12.
    size = ClusterSize(1, 2, 2)
    gangs = [Gang("g/big", 16, "required-rack"), Gang("g/eight", 8, "none"), Gang("g/a", 2, "none")]
    gangs.append(Gang("g/b", 2, "required-rack"))
    instance = Instance(size, gangs, [("b00-r0-n00", 6), ("b00-r1-n00", 6)])
    best = optimum(instance.snapshot(), instance.gangs)
    assert (best.gpus, best.proven) == (12, True)
    for seed in range(3):
        other = small_instance(seed)
        bound = optimum(other.snapshot(), other.gangs).gpus
        for placer in algorithms(seed).values():
            assert run_stream(other.snapshot(), other.gangs, placer, close_sizes=False).placed_gpus <= bound


def test_the_elastic_optimum_counts_extras_and_phalanx_grows_where_it_can() -> None:
    # One rack of four free nodes and one of two: an elastic gang of 2 to 4 whole-node pods in one rack.
    size = ClusterSize(1, 2, 4)
    gang = Gang("g/elastic", 32, "required-rack", min_pods=2)
    instance = Instance(size, [gang], [("b00-r1-n00", 8), ("b00-r1-n01", 8)])
    best = optimum(instance.snapshot(), instance.gangs)
    assert (best.gpus, best.extras, best.proven) == (32, 2, True)
    result = run_stream(instance.snapshot(), instance.gangs, algorithms(0)["phalanx"], close_sizes=False)
    assert (result.placed_gpus, result.extras) == (32, 2)  # the roomy rack, not the tighter one
    for seed in range(2):
        other = elastic_instance(seed)
        bound = optimum(other.snapshot(), other.gangs).gpus
        for placer in algorithms(seed).values():
            assert run_stream(other.snapshot(), other.gangs, placer, close_sizes=False).placed_gpus <= bound


def test_stranded_gpus_are_free_gpus_no_waiting_pod_can_use() -> None:
    snapshot = cluster(ClusterSize(1, 1, 2))
    snapshot.assume("x/a", "b00-r0-n00", {GPU: 5, "pods": 1})
    assert stranded_gpus(snapshot, [Gang("w/eight", 8, "none")]) == 3  # 3 free GPUs on a node an 8-GPU pod can't use
    assert stranded_gpus(snapshot, [Gang("w/two", 2, "none")]) == 0


def test_the_replay_measures_queueing_delay_on_the_simulated_clock() -> None:
    size = ClusterSize(1, 1, 4)
    jobs = [
        Job("j0", arrival=0.0, duration=100.0, gpus=32),  # the whole rack for 100 s
        Job("j1", arrival=10.0, duration=50.0, gpus=8),  # waits for j0: 90 s
        Job("j2", arrival=20.0, duration=5.0, gpus=1),  # waits too, starts at 100
    ]
    result = Replay(size, algorithms()["phalanx"]).run(jobs)
    assert result.waits == {"j0": 0.0, "j1": pytest.approx(90.0), "j2": pytest.approx(80.0)}
    figures = stats(result)
    assert figures["p95_wait_32plus_s"] == 0.0 and figures["waited_10x_runtime"] == 1  # j2: 80 s for 5 s of work
    assert figures["utilisation"] > 0.9  # the rack was busy from j0's start to the last arrival


def test_a_window_is_compressed_to_the_offered_load(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    start = datetime(2017, 10, 1)
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for step in range(96):  # every 30 minutes for two days; every other job asks for 32 GPUs
        submitted = (start + timedelta(minutes=30 * step)).strftime("%Y-%m-%d %H:%M:%S")
        rows.append(f"{submitted},3600.0,{32 if step % 2 else 2},0,x")
    trace.write_text("\n".join(rows) + "\n")
    jobs = window(read_trace(trace), seed=0, days=0.5, load=0.5, gpus=64, hours=10)
    asked = sum(job.gpus * job.duration for job in jobs)
    arrivals = np.array([job.arrival for job in jobs])
    assert (np.diff(arrivals) >= 0).all() and arrivals[-1] < 10 * 3600
    assert asked / (64 * 10 * 3600) == pytest.approx(0.5, rel=0.2)


def test_the_replay_can_give_pods_deadlines_and_phalanx_its_reservations() -> None:
    """A 32-GPU job that needs the whole rack arrives behind a 15-minute 1-GPU job, in a stream of
    100-second 1-GPU jobs. Greedy, it waits until the stream ends: some GPU is always busy. With a
    reservation (after five minutes) it waits for what ran when it reserved; the stream waits meanwhile,
    unless its pods set deadlines that end before the big job could start (backfill)."""
    size = ClusterSize(1, 1, 4)
    jobs = [Job("first", arrival=0.0, duration=900.0, gpus=1), Job("big", arrival=1.0, duration=60.0, gpus=32)]
    jobs += [Job(f"s{i:03d}", arrival=2.0 + 20 * i, duration=100.0, gpus=1) for i in range(300)]

    def waits(**flags: bool) -> tuple[float, float]:
        result = Replay(size, algorithms()["phalanx"], **flags).run(jobs)
        stream = [wait for key, wait in result.waits.items() if key.startswith("s")]
        return result.waits["big"], float(np.mean(stream))

    greedy = waits()
    reserved = waits(starvation=True)
    backfilled = waits(starvation=True, deadlines=True)
    assert greedy[0] > 5000  # the stream ends after 6,000 s
    assert reserved[0] <= 300 + 900 + 20 and backfilled[0] <= 900 + 20  # the last pod there ends at 900
    assert backfilled[1] < reserved[1] / 2  # short jobs kept running beside the reservation
