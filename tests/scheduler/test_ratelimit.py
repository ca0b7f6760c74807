"""The write limiters: a burst at once, then the rate, each waiting write served in turn after one sleep; and
at most so many writes in flight, a gang's batch taking its slots together."""

from __future__ import annotations

import anyio
import pytest

from scheduler.clock import ManualClock
from scheduler.ratelimit import Slots, TokenBucket


class Sleeps:
    """Sleeps on the simulated clock: each is recorded, and the clock is moved to its end."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.clock.advance(seconds)


async def test_a_burst_goes_at_once_and_the_rest_at_the_rate_in_turn() -> None:
    clock = ManualClock()
    sleeps = Sleeps(clock)
    bucket = TokenBucket(rate=10.0, burst=3, clock=clock, sleep=sleeps)
    for _ in range(3):
        await bucket.take()
    assert sleeps.asked == []
    waits = []
    for _ in range(4):  # one after another, each finding the clock where the last sleep left it
        await bucket.take()
        waits.append(round(clock.monotonic(), 6))
    assert waits == [0.1, 0.2, 0.3, 0.4]


async def test_many_waiting_writes_sleep_once_each_in_the_order_they_asked() -> None:
    clock = ManualClock()
    asked: list[float] = []
    bucket = TokenBucket(rate=100.0, burst=1, clock=clock, sleep=lambda s: _record(asked, s))
    await bucket.take()
    async with anyio.create_task_group() as group:
        for _ in range(50):
            group.start_soon(bucket.take)
    assert asked == pytest.approx([0.01 * (i + 1) for i in range(50)])


async def _record(asked: list[float], seconds: float) -> None:
    asked.append(seconds)


async def test_a_write_cancelled_while_it_waits_gives_its_token_back() -> None:
    clock = ManualClock()
    sleeps = Sleeps(clock)
    bucket = TokenBucket(rate=1.0, burst=1, clock=clock, sleep=_forever)
    await bucket.take()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await bucket.take()
    bucket._sleep = sleeps
    await bucket.take()  # the token the cancelled write reserved is the next write's, due in a second
    assert sleeps.asked == [pytest.approx(1.0)]


async def _forever(seconds: float) -> None:
    await anyio.Event().wait()


async def test_a_batch_takes_its_tokens_together_and_waits_once_for_those_not_there_yet() -> None:
    clock = ManualClock()
    sleeps = Sleeps(clock)
    bucket = TokenBucket(rate=10.0, burst=5, clock=clock, sleep=sleeps)
    await bucket.take(3)
    assert sleeps.asked == []
    await bucket.take(4)  # two left: two more are due in 0.2 s
    assert sleeps.asked == [pytest.approx(0.2)]
    await bucket.take()  # the batch took every token there was
    assert sleeps.asked[1:] == [pytest.approx(0.1)]


async def test_batches_take_their_slots_together_in_the_order_they_asked() -> None:
    """Two batches of three with five slots: the second waits for the first whole, never holding part of the
    slots while the first holds the rest (each waiting on the other for ever). A single write behind it waits
    its turn too, and a batch larger than all slots takes them all."""
    slots = Slots(5)
    order: list[str] = []
    first_done = anyio.Event()

    async def batch(name: str, count: int, until: anyio.Event | None = None) -> None:
        async with slots.taken(count):
            order.append(f"{name} in ({slots.free} free)")
            if until is not None:
                await until.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(batch, "first", 3, first_done)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(batch, "second", 3)
        group.start_soon(batch, "single", 1)
        await anyio.wait_all_tasks_blocked()
        assert order == ["first in (2 free)"]  # the single write fits, but waits behind the batch before it
        first_done.set()
    assert order == ["first in (2 free)", "second in (1 free)", "single in (4 free)"]  # let in with the second
    async with slots.taken(50):
        assert slots.free == 0
    assert slots.free == 5


async def test_a_batch_cancelled_while_it_waits_lets_the_ones_behind_it_go() -> None:
    slots = Slots(2)
    went: list[str] = []
    release = anyio.Event()

    async def take(name: str, count: int, until: anyio.Event | None = None) -> None:
        async with slots.taken(count):
            went.append(name)
            if until is not None:
                await until.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(take, "holding", 1, release)
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as batch:
            batch.start_soon(take, "batch", 2)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(take, "single", 1)  # behind the batch, though a slot is free
            await anyio.wait_all_tasks_blocked()
            assert went == ["holding"]
            batch.cancel_scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert went == ["holding", "single"] and slots.free == 1
        release.set()
    assert slots.free == 2
