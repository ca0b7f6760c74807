"""The write limiter: a burst at once, then the rate, each waiting write served in turn after one sleep."""

from __future__ import annotations

import anyio
import pytest

from scheduler.clock import ManualClock
from scheduler.ratelimit import TokenBucket


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
