"""The queue orders gangs, backs failures off with jitter, and wakes them only for events that can help."""

import random

from scheduler.clock import ManualClock
from scheduler.decision import Wake
from scheduler.queue import GangQueue
from scheduler.settings import QueueSettings
from topology import PodShape


def queue(clock: ManualClock) -> GangQueue:
    return GangQueue(QueueSettings(initial_backoff_seconds=1, max_backoff_seconds=60), clock, random.Random(5))


def drain(gangs: GangQueue) -> list[str]:
    found = []
    while (key := gangs.pop()) is not None:
        found.append(key)
    return found


def test_higher_priority_first_then_older_first() -> None:
    gangs = queue(ManualClock())
    gangs.add("young-low", priority=0, created=20)
    gangs.add("old-low", priority=0, created=10)
    gangs.add("young-high", priority=100, created=30)
    assert drain(gangs) == ["young-high", "old-low", "young-low"]


def test_failures_back_off_exponentially_with_jitter_up_to_the_maximum() -> None:
    clock = ManualClock()
    gangs = queue(clock)
    gangs.add("g", 0, 0)
    delays = []
    for _ in range(10):
        assert gangs.pop() == "g"
        delays.append(gangs.failed("g", Wake()))
        assert gangs.pop() is None  # not ready during its backoff
        clock.advance(delays[-1])
    for attempt, delay in enumerate(delays[:6]):
        assert 0.75 * 2**attempt <= delay <= min(1.25 * 2**attempt, 60)
    assert all(delay <= 60 for delay in delays) and delays[-1] >= 45


def test_node_changes_wake_gangs_that_wait_on_nodes_only() -> None:
    gangs = queue(ManualClock())
    for key, wake in (("nodes", Wake(nodes=True)), ("room-only", Wake(nodes=False, shapes=frozenset({PodShape.of()})))):
        gangs.add(key, 0, 0)
        gangs.pop()
        gangs.failed(key, wake)
    assert gangs.wake_nodes() == 1
    assert drain(gangs) == ["nodes"]


def test_freed_capacity_asks_once_per_shape_not_once_per_gang() -> None:
    gangs = queue(ManualClock())
    shapes = [PodShape.of({"nvidia.com/gpu": gpus}) for gpus in (1, 2, 4, 8)]
    for i in range(10_000):
        key = f"g{i}"
        gangs.add(key, 0, float(i))
        gangs.pop()
        gangs.failed(key, Wake(nodes=False, shapes=frozenset({shapes[i % 4]})))
    asked: list[PodShape] = []

    def room(shape: PodShape) -> int:
        asked.append(shape)
        return 25 if shape == shapes[0] else 0

    assert gangs.wake_capacity(room) == 25  # the room for 25 one-GPU pods wakes 25 of the 2,500 waiting
    assert len(asked) == 4
    assert gangs.depth() == {"active": 25, "backoff": 9975, "in_flight": 0}
    assert drain(gangs) == [f"g{4 * i}" for i in range(25)]  # the oldest first


def test_freed_room_wakes_the_first_gang_it_cannot_hold_alone_and_the_small_ones_behind_it() -> None:
    gangs = queue(ManualClock())
    gpu = PodShape.of({"nvidia.com/gpu": 8})
    for key, pods in (("big", 32), ("also-big", 16), ("small-1", 1), ("small-2", 1), ("small-3", 1)):
        gangs.add(key, 0, float(len(gangs)))
        gangs.pop()
        gangs.failed(key, Wake(nodes=False, shapes=frozenset({gpu}), pods=pods))
    assert gangs.wake_capacity(lambda shape: 2) == 3
    assert drain(gangs) == ["big", "small-1", "small-2"]


def test_freed_room_wakes_higher_priorities_first_and_a_gang_of_two_shapes_once() -> None:
    gangs = queue(ManualClock())
    one, two = PodShape.of({"nvidia.com/gpu": 1}), PodShape.of({"nvidia.com/gpu": 2})
    waiting = (("old-low", 0, {one}), ("both", 5, {one, two}), ("new-high", 9, {one}), ("two-only", 0, {two}))
    for key, priority, shapes in waiting:
        gangs.add(key, priority, float(len(gangs)))
        gangs.pop()
        gangs.failed(key, Wake(nodes=False, shapes=frozenset(shapes), pods=1))
    gangs.add("old-low", 3, 0.0)  # its priority changed: indexed again under the new one when it fails
    gangs.pop()
    gangs.failed("old-low", Wake(nodes=False, shapes=frozenset({one}), pods=1))

    # Room for three 1-GPU pods and one 2-GPU pod, for gangs above priority 2: "both" is woken once, and
    # "two-only" (priority 0) not at all.
    assert gangs.wake_capacity(lambda shape: 3 if shape == one else 1, above=2) == 3
    assert drain(gangs) == ["new-high", "both", "old-low"]
    assert gangs.depth() == {"active": 0, "backoff": 1, "in_flight": 3}


def test_a_gang_may_fail_forever_without_the_backoff_overflowing() -> None:
    clock = ManualClock()
    gangs = queue(clock)
    gangs.add("g", 0, 0)
    for _ in range(5000):
        gangs.pop()
        delay = gangs.failed("g", Wake())
        clock.advance(delay)
    assert delay <= 60


def test_a_changed_gang_is_ready_at_once_and_removed_gangs_are_gone() -> None:
    clock = ManualClock()
    gangs = queue(clock)
    gangs.add("g", 0, 0)
    gangs.pop()
    gangs.failed("g", Wake())
    gangs.add("g", 0, 0)  # e.g. a member was added: try again now
    assert gangs.pop() == "g"
    gangs.remove("g")
    clock.advance(120)
    assert gangs.pop() is None and len(gangs) == 0
    assert gangs.next_ready() is None
